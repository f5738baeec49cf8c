#!/usr/bin/env python3
"""sova.torch sleep and wake with one process per GPU (torchrun), as an RL
trainer runs on a node: each rank trains a GPT under DDP, puts its trainer
state to sleep (backed up) and its rollout cache too (dropped), wakes, and
trains on; then NCCL-registered sova memory across a sleep. Prints each
rank's figures and exits 0 only when everything judged held.

    python3 bench/torch/multi_gpu_sleep_wake.py [--gpus N] [--state-gib 4] [--kv-gib 4]
        [--cycles 3] [--steps 4] [--out DIR] [--json FILE]

Launches (one torchrun each, every rank on its own GPU, every GPU visible):
  train_ref    DDP training of bench/torch/gpt_model.py's GPT (bf16 autocast,
               deterministic, the same tokens per rank as train_sleep), no sleep
  train_sleep  the same, and between rounds of --steps steps: every rank puts
               tag "trainer" (the model, DDP's buckets, AdamW's states and
               --state-gib of extra state, filled per rank) to sleep with
               backup and tag "kv" (--kv-gib, a rollout cache) without, wakes
               "trainer", checks the extra state byte for byte, wakes "kv".
               Judged: losses and final weights bitwise equal to train_ref's on
               every rank, the state intact, each sleep giving the device back
               at least the tags' bytes. Reported per rank and cycle: sleep and
               wake GiB/s (the trainer's backed-up bytes over the call's time)
  nccl         a torch.cuda.MemPool whose segments come from tag "comm"
               (native backend), registered with NCCL
               (ProcessGroupNCCL.register_mem_pool), an all-reduce on it; then
               the order docs/sleep-wake.md asks for: deregister_mem_pool,
               sleep (backup), wake, register_mem_pool, all-reduce. Judged:
               exact sums before and after, contents intact. Then the same
               cycle without deregistering (what happens when the order is
               not kept): reported, not judged: device memory given back
               while asleep, the sums after wake.
NVLink multicast stays off (NCCL_NVLS_ENABLE=0). One GPU works too (a
single rank: the NCCL part then exercises no peer mapping).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
GIB = 2 ** 30


# ---- worker: one rank ------------------------------------------------------------
def setup():
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import sova.torch
    sova.torch.enable()          # the default: the native backend where it can be built
    import torch
    import torch.distributed as dist
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    return sova.torch, torch, dist, dev


def pattern(torch, n: int, rank: int, dev):
    """n bytes that differ per rank and per position (int32 words)."""
    words = torch.arange(n // 4, dtype=torch.int32, device=dev)
    return words * 2654435761 + rank * 40503


def sleep_timed(st, torch, dist, **kw) -> float:
    torch.cuda.synchronize()
    dist.barrier()
    t = time.perf_counter()
    st.sleep(**kw)
    return time.perf_counter() - t


def wake_timed(st, torch, **kw) -> float:
    t = time.perf_counter()
    st.wake(**kw)            # returns with the contents readable
    return time.perf_counter() - t


def train_worker(args, sleep: bool) -> dict:
    st, torch, dist, dev = setup()
    from torch.nn.parallel import DistributedDataParallel as DDP
    from gpt_model import GPT, one_hot_cross_entropy  # beside this file (the script's directory)

    rank, local = dist.get_rank(), int(os.environ["LOCAL_RANK"])
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    vocab = 8192
    with st.tag("trainer"):
        model = DDP(GPT(vocab=vocab, dim=512, layers=6, heads=8, max_len=512).to(dev), device_ids=[local])
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        state = pattern(torch, int(args.state_gib * GIB), rank, dev)
    with st.tag("kv"):
        kv = torch.empty(int(args.kv_gib * GIB), dtype=torch.uint8, device=dev)
    want_state = hashlib.sha256(state.cpu().numpy().tobytes()).hexdigest()
    gen = torch.Generator().manual_seed(1 + rank)
    losses, cycles = [], []
    for cycle in range(args.cycles):
        for _ in range(args.steps):
            tokens = torch.randint(0, vocab, (8, 257), generator=gen).to(dev)
            with st.tag("trainer"), torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(tokens[:, :-1])
                loss = one_hot_cross_entropy(logits.reshape(-1, vocab).float(), tokens[:, 1:].reshape(-1), vocab)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            with st.tag("trainer"):
                opt.step()
            losses.append(loss.detach())
        kv.fill_(cycle + 1)          # the rollout's writes
        if not sleep:
            continue
        trainer_bytes = st.tag_stats("trainer", local)["usedCurrent"]
        free_awake = torch.cuda.mem_get_info()[0]
        sleep_s = sleep_timed(st, torch, dist, tags=["trainer", "kv"], backup=["trainer"])
        free_asleep = torch.cuda.mem_get_info()[0]
        wake_s = wake_timed(st, torch, tags="trainer")
        intact = hashlib.sha256(state.cpu().numpy().tobytes()).hexdigest() == want_state
        st.wake(tags="kv")
        cycles.append({"cycle": cycle, "trainer_gib": trainer_bytes / GIB, "sleep_s": sleep_s, "wake_s": wake_s,
                       "sleep_gibs": trainer_bytes / GIB / sleep_s, "wake_gibs": trainer_bytes / GIB / wake_s,
                       "freed_gib": (free_asleep - free_awake) / GIB,
                       "tags_gib": (trainer_bytes + kv.numel()) / GIB, "state_intact": intact})
    torch.cuda.synchronize()
    weights = hashlib.sha256(b"".join(p.detach().float().cpu().numpy().tobytes()
                                      for p in model.parameters())).hexdigest()
    result = {"rank": rank, "backend": st.backend(), "losses": [float(v).hex() for v in torch.stack(losses).cpu()],
              "weights_sha256": weights, "cycles": cycles}
    dist.barrier()
    dist.destroy_process_group()
    return result


def save(args, name: str, result: dict) -> None:
    with open(os.path.join(args.out, f"{name}.rank{result['rank']}.json"), "w") as f:
        json.dump(result, f)


def nccl_worker(args) -> dict:
    st, torch, dist, dev = setup()
    rank, world, local = dist.get_rank(), dist.get_world_size(), int(os.environ["LOCAL_RANK"])
    nccl = dist.distributed_c10d._get_default_group()._get_backend(dev)
    want = float(world * (world + 1) // 2)
    n = int(args.comm_mib * 2**20) // 4
    out = {"rank": rank, "backend": st.backend()}
    pool = torch.cuda.MemPool()
    with st.tag("comm"), torch.cuda.use_mem_pool(pool):
        buf = torch.empty(n, dtype=torch.float32, device=dev)
        kept = pattern(torch, 64 * 2**20, rank, dev)       # contents that must survive
    want_kept = hashlib.sha256(kept.cpu().numpy().tobytes()).hexdigest()

    def all_reduce_exact() -> bool:
        buf.fill_(rank + 1)
        dist.all_reduce(buf)
        torch.cuda.synchronize()
        return bool((buf == want).all().item())

    def kept_intact() -> bool:
        return hashlib.sha256(kept.cpu().numpy().tobytes()).hexdigest() == want_kept

    nccl.register_mem_pool(pool)
    out["registered_exact"] = all_reduce_exact()
    # The order docs/sleep-wake.md asks for.
    nccl.deregister_mem_pool(pool)
    sleep_timed(st, torch, dist, tags="comm", backup=True)
    st.wake(tags="comm")
    nccl.register_mem_pool(pool)
    out["ordered"] = {"exact_after": all_reduce_exact(), "intact": kept_intact()}
    out["unordered"] = {"error": "did not end (hung or crashed)"}
    save(args, "nccl", out)   # what follows may hang or crash: the judged part is saved
    # Not kept: registered memory put to sleep.
    free_awake = torch.cuda.mem_get_info()[0]
    comm_bytes = st.tag_stats("comm", local)["reservedCurrent"]
    try:
        sleep_timed(st, torch, dist, tags="comm", backup=True)
        freed = torch.cuda.mem_get_info()[0] - free_awake
        st.wake(tags="comm")
        out["unordered"] = {"freed_gib": freed / GIB, "comm_gib": comm_bytes / GIB,
                            "exact_after": all_reduce_exact(), "intact": kept_intact()}
    except Exception as e:  # reported: what sova or NCCL says
        out["unordered"] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
    try:
        nccl.deregister_mem_pool(pool)
    except Exception as e:
        out["deregister_error"] = str(e)[:200]
    dist.barrier()
    dist.destroy_process_group()
    return out


# ---- driver --------------------------------------------------------------------
def launch(name: str, gpus: int, args) -> list:
    env = dict(os.environ, **SAFE_ENV, PYTHONUNBUFFERED="1")
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}",
           os.path.abspath(__file__), "--worker", name, "--out", args.out, "--state-gib", str(args.state_gib),
           "--kv-gib", str(args.kv_gib), "--cycles", str(args.cycles), "--steps", str(args.steps),
           "--comm-mib", str(args.comm_mib)]
    log = os.path.join(args.out, f"{name}.log")
    for r in range(gpus):  # an earlier run's records must not stand in for this one's
        stale = os.path.join(args.out, f"{name}.rank{r}.json")
        if os.path.exists(stale):
            os.remove(stale)
    t = time.monotonic()
    with open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    ranks = []
    for r in range(gpus):
        path = os.path.join(args.out, f"{name}.rank{r}.json")
        if os.path.exists(path):
            with open(path) as f:
                ranks.append(json.load(f))
    print(f"== {name}: {gpus} ranks, exit {rc}, {time.monotonic() - t:.0f} s", flush=True)
    if rc != 0 or len(ranks) != gpus:
        with open(log, errors="replace") as f:
            print("   " + "".join(f.readlines()[-15:]).replace("\n", "\n   "))
    return ranks if len(ranks) == gpus else []


def report_training(ref: list, slept: list, gpus: int) -> bool:
    """Prints each rank's cycles; whether both launches reported on every rank,
    every cycle kept the state intact and gave the device back at least the
    tags' bytes, and every rank's losses and weights equal those of no sleep."""
    if len(ref) != gpus or len(slept) != gpus:
        print(f"training: {len(ref)} and {len(slept)} of {gpus} ranks reported (no sleep, sleep)")
        return False
    ok = True
    print("rank cycle  trainer_GiB  sleep_s  sleep_GiB/s  wake_s  wake_GiB/s  freed_GiB/tags_GiB  intact")
    for r in slept:
        ok &= bool(r["cycles"])
        for c in r["cycles"]:
            print(f"{r['rank']:>4} {c['cycle']:>5} {c['trainer_gib']:>12.2f} {c['sleep_s']:>8.3f} "
                  f"{c['sleep_gibs']:>12.1f} {c['wake_s']:>7.3f} {c['wake_gibs']:>11.1f} "
                  f"{c['freed_gib']:>9.2f}/{c['tags_gib']:.2f} {'yes' if c['state_intact'] else 'NO'}")
            # The device gets back the tags' bytes (chunks may hold a little more).
            given_back = c["freed_gib"] >= 0.99 * c["tags_gib"]
            if not given_back:
                print(f"rank {r['rank']} cycle {c['cycle']}: the device got back less than the tags hold")
            ok &= c["state_intact"] and given_back
    for a, b in zip(sorted(ref, key=lambda r: r["rank"]), sorted(slept, key=lambda r: r["rank"])):
        same = a["losses"] == b["losses"] and a["weights_sha256"] == b["weights_sha256"]
        print(f"rank {a['rank']} ({b['backend']}): losses and weights bitwise equal to no sleep: "
              f"{'yes' if same else 'NO'}")
        ok &= same
    return ok


def report_nccl(ranks: list, gpus: int) -> bool:
    """Prints the NCCL launch's outcome per rank; whether every rank reported
    exact sums before and after the ordered cycle, its contents intact (the
    unordered cycle is reported, not judged)."""
    if len(ranks) != gpus:
        print(f"nccl: {len(ranks)} of {gpus} ranks reported")
        return False
    ok = True
    for r in ranks:
        print(f"rank {r['rank']} ({r['backend']}): registered all-reduce exact {r['registered_exact']}; "
              f"deregister, sleep, wake, register: {r['ordered']}; slept while registered (reported): "
              f"{r['unordered']}")
        ok &= r["registered_exact"] and r["ordered"]["exact_after"] and r["ordered"]["intact"]
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=0, help="ranks (default: every GPU)")
    ap.add_argument("--state-gib", type=float, default=4.0)
    ap.add_argument("--kv-gib", type=float, default=4.0)
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--comm-mib", type=float, default=256)
    ap.add_argument("--timeout", type=float, default=180, help="seconds for one launch")
    ap.add_argument("--out", default="/tmp/multi-gpu-sleep-wake")
    ap.add_argument("--json", help="append every rank's records to FILE")
    ap.add_argument("--worker", choices=["train_ref", "train_sleep", "nccl"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        result = nccl_worker(args) if args.worker == "nccl" else train_worker(args, args.worker == "train_sleep")
        save(args, args.worker, result)
        return 0
    import torch
    gpus = args.gpus or torch.cuda.device_count()
    if gpus < 1 or gpus > torch.cuda.device_count():
        ap.error(f"--gpus {gpus}: CUDA sees {torch.cuda.device_count()}")
    os.makedirs(args.out, exist_ok=True)
    ref, slept = launch("train_ref", gpus, args), launch("train_sleep", gpus, args)
    ok = report_training(ref, slept, gpus)
    nccl = launch("nccl", gpus, args)
    ok &= report_nccl(nccl, gpus)
    if args.json:
        with open(args.json, "a") as f:
            for name, ranks in (("train_sleep", slept), ("nccl", nccl)):
                for r in ranks:
                    f.write(json.dumps({"launch": name, "gpus": gpus, **{k: v for k, v in r.items()
                                                                          if k != "losses"}}) + "\n")
    print("all judged checks held" if ok else "SOME CHECK FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
