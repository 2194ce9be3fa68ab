"""safetensors_torch.py ST LLMC TOKENS T LOSS: checks osdp's safetensors file ST without osdp's
code (see safetensors_torch.sh): the format's rules, Hugging Face GPT-2 names and shapes, equality
with the llm.c checkpoint LLMC it was exported from, and that a GPT-2 computed as transformers
does reproduces LOSS, osdp's first-step loss on windows of T tokens of the llm.c token file
TOKENS. Prints "N passed, M failed"; exit status 1 on any failure."""
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F

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
    """Parses a safetensors file by the format's rules alone; returns (metadata, {name: tensor})."""
    raw = open(path, "rb").read()
    check(len(raw) >= 8, "file shorter than the 8-byte header size")
    (n,) = struct.unpack("<Q", raw[:8])
    check(8 + n <= len(raw), "header size past the end of the file")
    check((8 + n) % 8 == 0, "buffer not 8-byte aligned (osdp pads its header)")
    text = raw[8:8 + n].decode("utf-8")
    check(text.startswith("{"), "header does not start with '{'")
    body = text.rstrip(" ")
    check(body.endswith("}") and len(text) - len(body) < 8, "header padding is not < 8 spaces")
    header = json.loads(text)
    meta = header.pop("__metadata__", {})
    check(all(isinstance(v, str) for v in meta.values()), "metadata values must be strings")
    check(meta.get("format") == "pt", "__metadata__.format is not 'pt'")
    buf = raw[8 + n:]
    at = 0
    tensors = {}
    for name, e in sorted(header.items(), key=lambda kv: tuple(kv[1]["data_offsets"])):
        b, end = e["data_offsets"]
        check(b == at, "%s starts at %d, not at the previous end %d" % (name, b, at))
        check(e["dtype"] == "F32", "%s has dtype %s" % (name, e["dtype"]))
        numel = math.prod(e["shape"])
        check(end - b == 4 * numel, "%s: %d bytes for shape %s" % (name, end - b, e["shape"]))
        tensors[name] = torch.frombuffer(bytearray(buf[b:end]), dtype=torch.float32).reshape(e["shape"])
        at = end
    check(at == len(buf), "tensors cover %d of %d buffer bytes" % (at, len(buf)))
    return meta, tensors


def read_llmc(path):
    """Parses an llm.c GPT-2 checkpoint (version 3); returns (header ints, {llm.c name: tensor})."""
    raw = open(path, "rb").read()
    h = struct.unpack("<256i", raw[:1024])
    check(h[0] == 20240326 and h[1] == 3, "llm.c magic/version")
    maxT, V, L, NH, C, Vp = h[2], h[3], h[4], h[5], h[6], h[7]
    shapes = [("wte", [Vp, C]), ("wpe", [maxT, C]), ("ln1w", [L, C]), ("ln1b", [L, C]),
              ("qkvw", [L, 3 * C, C]), ("qkvb", [L, 3 * C]), ("attprojw", [L, C, C]),
              ("attprojb", [L, C]), ("ln2w", [L, C]), ("ln2b", [L, C]), ("fcw", [L, 4 * C, C]),
              ("fcb", [L, 4 * C]), ("fcprojw", [L, C, 4 * C]), ("fcprojb", [L, C]),
              ("lnfw", [C]), ("lnfb", [C])]
    at = 1024
    out = {}
    for name, shape in shapes:
        n = 4 * math.prod(shape)
        out[name] = torch.frombuffer(bytearray(raw[at:at + n]), dtype=torch.float32).reshape(shape)
        at += n
    check(at == len(raw), "llm.c file size")
    return h, out


def same(a, b):
    """Bitwise equality of two float32 tensors."""
    return a.shape == b.shape and torch.equal(a.view(torch.int32), b.contiguous().view(torch.int32))


def gpt2_logits(sd, cfg, idx):
    """Logits of GPT-2 as transformers' modeling_gpt2 computes them, in float64, for token ids idx
    [T]: Conv1D is x @ W + b with W [in, out]; the LM head is the tied wte."""
    p = {k: v.double() for k, v in sd.items()}
    C, NH, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    T = idx.shape[0]
    hs = C // NH
    ln = lambda x, pre: F.layer_norm(x, (C,), p[pre + ".weight"], p[pre + ".bias"], eps=1e-5)
    conv1d = lambda x, pre: x @ p[pre + ".weight"] + p[pre + ".bias"]
    x = p["wte.weight"][idx] + p["wpe.weight"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(L):
        h = "h.%d." % i
        q, k, v = conv1d(ln(x, h + "ln_1"), h + "attn.c_attn").split(C, dim=-1)
        q, k, v = (t.view(T, NH, hs).transpose(0, 1) for t in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(0, 1).reshape(T, C)
        x = x + conv1d(y, h + "attn.c_proj")
        m = F.gelu(conv1d(ln(x, h + "ln_2"), h + "mlp.c_fc"), approximate="tanh")  # gelu_new
        x = x + conv1d(m, h + "mlp.c_proj")
    return ln(x, "ln_f") @ p["wte.weight"].T


def main():
    st_path, llmc_path, tok_path, T, osdp_loss = sys.argv[1:6]
    T, osdp_loss = int(T), float(osdp_loss)
    meta, st = read_safetensors(st_path)
    cfg = {k: int(meta[k]) for k in ("n_layer", "n_head", "n_embd", "vocab_size", "max_seq")}
    L, C, V, maxT = cfg["n_layer"], cfg["n_embd"], cfg["vocab_size"], cfg["max_seq"]

    # Hugging Face's names and shapes, no prefix, no lm_head (tied).
    want = {"wte.weight": [V, C], "wpe.weight": [maxT, C], "ln_f.weight": [C], "ln_f.bias": [C]}
    for i in range(L):
        for suffix, shape in (("ln_1.weight", [C]), ("ln_1.bias", [C]),
                              ("attn.c_attn.weight", [C, 3 * C]), ("attn.c_attn.bias", [3 * C]),
                              ("attn.c_proj.weight", [C, C]), ("attn.c_proj.bias", [C]),
                              ("ln_2.weight", [C]), ("ln_2.bias", [C]),
                              ("mlp.c_fc.weight", [C, 4 * C]), ("mlp.c_fc.bias", [4 * C]),
                              ("mlp.c_proj.weight", [4 * C, C]), ("mlp.c_proj.bias", [C])):
            want["h.%d.%s" % (i, suffix)] = shape
    check(set(st) == set(want), "tensor names differ from GPT-2's: %s" % sorted(set(st) ^ set(want)))
    for name, shape in want.items():
        check(name in st and list(st[name].shape) == shape, "%s shape" % name)

    # The same weights as the llm.c checkpoint (whose weights are [out, in] and wte [Vp, C]).
    h, lc = read_llmc(llmc_path)
    check((h[2], h[3], h[4], h[5], h[6]) == (maxT, V, L, cfg["n_head"], C), "llm.c header shape")
    check(int(meta.get("padded_vocab", "0")) == h[7], "padded_vocab metadata")
    check(same(st["wte.weight"], lc["wte"][:V]), "wte = llm.c wte[:V]")
    check(bool((lc["wte"][V:] == 0).all()), "llm.c wte padding rows are zero")
    check(same(st["wpe.weight"], lc["wpe"]), "wpe")
    check(same(st["ln_f.weight"], lc["lnfw"]) and same(st["ln_f.bias"], lc["lnfb"]), "ln_f")
    pairs = (("ln_1.weight", "ln1w", 0), ("ln_1.bias", "ln1b", 0), ("attn.c_attn.weight", "qkvw", 1),
             ("attn.c_attn.bias", "qkvb", 0), ("attn.c_proj.weight", "attprojw", 1),
             ("attn.c_proj.bias", "attprojb", 0), ("ln_2.weight", "ln2w", 0), ("ln_2.bias", "ln2b", 0),
             ("mlp.c_fc.weight", "fcw", 1), ("mlp.c_fc.bias", "fcb", 0),
             ("mlp.c_proj.weight", "fcprojw", 1), ("mlp.c_proj.bias", "fcprojb", 0))
    for i in range(L):
        for hf, ll, transpose in pairs:
            ref = lc[ll][i].T if transpose else lc[ll][i]
            check(same(st["h.%d.%s" % (i, hf)], ref), "h.%d.%s = llm.c %s[%d]%s" % (i, hf, ll, i, ".T" * transpose))

    try:
        from safetensors.torch import load_file
        lib = load_file(st_path)
        check(set(lib) == set(st) and all(same(lib[k], st[k]) for k in st), "safetensors.torch.load_file differs")
        print("safetensors %s: load_file agrees" % __import__("safetensors").__version__)
    except ImportError:
        print("no safetensors package: its reader not compared")

    # The loss osdp reported is the reference's on one phase of the periodic token file.
    raw = open(tok_path, "rb").read()
    ntok = struct.unpack("<i", raw[8:12])[0]
    toks = torch.tensor(struct.unpack("<%dH" % ntok, raw[1024:1024 + 2 * ntok]), dtype=torch.long)
    period = next(pp for pp in range(1, ntok) if torch.equal(toks[pp:2 * pp], toks[:pp]))
    losses = []
    for ph in range(period):
        logits = gpt2_logits(st, cfg, toks[ph:ph + T])
        losses.append(F.cross_entropy(logits, toks[ph + 1:ph + T + 1]).item())
    best = min(losses, key=lambda l: abs(l - osdp_loss))
    print("osdp first-step loss %.7f; reference per phase: %s" % (osdp_loss, " ".join("%.7f" % l for l in losses)))
    check(abs(best - osdp_loss) <= 1e-4 * max(1.0, abs(best)), "osdp's loss %.7f matches no phase" % osdp_loss)
    check(min(abs(a - b) for i, a in enumerate(losses) for b in losses[i + 1:]) > 1e-3,
          "phases' losses too close to tell apart")

    try:
        import os
        import shutil
        import tempfile
        import transformers
        import safetensors  # noqa: F401  (from_pretrained reads model.safetensors with it)
        d = tempfile.mkdtemp()
        json.dump({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": V,
                   "n_positions": maxT, "n_embd": C, "n_layer": L, "n_head": cfg["n_head"],
                   "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
                   "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
                   "tie_word_embeddings": True}, open(os.path.join(d, "config.json"), "w"))
        shutil.copy(st_path, os.path.join(d, "model.safetensors"))
        model = transformers.GPT2LMHeadModel.from_pretrained(d, torch_dtype=torch.float32).eval()
        with torch.no_grad():
            hf = model(toks[None, :T]).logits[0].double()
        ours = gpt2_logits(st, cfg, toks[:T])
        check(torch.allclose(hf, ours, rtol=1e-4, atol=1e-4), "GPT2LMHeadModel's logits differ from the reference")
        check(same(model.lm_head.weight.detach(), st["wte.weight"]), "GPT2LMHeadModel's lm_head is not wte")
        shutil.rmtree(d)
        print("transformers %s: GPT2LMHeadModel.from_pretrained agrees" % transformers.__version__)
    except ImportError:
        print("no transformers (or safetensors) package: from_pretrained not tried")

    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
