#!/usr/bin/env bash
# Packs a Release build for a machine without this project's Debian packages (a lent many-core machine,
# to run scripts/scaling.sh there): pileprep and tokenize_bench, the shared libraries they load besides
# glibc's own, the GPT-2 vocabulary, and the zstd and GNU time commands scaling.sh uses. The other
# machine needs x86-64 and a glibc at least as new as Debian 12's (2.36).
#
#   scripts/pack_build.sh DIR [BIN_DIR]     # BIN_DIR: default build/bin, built with
#                                           # -DPILEPREP_BUILD_BENCHMARKS=ON (scripts/build.sh)
#   # there, in a copy of this repository (anywhere):
#   PATH=DIR/bin:$PATH SCALING_MB=1200 scripts/scaling.sh DIR/bin
#
# DIR/bin holds wrappers that run DIR/libexec's programs with DIR/lib's libraries, set for those
# programs alone: the other machine's own programs keep its (newer) libraries. The programs find the
# vocabulary in DIR/share/pileprep/tokenizers, beside libexec/.
set -euo pipefail
out=${1:?usage: scripts/pack_build.sh DIR [BIN_DIR]}
bin=${2:-build/bin}
mkdir -p "$out"
out=$(cd "$out" && pwd)  # both relative to the caller's directory
bin=$(cd "$bin" && pwd)
cd "$(dirname "$0")/.."
progs=()
for p in pileprep tokenize_bench; do
  [[ -x $bin/$p ]] || { echo "$bin/$p is missing: build with -DPILEPREP_BUILD_BENCHMARKS=ON" >&2; exit 1; }
  progs+=("$bin/$p")
done
for t in zstd time; do
  path=$(type -P "$t") || { echo "no $t command here to pack (apt-get install $t)" >&2; exit 1; }
  progs+=("$path")  # `time`: the GNU command, not the shell keyword
done
rm -rf "$out/bin" "$out/libexec" "$out/lib" "$out/share"
mkdir -p "$out/bin" "$out/libexec" "$out/lib" "$out/share/pileprep/tokenizers"
cp "${progs[@]}" "$out/libexec/"
cp -r tokenizers/gpt2 "$out/share/pileprep/tokenizers/"
# glibc's own libraries are left out: the other machine's serve (its loader would not mix with ours).
ldd "${progs[@]}" |
  awk '/not found/ { print "pack_build.sh: missing library: " $1 > "/dev/stderr"; bad = 1 }
       $3 ~ /^\// { print $3 } END { exit bad }' |
  sort -u | while read -r lib; do
    case ${lib##*/} in
      libc.so* | libm.so* | libmvec.so* | libresolv.so* | libpthread.so* | libdl.so* | librt.so* | \
        libutil.so* | libanl.so* | libnss_* | libBrokenLocale.so* | ld-linux*) ;;
      *) cp -L "$lib" "$out/lib/" ;;
    esac
  done
strip "$out"/libexec/* 2>/dev/null || true
for p in "${progs[@]}"; do
  name=${p##*/}
  cat > "$out/bin/$name" <<WRAP
#!/bin/sh
# The packed $name, with the packed libraries for it (and what it runs) alone.
here=\$(dirname "\$(readlink -f "\$0")")
LD_LIBRARY_PATH="\$here/../lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "\$here/../libexec/$name" "\$@"
WRAP
  chmod +x "$out/bin/$name"
done
echo "packed into $out ($(du -sh "$out" | cut -f1)); there: PATH=$out/bin:\$PATH scripts/scaling.sh $out/bin"
