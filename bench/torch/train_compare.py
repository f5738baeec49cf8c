#!/usr/bin/env python3
"""Trains the same models under PyTorch's native allocator, native with
expandable segments, and sova (sova.torch.enable), same seeds, deterministic
algorithms, one process per (model, allocator); prints a table of loss
agreement, peak reserved memory and time per step, each as a ratio to native
in the same run, and plots reserved memory over steps (PNG).

    python3 bench/torch/train_compare.py --out DIR [--scale 1.0] [--models gpt,resnet,gpt_amp] [--allocators native,expandable,sova,sova_native,sova_remap]

Models (docs/benchmarks.md, "Remapping under PyTorch", records a run):
  gpt      GPT-style decoder (6 layers, d 512, 8 heads, vocab 8192), batch 16,
           sequence length drawn per step from 128..1024 (multiples of 64)
  resnet   torchvision ResNet-18, 100 classes, 64x64 images, batch drawn per
           step from 32..256
  gpt_amp  the GPT under torch.autocast(bfloat16)
Time per step: wall time of the steps after the first 10 (warm-up), with the
device synchronized at both ends; losses are read only at the end, so the
host runs ahead as in real training.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ALLOCATORS = ("native", "expandable", "sova", "sova_native", "sova_remap")
# sova.torch.enable() options of each sova variant.
# "sova" is sova.torch.enable()'s default options (no remapping: sova/torch.py,
# TORCH_DEFAULTS) on the pluggable backend; "sova_native" the same options on
# the native backend (what enable() with no arguments chooses where it can be
# built: its first process pays the build, recorded as enable_s);
# "sova_remap" turns balanced remapping on (pluggable).
SOVA_VARIANTS = {"sova": {"backend": "pluggable"}, "sova_native": {"backend": "native"},
                 "sova_remap": {"backend": "pluggable", "remap": "balanced"}}
STEPS = {"gpt": 300, "resnet": 200, "gpt_amp": 300}
WARMUP = 10


# ---- worker: one model under one allocator ---------------------------------
def worker(model_name: str, allocator: str, steps: int, out_json: str) -> None:
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch
    import torch.nn as nn

    from gpt_model import GPT, one_hot_cross_entropy

    if allocator in SOVA_VARIANTS:
        import sova.torch
        enable_start = time.perf_counter()
        sova.torch.enable(**SOVA_VARIANTS[allocator])
        enable_s = time.perf_counter() - enable_start
        reserved = sova.torch.memory_reserved
        peak_reserved = sova.torch.max_memory_reserved
        peak_allocated = sova.torch.max_memory_allocated
    else:
        reserved = torch.cuda.memory_reserved
        peak_reserved = torch.cuda.max_memory_reserved
        peak_allocated = torch.cuda.max_memory_allocated

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda", 0)

    if model_name in ("gpt", "gpt_amp"):
        V = 8192
        model = GPT(vocab=V, dim=512, layers=6, heads=8, max_len=1024).to(dev)
        gen = torch.Generator().manual_seed(1)

        def batch(step):
            S = 64 * int(torch.randint(2, 17, (1,), generator=gen))
            data = torch.randint(0, V, (16, S + 1), generator=gen)
            return data[:, :-1].to(dev, non_blocking=True), data[:, 1:].to(dev, non_blocking=True)

        def loss_of(x, y):
            return one_hot_cross_entropy(model(x).reshape(-1, V), y.reshape(-1), V)
    else:
        import torchvision

        class MeanPool(nn.Module):  # AdaptiveAvgPool2d's backward is not deterministic
            def forward(self, x):
                return x.mean(dim=(2, 3), keepdim=True)

        model = torchvision.models.resnet18(num_classes=100)
        model.avgpool = MeanPool()
        model = model.to(dev)
        gen = torch.Generator().manual_seed(1)

        def batch(step):
            B = 32 * int(torch.randint(1, 9, (1,), generator=gen))
            x = torch.randn(B, 3, 64, 64, generator=gen)
            y = torch.randint(0, 100, (B,), generator=gen)
            return x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)

        def loss_of(x, y):
            return one_hot_cross_entropy(model(x), y, 100)

    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    amp = model_name == "gpt_amp"
    losses, reserved_trace = [], []
    t0 = None
    for step in range(steps):
        if step == WARMUP:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        x, y = batch(step)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = loss_of(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
        reserved_trace.append(reserved())
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    result = {
        "model": model_name, "allocator": allocator, "steps": steps,
        "ms_per_step": 1000.0 * elapsed / (steps - WARMUP),
        "losses": [float(v) for v in torch.stack(losses).cpu()],
        "loss_hex": [float(v).hex() for v in torch.stack(losses).cpu()],
        "reserved": reserved_trace,
        "peak_reserved": peak_reserved(), "peak_allocated": peak_allocated(),
    }
    if allocator in SOVA_VARIANTS:
        result["sova_stats"] = sova.torch.raw_stats(0)
        result["enable_s"] = enable_s
    with open(out_json, "w") as f:
        json.dump(result, f)


# ---- driver ----------------------------------------------------------------
def run_one(model: str, allocator: str, steps: int, out: str) -> dict:
    path = os.path.join(out, f"{model}-{allocator}.json")
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if allocator == "expandable":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", model, allocator, str(steps), path]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout + p.stderr, file=sys.stderr)
        raise SystemExit(f"{model} under {allocator} failed (exit {p.returncode})")
    with open(path) as f:
        return json.load(f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=".", help="directory for the JSON results and the PNG")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the step counts")
    ap.add_argument("--models", default="gpt,resnet,gpt_amp")
    ap.add_argument("--allocators", default=",".join(ALLOCATORS))
    ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        m, a, s, o = args.worker
        worker(m, a, int(s), o)
        return
    os.makedirs(args.out, exist_ok=True)
    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in STEPS:
            raise SystemExit(f"unknown model {m!r}; choose from {sorted(STEPS)}")
    allocators = [a for a in args.allocators.split(",") if a]
    if any(a not in ALLOCATORS for a in allocators) or not {"native", "expandable"} <= set(allocators):
        raise SystemExit(f"--allocators: from {list(ALLOCATORS)}, native and expandable included")
    results = {}
    for m in models:
        steps = max(WARMUP + 10, int(STEPS[m] * args.scale))
        for a in allocators:
            results[(m, a)] = run_one(m, a, steps, args.out)
            r = results[(m, a)]
            enable = f", enable() {r['enable_s']:.2f} s" if "enable_s" in r else ""
            print(f"# {m:8s} {a:11s} {r['ms_per_step']:.2f} ms/step, peak reserved "
                  f"{r['peak_reserved'] / 2**30:.3f} GiB{enable}", flush=True)
    gib = 2 ** 30
    print()
    print("| model | allocator | steps | losses == native (bitwise) | ms/step | vs native | "
          "peak reserved GiB | vs native | vs expandable | peak allocated GiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for m in models:
        nat, exp = results[(m, "native")], results[(m, "expandable")]
        for a in allocators:
            r = results[(m, a)]
            same = r["loss_hex"] == nat["loss_hex"]
            diff = max(abs(x - y) for x, y in zip(r["losses"], nat["losses"]))
            print(f"| {m} | {a} | {r['steps']} | {'yes' if same else f'NO (max diff {diff:.3g})'} | "
                  f"{r['ms_per_step']:.2f} | {r['ms_per_step'] / nat['ms_per_step']:.3f} | "
                  f"{r['peak_reserved'] / gib:.3f} | {r['peak_reserved'] / nat['peak_reserved']:.3f} | "
                  f"{r['peak_reserved'] / exp['peak_reserved']:.3f} | {r['peak_allocated'] / gib:.3f} |")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    print()
    print("sova's counters over the whole run (slow-path work that can stall the host):")
    print("| model | allocator | allocations | stream-cache hits | chunks mapped | chunks remapped | "
          "remap waits (host) | device syncs | cross-stream waits |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for m in models:
        for a in allocators:
            st = results[(m, a)].get("sova_stats")
            if st:
                print(f"| {m} | {a} | {st['allocations']} | {st['fastPathHits']} | {st['chunksMapped']} | "
                      f"{st['chunksRemapped']} | {st['remapWaits']} | {st['deviceSynchronizes']} | "
                      f"{st['crossStreamWaits']} |")
    png = os.path.join(args.out, "train_compare_reserved.png")
    plot_reserved(plt, results, models, allocators, png)
    print(f"plot: {png}")


def plot_reserved(plt, results, models, allocators, png):
    """Reserved memory per step, a panel per model, a line per allocator.
    Allocators with the same reserved memory (sova on its pluggable and native
    backends, same options) would draw one line over the other: the looks and
    the title's note of tools/plot_bench.py keep both visible, and each line
    puts its markers at its own steps."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
    import plot_bench as pb  # noqa: PLC0415
    looks = pb.line_looks(allocators, pb.styles_for(allocators))
    fig, axes = plt.subplots(len(models), 1, figsize=(9, 3.2 * len(models)), squeeze=False)
    for ax, m in zip(axes[:, 0], models):
        for i, a in enumerate(allocators):
            reserved = results[(m, a)]["reserved"]
            every = max(len(reserved) // 10, 1)
            ax.plot([v / 2 ** 30 for v in reserved], label=a, markevery=(i * every // len(allocators), every),
                    **looks[a])
        ax.set_title(pb.titled(f"{m}: reserved memory per step",
                               pb.coinciding({a: results[(m, a)]["reserved"] for a in allocators})))
        ax.set_xlabel("step")
        ax.set_ylabel("GiB")
        ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
