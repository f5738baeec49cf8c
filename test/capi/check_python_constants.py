"""The Python package's copies of sova.h's constants, against the compiler's values.

Usage: check_python_constants.py DUMP_EXE SOVA_H PYTHON_DIR

DUMP_EXE (sova_h_constants_dump) prints `NAME VALUE` for sova.h's policies,
pool flags and sleep modes and for the cudaMemPoolAttr values the package
passes; SOVA_H is include/sova/sova.h; PYTHON_DIR is python/sova. The
package's modules are read, not imported (they load libsova): their
module-level constants are taken from the source. Fails, naming each, when
  * an enumerator of sovaPolicy, sovaMemPoolFlags or sovaSleepMode in sova.h
    is not printed by the dump (add it there);
  * POLICIES (_options.py) names another set of policies than sovaPolicy, or
    a value differs;
  * a copied constant below differs from its C value, or is gone;
  * a pool flag is neither copied nor listed in NOT_IN_PYTHON.
"""
import ast
import pathlib
import re
import sys

# POLICIES' keys (python/sova/_options.py) and the sovaPolicy each stands for.
POLICY_NAMES = {
    "default": "sovaPolicyDefault",
    "size_classes": "sovaPolicySizeClass",
    "buddy": "sovaPolicyBuddy",
    "best_fit": "sovaPolicyBestFit",
}
# (module, constant) -> the C name it copies.
COPIES = {
    ("_options.py", "FLAG_NO_STREAM_CHECKS"): "sovaMemPoolNoStreamChecks",
    ("_options.py", "FLAG_NO_REMAP"): "sovaMemPoolNoRemap",
    ("_options.py", "FLAG_THOROUGH_REMAP"): "sovaMemPoolThoroughRemap",
    ("_options.py", "FLAG_SLEEP_PIN_AHEAD"): "sovaMemPoolSleepPinAhead",
    ("pool.py", "_SLEEP_BACKUP"): "sovaSleepBackup",
    ("pool.py", "_SLEEP_DISCARD"): "sovaSleepDiscard",
    ("pool.py", "_SLEEP_DISCARD_ZEROED"): "sovaSleepDiscardZeroed",
    ("pool.py", "_ATTR_RELEASE_THRESHOLD"): "cudaMemPoolAttrReleaseThreshold",
    ("pool.py", "_ATTR_RESERVED_HIGH"): "cudaMemPoolAttrReservedMemHigh",
    ("pool.py", "_ATTR_USED_HIGH"): "cudaMemPoolAttrUsedMemHigh",
}
# Pool flags the Python options do not offer (docs/python.md).
NOT_IN_PYTHON = {"sovaMemPoolCompressible", "sovaMemPoolHostMemory"}
ENUMS = ("sovaPolicy", "sovaMemPoolFlags", "sovaSleepMode")


def c_values(dump_exe):
    import subprocess
    out = subprocess.run([dump_exe], check=True, capture_output=True, text=True).stdout
    return {name: int(value) for name, value in (line.split() for line in out.splitlines() if line)}


def enumerators(sova_h, enum):
    text = re.sub(r"/\*.*?\*/", " ", pathlib.Path(sova_h).read_text(), flags=re.S)
    m = re.search(r"typedef\s+enum\s+" + enum + r"\s*\{(.*?)\}", text, re.S)
    if not m:
        sys.exit(f"{sova_h}: typedef enum {enum} not found")
    return [e.split("=")[0].strip() for e in m.group(1).split(",") if e.strip()]


def module_constants(path):
    """Module-level NAME = literal assignments of a Python source file."""
    found = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                found[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return found


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    dump_exe, sova_h, py_dir = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
    c = c_values(dump_exe)
    errors = []
    for enum in ENUMS:
        for name in enumerators(sova_h, enum):
            if name not in c:
                errors.append(f"{enum}::{name} (sova.h) is not in sova_h_constants_dump.cpp's list")
    modules = {}
    for module in {"_options.py"} | {m for m, _ in COPIES}:
        modules[module] = module_constants(py_dir / module)

    policies = modules["_options.py"].get("POLICIES")
    if not isinstance(policies, dict):
        errors.append("_options.py: POLICIES is not a dict literal")
        policies = {}
    c_policies = set(enumerators(sova_h, "sovaPolicy"))
    for key, value in policies.items():
        cname = POLICY_NAMES.get(key)
        if cname is None or cname not in c_policies:
            errors.append(f"_options.py: POLICIES[{key!r}] stands for no sovaPolicy in sova.h")
        elif c.get(cname) != value:
            errors.append(f"_options.py: POLICIES[{key!r}] is {value}, {cname} is {c.get(cname)}")
    for cname in sorted(c_policies - {POLICY_NAMES.get(k) for k in policies}):
        errors.append(f"sova.h: {cname} = {c.get(cname)} has no key in _options.py's POLICIES")

    for (module, name), cname in COPIES.items():
        if name not in modules[module]:
            errors.append(f"{module}: {name} (a copy of {cname}) is gone")
        elif modules[module][name] != c[cname]:
            errors.append(f"{module}: {name} is {modules[module][name]!r}, {cname} is {c[cname]}")
    copied = set(COPIES.values())
    for cname in enumerators(sova_h, "sovaMemPoolFlags"):
        if cname not in copied and cname not in NOT_IN_PYTHON:
            errors.append(f"sova.h: {cname} is neither copied into the Python package nor listed in NOT_IN_PYTHON")

    for e in errors:
        print(e, file=sys.stderr)
    print(f"{len(c)} constants compared; {len(errors)} difference(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
