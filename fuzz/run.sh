#!/usr/bin/env bash
# fuzz/run.sh BUILD RUNS [TARGET...]: runs each libFuzzer target BUILD/fuzz_<target> for RUNS
# executions (-runs), starting from its seed corpus fuzz/corpus/<target>/ (read only) and the
# inputs earlier runs found (BUILD/fuzz-corpus/<target>/, where new ones go), with the
# target's dictionary fuzz/dict/<target>.dict. A crash, leak, sanitizer report, timeout or
# out-of-memory input lands in BUILD/crashes/<target>/. Prints one line per target
# (executions, crashes, seconds) and names each crash at the end; exits 1 if any target
# crashed. Temporary files go to /dev/shm when it exists (the parsers' writers fsync).
# Environment: FUZZ_JOBS (parallel targets, default 1), FUZZ_TIMEOUT (seconds an input may
# take, default 10), FUZZ_ARGS (more libFuzzer flags).
set -u
build=$1
runs=$2
shift 2
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(model plan device checkpoint safetensors train_state tokens hf_config st_index)
src=$(cd "$(dirname "$0")" && pwd)
[ -d /dev/shm ] && [ -w /dev/shm ] && export TMPDIR=/dev/shm

# Largest input per target: a bit more than its largest valid seed, so mutations can grow.
max_len() {
  case $1 in
    model) echo 1024 ;;
    plan) echo 4096 ;;
    device) echo 16384 ;;
    checkpoint) echo 8192 ;;
    safetensors) echo 8192 ;;
    train_state) echo 24576 ;;
    tokens) echo 4096 ;;
    hf_config) echo 2048 ;;
    st_index) echo 2048 ;;
    *) echo 4096 ;;
  esac
}

# Runs one target; prints "target executions crashes seconds" on stdout, its log in BUILD.
run_one() {
  local t=$1 bin="$build/fuzz_$1" work="$build/fuzz-corpus/$1" crashes="$build/crashes/$1"
  local log="$build/fuzz-$1.log" dict=() start end execs n
  mkdir -p "$work" "$crashes"
  [ -f "$src/dict/$t.dict" ] && dict=(-dict="$src/dict/$t.dict")
  local before
  before=$(ls "$crashes" | wc -l)
  start=$(date +%s.%N)
  "$bin" -runs="$runs" -max_len="$(max_len "$t")" -rss_limit_mb=2048 -timeout="${FUZZ_TIMEOUT:-10}" \
    -print_final_stats=1 -artifact_prefix="$crashes/" "${dict[@]}" ${FUZZ_ARGS:-} \
    "$work" "$src/corpus/$t" >"$log" 2>&1
  end=$(date +%s.%N)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  [ -n "$execs" ] || execs=$(sed -n 's/^#\([0-9]*\).*/\1/p' "$log" | tail -1)
  n=$(( $(ls "$crashes" | wc -l) - before ))
  printf '%-12s %10s %8s %9.1f\n' "$t" "${execs:-?}" "$n" "$(awk "BEGIN { print $end - $start }")"
}

printf '%-12s %10s %8s %9s\n' target executions crashes seconds
table=$(mktemp)
if [ "${FUZZ_JOBS:-1}" -gt 1 ]; then
  for t in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$FUZZ_JOBS" ]; do sleep 1; done
    run_one "$t" | tee -a "$table" &
  done
  wait
else
  for t in "${targets[@]}"; do run_one "$t" | tee -a "$table"; done
fi
status=0
while read -r t execs n secs; do
  if [ "$n" != 0 ]; then
    status=1
    echo "fuzz: $t found a crash (log $build/fuzz-$t.log): $(ls "$build/crashes/$t" | tail -1)"
  fi
done <"$table"
rm -f "$table"
exit $status
