#!/usr/bin/env bash
# gpu-deps.sh: fetches, on the dev machine (Debian 12), the .deb files that osdp needs to build
# and run on the GPU machine, which has CUDA, gcc and cmake but probably no OpenMPI, OpenBLAS,
# cJSON or pkg-config, and no network. The files land in .gpu-deps/ at the repository root
# (git-ignored); the device run carries that folder (carry: [".gpu-deps"]) and
# scripts/gpu-check.sh unpacks it there with `dpkg -x` into a private prefix, never into /.
#
# Nothing is installed here: `apt-get download` only. Re-running it downloads only what is
# missing and removes .deb files of other versions, so it is idempotent.
#
# The package set is the closure that osdp really uses, found by reading the NEEDED entries of
# every ELF file the packages ship (the check at the end repeats that and prints any library
# that is neither carried nor on the short list of libraries every Linux system has):
#   mpi      OpenMPI 4.1 (runtime, mpirun/orted, headers, mpicc wrapper) and the libraries it
#            links: hwloc, libevent, PMIx (+ munge). OpenMPI's plugins for InfiniBand/OFI/UCX/PSM
#            are not carried (they would pull in libfabric, libucx, libibverbs, libpsm*, libnuma,
#            libmlx5...): gpu-check.sh selects the shared-memory transports (pml ob1, btl
#            self,vader) so those plugins are never opened. hwloc's optional plugins likewise.
#   blas     OpenBLAS built on OpenMP (CMakeLists.txt wants that build) and its headers.
#   cjson    cJSON and its pkg-config file.
#   pkgconf  pkg-config itself (CMake's FindPkgConfig needs the program).
#   runtime  compiler runtime / base libraries that a minimal image may lack; gpu-check.sh uses
#            each of them only when the system has no library of that name, so it never shadows
#            a newer system libgomp/libgfortran/libz.
# The list of what was fetched, by group, is written to .gpu-deps/packages.txt, and the oldest
# glibc the carried files can run on (their newest GLIBC_ symbol version) to glibc-needed.txt.
#
# Usage: scripts/gpu-deps.sh   (it runs `apt-get update` once if apt's lists lack a package)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST=$ROOT/.gpu-deps
LIMIT_MIB=40

declare -A GROUP=(
  [mpi]="libopenmpi3 openmpi-bin openmpi-common libopenmpi-dev libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libpmix2 libmunge2"
  [blas]="libopenblas0-openmp libopenblas-openmp-dev"
  [cjson]="libcjson1 libcjson-dev"
  [pkgconf]="pkgconf pkgconf-bin libpkgconf3"
  [runtime]="libgfortran5 libquadmath0 libgomp1 zlib1g libudev1"
)
GROUPS_ALL="mpi blas cjson pkgconf runtime"
# OpenMPI plugins for network fabrics absent on one machine (kept in step with gpu-check.sh).
UNUSED_PLUGINS='/openmpi3/mca_[a-z]+_(ofi|ucx|openib|psm|psm2|netlink)\.so$|/libmca_common_(ofi|ucx|verbs)\.so'

mkdir -p "$DEST"
cd "$DEST"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
all_pkgs=""
for g in $GROUPS_ALL; do all_pkgs="$all_pkgs ${GROUP[$g]}"; done

# What apt would fetch, one line a package: 'URI' FILE SIZE SHA256:HASH (FILE is
# name_version_arch.deb, the epoch's colon written %3a).
# It leaves out the files already in the current folder, hence the empty one.
uris() {
  # shellcheck disable=SC2086  # word splitting of the package list is wanted
  (cd "$scratch" && apt-get download --print-uris $all_pkgs 2>/dev/null)
}
if ! listing=$(uris) || [ "$(echo "$listing" | grep -c .)" -ne "$(echo "$all_pkgs" | wc -w)" ]; then
  echo "gpu-deps: apt-get update"
  if [ "$(id -u)" = 0 ]; then apt-get update -q >/dev/null; else sudo apt-get update -q >/dev/null; fi
  listing=$(uris) || { echo "gpu-deps: apt-get download --print-uris failed" >&2; exit 1; }
fi

wanted=()
: > packages.txt.new
for g in $GROUPS_ALL; do
  for p in ${GROUP[$g]}; do
    line=$(echo "$listing" | awk -v p="$p" '{f=$2; sub(/_.*/, "", f)} f == p {print; exit}')
    [ -n "$line" ] || { echo "gpu-deps: no candidate for $p in apt's lists" >&2; exit 1; }
    read -r _ f _ sha <<< "$line"
    sha=${sha#SHA256:}
    wanted+=("$f")
    echo "$g $p $f" >> packages.txt.new
    if [ -s "$f" ] && echo "$sha  $f" | sha256sum -c --status; then continue; fi
    echo "gpu-deps: downloading $p"
    # apt's sandbox user cannot write into a root-owned folder: that only prints a warning.
    apt-get download -q "$p" >/dev/null 2>apt-download.err || { cat apt-download.err >&2; exit 1; }
    rm -f apt-download.err
    echo "$sha  $f" | sha256sum -c --status || { echo "gpu-deps: $f: bad or missing download" >&2; exit 1; }
  done
done
mv packages.txt.new packages.txt

# Drop .deb files that are no longer wanted (other versions, packages taken off the list).
for f in *.deb; do
  [ -e "$f" ] || continue
  keep=0
  for w in "${wanted[@]}"; do [ "$f" = "$w" ] && keep=1 && break; done
  [ "$keep" = 1 ] || { echo "gpu-deps: removing stale $f"; rm -f "$f"; }
done

# Closure check: unpack into a scratch folder and list the NEEDED libraries of the files that
# osdp's build and run use which nothing carried provides. The OpenMPI plugins that gpu-check.sh
# deletes after unpacking (UNUSED_PLUGINS, the same pattern there) are skipped. What remains must be on every Linux system (glibc, libgcc_s, libstdc++).
for f in "${wanted[@]}"; do dpkg -x "$f" "$scratch"; done
find "$scratch" \( -type f -o -type l \) -name '*.so*' -printf '%f\n' | sort -u > "$scratch/.provided"
missing=$(
  find "$scratch" -type f \( -name '*.so*' -o -path '*/bin/*' \) | grep -vE "$UNUSED_PLUGINS" |
  while IFS= read -r f; do readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; done |
  sort -u | grep -vxF -f "$scratch/.provided" |
  grep -vE '^(libc|libm|libdl|libpthread|librt|ld-linux-x86-64|libgcc_s|libstdc\+\+)\.so' || true
)
if [ -n "$missing" ]; then
  echo "gpu-deps: WARNING: libraries needed but not carried (must come from the GPU image):"
  echo "$missing" | while IFS= read -r l; do echo "  $l"; done
else
  echo "gpu-deps: closure check: every library needed is carried or is part of glibc/libgcc/libstdc++"
fi

# The newest glibc symbol version any carried program or library asks for: the oldest glibc the
# GPU image may have. scripts/gpu-check.sh reads it from glibc-needed.txt and stops at once on an
# older glibc (the carried libraries would fail to load later, one by one).
glibc_needed=$(
  find "$scratch" -type f \( -name '*.so*' -o -path '*/bin/*' \) | grep -vE "$UNUSED_PLUGINS" |
  while IFS= read -r f; do readelf -V "$f" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*'; done |
  sed 's/^GLIBC_//' | sort -uV | tail -n 1
)
echo "${glibc_needed:-2.36}" > glibc-needed.txt
echo "gpu-deps: the carried files need glibc ${glibc_needed:-unknown (2.36 assumed)} or newer"

size_kib=$(du -sk "$DEST" | awk '{print $1}')
echo "gpu-deps: ${#wanted[@]} packages in $DEST: $((size_kib / 1024)) MiB ($size_kib KiB)"
if [ "$size_kib" -gt $((LIMIT_MIB * 1024)) ]; then
  echo "gpu-deps: WARNING: over the ${LIMIT_MIB} MiB budget for the device run's carry" >&2
  exit 1
fi
echo "gpu-deps: carry .gpu-deps with the device run (carry: [\".gpu-deps\"]); scripts/gpu-check.sh stops at once without it"
