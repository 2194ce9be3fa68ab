#!/usr/bin/env bash
# gpu_bench.sh: osdp's CUDA backend against plain PyTorch on one GPU, GPT-2 124M at seq 1024.
# For each precision (fp32 with TF32 matmuls, and bf16):
#   1. osdp: `osdp bench --device cuda --matmul tf32 --json` (fp32), `... --matmul bf16
#      --precision bf16 --json` (bf16) at a few micro-batch
#      sizes (BENCH_BATCHES, default "8 16 32"; a few steps each), keeping the fastest;
#   2. PyTorch (bench/gpu_torch.py) at the same precision and that batch: eager, then
#      torch.compile (its own timeout; skipped with a note when it does not fit).
# Writes $OUT/gpu-bench.md (one table) and $OUT/gpu-bench.json: tokens/s, MFU (same FLOP count on
# both sides: osdp's flops_per_token when it reports one, else the same formula, see
# bench/gpu_torch.py), peak memory (osdp: measured and predicted; PyTorch: max_memory_allocated).
# osdp's bf16 row stores activations and weight copies in bf16 (`--precision bf16`: fp32 master
# weights, gradients and AdamW; products and attention on bf16 tensor cores with fp32
# accumulation), against PyTorch's bf16 autocast.
# What could not run (no GPU, osdp without --device cuda or bf16, no PyTorch, compile too slow)
# is recorded as not available with the reason, never a crash.
#
# Time-boxed: the whole run stays inside BENCH_BUDGET seconds (default 180), each run under
# `timeout`. scripts/gpu-check.sh calls it with OSDP and BENCH_BUDGET set. Standalone:
#   OSDP=build/osdp bash bench/gpu_bench.sh
# Knobs: OSDP, OUT, PYTHON, BENCH_BUDGET, BENCH_BATCHES, BENCH_PRECISIONS, BENCH_SEQ,
# BENCH_OSDP_STEPS, BENCH_OSDP_THREADS, BENCH_TORCH_STEPS, BENCH_TORCH_WARMUP,
# BENCH_TORCH_BATCH (when osdp has no result), BENCH_OSDP_TIMEOUT, BENCH_EAGER_TIMEOUT,
# BENCH_COMPILE_TIMEOUT.
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
OSDP=${OSDP:-$ROOT/build-gpu/osdp}
[ -x "$OSDP" ] || [ ! -x "$ROOT/build/osdp" ] || OSDP=$ROOT/build/osdp
PY=${PYTHON:-python3}
MODEL=gpt2-124m
SEQ=${BENCH_SEQ:-1024}
BUDGET=${BENCH_BUDGET:-180}
BATCHES=${BENCH_BATCHES:-8 16 32}
PRECISIONS=${BENCH_PRECISIONS:-fp32 bf16}
OSDP_STEPS=${BENCH_OSDP_STEPS:-5}
# With --device cuda the kernels run on the GPU and osdp bench's reference rate is the GPU's
# matmul; CPU threads only size a little attention scratch, so one is enough.
OSDP_THREADS=${BENCH_OSDP_THREADS:-1}
TORCH_STEPS=${BENCH_TORCH_STEPS:-10}
TORCH_WARMUP=${BENCH_TORCH_WARMUP:-3}
OSDP_TIMEOUT=${BENCH_OSDP_TIMEOUT:-45}
EAGER_TIMEOUT=${BENCH_EAGER_TIMEOUT:-60}
COMPILE_TIMEOUT=${BENCH_COMPILE_TIMEOUT:-120}
START=$(date +%s)
RUNS=$(mktemp -d)
trap 'rm -rf "$RUNS"' EXIT
# Compiled kernels survive in the build folder, so a second try on a warm machine compiles less.
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$(dirname "$OSDP")/torchinductor-cache}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$(dirname "$OSDP")/triton-cache}

say() { echo "gpu-bench: $*"; }
remaining() { echo $((START + BUDGET - $(date +%s))); }

# PyTorch runs with the library path the caller started with, not the carried OpenMPI/OpenBLAS.
torch_env=(env)
if [ -n "${GPU_CHECK_ORIG_LD_LIBRARY_PATH+x}" ]; then
  if [ -n "$GPU_CHECK_ORIG_LD_LIBRARY_PATH" ]; then torch_env=(env "LD_LIBRARY_PATH=$GPU_CHECK_ORIG_LD_LIBRARY_PATH")
  else torch_env=(env -u LD_LIBRARY_PATH); fi
fi

# run_one ROLE PRECISION BATCH TIMEOUT CMD...: runs CMD (which prints one JSON line) under a
# timeout cut to the budget left; leaves RUNS/N.meta ("role precision batch status seconds"),
# N.out (stdout) and N.err (stderr). Returns CMD's status (125 when skipped for time).
n=0
run_one() {
  local role=$1 prec=$2 batch=$3 cap=$4 t rc status t0
  shift 4
  n=$((n + 1))
  t=$(($(remaining) - 3))
  [ "$t" -gt "$cap" ] && t=$cap
  if [ "$t" -lt 10 ]; then
    echo "$role $prec $batch skipped 0" > "$RUNS/$n.meta"
    echo "skipped: ${t}s of the benchmark's ${BUDGET}s budget left" > "$RUNS/$n.err"
    : > "$RUNS/$n.out"
    say "$role $prec batch $batch: skipped (out of time)"
    return 125
  fi
  echo
  say "$role $prec batch $batch (timeout ${t}s): $*"
  t0=$(date +%s)
  timeout -k 5 "$t" "$@" > "$RUNS/$n.out" 2> "$RUNS/$n.err"
  rc=$?
  case $rc in 0) status=ok ;; 124|137) status=timeout; echo "timed out after ${t}s" >> "$RUNS/$n.err" ;; *) status=failed ;; esac
  echo "$role $prec $batch $status $(($(date +%s) - t0))" > "$RUNS/$n.meta"
  cat "$RUNS/$n.out"
  [ "$status" = ok ] || tail -n 5 "$RUNS/$n.err" | sed 's/^/  stderr: /'
  say "-> $status (exit $rc, $(($(date +%s) - t0))s)"
  return $rc
}

# tokens_per_s FILE: the tokens_per_s value of the JSON line in FILE, or empty.
tokens_per_s() { sed -n 's/.*"tokens_per_s": *\([0-9.]*\).*/\1/p' "$1" | head -n 1; }

say "model $MODEL, seq $SEQ, batches $BATCHES, precisions $PRECISIONS, budget ${BUDGET}s"
say "osdp: $OSDP; python: $PY"

# 1. osdp: the fastest micro-batch per precision.
declare -A BEST_BATCH
for prec in $PRECISIONS; do
  flags=(--device cuda --matmul tf32 --threads "$OSDP_THREADS")
  [ "$prec" = fp32 ] || flags=(--device cuda --matmul "$prec" --precision "$prec" --threads "$OSDP_THREADS")
  if [ ! -x "$OSDP" ]; then
    n=$((n + 1)); echo "osdp $prec - failed 0" > "$RUNS/$n.meta"; : > "$RUNS/$n.out"
    echo "no osdp binary at $OSDP" > "$RUNS/$n.err"; say "osdp $prec: no binary at $OSDP"; continue
  fi
  best=""; first=1
  for b in $BATCHES; do
    run_one osdp "$prec" "$b" "$OSDP_TIMEOUT" "$OSDP" bench --model "$MODEL" --seq "$SEQ" --batch "$b" \
      --steps "$OSDP_STEPS" "${flags[@]}" --json
    rc=$?
    # A failure at the first size (a missing flag, no GPU) or a larger one (out of memory) ends
    # this precision's sweep.
    if [ $rc != 0 ]; then
      [ $first = 1 ] && say "osdp $prec not available: $(grep -v '^ *$' "$RUNS/$n.err" | tail -n 1)"
      break
    fi
    first=0
    tps=$(tokens_per_s "$RUNS/$n.out")
    if [ -n "$tps" ] && { [ -z "$best" ] || awk -v a="$tps" -v b="$best" 'BEGIN {exit !(a > b)}'; }; then
      best=$tps; BEST_BATCH[$prec]=$b
    fi
  done
done

# 2. PyTorch at the same precision and batch: eager first (both precisions), then compile.
torch_ok=1; torch_reason=""
command -v "$PY" >/dev/null || { torch_ok=0; torch_reason="$PY not found"; }
for mode in eager compile; do
  for prec in $PRECISIONS; do
    b=${BEST_BATCH[$prec]:-${BENCH_TORCH_BATCH:-16}}
    if [ $torch_ok = 0 ]; then
      n=$((n + 1)); echo "torch_$mode $prec $b failed 0" > "$RUNS/$n.meta"; : > "$RUNS/$n.out"
      echo "$torch_reason" > "$RUNS/$n.err"; say "torch_$mode $prec: not available: $torch_reason"; continue
    fi
    args=(bench/gpu_torch.py --batch "$b" --seq "$SEQ" --steps "$TORCH_STEPS" --warmup "$TORCH_WARMUP" --precision "$prec" --json)
    cap=$EAGER_TIMEOUT
    if [ $mode = compile ]; then args+=(--compile); cap=$COMPILE_TIMEOUT; fi
    run_one "torch_$mode" "$prec" "$b" "$cap" "${torch_env[@]}" "$PY" "${args[@]}"
    # Exit 2: PyTorch or CUDA missing; no later PyTorch run can do better.
    if [ $? = 2 ]; then
      torch_ok=0
      torch_reason=$(sed -n 's/.*"error": *"\([^"]*\)".*/\1/p' "$RUNS/$n.out")
      torch_reason=${torch_reason:-$(tail -n 1 "$RUNS/$n.err")}
    fi
  done
done

# 3. The table and the JSON.
if ! command -v "$PY" >/dev/null; then
  say "$PY not found: no table; the raw results are above"
  printf '{"error": "%s not found: results only in the log"}\n' "$PY" > "$OUT/gpu-bench.json"
  printf '# GPU benchmark\n\n%s not found: results only in the log.\n' "$PY" > "$OUT/gpu-bench.md"
  exit 0
fi
GPU_NAME=$(timeout 20 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
"$PY" - "$RUNS" "$OUT" "$MODEL" "$SEQ" "$BUDGET" "$(($(date +%s) - START))" "${GPU_NAME:-none}" <<'PYEOF'
import json, os, sys

runs_dir, out, model, seq, budget, elapsed, gpu = sys.argv[1:8]
seq = int(seq)
PEAK = {"fp32": 494.7, "bf16": 989.4}  # H200 SXM dense TF32 / BF16, TFLOP/s
# osdp's count (gpt_step_flops / (B*T)) for gpt2-124m, used when no run reported one.
L, C, Vp = 12, 768, 50304
FPT_FORMULA = 6.0 * (12 * L * C * C + C * Vp) + 12.0 * L * seq * C

runs = []
for name in sorted(os.listdir(runs_dir), key=lambda s: (len(s), s)):
    if not name.endswith(".meta"):
        continue
    base = os.path.join(runs_dir, name[:-5])
    role, prec, batch, status, secs = open(base + ".meta").read().split()
    res = None
    for line in open(base + ".out", errors="replace").read().splitlines()[::-1]:
        line = line.strip()
        if line.startswith("{"):
            try:
                res = json.loads(line)
                break
            except ValueError:
                pass
    err = [l.strip() for l in open(base + ".err", errors="replace").read().splitlines() if l.strip()]
    note = (res or {}).get("error") or (err[-1] if err and status != "ok" else "")
    runs.append({"role": role, "precision": prec, "batch": None if batch == "-" else int(batch),
                 "status": status, "seconds": int(secs), "note": note[:300], "result": res})

def osdp_fpt():
    for r in runs:
        if r["role"] == "osdp" and r["result"] and r["result"].get("flops_per_token"):
            return float(r["result"]["flops_per_token"]), "osdp bench's flops_per_token"
    return FPT_FORMULA, "6*(12*L*C^2 + C*Vp) + 12*L*T*C, osdp's gpt_step_flops per token"

fpt, fpt_src = osdp_fpt()
notes = [f"MFU = flops_per_token * tokens/s / peak; flops_per_token = {fpt:.4g} ({fpt_src}), "
         "the same count for osdp and PyTorch",
         "peak: NVIDIA H200 SXM dense, TF32 494.7 TFLOP/s for fp32 runs, BF16 989.4 TFLOP/s for bf16 runs",
         "PyTorch peak memory is torch.cuda.max_memory_allocated; osdp's is its arena's measured peak "
         "(and its planner's prediction)"]

def summary(r, prec):
    d = {"status": r["status"], "batch": r["batch"], "note": r["note"], "seconds": r["seconds"]}
    res = r["result"] or {}
    if r["status"] == "ok" and res.get("tokens_per_s"):
        tps = float(res["tokens_per_s"])
        d.update(tokens_per_s=tps, ms_per_step=res.get("ms_per_step"),
                 mfu=round(fpt * tps / (PEAK[prec] * 1e12), 4), peak_bytes=res.get("peak_bytes"))
        for k in ("predicted_peak_bytes", "device", "precision", "tf32", "first_step_s", "optimizer"):
            if k in res:
                d[k] = res[k]
    return d

results = {}
for prec in PEAK:
    mine = [r for r in runs if r["precision"] == prec]
    if not mine:
        continue
    sweep = [summary(r, prec) for r in mine if r["role"] == "osdp"]
    okays = [s for s in sweep if "tokens_per_s" in s]
    best = max(okays, key=lambda s: s["tokens_per_s"]) if okays else None
    osdp = {"available": best is not None, "sweep": sweep, "best": best}
    if best is None:
        osdp["note"] = "not available: " + (sweep[0]["note"] if sweep else "not run")
    else:
        w = []
        if best.get("device") not in (None, "cuda"):
            w.append(f"osdp reports device {best.get('device')}")
        if best.get("precision") not in (None, prec):
            w.append(f"osdp reports precision {best.get('precision')}")
        if w:
            osdp["warning"] = "; ".join(w)
    entry = {"batch": best["batch"] if best else None, "osdp": osdp}
    for mode in ("torch_eager", "torch_compile"):
        rs = [r for r in mine if r["role"] == mode]
        entry[mode] = summary(rs[-1], prec) if rs else {"status": "not run"}
        if entry[mode].get("batch") and not best:
            entry["batch"] = entry[mode]["batch"]
    te = entry["torch_eager"].get("tokens_per_s")
    tc = entry["torch_compile"].get("tokens_per_s")
    if best and te:
        entry["osdp_vs_torch_eager"] = round(best["tokens_per_s"] / te, 3)
    if best and tc:
        entry["osdp_vs_torch_compile"] = round(best["tokens_per_s"] / tc, 3)
    results[prec] = entry

doc = {"model": model, "seq": seq, "gpu": gpu, "budget_s": int(budget), "elapsed_s": int(elapsed),
       "flops_per_token": fpt, "flops_per_token_source": fpt_src, "peak_tflops": PEAK,
       "results": results, "runs": runs, "notes": notes}
with open(os.path.join(out, "gpu-bench.json"), "w") as f:
    json.dump(doc, f, indent=1)

def mib(b):
    return f"{b / 2**20:,.0f} MiB" if isinstance(b, (int, float)) else "-"

def cell(s):
    return str(s).replace("|", "/").replace("\n", " ")

rows = ["| precision | implementation | batch | tokens/s | MFU | ms/step | peak memory | "
        "osdp predicted peak | osdp / this | note |",
        "|---|---|---|---|---|---|---|---|---|---|"]
for prec, e in results.items():
    best = e["osdp"]["best"]
    items = [("osdp", best or {"note": e["osdp"].get("note", "")}),
             ("PyTorch eager", e["torch_eager"]), ("PyTorch compile", e["torch_compile"])]
    for name, s in items:
        if "tokens_per_s" in s:
            tps = s["tokens_per_s"]
            ratio = f"{best['tokens_per_s'] / tps:.2f}x" if best and name != "osdp" else "-"
            note = e["osdp"].get("warning", "") if name == "osdp" else (
                f"first step {s['first_step_s']} s" if name == "PyTorch compile" and "first_step_s" in s else "")
            rows.append(f"| {prec} | {name} | {s['batch']} | {tps:,.0f} | {100 * s['mfu']:.1f}% | "
                        f"{s.get('ms_per_step', '-')} | {mib(s.get('peak_bytes'))} | "
                        f"{mib(s.get('predicted_peak_bytes')) if name == 'osdp' else '-'} | {ratio} | {cell(note)} |")
        else:
            why = s.get("note") or s.get("status", "")
            rows.append(f"| {prec} | {name} | {s.get('batch') or '-'} | not available | - | - | - | - | - | "
                        f"{cell(why)[:160]} |")
sweep_lines = []
for prec, e in results.items():
    parts = [f"B={s['batch']}: {s['tokens_per_s']:,.0f} tok/s" if "tokens_per_s" in s else
             f"B={s['batch']}: {s['status']}" for s in e["osdp"]["sweep"]]
    if parts:
        sweep_lines.append(f"- osdp {prec} micro-batch sweep: " + ", ".join(parts))
md = [f"# GPU benchmark: {model}, seq {seq}, one GPU ({gpu})", "", *rows, "", *sweep_lines,
      *[f"- {n}" for n in notes], f"- {elapsed} s of a {budget} s budget", ""]
with open(os.path.join(out, "gpu-bench.md"), "w") as f:
    f.write("\n".join(md))
print("\n".join(md))
PYEOF
