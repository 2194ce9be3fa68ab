# cli_common.sh: sourced by the tests/cli_*.sh scripts after they set OSDP (the osdp binary).
# Makes OSDP absolute, moves into a temporary work directory removed on exit, and defines the
# check counters: ok and bad MESSAGE (each script prints "N passed, M failed" at its end).
[[ "$OSDP" == */* ]] && OSDP="$(cd "${OSDP%/*}" && pwd)/${OSDP##*/}"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$W" || exit 1
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
