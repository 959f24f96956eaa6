#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, builds tests/install/consumer against it with
# find_package(pileprep), runs the consumers, and imports the installed Python module.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR CMAKE [PYTHON]
set -euo pipefail
build=$1 src=$2 cmake=$3 python=${4:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$cmake" --install "$build" --prefix "$tmp/prefix" >/dev/null
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
"$cmake" -S "$src/tests/install/consumer" -B "$tmp/build" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
"$cmake" --build "$tmp/build" >/dev/null
out=$("$tmp/build/loader_example" "$src/tests/data/format/lcg300_uint16")
echo "$out"
grep -q "samples; sample 0 starts" <<<"$out"
"$tmp/build/loader_dtype_example" "$src/tests/data/format/lcg300_uint16" | grep -q "^uint16, 2 bytes per token$"
"$tmp/build/core_example" | grep -q "uint16"
if [[ -n "$python" ]]; then
  init=$(find "$tmp/prefix" -path '*/pileprep/__init__.py' | head -1)
  if [[ -n "$init" ]]; then
    PYTHONPATH=$(dirname "$(dirname "$init")") "$python" -c \
      "import pileprep, sys; d = pileprep.IndexedDataset(sys.argv[1]); print('python:', len(d), 'sequences')" \
      "$src/tests/data/format/lcg300_uint16"
  fi
fi
echo "install smoke test: OK"
