#!/usr/bin/env bash
# cli_hostile.sh OSDP MPIRUN...: inputs that cannot hang osdp, and directories of its own that
# cannot be turned against its user (issue 42).
#   - every input that is a fifo is refused at once, in one line naming the option and "fifo"
#     (a fifo once blocked open() forever), also where the reader itself meets it (a shard);
#   - an output fifo that no process reads is refused after a short wait, not waited on forever;
#   - the profile cache writes nothing through a symlink standing where an entry belongs (the
#     link's target is unchanged), and does not reuse an entry whose profile was replaced by
#     another model's, nor read a fifo standing there;
#   - a checkpoint directory: a symlinked lock is named as one; --checkpoint D --save D refuses
#     before it locks D; what a kill during pruning left (.step-N.del/) is cleared;
#   - a rank stopped during start-up ends the job within its bound (--watchdog), naming the rank.
set -u
OSDP=${1:?usage: cli_hostile.sh OSDP MPIRUN...}; shift; mpirun=("$@")
source "${BASH_SOURCE%/*}/cli_common.sh"

T=(train --model tiny --data addition --steps 1 --batch 2 --seq 16 --quiet)

# ---- Fifo inputs: refused at once, never waited on ----------------------------------------
mkfifo f
# fifo_refused NAME ARGS...: osdp ARGS fails within 20 s, in one line naming "fifo".
fifo_refused() {
  local name=$1; shift
  timeout 20 "$OSDP" "$@" >out.txt 2>err.txt
  local rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -lt 128 ] && [ "$(wc -l <err.txt)" -eq 1 ] &&
     grep -q "fifo, not a regular file" err.txt && [ -p f ]; then ok
  else bad "$name: rc $rc ($([ $rc -eq 124 ] && echo hung)): $(head -c 300 err.txt)"; fi
}
fifo_refused "--data tokens:FIFO" "${T[@]}" --data tokens:f
fifo_refused "--data text:FIFO" "${T[@]}" --data text:f
fifo_refused "--model FIFO" "${T[@]}" --model f
fifo_refused "--plan FIFO" "${T[@]}" --plan f
fifo_refused "--load FIFO" "${T[@]}" --load f
fifo_refused "plan --devices FIFO" plan --model tiny --devices f
fifo_refused "describe --model FIFO" describe --model f
fifo_refused "export FIFO" export f --format safetensors out.safetensors
fifo_refused "sample --load FIFO" sample --load f --prompt "1+1="
fifo_refused "plot FIFO" plot f --svg p.svg
grep -q "^osdp: error: --data: 'f' is a fifo" <(timeout 20 "$OSDP" "${T[@]}" --data tokens:f 2>&1) && ok ||
  bad "--data fifo: the error names the option"

# A shard of a Hub index that is a fifo: named as one, not "missing".
"$OSDP" "${T[@]}" --save w.safetensors >/dev/null 2>err.txt || bad "--save safetensors: $(cat err.txt)"
mkdir hub && mkfifo hub/model-00001-of-00001.safetensors
python3 - <<'EOF'
import json, struct
h = json.loads(open("w.safetensors", "rb").read()[8:8 + struct.unpack("<Q", open("w.safetensors", "rb").read(8))[0]])
names = [k for k in h if k != "__metadata__"]
json.dump({"metadata": {}, "weight_map": {n: "model-00001-of-00001.safetensors" for n in names}},
          open("hub/model.safetensors.index.json", "w"))
EOF
timeout 20 "$OSDP" "${T[@]}" --load hub/model.safetensors.index.json >out.txt 2>err.txt
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "which is a fifo, not a regular file" err.txt; then ok
else bad "a fifo shard: rc $rc: $(head -c 300 err.txt)"; fi

# ---- Output fifos without a reader: refused after a short wait ----------------------------
for opt in --save --log; do
  s=$(date +%s)
  timeout 60 "$OSDP" "${T[@]}" "$opt" f >out.txt 2>err.txt
  rc=$? took=$(( $(date +%s) - s ))
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -lt 30 ] && grep -q "a fifo that no process reads" err.txt &&
     [ -p f ]; then ok
  else bad "$opt onto a fifo without a reader: rc $rc after ${took}s: $(head -c 300 err.txt)"; fi
done
cat f >logged.txt &
reader=$!
"$OSDP" "${T[@]}" --log f >out.txt 2>err.txt
rc=$?
wait $reader
if [ $rc -eq 0 ] && grep -q '"step"' logged.txt; then ok; else bad "--log into a read fifo: rc $rc $(cat err.txt)"; fi

# ---- The profile cache holds only osdp's regular files ------------------------------------
A2=(train --model tiny --plan auto --mem-limit 64MiB --trial-steps 0 --steps 1 --profile-steps 1
    --seq 16 --batch 2)
A=("${A2[@]}" --quiet)
"$OSDP" "${A[@]}" --profile-cache c >out.txt 2>err.txt || bad "--profile-cache c: $(cat err.txt)"
json=$(ls c/*.json 2>/dev/null | grep -v trial | head -n 1)
key=${json%.json}.key
if [ -f "$json" ] && [ -f "$key" ]; then ok; else bad "no cache entry: $(ls -la c)"; fi
echo "precious" >victim.txt
for entry in "$json" "$key"; do
  cp "$entry" saved
  ln -sf "$PWD/victim.txt" "$entry"
  "$OSDP" "${A[@]}" --profile-cache c --reprofile >out.txt 2>err.txt
  rc=$?
  if [ $rc -eq 0 ] && [ "$(cat victim.txt)" = precious ] && [ -L "$entry" ] &&
     grep -q "is a symbolic link" err.txt; then ok
  else bad "a symlinked ${entry##*.} entry: rc $rc, victim: $(head -c 60 victim.txt), $(cat err.txt)"; fi
  # Read, the link is not followed either: noted, measured anew.
  "$OSDP" "${A[@]}" --profile-cache c >out.txt 2>err.txt
  if [ $? -eq 0 ] && grep -q "is a symbolic link" err.txt && [ "$(cat victim.txt)" = precious ]; then ok
  else bad "reading a symlinked ${entry##*.} entry: $(cat err.txt)"; fi
  rm "$entry" && mv saved "$entry"
done
# A fifo where the profile belongs: not read, not waited on.
mv "$json" saved && mkfifo "$json"
timeout 60 "$OSDP" "${A[@]}" --profile-cache c >out.txt 2>err.txt
rc=$?
if [ $rc -eq 0 ] && grep -q "fifo, not a regular file" err.txt && [ -p "$json" ]; then ok
else bad "a fifo cache entry: rc $rc: $(cat err.txt)"; fi
rm "$json" && mv saved "$json"
# Another model's profile put where this model's was: not reused.
"$OSDP" "${A[@]}" --model llama-tiny --profile-cache c2 >out.txt 2>err.txt ||
  bad "a llama-tiny profile: $(cat err.txt)"
other=$(ls c2/*.json | grep -v trial | head -n 1)
cp "$other" "$json"
"$OSDP" "${A2[@]}" --profile-cache c >out.txt 2>err.txt
if [ $? -eq 0 ] && grep -q "not the profile its key file names" err.txt && ! grep -q "profile: reusing" out.txt; then ok
else bad "another model's profile reused: $(cat err.txt) $(grep '^profile' out.txt)"; fi
"$OSDP" "${A2[@]}" --profile-cache c >out.txt 2>err.txt
if grep -q "profile: reusing" out.txt && [ ! -s err.txt ]; then ok; else bad "the replaced entry was not rewritten: $(cat err.txt)"; fi

# ---- Checkpoint directories ----------------------------------------------------------------
mkdir ck && ln -s "$PWD/victim.txt" ck/.osdp-lock
refused "a symlinked lock" "ck/.osdp-lock is a symbolic link" -- "$OSDP" "${T[@]}" --checkpoint ck
mkdir ck2
refused "--checkpoint D --save D" "--save" "is a directory" -- "$OSDP" "${T[@]}" --checkpoint ck2 --save ck2
[ ! -e ck2/.osdp-lock ] && ok || bad "--checkpoint D --save D locked D before refusing"
mkdir -p ck3/.step-5.del ck3/.step-7.tmp ck3/.step-9.del
echo mine >ck3/.step-9.del/notes.txt # not osdp's file: that directory stays
"$OSDP" "${T[@]}" --checkpoint ck3 >out.txt 2>err.txt || bad "--checkpoint ck3: $(cat err.txt)"
if [ ! -e ck3/.step-5.del ] && [ ! -e ck3/.step-7.tmp ] && [ -f ck3/.step-9.del/notes.txt ]; then ok
else bad "leftovers of a killed removal: $(ls -a ck3)"; fi

# ---- A rank stopped during start-up: the job ends within its bound, naming it -------------
if [ ${#mpirun[@]} -gt 0 ]; then
  s=$(date +%s)
  timeout 90 "${mpirun[@]}" -np 2 "$OSDP" "${T[@]}" --watchdog 3 --steps 2 >out.txt 2>err.txt &
  job=$!
  victim=""
  for _ in $(seq 3000); do
    for p in $(pgrep -f "$OSDP train --model tiny" 2>/dev/null); do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && { victim=$p; break; }
    done
    [ -n "$victim" ] && break
    kill -0 $job 2>/dev/null || break
    sleep 0.005
  done
  [ -n "$victim" ] && kill -STOP "$victim"
  wait $job
  rc=$? took=$(( $(date +%s) - s ))
  [ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null
  if [ -n "$victim" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -lt 40 ] && grep -q "rank 1" err.txt; then ok
  else bad "a rank stopped at start-up: victim '$victim', rc $rc after ${took}s: $(head -c 400 err.txt)"; fi
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
