#!/usr/bin/env bash
# Installs the Debian packages osdp needs, if any is missing.
# As root it runs apt-get itself; otherwise it prints the exact command to run.
set -euo pipefail
pkgs="build-essential cmake libopenblas-openmp-dev libdnnl-dev libcjson-dev libpcre2-dev libopenmpi-dev openmpi-bin libxml2-utils"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
  echo "osdp: installing missing Debian packages:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends $missing >/dev/null
else
  echo "osdp: missing Debian packages:$missing" >&2
  echo "osdp: run: sudo apt-get install -y$missing" >&2
  exit 1
fi
