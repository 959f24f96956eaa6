#!/usr/bin/env bash
# Golden: the two dev shards (data/samples/00,01.jsonl.zst) must give .bin/.idx byte-identical to
# Megatron's own output (sha256 in expected.sha256, from Megatron's IndexedDatasetBuilder), with 1, 2
# and 7 threads, through the shard job and through the `preprocess` drop-in on .zst and plain .jsonl.
set -euo pipefail
PILEPREP=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0

check() {  # dir label
  if ! (cd "$1" && sha256sum --quiet -c "$here/expected.sha256"); then
    echo "FAIL: $2: outputs differ from Megatron's"
    fail=1
  else
    echo "ok: $2"
  fi
  if ls "$1" | grep -q pileprep-tmp; then
    echo "FAIL: $2: temporary files left behind: $(ls "$1")"
    fail=1
  fi
}

for t in 1 2 7; do
  "$PILEPREP" --url "$root/data/samples" --files 0-1 --output-dir "$work/t$t" --threads "$t" -q
  check "$work/t$t" "shard job, $t threads"
done

# A file:// URL names the same directory.
"$PILEPREP" --url "file://$root/data/samples" --files 0,1 --output-dir "$work/url" -q
check "$work/url" "file:// URL"

# Tiny batches: many batch boundaries inside the shards must not change a byte.
"$PILEPREP" --url "$root/data/samples" --files 0-1 --output-dir "$work/small" --threads 2 \
  --batch-bytes 4096 -q
check "$work/small" "4 KB batches"

# The preprocess_data.py drop-in, on .jsonl.zst and on decompressed .jsonl.
mkdir -p "$work/pp"
for n in 00 01; do
  "$PILEPREP" preprocess --input "$root/data/samples/$n.jsonl.zst" \
    --output-prefix "$work/pp/my-gpt3_$n" --json-keys text --append-eod --workers 2 -q
done
check "$work/pp" "preprocess on .jsonl.zst"
mkdir -p "$work/plain"
for n in 00 01; do
  zstd -q -d -c "$root/data/samples/$n.jsonl.zst" > "$work/$n.jsonl"
  "$PILEPREP" preprocess --input "$work/$n.jsonl" --output-prefix "$work/plain/my-gpt3_$n" \
    --append-eod -q
done
check "$work/plain" "preprocess on plain .jsonl"
exit $fail
