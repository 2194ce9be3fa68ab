#!/usr/bin/env bash
# gpu_check.sh: scripts/gpu-check.sh cannot pass falsely. On this machine (no GPU; the CUDA backend
# built), against this build as it is (GPU_CHECK_REUSE_BUILD=1: no configure, no build):
#   1. nvidia-smi lists no GPU: the verdict is NO GPU (exit 3, "ok": false, "verdict": "no_gpu"),
#      both GPU tests ran and skipped, and nothing says OK;
#   2. a fake nvidia-smi lists an H200, so a GPU must work, but the real CUDA backend cannot start
#      here: FAILED (exit 1), every GPU test failed (none skipped), and the problems name the
#      backend's failure ("no CUDA GPU is visible"), the GPU probe and the missing osdp bench run
#      on cuda;
#   3. the carried packages are needed but there is no packages.txt: STOPPED (exit 4) within a few
#      seconds, naming `bash scripts/gpu-deps.sh`.
# Exits 77 (skipped) where the CUDA backend is not built, where a real GPU is visible (run
# scripts/gpu-check.sh itself there) or without python3 (the JSON is read with it).
# usage: gpu_check.sh SOURCE_DIR BUILD_DIR CUDA_BUILT(ON|OFF)
set -u
src=$1; build=$2; cuda_built=$3
[ "$cuda_built" = ON ] || { echo "gpu_check: SKIP: the CUDA backend is not built (no nvcc/cuBLAS)"; exit 77; }
if command -v nvidia-smi >/dev/null && timeout 20 nvidia-smi -L 2>/dev/null | grep -qE '^GPU [0-9]+:'; then
  echo "gpu_check: SKIP: a GPU is visible here: run bash scripts/gpu-check.sh itself"; exit 77
fi
command -v python3 >/dev/null || { echo "gpu_check: SKIP: python3 not found"; exit 77; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail=0
bad() { fail=$((fail + 1)); echo "FAIL $*"; }

# check NAME: runs gpu-check.sh into $work/NAME with the environment given before it; leaves
# its exit status in rc and its output in $work/NAME.out.
check() {
  local name=$1
  mkdir -p "$work/$name"
  env "${@:2}" GPU_CHECK_BUILD="$build" GPU_CHECK_REUSE_BUILD=1 GPU_CHECK_BUDGET=200 \
    bash "$src/scripts/gpu-check.sh" "$work/$name" > "$work/$name.out" 2>&1
  rc=$?
  echo "== $name: exit $rc; $(grep -m 1 'gpu-check: verdict:' "$work/$name.out")"
}
# field NAME EXPR: a Python expression over the JSON d of run NAME, printed.
field() { python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print($2)" "$work/$1/gpu-check.json" 2>&1; }
# expect WHAT GOT WANT: one assertion.
expect() { [ "$2" = "$3" ] || bad "$1: got '$2', want '$3'"; }

# Fake nvidia-smi programs: one that finds no GPU (as the real one does without a device) and one
# that lists an H200 and answers the queries gpu-check.sh makes.
mkdir -p "$work/none" "$work/h200"
printf '#!/bin/sh\necho "No devices were found"\nexit 6\n' > "$work/none/nvidia-smi"
cat > "$work/h200/nvidia-smi" <<'EOF'
#!/bin/sh
case "$*" in
  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)" ;;
  *--query-gpu=name,memory.total,compute_cap*) echo "NVIDIA H200 (fake), 143771 MiB, 9.0" ;;
  *--query-gpu=driver_version*) echo "0.0 (fake)" ;;
  *--query-gpu=compute_cap*) echo "9.0" ;;
  *--query-gpu=name*) echo "NVIDIA H200 (fake)" ;;
  *) echo "fake nvidia-smi (tests/gpu_check.sh)" ;;
esac
EOF
chmod +x "$work/none/nvidia-smi" "$work/h200/nvidia-smi"

# 1. No GPU listed.
check nogpu PATH="$work/none:$PATH" GPU_CHECK_SKIP_BENCH=1 OSDP_REQUIRE_GPU=
expect "no GPU: exit status" "$rc" 3
expect "no GPU: verdict" "$(field nogpu 'd["verdict"], d["ok"], d["gpu_visible"]')" "no_gpu False False"
expect "no GPU: GPU tests" "$(field nogpu 'sorted((t["name"], t["result"]) for t in d["gpu_tests"]["tests"])')" \
  "[('gpu_bf16', 'skip'), ('gpu_kernels', 'skip'), ('gpu_train', 'skip')]"
grep -q 'gpu-check: verdict: NO GPU' "$work/nogpu.out" || bad "no GPU: no 'verdict: NO GPU' line"
grep -qE 'verdict: OK|: OK$' "$work/nogpu.out" && bad "no GPU: says OK"
grep -q '^# GPU check: NO GPU' "$work/nogpu/gpu-check.md" || bad "no GPU: gpu-check.md does not say NO GPU"

# 2. A GPU listed, a backend that cannot start.
check brokengpu PATH="$work/h200:$PATH" BENCH_PRECISIONS=fp32 BENCH_BATCHES=8 BENCH_EAGER_TIMEOUT=30 \
  BENCH_COMPILE_TIMEOUT=30
expect "broken GPU: exit status" "$rc" 1
expect "broken GPU: verdict" "$(field brokengpu 'd["verdict"], d["ok"], d["gpu_visible"]')" "failed False True"
expect "broken GPU: GPU tests" "$(field brokengpu 'sorted((t["name"], t["result"]) for t in d["gpu_tests"]["tests"])')" \
  "[('gpu_bf16', 'fail'), ('gpu_kernels', 'fail'), ('gpu_train', 'fail')]"
expect "broken GPU: problems naming the backend's failure" \
  "$(field brokengpu 'sorted(p.split(":")[0].split(" (")[0] for p in d["problems"] if "no CUDA GPU is visible" in p)')" \
  "['bench', 'gpu test gpu_bf16', 'gpu test gpu_kernels', 'gpu test gpu_train', 'gpu_1rank']"
expect "broken GPU: runs recorded with precision, matmul mode, TF32, transport" \
  "$(field brokengpu '[(r["name"], r["device"], r["precision"], r["matmul"], r["tf32"], r["transport"]) for r in d["runs"] if r["name"].startswith(("smoke_2", "gpu_"))]')" \
  "[('smoke_2ranks', 'cpu', 'fp32', 'n/a', 'n/a', 'mpi'), ('gpu_1rank', 'cuda', 'fp32', 'tf32', 'on', 'none')]"
grep -q 'gpu-check: verdict: FAILED' "$work/brokengpu.out" || bad "broken GPU: no 'verdict: FAILED' line"
grep -qE 'verdict: (OK|NO GPU)|: OK$' "$work/brokengpu.out" && bad "broken GPU: says OK or NO GPU"
grep -q '^# GPU check: FAILED' "$work/brokengpu/gpu-check.md" || bad "broken GPU: gpu-check.md does not say FAILED"

# 3. Carried packages needed, none carried: a stop in the first seconds.
mkdir -p "$work/nodeps"
t0=$(date +%s)
check stopped PATH="$work/none:$PATH" GPU_CHECK_FORCE_DEPS=1 GPU_CHECK_DEPS_DIR="$work/nodeps"
t=$(($(date +%s) - t0))
expect "no deps: exit status" "$rc" 4
expect "no deps: verdict" "$(field stopped 'd["verdict"], d["ok"]')" "stopped False"
grep -q 'verdict: STOPPED: .*bash scripts/gpu-deps.sh' "$work/stopped.out" || bad "no deps: the stop does not name bash scripts/gpu-deps.sh"
[ "$t" -le 5 ] || bad "no deps: the stop took ${t}s (at most 5)"

if [ "$fail" -gt 0 ]; then
  for f in nogpu brokengpu stopped; do echo "---- $f: the last lines"; tail -n 15 "$work/$f.out"; done
fi
echo "gpu_check: $fail failed"
[ "$fail" -eq 0 ]
