#!/usr/bin/env python3
"""DDP and FSDP2 training on every GPU of the host (torchrun, one process a
GPU) under PyTorch's native allocator, native with expandable segments, and
sova.torch in every rank, all in one call; prints one summary table.

    python3 bench/torch/multi_gpu_train.py --out DIR [--gpus N] [--rounds 2]
        [--steps 60] [--modes ddp,fsdp] [--allocators native,sova,sova_nochecks,expandable]
        [--budget-s 330]

Each (mode, allocator) run is its own torchrun launch; runs go round after
round in the order given (A/B/A/B...), so drift of the host or the GPUs'
clocks falls on every allocator alike. A round is started only while the
time spent stays under --budget-s. Per run and rank, the worker writes a
JSON: losses and final weights as SHA-256 of their bytes (bitwise
comparison with native's in the same call), milliseconds per step (wall
time of the steps after the warm-up, the devices synchronized at both ends),
peak reserved memory, allocation counts per step, and the host time of a
torch.empty + free pair after the training (the allocator's per-call cost
through PyTorch, the adapter's included).

Allocators:
  native         PyTorch's caching allocator
  expandable     the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  sova           sova.torch.enable() (the pluggable allocator, default options)
  sova_nochecks  sova.torch.enable(stream_checks=False): the pool's per-call
                 stream checks off, so the difference to `sova` is their cost (DDP only)
  sova_recstream sova with TORCH_NCCL_AVOID_RECORD_STREAMS=0: c10d then calls
                 recordStream on its NCCL stream for every collective's tensors,
                 through the allocator's hook to sova (recordStreamWaits > 0
                 proves it arrived); its time shows what those waits cost
                 (DDP, first round only)
Model: a GPT-style decoder (6 layers, d 512, 8 heads, vocab 8192), bf16
autocast, batch 8 per rank, sequence length drawn per step from 128..512
(multiples of 64, the same on every rank), each rank's tokens its own.
Deterministic: torch.use_deterministic_algorithms(True),
CUBLAS_WORKSPACE_CONFIG=:4096:8, same seeds: every allocator must give
native's losses and weights bitwise on every rank.
NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

ALLOCATORS = ("native", "expandable", "sova", "sova_nochecks", "sova_recstream")
MODES = ("ddp", "fsdp")
WARMUP = 10
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


# ---- worker: one rank of one (mode, allocator) run --------------------------
def worker(mode: str, allocator: str, steps: int, out_dir: str) -> None:
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    sova_torch = None
    if allocator.startswith("sova"):
        import sova.torch as sova_torch
        sova_torch.enable(**({"stream_checks": False} if allocator == "sova_nochecks" else {}))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    V, D, L, H, B = 8192, 512, 6, 8, 8

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
            self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, H, D // H).permute(2, 0, 3, 1, 4)
            # Attention spelled out (as train_compare.py): every kernel has a
            # deterministic backward, which SDPA's fused ones need not have.
            att = (q @ k.transpose(-1, -2)) * (D // H) ** -0.5
            mask = torch.ones(s, s, device=x.device, dtype=torch.bool).triu(1)
            att = att.masked_fill(mask, float("-inf")).softmax(-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, s, D))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.pos = nn.Embedding(V, D), nn.Embedding(512, D)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, V, bias=False)

        def forward(self, idx):
            x = self.emb(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    model = GPT().to(dev)  # same seed on every rank: same initial weights
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model, device_ids=[local])
    else:
        from torch.distributed.fsdp import fully_shard
        for blk in model.blocks:
            fully_shard(blk)
        fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)

    def one_hot_ce(logits, target):
        # Cross-entropy without nll_loss's scatter: deterministic by construction.
        return -(F.log_softmax(logits.float(), dim=-1) * F.one_hot(target, V).float()).sum(-1).mean()

    shape_gen = torch.Generator().manual_seed(1)          # same lengths on every rank
    data_gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own tokens
    batches = []
    for _ in range(steps):
        S = 64 * int(torch.randint(2, 9, (1,), generator=shape_gen))
        batches.append(torch.randint(0, V, (B, S + 1), generator=data_gen))

    def alloc_count():
        if sova_torch is not None:
            return sova_torch.raw_stats(local)["allocations"]
        return torch.cuda.memory_stats(dev).get("allocation.all.allocated", 0)

    losses = []
    torch.cuda.synchronize()
    dist.barrier()
    t0 = allocs0 = stats0 = None
    for step in range(steps):
        if step == WARMUP:
            torch.cuda.synchronize()
            dist.barrier()
            t0 = time.perf_counter()
            allocs0 = alloc_count()
            stats0 = sova_torch.raw_stats(local) if sova_torch is not None else None
        data = batches[step].to(dev, non_blocking=False)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(data[:, :-1])
        loss = one_hot_ce(logits, data[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    torch.cuda.synchronize()
    dist.barrier()
    elapsed = time.perf_counter() - t0
    timed = steps - WARMUP
    allocs_per_step = (alloc_count() - allocs0) / timed

    # The allocator's host cost per call as a tensor sees it: torch.empty and
    # its free, sizes cycling 4 KiB..4 MiB, after the training (warm caches).
    # Python and the dispatcher are in it alike for every allocator, so the
    # difference to native's is the allocator's path (the adapter's included).
    sizes = [4096 << (i % 11) for i in range(64)]
    for n in sizes:
        torch.empty(n, dtype=torch.uint8, device=dev)  # warm: one block of each size cached
    pair_t0 = time.perf_counter()
    for _ in range(50):
        for n in sizes:
            t = torch.empty(n, dtype=torch.uint8, device=dev)
            del t
    pair_us = (time.perf_counter() - pair_t0) * 1e6 / (50 * len(sizes))
    torch.cuda.synchronize()

    loss_bytes = torch.stack(losses).float().cpu().numpy().tobytes()
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        t = p.full_tensor() if hasattr(p, "full_tensor") else p
        h.update(name.encode())
        h.update(t.detach().float().cpu().numpy().tobytes())
    if sova_torch is not None:
        peak_reserved = sova_torch.max_memory_reserved(local)
        s1 = sova_torch.raw_stats(local)
        counters = {k: (s1[k] - stats0[k]) / timed for k in
                    ("allocations", "fastPathHits", "crossStreamReuses", "crossStreamWaits", "eventsRecorded",
                     "recordStreamWaits", "slowGrown", "deviceSynchronizes", "remapWaits")}
        counters["recordStreamWaits_total"] = s1["recordStreamWaits"]
    else:
        peak_reserved = torch.cuda.max_memory_reserved(dev)
        counters = {}
    result = {
        "mode": mode, "allocator": allocator, "rank": rank, "world": world, "steps": steps,
        "ms_per_step": 1000.0 * elapsed / timed,
        "peak_reserved": peak_reserved,
        "allocs_per_step": allocs_per_step,
        "alloc_free_us": pair_us,
        "losses_sha": hashlib.sha256(loss_bytes).hexdigest(),
        "weights_sha": h.hexdigest(),
        "final_loss": float(losses[-1]),
        "counters": counters,
        "avoid_record_streams": os.environ.get("TORCH_NCCL_AVOID_RECORD_STREAMS", "(unset)"),
    }
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


# ---- driver -----------------------------------------------------------------
def launch(mode: str, allocator: str, gpus: int, steps: int, run_dir: str, timeout: int) -> list | str:
    """One torchrun launch; the ranks' results, or the reason it failed."""
    os.makedirs(run_dir, exist_ok=True)
    env = dict(os.environ, **SAFE_ENV, CUBLAS_WORKSPACE_CONFIG=":4096:8", PYTHONUNBUFFERED="1")
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if allocator == "expandable":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    if allocator == "sova_recstream":
        env["TORCH_NCCL_AVOID_RECORD_STREAMS"] = "0"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}",
           os.path.abspath(__file__), "--worker", mode, allocator, str(steps), run_dir]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout} s"
    with open(os.path.join(run_dir, "log.txt"), "w") as f:
        f.write(p.stdout + p.stderr)
    if p.returncode != 0:
        return f"exit {p.returncode}: " + (p.stderr.strip().splitlines() or ["?"])[-1][-200:]
    ranks = []
    for r in range(gpus):
        with open(os.path.join(run_dir, f"rank{r}.json")) as f:
            ranks.append(json.load(f))
    return ranks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--gpus", type=int, default=0, help="ranks (default: every GPU)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--modes", default="ddp,fsdp")
    ap.add_argument("--allocators", default="native,sova,sova_nochecks,expandable,sova_recstream")
    ap.add_argument("--budget-s", type=float, default=330, help="start no round after this many seconds")
    ap.add_argument("--run-timeout", type=int, default=150)
    args = ap.parse_args()
    modes = args.modes.split(",")
    allocators = args.allocators.split(",")
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown mode {m!r} (choose from {', '.join(MODES)})")
    for a in allocators:
        if a not in ALLOCATORS:
            ap.error(f"unknown allocator {a!r} (choose from {', '.join(ALLOCATORS)})")
    if "native" not in allocators:
        ap.error("native must be among the allocators: every other is compared with it")
    if args.steps <= WARMUP + 5:
        ap.error(f"--steps must exceed {WARMUP + 5} (the first {WARMUP} are warm-up)")
    import torch
    gpus = args.gpus or torch.cuda.device_count()
    if gpus < 2 or gpus > torch.cuda.device_count():
        print(f"multi_gpu_train: needs 2 or more GPUs (asked {args.gpus or 'all'}, CUDA sees "
              f"{torch.cuda.device_count()})", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    print(f"torch {torch.__version__}, {gpus} GPUs ({torch.cuda.get_device_name(0)}), {args.steps} steps, "
          f"modes {modes}, allocators {allocators}", flush=True)

    results: dict = {}   # (mode, allocator) -> list of runs (each a list of ranks)
    failures: dict = {}
    t_start = time.monotonic()
    for rnd in range(args.rounds):
        if rnd > 0 and time.monotonic() - t_start > args.budget_s:
            print(f"round {rnd + 1}: not started, {time.monotonic() - t_start:.0f} s spent (--budget-s)")
            break
        for m in modes:
            for a in allocators:
                if a == "sova_recstream" and (m != "ddp" or rnd > 0):
                    continue  # DDP's collectives are where c10d records streams; once is enough
                if a == "sova_nochecks" and m != "ddp":
                    continue  # the overhead in question is DDP's
                t = time.monotonic()
                r = launch(m, a, gpus, args.steps, os.path.join(args.out, f"{m}_{a}_r{rnd}"), args.run_timeout)
                if isinstance(r, str):
                    failures[(m, a)] = r
                    print(f"  {m} {a} round {rnd + 1}: FAILED {r}", flush=True)
                    continue
                results.setdefault((m, a), []).append(r)
                print(f"  {m} {a} round {rnd + 1}: {statistics.mean(x['ms_per_step'] for x in r):.2f} ms/step "
                      f"({time.monotonic() - t:.0f} s)", flush=True)

    # One table: per (mode, allocator), over rounds, medians.
    status = 0
    print()
    print("| mode | allocator | runs | losses & weights == native (bitwise, every rank) | ms/step: median (each run) | "
          "vs native | peak reserved GiB per rank | vs native | allocs/step | empty+free us | sova counters per step |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    summary = []
    for m in modes:
        base = results.get((m, "native"))
        for a in allocators:
            runs = results.get((m, a))
            if runs is None:
                if (m, a) in failures:
                    print(f"| {m} | {a} | 0 | FAILED: {failures[(m, a)]} | | | | | | | |")
                    status = 1
                continue
            ms = statistics.median(statistics.mean(x["ms_per_step"] for x in run) for run in runs)
            peaks = [max(run[r]["peak_reserved"] for run in runs) for r in range(gpus)]
            allocs = statistics.median(statistics.mean(x["allocs_per_step"] for x in run) for run in runs)
            pair_us = statistics.median(statistics.mean(x["alloc_free_us"] for x in run) for run in runs)
            same = "-"
            ratio_ms = ratio_peak = float("nan")
            if base:
                ref = base[0]
                same_all = all(run[r]["losses_sha"] == ref[r]["losses_sha"] and
                               run[r]["weights_sha"] == ref[r]["weights_sha"]
                               for run in runs + base for r in range(gpus))
                same = "yes" if same_all else "NO"
                if not same_all:
                    status = 1
                base_ms = statistics.median(statistics.mean(x["ms_per_step"] for x in run) for run in base)
                base_peak = max(max(x["peak_reserved"] for x in run) for run in base)
                ratio_ms = ms / base_ms
                ratio_peak = max(peaks) / base_peak if base_peak else float("nan")
            c = runs[0][0]["counters"]
            counters = ", ".join(f"{k} {v:.1f}" for k, v in c.items() if k != "recordStreamWaits_total" and v)
            if c:
                counters += f"; recordStreamWaits total {c.get('recordStreamWaits_total', 0)}"
                counters += f" (AVOID_RECORD_STREAMS={runs[0][0]['avoid_record_streams']})"
            per_run = ", ".join(f"{statistics.mean(x['ms_per_step'] for x in run):.2f}" for run in runs)
            print(f"| {m} | {a} | {len(runs)} | {same} | {ms:.2f} ({per_run}) | {ratio_ms:.3f} | "
                  f"{' / '.join(f'{p / 2**30:.2f}' for p in peaks)} | {ratio_peak:.3f} | {allocs:.0f} | {pair_us:.2f} | "
                  f"{counters} |")
            summary.append({"mode": m, "allocator": a, "runs": len(runs), "bitwise_equal": same,
                            "ms_per_step": ms, "ms_vs_native": ratio_ms, "peak_reserved_per_rank": peaks,
                            "peak_vs_native": ratio_peak, "allocs_per_step": allocs, "alloc_free_us": pair_us, "counters": c,
                            "ms_per_run": [statistics.mean(x["ms_per_step"] for x in run) for run in runs]})
    rec = results.get(("ddp", "sova_recstream"))
    if rec:
        waits = [x["counters"].get("recordStreamWaits_total", 0) for x in rec[0]]
        ok = all(w > 0 for w in waits)
        print(f"\nrecord_stream from c10d reaches sova (TORCH_NCCL_AVOID_RECORD_STREAMS=0): "
              f"recordStreamWaits per rank {waits}: {'yes' if ok else 'NO'}")
        if not ok:
            status = 1
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"\n{time.monotonic() - t_start:.0f} s; per-run logs and rank JSONs in {args.out}")
    return status


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        sys.exit(main())
