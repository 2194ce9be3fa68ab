#!/usr/bin/env python3
# hf_make.py: test inputs for cli_hf.sh, written with the standard library only (no torch, no
# numpy): a Hub-style sharded BF16 checkpoint and llm.c version-2 token files.
#   hf_make.py shard SRC.safetensors CONFIG.json OUT_DIR EXACT_DIR
#       reads an F32 safetensors file, rounds every value to bfloat16 (keeps the high 16 bits),
#       and writes OUT_DIR: two BF16 shards (tensors alternating), model.safetensors.index.json,
#       config.json; and EXACT_DIR: the same values as one F32 model.safetensors, config.json.
#   hf_make.py tokens32 OUT N MAXID
#       an llm.c version 2 token file of N uint32 tokens i % MAXID, the last one MAXID.
import json, os, shutil, struct, sys


def read_st(path):
    """(header dict, data bytes) of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_st(path, tensors):
    """Writes [(name, dtype, shape, bytes)] as a safetensors file with {"format": "pt"}."""
    header, at, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(data)]}
        at += len(data)
        blobs.append(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def shard(src, config, out, exact):
    header, data = read_st(src)
    f32, bf16 = [], []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        words = struct.unpack("<%dI" % ((en - b) // 4), data[b:en])
        f32.append((name, "F32", e["shape"], struct.pack("<%dI" % len(words), *[w & 0xffff0000 for w in words])))
        bf16.append((name, "BF16", e["shape"], struct.pack("<%dH" % len(words), *[w >> 16 for w in words])))
    for d in (out, exact):
        os.makedirs(d, exist_ok=True)
        shutil.copy(config, os.path.join(d, "config.json"))
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    weight_map = {}
    for s in range(2):
        part = bf16[s::2]
        write_st(os.path.join(out, names[s]), part)
        weight_map.update({t[0]: names[s] for t in part})
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(len(t[3]) for t in bf16)}, "weight_map": weight_map}, f, indent=2)
    write_st(os.path.join(exact, "model.safetensors"), f32)


def tokens32(out, n, maxid):
    toks = [i % maxid for i in range(n - 1)] + [maxid]
    with open(out, "wb") as f:
        f.write(struct.pack("<256i", *([20240520, 2, n] + [0] * 253)) + struct.pack("<%dI" % n, *toks))


if sys.argv[1] == "shard":
    shard(*sys.argv[2:6])
else:
    tokens32(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
