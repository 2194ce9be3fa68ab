"""llama_torch.py DIR: checks osdp's Llama step against PyTorch, without osdp's code (see
llama_torch.sh). DIR holds what tests/llama_grads.c wrote: params.safetensors, the fp64 pass's
gradients (grads64 + grads64lo: float32 hi and lo parts), the fp32 pass's (grads32) and run.json
(the model, the batch, both losses, osdp's rotary frequencies).

The reference is a Llama written out the way transformers' modeling_llama / modeling_qwen2 compute
it (embedding, RMSNorm, q/k/v projections with optional bias, rotate-half RoPE, grouped-query
attention through repeat_kv, causal softmax scaled by 1/sqrt(head_dim), o_proj, SwiGLU MLP, final
norm, tied or untied lm_head, cross-entropy averaged over the positions with a target), in float64
with autograd. It runs twice:
  hf:   with the rotary frequencies as transformers computes them (_compute_default_rope_parameters
        and _compute_llama3_parameters, in float32): the goal, loss and every gradient of the fp64
        pass within 1e-5 relative (gradients: max |g_osdp - g_torch| / max |g_torch| per tensor);
  osdp: with osdp's own frequencies (run.json): everything else being the same math in double,
        the fp64 pass must agree to 1e-10 (it does to ~1e-14), so no small mistake hides under
        the first check's tolerance.
The fp32 pass is checked against hf too: its loss within 1e-5 relative and its gradients within
FP32_GRAD_TOL of each tensor's largest (see there). Also osdp's frequencies against
transformers' (float32 rounding apart). Prints per tensor the worst errors and "N passed, M
failed"; exit status 1 on any failure."""
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

# fp32's gradients: float32 rounds each operation to 6e-8 relative; through two layers, the
# attention softmax and the cross-entropy's cancellation (p - onehot) the gradients carry errors
# of about 1e-6 of their largest entry (measured: at most 1.8e-6 for these shapes), so 1e-4
# leaves room for other BLAS builds and thread counts while still catching any real mistake (a
# wrong sign, scale, index or missing term is an O(1e-2) error or larger).
FP32_GRAD_TOL = 1e-4
GOAL_TOL = 1e-5     # the goal: fp64 loss and gradients against the transformers-style reference
EXACT_TOL = 1e-10   # fp64 against the reference using osdp's own rotary frequencies

passed = failed = 0


def check(cond, what):
    """Counts one check, printing what failed."""
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


def read_safetensors(path):
    """Parses a safetensors file by the format's rules; returns {name: float64 tensor}."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    buf = raw[8 + n:]
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        check(e["dtype"] == "F32" and end - b == 4 * math.prod(e["shape"]),
              "%s: %s, %d bytes for shape %s" % (name, e["dtype"], end - b, e["shape"]))
        t = torch.frombuffer(bytearray(buf[b:end]), dtype=torch.float32).reshape(e["shape"])
        out[name] = t.double()
    return out


def hf_inv_freq(m):
    """The rotary inverse frequencies as transformers computes them, in float32:
    _compute_default_rope_parameters, then _compute_llama3_parameters when rope_factor > 0."""
    hs, base = m["head_dim"], m["rope_theta"]
    inv_freq = 1.0 / (base ** (torch.arange(0, hs, 2, dtype=torch.int64).to(dtype=torch.float) / hs))
    factor = m["rope_factor"]
    if factor <= 0:
        return inv_freq
    low, high, old = m["rope_low_freq_factor"], m["rope_high_freq_factor"], m["rope_original_max"]
    low_freq_wavelen, high_freq_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, inv_freq_llama)


def rms_norm(x, w, eps):
    """LlamaRMSNorm (in float64 here instead of transformers' float32 upcast)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    """transformers' rotate_half: (-x2, x1) of the two halves of the last dimension."""
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def repeat_kv(x, n_rep):
    """transformers' repeat_kv: [B, NKV, T, hs] -> [B, NKV*n_rep, T, hs], each K/V head n_rep
    times in a row (query head h uses K/V head h // n_rep)."""
    B, nkv, T, hs = x.shape
    return x[:, :, None, :, :].expand(B, nkv, n_rep, T, hs).reshape(B, nkv * n_rep, T, hs)


def linear(x, p, name, bias):
    """nn.Linear with the weight [out, in] as the file holds it (and name.bias when bias)."""
    y = x @ p[name + ".weight"].T
    return y + p[name + ".bias"] if bias else y


def attention(x, p, pre, m, cos, sin):
    """LlamaAttention / Qwen2Attention (eager) on the normalised x [B, T, C]."""
    B, T, _ = x.shape
    NH, NKV, hs, bias = m["n_head"], m["n_kv_head"], m["head_dim"], m["qkv_bias"]
    q = linear(x, p, pre + "q_proj", bias).view(B, T, NH, hs).transpose(1, 2)
    k = linear(x, p, pre + "k_proj", bias).view(B, T, NKV, hs).transpose(1, 2)
    v = linear(x, p, pre + "v_proj", bias).view(B, T, NKV, hs).transpose(1, 2)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    k, v = repeat_kv(k, NH // NKV), repeat_kv(v, NH // NKV)
    s = (q @ k.transpose(2, 3)) / math.sqrt(hs)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    a = s.masked_fill(~mask, float("-inf")).softmax(-1)
    y = (a @ v).transpose(1, 2).reshape(B, T, NH * hs)
    return linear(y, p, pre + "o_proj", False)


def llama_loss(p, m, tokens, targets, inv_freq):
    """The mean cross-entropy of LlamaForCausalLM / Qwen2ForCausalLM over the positions with a
    target (targets < 0 ignored), float64, rotary frequencies inv_freq [hs/2]."""
    B, T = tokens.shape
    eps = m["norm_eps"]
    x = p["model.embed_tokens.weight"][tokens]
    freqs = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq.double()[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()   # attention_scaling is 1 for default and llama3 rope
    for l in range(m["n_layer"]):
        pre = "model.layers.%d." % l
        h = rms_norm(x, p[pre + "input_layernorm.weight"], eps)
        x = x + attention(h, p, pre + "self_attn.", m, cos, sin)
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps)
        g = F.silu(linear(h, p, pre + "mlp.gate_proj", False)) * linear(h, p, pre + "mlp.up_proj", False)
        x = x + linear(g, p, pre + "mlp.down_proj", False)
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if m["tied_head"] else p["lm_head.weight"]
    logits = x @ head.T
    t = targets.clone()
    t[t < 0] = -100
    return F.cross_entropy(logits.view(B * T, -1), t.view(-1), ignore_index=-100)


def reference(params, m, tokens, targets, inv_freq):
    """Loss and {name: gradient} of the reference at params (as float64 leaves)."""
    p = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    loss = llama_loss(p, m, tokens, targets, inv_freq)
    loss.backward()
    # A tensor the loss does not reach gets a zero gradient (compare flags it).
    return loss.item(), {k: v.grad if v.grad is not None else torch.zeros_like(v)
                         for k, v in p.items()}


def rel_err(a, b):
    """max |a - b| / max |b| (0 when both are 0)."""
    d, s = (a - b).abs().max().item(), b.abs().max().item()
    return d / s if s > 0 else d


def compare(label, g_osdp, g_ref, tol):
    """Checks every tensor's gradient; returns {name: error} and the worst."""
    errs = {}
    check(set(g_osdp) == set(g_ref), "%s: tensor names differ: %s" % (label, set(g_osdp) ^ set(g_ref)))
    for name in sorted(g_ref):
        if name not in g_osdp:
            continue
        ok = g_osdp[name].shape == g_ref[name].shape
        check(ok, "%s: %s shape %s, reference %s" % (label, name, list(g_osdp[name].shape),
                                                      list(g_ref[name].shape)))
        errs[name] = rel_err(g_osdp[name], g_ref[name]) if ok else float("inf")
        check(g_ref[name].abs().max().item() > 0, "%s: %s has no gradient: the test would not "
              "see it" % (label, name))
        check(errs[name] < tol, "%s: %s gradient error %.3e >= %g" % (label, name, errs[name], tol))
    return errs


def main():
    d = sys.argv[1]
    run = json.load(open(os.path.join(d, "run.json")))
    m, B, T = run["model"], run["B"], run["T"]
    tokens = torch.tensor(run["tokens"], dtype=torch.int64).view(B, T)
    targets = torch.tensor(run["targets"], dtype=torch.int64).view(B, T)
    params = read_safetensors(os.path.join(d, "params.safetensors"))
    hi = read_safetensors(os.path.join(d, "grads64.safetensors"))
    lo = read_safetensors(os.path.join(d, "grads64lo.safetensors"))
    g64 = {k: hi[k] + lo[k] for k in hi}
    g32 = read_safetensors(os.path.join(d, "grads32.safetensors"))
    check(("lm_head.weight" in params) == (not m["tied_head"]), "lm_head.weight present iff untied")

    inv_hf = hf_inv_freq(m).double()
    inv_osdp = torch.tensor(run["inv_freq"], dtype=torch.float64)
    # Per entry, within two float32 roundings: osdp rounds a double pow to float32 where torch's
    # float32 pow may be an ulp off, and runs the llama3 scaling in double (its interpolated
    # band is not rounded to float32 as transformers' buffer is).
    same_shape = inv_osdp.shape == inv_hf.shape
    e_inv = ((inv_osdp - inv_hf).abs() / inv_hf).max().item() if same_shape else float("inf")
    check(e_inv <= 2.5e-7, "inv_freq: osdp's and transformers' differ by %.3e relative" % e_inv)
    loss_hf, ref_hf = reference(params, m, tokens, targets, inv_hf)
    loss_os, ref_os = reference(params, m, tokens, targets, inv_osdp)

    rel = lambda a, b: abs(a - b) / abs(b)
    for label, loss, ref, tol in (("fp64 vs hf", run["loss64"], loss_hf, GOAL_TOL),
                                  ("fp64 vs osdp-rope", run["loss64"], loss_os, EXACT_TOL),
                                  ("fp32 vs hf", run["loss32"], loss_hf, GOAL_TOL)):
        check(rel(loss, ref) < tol, "%s: loss %.15g vs %.15g (relative %.3e >= %g)"
              % (label, loss, ref, rel(loss, ref), tol))
    e64 = compare("fp64 vs hf", g64, ref_hf, GOAL_TOL)
    eos = compare("fp64 vs osdp-rope", g64, ref_os, EXACT_TOL)
    e32 = compare("fp32 vs hf", g32, ref_hf, FP32_GRAD_TOL)

    print("%s: B=%d T=%d, loss fp64 %.15g, fp32 %.9g, reference %.15g" %
          (m["name"], B, T, run["loss64"], run["loss32"], loss_hf))
    print("  inv_freq osdp vs transformers: %.3e relative (worst entry)" % e_inv)
    print("  loss relative error: fp64 vs hf %.3e, fp64 vs osdp-rope %.3e, fp32 vs hf %.3e" %
          (rel(run["loss64"], loss_hf), rel(run["loss64"], loss_os), rel(run["loss32"], loss_hf)))
    print("  %-48s %10s %10s %10s %10s" % ("gradient (max|d| / max|g|)", "max|g|", "fp64-hf",
                                          "fp64-osdp", "fp32-hf"))
    for name in sorted(ref_hf):
        print("  %-48s %10.3e %10.3e %10.3e %10.3e" % (name, ref_hf[name].abs().max().item(),
              e64.get(name, float("nan")), eos.get(name, float("nan")), e32.get(name, float("nan"))))
    worst = lambda e: max(e.values()) if e else float("nan")
    print("  worst: fp64 vs hf %.3e, fp64 vs osdp-rope %.3e, fp32 vs hf %.3e" %
          (worst(e64), worst(eos), worst(e32)))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
