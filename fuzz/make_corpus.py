#!/usr/bin/env python3
# make_corpus.py OSDP_BINARY: regenerates the seed inputs of fuzz/corpus/<name>/ (files named
# seed-*): valid files written by osdp itself for a micro model (1 layer, hidden 4, vocabulary
# 14, 8 positions) or for tiny, and hand-made invalid variants of them that stop at each check.
# Inputs the fuzzer found or that reproduce a fixed bug (regress-*) are left alone. Needs python3 and, for the device file,
# mpirun (osdp profile on 2 ranks).
import json, os, shutil, struct, subprocess, sys, tempfile

osdp = os.path.abspath(sys.argv[1])
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
tmp = tempfile.mkdtemp(prefix="osdp-corpus-")
MICRO = {"n_layer": 1, "n_embd": 4, "n_head": 2, "vocab_size": 14, "max_seq": 8, "name": "micro"}


def run(*args):
    """Runs osdp with args in the temporary directory; fails loudly."""
    subprocess.run([osdp, *args], cwd=tmp, env=env, check=True, stdout=subprocess.DEVNULL)


def put(target, name, data):
    """Writes one seed input (bytes or str) as fuzz/corpus/<target>/seed-<name>."""
    d = os.path.join(root, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def jdump(o):
    """Compact JSON text."""
    return json.dumps(o, separators=(",", ":"))


def read(name):
    """Bytes of a file osdp wrote in the temporary directory."""
    with open(os.path.join(tmp, name), "rb") as f:
        return f.read()


for d in os.listdir(root) if os.path.isdir(root) else []:
    for f in os.listdir(os.path.join(root, d)):
        if f.startswith("seed-"):
            os.remove(os.path.join(root, d, f))

# ---- JSON documents: one meaning each (duplicate keys, content after the document) --------
put("json", "valid.json", '{"a":1,"b":{"c":[1,{"d":2}]}}\n')
put("json", "dup-top.json", '{"model_type":"gpt2","model_type":"llama"}')
put("json", "dup-nested.json", '{"a":{"x":1,"x":2},"b":[{"y":1,"y":1}]}')
put("json", "dup-wide.json", "{" + ",".join('"k%d":%d' % (i, i) for i in range(20)) + ',"k7":0}')
put("json", "wide-unique.json", "{" + ",".join('"k%d":%d' % (i, i) for i in range(40)) + "}")
put("json", "trailing.json", '{"n_layer":2} {"n_layer":3}')
put("json", "trailing-space.json", '{"n_layer":2}  \n\t\r\n')
put("json", "array.json", '[{"a":1,"a":1}]')

# ---- model JSON ------------------------------------------------------------------------
put("model", "micro.json", jdump(MICRO))
put("model", "tiny-like.json", '{"n_layer":2,"n_embd":64,"n_head":4,"vocab_size":256,"max_seq":256}')
put("model", "empty.json", "")
put("model", "array.json", "[1,2,3]")
put("model", "missing.json", '{"n_layer":1,"n_embd":4,"n_head":2,"vocab_size":14}')
put("model", "fraction.json", '{"n_layer":1.5,"n_embd":4,"n_head":2,"vocab_size":14,"max_seq":8}')
put("model", "heads.json", '{"n_layer":1,"n_embd":6,"n_head":4,"vocab_size":14,"max_seq":8}')
put("model", "huge.json", '{"n_layer":1e300,"n_embd":4,"n_head":2,"vocab_size":14,"max_seq":8}')
put("model", "limits.json", '{"n_layer":1000,"n_embd":65536,"n_head":65536,"vocab_size":16777216,"max_seq":65536,'
    '"name":"a-name-longer-than-the-forty-eight-bytes-a-config-keeps"}')
put("model", "truncated.json", '{"n_layer":1,"n_embd":4,"n_he')

# ---- plan JSON (for tiny) ----------------------------------------------------------------
with open(os.path.join(tmp, "micro.json"), "w") as f:
    f.write(jdump(MICRO))
run("plan", "--model", "tiny", "--ranks", "2", "--mem-limit", "64MiB", "--flops", "1e11",
    "--bandwidth", "1e9", "--latency", "1e-5", "--seq", "32", "--out", "plan.json")
plan = json.loads(read("plan.json"))
put("plan", "osdp-plan.json", read("plan.json"))
rich = json.loads(read("plan.json"))
rich["prefetch"] = True
rich["ops"][0]["slices"] = ["zero3", "zero2", "dp", "zero3", "zero3", "zero3", "dp", "zero2"]
rich["ops"][2]["slices"] = ["zero3", "zero3"]
rich["layers"] = [{"layer": 0, "recompute": True}, {"layer": 1, "recompute": False}]
put("plan", "rich.json", jdump(rich))
for name, change in [
        ("other-model", lambda p: p["model"].update(n_embd=32)),
        ("unknown-op", lambda p: p["ops"].append({"name": "h9.qkv", "slices": ["dp"]})),
        ("no-params-op", lambda p: p["ops"].append({"name": "h0.attn", "slices": ["dp"]})),
        ("nine-slices", lambda p: p["ops"][1].update(slices=["dp"] * 9)),
        ("bad-strategy", lambda p: p["ops"][2].update(slices=["zero4"])),
        ("bad-layer", lambda p: p.update(layers=[{"layer": 5, "recompute": True}])),
        ("prefetch-number", lambda p: p.update(prefetch=1)),
        ("world-zero", lambda p: p.update(world_size=0)),
        ("huge-batch", lambda p: p.update(micro_batch=1e30)),
        ("ln-slices", lambda p: p["ops"][1].update(slices=["dp", "dp"]))]:
    p = json.loads(read("plan.json"))
    change(p)
    put("plan", name + ".json", jdump(p))
put("plan", "not-object.json", '"plan"')

# ---- device JSON -------------------------------------------------------------------------
subprocess.run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2", osdp, "profile",
                "--model", "tiny", "--seq", "32", "--out", "device.json"], cwd=tmp, env=env,
               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
dev = json.loads(read("device.json"))
put("device", "osdp-profile.json", jdump(dev))
small = {"ranks": 8, "mem_limit": "8GiB", "threads": 2, "device": "cuda", "flops": 9.4e10,
         "optimizer_s_per_param": 1.5e-9,
         "collectives": {k: {"latency_s": 2e-5, "bandwidth_Bps": 3e8, "overlap": 0.3,
                             "residual": 0.05, "in_step": 1.2,
                             "points": [[1024, 1e-5], [4096, 2e-5]]}
                         for k in ("allreduce", "allgather", "reduce_scatter")},
         "compute": {"model": "tiny", "seq": 64, "ops": [
             {"name": "h0.qkv", "fixed_s": 1e-4, "per_sample_s": 2e-3,
              "slices": [{"k": 2, "fixed_s": 1e-4, "per_sample_s": 2e-3},
                         {"k": 8, "fixed_s": 2e-4, "per_sample_s": 3e-3}]},
             {"name": "overhead", "fixed_s": 1e-3, "per_sample_s": 0}]}}
put("device", "hand.json", jdump(small))
hosts = dict(json.loads(jdump(small)), ranks_per_host=4)
hosts["collectives"]["measured_ranks"] = 4
hosts["inter_host"] = {"measured_ranks": 2,
                       "allreduce": {"latency_s": 3e-5, "bandwidth_Bps": 1e8, "overlap": 0.5},
                       "allgather": {"latency_s": 3e-5, "bandwidth_Bps": 2e8,
                                     "points": [[1024, 3e-5], [4096, 6e-5]]}}
put("device", "hosts.json", jdump(hosts))
for name, change in [
        ("no-collectives", lambda d: d.pop("collectives")),
        ("points-falling", lambda d: d["collectives"]["allgather"].update(points=[[4096, 1], [1024, 2]])),
        ("slice-k3", lambda d: d["compute"]["ops"][0]["slices"][0].update(k=3)),
        ("long-name", lambda d: d["compute"]["ops"][0].update(name="x" * 40)),
        ("mem-huge", lambda d: d.update(mem_limit="1e30")),
        ("mem-number", lambda d: d.update(mem_limit=1 << 40)),
        ("ranks-fraction", lambda d: d.update(ranks=2.5)),
        ("in-step-zero", lambda d: d["collectives"]["allreduce"].update(in_step=0)),
        ("overlap-big", lambda d: d["collectives"]["allreduce"].update(overlap=2)),
        ("seq-zero", lambda d: d["compute"].update(seq=0)),
        ("hosts-not-dividing", lambda d: d.update(ranks_per_host=3)),
        ("inter-not-object", lambda d: d.update(inter_host=[1])),
        ("inter-bandwidth-zero", lambda d: d.update(inter_host={"allreduce": {"latency_s": 0, "bandwidth_Bps": 0}})),
        ("measured-ranks-zero", lambda d: d["collectives"].update(measured_ranks=0))]:
    d = json.loads(jdump(small))
    change(d)
    put("device", name + ".json", jdump(d))

# ---- llm.c checkpoint, safetensors, training state (micro model) ---------------------------
run("train", "--model", "micro.json", "--data", "addition:1", "--seq", "8", "--batch", "2",
    "--steps", "3", "--save", "micro.bin", "--checkpoint", "cdir", "--quiet")
with open(os.path.join(tmp, "micro2.json"), "w") as f:
    f.write(jdump(dict(MICRO, n_layer=2, name="micro2")))
run("train", "--model", "micro2.json", "--data", "addition:1", "--seq", "8", "--batch", "2",
    "--steps", "1", "--save", "micro2.bin", "--quiet")
ck = read("micro.bin")
put("checkpoint", "micro.bin", ck)
hdr = list(struct.unpack("<256i", ck[:1024]))


def with_header(i, v, data=ck):
    """The checkpoint with header int i set to v."""
    h = list(struct.unpack("<256i", data[:1024]))
    h[i] = v
    return struct.pack("<256i", *h) + data[1024:]


put("checkpoint", "truncated.bin", ck[:-4])
put("checkpoint", "trailing.bin", ck + b"\0\0\0\0")
put("checkpoint", "magic.bin", with_header(0, 1234))
put("checkpoint", "bf16.bin", with_header(1, 5))
put("checkpoint", "heads.bin", with_header(5, 3))
put("checkpoint", "padded.bin", with_header(7, 8))
put("checkpoint", "header-only.bin", ck[:1024])
put("checkpoint", "huge-layers.bin", with_header(4, 1000))

put("checkpoint", "two-layers.bin", read("micro2.bin"))

run("export", "micro.bin", "--format", "safetensors", "micro.safetensors", "--quiet")
run("export", "micro2.bin", "--format", "safetensors", "micro2.safetensors", "--quiet")
st = read("micro.safetensors")
put("safetensors", "micro.safetensors", st)
put("safetensors", "llmc.bin", ck)
n = struct.unpack("<Q", st[:8])[0]
header = json.loads(st[8:8 + n])
body = st[8 + n:]


def st_file(h, data=body):
    """A safetensors file of header object h and buffer data."""
    text = jdump(h).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def st_variant(change):
    """The micro safetensors file with its header changed by change(h)."""
    h = json.loads(jdump(header))
    change(h)
    return st_file(h)


nometa = dict(header)
nometa.pop("__metadata__")
put("safetensors", "no-metadata.safetensors", st_file(nometa))
put("safetensors", "prefixed.safetensors",
    st_file({("transformer." + k if k != "__metadata__" else k): v for k, v in header.items()}))
lm = json.loads(jdump(header))
wte = lm["wte.weight"]
b, e = wte["data_offsets"]
lm["lm_head.weight"] = {"dtype": "F32", "shape": wte["shape"], "data_offsets": [len(body), len(body) + e - b]}
put("safetensors", "lm-head.safetensors", st_file(lm, body + body[b:e]))
put("safetensors", "unknown-dtype.safetensors", st_variant(lambda h: h["wpe.weight"].update(dtype="F33")))
put("safetensors", "overlap.safetensors", st_variant(lambda h: h["wpe.weight"].update(data_offsets=[0, 128])))
put("safetensors", "meta-heads.safetensors", st_variant(lambda h: h["__metadata__"].update(n_head="3")))
put("safetensors", "extra-tensor.safetensors",
    st_variant(lambda h: h.update({"h.0.attn.bias": {"dtype": "BOOL", "shape": [0], "data_offsets": [0, 0]}})))
put("safetensors", "f16-bias.safetensors",
    st_variant(lambda h: h["h.0.ln_1.bias"].update(dtype="F16", shape=[8])))
put("safetensors", "wpe-transposed.safetensors", st_variant(lambda h: h["wpe.weight"].update(shape=[4, 8])))
lm16 = json.loads(jdump(lm))
lm16["lm_head.weight"].update(dtype="F16", shape=[14, 8])
put("safetensors", "lm-head-f16.safetensors", st_file(lm16, body + body[b:e]))
text = jdump(header).encode()
dup = text[:-1] + b',"__metadata__":{"format":"pt"}}'
put("safetensors", "metadata-twice.safetensors", struct.pack("<Q", len(dup)) + dup + body)
put("safetensors", "two-layers.safetensors", read("micro2.safetensors"))
put("safetensors", "entry-not-object.safetensors", st_variant(lambda h: h.update({"h.0.attn.bias": 1})))
put("safetensors", "wte-3d.safetensors", st_variant(lambda h: h["wte.weight"].update(shape=[14, 4, 1])))
both = json.loads(jdump(header))
both["transformer.wpe.weight"] = dict(both["wpe.weight"], data_offsets=[len(body), len(body) + 128])
wb, we = header["wpe.weight"]["data_offsets"]
put("safetensors", "prefixed-and-plain.safetensors", st_file(both, body + body[wb:we]))
put("safetensors", "header-size-1.safetensors", struct.pack("<Q", 1) + b"{" + body)
put("safetensors", "header-size.safetensors", struct.pack("<Q", 1 << 40) + st[8:])
put("safetensors", "not-brace.safetensors", struct.pack("<Q", 4) + b"[1] ")
put("safetensors", "truncated.safetensors", st[:-8])


def st_halves(code, dtype):
    """The micro file with every tensor as a 16-bit dtype: struct code "e" (F16) or None (BF16:
    each F32's high half)."""
    h, out = json.loads(jdump(header)), b""
    for k, v in h.items():
        if k == "__metadata__":
            continue
        b0, e0 = v["data_offsets"]
        vals = struct.unpack("<%df" % ((e0 - b0) // 4), body[b0:e0])
        words = struct.unpack("<%dI" % len(vals), body[b0:e0])
        data = struct.pack("<%de" % len(vals), *vals) if code else struct.pack("<%dH" % len(vals), *[w >> 16 for w in words])
        v.update(dtype=dtype, data_offsets=[len(out), len(out) + len(data)])
        out += data
    return st_file(h, out)


put("safetensors", "bf16.safetensors", st_halves(None, "BF16"))
put("safetensors", "f16.safetensors", st_halves("e", "F16"))
put("safetensors", "index.json", jdump({"weight_map": {"wte.weight": "model-00001-of-00001.safetensors"}}))
LMICRO = {"family": "llama", "n_layer": 1, "n_embd": 8, "n_head": 2, "n_kv_head": 1, "head_dim": 4,
          "ffn_dim": 12, "vocab_size": 14, "max_seq": 16, "tied_head": 0, "qkv_bias": 1, "norm_eps": 1e-5,
          "rope_theta": 10000, "rope_factor": 0, "rope_low_freq_factor": 0, "rope_high_freq_factor": 0,
          "rope_original_max": 0, "name": "lmicro"}
with open(os.path.join(tmp, "lmicro.json"), "w") as f:
    f.write(jdump(LMICRO))
run("train", "--model", "lmicro.json", "--steps", "0", "--seq", "16", "--batch", "1", "--quiet",
    "--save", "lmicro.safetensors")
put("safetensors", "llama-micro.safetensors", read("lmicro.safetensors"))

man = read("cdir/step-3/manifest.json")
rank = read("cdir/step-3/rank-00000.bin")


def state(manifest, rankfile):
    """A fuzz_train_state input: manifest length, manifest, rank files."""
    if isinstance(manifest, str):
        manifest = manifest.encode()
    return struct.pack("<I", len(manifest)) + manifest + rankfile


m = json.loads(man)
put("train_state", "osdp-run", state(man, rank))
mp = json.loads(man)
mp["files"][0]["bytes"] = "@SIZE@"
mp["files"][0]["fnv1a64"] = "@FNV@"
holes = jdump(mp).replace('"@SIZE@"', "@SIZE@")
put("train_state", "placeholders", state(holes, rank))
put("train_state", "truncated-rank", state(holes, rank[:-12]))
put("train_state", "bad-nranges", state(holes, rank[:12] + struct.pack("<I", 99999) + rank[16:]))
put("train_state", "gap", state(holes, rank[:24 + 8] + struct.pack("<Q", 543) + rank[40:]))
put("train_state", "checksum", state(man, rank[:-1] + b"\x01"))
fixed = {"format": "osdp-train-state", "version": 1, "step": 5, "world": 1, "n_params": 10,
         "run": {"model": MICRO}, "files": [{"name": "rank-00000.bin", "bytes": "@SIZE@", "fnv1a64": "@FNV@"}]}
put("train_state", "manifest-alone", state(jdump(fixed).replace('"@SIZE@"', "@SIZE@"), b""))
twice = dict(fixed, world=2, files=fixed["files"] * 2)
put("train_state", "same-file-twice", state(jdump(twice).replace('"@SIZE@"', "@SIZE@"), b""))
put("train_state", "not-json", state("{", b""))
# Five ranks under zero3: the last rank owns nothing of some slices and writes empty ranges.
subprocess.run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "5", osdp, "train",
                "--model", "micro.json", "--data", "addition:1", "--seq", "8", "--batch", "1",
                "--steps", "2", "--plan", "zero3", "--checkpoint", "z5", "--quiet"], cwd=tmp,
               env=env, check=True, stdout=subprocess.DEVNULL)
man5 = read("z5/step-2/manifest.json")
ranks5 = b"".join(read("z5/step-2/rank-%05d.bin" % r) for r in range(5))
put("train_state", "zero3-5-ranks", state(man5, ranks5))
m5 = json.loads(man5)
for r, f in enumerate(m5["files"]):
    f["bytes"], f["fnv1a64"] = "@SIZE%d@" % r, "@FNV%d@" % r
holes5 = jdump(m5)
for r in range(5):
    holes5 = holes5.replace('"@SIZE%d@"' % r, "@SIZE%d@" % r)
put("train_state", "zero3-5-ranks-holes", state(holes5, ranks5))

# ---- token files -----------------------------------------------------------------------
toks = [(i * 7919) % 50257 for i in range(64)]


def tokfile(tokens, magic=20240520, version=1, count=None, width=None):
    """An llm.c token file: uint16 tokens (version 1) or uint32 (version 2; width overrides)."""
    h = [0] * 256
    h[0], h[1], h[2] = magic, version, len(tokens) if count is None else count
    code = {2: "H", 4: "I"}[width or (4 if version == 2 else 2)]
    return struct.pack("<256i", *h) + struct.pack("<%d%s" % (len(tokens), code), *tokens)


put("tokens", "valid.bin", tokfile(toks))
put("tokens", "small-ids.bin", tokfile([i % 5 for i in range(41)]))
put("tokens", "magic.bin", tokfile(toks, magic=1))
put("tokens", "version.bin", tokfile(toks, version=3))
put("tokens", "v2-valid.bin", tokfile([(i * 7919) % 128256 for i in range(64)], version=2))
put("tokens", "v2-uint16.bin", tokfile(toks, version=2, width=2))
put("tokens", "v2-big-id.bin", tokfile(toks[:-1] + [1 << 24], version=2))
put("tokens", "v2-max-id.bin", tokfile(toks[:-1] + [(1 << 24) - 1], version=2))
put("tokens", "count.bin", tokfile(toks, count=65))
put("tokens", "negative.bin", tokfile(toks, count=-1))
put("tokens", "big-id.bin", tokfile(toks[:-1] + [50257]))
put("tokens", "short.bin", tokfile(toks[:40]))
put("tokens", "text.txt", "the quick brown fox jumps over the lazy dog, twice over: " * 2)

# ---- Hugging Face config.json: the Hub's own (tests/hf/) and variants that stop at each check
hub = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "hf")
for f in sorted(os.listdir(hub)):
    with open(os.path.join(hub, f), "rb") as src:
        put("hf_config", f, src.read())


def hub_config(name, **change):
    """A Hub config of tests/hf/ with keys changed (None: removed), as compact JSON."""
    with open(os.path.join(hub, name + ".json")) as src:
        c = json.load(src)
    for k, v in change.items():
        if v is None:
            c.pop(k, None)
        else:
            c[k] = v
    return jdump(c)


put("hf_config", "rope-linear.json", hub_config("tinyllama-1.1b", rope_scaling={"type": "linear", "factor": 2.0}))
put("hf_config", "attention-bias.json", hub_config("tinyllama-1.1b", attention_bias=True))
put("hf_config", "no-hidden.json", hub_config("tinyllama-1.1b", hidden_size=None))
put("hf_config", "hidden-string.json", hub_config("tinyllama-1.1b", hidden_size="2048"))
put("hf_config", "experts.json", hub_config("tinyllama-1.1b", num_local_experts=8))
put("hf_config", "kv-heads.json", hub_config("tinyllama-1.1b", num_key_value_heads=5))
put("hf_config", "sliding.json", hub_config("qwen2.5-0.5b", use_sliding_window=True))
put("hf_config", "rope-freqs.json", hub_config("llama3.2-1b", rope_scaling={
    "rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 0.5,
    "original_max_position_embeddings": 8192}))
put("hf_config", "gpt2-inner.json", hub_config("gpt2", n_inner=1000))
put("hf_config", "gpt2-relu.json", hub_config("gpt2", activation_function="relu"))
put("hf_config", "model-type-number.json", '{"model_type":7}')
put("hf_config", "truncated.json", '{"model_type":"llama","num_hidden_layers":2,')
put("hf_config", "osdp-model.json", jdump(MICRO))
put("hf_config", "tiny-llama.json", jdump({
    "model_type": "llama", "num_hidden_layers": 1, "hidden_size": 8, "num_attention_heads": 2,
    "num_key_value_heads": 1, "intermediate_size": 12, "vocab_size": 20,
    "max_position_embeddings": 16, "_name_or_path": "org/tiny"}))

# ---- sharded checkpoints' index (fuzz_st_index: the micro model's tensors in two shards, even
# positions of its file in the first, odd in the second) ------------------------------------
names = ["wte.weight", "wpe.weight"] + ["h.0." + t for t in [
    "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
    "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
    "mlp.c_proj.weight", "mlp.c_proj.bias"]] + ["ln_f.weight", "ln_f.bias"]
shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
wmap = {n: shards[i % 2] for i, n in enumerate(names)}


def index(m, **top):
    """An index with weight_map m (and other top-level keys)."""
    return json.dumps(dict({"metadata": {"total_size": 1234}, "weight_map": m}, **top), indent=2)


put("st_index", "valid.json", index(wmap))
put("st_index", "missing-tensor.json", index({k: v for k, v in wmap.items() if k != "ln_f.bias"}))
put("st_index", "moved.json", index(dict(wmap, **{"ln_f.bias": shards[0]})))
put("st_index", "extra.json", index(dict(wmap, **{"lm_head.weight": shards[0]})))
put("st_index", "missing-shard.json", index(dict(wmap, **{"ln_f.bias": "model-00003-of-00003.safetensors"})))
put("st_index", "slash.json", index(dict(wmap, **{"ln_f.bias": "../" + shards[1]})))
put("st_index", "not-string.json", index(dict(wmap, **{"ln_f.bias": 2})))
put("st_index", "empty-map.json", index({}))
put("st_index", "no-map.json", json.dumps({"metadata": {}}))
put("st_index", "array.json", "[]")
put("st_index", "truncated.json", index(wmap)[:200])
put("st_index", "twice.json", index(wmap)[:-3] + ',\n    "ln_f.bias": "%s"\n  }\n}' % shards[0])


# ---- tokenizer.json: a byte-level BPE (GPT-2's byte alphabet, a few merges) and its variants --
def byte_alphabet():
    """GPT-2's bytes_to_unicode: each byte's printable stand-in character."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


alpha = byte_alphabet()
vocab = {ch: i for i, ch in enumerate(alpha)}
merges = [["\u0120", "w"], ["o", "r"], ["\u0120w", "or"], ["l", "d"], ["H", "e"]]
for a, b in merges:
    vocab.setdefault(a + b, len(vocab))
eot = {"id": len(vocab), "content": "<|endoftext|>", "single_word": False, "lstrip": False,
       "rstrip": False, "normalized": False, "special": True}
GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def tok(**over):
    """A tokenizer.json text: GPT-2 style unless over replaces parts."""
    t = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [eot],
         "normalizer": None,
         "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                           "use_regex": True},
         "post_processor": None, "decoder": {"type": "ByteLevel"},
         "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False,
                   "byte_fallback": False, "vocab": vocab, "merges": [" ".join(m) for m in merges]}}
    t.update(over)
    return json.dumps(t, ensure_ascii=False)


put("tokenizer", "gpt2.json", tok())
model = json.loads(tok())["model"]
put("tokenizer", "merge-pairs.json", tok(model=dict(model, merges=merges)))
put("tokenizer", "llama3-split.json", tok(pre_tokenizer={"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": LLAMA3_RE}, "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
    model=dict(model, ignore_merges=True)))
put("tokenizer", "gpt2-split.json", tok(pre_tokenizer={"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": GPT2_RE}, "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}))
put("tokenizer", "wordpiece.json", tok(model=dict(model, type="WordPiece")))
put("tokenizer", "nfc.json", tok(normalizer={"type": "NFC"}))
put("tokenizer", "missing-byte.json", tok(model=dict(model, vocab={k: v for k, v in vocab.items() if k != "a"})))
put("tokenizer", "bad-merge.json", tok(model=dict(model, merges=["o r", "q z", 3])))
put("tokenizer", "twice.json", tok()[:-1] + ', "decoder": null}')
put("tokenizer", "truncated.json", tok()[:300])
put("tokenizer", "bad-regex.json", tok(pre_tokenizer={"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?<"}, "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}))

shutil.rmtree(tmp)
