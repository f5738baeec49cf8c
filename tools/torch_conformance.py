#!/usr/bin/env python3
"""PyTorch's test_cuda.py under sova: reads the per-test results that
tools/device/torch_test_conftest.py writes (one file per column,
results-<column>.txt: "START <test>", then "<OUTCOME> <test>"), prints the
table of outcomes per column and, for each sova column, the tests that pass
under PyTorch's allocator (column "pytorch") but not there, and checks those
against the exceptions docs/python.md lists in its section "PyTorch's test
suite under sova":

    - `TestClass.test_name` (native, pluggable): why

Exit status 0 when every sova column's list is exactly its documented one, 1
on a mismatch (each difference printed), 2 on bad input.

    tools/torch_conformance.py --table OUT --docs docs/python.md [--columns "pytorch async native pluggable"]
    tools/torch_conformance.py --crashed OUT/results-native.txt   # used by torch-test-cuda.sh
"""
import argparse
import os
import re
import sys

SOVA_COLUMNS = ("native", "pluggable")
GOOD = {"PASSED", "XFAILED"}  # an expected failure that failed is a pass
SECTION = "PyTorch's test suite under sova"
ENTRY = re.compile(r"^- `([A-Za-z_][\w.]*)` \(([a-z, ]+)\): (.+)$")


def read_results(path):
    """{test: outcome} (the last word on a test wins, but an ERROR or FAILED
    is never overwritten by a later PASSED: a teardown error after a pass),
    plus the test started and never reported, if any, as CRASHED."""
    outcomes, started, timed_out = {}, [], False
    with open(path) as f:
        for line in f:
            word, _, test = line.strip().partition(" ")
            if word == "START":
                started.append(test)
            elif word == "TIMEOUT":
                timed_out = True
            elif word in ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAILED", "XPASSED", "CRASHED"):
                if outcomes.get(test) in ("FAILED", "ERROR", "CRASHED") and word == "PASSED":
                    continue
                outcomes[test] = word
    unreported = [t for t in started if t not in outcomes]
    return outcomes, unreported, timed_out


def documented(docs_path):
    """{column: {test: reason}} from the docs' section."""
    out = {c: {} for c in SOVA_COLUMNS}
    inside, level = False, 0
    with open(docs_path) as f:
        for line in f:
            heading = re.match(r"^(#+) (.*)$", line)
            if heading:
                if heading.group(2).strip() == SECTION:
                    inside, level = True, len(heading.group(1))
                    continue
                if inside and len(heading.group(1)) <= level:
                    break
            if not inside:
                continue
            m = ENTRY.match(line.rstrip("\n"))
            if m:
                for column in (c.strip() for c in m.group(2).split(",")):
                    if column not in out:
                        raise SystemExit(f"torch_conformance: {docs_path}: unknown column {column!r} in: {line.strip()}")
                    out[column][m.group(1)] = m.group(3)
    if not inside:
        raise SystemExit(f"torch_conformance: {docs_path} has no section {SECTION!r}")
    return out


def crashed(path):
    """Appends nothing itself: prints CRASHED for the test a run left
    unreported (exit 0), or exits 1 when there is none (the run ended)."""
    _, unreported, _ = read_results(path)
    if not unreported:
        return 1
    for test in unreported:
        print(f"CRASHED {test}")
    return 0


def table(out_dir, docs_path, columns):
    results = {}
    for c in columns:
        path = os.path.join(out_dir, f"results-{c}.txt")
        results[c] = read_results(path) if os.path.exists(path) else ({}, [], True)
    kinds = ["PASSED", "FAILED", "ERROR", "CRASHED", "SKIPPED", "XFAILED", "XPASSED"]
    print("| column | " + " | ".join(k.lower() for k in kinds) + " | ran out of time |")
    print("| --- |" + " --- |" * (len(kinds) + 1))
    for c in columns:
        outcomes, _, timed_out = results[c]
        counts = [sum(1 for v in outcomes.values() if v == k) for k in kinds]
        print(f"| {c} | " + " | ".join(map(str, counts)) + f" | {'yes' if timed_out else 'no'} |")
    if "pytorch" not in results:
        print("torch_conformance: no pytorch column to compare with")
        return 2
    reference, _, ref_timeout = results["pytorch"]
    passing = {t for t, v in reference.items() if v in GOOD}
    docs = documented(docs_path)
    status = 1 if ref_timeout else 0
    if not passing:  # nothing ran (the file failed to import, say): no comparison to make
        print("pytorch: no test passed; see the column's pytest log in OUT")
        status = 1
    if ref_timeout:
        print("pytorch: ran out of time; the comparison covers what it ran")
    for c in columns:
        if c not in SOVA_COLUMNS:
            continue
        outcomes, _, timed_out = results[c]
        not_run = sorted(t for t in passing if t not in outcomes)
        differ = sorted(t for t in passing if t in outcomes and outcomes[t] not in GOOD)
        print(f"\n{c}: {len(differ)} pass under PyTorch's allocator and not here; {len(not_run)} not run")
        for t in differ:
            print(f"  {outcomes[t]:8} {t}" + ("" if t in docs[c] else "   <- not in docs/python.md"))
        stale = sorted(t for t in docs[c] if t in passing and t in outcomes and outcomes[t] in GOOD)
        for t in stale:
            print(f"  PASSED   {t}   <- listed in docs/python.md but passes")
        for t in not_run:
            print(f"  NOT RUN  {t}")
        if any(t not in docs[c] for t in differ) or stale or not_run or timed_out:
            status = 1
    print("\nmatch: the exceptions are docs/python.md's" if status == 0 else "\nMISMATCH (above)")
    return status


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", metavar="OUT")
    ap.add_argument("--docs", default="docs/python.md")
    ap.add_argument("--columns", default="pytorch async native pluggable")
    ap.add_argument("--crashed", metavar="RESULTS")
    a = ap.parse_args()
    if a.crashed:
        return crashed(a.crashed)
    if a.table:
        return table(a.table, a.docs, a.columns.split())
    ap.print_usage()
    return 2


if __name__ == "__main__":
    sys.exit(main())
