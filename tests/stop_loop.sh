#!/usr/bin/env bash
# stop_loop.sh OSDP BOUND TRIES MPIRUN...: SIGSTOP rank 1 of a 2-rank job as soon as it appears
# (during MPI start-up, before any step watchdog exists), TRIES times: each job must end with a
# non-zero status and an error naming rank 1, within its bound (--watchdog BOUND) and a second.
# ctest's cli_hostile makes one try; issue 42's acceptance is 20:
#   bash tests/stop_loop.sh build/osdp 5 20 mpirun --oversubscribe
# Prints one line per try (status, seconds, the error) and "N passed, M failed".
set -u
OSDP=$1; bound=$2; tries=$3; shift 3; mpirun=("$@")
pass=0; fail=0
for t in $(seq "$tries"); do
  t0=$(date +%s.%N)
  timeout $((bound + 60)) "${mpirun[@]}" -np 2 "$OSDP" train --model tiny --steps 3 --quiet \
    --watchdog "$bound" >out.txt 2>err.txt &
  job=$!
  victim=""
  for _ in $(seq 2000); do
    for p in $(pgrep -f "$OSDP train --model tiny --steps 3" 2>/dev/null); do
      if tr '\0' '\n' </proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then victim=$p; break; fi
    done
    [ -n "$victim" ] && break
    sleep 0.005
  done
  [ -n "$victim" ] && kill -STOP "$victim"
  wait "$job"; rc=$?
  took=$(echo "$(date +%s.%N) - $t0" | bc)
  left=""; [ -n "$victim" ] && kill -0 "$victim" 2>/dev/null && left=" (the stopped rank outlived the job)"; [ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null
  line=$(grep -m1 "osdp: error" err.txt)
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && echo "$line" | grep -q "rank 1"; then
    pass=$((pass+1)); echo "try $t: rc $rc in ${took}s: $line$left"
  else
    fail=$((fail+1)); echo "try $t FAILED: rc $rc in ${took}s victim=$victim: $(head -c 600 err.txt)"
  fi
done
echo "$pass passed, $fail failed"
