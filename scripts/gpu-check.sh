#!/usr/bin/env bash
# gpu-check.sh: the one command of a GPU device run. It builds osdp with the CUDA backend, runs
# the CPU smoke runs, a GPU probe (one process, then 2 ranks sharing the GPU, then one process
# with --matmul bf16 and one with --precision bf16), the GPU tests
# (CTest label `gpu`) and the GPU benchmark (bench/gpu_bench.sh), and writes to OUT (the first
# argument, else $OUT, else ./out):
#   gpu-check.log   everything it printed and everything the tools printed
#   gpu-check.json  the verdict and its problems, per phase status, time and limit, per GPU test
#                   pass/fail/skip, every run's (osdp's and PyTorch's) device, ranks, precision,
#                   matmul mode (fp32, tf32 or bf16; and "tf32": on exactly in tf32 mode) and
#                   transport (none, mpi, nccl or mpi-staging), and the benchmark's results
#   gpu-check.md    the same as tables (with bench/gpu_bench.sh's gpu-bench.md appended)
#
# The verdict cannot pass falsely. "No GPU" is decided once, up front, by `nvidia-smi -L`:
#   OK      (exit 0) a GPU is listed, osdp built, the smoke runs and the GPU probe ran, every
#           `gpu` test PASSED (a skip is a failure: OSDP_REQUIRE_GPU=1 is exported, so the tests
#           never skip) and the benchmark has an osdp run that reports device cuda for every
#           precision in GPU_CHECK_BENCH_REQUIRE (default fp32);
#   FAILED  (exit 1) anything else went wrong; each problem is named on its own line;
#   NO GPU  (exit 3) nvidia-smi is absent or lists no GPU and nothing else failed: a dry run (the
#           GPU tests must skip, the benchmark records osdp and PyTorch on CUDA as not
#           available); never OK;
#   STOPPED (exit 4) a precondition failed in the first seconds (the carried .gpu-deps/ absent
#           where needed, or glibc older than its files need: .gpu-deps/glibc-needed.txt);
#   exit 2  stopped by a signal from outside; the JSON says how far it got.
#
# Time: the device machine's time is scarce, so the run is time-boxed (GPU_CHECK_BUDGET
# seconds, default 330; the whole run stays under 6 minutes): each phase runs under `timeout`
# with what is left. The GPU-test phase's limit is sized from the GPU probe's measured process
# start (about 45 CUDA process starts, see gpu_tests below).
#
# Dependencies: the GPU machine has CUDA, gcc, cmake and python3 + PyTorch, but probably no
# OpenMPI, OpenBLAS, cJSON or pkg-config, and no network: scripts/gpu-deps.sh (run on the dev
# machine) puts the Debian 12 .deb files in .gpu-deps/, the run carries that folder, and this
# script unpacks the ones the system lacks with `dpkg -x` into a private prefix
# (GPU_CHECK_DEPS_PREFIX, default /tmp/osdp-deps; never /) and points CMake and the run time at
# it (relocated OpenMPI via OPAL_PREFIX). The system's MPI counts only when it is Open MPI (osdp's
# tests pass Open MPI's --oversubscribe). GPU_CHECK_FORCE_DEPS=1 uses the carried packages even
# where the system has its own, which is how the relocation is tested on the dev machine.
#
# Device run: carry [".gpu-deps"], command `bash scripts/gpu-check.sh`.
# Knobs: GPU_CHECK_BUDGET, GPU_CHECK_FORCE_DEPS, GPU_CHECK_DEPS_PREFIX, GPU_CHECK_DEPS_DIR (the
# carried packages, default .gpu-deps), GPU_CHECK_BUILD (build folder, default build-gpu),
# GPU_CHECK_REUSE_BUILD=1 (GPU_CHECK_BUILD as it is: no configure, no build; tests/gpu_check.sh
# uses it), GPU_CHECK_SKIP_BENCH=1 (then never OK), GPU_CHECK_BENCH_REQUIRE,
# GPU_CHECK_TEST_LABEL, and bench/gpu_bench.sh's BENCH_*.
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
OUT=${1:-${OUT:-$ROOT/out}}
mkdir -p "$OUT" || { echo "gpu-check: cannot make the output folder $OUT"; exit 1; }
OUT=$(cd "$OUT" && pwd)
export OUT
LOG=$OUT/gpu-check.log
JSON=$OUT/gpu-check.json
MD=$OUT/gpu-check.md
: > "$LOG"
exec > >(tee -a "$LOG") 2>&1
TEE_PID=$!

START=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET:-330}
BUILD=${GPU_CHECK_BUILD:-build-gpu}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
REUSE=${GPU_CHECK_REUSE_BUILD:-0}
P=${GPU_CHECK_DEPS_PREFIX:-/tmp/osdp-deps}
DEPS=${GPU_CHECK_DEPS_DIR:-$ROOT/.gpu-deps}
NPROC=$(nproc 2>/dev/null || echo 2)
LABEL=${GPU_CHECK_TEST_LABEL:-gpu}
BENCH_REQUIRE=${GPU_CHECK_BENCH_REQUIRE:-fp32}
SCRATCH=$(mktemp -d)
# The original library path, for programs that must not see the carried libraries (PyTorch).
export GPU_CHECK_ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

say() { echo "gpu-check: $*"; }
banner() { echo; echo "==== $* ($(elapsed)s elapsed, $(remaining)s left)"; }
elapsed() { echo $(($(date +%s) - START)); }
remaining() { echo $((START + BUDGET - $(date +%s))); }

# json_str S: S as a JSON string.
json_str() {
  local s=$1
  s=${s//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\n'/\\n}; s=${s//$'\t'/\\t}; s=${s//$'\r'/}
  s=$(printf '%s' "$s" | tr -d '\000-\010\013\014\016-\037')
  printf '"%s"' "$s"
}
json_bool() { if [ "$1" = 1 ] || [ "$1" = yes ] || [ "$1" = true ]; then echo true; else echo false; fi; }

# Phases: name, status (ok, failed, timeout, skipped, reused), seconds, limit, note; in order.
PHASES=()
declare -A PH_STATUS PH_SECONDS PH_LIMIT PH_NOTE
phase_end() { # NAME STATUS SECONDS NOTE [LIMIT]
  PHASES+=("$1"); PH_STATUS[$1]=$2; PH_SECONDS[$1]=$3; PH_NOTE[$1]=$4; PH_LIMIT[$1]=${5:-null}
  say "phase $1: $2${4:+ ($4)}"
  write_json
}

# What the JSON reports, filled in as the phases run.
ENV_GPU="none"; ENV_DRIVER=""; ENV_NVCC=""; ENV_GCC=""; ENV_CMAKE=""; ENV_TORCH=""; ENV_GLIBC=""
GPU_VISIBLE=0; GPU_WHY=""; GPU_LIST=()
START_COST=""  # seconds of the 1-rank GPU probe: the cost of one CUDA process start
FORCE=${GPU_CHECK_FORCE_DEPS:-0}
declare -A DEP_SRC=([mpi]=unknown [blas]=unknown [pkgconf]=unknown [cjson]=unknown)
CUDA_OPTION=no; BUILT=no
TESTS=()
declare -A T_RESULT T_SECONDS
RUN_JSON=()    # one JSON object per osdp / PyTorch run: see record_run
RUN_ROWS=()    # the same as Markdown table rows
PROBLEMS=()    # what keeps the verdict from OK, one line each (besides "no GPU")
VERDICT=running; EXIT=1
BENCH_JSON=$OUT/gpu-bench.json
rm -f "$BENCH_JSON" "$OUT/gpu-bench.md" "$MD"

# write_json: $JSON from what is known so far. Called after every phase, so that a run cut
# short still leaves its results; "finished" is false until the end.
FINISHED=0
write_json() {
  local ph t sep timed_out="" npass=0 nfail=0 nskip=0
  for ph in "${PHASES[@]}"; do [ "${PH_STATUS[$ph]}" = timeout ] && timed_out="$timed_out $ph"; done
  for t in "${TESTS[@]}"; do case ${T_RESULT[$t]} in pass) npass=$((npass+1));; skip) nskip=$((nskip+1));; *) nfail=$((nfail+1));; esac; done
  {
    printf '{\n  "ok": %s,\n  "verdict": %s,\n  "exit_status": %s,\n  "finished": %s,\n' \
      "$([ "$VERDICT" = ok ] && echo true || echo false)" "$(json_str "$VERDICT")" "$EXIT" "$(json_bool "$FINISHED")"
    printf '  "problems": ['; sep=""; for t in "${PROBLEMS[@]}"; do printf '%s\n    %s' "$sep" "$(json_str "$t")"; sep=","; done
    printf '%s],\n' "$([ ${#PROBLEMS[@]} -gt 0 ] && printf '\n  ')"
    printf '  "gpu_visible": %s,\n  "gpu_visible_why": %s,\n  "gpus": [' "$(json_bool "$GPU_VISIBLE")" "$(json_str "$GPU_WHY")"
    sep=""; for t in "${GPU_LIST[@]}"; do printf '%s%s' "$sep" "$(json_str "$t")"; sep=", "; done; printf '],\n'
    printf '  "budget_s": %s,\n  "elapsed_s": %s,\n  "gpu_process_start_s": %s,\n' "$BUDGET" "$(elapsed)" "${START_COST:-null}"
    printf '  "timed_out_phases": ['; sep=""; for ph in $timed_out; do printf '%s%s' "$sep" "$(json_str "$ph")"; sep=", "; done; printf '],\n'
    printf '  "environment": {"gpu": %s, "driver": %s, "nvcc": %s, "gcc": %s, "glibc": %s, "cmake": %s, "torch": %s, "nproc": %s},\n' \
      "$(json_str "$ENV_GPU")" "$(json_str "$ENV_DRIVER")" "$(json_str "$ENV_NVCC")" "$(json_str "$ENV_GCC")" "$(json_str "$ENV_GLIBC")" \
      "$(json_str "$ENV_CMAKE")" "$(json_str "$ENV_TORCH")" "$NPROC"
    printf '  "dependencies": {"forced": %s, "prefix": %s, "mpi": %s, "blas": %s, "pkg_config": %s, "cjson": %s},\n' \
      "$(json_bool "$FORCE")" "$(json_str "$P")" "$(json_str "${DEP_SRC[mpi]}")" \
      "$(json_str "${DEP_SRC[blas]}")" "$(json_str "${DEP_SRC[pkgconf]}")" "$(json_str "${DEP_SRC[cjson]}")"
    printf '  "build": {"dir": %s, "reused": %s, "cuda_option_in_cmake": %s, "built": %s},\n' "$(json_str "$BUILD")" \
      "$(json_bool "$REUSE")" "$(json_bool "$CUDA_OPTION")" "$(json_bool "$BUILT")"
    printf '  "phases": ['; sep=""
    for ph in "${PHASES[@]}"; do
      printf '%s\n    {"name": %s, "status": %s, "seconds": %s, "limit_s": %s, "note": %s}' "$sep" "$(json_str "$ph")" \
        "$(json_str "${PH_STATUS[$ph]}")" "${PH_SECONDS[$ph]:-0}" "${PH_LIMIT[$ph]:-null}" "$(json_str "${PH_NOTE[$ph]}")"; sep=","
    done
    printf '\n  ],\n'
    printf '  "runs": ['; sep=""; for t in "${RUN_JSON[@]}"; do printf '%s\n    %s' "$sep" "$t"; sep=","; done
    printf '%s],\n' "$([ ${#RUN_JSON[@]} -gt 0 ] && printf '\n  ')"
    printf '  "gpu_tests": {"label": %s, "count": %s, "passed": %s, "failed": %s, "skipped": %s, "tests": [' \
      "$(json_str "$LABEL")" "${#TESTS[@]}" "$npass" "$nfail" "$nskip"
    sep=""
    for t in "${TESTS[@]}"; do
      printf '%s\n    {"name": %s, "result": %s, "seconds": %s}' "$sep" "$(json_str "$t")" "$(json_str "${T_RESULT[$t]}")" "${T_SECONDS[$t]}"; sep=","
    done
    printf '%s]},\n' "$([ ${#TESTS[@]} -gt 0 ] && printf '\n  ')"
    if [ -s "$BENCH_JSON" ]; then printf '  "bench": '; cat "$BENCH_JSON"; printf '\n'
    else printf '  "bench": null\n'; fi
    printf '}\n'
  } > "$JSON"
}

# limit CAP RESERVE: seconds a phase may take: CAP, or less so that RESERVE seconds stay for
# the phases after it; at least 5.
limit() {
  local t=$(($(remaining) - $2))
  [ "$t" -gt "$1" ] && t=$1
  [ "$t" -lt 5 ] && t=5
  echo "$t"
}

# run_phase NAME CAP RESERVE CMD...: runs CMD under timeout and records the phase. With
# CAPTURE=FILE set, CMD's output also goes to FILE. Sets PHASE_SECONDS.
run_phase() {
  local name=$1 cap=$2 reserve=$3 t t0 rc status note=""
  shift 3
  # The budget spent: not started at all (a timeout), so that the whole run stays in its box.
  if [ "$(remaining)" -lt 5 ]; then
    PHASE_SECONDS=0
    phase_end "$name" timeout 0 "not started: the ${BUDGET}s budget is spent" 0
    return 124
  fi
  t=$(limit "$cap" "$reserve")
  banner "$name (timeout ${t}s): $*"
  t0=$(date +%s)
  # In the background and waited for, so that a TERM from outside runs the trap at once.
  if [ -n "${CAPTURE:-}" ]; then
    timeout -k 5 "$t" "$@" > >(tee "$CAPTURE") 2>&1 &
  else
    timeout -k 5 "$t" "$@" &
  fi
  CHILD=$!
  wait "$CHILD"
  rc=$?
  CHILD=""
  # tee of CAPTURE may lag behind the command: wait for the file to be complete.
  [ -n "${CAPTURE:-}" ] && sleep 0.2
  case $rc in
    0) status=ok ;;
    124|137) status=timeout; note="killed after ${t}s" ;;
    *) status=failed; note="exit $rc" ;;
  esac
  PHASE_SECONDS=$(($(date +%s) - t0))
  phase_end "$name" "$status" "$PHASE_SECONDS" "$note" "$t"
  return "$rc"
}

# first_error FILE: the first line of FILE that reads as an error (a compiler's or CMake's first,
# then any failure), else its last non-blank line.
first_error() {
  local l
  l=$(grep -m 1 -E 'error:|CMake Error|fatal' "$1" 2>/dev/null)
  [ -n "$l" ] || l=$(grep -m 1 -iE 'error|fail|abort|illegal|not found|cannot' "$1" 2>/dev/null)
  [ -n "$l" ] || l=$(grep -v '^[[:space:]]*$' "$1" 2>/dev/null | tail -n 1)
  printf '%s' "${l:0:300}"
}

# phase_problem NAME WHAT FILE: the phase NAME (doing WHAT) did not succeed: a problem naming its
# status and the first error in FILE, its captured output.
phase_problem() {
  local err
  err=$(first_error "$3")
  problem "$1 ($2): ${PH_STATUS[$1]}${PH_NOTE[$1]:+ (${PH_NOTE[$1]})}${err:+: $err}"
}

# record_run NAME DEVICE RANKS PRECISION MATMUL STATUS SECONDS [OUTPUT_FILE]: one run for the
# JSON's "runs" and the Markdown table. MATMUL is the mode of its matrix products (fp32, tf32 or
# bf16; n/a on the CPU, - where unknown); "tf32" says on for tf32, off for fp32 and bf16, as the
# records before --matmul did. The transport of a run's collectives: none for one rank,
# mpi for CPU ranks, and for GPU ranks what osdp said with OSDP_COMM_VERBOSE=1 ("collectives
# over NCCL" or "... MPI with host staging"), unknown if it said nothing.
record_run() {
  local name=$1 device=$2 ranks=$3 prec=$4 matmul=$5 status=$6 secs=$7 file=${8:-} transport=none tf32
  case $matmul in tf32) tf32=on ;; fp32|bf16) tf32=off ;; *) tf32=$matmul ;; esac
  if [ "$ranks" -gt 1 ]; then
    if [ "$device" = cpu ]; then transport=mpi
    elif [ -n "$file" ] && grep -q 'collectives over NCCL' "$file"; then transport=nccl
    elif [ -n "$file" ] && grep -q 'collectives over MPI with host staging' "$file"; then transport=mpi-staging
    else transport=unknown; fi
  fi
  RUN_JSON+=("{\"name\": $(json_str "$name"), \"device\": $(json_str "$device"), \"ranks\": $ranks, \"precision\": $(json_str "$prec"), \"matmul\": $(json_str "$matmul"), \"tf32\": $(json_str "$tf32"), \"transport\": $(json_str "$transport"), \"status\": $(json_str "$status"), \"seconds\": ${secs:-null}}")
  RUN_ROWS+=("| $name | $device | $ranks | $prec | $matmul | $tf32 | $transport | $status | ${secs:--} |")
}

# problem TEXT: one thing that keeps the verdict from OK.
problem() { PROBLEMS+=("$1"); say "PROBLEM: $1"; }

# stop REASON: a precondition failed: say so in one line, write the JSON and exit 4.
stop() {
  VERDICT=stopped; EXIT=4; FINISHED=1
  PROBLEMS+=("$1")
  write_json
  say "verdict: STOPPED: $1"
  finish
}

# finish: closes the log and exits with EXIT.
finish() {
  rm -rf "$SCRATCH"
  exec >&- 2>&-
  wait "$TEE_PID" 2>/dev/null
  exit "$EXIT"
}

# Stopped from outside (the device run's own limit): leave the JSON as it stands.
CHILD=""
# shellcheck disable=SC2317  # reached through the trap
on_signal() {
  trap '' PIPE  # the log's tee may be gone already
  [ -n "$CHILD" ] && kill -TERM "$CHILD" 2>/dev/null
  say "interrupted after $(elapsed)s"
  PHASES+=(interrupted); PH_STATUS[interrupted]=timeout; PH_SECONDS[interrupted]=0
  PH_NOTE[interrupted]="stopped by a signal from outside"
  VERDICT=interrupted; EXIT=2
  write_json
  rm -rf "$SCRATCH"
  exit 2
}
trap on_signal TERM INT HUP

# ---------------------------------------------------------------- preflight (first seconds)
# Whether a GPU is there (nvidia-smi -L, once: every later "no GPU" is this answer), which
# dependencies must come from .gpu-deps/, and whether they can: a run that cannot succeed stops
# here, not after minutes of building.
banner "preflight"
t0=$(date +%s)
[ -d /usr/local/cuda/bin ] && case ":$PATH:" in *:/usr/local/cuda/bin:*) ;; *) PATH=$PATH:/usr/local/cuda/bin ;; esac
if ! command -v nvidia-smi >/dev/null; then
  GPU_WHY="nvidia-smi not found"
else
  mapfile -t GPU_LIST < <(timeout 20 nvidia-smi -L 2>/dev/null | grep -E '^GPU [0-9]+:')
  if [ "${#GPU_LIST[@]}" -gt 0 ]; then
    GPU_VISIBLE=1; GPU_WHY="nvidia-smi -L lists ${#GPU_LIST[@]} GPU(s)"
  else
    GPU_WHY="nvidia-smi -L lists no GPU"
  fi
fi
if [ "$GPU_VISIBLE" = 1 ]; then
  # The GPU tests may then never skip: a backend that cannot start is a failure.
  export OSDP_REQUIRE_GPU=1
  printf '  %s\n' "${GPU_LIST[@]}"
  say "GPU: $GPU_WHY: every GPU test must pass (OSDP_REQUIRE_GPU=1)"
else
  say "no GPU: $GPU_WHY; a dry run, whose verdict is NO GPU at best"
fi
ENV_GLIBC=$(ldd --version 2>/dev/null | sed -n '1s/.* //p')

# Which of MPI (Open MPI only), OpenBLAS (OpenMP build), pkg-config and cJSON the system has; the
# missing ones (all with GPU_CHECK_FORCE_DEPS=1) come from the carried .deb files.
ML=x86_64-linux-gnu
need_groups=""
# sys_has COMPONENT: whether the system provides it as osdp's build and tests need it.
sys_has() {
  case $1 in
    # Open MPI only: the tests launch with --oversubscribe (MPICH's mpirun has no such option).
    mpi) command -v mpicc >/dev/null && command -v mpirun >/dev/null &&
         timeout 10 mpirun --version 2>&1 | grep -q 'Open MPI' ;;
    blas) [ -e /usr/lib/$ML/openblas-openmp/libopenblas.so ] && [ -e /usr/include/$ML/openblas-openmp/cblas.h ] ;;
    pkgconf) command -v pkg-config >/dev/null ;;
    cjson) command -v pkg-config >/dev/null && pkg-config --exists libcjson ;;
  esac
}
for c in mpi blas pkgconf cjson; do
  if [ "$FORCE" = 1 ] || ! sys_has $c; then DEP_SRC[$c]=carried; need_groups="$need_groups $c"; else DEP_SRC[$c]=system; fi
done
if [ "${DEP_SRC[mpi]}" = carried ] && [ "$FORCE" != 1 ] && command -v mpirun >/dev/null; then
  say "the system's mpirun is not Open MPI ($(timeout 10 mpirun --version 2>&1 | head -n 1)): using the carried Open MPI"
fi
if [ -n "$need_groups" ]; then
  say "this machine lacks:$need_groups (force=$FORCE): the carried packages are needed"
  [ -s "$DEPS/packages.txt" ] ||
    stop "no ${DEPS#"$ROOT"/}/packages.txt (the carried packages, needed for:$need_groups): run \`bash scripts/gpu-deps.sh\` on the dev machine, then carry .gpu-deps with the run"
  # The oldest glibc the carried files run on, as scripts/gpu-deps.sh measured it (their newest
  # GLIBC_ symbol version); Debian 12's own 2.36 where it did not.
  GLIBC_NEEDED=$(cat "$DEPS/glibc-needed.txt" 2>/dev/null); [[ $GLIBC_NEEDED =~ ^[0-9]+\.[0-9]+$ ]] || GLIBC_NEEDED=2.36
  if [ -z "$ENV_GLIBC" ] || [ "$(printf '%s\n' "$GLIBC_NEEDED" "$ENV_GLIBC" | sort -V | head -n 1)" != "$GLIBC_NEEDED" ]; then
    stop "glibc ${ENV_GLIBC:-unknown} is older than $GLIBC_NEEDED, which the carried Debian 12 packages need (for:$need_groups): use an image with glibc >= $GLIBC_NEEDED or one that has them installed"
  fi
fi
say "glibc ${ENV_GLIBC:-unknown}${GLIBC_NEEDED:+ (carried packages need $GLIBC_NEEDED)}; sources: mpi=${DEP_SRC[mpi]} blas=${DEP_SRC[blas]} pkg-config=${DEP_SRC[pkgconf]} cjson=${DEP_SRC[cjson]}"
phase_end preflight ok $(($(date +%s) - t0)) "$GPU_WHY"

# ---------------------------------------------------------------- environment
banner "environment"
t0=$(date +%s)
say "host $(hostname 2>/dev/null), $NPROC cores, $(uname -sr), $(sed -n "s/^PRETTY_NAME=//p" /etc/os-release 2>/dev/null | tr -d '"')"
if [ "$GPU_VISIBLE" = 1 ]; then
  timeout 20 nvidia-smi 2>&1 | head -n 12
  ENV_GPU=$(timeout 20 nvidia-smi --query-gpu=name,memory.total,compute_cap --format=csv,noheader 2>/dev/null | head -n 1)
  ENV_DRIVER=$(timeout 20 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
else
  ENV_GPU="none ($GPU_WHY)"
fi
say "GPU: $ENV_GPU${ENV_DRIVER:+, driver $ENV_DRIVER}"
if command -v nvcc >/dev/null; then nvcc --version | tail -n 2; ENV_NVCC=$(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'); else say "nvcc not found"; fi
if command -v gcc >/dev/null; then gcc --version | head -n 1; ENV_GCC=$(gcc -dumpfullversion 2>/dev/null); else say "gcc not found"; fi
# CMake and ninja from pip may sit in a folder that is not on PATH: ask their Python packages.
for tool in cmake ninja; do
  command -v $tool >/dev/null && continue
  d=$(python3 -c "import $tool, os; print(getattr($tool, 'BIN_DIR', None) or getattr($tool, 'CMAKE_BIN_DIR'))" 2>/dev/null)
  if [ -n "$d" ] && [ -x "$d/$tool" ]; then PATH=$PATH:$d; say "$tool found through its Python package in $d"; fi
done
if command -v cmake >/dev/null; then cmake --version | head -n 1; ENV_CMAKE=$(cmake --version | sed -n '1s/.* //p'); else say "cmake not found"; fi
if command -v ninja >/dev/null; then say "ninja $(ninja --version)"; else say "ninja not found: Unix Makefiles"; fi
# PyTorch's version from its package metadata: importing torch here would cost seconds for a
# version string (the benchmark imports it anyway and says whether CUDA is available to it).
if command -v python3 >/dev/null; then
  ENV_TORCH=$(timeout 20 env ${GPU_CHECK_ORIG_LD_LIBRARY_PATH:+LD_LIBRARY_PATH=$GPU_CHECK_ORIG_LD_LIBRARY_PATH} python3 -c \
    'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null | tail -n 1)
  say "$(python3 --version 2>&1), PyTorch ${ENV_TORCH:-not installed}"
  ENV_TORCH=${ENV_TORCH:-not installed}
else
  say "python3 not found"
fi
phase_end environment ok $(($(date +%s) - t0)) ""

# ---------------------------------------------------------------- dependencies
# Unpacks the carried packages that preflight found needed (once per package set; the prefix
# keeps a stamp) and points the build and the run time at them.
banner "dependencies"
t0=$(date +%s)
deps_note=""
if [ -n "$need_groups" ]; then
  need_groups="$need_groups runtime"
  say "carried packages for:$need_groups, prefix $P"
  stamp="$(cat "$DEPS/packages.txt") groups:$need_groups"
  case $P in
    /*) [[ $P =~ ^/(usr|bin|sbin|lib|lib64|etc|boot|dev|proc|sys)?/?$ ]] && deps_note="refusing prefix $P" ;;
    *) deps_note="GPU_CHECK_DEPS_PREFIX must be an absolute path, not '$P'" ;;
  esac
  if [ -z "$deps_note" ] && [ -e "$P" ] && [ ! -f "$P/.osdp-deps" ] && [ -n "$(ls -A "$P" 2>/dev/null)" ]; then
    deps_note="$P exists and was not made by this script: not touching it"
  fi
  if [ -n "$deps_note" ]; then
    say "$deps_note"
    for c in $need_groups; do [ "$c" = runtime ] || DEP_SRC[$c]=missing; done
  elif [ -f "$P/.osdp-deps" ] && [ "$(cat "$P/.osdp-deps")" = "$stamp" ]; then
    say "prefix $P already unpacked for these packages"
  else
    rm -rf "$P"; mkdir -p "$P/runtime-all" "$P/runtime-lib"
    while read -r g pkg f; do
      case " $need_groups " in *" $g "*) ;; *) continue ;; esac
      if [ "$g" = runtime ]; then dpkg -x "$DEPS/$f" "$P/runtime-all" || say "dpkg -x $f failed"
      else dpkg -x "$DEPS/$f" "$P" || say "dpkg -x $f failed"; fi
      echo "  unpacked $pkg ($g)"
    done < "$DEPS/packages.txt"
    # OpenMPI plugins for network fabrics (InfiniBand, OFI, UCX, PSM): their libraries are not
    # carried, so remove them rather than have OpenMPI warn that it cannot open them. The same
    # pattern is in scripts/gpu-deps.sh.
    find "$P" -type f -o -type l | grep -E '/openmpi3/mca_[a-z]+_(ofi|ucx|openib|psm|psm2|netlink)\.so$|/libmca_common_(ofi|ucx|verbs)\.so' | xargs -r rm -f
    find "$P" -name '*.a' -delete   # static libraries: unused, 60 MB of them
    # What Debian's alternatives and postinst scripts would have made.
    if [ -e "$P/usr/bin/mpicc.openmpi" ]; then
      for w in mpicc mpirun mpiexec; do ln -sf "$w.openmpi" "$P/usr/bin/$w"; done
    fi
    [ -e "$P/usr/lib/$ML/pkgconfig/libcjson.pc" ] &&
      sed -i "s|^libdir=/usr|libdir=$P/usr|; s|^includedir=/usr|includedir=$P/usr|" "$P/usr/lib/$ML/pkgconfig/libcjson.pc"
    # Runtime libraries: only those the system lacks (never shadow a newer system libgomp).
    cache=$( (ldconfig -p || /sbin/ldconfig -p) 2>/dev/null)
    while IFS= read -r lib; do
      name=${lib##*/}
      if printf '%s\n' "$cache" | grep -q "^[[:space:]]*$name "; then continue; fi
      ln -sf "$(readlink -f "$lib")" "$P/runtime-lib/$name"
      echo "  system lacks $name: using the carried one"
    done < <(find "$P/runtime-all" -name 'lib*.so.[0-9]*' \( -type l -o -type f \) | awk -F/ '$NF ~ /\.so\.[0-9]+$/')
    echo "$stamp" > "$P/.osdp-deps"
  fi
fi
CMAKE_DEP_ARGS=()
if [ -z "$deps_note" ] && [ -f "$P/.osdp-deps" ] && [ -n "$need_groups" ]; then
  LD_LIBRARY_PATH=$P/usr/lib/$ML:$P/usr/lib/$ML/openblas-openmp:$P/lib/$ML:$P/runtime-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LD_LIBRARY_PATH
  if [ "${DEP_SRC[mpi]}" = carried ]; then
    # OpenMPI relocates itself by OPAL_PREFIX; PMIx 4.2 honours no prefix variable, only the
    # path of its plugins (without them it prints "help about: unavailable" for pcompress).
    export OPAL_PREFIX=$P/usr PMIX_MCA_mca_base_component_path=$P/usr/lib/$ML/pmix2/lib/pmix PATH=$P/usr/bin:$PATH
    # Without ssh/rsh, OpenMPI's default launcher refuses to start even a local job.
    command -v ssh >/dev/null || command -v rsh >/dev/null || export OMPI_MCA_plm=isolated
    CMAKE_DEP_ARGS+=("-DMPI_C_COMPILER=$P/usr/bin/mpicc" "-DMPIEXEC_EXECUTABLE=$P/usr/bin/mpirun")
  fi
  if [ "${DEP_SRC[blas]}" = carried ]; then
    CMAKE_DEP_ARGS+=("-DOPENBLAS_LIB=$P/usr/lib/$ML/openblas-openmp/libopenblas.so"
                     "-DCBLAS_INCLUDE=$P/usr/include/$ML/openblas-openmp")
  fi
  if [ "${DEP_SRC[pkgconf]}" = carried ]; then
    CMAKE_DEP_ARGS+=("-DPKG_CONFIG_EXECUTABLE=$P/usr/bin/pkgconf")
    [ "${DEP_SRC[mpi]}" = carried ] || export PATH=$P/usr/bin:$PATH
  fi
  if [ "${DEP_SRC[cjson]}" = carried ]; then
    export PKG_CONFIG_PATH=$P/usr/lib/$ML/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  fi
  CMAKE_DEP_ARGS+=("-DCMAKE_PREFIX_PATH=$P/usr")
  env | grep -E '^(LD_LIBRARY_PATH|OPAL_PREFIX|PMIX_MCA_[a-z_]*|PKG_CONFIG_PATH|OMPI_MCA_[a-z_]*)=' | sort | sed 's/^/  /'
  say "mpirun: $(command -v mpirun), pkg-config: $(command -v pkg-config)"
fi
deps_status=ok
for c in mpi blas pkgconf cjson; do [ "${DEP_SRC[$c]}" = missing ] && deps_status=failed; done
[ "$deps_status" = ok ] || problem "dependencies: $deps_note"
phase_end dependencies $deps_status $(($(date +%s) - t0)) "$deps_note"

# ---------------------------------------------------------------- configure and build
OSDP=$BUILD/osdp
grep -q 'OSDP_CUDA' CMakeLists.txt && CUDA_OPTION=yes
if [ "$REUSE" = 1 ]; then
  # The build folder as it is (tests/gpu_check.sh: the tree CTest runs in).
  if [ -x "$OSDP" ] && [ -f "$BUILD/CTestTestfile.cmake" ]; then
    BUILT=yes; phase_end build reused 0 "GPU_CHECK_REUSE_BUILD=1: $BUILD as it is"
  else
    problem "build: GPU_CHECK_REUSE_BUILD=1 but $BUILD holds no built osdp"
    phase_end build failed 0 "no $OSDP"
  fi
else
  GEN=()
  command -v ninja >/dev/null && GEN=(-G Ninja)
  CUDA_ARGS=()
  if command -v nvcc >/dev/null; then
    CUDA_ARGS+=("-DCMAKE_CUDA_COMPILER=$(command -v nvcc)")
    # Build for this GPU only (faster than CMake's default list), unless the project picks its own.
    cc=$(timeout 20 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
    if [[ $cc =~ ^[0-9]+$ ]] && ! grep -rqs CMAKE_CUDA_ARCHITECTURES CMakeLists.txt cmake/; then
      CUDA_ARGS+=("-DCMAKE_CUDA_ARCHITECTURES=$cc")
    fi
  fi
  CONFIG=(-S . -B "$BUILD" "${GEN[@]}" -DOSDP_CUDA=ON -DCMAKE_BUILD_TYPE=Release "${CMAKE_DEP_ARGS[@]}" "${CUDA_ARGS[@]}")
  # A build folder configured differently (other dependencies) is started afresh: CMake's cache
  # would keep the old library paths.
  if [ -f "$BUILD/.gpu-check-config" ] && [ "$(cat "$BUILD/.gpu-check-config")" != "${CONFIG[*]}" ]; then
    say "build folder $BUILD was configured differently: removing it"; rm -rf "$BUILD"
  fi
  if CAPTURE=$SCRATCH/configure run_phase configure 90 200 cmake "${CONFIG[@]}"; then
    echo "${CONFIG[*]}" > "$BUILD/.gpu-check-config"
    grep -E '^(OSDP_CUDA|CMAKE_CUDA_COMPILER|CMAKE_CUDA_ARCHITECTURES|MPI_C_COMPILER|MPIEXEC_EXECUTABLE|OPENBLAS_LIB|CBLAS_INCLUDE|CJSON_LINK_LIBRARIES|PKG_CONFIG_EXECUTABLE)[:=]' "$BUILD/CMakeCache.txt" | sed 's/^/  cache: /'
    if CAPTURE=$SCRATCH/build run_phase build 200 120 cmake --build "$BUILD" -j "$NPROC"; then BUILT=yes
    else phase_problem build "cmake --build" "$SCRATCH/build"; fi
  else
    phase_problem configure cmake "$SCRATCH/configure"
    phase_end build skipped 0 "configure failed"
  fi
fi
# Every library osdp needs must resolve through its run path or the library path set above, not
# through an ld.so.conf entry the GPU image may lack (CMakeLists.txt puts CUDA's on the run path).
if [ "$BUILT" = yes ] && command -v ldd >/dev/null; then
  readelf -d "$OSDP" 2>/dev/null | grep -E 'RUNPATH|RPATH' | sed 's/^ */  /'
  ldd "$OSDP" | grep -E 'mpi|openblas|cjson|gfortran|gomp|cuda|cublas|not found' | sed 's/^/  ldd: /'
  missing=$(ldd "$OSDP" | awk '/not found/ {print $1}' | tr '\n' ' ')
  [ -z "$missing" ] || problem "osdp: libraries not found: $missing"
fi

# ---------------------------------------------------------------- smoke: the CPU path runs
# A 3-step train of the tiny model, once in one process and once on 2 ranks through mpirun:
# proves the build and the (possibly relocated) MPI work before the GPU phases.
SMOKE=(train --model tiny --steps 3 --precision fp32 --json)
if [ "$BUILT" = yes ]; then
  CAPTURE=$SCRATCH/smoke1 run_phase smoke_1rank 30 120 "$OSDP" "${SMOKE[@]}" --device cpu
  record_run smoke_1rank cpu 1 fp32 n/a "${PH_STATUS[smoke_1rank]}" "$PHASE_SECONDS" "$SCRATCH/smoke1"
  [ "${PH_STATUS[smoke_1rank]}" = ok ] || phase_problem smoke_1rank "osdp train on the CPU" "$SCRATCH/smoke1"
  CAPTURE=$SCRATCH/smoke2 run_phase smoke_2ranks 40 120 mpirun --oversubscribe --bind-to none -np 2 "$OSDP" "${SMOKE[@]}" --device cpu
  record_run smoke_2ranks cpu 2 fp32 n/a "${PH_STATUS[smoke_2ranks]}" "$PHASE_SECONDS" "$SCRATCH/smoke2"
  [ "${PH_STATUS[smoke_2ranks]}" = ok ] || phase_problem smoke_2ranks "mpirun -np 2 osdp train on the CPU" "$SCRATCH/smoke2"
fi

# ---------------------------------------------------------------- GPU probe
# Where a GPU is listed: one osdp process on it (its time is the cost of one CUDA process start,
# which sizes the GPU tests' limit), then 2 ranks sharing it (MPI with host staging), then one
# process with matrix products and attention in bf16 (--matmul bf16). A backend that fails to
# start is named here, with osdp's own message. OSDP_COMM_VERBOSE=1 makes rank 0
# say which transport carries the collectives.
if [ "$BUILT" = yes ] && [ "$GPU_VISIBLE" = 1 ]; then
  GPU_RUN=("${SMOKE[@]}" --device cuda --tf32 on)
  CAPTURE=$SCRATCH/gpu1 run_phase gpu_1rank 60 120 env OSDP_COMM_VERBOSE=1 "$OSDP" "${GPU_RUN[@]}"
  record_run gpu_1rank cuda 1 fp32 tf32 "${PH_STATUS[gpu_1rank]}" "$PHASE_SECONDS" "$SCRATCH/gpu1"
  if [ "${PH_STATUS[gpu_1rank]}" = ok ]; then
    START_COST=$PHASE_SECONDS
    CAPTURE=$SCRATCH/gpu2 run_phase gpu_2ranks 60 120 mpirun --oversubscribe --bind-to none -np 2 \
      env OSDP_COMM_VERBOSE=1 "$OSDP" "${GPU_RUN[@]}"
    record_run gpu_2ranks cuda 2 fp32 tf32 "${PH_STATUS[gpu_2ranks]}" "$PHASE_SECONDS" "$SCRATCH/gpu2"
    [ "${PH_STATUS[gpu_2ranks]}" = ok ] || phase_problem gpu_2ranks "2 ranks sharing the GPU" "$SCRATCH/gpu2"
    # The same run with matrix products and attention on bf16 tensor cores (--matmul bf16):
    # about one more process start.
    CAPTURE=$SCRATCH/gpu1bf16 run_phase gpu_1rank_bf16 60 120 "$OSDP" "${SMOKE[@]}" --device cuda --matmul bf16
    record_run gpu_1rank_bf16 cuda 1 fp32 bf16 "${PH_STATUS[gpu_1rank_bf16]}" "$PHASE_SECONDS" "$SCRATCH/gpu1bf16"
    [ "${PH_STATUS[gpu_1rank_bf16]}" = ok ] || phase_problem gpu_1rank_bf16 "osdp train --matmul bf16 on the GPU" "$SCRATCH/gpu1bf16"
    # And with bf16 storage (--precision bf16: bf16 activations and weight copies).
    CAPTURE=$SCRATCH/gpu1bf16s run_phase gpu_1rank_bf16_storage 60 120 "$OSDP" train --model tiny --steps 3 \
      --precision bf16 --json --device cuda --matmul bf16
    record_run gpu_1rank_bf16_storage cuda 1 bf16 bf16 "${PH_STATUS[gpu_1rank_bf16_storage]}" "$PHASE_SECONDS" "$SCRATCH/gpu1bf16s"
    [ "${PH_STATUS[gpu_1rank_bf16_storage]}" = ok ] ||
      phase_problem gpu_1rank_bf16_storage "osdp train --precision bf16 on the GPU" "$SCRATCH/gpu1bf16s"
  else
    phase_problem gpu_1rank "the CUDA backend did not start although $GPU_WHY" "$SCRATCH/gpu1"
  fi
fi

# ---------------------------------------------------------------- GPU tests
# ctest -L '^gpu$' (GPU_CHECK_TEST_LABEL: another label, to try this on the dev machine). Each
# test's line "N/M Test #K: NAME .....   Passed|***Failed|***Skipped|***Timeout ... S sec" gives
# its outcome. A GPU test skips (77) only where no GPU is visible and OSDP_REQUIRE_GPU is unset.
# The limit: the tests start about 45 CUDA processes (gpu_train.sh: 2 models x (8 plans on 1
# rank, 5 of them fp32 and 3 bf16, + 8 on 2 ranks + 1) + its probe, test_cuda_kernels and
# test_cuda_bf16), each costing about the probe's time: 60 s + 50 x the probe's seconds, from
# 120 to 270 s.
if [ "$BUILT" = yes ]; then
  cap=120
  if [ -n "$START_COST" ]; then
    cap=$((60 + 50 * START_COST)); [ $cap -lt 120 ] && cap=120; [ $cap -gt 270 ] && cap=270
    say "one CUDA process start measured at ~${START_COST}s: the GPU tests get up to ${cap}s"
  fi
  CTEST_LOG=$SCRATCH/ctest
  ctest_dir=$BUILD
  if [ "$REUSE" = 1 ]; then
    # A build that is not ours (tests/gpu_check.sh runs this from a CTest of that build): ctest
    # runs from a scratch folder that includes it, so that its Testing/ logs stay untouched.
    ctest_dir=$SCRATCH/ctest-dir; mkdir -p "$ctest_dir"
    printf 'subdirs("%s")\n' "$BUILD" > "$ctest_dir/CTestTestfile.cmake"
  fi
  CAPTURE=$CTEST_LOG run_phase gpu_tests "$cap" 60 ctest --test-dir "$ctest_dir" -L "^${LABEL}\$" --output-on-failure --no-tests=ignore
  while IFS='|' read -r name res secs_t; do
    TESTS+=("$name"); T_RESULT[$name]=$res; T_SECONDS[$name]=$secs_t
  done < <(awk '
    match($0, /Test +#[0-9]+: [^ ]+ /) {
      split(substr($0, RSTART, RLENGTH), a, ": "); name = a[2]; sub(/ +$/, "", name)
      rest = substr($0, RSTART + RLENGTH); gsub(/^[ .*]+/, "", rest)
      sec = "null"; nw = split(rest, w, / +/)
      for (i = 2; i <= nw; i++) if (w[i] == "sec" && w[i - 1] ~ /^[0-9.]+$/) sec = w[i - 1]
      if (rest ~ /^Passed/) r = "pass"; else if (rest ~ /^Skipped/) r = "skip";
      else if (rest ~ /^Timeout/) r = "timeout"; else if (rest ~ /^Not Run/) r = "not_run";
      else r = "fail"
      print name "|" r "|" sec
    }' "$CTEST_LOG")
  nbad=0
  for t in "${TESTS[@]}"; do
    case ${T_RESULT[$t]} in
      pass) ;;
      skip)
        # A skip is "no GPU"; where one is listed, it is a failure.
        [ "$GPU_VISIBLE" = 1 ] && { nbad=$((nbad + 1)); problem "gpu test $t: skipped although $GPU_WHY"; } ;;
      *)
        # The test's own first failure line, from its output in the ctest log.
        nbad=$((nbad + 1))
        case $t in
          gpu_kernels) pat='^test_cuda_kernels: FAIL|CHECK failed|osdp: error' ;;
          gpu_bf16) pat='^test_cuda_bf16: FAIL|CHECK failed|osdp: error' ;;
          gpu_train) pat='^gpu_train: FAIL|^FAIL ' ;;
          *) pat='FAIL|CHECK failed|osdp: error' ;;
        esac
        why=$(grep -m 1 -E "$pat" "$CTEST_LOG")
        problem "gpu test $t: ${T_RESULT[$t]}${why:+: ${why:0:300}}" ;;
    esac
  done
  case ${PH_STATUS[gpu_tests]} in
    timeout) problem "gpu_tests: ctest ${PH_NOTE[gpu_tests]}" ;;
    failed) [ "$nbad" = 0 ] && problem "gpu_tests: ctest failed (${PH_NOTE[gpu_tests]}) with no failed test: see the log" ;;
  esac
  if [ "${#TESTS[@]}" = 0 ]; then
    PH_NOTE[gpu_tests]="no test has the label $LABEL in this build"
    if [ "$GPU_VISIBLE" = 1 ]; then problem "gpu_tests: no test carries the label $LABEL (CUDA backend not built?)"
    else say "no test carries the label $LABEL in this build (CUDA backend not built?)"; fi
  fi
  say "GPU tests: ${#TESTS[@]} ran, $nbad failed, skipped or timed out$([ "$GPU_VISIBLE" = 1 ] || echo ' (skips allowed: no GPU)')"
  if [ "$GPU_VISIBLE" != 1 ]; then
    npassed=0; for t in "${TESTS[@]}"; do [ "${T_RESULT[$t]}" = pass ] && npassed=$((npassed + 1)); done
    # A GPU that works but is not listed (nvidia-smi missing from the image): still NO GPU,
    # since nothing then required the tests to run, but say so.
    [ "$npassed" -gt 0 ] && say "note: $GPU_WHY, yet $npassed GPU test(s) passed: put nvidia-smi on PATH for a real verdict"
  fi
else
  phase_end gpu_tests skipped 0 "no build"
fi

# ---------------------------------------------------------------- benchmark
# bench/gpu_bench.sh; then every run it made into "runs", and, where a GPU is listed, an osdp
# run reporting device cuda for each precision in GPU_CHECK_BENCH_REQUIRE.
if [ "${GPU_CHECK_SKIP_BENCH:-0}" = 1 ]; then
  phase_end bench skipped 0 "GPU_CHECK_SKIP_BENCH=1"
  [ "$GPU_VISIBLE" = 1 ] && problem "bench: skipped (GPU_CHECK_SKIP_BENCH=1): no osdp run on cuda"
else
  bt=$(limit 200 15)
  export BENCH_BUDGET=$((bt - 5)) OSDP
  run_phase bench "$bt" 15 bash bench/gpu_bench.sh
  [ "${PH_STATUS[bench]}" = timeout ] && problem "bench: ${PH_NOTE[bench]}"
  if [ -s "$BENCH_JSON" ] && command -v python3 >/dev/null; then
    # One line per run: role|device|precision|matmul|status|seconds; then one per required
    # precision: need|PRECISION|yes or need|PRECISION|why not.
    while IFS='|' read -r role dev prec matmul status secs; do
      if [ "$role" = need ]; then
        [ "$GPU_VISIBLE" = 1 ] && [ "$prec" != ok ] && problem "bench: no osdp run on cuda in $dev: $prec"
        continue
      fi
      record_run "bench_$role" "$dev" 1 "$prec" "$matmul" "$status" "$secs"
    done < <(python3 - "$BENCH_JSON" "$BENCH_REQUIRE" <<'PYEOF'
import json, sys
doc = json.load(open(sys.argv[1]))
for r in doc.get("runs", []):
    res = r.get("result") or {}
    # osdp records "matmul" (and "tf32"); older records and PyTorch's only "tf32"
    tf32 = res.get("tf32", "on" if r["role"] == "osdp" else "")
    matmul = res.get("matmul") or {True: "tf32", False: "fp32", "on": "tf32", "off": "fp32"}.get(tf32) or "-"
    name = r["role"] + "_" + r["precision"] + (f"_b{r['batch']}" if r.get("batch") else "")
    print("|".join(str(x) for x in (name, res.get("device", "cuda (requested)"),
          res.get("precision", r["precision"]), matmul, r["status"], r["seconds"])))
for prec in sys.argv[2].split():
    osdp = doc.get("results", {}).get(prec, {}).get("osdp")
    if not osdp:
        why = "not run"
    elif not osdp.get("available"):
        why = osdp.get("note", "not available")
    elif (osdp.get("best") or {}).get("device") != "cuda":
        why = "osdp reports device %s" % (osdp.get("best") or {}).get("device")
    else:
        why = "ok"
    print("need|%s|%s||" % (prec, why.replace("|", "/").replace("\n", " ")[:300]))
PYEOF
    )
  elif [ "$GPU_VISIBLE" = 1 ]; then
    problem "bench: no results (gpu-bench.json missing or python3 absent)"
  fi
fi

# ---------------------------------------------------------------- verdict
# FAILED when anything is wrong; else NO GPU without a GPU; else OK.
banner "results"
FINISHED=1
if [ ${#PROBLEMS[@]} -gt 0 ]; then VERDICT=failed; EXIT=1
elif [ "$GPU_VISIBLE" != 1 ]; then VERDICT=no_gpu; EXIT=3
else VERDICT=ok; EXIT=0; fi
write_json

# The Markdown report: the verdict, its problems, the phases, the GPU tests, the runs, the bench.
{
  case $VERDICT in
    ok) echo "# GPU check: OK" ;;
    no_gpu) echo "# GPU check: NO GPU ($GPU_WHY), not OK" ;;
    *) echo "# GPU check: FAILED" ;;
  esac
  echo
  echo "GPU: $ENV_GPU${ENV_DRIVER:+, driver $ENV_DRIVER}; nvcc ${ENV_NVCC:-none}; glibc ${ENV_GLIBC:-?}; PyTorch ${ENV_TORCH:-?}; $(elapsed) s of a $BUDGET s budget."
  echo
  if [ ${#PROBLEMS[@]} -gt 0 ]; then echo "Problems:"; echo; printf -- '- %s\n' "${PROBLEMS[@]}"; echo; fi
  echo "| phase | status | seconds | limit (s) | note |"
  echo "|---|---|---|---|---|"
  for ph in "${PHASES[@]}"; do
    echo "| $ph | ${PH_STATUS[$ph]} | ${PH_SECONDS[$ph]} | ${PH_LIMIT[$ph]/null/-} | ${PH_NOTE[$ph]//|//} |"
  done
  echo
  echo "| GPU test (label $LABEL) | result | seconds |"
  echo "|---|---|---|"
  for t in "${TESTS[@]}"; do echo "| $t | ${T_RESULT[$t]} | ${T_SECONDS[$t]} |"; done
  echo
  echo "| run | device | ranks | precision | matmul | TF32 | transport | status | seconds |"
  echo "|---|---|---|---|---|---|---|---|---|"
  [ ${#RUN_ROWS[@]} -gt 0 ] && printf '%s\n' "${RUN_ROWS[@]}"
  if [ -s "$OUT/gpu-bench.md" ]; then echo; sed 's/^# /## /' "$OUT/gpu-bench.md"; fi
} > "$MD"

say "wrote $JSON and $MD"
say "GPU tests (label $LABEL): ${#TESTS[@]}: $(for t in "${TESTS[@]}"; do printf '%s=%s ' "$t" "${T_RESULT[$t]}"; done)"
case $VERDICT in
  ok) say "verdict: OK: $GPU_WHY, every GPU test passed, osdp ran the benchmark on cuda" ;;
  no_gpu) say "verdict: NO GPU ($GPU_WHY): not OK; the build, the CPU runs and the GPU tests' skips were checked" ;;
  *) say "verdict: FAILED: ${#PROBLEMS[@]} problem(s):"; printf '  - %s\n' "${PROBLEMS[@]}" ;;
esac
say "done in $(elapsed)s: $(case $VERDICT in ok) echo OK ;; no_gpu) echo 'NO GPU (not OK)' ;; *) echo FAILED ;; esac)"
finish
