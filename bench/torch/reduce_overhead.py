"""A small transformer under torch.compile(mode="reduce-overhead") (cudagraph
trees) with PyTorch's allocator and with sova.torch, each allocator in its own
process (an allocator is chosen once per process):

  torch          PyTorch's caching allocator
  sova-native    sova.torch.enable(backend="native"): what reduce-overhead needs
  sova-pluggable sova.torch.enable(backend="pluggable"): no reduce-overhead
                 (docs/python.md, "CUDA graphs"), only the torch.cuda.graph phase

Phases, in each process (deterministic settings, same seed):
  train    a training step (forward, loss, backward under the compiled model;
           SGD step eager), one batch size
  infer    inference at --batches batch sizes (one cudagraph per shape)
  graph    inference captured by hand with torch.cuda.graph at the same sizes
For each: median time per step after warm-up (host clock around --steps steps
and a synchronize, --reps times), the first calls' time (compile and
recording; the inductor cache is shared, so the first process pays most of
the compile), and peak reserved memory (torch.cuda.max_memory_reserved for
PyTorch's allocator, sova.torch.max_memory_reserved for sova; peaks reset
before each phase, memory held by earlier phases stays). Every output
(losses, final weights, inference outputs) is compared bit for bit with the
torch process's.

  python3 bench/torch/reduce_overhead.py [--allocators torch,sova-native,sova-pluggable]
      [--json FILE] [--budget SECONDS]

Prints one table and one JSON object (also written to --json). Exit status 0
when every process ran every phase it should and every output is equal.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

D_MODEL, HEADS, LAYERS, SEQ = 256, 4, 2, 64
TRAIN_BATCH = 16
PHASES = {"torch": ["train", "infer", "graph"], "sova-native": ["train", "infer", "graph"],
          "sova-pluggable": ["graph"]}


# ---------------------------------------------------------------- the worker

def build_model(torch):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL)
            self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
            self.proj = nn.Linear(D_MODEL, D_MODEL)
            self.mlp = nn.Sequential(nn.Linear(D_MODEL, 4 * D_MODEL), nn.GELU(), nn.Linear(4 * D_MODEL, D_MODEL))

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
            # Attention written out (no fused SDPA kernel, whose backward may use atomics).
            att = (q @ k.transpose(-2, -1)) * (1.0 / (d // HEADS) ** 0.5)
            y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
            x = x + self.proj(y)
            return x + self.mlp(self.ln2(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.Sequential(*[Block() for _ in range(LAYERS)])
            self.head = nn.Linear(D_MODEL, D_MODEL)

        def forward(self, x):
            return self.head(self.blocks(x))

    return Model().cuda()


def peak_reserved(torch, allocator) -> int:
    if allocator == "torch":
        return torch.cuda.max_memory_reserved()
    import sova.torch as st
    return st.max_memory_reserved()


def reset_peaks(torch, allocator) -> None:
    if allocator == "torch":
        torch.cuda.reset_peak_memory_stats()
    else:
        import sova.torch as st
        st.reset_peak_memory_stats()


def timed(torch, fn, steps, reps):
    """Median seconds per call of fn over reps chunks of steps calls."""
    per = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
        per.append((time.perf_counter() - t) / steps)
    per.sort()
    return per[len(per) // 2]


def first_calls(torch, fn, n=3):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t


def phase_train(torch, allocator, args, saved):
    torch.manual_seed(0)
    model = build_model(torch)
    compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=True)
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(TRAIN_BATCH, SEQ, D_MODEL, device="cuda", generator=g)
    target = torch.randn(TRAIN_BATCH, SEQ, D_MODEL, device="cuda", generator=g)
    losses = []

    def step(record=False):
        torch.compiler.cudagraph_mark_step_begin()
        loss = (compiled(x) - target).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if record:
            losses.append(loss.detach().clone())

    first = first_calls(torch, lambda: step(record=True))
    per_step = timed(torch, step, args.steps, args.reps)
    saved["train.losses"] = torch.stack(losses).cpu()
    for name, p in model.named_parameters():
        saved[f"train.param.{name}"] = p.detach().cpu()
    return {"batch": TRAIN_BATCH, "ms_per_step": per_step * 1e3, "first_3_calls_s": first}


def inference_inputs(torch, batches):
    g = torch.Generator(device="cuda").manual_seed(2)
    return {b: torch.randn(b, SEQ, D_MODEL, device="cuda", generator=g) for b in batches}


def phase_infer(torch, allocator, args, saved):
    torch.manual_seed(0)
    model = build_model(torch).eval()
    compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)
    out = {}
    with torch.no_grad():
        for b, x in inference_inputs(torch, args.batches).items():
            first = first_calls(torch, lambda: compiled(x))
            per_step = timed(torch, lambda: compiled(x), args.steps, args.reps)
            saved[f"infer.b{b}"] = compiled(x).clone().cpu()
            out[f"b{b}"] = {"ms_per_step": per_step * 1e3, "first_3_calls_s": first}
    return out


def phase_graph(torch, allocator, args, saved):
    torch.manual_seed(0)
    model = build_model(torch).eval()
    out = {}
    keep = []  # graphs live to the end of the phase, as a server's would
    with torch.no_grad():
        for b, x in inference_inputs(torch, args.batches).items():
            t = time.perf_counter()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    model(x)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                y = model(x)
            torch.cuda.synchronize()
            capture = time.perf_counter() - t
            per_step = timed(torch, graph.replay, args.steps, args.reps)
            graph.replay()
            saved[f"graph.b{b}"] = y.clone().cpu()
            keep.append((graph, y))
            out[f"b{b}"] = {"ms_per_step": per_step * 1e3, "warmup_capture_s": capture}
    return out


def worker(args):
    # Deterministic settings, before CUDA starts.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch
    enable_start = time.perf_counter()
    if args.worker == "sova-native":
        import sova.torch as st
        st.enable(backend="native")   # a build on first use, else the cached backend loaded
    elif args.worker == "sova-pluggable":
        import sova.torch as st
        st.enable(backend="pluggable")
    enable_s = time.perf_counter() - enable_start
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)
    result = {"allocator": args.worker, "torch": torch.__version__, "device": torch.cuda.get_device_name(),
              "enable_s": enable_s, "phases": {}}
    torch.zeros(1, device="cuda")  # CUDA (and sova's pool) up before peaks are reset
    saved = {}
    phase_fns = {"train": phase_train, "infer": phase_infer, "graph": phase_graph}
    for name in PHASES[args.worker]:
        reset_peaks(torch, args.worker)
        t = time.perf_counter()
        try:
            r = phase_fns[name](torch, args.worker, args, saved)
            r = {"ok": True, **r}
        except Exception as e:  # the phase's error is the result
            r = {"ok": False, "error": f"{type(e).__name__}: {e}"[:500]}
        torch.cuda.synchronize()
        r["phase_s"] = time.perf_counter() - t
        r["peak_reserved_mib"] = peak_reserved(torch, args.worker) / 2**20
        result["phases"][name] = r
        print(f"  {args.worker} {name}: {'ok' if r['ok'] else r['error']} ({r['phase_s']:.1f} s)", flush=True)
        # Each phase's results are written as they come, so a timeout keeps them.
        torch.save(saved, args.tensors)
        with open(args.out, "w") as f:
            json.dump(result, f)
    return 0


# ---------------------------------------------------------------- the driver

def compare(torch, ref: dict, other: dict) -> dict:
    """Per phase: 'equal', 'DIFFERENT (names)' or 'missing'."""
    verdict = {}
    for phase in ("train", "infer", "graph"):
        keys = [k for k in ref if k.startswith(phase + ".")]
        if not keys:
            continue
        if not all(k in other for k in keys):
            verdict[phase] = "missing"
            continue
        bad = [k for k in keys if ref[k].shape != other[k].shape or
               not torch.equal(ref[k].contiguous().view(torch.int32), other[k].contiguous().view(torch.int32))]
        verdict[phase] = "equal" if not bad else "DIFFERENT (" + ", ".join(bad[:4]) + ")"
    return verdict


def driver(args):
    t0 = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="reduce_overhead_")
    allocators = args.allocators.split(",")
    for a in allocators:
        if a not in PHASES:
            print(f"reduce_overhead.py: unknown allocator {a!r} (one of {', '.join(PHASES)})", file=sys.stderr)
            return 2
    results, status = {}, 0
    # Later processes compile from a warm inductor cache: the first gets the largest share.
    shares = {"torch": 0.45, "sova-native": 0.4, "sova-pluggable": 0.15}
    for i, a in enumerate(allocators):
        left = args.budget - (time.monotonic() - t0)
        rest = sum(shares[b] for b in allocators[i:])
        limit = max(10.0, left * shares[a] / rest)
        out, tensors = os.path.join(tmp, f"{a}.json"), os.path.join(tmp, f"{a}.pt")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", a, "--out", out, "--tensors", tensors,
               "--steps", str(args.steps), "--reps", str(args.reps), "--batches", ",".join(map(str, args.batches))]
        print(f"== {a} (limit {limit:.0f} s)", flush=True)
        t = time.monotonic()
        try:
            rc = subprocess.run(cmd, timeout=limit).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        r = {"allocator": a, "phases": {}}
        if os.path.exists(out):
            with open(out) as f:
                r = json.load(f)
        r["exit"], r["process_s"] = rc, time.monotonic() - t
        r["_tensors"] = tensors if os.path.exists(tensors) else None
        results[a] = r
        if rc != 0 or not all(r["phases"].get(p, {}).get("ok") for p in PHASES[a]):
            status = 1

    import torch  # the driver itself allocates nothing on the GPU
    ref = torch.load(results["torch"]["_tensors"]) if results.get("torch", {}).get("_tensors") else None
    for a, r in results.items():
        if a != "torch" and ref is not None and r["_tensors"]:
            verdict = compare(torch, ref, torch.load(r["_tensors"]))
            # Only the phases this allocator runs (the pluggable route has no compiled phases).
            r["outputs_vs_torch"] = {p: v for p, v in verdict.items() if p in PHASES[a]}
            if any(v != "equal" for v in r["outputs_vs_torch"].values()):
                status = 1
        del r["_tensors"]

    print(f"\n{'allocator':<15} {'phase':<6} {'case':<5} {'ms/step':>9} {'vs torch':>9} {'first s':>8} "
          f"{'peak rsv MiB':>13} outputs")
    for a, r in results.items():
        for phase, p in r["phases"].items():
            verdict = r.get("outputs_vs_torch", {}).get(phase, "(reference)" if a == "torch" else "-")
            if not p.get("ok"):
                print(f"{a:<15} {phase:<6} {'':<5} FAILED: {p.get('error')}")
                continue
            cases = {"b%d" % p["batch"]: p} if phase == "train" else {k: v for k, v in p.items() if k.startswith("b")}
            for case, c in cases.items():
                base = results.get("torch", {}).get("phases", {}).get(phase, {})
                base_c = base if phase == "train" else base.get(case, {})
                ratio = (f"{c['ms_per_step'] / base_c['ms_per_step']:.3f}x"
                         if base.get("ok") and "ms_per_step" in base_c else "")
                first = c.get("first_3_calls_s", c.get("warmup_capture_s", 0))
                print(f"{a:<15} {phase:<6} {case:<5} {c['ms_per_step']:9.3f} {ratio:>9} {first:8.2f} "
                      f"{p['peak_reserved_mib']:13.1f} {verdict}")
        if r["exit"] != 0:
            print(f"{a:<15} process exit: {r['exit']}")
    summary = {"model": {"d_model": D_MODEL, "heads": HEADS, "layers": LAYERS, "seq": SEQ,
                         "train_batch": TRAIN_BATCH, "batches": args.batches},
               "steps": args.steps, "reps": args.reps, "total_s": time.monotonic() - t0, "results": results}
    text = json.dumps(summary)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return status


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--allocators", default="torch,sova-native,sova-pluggable")
    ap.add_argument("--budget", type=float, default=220, help="seconds for all processes together")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8, 32])
    ap.add_argument("--json")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--tensors", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.steps < 1 or args.reps < 1 or not args.batches or min(args.batches) < 1:
        ap.error("--steps, --reps and every batch size must be at least 1")
    return worker(args) if args.worker else driver(args)


if __name__ == "__main__":
    sys.exit(main())
