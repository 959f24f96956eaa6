#!/usr/bin/env bash
# Set-up, build, then the main job on the sample shards in data/samples: every NN.jsonl.zst there is
# turned into build/demo/my-gpt3_NN_text_document.{bin,idx}.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
build=${PILEPREP_BUILD_DIR:-build}  # where scripts/build.sh built
out=$build/demo
files=$(ls data/samples/*.jsonl.zst | sed -E 's#.*/0*([0-9]+)\.jsonl\.zst#\1#' | paste -sd, -)
echo
echo "+ $build/bin/pileprep --url data/samples --files $files --output-dir $out"
"$build/bin/pileprep" --url data/samples --files "$files" --output-dir "$out"
echo
echo "Outputs (Megatron indexed datasets; point data_prefix at the names without extension):"
ls -l "$out"/*.bin "$out"/*.idx
