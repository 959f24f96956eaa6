#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, builds tests/install/consumer against it with
# find_package(pileprep), runs the consumers, and imports the installed Python module.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR CMAKE [PYTHON]
set -euo pipefail
build=$1 src=$2 cmake=$3 python=${4:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$cmake" --install "$build" --prefix "$tmp/prefix" >/dev/null
# The build tree has a pileprepConfig.cmake but exports no targets: found there, pileprep is not
# found (a consumer without REQUIRED goes on), and with REQUIRED the error says why, not a failed
# include() of pileprepCoreTargets.cmake.
mkdir -p "$tmp/probe"
cat >"$tmp/probe/CMakeLists.txt" <<'PROBE'
cmake_minimum_required(VERSION 3.16)
project(probe CXX)
if(PROBE_REQUIRED)
  find_package(pileprep REQUIRED COMPONENTS core loader)
else()
  find_package(pileprep COMPONENTS core)
endif()
message(STATUS "probe: pileprep_FOUND=${pileprep_FOUND}")
PROBE
probe=$("$cmake" -S "$tmp/probe" -B "$tmp/probe-build" -Dpileprep_DIR="$build" 2>&1) ||
  { echo "install test: find_package without REQUIRED stopped the configure: $probe" >&2; exit 1; }
grep -q "probe: pileprep_FOUND=0" <<<"$probe" ||
  { echo "install test: a build tree's package was found: $probe" >&2; exit 1; }
if probe=$("$cmake" -S "$tmp/probe" -B "$tmp/probe-build2" -Dpileprep_DIR="$build" -DPROBE_REQUIRED=ON 2>&1); then
  echo "install test: REQUIRED against a build tree configured" >&2; exit 1
fi
grep -q "a build tree exports no targets" <<<"$probe" ||
  { echo "install test: REQUIRED against a build tree: no reason given: $probe" >&2; exit 1; }
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
"$cmake" -S "$src/tests/install/consumer" -B "$tmp/build" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
"$cmake" --build "$tmp/build" >/dev/null
out=$("$tmp/build/loader_example" "$src/tests/data/format/lcg300_uint16")
echo "$out"
# The numbers the build tree's loader gives (its sampling is checked against Megatron's by
# tests/python/test_loader.py): the installed headers and library must give the same.
grep -qx "295 sequences, 5899 tokens" <<<"$out"
grep -qx "133 samples; sample 0 starts 23092 33823 18133" <<<"$out"
"$tmp/build/loader_dtype_example" "$src/tests/data/format/lcg300_uint16" | grep -q "^uint16, 2 bytes per token$"
# The README's library example is this program's Prepare(), line for line.
prepare() { sed -n '/^absl::Status Prepare(/,/^}/p' "$1"; }
diff <(prepare "$src/README.md") <(prepare "$src/tests/install/consumer/core_example.cc") >&2 ||
  { echo "install test: README's library example is not core_example.cc's Prepare()" >&2; exit 1; }
[[ -n "$(prepare "$src/README.md")" ]] || { echo "install test: no Prepare() in the README" >&2; exit 1; }
# It runs on the installed tokenizer files and makes the CLI's bytes.
mkdir "$tmp/lib" "$tmp/cli"
lib_out=$(PILEPREP_TOKENIZER_DIR="$tmp/prefix/share/pileprep/tokenizers/gpt2" \
  "$tmp/build/core_example" "$src/data/samples/00.jsonl.zst" "$tmp/lib/x_text_document")
echo "$lib_out"
grep -qx "2575 documents, 3489275 tokens" <<<"$lib_out"
"$build/bin/pileprep" preprocess -q --input "$src/data/samples/00.jsonl.zst" \
  --output-prefix "$tmp/cli/x" --append-eod
cmp "$tmp/lib/x_text_document.bin" "$tmp/cli/x_text_document.bin"
cmp "$tmp/lib/x_text_document.idx" "$tmp/cli/x_text_document.idx"
if [[ -n "$python" ]]; then
  init=$(find "$tmp/prefix" -path '*/pileprep/__init__.py' | head -1)
  # A build with the Python module installs it: its absence is a failure, not a skip.
  if [[ -d "$build/python/pileprep" || -n "$(find "$build" -name '_pileprep*.so' -print -quit)" ]]; then
    [[ -n "$init" ]] || { echo "install test: the Python module was built but not installed" >&2; exit 1; }
  fi
  if [[ -n "$init" ]]; then
    PYTHONPATH=$(dirname "$(dirname "$init")") "$python" -c \
      "import pileprep, sys; d = pileprep.IndexedDataset(sys.argv[1]); assert len(d) == 295, len(d); print('python:', len(d), 'sequences')" \
      "$src/tests/data/format/lcg300_uint16"
  fi
fi
echo "install smoke test: OK"
