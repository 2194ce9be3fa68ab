#!/usr/bin/env bash
# install.sh BUILD SRC [CC [CMAKE]]: the installed tree and the C API.
#  - `cmake --install BUILD --prefix TMP/prefix` installs exactly bin/osdp, lib/libosdp.a,
#    include/osdp/osdp.h and lib/pkgconfig/osdp.pc;
#  - the public header includes no header of osdp's and compiles on its own as C11 with -Wall
#    -Wextra -pedantic -Werror (and as C++11 where g++ exists);
#  - `pkg-config --modversion osdp` is the installed osdp's version;
#  - examples/plan_api.c, copied out of the sources and compiled with nothing but
#    `pkg-config --cflags --libs --static osdp` of the installed tree, runs as a plain process
#    (no mpirun) and writes, byte for byte, the plan the installed `osdp plan --out` writes for
#    the same inputs: the flags' device (2 ranks) and a device file of 2 hosts x 2 ranks; its
#    micro-batch, predicted peak and step time are `osdp plan --json`'s, and `osdp describe
#    --plan` reads its file and predicts the same peak;
#  - a failure (a missing device file) is one line on stderr naming the file, exit 1, no plan.
# Nothing outside its temporary directory is left changed: the install_manifest.txt that
# `cmake --install` writes into BUILD is put back as it was (or removed when there was none).
set -u
BUILD=$(cd "${1:?usage: install.sh BUILD SRC [CC [CMAKE]]}" && pwd) || exit 1
SRC=$(cd "${2:?usage: install.sh BUILD SRC [CC [CMAKE]]}" && pwd) || exit 1
CC=${3:-cc}
CMAKE=${4:-cmake}
W=$(mktemp -d)
manifest=$BUILD/install_manifest.txt
had_manifest=0
if [ -e "$manifest" ]; then had_manifest=1; cp -p "$manifest" "$W/manifest.orig"; fi
cleanup() {
  if [ "$had_manifest" = 1 ]; then cp -p "$W/manifest.orig" "$manifest"; else rm -f "$manifest"; fi
  rm -rf "$W"
}
trap cleanup EXIT
cd "$W" || exit 1
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }

P=$W/prefix
# ---- The installed tree ------------------------------------------------------------------
if "$CMAKE" --install "$BUILD" --prefix "$P" >install.log 2>&1; then ok
else bad "cmake --install: $(tail -5 install.log)"; finish; fi
want=$'./bin/osdp\n./include/osdp/osdp.h\n./lib/libosdp.a\n./lib/pkgconfig/osdp.pc'
got=$(cd "$P" && find . -type f | LC_ALL=C sort)
if [ "$got" = "$want" ]; then ok; else bad "installed files: $(echo $got), not $(echo $want)"; fi
if [ -x "$P/bin/osdp" ]; then ok; else bad "bin/osdp is not executable"; fi
if ar t "$P/lib/libosdp.a" | grep -qx 'osdp_api.c.o'; then ok
else bad "lib/libosdp.a does not hold the C API (osdp_api.c.o)"; fi

# ---- The public header on its own --------------------------------------------------------
H=$P/include/osdp/osdp.h
incs=$(grep -E '^[[:space:]]*#[[:space:]]*include' "$H" | grep -vE '<std(def|int|bool)\.h>')
if [ -z "$incs" ]; then ok; else bad "osdp.h includes more than standard headers: $incs"; fi
printf '#include <osdp/osdp.h>\n#include <osdp/osdp.h>\nint main(void) { return osdp_version() == 0; }\n' >hdr.c
if "$CC" -std=c11 -Wall -Wextra -pedantic -Werror -I"$P/include" -c hdr.c -o hdr.o 2>hdr.err; then ok
else bad "osdp.h alone as C11 -pedantic: $(head -5 hdr.err)"; fi
if command -v g++ >/dev/null; then
  cp hdr.c hdr.cc
  if g++ -std=c++11 -Wall -Wextra -pedantic -Werror -I"$P/include" -c hdr.cc -o hdrxx.o 2>hdr.err; then ok
  else bad "osdp.h alone as C++11: $(head -5 hdr.err)"; fi
fi

# ---- pkg-config ----------------------------------------------------------------------------
export PKG_CONFIG_PATH=$P/lib/pkgconfig
flags=$(pkg-config --cflags --libs --static osdp 2>pc.err)
if [ -n "$flags" ]; then ok; else bad "pkg-config --cflags --libs --static osdp: $(cat pc.err)"; fi
# The -I of osdp.pc (relocatable: PREFIX/lib/pkgconfig/../../include) is the installed include/.
incdir=""
for w in $(pkg-config --cflags-only-I osdp); do
  d=$(cd "${w#-I}" 2>/dev/null && pwd -P)
  [ "$d" = "$(cd "$P/include" && pwd -P)" ] && incdir=$d
done
if [ -n "$incdir" ]; then ok; else bad "pkg-config --cflags names no -I of $P/include: $flags"; fi
case "$flags" in *"$SRC"* | *"$BUILD"*) bad "pkg-config points into the sources or the build: $flags" ;; *) ok ;; esac
version=$("$P/bin/osdp" --version 2>&1 | head -1 | awk '{print $2}')
if [ -n "$version" ] && [ "$(pkg-config --modversion osdp)" = "$version" ]; then ok
else bad "pkg-config --modversion osdp '$(pkg-config --modversion osdp)' is not osdp --version's '$version'"; fi

# ---- The example, built against the installed tree alone ----------------------------------
cp "$SRC/examples/plan_api.c" .
# shellcheck disable=SC2086 # the flags are words
if "$CC" -std=c11 -Wall -Wextra -Werror plan_api.c -o plan_api $flags 2>build.err; then ok
else bad "cc plan_api.c \$(pkg-config --cflags --libs --static osdp): $(head -10 build.err)"; finish; fi

# The figures a run printed: "plan: micro-batch B,", "predicted: peak N bytes ..., step S s".
api_batch() { sed -n 's/^plan: micro-batch \([0-9]*\),.*/\1/p' "$1"; }
api_peak() { sed -n 's/^predicted: peak \([0-9]*\) bytes.*/\1/p' "$1"; }
api_step() { sed -n 's/^predicted: .*, step \([0-9.]*\) s,.*/\1/p' "$1"; }
# The chosen plan's figures in osdp plan --json: the first "predicted" object.
cli_field() { grep -o '"predicted":{[^}]*}' "$1" | head -1 | grep -o "\"$2\":[-0-9.e+]*" | cut -d: -f2; }

# compare NAME API_OUT API_PLAN CLI_OUT CLI_PLAN: the example's plan file and figures against osdp plan's.
compare() {
  local name=$1 ao=$2 ap=$3 co=$4 cp=$5
  if grep -q '^wrote .*: the same prediction$' "$ao"; then ok
  else bad "$name: plan_api did not find the same prediction in the plan it read back: $(tail -2 "$ao")"; fi
  if cmp -s "$ap" "$cp"; then ok; else bad "$name: plan_api's plan differs from osdp plan's: $(diff "$ap" "$cp" | head -6)"; fi
  local b p s
  b=$(api_batch "$ao"); p=$(api_peak "$ao"); s=$(api_step "$ao")
  if [ -n "$b" ] && [ "$b" = "$(cli_field "$co" micro_batch)" ]; then ok
  else bad "$name: micro-batch '$b', osdp plan --json says '$(cli_field "$co" micro_batch)'"; fi
  if [ -n "$p" ] && [ "$p" = "$(cli_field "$co" peak_bytes)" ]; then ok
  else bad "$name: peak '$p', osdp plan --json says '$(cli_field "$co" peak_bytes)'"; fi
  if [ -n "$s" ] && awk -v a="$s" -v b="$(cli_field "$co" step_s)" 'BEGIN { d = a - b; exit !(b > 0 && d < 1e-6 && d > -1e-6) }'; then ok
  else bad "$name: step '$s' s, osdp plan --json says '$(cli_field "$co" step_s)'"; fi
  # osdp describe reads the example's file and predicts the same peak (1 kernel thread, as here).
  local dp
  dp=$("$P/bin/osdp" describe --model gpt2-124m --plan "$ap" --json 2>desc.err | grep -o '"memory":{[^}]*}' | grep -o '"peak":[0-9]*' | cut -d: -f2)
  if [ -n "$p" ] && [ "$dp" = "$p" ]; then ok
  else bad "$name: osdp describe --plan $ap predicts peak '$dp', plan_api '$p': $(head -2 desc.err)"; fi
}

# 1. The flags' device: 2 ranks of 1e11 FLOP/s, the default links; 1.6 GiB at seq 128.
if ./plan_api api.json >api.out 2>api.err; then ok; else bad "plan_api api.json: $(cat api.err)"; fi
if "$P/bin/osdp" plan --model gpt2-124m --ranks 2 --flops 1e11 --mem-limit 1.6GiB --seq 128 \
     --out cli.json --json >cli.out 2>cli.err; then ok
else bad "osdp plan (installed): $(cat cli.err)"; fi
compare "2 ranks" api.out api.json cli.out cli.json

# 2. A device file: 2 hosts x 2 ranks, a slower link between the hosts; its 8 GiB replaced by
#    1.6 GiB on both sides.
cat >dev.json <<'EOF'
{"ranks": 4, "ranks_per_host": 2, "mem_limit": "8GiB", "threads": 1, "flops": 1e11,
 "collectives": {"allreduce": {"latency_s": 2e-5, "bandwidth_Bps": 1.25e10},
                 "allgather": {"latency_s": 2e-5, "bandwidth_Bps": 1.25e10},
                 "reduce_scatter": {"latency_s": 2e-5, "bandwidth_Bps": 1.25e10}},
 "inter_host": {"allreduce": {"latency_s": 5e-5, "bandwidth_Bps": 1.25e9},
                "allgather": {"latency_s": 5e-5, "bandwidth_Bps": 1.25e9},
                "reduce_scatter": {"latency_s": 5e-5, "bandwidth_Bps": 1.25e9}}}
EOF
if ./plan_api api2.json dev.json >api2.out 2>api2.err; then ok; else bad "plan_api api2.json dev.json: $(cat api2.err)"; fi
if grep -q ' on 4 rank(s), 2 per host,' api2.out; then ok; else bad "plan_api with dev.json: $(head -1 api2.out)"; fi
if "$P/bin/osdp" plan --model gpt2-124m --devices dev.json --mem-limit 1.6GiB --seq 128 \
     --out cli2.json --json >cli2.out 2>cli2.err; then ok
else bad "osdp plan --devices (installed): $(cat cli2.err)"; fi
compare "2 hosts" api2.out api2.json cli2.out cli2.json

# 3. A failure is one line naming the file; nothing is written.
./plan_api none.json missing-devices.json >fail.out 2>fail.err
rc=$?
if [ "$rc" -eq 1 ] && [ "$(wc -l <fail.err)" -eq 1 ] && grep -q 'missing-devices.json' fail.err && [ ! -e none.json ]; then ok
else bad "plan_api with a missing device file: exit $rc, stderr: $(cat fail.err)"; fi

finish
