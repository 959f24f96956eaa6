#!/usr/bin/env bash
# Packs a Release build for a machine without this project's Debian packages (a lent many-core machine,
# to run scripts/scaling.sh there): pileprep and tokenize_bench, the shared libraries they load besides
# glibc's own, and the zstd and GNU time commands scaling.sh uses, into DIR (bin/, lib/, env.sh). The
# other machine needs an x86-64 glibc at least as new as Debian 12's (2.36).
#
#   scripts/pack_build.sh DIR [BIN_DIR]     # BIN_DIR: default build/bin, built with
#                                           # -DPILEPREP_BUILD_BENCHMARKS=ON (scripts/build.sh)
#   # there, in a copy of this repository:
#   . DIR/env.sh && SCALING_MB=1200 scripts/scaling.sh DIR/bin
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/pack_build.sh DIR [BIN_DIR]}
bin=${2:-build/bin}
progs=("$bin/pileprep" "$bin/tokenize_bench")
for p in "${progs[@]}"; do
  [[ -x $p ]] || { echo "$p is missing: build with -DPILEPREP_BUILD_BENCHMARKS=ON" >&2; exit 1; }
done
tools=()
for t in zstd /usr/bin/time; do
  if command -v "$t" >/dev/null; then tools+=("$(command -v "$t")"); fi
done
mkdir -p "$out/bin" "$out/lib"
cp "${progs[@]}" "${tools[@]}" "$out/bin/"
# glibc's own libraries are left out: the other machine's serve (a second loader would not mix).
ldd "${progs[@]}" "${tools[@]}" | awk '$3 ~ /^\// { print $3 }' | sort -u | while read -r lib; do
  case ${lib##*/} in
    libc.so* | libm.so* | libresolv.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
strip "$out"/bin/* 2>/dev/null || true
cat > "$out/env.sh" <<'ENV'
# Sourced on the other machine: the packed libraries and commands first; GNU time where scaling.sh
# looks for it (/usr/bin/time), if it is missing there and this shell may write it.
packed=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LD_LIBRARY_PATH=$packed/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PATH=$packed/bin:$PATH
[ -x /usr/bin/time ] || cp "$packed/bin/time" /usr/bin/time 2>/dev/null || true
ENV
echo "packed into $out ($(du -sh "$out" | cut -f1)); there: . $out/env.sh && scripts/scaling.sh $out/bin"
