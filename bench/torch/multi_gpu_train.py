#!/usr/bin/env python3
"""DDP and FSDP2 training on every GPU of the host (torchrun, one process a
GPU) under PyTorch's native allocator, native with expandable segments, and
sova.torch in every rank, all in one call, as an A/B comparison of step time
that the host's and the GPUs' swings do not decide; prints summary tables.

    python3 bench/torch/multi_gpu_train.py --out DIR [--gpus N] [--rounds 6]
        [--steps 30] [--modes ddp,fsdp] [--budget-s 330]
        [--allocators native,sova,sova_nochecks,expandable,sova_recstream,native_again]

How it measures. Every (mode, allocator) pair is a group: one torchrun
launch, started once, all groups at the same time, and kept alive. The
driver then hands out work one group at a time (turn_taking.py; the others
wait idle, their GPU memory reserved but no kernel running; the GPUs' compute
mode must be Default): first a warm-up round, untimed,
then --rounds rounds in which every group in turn trains --steps steps; the
order of the groups is reversed every other round (A B C, C B A, ...), so
a drift within a round falls on every allocator alike. Every round trains
the same sequence of lengths (new tokens each step), so rounds are
comparable with each other. A step's time comes from CUDA events recorded
at each step's start on the training stream; a round's figure for a group
is the median over its steps (the mean over ranks of each rank's median).
Reported per group: the median of its round figures and their spread
(min-max), and the ratio to native computed per round (this round's figure
over native's of the same round), its median and spread. No round is started
that would not end, with the closing work, within --budget-s.

`native_again` is a second native group measured last in a round (first in
a reversed one): its ratio to native is an A/A comparison, the noise floor of
a difference between two processes of the same allocator: another
allocator's difference to native means something only where it exceeds that.

Per group and rank, after the rounds: losses of every step and the final
weights as SHA-256 of their bytes (bitwise comparison with native's),
peak reserved memory, allocations per step, the host time of a torch.empty +
free pair (the allocator's per-call cost through PyTorch, the adapter's
included), and for sova its counters per step and the whole run's
recordStream calls that reached sova (recordStreamCalls) and the stream waits
that recorded streams caused at free time (recordStreamWaits).

Allocators:
  native         PyTorch's caching allocator
  native_again   the same, a second group (the A/A comparison above)
  expandable     native with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  sova           sova.torch.enable(backend="pluggable") (default options)
  sova_nochecks  sova.torch.enable(stream_checks=False): the pool's per-call
                 stream checks off, so the difference to `sova` is their cost (DDP only)
  sova_recstream sova with TORCH_NCCL_AVOID_RECORD_STREAMS=0: c10d then records
                 its NCCL stream on collectives' tensors, through the
                 allocator's recordStream hook; the calls that reach sova are
                 counted (DDP only)
Model: bench/torch/gpt_model.py's GPT (6 layers, d 512, 8 heads, vocab 8192),
bf16 autocast, batch 8 per rank, sequence length drawn for each step of a
round from 128..512 (multiples of 64; the same on every rank and in every
round), each rank's tokens its own.
Deterministic: torch.use_deterministic_algorithms(True),
CUBLAS_WORKSPACE_CONFIG=:4096:8, same seeds: every allocator must give
native's losses and weights bitwise on every rank.
NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1).
Exit status: 0 when every group ran every round and matched native bitwise.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from turn_taking import Group, GroupFailed, serve

ALLOCATORS = ("native", "native_again", "expandable", "sova", "sova_nochecks", "sova_recstream")
DDP_ONLY = ("sova_nochecks", "sova_recstream")
MODES = ("ddp", "fsdp")
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# sova.torch.raw_stats keys reported per step (absent keys, from an older
# adapter, are left out).
SOVA_COUNTERS = ("allocations", "fastPathHits", "crossStreamReuses", "crossStreamWaits", "eventsRecorded",
                 "recordStreamCalls", "recordStreamWaits", "slowGrown", "deviceSynchronizes", "remapWaits")


# ---- worker: one rank of one group ------------------------------------------
class Trainer:
    """The model, data and optimizer of one rank, trained a given number of
    steps at a time. Every round replays the same sequence of lengths."""

    def __init__(self, mode: str, allocator: str, steps_per_round: int, max_rounds: int):
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        import torch
        import torch.distributed as dist

        from gpt_model import GPT, one_hot_cross_entropy

        self.torch, self.dist, self.loss_fn = torch, dist, one_hot_cross_entropy
        self.mode, self.allocator = mode, allocator
        self.rank, self.world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        self.local = int(os.environ["LOCAL_RANK"])
        self.sova = None
        if allocator.startswith("sova"):
            import sova.torch as sova_torch
            sova_torch.enable(backend="pluggable",
                              **({"stream_checks": False} if allocator == "sova_nochecks" else {}))
            self.sova = sova_torch
        torch.cuda.set_device(self.local)
        self.dev = torch.device("cuda", self.local)
        dist.init_process_group("nccl", device_id=self.dev)

        torch.manual_seed(0)
        torch.use_deterministic_algorithms(True)
        torch.backends.cuda.matmul.allow_tf32 = False
        self.vocab, batch = 8192, 8
        model = GPT(vocab=self.vocab, dim=512, layers=6, heads=8, max_len=512).to(self.dev)  # same on every rank
        if mode == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model, device_ids=[self.local])
        else:
            from torch.distributed.fsdp import fully_shard
            for block in model.blocks:
                fully_shard(block)
            fully_shard(model)
        self.model = model
        self.opt = torch.optim.AdamW(model.parameters(), lr=3e-4)

        # One round's lengths, the same on every rank and in every round;
        # each rank its own tokens, every step new ones (warm-up round included).
        shape_gen = torch.Generator().manual_seed(1)
        lengths = [64 * int(torch.randint(2, 9, (1,), generator=shape_gen)) for _ in range(steps_per_round)]
        data_gen = torch.Generator().manual_seed(1000 + self.rank)
        self.batches = [torch.randint(0, self.vocab, (batch, lengths[i % steps_per_round] + 1), generator=data_gen)
                        for i in range(steps_per_round * (max_rounds + 1))]
        self.next_step = 0
        self.losses = []
        torch.cuda.synchronize()

    def counters(self) -> dict:
        if self.sova is not None:
            stats = self.sova.raw_stats(self.local)
            return {k: stats[k] for k in SOVA_COUNTERS if k in stats}
        return {"allocations": self.torch.cuda.memory_stats(self.dev).get("allocation.all.allocated", 0)}

    def step(self) -> None:
        torch = self.torch
        data = self.batches[self.next_step].to(self.dev, non_blocking=False)
        self.next_step += 1
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = self.model(data[:, :-1])
        loss = self.loss_fn(logits, data[:, 1:], self.vocab)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.losses.append(loss.detach())

    def run(self, count: int, timed: bool) -> dict:
        """`count` steps; each step's milliseconds from CUDA events at the
        steps' starts (no synchronization between steps), the wall time of
        all of them with the device synchronized at both ends, and the
        counters' growth over them."""
        torch = self.torch
        if self.next_step + count > len(self.batches):
            raise SystemExit(f"rank {self.rank}: {count} more steps than the {len(self.batches)} prepared")
        torch.cuda.synchronize()
        self.dist.barrier()
        torch.cuda.synchronize()
        events = [torch.cuda.Event(enable_timing=True) for _ in range(count + 1)]
        before = self.counters()
        t0 = time.perf_counter()
        for i in range(count):
            events[i].record()
            self.step()
        events[count].record()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        after = self.counters()
        self.dist.barrier()
        return {"timed": timed, "count": count,
                "step_ms": [events[i].elapsed_time(events[i + 1]) for i in range(count)],
                "wall_ms_per_step": 1000.0 * wall / count,
                "counters": {k: after[k] - before[k] for k in after}}

    def finish(self) -> dict:
        """Hashes of losses and weights, peak reserved, the whole run's
        counters, and the host time of a torch.empty + free pair, sizes
        cycling 4 KiB..4 MiB, warm (one block of each size cached first):
        Python and the dispatcher are in it alike for every allocator, so the
        difference to native's is the allocator's path."""
        import hashlib
        torch = self.torch
        torch.cuda.synchronize()
        sizes = [4096 << (i % 11) for i in range(64)]
        for n in sizes:
            torch.empty(n, dtype=torch.uint8, device=self.dev)
        t0 = time.perf_counter()
        for _ in range(50):
            for n in sizes:
                t = torch.empty(n, dtype=torch.uint8, device=self.dev)
                del t
        pair_us = (time.perf_counter() - t0) * 1e6 / (50 * len(sizes))
        torch.cuda.synchronize()

        loss_bytes = torch.stack(self.losses).float().cpu().numpy().tobytes()
        h = hashlib.sha256()
        for name, p in sorted(self.model.state_dict().items()):
            t = p.full_tensor() if hasattr(p, "full_tensor") else p
            h.update(name.encode())
            h.update(t.detach().float().cpu().numpy().tobytes())
        if self.sova is not None:
            peak_reserved = self.sova.max_memory_reserved(self.local)
        else:
            peak_reserved = torch.cuda.max_memory_reserved(self.dev)
        return {"rank": self.rank, "world": self.world, "steps": self.next_step,
                "peak_reserved": peak_reserved, "alloc_free_us": pair_us,
                "losses_sha": hashlib.sha256(loss_bytes).hexdigest(), "weights_sha": h.hexdigest(),
                "final_loss": float(self.losses[-1]) if self.losses else float("nan"),
                "run_counters": self.counters() if self.sova is not None else {},
                "avoid_record_streams": os.environ.get("TORCH_NCCL_AVOID_RECORD_STREAMS", "(unset)")}

    def handle(self, cmd: dict) -> dict:
        if cmd["op"] == "steps":
            return self.run(cmd["count"], cmd["timed"])
        if cmd["op"] == "finish":
            return self.finish()
        raise SystemExit(f"rank {self.rank}: unknown command {cmd!r}")

    def close(self) -> None:
        self.dist.destroy_process_group()


def worker(mode: str, allocator: str, folder: str, steps_per_round: int, max_rounds: int, driver_pid: int) -> None:
    trainer = Trainer(mode, allocator, steps_per_round, max_rounds)
    serve(folder, trainer.rank, trainer, driver_pid)


# ---- driver: the groups -----------------------------------------------------
class TrainGroup(Group):
    """One (mode, allocator) torchrun launch, and what its ranks answered."""

    def __init__(self, mode: str, allocator: str, folder: str, ranks: int, steps_per_round: int, max_rounds: int):
        super().__init__(f"{mode} {allocator}", folder, ranks,
                         launch_command(mode, allocator, folder, ranks, steps_per_round, max_rounds),
                         launch_environment(allocator))
        self.mode, self.allocator = mode, allocator
        self.rounds = []   # per timed round: the ranks' answers
        self.final = None  # the ranks' answers to "finish"


def launch_environment(allocator: str) -> dict:
    env = dict(os.environ, **SAFE_ENV, CUBLAS_WORKSPACE_CONFIG=":4096:8", PYTHONUNBUFFERED="1")
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if allocator == "expandable":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    if allocator == "sova_recstream":
        env["TORCH_NCCL_AVOID_RECORD_STREAMS"] = "0"
    return env


def launch_command(mode: str, allocator: str, folder: str, ranks: int, steps_per_round: int, max_rounds: int) -> list:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}",
            os.path.abspath(__file__), "--worker", mode, allocator, folder,
            str(steps_per_round), str(max_rounds), str(os.getpid())]


# ---- driver: figures --------------------------------------------------------
def round_figure(ranks: list) -> float:
    """A group's figure for one round: the mean over ranks of each rank's median step (ms)."""
    return statistics.mean(statistics.median(r["step_ms"]) for r in ranks)


def spread(values: list) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def paired_ratios(values: list, base: list) -> list:
    """Round by round: this group's figure over the base's of the same round."""
    return [v / b for v, b in zip(values, base)]


def bitwise_equal(group: TrainGroup, base: TrainGroup) -> bool:
    return all(g["losses_sha"] == b["losses_sha"] and g["weights_sha"] == b["weights_sha"]
               for g, b in zip(group.final, base.final))


def per_step(group: TrainGroup, key: str, rank: int = 0) -> float:
    """A counter's growth per timed step on one rank."""
    steps = sum(r[rank]["count"] for r in group.rounds)
    return sum(r[rank]["counters"].get(key, 0) for r in group.rounds) / steps if steps else float("nan")


def total(values) -> int | None:
    """The sum, or None where a rank has no such counter (an older adapter; native)."""
    values = list(values)
    return None if any(v is None for v in values) else sum(values)


def summarize(groups: list, modes: list) -> list:
    """One row per group that finished: its figures and, against native of the same mode, ratios."""
    rows = []
    for m in modes:
        base = next((g for g in groups if g.mode == m and g.allocator == "native" and g.failure is None), None)
        base_ms = [round_figure(r) for r in base.rounds] if base else None
        for g in groups:
            if g.mode != m:
                continue
            row = {"mode": m, "allocator": g.allocator, "rounds": len(g.rounds), "failure": g.failure}
            if g.failure is None and g.rounds:
                ms = [round_figure(r) for r in g.rounds]
                wall = [statistics.mean(x["wall_ms_per_step"] for x in r) for r in g.rounds]
                peaks = [x["peak_reserved"] for x in g.final]
                row.update({
                    "ms_per_round": ms, "ms": spread(ms), "wall_ms_per_round": wall,
                    "peak_reserved_per_rank": peaks,
                    "allocs_per_step": statistics.mean(per_step(g, "allocations", r) for r in range(g.ranks)),
                    "alloc_free_us": statistics.mean(x["alloc_free_us"] for x in g.final),
                    "counters_per_step_rank0": {k: per_step(g, k) for k in g.rounds[0][0]["counters"]},
                    "record_stream_calls_per_rank": [x["run_counters"].get("recordStreamCalls") for x in g.final],
                    "record_stream_waits_per_rank": [x["run_counters"].get("recordStreamWaits") for x in g.final],
                    "record_stream_calls_total": total(x["run_counters"].get("recordStreamCalls") for x in g.final),
                    "record_stream_waits_total": total(x["run_counters"].get("recordStreamWaits") for x in g.final),
                    "avoid_record_streams": g.final[0]["avoid_record_streams"],
                })
                if base is not None and base.final is not None:
                    ratios = paired_ratios(ms, base_ms)
                    row["ms_vs_native_per_round"] = ratios
                    row["ms_vs_native"] = spread(ratios)
                    row["bitwise_equal"] = bitwise_equal(g, base)
                    base_peak = max(x["peak_reserved"] for x in base.final)
                    row["peak_vs_native"] = max(peaks) / base_peak if base_peak else float("nan")
            rows.append(row)
    return rows


def print_tables(rows: list, gpus: int) -> None:
    def span(s: dict, fmt: str) -> str:
        return f"{s['median']:{fmt}} ({s['min']:{fmt}}-{s['max']:{fmt}})"

    def per_rank(values: list) -> str:
        return "n/a" if any(v is None for v in values) else f"{' / '.join(map(str, values))} (total {sum(values)})"

    print("\n| mode | allocator | rounds | losses & weights == native (bitwise, every rank) | "
          "ms/step: median of rounds (min-max) | vs native: median of per-round ratios (min-max) | "
          "peak reserved GiB per rank | vs native | allocs/step | empty+free us | sova counters per step (rank 0) | "
          "recordStreamCalls per rank | recordStreamWaits per rank |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        if row["failure"] is not None:
            print(f"| {row['mode']} | {row['allocator']} | {row['rounds']} | FAILED: {row['failure']} "
                  "| | | | | | | | | |")
            continue
        if "ms" not in row:
            continue
        same = {True: "yes", False: "NO"}.get(row.get("bitwise_equal"), "-")
        vs = span(row["ms_vs_native"], ".3f") if "ms_vs_native" in row else "-"
        peaks = " / ".join(f"{p / 2**30:.2f}" for p in row["peak_reserved_per_rank"])
        counters = ", ".join(f"{k} {v:.1f}" for k, v in row["counters_per_step_rank0"].items()
                             if v and k != "allocations")
        sova = row["allocator"].startswith("sova")
        calls = per_rank(row["record_stream_calls_per_rank"]) if sova else ""
        waits = per_rank(row["record_stream_waits_per_rank"]) if sova else ""
        print(f"| {row['mode']} | {row['allocator']} | {row['rounds']} | {same} | {span(row['ms'], '.2f')} | {vs} | "
              f"{peaks} | {row.get('peak_vs_native', float('nan')):.3f} | {row['allocs_per_step']:.0f} | "
              f"{row['alloc_free_us']:.2f} | {counters} | {calls} | {waits} |")
    print(f"recordStreamCalls: recordStream calls that reached sova's hook; recordStreamWaits: the stream waits "
          f"that recorded streams caused at free time; both over the whole run (warm-up included), each rank of "
          f"{gpus}; n/a: the adapter has no such counter. TORCH_NCCL_AVOID_RECORD_STREAMS: "
          + ", ".join(f"{r['mode']} {r['allocator']} {r['avoid_record_streams']}"
                      for r in rows if "ms" in r and r["allocator"].startswith("sova")))

    done = [r for r in rows if "ms_per_round" in r]
    if done:
        n = max(len(r["ms_per_round"]) for r in done)
        print("\nEach round's figure (ms/step, median of the round's steps) and, in brackets, its ratio to "
              "native's in the same round:")
        print("| mode | allocator | " + " | ".join(f"round {i + 1}" for i in range(n)) + " |")
        print("|---|---|" + "---|" * n)
        for r in done:
            ratios = r.get("ms_vs_native_per_round", [float("nan")] * n)
            cells = [f"{v:.2f} ({q:.3f})" for v, q in zip(r["ms_per_round"], ratios)]
            print(f"| {r['mode']} | {r['allocator']} | " + " | ".join(cells) + " |")


# ---- driver: the run ----------------------------------------------------------
def nvidia_smi(field: str) -> list | None:
    """One value of `field` per GPU (nvidia-smi --query-gpu), or None where nvidia-smi does not answer."""
    try:
        p = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return [ln.strip() for ln in p.stdout.splitlines() if ln.strip()] if p.returncode == 0 else None


def plan_groups(modes: list, allocators: list) -> list:
    """(mode, allocator) in measuring order: DDP-only allocators only under DDP."""
    return [(m, a) for m in modes for a in allocators if not (a in DDP_ONLY and m != "ddp")]


def run_rounds(groups: list, rounds: int, steps: int, budget_s: float, t_start: float, segment_timeout: float) -> None:
    """The warm-up round, then timed rounds while the next one and the closing
    work fit in the budget; a group that fails is stopped and left out."""
    def live():
        return [g for g in groups if g.failure is None]

    took = {}  # group -> seconds of its warm-up steps: a timed round's steps may take 5 times that

    def one_round(order, timed, label):
        for g in order:
            if g.failure is not None:
                continue
            t = time.monotonic()
            limit = min(segment_timeout, max(20.0, 5 * took[g])) if g in took else segment_timeout
            try:
                res = g.send({"op": "steps", "count": steps, "timed": timed}, limit)
            except GroupFailed as e:
                g.fail(f"{label}: {e}")
                print(f"  {g.name} {label}: FAILED {e}", flush=True)
                continue
            if timed:
                g.rounds.append(res)
            else:
                took[g] = time.monotonic() - t
            print(f"  {g.name} {label}: {round_figure(res):.2f} ms/step (median), "
                  f"{statistics.mean(x['wall_ms_per_step'] for x in res):.2f} wall ({time.monotonic() - t:.1f} s)",
                  flush=True)

    t = time.monotonic()
    one_round(live(), False, "warm-up")
    longest = time.monotonic() - t
    closing = 10 + 2 * len(live())   # finish (hashes, empty+free pairs) one group at a time, then the exits
    for rnd in range(rounds):
        spent = time.monotonic() - t_start
        if spent + 1.2 * longest + closing > budget_s:
            print(f"round {rnd + 1}: not started ({spent:.0f} s spent, a round takes about {longest:.0f} s, "
                  f"--budget-s {budget_s:.0f})", flush=True)
            break
        t = time.monotonic()
        order = live() if rnd % 2 == 0 else live()[::-1]
        one_round(order, True, f"round {rnd + 1}")
        longest = max(longest, time.monotonic() - t)
    # Every group must have every round: one that failed part-way is out.
    n = max((len(g.rounds) for g in live()), default=0)
    for g in live():
        if n == 0:
            g.fail("no timed round fitted in --budget-s")
        elif len(g.rounds) != n:
            g.fail(f"{len(g.rounds)} of {n} rounds")


def main() -> int:
    t_start = time.monotonic()  # --budget-s counts from here (importing torch included)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--gpus", type=int, default=0, help="ranks (default: every GPU)")
    ap.add_argument("--rounds", type=int, default=6, help="timed rounds, after one untimed warm-up round")
    ap.add_argument("--steps", type=int, default=30, help="steps of each group in a round")
    ap.add_argument("--modes", default="ddp,fsdp")
    ap.add_argument("--allocators", default="native,sova,sova_nochecks,expandable,sova_recstream,native_again")
    ap.add_argument("--budget-s", type=float, default=330,
                    help="the whole run's seconds: no round is started that would not end, with the closing work, within them")
    ap.add_argument("--start-timeout", type=float, default=240, help="seconds for every group to start")
    ap.add_argument("--segment-timeout", type=float, default=120,
                    help="seconds for one group's warm-up steps or its finish; a timed round's steps get at most this, "
                         "and at most 5 times the warm-up's (20 s at least)")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    allocators = [a for a in args.allocators.split(",") if a]
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown mode {m!r} (choose from {', '.join(MODES)})")
    for a in allocators:
        if a not in ALLOCATORS:
            ap.error(f"unknown allocator {a!r} (choose from {', '.join(ALLOCATORS)})")
    if "native" not in allocators:
        ap.error("native must be among the allocators: every other is compared with it")
    if len(set(allocators)) != len(allocators):
        ap.error("an allocator is named twice (native_again is the second native group)")
    if args.rounds < 1 or args.steps < 5:
        ap.error("--rounds must be 1 or more and --steps 5 or more")
    import torch
    gpus = args.gpus or torch.cuda.device_count()
    if gpus < 2 or gpus > torch.cuda.device_count():
        print(f"multi_gpu_train: needs 2 or more GPUs (asked {args.gpus or 'all'}, CUDA sees "
              f"{torch.cuda.device_count()})", file=sys.stderr)
        return 2
    modes_of_compute = nvidia_smi("compute_mode")
    if modes_of_compute and any(m != "Default" for m in modes_of_compute):
        print(f"multi_gpu_train: the groups share the GPUs, which needs compute mode Default; nvidia-smi says "
              f"{modes_of_compute}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    plan = plan_groups(modes, allocators)
    try:  # NCCL keeps some state of every communicator in /dev/shm: all groups' at once here
        st = os.statvfs("/dev/shm")
        shm = f"/dev/shm {st.f_bavail * st.f_frsize / 2**30:.1f} GiB free"
    except OSError:
        shm = "no /dev/shm"
    print(f"torch {torch.__version__}, {gpus} GPUs ({torch.cuda.get_device_name(0)}); {len(plan)} groups, "
          f"a warm-up round and up to {args.rounds} rounds of {args.steps} steps each, "
          f"order reversed every other round; {shm}", flush=True)

    groups = [TrainGroup(m, a, os.path.join(args.out, f"{m}_{a}"), gpus, args.steps, args.rounds) for m, a in plan]
    try:
        for g in groups:
            g.start()
            time.sleep(0.3)  # torchrun's rendezvous ports: one launch at a time
        for g in groups:
            try:
                g.wait_ready(max(1.0, args.start_timeout - (time.monotonic() - t_start)))
            except GroupFailed as e:
                g.fail(str(e))
                print(f"  {g.name}: FAILED {e}", flush=True)
        print(f"groups started in {time.monotonic() - t_start:.0f} s", flush=True)
        run_rounds(groups, args.rounds, args.steps, args.budget_s, t_start, args.segment_timeout)
        used = nvidia_smi("memory.used")
        if used:
            print(f"GPU memory used with every group's memory still held: {', '.join(used)}", flush=True)
        for g in groups:  # one at a time: the empty+free pairs are host timings
            if g.failure is None:
                try:
                    g.final = g.send({"op": "finish"}, args.segment_timeout)
                except GroupFailed as e:
                    g.fail(f"finish: {e}")
    finally:
        for g in groups:
            if g.proc is not None and g.proc.poll() is None and g.failure is None:
                g.send({"op": "exit"}, 0)
        for g in groups:
            g.stop(grace_s=30)

    rows = summarize(groups, modes)
    print_tables(rows, gpus)
    status = 0
    for row in rows:
        if row["failure"] is not None or row.get("bitwise_equal") is False:
            status = 1
    for m in modes:
        if not any(r["mode"] == m and r["allocator"] == "native" and r["failure"] is None for r in rows):
            print(f"{m}: native did not finish: nothing to compare with")
            status = 1
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump({"gpus": gpus, "steps_per_round": args.steps, "rows": rows}, f, indent=1)
    print(f"\n{time.monotonic() - t_start:.0f} s; each group's log and answers in {args.out}/<mode>_<allocator>/")
    return status


if __name__ == "__main__":
    if len(sys.argv) == 8 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]))
    else:
        sys.exit(main())
