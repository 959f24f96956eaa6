#!/usr/bin/env bash
# Whole-job scaling curve: `pileprep preprocess` on the same real text at 1, 2, 4, ... up to all cores
# (plus the single-thread tokenizer figures), printing MB/s of text, per-core rate, speedup, peak RSS,
# and beside each speedup that of as many separate 1-thread jobs run at once (the yardstick).
#
#   scripts/scaling.sh [BIN_DIR]    # default build/bin; needs tokenize_bench (-DPILEPREP_BUILD_BENCHMARKS=ON)
#
# Text: data/samples/*.jsonl.zst (or the JSON-lines file $SCALING_CORPUS) repeated to ~$SCALING_MB
# (default 300) MB of JSON lines, so every thread count runs long enough to time. Needs only coreutils and
# awk (zstd when $SCALING_CORPUS is not given; GNU time for peak RSS and CPU), so it also runs on a bare
# machine with a build packed by scripts/pack_build.sh (its bin/ first on PATH).
#
# Then, where the zstd command exists, the shard job on all cores over the same text cut into shards
# NN.jsonl.zst (one per 4 cores, at least 2), once per --shards-at-once K = 1, 2, 4, ...: on a large
# machine one shard's serial zstd stage caps K = 1, and this shows what K buys.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/bin}
MB=${SCALING_MB:-300}
separate_reps=${SCALING_SEPARATE_REPS:-2}
[[ $separate_reps =~ ^[1-9][0-9]*$ ]] || { echo "SCALING_SEPARATE_REPS must be 1 or more" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cores=$(nproc)
if [[ -n ${SCALING_CORPUS:-} ]]; then
  cp "$SCALING_CORPUS" "$work/one.jsonl"
else
  for f in data/samples/*.jsonl.zst; do zstd -q -d -c "$f"; done > "$work/one.jsonl"
fi
one=$(stat -c %s "$work/one.jsonl")
reps=$(( (MB * 1000000 + one - 1) / one ))
for ((i = 0; i < reps; i++)); do cat "$work/one.jsonl"; done > "$work/corpus.jsonl"
# Every timed run starts with nothing being written back and no output of an earlier run: a run into
# the prefix of an earlier one replaces its .bin inside the timed run, and freeing that file's blocks
# took 0.254 s at the rename on the 2-core VM (the 16-core machine mounts its disk with `discard`);
# there a 16-thread run that did so took 1.12 s, a clean one 0.83 s (two starts of the machine).
clean() { rm -rf "$@"; sync; }
clean
json_bytes=$(stat -c %s "$work/corpus.jsonl")
# The tokenizer's figures, and the text bytes of one copy, on exactly that copy.
tok=$(PILEPREP_BENCH_CORPUS="$work/one.jsonl" "$BIN/tokenize_bench")
text_one=$(echo "$tok" | sed -E 's/.*"text_bytes":([0-9]+).*/\1/')
text_bytes=$((text_one * reps))
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $cores cores"
echo "text: ${SCALING_CORPUS:-data/samples} x $reps = $((json_bytes / 1000000)) MB of JSON lines, $((text_bytes / 1000000)) MB of text"
echo "tokenizer, 1 thread, $((text_one / 1000000)) MB of text: $tok"
# separate: t separate 1-thread jobs at once, each over the whole text (processes that share nothing but
# the machine: its caches, memory bandwidth, host), as a speedup over one alone: what t workers that share
# nothing get here, the yardstick the pipeline's own speedup is read against. Each separate job pays its
# start-up (~0.15 s on the 2-core VM: the vocabulary, the cache faulted in) side by side with the others,
# where a threaded job pays its once before the workers start, so the gap it opens grows with the thread
# count: on the 2-core VM a 1-thread job of the default 300 MB takes about 1 s, of which 0.15 s is start-up.
# On many cores give SCALING_MB a few GB (t full-size outputs are written at once: check the free disk);
# SCALING_SEPARATE_REPS (default 2) sets how many times each row's separate jobs run (best taken).
# busy: the run's user and system CPU over threads x wall time (where GNU time exists): how much of its
# cores the job kept working; what it does not is idle (start-up, a stage that waits). Its helper threads
# (the .bin's writer, zstd's decoder) are not counted in the threads, so on few threads it can pass 100%.
printf '%8s %10s %12s %12s %9s %10s %9s %6s\n' threads seconds "MB/s text" "MB/s/core" speedup "peak RSS" \
  separate busy
# Runs a command quietly; sets ns (wall time), rss (peak) and cpu (user + system seconds), the last two
# where GNU time exists (the command on PATH, else /usr/bin/time), else "-".
timer=$(type -P time || echo /usr/bin/time)
timed() {
  local start
  start=$(date +%s%N)
  rss="-"; cpu="-"
  if [[ -x $timer ]]; then
    "$timer" -f "%M %U %S" -o "$work/rss" "$@" >/dev/null 2>&1
    read -r kb user sys < <(tail -1 "$work/rss")
    rss="$((kb / 1024)) MB"
    cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')
  else
    "$@" >/dev/null 2>&1
  fi
  ns=$(( $(date +%s%N) - start ))
}
list=""; t=1
while ((t < cores)); do list+="$t "; t=$((t * 2)); done
list+="$cores"
base=""
for t in $list; do
  best=""
  for rep in 1 2; do
    clean "$work"/out_*
    timed "$BIN/pileprep" preprocess --input "$work/corpus.jsonl" --output-prefix "$work/out" \
      --append-eod --workers "$t" -q
    if [[ -z $best || $ns -lt $best ]]; then best=$ns; best_rss=$rss; best_cpu=$cpu; fi
  done
  [[ -z $base ]] && base=$best
  sep=$base
  if ((t > 1)); then
    sep=""
    for ((rep = 0; rep < separate_reps; rep++)); do
      clean "$work"/sep*
      start=$(date +%s%N)
      pids=()
      for ((i = 0; i < t; i++)); do
        "$BIN/pileprep" preprocess --input "$work/corpus.jsonl" --output-prefix "$work/sep$i" \
          --append-eod --workers 1 -q >/dev/null 2>&1 &
        pids+=($!)
      done
      for pid in "${pids[@]}"; do wait "$pid" || { echo "a separate 1-thread job failed" >&2; exit 1; }; done
      ns=$(( $(date +%s%N) - start ))
      if [[ -z $sep || $ns -lt $sep ]]; then sep=$ns; fi
    done
    for ((i = 0; i < t; i++)); do
      for ext in bin idx; do
        cmp -s "$work/sep${i}_text_document.$ext" "$work/out_text_document.$ext" \
          || { echo "separate job $i's .$ext differs from the threaded job's" >&2; exit 1; }
      done
    done
    rm -f "$work"/sep*
  fi
  awk -v t="$t" -v ns="$best" -v base="$base" -v tb="$text_bytes" -v rss="$best_rss" -v sep="$sep" \
    -v cpu="$best_cpu" 'BEGIN {
    s = ns / 1e9; busy = cpu == "-" ? "-" : sprintf("%.0f%%", 100 * cpu / (s * t))
    printf "%8d %10.2f %12.1f %12.1f %9.2f %10s %9.2f %6s\n", t, s, tb / 1e6 / s, tb / 1e6 / s / t, base / ns, rss,
      t * base / sep, busy }'
done

if ! command -v zstd >/dev/null; then
  echo "shard job: no zstd command here to make .jsonl.zst shards; skipped"
  exit 0
fi
shards=$(( cores / 4 > 2 ? cores / 4 : 2 ))
mkdir -p "$work/shards"
lines=$(wc -l < "$work/corpus.jsonl")
split -d -a 2 -l $(( (lines + shards - 1) / shards )) --additional-suffix=.jsonl "$work/corpus.jsonl" "$work/shards/"
for f in "$work"/shards/*.jsonl; do zstd -q -3 -T0 --rm "$f"; done
rm -f "$work/corpus.jsonl"
echo "shard job, $cores threads, $shards shards of ~$((json_bytes / shards / 1000000)) MB of JSON lines (.jsonl.zst):"
printf '%8s %10s %12s %12s %10s %6s\n' "at once" seconds "MB/s text" "MB/s/core" "peak RSS" busy
k=1
while ((k <= shards)); do
  clean "$work/job"
  timed "$BIN/pileprep" --url "$work/shards" --files "0-$((shards - 1))" --output-dir "$work/job" \
    --threads "$cores" --shards-at-once "$k" -q
  awk -v k="$k" -v ns="$ns" -v tb="$text_bytes" -v c="$cores" -v rss="$rss" -v cpu="$cpu" 'BEGIN {
    s = ns / 1e9; busy = cpu == "-" ? "-" : sprintf("%.0f%%", 100 * cpu / (s * c))
    printf "%8d %10.2f %12.1f %12.1f %10s %6s\n", k, s, tb / 1e6 / s, tb / 1e6 / s / c, rss, busy }'
  k=$((k * 2))
done
