#!/usr/bin/env python3
"""Draws reserved and used memory over time from a sova allocation log.

    tools/plot_log.py LOG.csv[.gz] [-o OUT.png] [--title TEXT] [--no-png]

LOG is what SOVA_LOG=<file> or sovaLogStart(path) writes (docs/c-api.md, "The
allocation log"): RMM's logging_resource_adaptor CSV

    Thread,Time,Action,Pointer,Size,Stream,Reserved

Used memory is computed from the rows: the sum of the sizes of the blocks
allocated and not yet freed (a free of a pointer never allocated in the log
is counted and ignored). Reserved memory is the Reserved column: the physical
memory all of sova's pools held, sampled every 10 ms, so a row's sample may
predate the growth that backs its own block. Reserved memory is never less
than used (live blocks are backed), so the reserved line (and the summary's
peak) is at each row the larger of the sample and used: it can never read
below used; the samples as written are kept (read_log's reserved_sampled).
An RMM log (no Reserved column) gives used memory only.
Time is the Time column (local time of day, microseconds; a run across
midnight is handled), drawn in seconds from the first row.

Prints one summary line (rows, peak used, peak reserved, their ratio) and
writes OUT (default: LOG's name with .png) unless --no-png; the PNG needs
matplotlib (exit status 3, saying so, without it).
"""
import argparse
import csv
import gzip
import io
import os
import sys

MiB = 1024.0 * 1024.0


class LogError(Exception):
    pass


def _seconds_of_day(text, where):
    try:
        hms, _, frac = text.partition(".")
        h, m, s = (int(x) for x in hms.split(":"))
        return h * 3600 + m * 60 + s + (int(frac) / 10 ** len(frac) if frac else 0.0)
    except ValueError:
        raise LogError("%s: Time %r is not HH:MM:SS.ffffff" % (where, text)) from None


def read_log(stream, name="log"):
    """Series of a log: dict with lists t (s from the first row), used, reserved
    (at least used at each row) and reserved_sampled (the column as written;
    both None where the log has no Reserved column), and counts."""
    reader = csv.reader(stream)
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise LogError("%s: empty file" % name) from None
    col = {h: i for i, h in enumerate(header)}
    for needed in ("Time", "Action", "Pointer", "Size"):
        if needed not in col:
            raise LogError("%s:1: no %s column (want Thread,Time,Action,Pointer,Size,Stream[,Reserved])"
                           % (name, needed))
    has_reserved = "Reserved" in col
    out = {"t": [], "used": [], "reserved": [] if has_reserved else None,
           "reserved_sampled": [] if has_reserved else None, "allocations": 0, "frees": 0, "failures": 0, "unknown_frees": 0}
    live = {}
    used = 0
    start = None
    day = 0.0
    previous = None
    for line_no, row in enumerate(reader, start=2):
        if not row:
            continue
        where = "%s:%d" % (name, line_no)
        if len(row) < len(header):
            raise LogError("%s: %d fields, the header has %d" % (where, len(row), len(header)))
        t = _seconds_of_day(row[col["Time"]].strip(), where)
        if previous is not None and t + day < previous - 12 * 3600:
            day += 24 * 3600  # past midnight
        t += day
        previous = t
        if start is None:
            start = t
        action = row[col["Action"]].strip()
        ptr = row[col["Pointer"]].strip()
        try:
            size = int(row[col["Size"]])
        except ValueError:
            raise LogError("%s: Size %r is not a number" % (where, row[col["Size"]])) from None
        if action == "allocate":
            out["allocations"] += 1
            if ptr not in ("(nil)", "0", "") and size > 0:
                live[ptr] = size
                used += size
        elif action in ("free", "deallocate"):
            if ptr in live:
                used -= live.pop(ptr)
                out["frees"] += 1
            elif ptr not in ("(nil)", "0", ""):
                out["unknown_frees"] += 1
        elif action == "allocate failure":
            out["failures"] += 1
        else:
            raise LogError("%s: unknown Action %r" % (where, action))
        out["t"].append(t - start)
        out["used"].append(used)
        if has_reserved:
            try:
                sampled = int(row[col["Reserved"]])
            except ValueError:
                raise LogError("%s: Reserved %r is not a number" % (where, row[col["Reserved"]])) from None
            out["reserved_sampled"].append(sampled)
            out["reserved"].append(max(sampled, used))  # a sample older than this row's growth
    return out


def open_log(path):
    if path.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), newline="")
    return open(path, newline="")


def summary(series):
    peak_used = max(series["used"], default=0)
    text = "%d rows: %d allocations, %d frees, %d failed allocations, %d frees of unknown pointers; " \
           "peak used %.1f MiB" % (len(series["t"]), series["allocations"], series["frees"],
                                  series["failures"], series["unknown_frees"], peak_used / MiB)
    if series["reserved"] is not None:
        peak_reserved = max(series["reserved"], default=0)
        text += ", peak reserved %.1f MiB" % (peak_reserved / MiB)
        if peak_used:
            text += " (%.3fx peak used)" % (peak_reserved / peak_used)
    return text


def used_label(series):
    """The used line's legend entry, naming reserved where the two are equal at every row."""
    return "used (= reserved at every row)" if series["used"] == series["reserved"] else "used"


def plot(series, out, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_log.py: matplotlib is not installed (pip install matplotlib): no PNG written",
              file=sys.stderr)
        return 3
    fig, ax = plt.subplots(figsize=(10, 4.5))
    # Used equal to reserved drew one line exactly over the other, and a
    # reader must see both: reserved is wide and solid beneath, used thinner
    # and dashed above it, and its label says when the two are equal.
    if series["reserved"] is not None:
        ax.step(series["t"], [r / MiB for r in series["reserved"]], where="post", label="reserved (sampled, at least used)",
                linewidth=2.6, zorder=2)
    ax.step(series["t"], [u / MiB for u in series["used"]], where="post", label=used_label(series),
            linestyle="--", linewidth=1.2, zorder=3)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("MiB")
    ax.set_title(title, pad=24)
    ax.grid(True, alpha=0.3)
    # Above the axes, between title and data: a legend inside the axes covered
    # the lines wherever "best" found no empty corner.
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=2, frameon=False, fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    print("wrote " + out)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log")
    ap.add_argument("-o", "--out", help="the PNG (default: LOG with .png)")
    ap.add_argument("--title", help="the plot's title (default: the log's file name)")
    ap.add_argument("--no-png", action="store_true", help="print the summary only")
    args = ap.parse_args(argv)
    try:
        with open_log(args.log) as f:
            series = read_log(f, args.log)
    except (OSError, LogError) as e:
        print("plot_log.py: %s" % e, file=sys.stderr)
        return 2
    print(summary(series))
    if args.no_png:
        return 0
    base = args.log[:-3] if args.log.endswith(".gz") else args.log
    out = args.out or os.path.splitext(base)[0] + ".png"
    return plot(series, out, args.title or os.path.basename(args.log))


if __name__ == "__main__":
    sys.exit(main())
