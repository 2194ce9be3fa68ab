#!/usr/bin/env bash
# gpu-check.sh: the one command of a GPU device run. It builds osdp with the CUDA backend, runs
# the GPU tests (CTest label `gpu`) and the GPU benchmark (bench/gpu_bench.sh), and writes
#   $OUT/gpu-check.log   everything it printed and everything the tools printed
#   $OUT/gpu-check.json  the results: per phase status and time, per GPU test pass/fail/skip,
#                        the benchmark's results (bench/gpu_bench.sh also writes
#                        $OUT/gpu-bench.md and $OUT/gpu-bench.json)
# OUT defaults to ./out. The device machine's time is scarce, so the whole run is time-boxed
# (GPU_CHECK_BUDGET seconds, default 330): each phase runs under `timeout` with what is left, and
# the JSON names the phase that timed out. It also runs on a machine without a GPU (the dev
# machine) as a dry run: the GPU tests skip or are absent, and the benchmark records osdp and
# PyTorch on CUDA as not available.
#
# The GPU machine has CUDA, gcc, cmake and python3 + PyTorch, but probably no OpenMPI, OpenBLAS,
# cJSON or pkg-config, and no network: scripts/gpu-deps.sh (run on the dev machine) puts the
# Debian 12 .deb files in .gpu-deps/, the run carries that folder, and this script unpacks the
# ones the system lacks with `dpkg -x` into a private prefix (GPU_CHECK_DEPS_PREFIX, default
# /tmp/osdp-deps; never /) and points CMake and the run time at it (relocated OpenMPI via
# OPAL_PREFIX). GPU_CHECK_FORCE_DEPS=1 uses the carried packages even where the system has its
# own, which is how the relocation is tested on the dev machine.
#
# Exit status: 0 when osdp built and no GPU test failed; 1 otherwise (a failed or timed-out
# configure, build or GPU test run). The benchmark's outcome is reported, never fatal.
#
# Device run: carry [".gpu-deps"], command `bash scripts/gpu-check.sh`.
# Knobs: GPU_CHECK_BUDGET, GPU_CHECK_FORCE_DEPS, GPU_CHECK_DEPS_PREFIX, GPU_CHECK_BUILD
# (build folder, default build-gpu), GPU_CHECK_SKIP_BENCH=1, GPU_CHECK_TEST_LABEL, and
# bench/gpu_bench.sh's BENCH_*.
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export OUT
LOG=$OUT/gpu-check.log
JSON=$OUT/gpu-check.json
: > "$LOG"
exec > >(tee -a "$LOG") 2>&1
TEE_PID=$!

START=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET:-330}
BUILD=${GPU_CHECK_BUILD:-build-gpu}
P=${GPU_CHECK_DEPS_PREFIX:-/tmp/osdp-deps}
DEPS=$ROOT/.gpu-deps
NPROC=$(nproc 2>/dev/null || echo 2)
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

# Phases: name, status (ok, failed, timeout, skipped), seconds, note; in the order they ran.
PHASES=()
declare -A PH_STATUS PH_SECONDS PH_NOTE
phase_end() { # NAME STATUS SECONDS NOTE
  PHASES+=("$1"); PH_STATUS[$1]=$2; PH_SECONDS[$1]=$3; PH_NOTE[$1]=$4
  say "phase $1: $2${4:+ ($4)}"
  write_json
}

# What the JSON reports, filled in as the phases run.
ENV_GPU="none"; ENV_DRIVER=""; ENV_NVCC=""; ENV_GCC=""; ENV_CMAKE=""; ENV_TORCH=""; ENV_GLIBC=""
FORCE=${GPU_CHECK_FORCE_DEPS:-0}
declare -A DEP_SRC=([mpi]=unknown [blas]=unknown [pkgconf]=unknown [cjson]=unknown)
CUDA_OPTION=no; BUILT=no; SMOKE_1=skipped; SMOKE_2=skipped
LABEL=${GPU_CHECK_TEST_LABEL:-gpu}
TESTS=()
declare -A T_RESULT T_SECONDS
GPU_FAILED=0
BENCH_JSON=$OUT/gpu-bench.json
rm -f "$BENCH_JSON" "$OUT/gpu-bench.md"

# write_json: $JSON from what is known so far. Called after every phase, so that a run cut
# short still leaves its results; "finished" is false until the end.
FINISHED=0
write_json() {
  local fail=0 timed_out="" ph t sep
  for ph in configure build; do [ "${PH_STATUS[$ph]:-skipped}" = ok ] || fail=1; done
  [ "$GPU_FAILED" -gt 0 ] && fail=1
  for ph in "${PHASES[@]}"; do [ "${PH_STATUS[$ph]}" = timeout ] && timed_out="$timed_out $ph"; done
  npass=0; nfail=0; nskip=0
  for t in "${TESTS[@]}"; do case ${T_RESULT[$t]} in pass) npass=$((npass+1));; skip) nskip=$((nskip+1));; *) nfail=$((nfail+1));; esac; done
  TIMED_OUT=$timed_out; FAIL=$fail
  {
    printf '{\n  "ok": %s,\n  "finished": %s,\n' "$([ $fail = 0 ] && echo true || echo false)" \
      "$([ "$FINISHED" = 1 ] && echo true || echo false)"
    printf '  "budget_s": %s,\n  "elapsed_s": %s,\n' "$BUDGET" "$(elapsed)"
    printf '  "timed_out_phases": ['; sep=""; for ph in $timed_out; do printf '%s%s' "$sep" "$(json_str "$ph")"; sep=", "; done; printf '],\n'
    printf '  "environment": {"gpu": %s, "driver": %s, "nvcc": %s, "gcc": %s, "glibc": %s, "cmake": %s, "torch": %s, "nproc": %s},\n' \
      "$(json_str "$ENV_GPU")" "$(json_str "$ENV_DRIVER")" "$(json_str "$ENV_NVCC")" "$(json_str "$ENV_GCC")" "$(json_str "$ENV_GLIBC")" \
      "$(json_str "$ENV_CMAKE")" "$(json_str "$ENV_TORCH")" "$NPROC"
    printf '  "dependencies": {"forced": %s, "prefix": %s, "mpi": %s, "blas": %s, "pkg_config": %s, "cjson": %s},\n' \
      "$([ "$FORCE" = 1 ] && echo true || echo false)" "$(json_str "$P")" "$(json_str "${DEP_SRC[mpi]}")" \
      "$(json_str "${DEP_SRC[blas]}")" "$(json_str "${DEP_SRC[pkgconf]}")" "$(json_str "${DEP_SRC[cjson]}")"
    printf '  "build": {"dir": %s, "cuda_option_in_cmake": %s, "built": %s},\n' "$(json_str "$BUILD")" \
      "$([ $CUDA_OPTION = yes ] && echo true || echo false)" "$([ $BUILT = yes ] && echo true || echo false)"
    printf '  "phases": ['; sep=""
    for ph in "${PHASES[@]}"; do
      printf '%s\n    {"name": %s, "status": %s, "seconds": %s, "note": %s}' "$sep" "$(json_str "$ph")" \
        "$(json_str "${PH_STATUS[$ph]}")" "${PH_SECONDS[$ph]:-0}" "$(json_str "${PH_NOTE[$ph]}")"; sep=","
    done
    printf '\n  ],\n'
    printf '  "smoke": {"train_tiny_1rank": %s, "train_tiny_2ranks_mpirun": %s},\n' "$(json_str "$SMOKE_1")" "$(json_str "$SMOKE_2")"
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
# CAPTURE=FILE set, CMD's output also goes to FILE.
run_phase() {
  local name=$1 cap=$2 reserve=$3 t t0 rc status note=""
  shift 3
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
  case $rc in
    0) status=ok ;;
    124|137) status=timeout; note="killed after ${t}s" ;;
    *) status=failed; note="exit $rc" ;;
  esac
  phase_end "$name" "$status" $(($(date +%s) - t0)) "$note"
  return "$rc"
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
  write_json
  exit 2
}
trap on_signal TERM INT HUP

# ---------------------------------------------------------------- environment
banner "environment"
t0=$(date +%s)
say "host $(hostname 2>/dev/null), $NPROC cores, $(uname -sr), $(sed -n "s/^PRETTY_NAME=//p" /etc/os-release 2>/dev/null | tr -d '"')"
[ -d /usr/local/cuda/bin ] && case ":$PATH:" in *:/usr/local/cuda/bin:*) ;; *) PATH=$PATH:/usr/local/cuda/bin ;; esac
if command -v nvidia-smi >/dev/null; then
  timeout 20 nvidia-smi 2>&1 | head -n 12
  ENV_GPU=$(timeout 20 nvidia-smi --query-gpu=name,memory.total,compute_cap --format=csv,noheader 2>/dev/null | head -n 1)
  ENV_DRIVER=$(timeout 20 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
  [ -n "$ENV_GPU" ] || ENV_GPU="none (nvidia-smi found no GPU)"
else
  say "nvidia-smi not found: no GPU on this machine"
fi
say "GPU: $ENV_GPU${ENV_DRIVER:+, driver $ENV_DRIVER}"
if command -v nvcc >/dev/null; then nvcc --version; ENV_NVCC=$(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'); else say "nvcc not found"; fi
if command -v gcc >/dev/null; then gcc --version | head -n 1; ENV_GCC=$(gcc -dumpfullversion 2>/dev/null); else say "gcc not found"; fi
command -v g++ >/dev/null && g++ --version | head -n 1
ENV_GLIBC=$(ldd --version 2>/dev/null | sed -n '1s/.* //p')
say "glibc ${ENV_GLIBC:-unknown} (the carried Debian 12 libraries need 2.36 or newer)"
# CMake and ninja from pip may sit in a folder that is not on PATH: ask their Python packages.
for tool in cmake ninja; do
  command -v $tool >/dev/null && continue
  d=$(python3 -c "import $tool, os; print(getattr($tool, 'BIN_DIR', None) or getattr($tool, 'CMAKE_BIN_DIR'))" 2>/dev/null)
  if [ -n "$d" ] && [ -x "$d/$tool" ]; then PATH=$PATH:$d; say "$tool found through its Python package in $d"; fi
done
if command -v cmake >/dev/null; then cmake --version | head -n 1; ENV_CMAKE=$(cmake --version | sed -n '1s/.* //p'); else say "cmake not found"; fi
if command -v ninja >/dev/null; then say "ninja $(ninja --version)"; else say "ninja not found: Unix Makefiles"; fi
if command -v python3 >/dev/null; then
  python3 --version
  ENV_TORCH=$(timeout 60 python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available" if torch.cuda.is_available() else "unavailable")' 2>/dev/null | tail -n 1)
  ENV_TORCH=${ENV_TORCH:-not importable}
  say "PyTorch: $ENV_TORCH"
else
  say "python3 not found"
fi
phase_end environment ok $(($(date +%s) - t0)) ""

# ---------------------------------------------------------------- dependencies
# Which of MPI, OpenBLAS (OpenMP build), pkg-config and cJSON the system has; the missing ones
# (all with GPU_CHECK_FORCE_DEPS=1) come from the carried .deb files.
banner "dependencies"
t0=$(date +%s)
ML=x86_64-linux-gnu
need_groups=""
sys_has() { # COMPONENT
  case $1 in
    mpi) command -v mpicc >/dev/null && command -v mpirun >/dev/null ;;
    blas) [ -e /usr/lib/$ML/openblas-openmp/libopenblas.so ] && [ -e /usr/include/$ML/openblas-openmp/cblas.h ] ;;
    pkgconf) command -v pkg-config >/dev/null ;;
    cjson) command -v pkg-config >/dev/null && pkg-config --exists libcjson ;;
  esac
}
for c in mpi blas pkgconf cjson; do
  if [ "$FORCE" = 1 ] || ! sys_has $c; then DEP_SRC[$c]=carried; need_groups="$need_groups $c"; else DEP_SRC[$c]=system; fi
done
deps_note=""
if [ -n "$need_groups" ]; then
  need_groups="$need_groups runtime"
  say "carried packages needed for:$need_groups (force=$FORCE), prefix $P"
  if [ ! -s "$DEPS/packages.txt" ]; then
    deps_note="$DEPS/packages.txt missing: run scripts/gpu-deps.sh on the dev machine and carry .gpu-deps"
    say "$deps_note"
    for c in $need_groups; do [ "$c" = runtime ] || DEP_SRC[$c]=missing; done
  else
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
say "sources: mpi=${DEP_SRC[mpi]} blas=${DEP_SRC[blas]} pkg-config=${DEP_SRC[pkgconf]} cjson=${DEP_SRC[cjson]}"
deps_status=ok
for c in mpi blas pkgconf cjson; do [ "${DEP_SRC[$c]}" = missing ] && deps_status=failed; done
phase_end dependencies $deps_status $(($(date +%s) - t0)) "$deps_note"

# ---------------------------------------------------------------- configure and build
grep -q 'OSDP_CUDA' CMakeLists.txt && CUDA_OPTION=yes
[ "$CUDA_OPTION" = yes ] || say "CMakeLists.txt has no OSDP_CUDA option yet: this is a CPU build"
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
if run_phase configure 90 200 cmake "${CONFIG[@]}"; then
  echo "${CONFIG[*]}" > "$BUILD/.gpu-check-config"
  grep -E '^(OSDP_CUDA|CMAKE_CUDA_COMPILER|CMAKE_CUDA_ARCHITECTURES|MPI_C_COMPILER|MPIEXEC_EXECUTABLE|OPENBLAS_LIB|CBLAS_INCLUDE|CJSON_LINK_LIBRARIES|PKG_CONFIG_EXECUTABLE)[:=]' "$BUILD/CMakeCache.txt" | sed 's/^/  cache: /'
  run_phase build 200 120 cmake --build "$BUILD" -j "$NPROC" && BUILT=yes
else
  phase_end build skipped 0 "configure failed"
fi
OSDP=$ROOT/$BUILD/osdp
if [ "$BUILT" = yes ] && command -v ldd >/dev/null; then
  ldd "$OSDP" | grep -E 'mpi|openblas|cjson|gfortran|gomp|cuda|cublas' | sed 's/^/  ldd: /'
fi

# ---------------------------------------------------------------- smoke: the CPU path runs
# A 3-step train of the tiny model, once in one process and once on 2 ranks through mpirun:
# proves the build and the (possibly relocated) MPI work before the GPU phases.
if [ "$BUILT" = yes ]; then
  run_phase smoke_1rank 30 90 "$OSDP" train --model tiny --steps 3 && SMOKE_1=ok || SMOKE_1=${PH_STATUS[smoke_1rank]}
  run_phase smoke_2ranks 40 90 mpirun --oversubscribe --bind-to none -np 2 "$OSDP" train --model tiny --steps 3 && SMOKE_2=ok || SMOKE_2=${PH_STATUS[smoke_2ranks]}
fi

# ---------------------------------------------------------------- GPU tests
# ctest -L gpu (GPU_CHECK_TEST_LABEL: another label, to try this on the dev machine). Each
# test's line "N/M Test #K: NAME .....   Passed|***Failed|***Skipped|***Timeout ... S sec" gives
# its outcome. GPU tests exit 77 (skipped) without a GPU.
if [ "$BUILT" = yes ]; then
  CTEST_LOG=$(mktemp)
  CAPTURE=$CTEST_LOG run_phase gpu_tests 120 60 ctest --test-dir "$BUILD" -L "$LABEL" --output-on-failure --no-tests=ignore
  while IFS='|' read -r name res secs_t; do
    TESTS+=("$name"); T_RESULT[$name]=$res; T_SECONDS[$name]=$secs_t
    case $res in pass|skip) ;; *) GPU_FAILED=$((GPU_FAILED + 1)) ;; esac
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
  # ctest cut short by its timeout, or failing with no failed test (it could not run them).
  case ${PH_STATUS[gpu_tests]} in
    timeout) GPU_FAILED=$((GPU_FAILED + 1)) ;;
    failed) [ "$GPU_FAILED" = 0 ] && GPU_FAILED=1 ;;
  esac
  say "GPU tests: ${#TESTS[@]} ran, $GPU_FAILED failed or timed out"
  if [ "${#TESTS[@]}" = 0 ]; then
    PH_NOTE[gpu_tests]="no test has the label $LABEL in this build"
    say "no test carries the label $LABEL in this build (CUDA backend not built or not landed yet)"
  fi
  rm -f "$CTEST_LOG"
else
  phase_end gpu_tests skipped 0 "no build"
fi

# ---------------------------------------------------------------- benchmark
if [ "${GPU_CHECK_SKIP_BENCH:-0}" = 1 ]; then
  phase_end bench skipped 0 "GPU_CHECK_SKIP_BENCH=1"
else
  bt=$(limit 200 15)
  export BENCH_BUDGET=$((bt - 5)) OSDP
  run_phase bench "$bt" 15 bash bench/gpu_bench.sh
fi

# ---------------------------------------------------------------- results
banner "results"
FINISHED=1
write_json
say "wrote $JSON"
say "GPU tests (label $LABEL): ${#TESTS[@]} (passed $npass, failed $nfail, skipped $nskip); timed out:${TIMED_OUT:- none}"
say "done in $(elapsed)s: $([ "$FAIL" = 0 ] && echo OK || echo FAILED)"
exec >&- 2>&-
wait "$TEE_PID" 2>/dev/null
exit "$FAIL"
