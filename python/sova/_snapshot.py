"""sova.torch's history in the shape of torch.cuda.memory._snapshot(), so
that PyTorch's memory viewer (pytorch.org/memory_viz, or
torch.cuda._memory_viz) opens it as it opens the native allocator's.

Pure data conversion (no torch import): the adapter's event records and live
blocks in, a dict out. What differs from the native snapshot:
  * each live block is shown as its own segment (sova maps physical chunks
    under one VA range per pool, which PyTorch's segment model has no place
    for); is_expandable is True, as for expandable segments;
  * frames are empty: the adapter records no Python or C++ stacks;
  * only blocks allocated while recording are listed in "segments".
"""
from __future__ import annotations

ACTIONS = {0: "alloc", 1: "free_requested", 2: "free_completed", 3: "oom"}


def trace_entry(e) -> dict:
    entry = {"action": ACTIONS.get(e.action, "unknown"), "addr": int(e.addr), "size": int(e.size),
             "stream": int(e.stream), "time_us": int(e.timeUs), "frames": []}
    if e.action == 3:
        entry["device_free"] = 0
    return entry


def segment(e) -> dict:
    size = int(e.size)
    return {"device": int(e.device), "address": int(e.addr), "total_size": size,
            "allocated_size": size, "active_size": size, "requested_size": size,
            "stream": int(e.stream), "segment_type": "large" if size > (1 << 20) else "small",
            "segment_pool_id": (0, 0), "is_expandable": True, "frames": [],
            "blocks": [{"address": int(e.addr), "size": size, "requested_size": size,
                        "state": "active_allocated", "frames": []}]}


def build(events, live, device_count: int) -> dict:
    """events: recorded sovaTorchEvent records, oldest first; live: live blocks."""
    traces = [[] for _ in range(max(device_count, 1))]
    for e in events:
        if 0 <= e.device < len(traces):
            traces[e.device].append(trace_entry(e))
    segments = sorted((segment(e) for e in live), key=lambda s: (s["device"], s["address"]))
    return {"segments": segments, "device_traces": traces,
            "allocator_settings": {"allocator": "sova"}}
