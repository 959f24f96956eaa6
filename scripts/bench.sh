#!/usr/bin/env bash
# Measures pileprep beside its peers on the same real text, in one run, and prints one table.
#
#   scripts/bench.sh            # tokenizer (1 thread), whole job (1 and 2 threads, and two separate 1-thread
#                               # jobs at once; all cores from .jsonl.zst), memory on ~100 MB / ~1 GB shards
#   scripts/bench.sh --scaling  # also the whole job at 1, 2, 4, ... up to all cores
#   BENCH_SKIP_MEMORY=1         # skip the large-shard memory runs
#   BENCH_JOB_MB=1200           # JSON lines per whole-job run (needs ~5x that free in $TMPDIR)
#
# Text: the documents of data/samples/*.jsonl.zst (Debian manuals in many languages, code, LaTeX, Unicode
# data), or the .jsonl/.jsonl.zst files listed in $PILEPREP_BENCH_CORPUS (colon-separated).
# Peers, on the same texts: tiktoken's native Rust core (npm tiktoken-rs-node-linux-x64-gnu, installed into
# ~/.cache/pileprep, outside the repo; its ids must equal pileprep's) and a plain Python baseline
# (benchmarks/peers/python_baseline.py: Megatron's preprocess_data.py loop with Megatron's GPT-2 BPE).
set -euo pipefail
cd "$(dirname "$0")/.."
SCALING=0
[[ "${1:-}" == "--scaling" ]] && SCALING=1

scripts/setup.sh
BUILD=${PILEPREP_BUILD_DIR:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPILEPREP_BUILD_BENCHMARKS=ON >/dev/null
cmake --build "$BUILD" -j "${PILEPREP_JOBS:-$(nproc)}" --target pileprep tokenize_bench >/dev/null

# tiktoken's native core from npm, installed into ~/.cache/pileprep (scripts/tiktoken_peer.sh); without
# it the tiktoken rows are left out, said below.
TIKTOKEN=$(scripts/tiktoken_peer.sh) || TIKTOKEN=""

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cores=$(nproc)
PY=/usr/bin/python3
json() { $PY -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
rss() { awk '/Maximum resident/ {printf "%.0f", $6/1024}' "$1"; }   # MB from /usr/bin/time -v
# A list of timed runs' seconds ("4.2 4.1 4.3 "): its shortest, its median, and the list for printing.
shortest() { $PY -c "import sys; print(min(map(float, sys.argv[1:])))" $1; }
median() { $PY -c "import statistics,sys; print(statistics.median(map(float, sys.argv[1:])))" $1; }
listed() { $PY -c "import sys; print(', '.join('%.3f s' % float(x) for x in sys.argv[1:]))" $1; }

echo "== tokenizer, 1 thread (pileprep)" >&2
# Best of three runs for every figure (a cold pass happens once per run): this VM's speed wanders by
# tens of percent from minute to minute, and the peers get the same treatment (tiktoken: best of 5).
# Two tokenize_bench results as one: the shorter of each time.
best_of() {
  $PY -c "import json,sys; a,b=json.loads(sys.argv[1]),json.loads(sys.argv[2]); print(json.dumps({k:(min(a[k],b[k]) if k.endswith('_seconds') else a[k]) for k in a}))" "$1" "$2"
}
tok=$("$BUILD/bin/tokenize_bench" --export-texts "$work/texts.bin" --export-ids "$work/ids.bin")
for _ in 1 2; do tok=$(best_of "$tok" "$("$BUILD/bin/tokenize_bench")"); done
# The same, with the 16-bit ids the job writes for GPT-2's uint16 .bin (the rows above keep the 32-bit
# ids tiktoken returns, for a like-for-like comparison).
tok16=$("$BUILD/bin/tokenize_bench" --ids16)
for _ in 1 2; do tok16=$(best_of "$tok16" "$("$BUILD/bin/tokenize_bench" --ids16)"); done
text_bytes=$(json "$tok" text_bytes)
text_mb=$($PY -c "print($text_bytes/1e6)")

tik_mbps=""
if [[ -n $TIKTOKEN ]]; then
  echo "== tokenizer, 1 thread (tiktoken)" >&2
  tik=$(/usr/bin/time -v -o "$work/tik.time" node benchmarks/peers/tiktoken_bench.js "$TIKTOKEN" "$work/texts.bin" "$work/ids.bin" 5)
  tik_mbps=$($PY -c "print($text_bytes/1e6/$(json "$tik" seconds))")
  [[ $(json "$tik" ids_match) == True ]] || { echo "tiktoken's ids differ from pileprep's (text $(json "$tik" first_mismatch))" >&2; exit 1; }
else
  echo "tiktoken peer unavailable (no node/npm or no registry): ratios omitted" >&2
fi

echo "== tokenizer, 1 process (Python baseline)" >&2
pyt=$($PY benchmarks/peers/python_baseline.py tokenize "$work/texts.bin" "$work/ids.bin")
[[ $(json "$pyt" ids_match) == True ]] || { echo "Python baseline ids differ from pileprep's" >&2; exit 1; }

# Whole job input: the same documents as JSON lines.
# Split on colons only, as tokenize_bench does: a path may hold spaces.
if [[ -n ${PILEPREP_BENCH_CORPUS:-} ]]; then
  IFS=: read -ra corpus_files <<< "$PILEPREP_BENCH_CORPUS"
else
  corpus_files=(data/samples/*.jsonl.zst)
fi
for g in "${corpus_files[@]}"; do
  [[ -n $g ]] || continue
  case $g in *.zst) zstd -q -d -c "$g" ;; *) cat "$g" ;; esac
done > "$work/corpus.jsonl"
json_mb=$($PY -c "import os; print(os.path.getsize('$work/corpus.jsonl')/1e6)")
# The whole job runs on the same documents repeated to >= $BENCH_JOB_MB MB (default 1200) of JSON lines,
# for pileprep and the Python baseline alike, so that fixed costs weigh less, as over a real shard (43 GB
# of JSON: there they are a tenth of a percent): process start-up, the vocabulary, faulting in fresh
# memory (each worker's 56 MiB pre-token cache, the batches), writing the .idx and the final fsync, and
# each worker's own cold pass over the corpus. On this VM, whose fresh memory is slow to fault in, they
# came to ~160 ms of pileprep's 2-thread job (2026-12-01, best of three alternating runs: 1.31 s on
# 600 MB of JSON, 2.46 s on 1,200 MB): 12% of the 600 MB job (the default until then), 6% of 1,200 MB.
# (At 200 MB, 2 threads ran 1.75x one; at 790 MB, 1.87x.) The Python baseline's fixed costs (its
# process pool, its vocabulary) are under a second of its minutes.
job_reps=$($PY -c "import math; print(max(1, math.ceil(${BENCH_JOB_MB:-1200}/$json_mb)))")
for ((i = 0; i < job_reps; i++)); do cat "$work/corpus.jsonl"; done > "$work/job.jsonl"
job_text_bytes=$((text_bytes * job_reps))

echo "== whole job (Python baseline, 2 workers)" >&2
pyj=$(/usr/bin/time -v -o "$work/pyj.time" $PY benchmarks/peers/python_baseline.py job "$work/job.jsonl" "$work/py" 2 2>"$work/pyj.log")

declare -A job_s job_rss
threads_list="1 2"
if ((SCALING)); then
  threads_list=""; t=1
  while ((t < cores)); do threads_list+="$t "; t=$((t * 2)); done
  threads_list+="$cores"
fi
# One timed `pileprep preprocess` run: job_run INPUT PREFIX WORKERS; sets run_s (wall seconds, timed to
# the nanosecond: /usr/bin/time's 10 ms steps are 1% of a 1 s run) and run_rss. The previous run's outputs
# are removed first (untimed): replacing them would time the freeing of a few hundred MB of old .bin as
# well, which the first run, and the Python baseline, never pay.
job_run() {
  rm -f "$2"_text_document.bin "$2"_text_document.idx
  local t0 t1
  t0=$(date +%s%N)
  /usr/bin/time -v -o "$work/job.time" "$BUILD/bin/pileprep" preprocess --input "$1" \
    --output-prefix "$2" --append-eod --workers "$3" -q 2>/dev/null
  t1=$(date +%s%N)
  run_s=$($PY -c "print(($t1 - $t0) / 1e9)")
  run_rss=$(rss "$work/job.time")
}
# Best of three runs: best_job INPUT PREFIX WORKERS; sets best_s, best_rss (the largest of the three).
best_job() {
  best_s=1e9 best_rss=0
  for rep in 1 2 3; do
    job_run "$@"
    best_s=$($PY -c "print(min($best_s, $run_s))")
    best_rss=$((run_rss > best_rss ? run_rss : best_rss))
  done
}
# The whole job: best of three runs per thread count, the counts taking turns (1, 2, 1, 2, 1, 2), so that
# a slow spell of this VM, which can last several seconds, does not fall on all three runs of one count.
# Each timed run comes right after an untimed run of the same job at the same thread count, so that it
# starts with memory as its own kind of run leaves it. On this VM memory freed a few seconds ago goes back
# to the host (free page reporting), and a 2 MB page taken back costs ~4 ms to fault in again against
# ~0.25 ms otherwise: a 2-thread run straight after a 1-thread one faults its second 72 MiB cache in
# from cold memory and took 1.24-1.39 s against 1.06-1.09 s after a 2-thread run (2026-12-01, 600 MB).
# A 43 GB shard pays that once in minutes; a 600 MB job would pay it as 15-25% of its time.
declare -A job_all  # every timed run's seconds; job_s, the best of them, is taken from it below
for t in $threads_list; do job_rss[$t]=0; job_all[$t]=""; done
for rep in 1 2 3; do
  for t in $threads_list; do
    echo "== whole job (pileprep, $t threads, run $rep of 3, after an untimed one)" >&2
    job_run "$work/job.jsonl" "$work/pp" "$t"
    job_run "$work/job.jsonl" "$work/pp" "$t"
    job_all[$t]+="$run_s "
    job_rss[$t]=$((run_rss > job_rss[$t] ? run_rss : job_rss[$t]))
  done
done
for t in $threads_list; do
  job_s[$t]=$(shortest "${job_all[$t]}")
done
cmp -s "$work/py.bin" "$work/pp_text_document.bin" && cmp -s "$work/py.idx" "$work/pp_text_document.idx" \
  || { echo "Python baseline output differs from pileprep's" >&2; exit 1; }

# Two separate 1-thread jobs at once, each the whole job, as two processes: workers that share nothing
# but the machine (its caches, memory and host). Their combined rate against one job alone is the
# yardstick the 2-thread job's 1 -> 2 is read against: what two workers that share nothing get here.
# (Each separate job pays its start-up, ~0.15 s, side by side with the other, where the 2-thread job
# pays its once before its workers start: about 5-7% of its time here.)
# The same order as above: best of three, each after an untimed pair. pair_run sets run_s (the later of
# the two to finish).
pair_run() {
  rm -f "$work"/pa_text_document.* "$work"/pb_text_document.*
  local t0 pid
  t0=$(date +%s%N)
  "$BUILD/bin/pileprep" preprocess --input "$work/job.jsonl" --output-prefix "$work/pa" --append-eod \
    --workers 1 -q 2>/dev/null &
  pid=$!
  "$BUILD/bin/pileprep" preprocess --input "$work/job.jsonl" --output-prefix "$work/pb" --append-eod \
    --workers 1 -q 2>/dev/null || { wait "$pid" || true; echo "a separate 1-thread job failed" >&2; exit 1; }
  wait "$pid" || { echo "a separate 1-thread job failed" >&2; exit 1; }
  run_s=$($PY -c "print(($(date +%s%N) - $t0) / 1e9)")  # both have finished: the later one's time
}
pair_all=""
if ((cores >= 2)); then
  for rep in 1 2 3; do
    echo "== two separate 1-thread jobs at once (pileprep, run $rep of 3, after an untimed pair)" >&2
    pair_run
    pair_run
    pair_all+="$run_s "
  done
  # The last pair's outputs byte-identical to the threaded job's, which equal the Python baseline's (above).
  for f in pa pb; do
    for ext in bin idx; do
      cmp -s "$work/${f}_text_document.$ext" "$work/pp_text_document.$ext" \
        || { echo "a separate job's .$ext differs from the threaded job's" >&2; exit 1; }
    done
  done
  rm -f "$work"/pa_text_document.* "$work"/pb_text_document.*
  pair_s=$(shortest "$pair_all")
fi

# The same job from .jsonl.zst, as shards come: decoding runs in the pipeline's serial read stage.
echo "== whole job from .jsonl.zst (pileprep, $cores threads)" >&2
zstd -q -3 -T0 "$work/job.jsonl" -o "$work/job.jsonl.zst"
best_job "$work/job.jsonl.zst" "$work/ppz" "$cores"
zst_s=$best_s
zst_rss=$best_rss
cmp -s "$work/ppz_text_document.bin" "$work/pp_text_document.bin" || { echo ".jsonl.zst output differs" >&2; exit 1; }
rm -f "$work/job.jsonl.zst" "$work"/ppz_text_document.*

mem_lines=""
if [[ -z "${BENCH_SKIP_MEMORY:-}" ]]; then
  mkdir -p "$work/shards" "$work/out"
  reps_small=$($PY -c "import math; print(max(1, math.ceil(100/$json_mb)))")
  reps_large=$($PY -c "import math; print(max(1, math.ceil(1000/$json_mb)))")
  for spec in "00 $reps_small" "01 $reps_large"; do
    set -- $spec
    for ((i = 0; i < $2; i++)); do cat "$work/corpus.jsonl"; done | zstd -q -3 -T0 -o "$work/shards/$1.jsonl.zst"
  done
  for n in 0 1; do
    echo "== memory: shard $n" >&2
    /usr/bin/time -v -o "$work/mem$n.time" "$BUILD/bin/pileprep" --url "$work/shards" --files "$n" \
      --output-dir "$work/out" -q 2>/dev/null
    reps=$([[ $n == 0 ]] && echo "$reps_small" || echo "$reps_large")
    size=$($PY -c "print('%.0f' % ($json_mb * $reps))")
    mem_lines+="$(printf '%-34s %7s %14s %s MB\n' "pileprep shard job, ${size} MB JSON" "$cores" "" "$(rss "$work/mem$n.time")")"$'\n'
    rm -f "$work/out"/*
  done
fi

echo
echo "Text: $(json "$tok" documents) documents, ${text_mb} MB of text (${json_mb} MB JSON lines), $(json "$tok" tokens) tokens"
echo "Whole job: the same documents x $job_reps ($((job_text_bytes / 1000000)) MB of text) for pileprep and the Python baseline"
echo "Tokenizer: cold = a fresh pre-token cache, one pass; warm, unseen = the cache warmed on half the"
echo "documents, the other half timed (both ways round): the middle of a real shard; warm, seen = text the"
echo "cache has already seen (an upper bound: nearly every piece hits)."
echo "Pre-tokens merged because the cache missed them: cold $($PY -c "print('%.1f' % (100*$(json "$tok" cold_merged)))")%," \
  "unseen $($PY -c "print('%.1f' % (100*$(json "$tok" unseen_merged)))")%, seen $($PY -c "print('%.2f' % (100*$(json "$tok" warm_merged)))")%."
echo "Machine: $(lscpu | awk -F: '/Model name/ {gsub(/^ +/,"",$2); print $2}'), $cores cores, $(uname -r)"
echo
printf '%-34s %7s %12s %12s %10s %10s\n' implementation threads "MB/s text" "MB/s/core" "x tiktoken" "peak RSS"
row() {  # name threads seconds rss [text bytes]
  local mbps per ratio tb=${5:-$text_bytes}
  mbps=$($PY -c "print('%.1f' % ($tb/1e6/$3))")
  per=$($PY -c "print('%.1f' % ($tb/1e6/$3/$2))")
  # Two decimals: at one, a ratio of 19.96 reads as the target's 20.0.
  ratio=$([[ -n $tik_mbps ]] && $PY -c "print('%.2f' % ($tb/1e6/$3/$2/$tik_mbps))" || echo "-")
  printf '%-34s %7s %12s %12s %10s %10s\n' "$1" "$2" "$mbps" "$per" "$ratio" "$4"
}
[[ -n $tik_mbps ]] && row "tiktoken (Rust core via npm)" 1 "$(json "$tik" seconds)" "$(rss "$work/tik.time") MB"
row "python baseline, tokenizer" 1 "$(json "$pyt" seconds)" "-"
row "pileprep tokenizer, cold cache" 1 "$(json "$tok" cold_seconds)" "-"
row "pileprep tokenizer, warm, unseen" 1 "$(json "$tok" unseen_seconds)" "-"
row "pileprep tokenizer, warm, seen" 1 "$(json "$tok" warm_seconds)" "-"
row "  the same, 16-bit ids: cold" 1 "$(json "$tok16" cold_seconds)" "-"
row "  16-bit ids: warm, unseen" 1 "$(json "$tok16" unseen_seconds)" "-"
row "  16-bit ids: warm, seen" 1 "$(json "$tok16" warm_seconds)" "-"
row "python baseline, whole job" 2 "$(json "$pyj" seconds)" "$(rss "$work/pyj.time") MB" "$job_text_bytes"
for t in $threads_list; do
  row "pileprep whole job" "$t" "${job_s[$t]}" "${job_rss[$t]} MB" "$job_text_bytes"
done
[[ -n $pair_all ]] && row "2 separate 1-thread jobs at once" 2 "$pair_s" "-" "$((2 * job_text_bytes))"
row "pileprep whole job, .jsonl.zst" "$cores" "$zst_s" "$zst_rss MB" "$job_text_bytes"
py_job=$(json "$pyj" seconds)
echo
t2=${job_s[2]:+2}; t2=${t2:-1}
echo "whole job, $t2 threads vs Python baseline (2 workers): $($PY -c "print('%.1f' % ($py_job/${job_s[$t2]}))")x"
# The ratio above divides pileprep's best run by the baseline's only one (minutes long, so it averages
# over this VM's slow spells, which a best of three avoids); this one uses pileprep's median run.
echo "  the same with pileprep's median run: $($PY -c "print('%.1f' % ($py_job/$(median "${job_all[$t2]}")))")x"
[[ -n ${job_s[2]:-} ]] && echo "scaling 1 -> 2 threads: $($PY -c "print('%.2f' % (${job_s[1]}/${job_s[2]}))")x" \
  "(medians: $($PY -c "print('%.2f' % ($(median "${job_all[1]}")/$(median "${job_all[2]}")))")x)"
# Two jobs' text in the pair's time, against one job's in the best 1-thread time.
[[ -n $pair_all ]] && echo "two separate 1-thread jobs at once vs one alone: $($PY -c "print('%.2f' % (2 * ${job_s[1]} / $pair_s))")x" \
  "(medians: $($PY -c "print('%.2f' % (2 * $(median "${job_all[1]}") / $(median "$pair_all")))")x): what this machine gives two workers that share nothing"
for t in $threads_list; do
  echo "  pileprep whole job's three timed runs at $t thread(s): $(listed "${job_all[$t]}")"
done
[[ -n $pair_all ]] && echo "  two separate 1-thread jobs' three timed pairs: $(listed "$pair_all")"
[[ -n $mem_lines ]] && { echo; echo "Memory (peak RSS of the shard job, all cores):"; printf '%s' "$mem_lines"; }
exit 0
