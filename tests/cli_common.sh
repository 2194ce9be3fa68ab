# cli_common.sh: sourced by the tests/cli_*.sh scripts after they set OSDP (the osdp binary).
# Makes OSDP absolute, moves into a temporary work directory removed on exit (the profile cache
# of train --plan auto too), and defines the
# check counters: ok and bad MESSAGE (each script prints "N passed, M failed" at its end), and
# the checks that a command changed nothing: snapshot and refused.
[[ "$OSDP" == */* ]] && OSDP="$(cd "${OSDP%/*}" && pwd)/${OSDP##*/}"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$W" || exit 1
# train --plan auto keeps profiles under $XDG_CACHE_HOME/osdp: here, never in the machine's home.
export XDG_CACHE_HOME="$W/.cache"
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# Checksums of every file here, SNAP_DEPTH levels down (default 2), and what every other entry is
# (links and devices by what they are, not followed). The tests' own err.txt, out.txt and *.sum,
# and the lock files of checkpoint directories (each run writes its pid there) are left out.
snapshot() {
  find . -maxdepth "${SNAP_DEPTH:-2}" -type f ! -name err.txt ! -name out.txt ! -name '*.sum' \
    ! -name .osdp-lock -exec sha256sum {} + | sort
  find . -maxdepth "${SNAP_DEPTH:-2}" ! -type f -printf '%y %p %l\n' | sort
}

# refused NAME PATTERN... -- CMD...: CMD fails in one "osdp: error:" line naming every PATTERN, and
# nothing in the directory changes.
refused() {
  local name=$1; shift
  local pats=()
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done
  shift
  snapshot >before.sum
  "$@" >out.txt 2>err.txt
  local rc=$? why=""
  snapshot >after.sum
  if [ "$rc" -eq 0 ] || [ "$rc" -ge 128 ]; then why="exit status $rc"
  elif [ "$(wc -l <err.txt)" -ne 1 ] || ! grep -q '^osdp: error: ' err.txt; then why="stderr: $(head -c 300 err.txt)"
  elif ! diff -q before.sum after.sum >/dev/null; then why="files changed: $(diff before.sum after.sum | head -4)"
  else
    for p in "${pats[@]}"; do grep -qF -- "$p" err.txt || { why="error does not name '$p': $(cat err.txt)"; break; }; done
  fi
  if [ -z "$why" ]; then ok; else bad "$name: $why"; fi
}
