#!/usr/bin/env python3
"""Converts a PyTorch CUDA memory snapshot into an RMM replay log (.csv.gz).

    tools/traces/snapshot_to_csv.py SNAPSHOT.pickle OUT.csv.gz [--device N]
                                    [--free-event free_completed|free_requested]

SNAPSHOT.pickle is what torch.cuda.memory._dump_snapshot() writes (a pickled
torch.cuda.memory._snapshot() dict); record_training.py calls convert() on
the dict directly. Reading the pickle needs no torch: it holds plain Python
values. OUT is the log format of RMM's logging_resource_adaptor, which
sova_bench's replay/ cases (bench/replay/trace.hpp) and RMM's
REPLAY_BENCHMARK read:

    Thread,Time,Action,Pointer,Size,Stream

gzip-compressed (deterministic: no name or time in the gzip header).

What the snapshot's device trace (snapshot["device_traces"][device], in the
order the allocator recorded it) becomes:

  alloc           -> allocate, Size = the size the program asked for (PyTorch
                     records the request, not its rounded block size)
  free_completed  -> free (the default, --free-event free_completed)
  free_requested  -> left out (counted)
  anything else   -> left out (counted by action): segment_alloc/free and
                     segment_map/unmap are the allocator's own dealings with
                     the driver, snapshot/oom/annotate are markers, and none
                     is a call another allocator would receive.

Why free_completed: it is when PyTorch's allocator could reuse the block.
free_requested is when the program dropped the tensor; the two coincide
unless the block was used on other streams (record_stream), and then the
completed free waits for that work. The replay has no kernels, so a free at
the requested time would let the replayed allocator reuse memory that the
recorded program's other streams were still using. The completed time never
frees earlier than was safe in the recorded run, and every block whose free
completed had its free requested before, so the trace stays well paired.
--free-event free_requested gives the other choice (the program's intent;
then free_completed is left out instead).

Blocks allocated before recording began (or whose alloc entries fell out of
the ring buffer, max_entries) have frees but no allocation in the trace:
those frees are dropped, and counted (dropped_frees). An alloc at an address
that is still live (it cannot happen with a consistent trace) first gets a
free of the earlier block, counted (duplicate_allocations). Blocks still
live at the end stay live in the CSV (live_at_end); the replay frees them
after its last row.

Columns: Thread is 0 on every row (the snapshot does not record the host
thread). Time is the entry's time_us as RMM writes its timestamps, the UTC
time of day HH:MM:SS.ffffff (0 when the entry has none). Pointer is hex
(0x...), Size decimal bytes, Stream the entry's stream handle as RMM prints a
stream, 0 for the legacy default stream and 0x-hex for any other.

Prints one line of counts; exits 1 when the snapshot has no device trace with
allocations (e.g. recording was not enabled).
"""
import argparse
import gzip
import json
import pickle
import sys
import time

HEADER = "Thread,Time,Action,Pointer,Size,Stream\n"
U64 = (1 << 64) - 1  # PyTorch gives handles and addresses as int64: print them unsigned
FREE_EVENTS = ("free_completed", "free_requested")


def format_time(time_us):
    """RMM's timestamp (%H:%M:%S.%f): the UTC time of day, in microseconds."""
    seconds, micros = divmod(int(time_us or 0), 1_000_000)
    return time.strftime("%H:%M:%S", time.gmtime(seconds)) + ".%06d" % micros


def format_stream(stream):
    """As RMM prints a stream handle: 0, else 0x-prefixed hex."""
    stream = int(stream or 0) & U64
    return "0" if stream == 0 else "0x%x" % stream


def pick_device(snapshot, device=None):
    """The device trace to convert: `device`, or else the one with the most
    alloc entries. Returns (device, entries)."""
    traces = snapshot.get("device_traces") or []
    if device is not None:
        if device < 0 or device >= len(traces):
            raise ValueError("device %d: the snapshot has %d device traces" % (device, len(traces)))
        return device, traces[device]
    if not traces:
        return 0, []
    counts = [sum(1 for e in t if e.get("action") == "alloc") for t in traces]
    best = max(range(len(traces)), key=lambda d: counts[d])
    return best, traces[best]


def to_rows(entries, free_event="free_completed"):
    """The CSV rows (Thread, Time, Action, Pointer, Size, Stream, as strings)
    of one device trace, and the counts of what was kept and left out."""
    if free_event not in FREE_EVENTS:
        raise ValueError("free_event must be one of %s" % (FREE_EVENTS,))
    stats = {
        "entries": 0, "allocations": 0, "frees": 0, "dropped_frees": 0, "duplicate_allocations": 0,
        "live_at_end": 0, "peak_live_bytes": 0, "streams": 0, "ignored": {},
    }
    rows = []
    live = {}  # address -> (size, stream)
    live_bytes = 0
    streams = set()
    for entry in entries:
        stats["entries"] += 1
        action = entry.get("action")
        addr = int(entry.get("addr", 0) or 0) & U64
        stream = int(entry.get("stream", 0) or 0) & U64
        when = format_time(entry.get("time_us"))
        if action == "alloc":
            size = int(entry["size"])
            if addr in live:
                old_size, old_stream = live.pop(addr)
                live_bytes -= old_size
                rows.append(("0", when, "free", "0x%x" % addr, str(old_size), format_stream(old_stream)))
                stats["duplicate_allocations"] += 1
            live[addr] = (size, stream)
            live_bytes += size
            stats["peak_live_bytes"] = max(stats["peak_live_bytes"], live_bytes)
            streams.add(stream)
            rows.append(("0", when, "allocate", "0x%x" % addr, str(size), format_stream(stream)))
            stats["allocations"] += 1
        elif action == free_event:
            if addr not in live:
                stats["dropped_frees"] += 1
                continue
            size, _ = live.pop(addr)
            live_bytes -= size
            streams.add(stream)
            rows.append(("0", when, "free", "0x%x" % addr, str(size), format_stream(stream)))
            stats["frees"] += 1
        else:
            stats["ignored"][action] = stats["ignored"].get(action, 0) + 1
    stats["live_at_end"] = len(live)
    stats["streams"] = len(streams)
    return rows, stats


def write_csv_gz(rows, path):
    """Writes the header and rows to `path`, gzip-compressed with no file name
    or time in its header, so that equal rows give equal bytes."""
    with open(path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as gz:
            gz.write(HEADER.encode())
            chunk = []
            for row in rows:
                chunk.append(",".join(row))
                if len(chunk) == 4096:
                    gz.write(("\n".join(chunk) + "\n").encode())
                    chunk = []
            if chunk:
                gz.write(("\n".join(chunk) + "\n").encode())


def convert(snapshot, out_path, device=None, free_event="free_completed"):
    """Converts a snapshot dict; writes `out_path`; returns the counts (plus
    'device' and 'rows'). Raises ValueError when no device trace has an alloc."""
    device, entries = pick_device(snapshot, device)
    rows, stats = to_rows(entries, free_event)
    if stats["allocations"] == 0:
        raise ValueError("no alloc entries in the snapshot's device trace %d (was "
                         "torch.cuda.memory._record_memory_history enabled?)" % device)
    write_csv_gz(rows, out_path)
    stats["device"] = device
    stats["rows"] = len(rows)
    return stats


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("snapshot", help="pickled torch.cuda.memory._snapshot() (_dump_snapshot)")
    parser.add_argument("out", help="the RMM replay log to write, gzip-compressed (.csv.gz)")
    parser.add_argument("--device", type=int, default=None,
                        help="device trace to convert (default: the one with the most allocations)")
    parser.add_argument("--free-event", choices=FREE_EVENTS, default="free_completed",
                        help="which snapshot action becomes the free (default free_completed; "
                             "this file's header says why)")
    args = parser.parse_args(argv)
    with open(args.snapshot, "rb") as f:
        snapshot = pickle.load(f)
    try:
        stats = convert(snapshot, args.out, args.device, args.free_event)
    except ValueError as e:
        sys.stderr.write("snapshot_to_csv: %s\n" % e)
        return 1
    print("snapshot_to_csv: %s: %s" % (args.out, json.dumps(stats, sort_keys=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
