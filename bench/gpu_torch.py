#!/usr/bin/env python3
"""gpu_torch.py: a plain PyTorch GPT-2 training step, the reference osdp's CUDA backend is
measured against (bench/gpu_bench.sh runs both at the same shape, batch and precision).

The model has osdp's gpt2-124m shape (src/model/gpt.c): n_layer 12, n_head 12, n_embd 768,
vocabulary 50257 padded to 50304 (the next multiple of 128, as osdp and llm.c pad it), seq 1024,
learned position embeddings, pre-LayerNorm blocks, GELU (tanh), causal attention through
F.scaled_dot_product_attention, the LM head tied to the token embedding, cross-entropy on random
tokens. The optimizer is AdamW (lr 1e-3, betas 0.9/0.95, weight decay 0.1 on matrices and
embeddings, none on biases and LayerNorm; the fused CUDA kernel where PyTorch has it), with the
gradient norm clipped to 1.0.

Precision: fp32 runs fp32 weights and activations with TF32 matmuls and convolutions allowed
(torch.backends.cuda.matmul.allow_tf32 and cudnn.allow_tf32); bf16 runs the forward and backward
under torch.autocast(bfloat16) with fp32 master weights and optimizer state.

Throughput: tokens/s = B*T / median step time, each step timed with CUDA events (on the CPU,
perf_counter) after --warmup steps that are not timed. Peak memory: torch.cuda.max_memory_allocated
over the whole run (weights, gradients, optimizer state and activations, like osdp's peak_bytes).

FLOPs per token are counted as osdp's gpt_step_flops counts them (src/model/gpt.c), so MFU is
comparable on both sides: 3 x the forward matrix-product FLOPs, i.e.
    flops_per_token = 6 * (12 * n_layer * n_embd^2 + n_embd * padded_vocab) + 12 * n_layer * seq * n_embd
(the weights of every linear and the tied LM head, plus attention's two T x T products over the
full square). That is the PaLM / llm.c estimate 6*N + 12*L*T*C with N the matrix weights only: it
leaves out biases, LayerNorm and the position embedding (about 0.1% of the FLOPs of 6*N with all
parameters, which is also reported as flops_per_token_6n). MFU = flops_per_token * tokens/s /
peak FLOP/s, the peak from --peak-tflops, by default NVIDIA's dense H200 SXM figures: 494.7 TFLOP/s
TF32 (fp32 runs) and 989.4 TFLOP/s BF16.

--compile wraps the model in torch.compile; where torch.compile is missing or fails, the run
reports that (JSON "error", exit status 3) instead of a traceback. --device cpu with a tiny shape
(--n-layer 2 --n-embd 64 --n-head 4 --vocab 300 --seq 32 --batch 2) is a smoke test that needs no
GPU.
"""
import argparse
import json
import math
import statistics
import sys
import time

PEAK_TFLOPS = {"fp32": 494.7, "bf16": 989.4}
PEAK_SOURCE = "NVIDIA H200 SXM dense peak (TF32 494.7, BF16 989.4 TFLOP/s)"


def padded(v):
    return (v + 127) // 128 * 128


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before them")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--device", default="cuda", help="cuda or cpu")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="peak FLOP/s for MFU (default: H200 SXM dense, TF32 494.7 / BF16 989.4)")
    p.add_argument("--n-layer", type=int, default=12)
    p.add_argument("--n-head", type=int, default=12)
    p.add_argument("--n-embd", type=int, default=768)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--max-seq", type=int, default=1024, help="rows of the position embedding")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    return p.parse_args(argv)


def emit(args, rec, code=0):
    if args.json:
        print(json.dumps(rec), flush=True)
    else:
        for k, v in rec.items():
            print(f"{k:>24}: {v}")
    sys.exit(code)


def build_model(torch, cfg):
    nn = torch.nn
    F = torch.nn.functional
    sdpa = getattr(F, "scaled_dot_product_attention", None)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(cfg["C"], 3 * cfg["C"])
            self.c_proj = nn.Linear(cfg["C"], cfg["C"])
            self.c_proj.residual = True

        def forward(self, x):
            B, T, C = x.shape
            nh = cfg["NH"]
            q, k, v = self.c_attn(x).split(C, dim=2)
            q = q.view(B, T, nh, C // nh).transpose(1, 2)
            k = k.view(B, T, nh, C // nh).transpose(1, 2)
            v = v.view(B, T, nh, C // nh).transpose(1, 2)
            if sdpa is not None:
                y = sdpa(q, k, v, is_causal=True)
            else:  # PyTorch < 2.0 (only for the CPU smoke test)
                att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
                mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
                y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            C = cfg["C"]
            self.ln_1 = nn.LayerNorm(C)
            self.attn = Attention()
            self.ln_2 = nn.LayerNorm(C)
            self.c_fc = nn.Linear(C, 4 * C)
            self.c_proj = nn.Linear(4 * C, C)
            self.c_proj.residual = True

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            C = cfg["C"]
            self.wte = nn.Embedding(cfg["Vp"], C)
            self.wpe = nn.Embedding(cfg["maxT"], C)
            self.h = nn.ModuleList(Block() for _ in range(cfg["L"]))
            self.ln_f = nn.LayerNorm(C)
            self.lm_head = nn.Linear(C, cfg["Vp"], bias=False)
            self.lm_head.weight = self.wte.weight  # tied
            for name, m in self.named_modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    std = 0.02 / math.sqrt(2 * cfg["L"]) if getattr(m, "residual", False) else 0.02
                    if name != "lm_head":
                        nn.init.normal_(m.weight, mean=0.0, std=std)
                    if isinstance(m, nn.Linear) and m.bias is not None:
                        nn.init.zeros_(m.bias)

        def forward(self, idx, targets):
            B, T = idx.shape
            pos = torch.arange(T, device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for b in self.h:
                x = b(x)
            logits = self.lm_head(self.ln_f(x))
            # Over the padded vocabulary, as one matmul; the padding rows are never targets.
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    return GPT()


def main(argv):
    args = parse_args(argv)
    rec = {"impl": "torch_compile" if args.compile else "torch_eager", "precision": args.precision,
           "device": args.device, "batch": args.batch, "seq": args.seq, "steps": args.steps,
           "warmup": args.warmup}
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        rec["error"] = f"PyTorch not importable: {e}"
        emit(args, rec, 2)
    rec["torch_version"] = torch.__version__
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        rec["error"] = "CUDA not available to PyTorch"
        emit(args, rec, 2)
    dev = torch.device(args.device)
    if cuda:
        rec["gpu"] = torch.cuda.get_device_name(dev)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    rec["tf32"] = bool(cuda)  # on for both precisions on CUDA (bf16: the fp32 parts, optimizer)
    if args.precision == "bf16" and not cuda and not hasattr(torch, "autocast"):
        rec["error"] = "torch.autocast missing"
        emit(args, rec, 2)

    L, C, NH, V, T, B = args.n_layer, args.n_embd, args.n_head, args.vocab, args.seq, args.batch
    cfg = {"L": L, "C": C, "NH": NH, "Vp": padded(V), "maxT": max(args.max_seq, T)}
    torch.manual_seed(1234)
    model = build_model(torch, cfg).to(dev)
    n_params = sum(p.numel() for p in model.parameters())  # the tied weight once
    rec.update(n_layer=L, n_head=NH, n_embd=C, vocab=V, padded_vocab=cfg["Vp"], n_params=n_params)
    fpt = 6.0 * (12 * L * C * C + C * cfg["Vp"]) + 12.0 * L * T * C
    rec["flops_per_token"] = fpt
    rec["flops_formula"] = "6*(12*L*C^2 + C*Vp) + 12*L*T*C (osdp's gpt_step_flops / (B*T))"
    rec["flops_per_token_6n"] = 6.0 * n_params + 12.0 * L * T * C

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    opt_kw = {"lr": 1e-3, "betas": (0.9, 0.95), "eps": 1e-8}
    opt = None
    if cuda:
        try:
            opt = torch.optim.AdamW(groups, fused=True, **opt_kw)
            rec["optimizer"] = "AdamW fused"
        except (TypeError, RuntimeError):
            opt = None
    if opt is None:
        opt = torch.optim.AdamW(groups, **opt_kw)
        rec["optimizer"] = "AdamW"

    step_model = model
    if args.compile:
        if not hasattr(torch, "compile"):
            rec["error"] = f"torch.compile not available in PyTorch {torch.__version__}"
            emit(args, rec, 3)
        try:
            step_model = torch.compile(model)
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"torch.compile failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
            emit(args, rec, 3)

    gen = torch.Generator(device="cpu").manual_seed(42)
    batches = []
    for _ in range(2):
        tok = torch.randint(0, V, (B, T + 1), generator=gen)
        batches.append((tok[:, :-1].contiguous().to(dev), tok[:, 1:].contiguous().to(dev)))

    amp = args.precision == "bf16"

    def step(i):
        x, y = batches[i % 2]
        opt.zero_grad(set_to_none=True)
        if amp:
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                loss = step_model(x, y)
        else:
            loss = step_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    losses = []
    t0 = time.perf_counter()
    try:
        for i in range(args.warmup):
            losses.append(step(i))
            if i == 0:
                sync()
                rec["first_step_s"] = round(time.perf_counter() - t0, 3)  # includes compilation
        sync()
        rec["warmup_s"] = round(time.perf_counter() - t0, 3)
        times = []
        if cuda:
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(args.steps)]
            for i in range(args.steps):
                ev[i][0].record()
                losses.append(step(args.warmup + i))
                ev[i][1].record()
            sync()
            times = [a.elapsed_time(b) / 1e3 for a, b in ev]
        else:
            for i in range(args.steps):
                s = time.perf_counter()
                losses.append(step(args.warmup + i))
                times.append(time.perf_counter() - s)
    except Exception as e:  # noqa: BLE001 - OOM, compile errors raised on first call, ...
        first = str(e).splitlines()[0][:300] if str(e) else ""
        what = "torch.compile failed" if args.compile else "step failed"
        rec["error"] = f"{what}: {type(e).__name__}: {first}"
        emit(args, rec, 3 if args.compile else 1)

    med = statistics.median(times)
    tps = B * T / med
    rec["ms_per_step"] = round(1e3 * med, 3)
    rec["ms_per_step_mean"] = round(1e3 * sum(times) / len(times), 3)
    rec["ms_per_step_min"] = round(1e3 * min(times), 3)
    rec["tokens_per_s"] = round(tps, 1)
    peak = args.peak_tflops if args.peak_tflops else (PEAK_TFLOPS[args.precision] if cuda else None)
    rec["peak_tflops"] = peak
    rec["peak_tflops_source"] = ("--peak-tflops" if args.peak_tflops else
                                 PEAK_SOURCE if cuda else "none: no MFU on the CPU without --peak-tflops")
    rec["achieved_tflops"] = round(fpt * tps / 1e12, 3)
    rec["mfu"] = round(fpt * tps / (peak * 1e12), 4) if peak else None
    if cuda:
        rec["peak_bytes"] = torch.cuda.max_memory_allocated(dev)
        rec["peak_reserved_bytes"] = torch.cuda.max_memory_reserved(dev)
    rec["loss_first"] = round(float(losses[0]), 4)
    rec["loss_last"] = round(float(losses[-1]), 4)
    if not all(math.isfinite(float(x)) for x in losses):
        rec["error"] = "non-finite loss"
        emit(args, rec, 1)
    emit(args, rec, 0)


if __name__ == "__main__":
    main(sys.argv[1:])
