#!/usr/bin/env python3
"""Records the CUDA allocations of short PyTorch runs as RMM replay logs.

    python3 tools/traces/record_training.py --out DIR [--models a,b] [--steps N]
                                            [--scale F] [--max-entries N]
    python3 tools/traces/record_training.py --smoke     (no GPU: the models' code on the CPU)

For the lent GPU machine (PyTorch at /opt/torch/.venv/bin/python3, no
network): every model is defined here from torch.nn, with random weights and
random data, nothing downloaded. Each model runs in a process of its own
(this script again, with --child), so that each trace holds that model alone
and starts from an empty caching allocator:

  1. torch.cuda.memory._record_memory_history(enabled="all", context=None,
     max_entries=N): every alloc and free, no stack traces (they would be
     most of the time and size of the recording);
  2. the model, its optimizer and its data are made, and it runs a few steps;
  3. everything is dropped (and cuBLAS's workspaces cleared), so that the
     trace ends with little live;
  4. torch.cuda.memory._snapshot() is converted in the process by
     snapshot_to_csv.convert() (beside this file) into DIR/<model>.csv.gz.

Only the compressed traces and DIR/record_summary.json (per model: steps,
seconds, the converter's counts, PyTorch's own peaks, file sizes; and the
GPU and torch version) are written: at most 8 files.

Models (default sizes; --scale multiplies the batch sizes):
  gpt_train          GPT-style decoder, 6 layers, d 768, 12 heads, vocab 16384,
                     sequence 1024, batch 8, fp32 with TF32, AdamW; 4 steps
  resnet_train       ResNet-18-like CNN from nn.Conv2d/BatchNorm2d, 224x224,
                     batch 64, SGD with momentum; each batch is copied in on a
                     side stream and handed over with record_stream (the
                     prefetching loader pattern): a second stream, and frees
                     that complete later than they are requested; 4 steps
  encoder_amp_train  nn.TransformerEncoder (torch.nn), 8 layers, d 1024, bf16
                     autocast, fused AdamW, sequence length changing every
                     step (512, 256, 768, 384, 1024, 640), batch 16; 6 steps
  gpt_decode         the GPT shape (8 layers, d 1024) in bf16, greedy decoding
                     of 256 tokens after a 128-token prompt, batch 16, with a
                     key/value cache grown by torch.cat: blocks growing by a
                     little at every token
  unet_train         U-Net, 4 levels down (conv, BatchNorm, max pooling) and up
                     (ConvTranspose2d, skips joined by torch.cat), width 64,
                     256x256, batch 16, fp16 autocast with a GradScaler, Adam;
                     many large, short-lived image-sized blocks; 4 steps
  vit_train          ViT-Base-like, written out: Conv2d patch embedding (16x16
                     on 224x224), class token, 12 blocks of LayerNorm,
                     scaled_dot_product_attention and a GELU MLP, d 768, bf16
                     autocast, fused AdamW; micro-batches of 64, gradients
                     accumulated over 2 of them per optimizer step (the grads
                     live across backward calls); 4 optimizer steps
  lstm_train         language model on a 2-layer nn.LSTM (cuDNN), vocab 16384,
                     embedding 512, hidden 1024, batch 32, sequence length
                     changing every step (128, 256, 192, 320, 160, 288), state
                     carried between steps (detached), clip_grad_norm_, Adam;
                     6 steps

Exit status: 0 when every model was recorded, 1 otherwise (the others are
still written), 2 without CUDA.
"""
import argparse
import gc
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ("gpt_train", "resnet_train", "encoder_amp_train", "gpt_decode", "unet_train", "vit_train", "lstm_train")
DEFAULT_STEPS = {"gpt_train": 4, "resnet_train": 4, "encoder_amp_train": 6, "gpt_decode": 256, "unet_train": 4,
                 "vit_train": 4, "lstm_train": 6}
CHILD_TIMEOUT_S = 300
TOO_BIG = 16 << 20  # bytes: a trace larger than this is too big to bring back


# ---- models (import torch lazily: the parent process does not need it) ------

def build_transformer_block():
    """The pre-norm transformer block (attention, then a GELU MLP) the GPT and
    the ViT share, made once torch is imported. Causal attention for the GPT
    (but for a single decoded token); every position sees every other for the
    ViT. With a cache dict (decoding), keys and values grow by concatenation,
    a new, slightly larger block per layer and token, as simple decoders do."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Attention(nn.Module):
        def __init__(self, d, heads, causal):
            super().__init__()
            self.heads = heads
            self.causal = causal
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)

        def forward(self, x, cache=None):
            b, t, d = x.shape
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                       for z in self.qkv(x).split(d, dim=2))
            if cache is not None:
                if "k" in cache:
                    k = torch.cat([cache["k"], k], dim=2)
                    v = torch.cat([cache["v"], v], dim=2)
                cache["k"], cache["v"] = k, v
            y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal and t > 1)
            return self.proj(y.transpose(1, 2).reshape(b, t, d))

    class Block(nn.Module):
        def __init__(self, d, heads, causal):
            super().__init__()
            self.ln1 = nn.LayerNorm(d)
            self.attn = Attention(d, heads, causal)
            self.ln2 = nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x, cache=None):
            x = x + self.attn(self.ln1(x), cache)
            return x + self.mlp(self.ln2(x))

    return Block


def build_nn():
    """The model classes, made once torch is imported."""
    import torch
    from torch import nn
    from torch.nn import functional as F
    Block = build_transformer_block()

    class GPT(nn.Module):
        def __init__(self, vocab, d, heads, layers, max_len):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(max_len, d)
            self.blocks = nn.ModuleList(Block(d, heads, causal=True) for _ in range(layers))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)

        def forward(self, idx, caches=None, start=0):
            positions = torch.arange(start, start + idx.shape[1], device=idx.device)
            x = self.tok(idx) + self.pos(positions)
            for i, block in enumerate(self.blocks):
                x = block(x, None if caches is None else caches[i])
            return self.head(self.ln(x))

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
            self.skip = nn.Identity()
            if stride != 1 or cin != cout:
                self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            return F.relu(self.body(x) + self.skip(x))

    def resnet(classes, width=64):
        layers = [nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                  nn.MaxPool2d(3, 2, 1)]
        cin = width
        for i, cout in enumerate((width, 2 * width, 4 * width, 8 * width)):
            layers += [BasicBlock(cin, cout, 1 if i == 0 else 2), BasicBlock(cout, cout, 1)]
            cin = cout
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
        return nn.Sequential(*layers)

    return GPT, resnet


def build_unet():
    """The U-Net class, made once torch is imported."""
    import torch
    from torch import nn

    def double_conv(cin, cout):
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    class UNet(nn.Module):
        def __init__(self, cin, classes, width, levels=4):
            super().__init__()
            widths = [width << i for i in range(levels)]  # 64, 128, 256, 512
            self.down = nn.ModuleList()
            c = cin
            for w in widths:
                self.down.append(double_conv(c, w))
                c = w
            self.pool = nn.MaxPool2d(2)
            self.bottom = double_conv(c, 2 * c)
            self.up = nn.ModuleList()
            self.merge = nn.ModuleList()
            c = 2 * c
            for w in reversed(widths):
                self.up.append(nn.ConvTranspose2d(c, w, 2, 2))
                self.merge.append(double_conv(2 * w, w))  # the upsampled half and the skip, concatenated
                c = w
            self.head = nn.Conv2d(c, classes, 1)

        def forward(self, x):
            skips = []
            for block in self.down:
                x = block(x)
                skips.append(x)  # kept alive until its decoder level: the U-Net's long-lived activations
                x = self.pool(x)
            x = self.bottom(x)
            for up, merge in zip(self.up, self.merge):
                x = merge(torch.cat([up(x), skips.pop()], dim=1))
            return self.head(x)

    return UNet


def build_vit():
    """The ViT class, made once torch is imported."""
    import torch
    from torch import nn
    Block = build_transformer_block()

    class ViT(nn.Module):
        def __init__(self, size, patch, d, heads, layers, classes):
            super().__init__()
            self.embed = nn.Conv2d(3, d, patch, patch)
            self.cls = nn.Parameter(torch.zeros(1, 1, d))
            self.pos = nn.Parameter(0.02 * torch.randn(1, (size // patch) ** 2 + 1, d))
            self.blocks = nn.ModuleList(Block(d, heads, causal=False) for _ in range(layers))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, classes)

        def forward(self, images):
            x = self.embed(images).flatten(2).transpose(1, 2)  # (batch, patches, d)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x[:, 0]))

    return ViT


def build_lstm():
    """The LSTM language model class, made once torch is imported."""
    from torch import nn

    class LSTMLM(nn.Module):
        def __init__(self, vocab, embed, hidden, layers):
            super().__init__()
            self.embed = nn.Embedding(vocab, embed)
            self.lstm = nn.LSTM(embed, hidden, layers, batch_first=True, dropout=0.1)
            self.head = nn.Linear(hidden, vocab)

        def forward(self, idx, state=None):
            out, state = self.lstm(self.embed(idx), state)
            return self.head(out), state

    return LSTMLM


def adamw(torch, params, **kw):
    """Fused AdamW where this torch and device have it, else the default."""
    try:
        return torch.optim.AdamW(params, fused=True, **kw)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(params, **kw)


def gpt_train(torch, device, steps, scale, smoke):
    from torch.nn import functional as F
    GPT, _ = build_nn()
    vocab, d, heads, layers, seq, batch = (64, 32, 4, 2, 16, 2) if smoke else (16384, 768, 12, 6, 1024, 8)
    batch = max(1, round(batch * scale))
    model = GPT(vocab, d, heads, layers, seq).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    for _ in range(steps):
        x = torch.randint(0, vocab, (batch, seq), device=device)
        y = torch.randint(0, vocab, (batch, seq), device=device)
        loss = F.cross_entropy(model(x).view(-1, vocab), y.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()  # the host waits each step, as a training loop logging its loss does


def resnet_train(torch, device, steps, scale, smoke):
    from torch.nn import functional as F
    _, resnet = build_nn()
    size, batch, classes = (32, 2, 10) if smoke else (224, 64, 1000)
    batch = max(1, round(batch * scale))
    model = resnet(classes).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    host_images = torch.randn(batch, 3, size, size)
    host_labels = torch.randint(0, classes, (batch,))
    cuda = device.type == "cuda"
    if cuda:
        host_images, host_labels = host_images.pin_memory(), host_labels.pin_memory()
    side = torch.cuda.Stream() if cuda else None

    def fetch():
        """The next batch, copied in on the side stream (a prefetching loader)."""
        if not cuda:
            return host_images.clone(), host_labels.clone()
        with torch.cuda.stream(side):
            return host_images.to(device, non_blocking=True), host_labels.to(device, non_blocking=True)

    images, labels = fetch()
    for _ in range(steps):
        if cuda:
            torch.cuda.current_stream().wait_stream(side)
            images.record_stream(torch.cuda.current_stream())
            labels.record_stream(torch.cuda.current_stream())
        following = fetch()  # overlaps this step
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        images, labels = following
    if cuda:
        side.synchronize()


def encoder_amp_train(torch, device, steps, scale, smoke):
    from torch import nn
    from torch.nn import functional as F
    d, heads, layers, ffn, batch = (32, 4, 2, 64, 2) if smoke else (1024, 16, 8, 4096, 16)
    lengths = (16, 8, 12) if smoke else (512, 256, 768, 384, 1024, 640)
    batch = max(1, round(batch * scale))
    layer = nn.TransformerEncoderLayer(d, heads, ffn, dropout=0.1, batch_first=True, norm_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, layers, enable_nested_tensor=False), nn.Linear(d, 1)).to(device)
    opt = adamw(torch, model.parameters(), lr=1e-4)
    for step in range(steps):
        seq = lengths[step % len(lengths)]
        x = torch.randn(batch, seq, d, device=device)
        target = torch.randn(batch, seq, 1, device=device)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            out = model(x)
        loss = F.mse_loss(out.float(), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()


def gpt_decode(torch, device, steps, scale, smoke):
    GPT, _ = build_nn()
    vocab, d, heads, layers, prompt, batch = (64, 32, 4, 2, 8, 2) if smoke else (16384, 1024, 16, 8, 128, 16)
    batch = max(1, round(batch * scale))
    model = GPT(vocab, d, heads, layers, prompt + steps).to(device, torch.bfloat16).eval()
    with torch.no_grad():
        caches = [{} for _ in range(layers)]
        logits = model(torch.randint(0, vocab, (batch, prompt), device=device), caches)
        for step in range(steps):
            token = logits[:, -1].argmax(-1, keepdim=True)
            logits = model(token, caches, start=prompt + step)
        logits.sum().item()


def unet_train(torch, device, steps, scale, smoke):
    from torch.nn import functional as F
    UNet = build_unet()
    size, width, classes, batch = (32, 4, 3, 2) if smoke else (256, 64, 4, 16)
    batch = max(1, round(batch * scale))
    model = UNet(3, classes, width).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    cuda = device.type == "cuda"
    # fp16 with loss scaling on the GPU, as AMP training does; the CPU (the
    # smoke run) has no GradScaler for its autocast and takes bf16 there.
    scaler = torch.amp.GradScaler("cuda") if cuda else None
    dtype = torch.float16 if cuda else torch.bfloat16
    for _ in range(steps):
        images = torch.randn(batch, 3, size, size, device=device)
        masks = torch.randint(0, classes, (batch, size, size), device=device)
        with torch.autocast(device.type, dtype=dtype):
            logits = model(images)
        loss = F.cross_entropy(logits.float(), masks)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)  # unscales, checks for inf/nan: a few more small blocks per step
            scaler.update()
        else:
            loss.backward()
            opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()


def vit_train(torch, device, steps, scale, smoke):
    from torch.nn import functional as F
    ViT = build_vit()
    micro_batches = 2
    size, d, heads, layers, classes, batch = (32, 32, 4, 2, 10, 2) if smoke else (224, 768, 12, 12, 1000, 64)
    batch = max(1, round(batch * scale))
    model = ViT(size, 16, d, heads, layers, classes).to(device)
    opt = adamw(torch, model.parameters(), lr=1e-4, weight_decay=0.05)
    for _ in range(steps):
        # Gradient accumulation: the .grad tensors made by the first backward
        # stay live through the second micro-batch's forward and backward.
        for _ in range(micro_batches):
            images = torch.randn(batch, 3, size, size, device=device)
            labels = torch.randint(0, classes, (batch,), device=device)
            with torch.autocast(device.type, dtype=torch.bfloat16):
                logits = model(images)
            loss = F.cross_entropy(logits.float(), labels) / micro_batches
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()


def lstm_train(torch, device, steps, scale, smoke):
    from torch.nn import functional as F
    LSTMLM = build_lstm()
    vocab, embed, hidden, batch = (64, 16, 32, 2) if smoke else (16384, 512, 1024, 32)
    lengths = (8, 12, 6) if smoke else (128, 256, 192, 320, 160, 288)
    batch = max(1, round(batch * scale))
    model = LSTMLM(vocab, embed, hidden, 2).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    state = None
    for step in range(steps):
        # A new length each step: cuDNN's RNN workspace and reserve space,
        # and the logits, change size with it.
        seq = lengths[step % len(lengths)]
        x = torch.randint(0, vocab, (batch, seq), device=device)
        y = torch.randint(0, vocab, (batch, seq), device=device)
        logits, state = model(x, state)
        state = tuple(s.detach() for s in state)  # truncated backpropagation: the state outlives the step
        loss = F.cross_entropy(logits.view(-1, vocab), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()


RUNNERS = {"gpt_train": gpt_train, "resnet_train": resnet_train, "encoder_amp_train": encoder_amp_train,
           "gpt_decode": gpt_decode, "unet_train": unet_train, "vit_train": vit_train, "lstm_train": lstm_train}


# ---- one model, in its own process ----------------------------------------------

def child(args):
    """Records one model; prints one line `RECORD {json}`; exit 1 on failure."""
    import torch
    sys.path.insert(0, HERE)
    import snapshot_to_csv

    device = torch.device("cuda")
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    steps = args.steps or DEFAULT_STEPS[args.child]
    torch.cuda.init()
    torch.cuda.memory._record_memory_history(enabled="all", context=None, max_entries=args.max_entries)
    start = time.time()
    RUNNERS[args.child](torch, device, steps, args.scale, smoke=False)
    torch.cuda.synchronize()
    seconds = time.time() - start
    peaks = {"max_allocated_bytes": torch.cuda.max_memory_allocated(),
             "max_reserved_bytes": torch.cuda.max_memory_reserved()}
    gc.collect()
    if hasattr(torch._C, "_cuda_clearCublasWorkspaces"):
        torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    entries = max((len(t) for t in snapshot.get("device_traces") or [[]]), default=0)
    out = os.path.join(args.out, args.child + ".csv.gz")
    stats = snapshot_to_csv.convert(snapshot, out, free_event=args.free_event)
    result = {"model": args.child, "file": os.path.basename(out), "bytes": os.path.getsize(out), "steps": steps,
              "scale": args.scale, "seconds": round(seconds, 3), "trace_entries": entries,
              "ring_buffer_full": entries >= args.max_entries, "free_event": args.free_event}
    result.update(peaks)
    result["converter"] = stats
    print("RECORD " + json.dumps(result, sort_keys=True), flush=True)
    return 0


def smoke(args):
    """Runs every model's code on the CPU at toy sizes, without recording."""
    import torch
    torch.manual_seed(0)
    for name in args.models:
        start = time.time()
        RUNNERS[name](torch, torch.device("cpu"), 2, 1.0, smoke=True)
        print("record_training: smoke %s: ok (%.1f s)" % (name, time.time() - start))
    return 0


# ---- the parent: one child per model, then the summary ----------------------------

def environment(python):
    """torch's version and the GPU, asked of `python` (no CUDA: None)."""
    probe = ("import json, torch; ok = torch.cuda.is_available(); print(json.dumps({'torch': torch.__version__, "
             "'cuda': torch.version.cuda, 'gpu': torch.cuda.get_device_name(0) if ok else None}))")
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def parent(args):
    os.makedirs(args.out, exist_ok=True)
    env = environment(sys.executable)
    if env is None or env["gpu"] is None:
        sys.stderr.write("record_training: no CUDA device for torch here (%s); --smoke checks the models on the "
                         "CPU\n" % (env or "torch did not import"))
        return 2
    print("record_training: torch %s, CUDA %s, %s" % (env["torch"], env["cuda"], env["gpu"]), flush=True)
    summary = {"environment": env, "models": [], "failed": []}
    status = 0
    for name in args.models:
        command = [sys.executable, os.path.abspath(__file__), "--child", name, "--out", args.out, "--scale",
                   str(args.scale), "--max-entries", str(args.max_entries), "--free-event", args.free_event]
        if args.steps:
            command += ["--steps", str(args.steps)]
        start = time.time()
        try:
            run = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
            output, code = run.stdout + run.stderr, run.returncode
        except subprocess.TimeoutExpired as e:
            output, code = "timed out after %d s\n%s" % (CHILD_TIMEOUT_S, e.stdout or ""), -1
        records = [line[len("RECORD "):] for line in output.splitlines() if line.startswith("RECORD ")]
        if code != 0 or not records:
            status = 1
            tail = output.strip().splitlines()[-15:]
            summary["failed"].append({"model": name, "exit": code, "output_tail": tail})
            print("record_training: %s FAILED (exit %s):\n  %s" % (name, code, "\n  ".join(tail)), flush=True)
            continue
        result = json.loads(records[-1])
        result["wall_seconds"] = round(time.time() - start, 1)
        summary["models"].append(result)
        c = result["converter"]
        print("record_training: %s: %s, %.2f MiB, %d rows (%d allocations, %d frees, %d dropped frees, %d live at "
              "end, %d streams), peak live %.0f MiB, torch peak reserved %.0f MiB, %.1f s" % (
                  name, result["file"], result["bytes"] / 2**20, c["rows"], c["allocations"], c["frees"],
                  c["dropped_frees"], c["live_at_end"], c["streams"], c["peak_live_bytes"] / 2**20,
                  result["max_reserved_bytes"] / 2**20, result["wall_seconds"]), flush=True)
        if result["ring_buffer_full"]:
            print("record_training: %s: warning: the history filled --max-entries %d; its oldest entries are "
                  "lost" % (name, args.max_entries), flush=True)
        if result["bytes"] > TOO_BIG:
            print("record_training: %s: warning: %.1f MiB, over %d MiB: lower --steps or --scale" % (
                name, result["bytes"] / 2**20, TOO_BIG >> 20), flush=True)
    with open(os.path.join(args.out, "record_summary.json"), "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True)
        f.write("\n")
    print("record_training: wrote %d traces and record_summary.json to %s" % (len(summary["models"]), args.out))
    return status


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="directory for <model>.csv.gz and record_summary.json")
    parser.add_argument("--models", default=",".join(MODELS),
                        help="comma-separated, from: %s (default: all)" % ", ".join(MODELS))
    parser.add_argument("--steps", type=int, default=0,
                        help="steps (gpt_decode: tokens) for every model (default: each model's own)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every batch size (default 1)")
    parser.add_argument("--max-entries", type=int, default=2_000_000,
                        help="the allocator history's ring buffer, in entries (default 2,000,000)")
    parser.add_argument("--free-event", default="free_completed", choices=("free_completed", "free_requested"),
                        help="which snapshot action becomes the free (snapshot_to_csv.py says why the default)")
    parser.add_argument("--smoke", action="store_true", help="run the models' code on the CPU at toy sizes only")
    parser.add_argument("--child", choices=MODELS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    unknown = [m for m in args.models if m not in RUNNERS]
    if unknown:
        parser.error("unknown model(s): %s" % ", ".join(unknown))
    if args.smoke:
        return smoke(args)
    if not args.out:
        parser.error("--out is required")
    if args.child:
        return child(args)
    return parent(args)


if __name__ == "__main__":
    sys.exit(main())
