#!/usr/bin/env bash
# Nodes and resume: 4 simulated nodes over 7 shards, once per family of rank variables and once with
# flags (each shard made exactly once, by the rank the launcher's split assigns, identical to the
# single-node run); a Slurm array; --dry-run; SIGKILL at several moments of a 3-shard download, then
# a rerun: byte-identical outputs, nothing stray.
set -uo pipefail
PILEPREP=$1
SHIM=$2  # tests/shim/fs_fault_shim.cc, built
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
# ld.so splits LD_PRELOAD at spaces and colons: the shim is preloaded from a copy in $work, so a
# clone whose path has a space still gets it.
cp "$SHIM" "$work/fault_shim.so" && SHIM=$work/fault_shim.so
server_pid=
# The server dies with this script even when it is SIGKILLed (--parent-pid: PR_SET_PDEATHSIG), and its
# output goes to a file: an orphan holding CTest's pipe would keep CTest waiting after a failure.
stop_server() { [[ -n "$server_pid" ]] && kill -KILL "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null; server_pid=; }
pid=  # a pileprep run in the background, killed on the way out too
holder=  # a lock holder (below), killed on the way out too
trap 'stop_server; [[ -n "$pid" ]] && kill -KILL "$pid" 2>/dev/null; [[ -n "$holder" ]] && kill -- -"$holder" 2>/dev/null; rm -rf "$work"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
# Every dataset under its final names has a record that describes it (defined before its first use).
check_records() {  # dir what
  /usr/bin/python3 - "$1" <<'PY' || bad "$2: a record does not describe its dataset, or one is missing"
import glob, json, os, sys
d = sys.argv[1]
def names_files(r, prefix):  # a pending record that names the files in place (inodes, sizes)
    return all(os.path.exists(prefix + ext) and os.stat(prefix + ext).st_ino == r[ext[1:] + "_inode"]
               and os.path.getsize(prefix + ext) == r[ext[1:] + "_bytes"] for ext in (".bin", ".idx"))
# Every dataset under its final names has a record that describes it: the record, or a pending one
# that names its files (a kill between the publish and the record's rename).
for idx in glob.glob(os.path.join(d, "*.idx")):
    prefix = idx[: -len(".idx")]
    path, pending = prefix + ".pileprep.json", prefix + ".pileprep.json.pending"
    if os.path.exists(pending) and names_files(json.load(open(pending)), prefix):
        continue
    if not os.path.exists(path):
        sys.exit(f"{prefix}: under its final names without a record")
    r = json.load(open(path))
    for ext, key in ((".bin", "bin_bytes"), (".idx", "idx_bytes")):
        if not os.path.exists(prefix + ext) or os.path.getsize(prefix + ext) != r[key]:
            sys.exit(f"{path}: {prefix}{ext} missing or not {r[key]} bytes")
        if os.stat(prefix + ext).st_ino != r[ext[1:] + "_inode"]:
            sys.exit(f"{path}: {prefix}{ext} is not the file it names (inode)")
summary = os.path.join(d, "pileprep-summary-rank0.json")
if os.path.exists(summary):
    for shard in json.load(open(summary))["shards"]:
        for prefix in shard["outputs"] if shard["status"] == "done" else []:
            if not os.path.exists(prefix + ".pileprep.json"):
                sys.exit(f"{shard['shard']} done without a record {prefix}.pileprep.json")
            if os.path.exists(prefix + ".pileprep.json.pending"):
                sys.exit(f"{shard['shard']} done with its record still pending")
PY
}
# No rank variables from the environment this test runs in.
unset NGC_ARRAY_INDEX NGC_ARRAY_SIZE RANK WORLD_SIZE OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE \
  SLURM_PROCID SLURM_NTASKS SLURM_STEP_NUM_TASKS SLURM_ARRAY_TASK_ID

mkdir -p "$work/src"
cp "$root/data/samples/00.jsonl.zst" "$work/src/00.jsonl.zst"
cp "$root/data/samples/01.jsonl.zst" "$work/src/01.jsonl.zst"
cp "$root/tests/data/bad/multi-frame.jsonl.zst" "$work/src/02.jsonl.zst"
cp "$root/tests/data/bad/crlf.jsonl.zst" "$work/src/03.jsonl.zst"
cp "$root/tests/data/bad/json-escapes.jsonl.zst" "$work/src/04.jsonl.zst"
cp "$root/tests/data/bad/lone-surrogates.jsonl.zst" "$work/src/05.jsonl.zst"
cp "$root/tests/data/bad/no-final-newline.jsonl.zst" "$work/src/06.jsonl.zst"
"$PILEPREP" --url "$work/src" --files 0-6 --output-dir "$work/ref" --threads 2 -q 2>/dev/null || bad "reference run"

# The launcher's split of 7 files over 4 ranks: [0,1) [1,3) [3,5) [5,7).
declare -A owner=([00]=0 [01]=1 [02]=1 [03]=2 [04]=2 [05]=3 [06]=3)

check_nodes() {  # name dir
  local name=$1 dir=$2
  for n in 00 01 02 03 04 05 06; do
    for ext in bin idx; do
      cmp -s "$work/ref/my-gpt3_${n}_text_document.$ext" "$dir/my-gpt3_${n}_text_document.$ext" ||
        bad "$name: shard $n .$ext missing or different"
    done
    # Made by exactly the assigned rank: it appears in that rank's summary only, once.
    local makers
    makers=$(grep -l "\"shard\": \"$n.jsonl.zst\"" "$dir"/pileprep-summary-rank*.json | sed 's/.*rank\([0-9]*\).json/\1/' | tr '\n' ' ')
    [[ "$makers" == "${owner[$n]} " ]] || bad "$name: shard $n made by rank(s) '$makers', want ${owner[$n]}"
  done
  if ls "$dir" | grep -q pileprep-tmp; then bad "$name: stray temporaries"; fi
}

run_family() {  # name rank_var size_var [extra flags]
  local name=$1 rv=$2 sv=$3; shift 3
  local dir="$work/n-$name"
  for r in 0 1 2 3; do
    env "$rv=$r" ${sv:+"$sv=4"} "$PILEPREP" --url "$work/src" --files 0-6 --output-dir "$dir" --threads 1 -q "$@" \
      2>"$work/err-$name-$r" || { bad "$name rank $r failed"; cat "$work/err-$name-$r"; }
  done
  check_nodes "$name" "$dir"
}
run_family ngc NGC_ARRAY_INDEX NGC_ARRAY_SIZE
run_family torchrun RANK WORLD_SIZE
run_family mpi OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE
SLURM_NTASKS=4 run_family slurm SLURM_PROCID SLURM_STEP_NUM_TASKS   # srun's tasks
run_family nodes-flag-rank-env NGC_ARRAY_INDEX "" --nodes 4   # pileprep --nodes $NGC_ARRAY_SIZE
# --nodes that contradicts the environment's size: refused (exit 2), nothing made.
NGC_ARRAY_INDEX=1 NGC_ARRAY_SIZE=2 "$PILEPREP" --url "$work/src" --files 0-6 --output-dir "$work/n-contra" \
  --nodes 4 -q 2>"$work/err-contra"
rc=$?
[[ $rc -eq 2 ]] && grep -q -- "--nodes 4 but NGC_ARRAY_SIZE=2" "$work/err-contra" && [[ ! -e "$work/n-contra" ]] ||
  bad "--nodes 4 on 2 replicas: exit $rc, $(cat "$work/err-contra")"
grep -q '"decided_by": "NGC_ARRAY_INDEX=2 NGC_ARRAY_SIZE=4"' "$work/n-ngc/pileprep-summary-rank2.json" ||
  bad "summary does not say which variables decided the rank"
# A Slurm batch script that runs pileprep without srun: one process, SLURM_PROCID=0 and the
# allocation's SLURM_NTASKS=4. It must take every file, not a quarter of them.
SLURM_PROCID=0 SLURM_NTASKS=4 "$PILEPREP" --url "$work/src" --files 0-6 --output-dir "$work/n-batch" \
  --dry-run >"$work/plan-batch" 2>&1 || bad "batch-script dry run failed"
grep -q "rank 0 of 1: 00 01 02 03 04 05 06" "$work/plan-batch" &&
  grep -q "no SLURM_STEP_NUM_TASKS.*srun" "$work/plan-batch" ||
  bad "a batch script without srun does not take every file: $(cat "$work/plan-batch")"
# Flags, overriding misleading variables.
for r in 0 1 2 3; do
  RANK=0 WORLD_SIZE=1 "$PILEPREP" --url "$work/src" --files 0-6 --output-dir "$work/n-flags" --nodes 4 --rank $r \
    --threads 1 -q 2>/dev/null || bad "flags rank $r failed"
done
check_nodes flags "$work/n-flags"

# A Slurm array job: task N makes file N only.
for t in 0 1 2 3 4 5 6; do
  SLURM_ARRAY_TASK_ID=$t SLURM_PROCID=0 SLURM_NTASKS=1 "$PILEPREP" --url "$work/src" --files 0-6 \
    --output-dir "$work/n-array" --threads 1 -q 2>/dev/null || bad "array task $t failed"
  [[ $(ls "$work/n-array"/*.bin | wc -l) -eq $((t + 1)) ]] || bad "array task $t made more than its file"
done
for n in 00 01 02 03 04 05 06; do
  cmp -s "$work/ref/my-gpt3_${n}_text_document.bin" "$work/n-array/my-gpt3_${n}_text_document.bin" || bad "array: $n"
done

# Several shards at once (each pipeline with its share of the threads): the same files, each shard
# made once; never more shards at once than threads.
"$PILEPREP" --url "$work/src" --files 0-6 --output-dir "$work/at-once" --threads 2 --shards-at-once 3 \
  2>"$work/err-at-once" || { bad "--shards-at-once run failed"; cat "$work/err-at-once"; }
grep -q "^2 shards at once, 1 thread each" "$work/err-at-once" || bad "--shards-at-once 3 with 2 threads: $(head -3 "$work/err-at-once")"
# Threads that do not divide evenly: every thread works (one runner gets the extra one).
"$PILEPREP" --url "$work/src" --files 0-6 --output-dir "$work/at-once-3" --threads 3 --shards-at-once 2 \
  2>"$work/err-at-once-3" || { bad "--threads 3 --shards-at-once 2 failed"; cat "$work/err-at-once-3"; }
grep -q "^2 shards at once, 1 or 2 threads each" "$work/err-at-once-3" || bad "3 threads over 2 shards: $(head -3 "$work/err-at-once-3")"
for n in 00 01 02 03 04 05 06; do
  cmp -s "$work/ref/my-gpt3_${n}_text_document.bin" "$work/at-once-3/my-gpt3_${n}_text_document.bin" ||
    bad "3 threads over 2 shards: shard $n differs"
done
for n in 00 01 02 03 04 05 06; do
  for ext in bin idx; do
    cmp -s "$work/ref/my-gpt3_${n}_text_document.$ext" "$work/at-once/my-gpt3_${n}_text_document.$ext" ||
      bad "--shards-at-once: shard $n .$ext missing or different"
  done
  [[ $(grep -c "\"shard\": \"$n.jsonl.zst\"" "$work/at-once/pileprep-summary-rank0.json") -eq 1 ]] ||
    bad "--shards-at-once: shard $n not listed once in the summary"
done

# --dry-run prints the plan and the deciding variables, and does nothing.
NGC_ARRAY_INDEX=1 NGC_ARRAY_SIZE=4 "$PILEPREP" --url "$work/src" --files 0-6 --output-dir "$work/dry" --dry-run \
  >"$work/out" 2>&1 || bad "dry-run failed"
grep -q "decided by: NGC_ARRAY_INDEX=1 NGC_ARRAY_SIZE=4" "$work/out" || { bad "dry-run: no deciding variables"; cat "$work/out"; }
grep -q "rank 1 of 4: 01 02   <- this process" "$work/out" || bad "dry-run: rank 1's share"
grep -q "rank 3 of 4: 05 06" "$work/out" || bad "dry-run: rank 3's share"
[[ ! -e "$work/dry" ]] || bad "dry-run created the output directory"
"$PILEPREP" --url "$work/src" --nodes 4 --rank 4 --dry-run >/dev/null 2>"$work/err"
[[ $? -eq 2 ]] || bad "rank 4 of 4 is not a usage error"
grep -q "rank 4 is outside 0..3" "$work/err" || bad "bad rank message: $(cat "$work/err")"

# Resume: a shard whose outputs validate is skipped; a damaged one is made again; --force redoes all.
cp -r "$work/ref" "$work/r"
rm -f "$work/r"/pileprep-summary-rank0.json
truncate -s 1000 "$work/r/my-gpt3_03_text_document.bin"
touch "$work/r/my-gpt3_04_text_document.bin.pileprep-tmp"
"$PILEPREP" --url "$work/src" --files 0-6 --output-dir "$work/r" --threads 2 >"$work/out" 2>"$work/err" || bad "resume run failed"
[[ $(grep -c "already complete and valid; skipped" "$work/err") -eq 6 ]] || { bad "resume: want 6 skipped"; cat "$work/err"; }
# A skipped shard's counts in the summary are its outputs' (its empty documents were reported 0).
/usr/bin/python3 - "$work/ref/pileprep-summary-rank0.json" "$work/r/pileprep-summary-rank0.json" <<'PY' ||
import json, sys
ref = {s["shard"]: s for s in json.load(open(sys.argv[1]))["shards"]}
run = {s["shard"]: s for s in json.load(open(sys.argv[2]))["shards"]}
skipped = [n for n, s in run.items() if s["status"] == "skipped"]
assert len(skipped) == 6 and any(ref[n]["empty_documents"] > 0 for n in skipped), skipped
for n in skipped:
    for k in ("documents", "empty_documents", "tokens"):
        assert run[n][k] == ref[n][k], (n, k, run[n][k], ref[n][k])
PY
  bad "resume: a skipped shard's counts in the summary differ from the run that made it"
grep -q "my-gpt3_03_text_document: existing outputs do not validate" "$work/err" || bad "damaged shard not reported"
grep -q "removed a stale temporary file" "$work/err" || bad "stale temporary not removed"
cmp -s "$work/ref/my-gpt3_03_text_document.bin" "$work/r/my-gpt3_03_text_document.bin" || bad "damaged shard not remade"
if ls "$work/r" | grep -q pileprep-tmp; then bad "resume left temporaries"; fi
"$PILEPREP" --url "$work/src" --files 0-6 --output-dir "$work/r" --threads 2 --force 2>"$work/err" || bad "--force failed"
grep -q skipped "$work/err" && bad "--force skipped something"
# A shard is skipped only if it passes the full validator, tokens included: damage that keeps every
# size (and so the record's sizes) is found too. Shard 05: one token overwritten with 65535, outside
# GPT-2's 50257 ids; shard 06: its final EOD (50256) replaced with 0. Both are made again, exactly.
cp -r "$work/ref" "$work/r2"
rm -f "$work/r2"/pileprep-summary-rank0.json
b5=$work/r2/my-gpt3_05_text_document.bin b6=$work/r2/my-gpt3_06_text_document.bin
size5=$(stat -c %s "$b5") size6=$(stat -c %s "$b6")
[[ $(od -An -tu2 -j $((size6 - 2)) -N 2 "$b6" | tr -d ' ') == 50256 ]] ||
  bad "resume: shard 06's .bin does not end with EOD 50256 (this check needs it)"
printf '\xff\xff' | dd of="$b5" bs=1 seek=20 conv=notrunc status=none
printf '\x00\x00' | dd of="$b6" bs=1 seek=$((size6 - 2)) conv=notrunc status=none
[[ $(stat -c %s "$b5") -eq $size5 && $(stat -c %s "$b6") -eq $size6 ]] || bad "resume: the damage changed a size"
cmp -s "$b5" "$work/ref/my-gpt3_05_text_document.bin" && bad "resume: shard 05 was not damaged"
cmp -s "$b6" "$work/ref/my-gpt3_06_text_document.bin" && bad "resume: shard 06 was not damaged"
"$PILEPREP" --url "$work/src" --files 0-6 --output-dir "$work/r2" --threads 2 >"$work/out" 2>"$work/err" ||
  bad "resume over same-size damage failed"
[[ $(grep -c "already complete and valid; skipped" "$work/err") -eq 5 ]] || { bad "resume over same-size damage: want 5 skipped"; cat "$work/err"; }
grep -q "^$work/r2/my-gpt3_05_text_document: existing outputs do not validate ($b5: byte 20: token 65535 at token 10 .*is outside the vocabulary (50257 ids).*); making them again$" "$work/err" ||
  { bad "resume: a token outside the vocabulary is not found"; cat "$work/err"; }
grep -q "^$work/r2/my-gpt3_06_text_document: existing outputs do not validate ($b6: byte $((size6 - 2)): sequence [0-9]* (the last of document [0-9]*) ends with token 0, not EOD 50256.*); making them again$" "$work/err" ||
  { bad "resume: a missing final EOD is not found"; cat "$work/err"; }
# validate's advice to drop --expect-eod is not the shard job's: it has no such flag.
grep -q -e "--expect-eod" "$work/err" && bad "resume: the shard job's log advises a flag it does not have"
for n in 00 01 02 03 04 05 06; do
  for ext in bin idx; do
    cmp -s "$work/ref/my-gpt3_${n}_text_document.$ext" "$work/r2/my-gpt3_${n}_text_document.$ext" ||
      bad "resume over same-size damage: shard $n .$ext differs from the reference"
  done
done
# The two made again have records of their new files (the others, copied, have new inodes).
/usr/bin/python3 - "$work/r2" <<'PY' || bad "resume over same-size damage: 05's or 06's record does not name its new files"
import json, os, sys
for n in ("05", "06"):
    prefix = os.path.join(sys.argv[1], f"my-gpt3_{n}_text_document")
    r = json.load(open(prefix + ".pileprep.json"))
    for ext in ("bin", "idx"):
        st = os.stat(f"{prefix}.{ext}")
        assert (r[ext + "_inode"], r[ext + "_bytes"]) == (st.st_ino, st.st_size), (n, ext, r)
PY

# What made each dataset is recorded beside it ({prefix}.pileprep.json): a rerun with another
# end-of-text rule or another merges file (outputs made with either validate all the same) makes
# nothing, changes nothing, names each dataset and what differs and exits 2; --force makes every
# shard again with the new settings; datasets without a record (Megatron's, an earlier
# pileprep's) or with one that lists other sizes are judged by validation alone.
s=$work/s
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$s" --threads 2 -q 2>/dev/null || bad "settings: first run"
grep -q '"vocabulary_fingerprint": "545cbcbf8f1c2374"' "$s/my-gpt3_00_text_document.pileprep.json" ||
  bad "settings: no record with GPT-2's fingerprint: $(cat "$s/my-gpt3_00_text_document.pileprep.json")"
cp -r "$s" "$work/s-before"
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$s" --threads 2 --endoftext-as-text >"$work/out" 2>"$work/err"
[[ $? -eq 2 ]] || bad "settings: another end-of-text rule: want exit 2"
grep -q "my-gpt3_00_text_document.{bin,idx}: made with other settings (--endoftext-as-text: not set then, set now" "$work/err" &&
  grep -q "2 dataset(s) in $s were made with other settings" "$work/err" ||
  { bad "settings: another end-of-text rule not reported"; cat "$work/err"; }
mkdir -p "$work/tok"
cp "$root/tokenizers/gpt2/encoder.json" "$root/tokenizers/gpt2/vocab.bpe" "$work/tok/"
sed -i '$d' "$work/tok/vocab.bpe"  # one merge fewer
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$s" --threads 2 \
  --vocab-file "$work/tok/encoder.json" --merge-file "$work/tok/vocab.bpe" >"$work/out" 2>"$work/err"
[[ $? -eq 2 ]] || bad "settings: another merges file: want exit 2"
grep -q "my-gpt3_01_text_document.{bin,idx}: made with other settings (the vocabulary or merges: fingerprint 545cbcbf8f1c2374 (50257 tokens) then" "$work/err" ||
  { bad "settings: another merges file not reported"; cat "$work/err"; }
diff -r "$s" "$work/s-before" >/dev/null || bad "settings: a refused run changed the directory: $(diff -r "$s" "$work/s-before")"
# --dry-run says what a run would do with each shard, from the files and records, and changes nothing.
"$PILEPREP" --url "$work/src" --files 0-2 --output-dir "$s" --dry-run >"$work/out" 2>&1 &&
  grep -q "00.jsonl.zst -> $s/my-gpt3_00_text_document.{bin,idx}: made with these settings: skipped if it validates$" "$work/out" &&
  grep -q "02.jsonl.zst -> $s/my-gpt3_02_text_document.{bin,idx}: made$" "$work/out" &&
  ! grep -q "would be refused" "$work/out" ||
  { bad "dry-run: the state of made and missing shards"; cat "$work/out"; }
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$s" --dry-run --endoftext-as-text >"$work/out" 2>&1
[[ $? -eq 2 ]] && grep -q "01.jsonl.zst -> .*: REFUSED: made with other settings (--endoftext-as-text: not set then, set now" "$work/out" &&
  grep -q "the run would be refused (exit 2)" "$work/out" ||
  { bad "dry-run: datasets made with other settings"; cat "$work/out"; }
"$PILEPREP" --url "$work/src" --files 0,2 --output-dir "$s" --dry-run --endoftext-as-text --nodes 2 --rank 1 >"$work/out" 2>&1
[[ $? -eq 2 ]] && grep -q "02.jsonl.zst -> .*: made$" "$work/out" && grep -q "the run would be refused (exit 2)" "$work/out" ||
  { bad "dry-run: rank 1 is not told the run would be refused over rank 0's dataset"; cat "$work/out"; }
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$s" --dry-run --endoftext-as-text --remake-other-settings >"$work/out" 2>&1 &&
  grep -q "00.jsonl.zst -> .*: made again (--remake-other-settings): made with other settings" "$work/out" &&
  ! grep -q "would be refused" "$work/out" ||
  { bad "dry-run: --remake-other-settings"; cat "$work/out"; }
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$s" --dry-run --force | grep -q "01.jsonl.zst -> .*: made again (--force)$" ||
  bad "dry-run: --force"
diff -r "$s" "$work/s-before" >/dev/null || bad "dry-run changed the directory: $(diff -r "$s" "$work/s-before")"
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$s" --threads 2 --endoftext-as-text --force -q 2>/dev/null ||
  bad "settings: --force with the new rule failed"
grep -q '"endoftext_as_text": true' "$s/my-gpt3_00_text_document.pileprep.json" || bad "settings: --force did not record the new rule"
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$s" --threads 2 --endoftext-as-text 2>"$work/err" ||
  bad "settings: a rerun with the recorded rule failed"
[[ $(grep -c "already complete and valid; skipped (--force redoes it)$" "$work/err") -eq 2 ]] ||
  { bad "settings: a rerun with the recorded rule did not skip both"; cat "$work/err"; }
# A --force run with other settings that stops before it publishes (here: a cut input) leaves the
# old outputs and their record together: a rerun without --force still sees how they were made.
mkdir -p "$work/src-cut"
head -c 100000 "$work/src/00.jsonl.zst" >"$work/src-cut/00.jsonl.zst"
"$PILEPREP" --url "$work/src-cut" --files 0 --output-dir "$s" --threads 2 --force -q >/dev/null 2>&1
[[ $? -eq 1 ]] || bad "settings: a --force run on a cut input: want exit 1"
"$PILEPREP" --url "$work/src" --files 0 --output-dir "$s" --threads 2 >"$work/out" 2>"$work/err"
[[ $? -eq 2 ]] && grep -q "my-gpt3_00_text_document.{bin,idx}: made with other settings (--endoftext-as-text: set then, not set now" "$work/err" ||
  { bad "settings: a failed --force run lost the record of the outputs it left"; cat "$work/err"; }
# No record, or one that lists other sizes: validation alone, and the run says so.
rm "$s/my-gpt3_01_text_document.pileprep.json"
sed -i 's/"bin_bytes": /"bin_bytes": 1/' "$s/my-gpt3_00_text_document.pileprep.json"
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$s" --threads 2 >"$work/out" 2>"$work/err" ||
  { bad "settings: datasets without a record that describes them are not skipped"; cat "$work/err"; }
grep -q "01.jsonl.zst: outputs already complete and valid; skipped (--force redoes it); my-gpt3_01_text_document: no record of the settings it was made with" "$work/err" &&
  grep -q "00.jsonl.zst: outputs already complete and valid; skipped (--force redoes it); my-gpt3_00_text_document: its record .* lists other sizes" "$work/err" ||
  { bad "settings: skips judged by validation alone are not said so"; cat "$work/err"; }
# Outputs that would not even validate under the new tokenizer (a vocabulary without "Ġgazed" and
# its merge, <|endoftext|> at 50255: the old EOD id 50256 lies outside it) are refused all the
# same, not made again without a word.
v=$work/v
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$v" --threads 2 -q 2>/dev/null || bad "settings: vocabulary run"
mkdir -p "$work/tok2"
/usr/bin/python3 - "$root/tokenizers/gpt2/encoder.json" "$work/tok2/encoder.json" <<'PY'
import json, sys
e = json.load(open(sys.argv[1], encoding="utf-8"))
del e["\u0120gazed"]
e["<|endoftext|>"] = 50255
json.dump(e, open(sys.argv[2], "w", encoding="utf-8"))
PY
sed '$d' "$root/tokenizers/gpt2/vocab.bpe" >"$work/tok2/vocab.bpe"
tok2=(--vocab-file "$work/tok2/encoder.json" --merge-file "$work/tok2/vocab.bpe")
cp -r "$v" "$work/v-before"
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$v" --threads 2 "${tok2[@]}" >"$work/out" 2>"$work/err"
[[ $? -eq 2 ]] && grep -q "my-gpt3_00_text_document.{bin,idx}: made with other settings (the vocabulary or merges: fingerprint 545cbcbf8f1c2374 (50257 tokens) then, [0-9a-f]* (50256 tokens) now" "$work/err" ||
  { bad "settings: outputs invalid under a smaller vocabulary are not refused"; cat "$work/err"; }
diff -r "$v" "$work/v-before" >/dev/null || bad "settings: a refused run changed the directory (smaller vocabulary)"
# --remake-other-settings makes just those again: shard 01 first (as a requeued job that got that
# far would have), then both: 00 made again, 01 kept; a rerun then skips both, with no note.
"$PILEPREP" --url "$work/src" --files 1 --output-dir "$v" --threads 2 "${tok2[@]}" --remake-other-settings 2>"$work/err" &&
  grep -q "my-gpt3_01_text_document.{bin,idx}: made with other settings (the vocabulary or merges: .*: making it again (--remake-other-settings)" "$work/err" ||
  { bad "settings: --remake-other-settings on shard 01"; cat "$work/err"; }
cmp -s "$v/my-gpt3_00_text_document.bin" "$work/v-before/my-gpt3_00_text_document.bin" ||
  bad "settings: --remake-other-settings --files 1 touched shard 00"
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$v" --threads 2 "${tok2[@]}" --remake-other-settings 2>"$work/err" &&
  grep -q "my-gpt3_00_text_document.{bin,idx}: made with other settings .*: making it again" "$work/err" &&
  grep -q "01.jsonl.zst: outputs already complete and valid; skipped (--force redoes it)$" "$work/err" ||
  { bad "settings: --remake-other-settings on both"; cat "$work/err"; }
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$v" --threads 2 "${tok2[@]}" 2>"$work/err" &&
  [[ $(grep -c "already complete and valid; skipped (--force redoes it)$" "$work/err") -eq 2 ]] ||
  { bad "settings: after --remake-other-settings a rerun does not skip both"; cat "$work/err"; }
cmp -s "$v/my-gpt3_00_text_document.bin" "$work/v-before/my-gpt3_00_text_document.bin" &&
  bad "settings: shard 00 was not made again with the smaller vocabulary"
# A vocabulary that leaves an id out (no "Ġgazed", <|endoftext|> kept at 50256): its outputs hold
# ids up to 50256 with 50256 entries, and a rerun skips them rather than finding them invalid and
# making them again on every run.
h=$work/holes
mkdir -p "$work/tok3"
/usr/bin/python3 - "$root/tokenizers/gpt2/encoder.json" "$work/tok3/encoder.json" <<'PY'
import json, sys
e = json.load(open(sys.argv[1], encoding="utf-8"))
del e["\u0120gazed"]
json.dump(e, open(sys.argv[2], "w", encoding="utf-8"))
PY
tok3=(--vocab-file "$work/tok3/encoder.json" --merge-file "$work/tok2/vocab.bpe")
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$h" --threads 2 "${tok3[@]}" -q 2>"$work/err" &&
  grep -q "warning: .*/tok3/encoder.json leaves ids out: 50256 entries, ids up to 50256\. .*--vocab-size 50257" "$work/err" ||
  { bad "settings: vocabulary with a hole: no run, or no warning"; cat "$work/err"; }
cp -r "$h" "$work/holes-before"
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$h" --threads 2 "${tok3[@]}" 2>"$work/err" &&
  [[ $(grep -c "already complete and valid; skipped (--force redoes it)$" "$work/err") -eq 2 ]] ||
  { bad "settings: a vocabulary with a hole in its ids finds its own outputs invalid"; cat "$work/err"; }
for f in "$work"/holes-before/my-gpt3_*; do
  cmp -s "$f" "$h/${f##*/}" || bad "settings: a rerun with a vocabulary with a hole changed ${f##*/}"
done
# A vocabulary whose id 0 has no merge with itself ("!" and "\u0100", byte 0, swapped: a run of NULs
# is id 0 repeated) writes blocks of 4096 zeros into its own outputs: a rerun skips them rather than
# taking them for a zero fill (validate's check for copies filled with zeros) and making them again
# on every run. The same outputs fail `validate`, which --allow-holes accepts.
z=$work/zeros
mkdir -p "$work/tok4" "$work/src-z"
/usr/bin/python3 - "$root/tokenizers/gpt2/encoder.json" "$work/tok4/encoder.json" <<'PY'
import json, sys
e = json.load(open(sys.argv[1], encoding="utf-8"))
e["!"], e["\u0100"] = e["\u0100"], e["!"]
json.dump(e, open(sys.argv[2], "w", encoding="utf-8"))
PY
/usr/bin/python3 -c 'import json
print(json.dumps({"text": "before"}))
print(json.dumps({"text": "\u0000" * 10000}))
print(json.dumps({"text": "after"}))' | zstd -q -c >"$work/src-z/00.jsonl.zst"
tok4=(--vocab-file "$work/tok4/encoder.json" --merge-file "$root/tokenizers/gpt2/vocab.bpe")
"$PILEPREP" --url "$work/src-z" --files 0 --output-dir "$z" --threads 2 "${tok4[@]}" -q 2>"$work/err" ||
  { bad "zeros: first run"; cat "$work/err"; }
"$PILEPREP" validate "$z/my-gpt3_00_text_document" >"$work/out" 2>&1
[[ $? -eq 1 ]] && grep -q "\[zero_fill" "$work/out" || { bad "zeros: the outputs hold no zero fill to skip"; cat "$work/out"; }
cp -r "$z" "$work/zeros-before"
"$PILEPREP" --url "$work/src-z" --files 0 --output-dir "$z" --threads 2 "${tok4[@]}" 2>"$work/err" &&
  grep -q "^00.jsonl.zst: outputs already complete and valid; skipped (--force redoes it)$" "$work/err" ||
  { bad "zeros: a vocabulary that repeats id 0 finds its own outputs invalid"; cat "$work/err"; }
cmp -s "$work/zeros-before/my-gpt3_00_text_document.bin" "$z/my-gpt3_00_text_document.bin" ||
  bad "zeros: the rerun changed the .bin"
# With GPT-2's vocabulary (which never writes id 0 twice in a row) the resume check does look for
# zero fills: a finished .bin whose back part was overwritten with zeros (a copy cut short into a
# preallocated file) is found and made again, the same bytes as before.
zg=$work/zeros-gpt2
"$PILEPREP" --url "$work/src" --files 0 --output-dir "$zg" --threads 2 -q 2>/dev/null || bad "zeros: GPT-2 run"
cp "$zg/my-gpt3_00_text_document.bin" "$work/zg-before.bin"
/usr/bin/python3 -c 'import os, sys; f = open(sys.argv[1], "r+b"); f.seek(1048576); f.write(bytes(os.path.getsize(sys.argv[1]) - 1048576))' "$zg/my-gpt3_00_text_document.bin"
"$PILEPREP" --url "$work/src" --files 0 --output-dir "$zg" --threads 2 2>"$work/err" &&
  grep -q "my-gpt3_00_text_document: existing outputs do not validate (.*are all zeros.*); making them again$" "$work/err" &&
  cmp -s "$work/zg-before.bin" "$zg/my-gpt3_00_text_document.bin" ||
  { bad "zeros: a GPT-2 .bin filled with zeros is not found and made again"; cat "$work/err"; }
# A record pending from a run killed around its publish (tools/pileprep/shard_record.h): the files
# under the final names tell which way it went. Each state is made by hand from a finished run.
p=$work/pending
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$p" --threads 2 -q 2>/dev/null || bad "pending: first run"
check_records "$p" "pending: first run"
ls "$p" | grep -q '\.pending' && bad "pending: a pending record left by a finished run"
r0=$p/my-gpt3_00_text_document
# rewrite FILE FIELD=VALUE...: a record with fields changed (VALUE as JSON; ino+K: the inode + K)
rewrite() {
  /usr/bin/python3 - "$@" <<'PY'
import json, os, sys
src, dst, *changes = sys.argv[1:]
r = json.load(open(src))
prefix = dst.split(".pileprep.json")[0]
for c in changes:
    k, v = c.split("=", 1)
    r[k] = os.stat(prefix + "." + k.split("_")[0]).st_ino + int(v[4:]) if v.startswith("ino+") else json.loads(v)
json.dump(r, open(dst, "w"))
PY
}
cp "$r0.pileprep.json" "$work/r0-record"
same_record() { /usr/bin/python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1])) != json.load(open(sys.argv[2])))' "$1" "$2"; }
# Killed after the publish, before the record's rename: the old record (other settings, and by
# coincidence the same sizes) beside the pending one that names the files. The pending record
# is theirs: the run is not refused, completes it and skips the shard.
rewrite "$work/r0-record" "$r0.pileprep.json.pending"
rewrite "$work/r0-record" "$r0.pileprep.json" endoftext_as_text=true
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$p" --threads 2 >"$work/out" 2>"$work/err" &&
  grep -q "00.jsonl.zst: an interrupted run's pending record .*: its outputs were published; it is their record now" "$work/err" &&
  [[ $(grep -c "already complete and valid; skipped (--force redoes it)$" "$work/err") -eq 2 ]] &&
  [[ ! -e $r0.pileprep.json.pending ]] && same_record "$r0.pileprep.json" "$work/r0-record" ||
  { bad "pending: a published dataset's pending record is not taken"; cat "$work/err"; }
# The same with the pending record saying other settings: refused by the pending record's word,
# and the refused run leaves it pending.
rewrite "$work/r0-record" "$r0.pileprep.json.pending" endoftext_as_text=true
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$p" --threads 2 >"$work/out" 2>"$work/err"
[[ $? -eq 2 ]] && grep -q "my-gpt3_00_text_document.{bin,idx}: made with other settings (--endoftext-as-text: set then, not set now; record $r0.pileprep.json.pending)" "$work/err" &&
  [[ -e $r0.pileprep.json.pending ]] ||
  { bad "pending: a pending record naming the files, with other settings, is not heeded"; cat "$work/err"; }
# A pending record that names the files' inodes but other sizes is not theirs: removed.
rewrite "$work/r0-record" "$r0.pileprep.json.pending" endoftext_as_text=true bin_bytes=2
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$p" --threads 2 >"$work/out" 2>"$work/err" &&
  grep -q "00.jsonl.zst: an interrupted run's pending record .*: its outputs were not published; removed" "$work/err" &&
  [[ ! -e $r0.pileprep.json.pending ]] ||
  { bad "pending: a pending record listing other sizes is taken"; cat "$work/err"; }
# A pending record that cannot be read (here a directory in its place) gives no verdict, and it may
# be the only word on what made the outputs: the shard is neither skipped nor made again but left
# alone and FAILED (exit 1), its files as they were; the other shard is skipped.
cp "$r0.bin" "$work/r0-bin"
mkdir "$r0.pileprep.json.pending"
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$p" --threads 2 --dry-run 2>&1 |
  grep -q "00.jsonl.zst -> .*: FAILED, left alone: an interrupted run's pending records cannot be read" ||
  bad "dry-run: an unreadable pending record"
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$p" --threads 2 >"$work/out" 2>"$work/err"
rc=$?
[[ $rc -eq 1 ]] && grep -q "00.jsonl.zst: an interrupted run's pending records: .*; left alone (neither skipped nor made again)" "$work/err" &&
  grep -q "01.jsonl.zst: outputs already complete" "$work/err" && [[ -d $r0.pileprep.json.pending ]] &&
  ! grep -q "00.jsonl.zst: outputs already complete" "$work/err" && same_record "$r0.pileprep.json" "$work/r0-record" &&
  cmp -s "$r0.bin" "$work/r0-bin" ||
  { bad "pending: an unreadable pending record (rc $rc)"; cat "$work/err"; }
rmdir "$r0.pileprep.json.pending"
# A record that cannot be read (a directory in its place: read(2) fails, as on an NFS ESTALE or an
# EIO) is no word either way, where it may say other settings: the shard is left alone and FAILED
# (exit 1), not skipped as if there were no record.
mv "$r0.pileprep.json" "$work/r0-record-saved"
mkdir "$r0.pileprep.json"
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$p" --threads 2 --dry-run 2>&1 |
  grep -q "00.jsonl.zst -> .*: FAILED, left alone: its record .* cannot be read" ||
  bad "dry-run: an unreadable record"
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$p" --threads 2 >"$work/out" 2>"$work/err"
rc=$?
[[ $rc -eq 1 ]] && grep -q "00.jsonl.zst: .*its record .* cannot be read .*; left alone (neither skipped nor made again)" "$work/err" &&
  grep -q "01.jsonl.zst: outputs already complete" "$work/err" && cmp -s "$r0.bin" "$work/r0-bin" ||
  { bad "record: an unreadable record (rc $rc)"; cat "$work/err"; }
rmdir "$r0.pileprep.json"
mv "$work/r0-record-saved" "$r0.pileprep.json"
# Killed before the publish: the pending record (other settings) names files that never came; the
# old outputs keep their own record, and the pending one is removed.
rewrite "$work/r0-record" "$r0.pileprep.json.pending" endoftext_as_text=true bin_inode=ino+7 idx_inode=ino+7
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$p" --threads 2 >"$work/out" 2>"$work/err" &&
  grep -q "00.jsonl.zst: an interrupted run's pending record .*: its outputs were not published; removed" "$work/err" &&
  [[ $(grep -c "already complete and valid; skipped (--force redoes it)$" "$work/err") -eq 2 ]] &&
  [[ ! -e $r0.pileprep.json.pending ]] && same_record "$r0.pileprep.json" "$work/r0-record" ||
  { bad "pending: an unpublished run's pending record is not removed"; cat "$work/err"; }
# Several --json-keys: one record per dataset. A shard whose "title" dataset says other settings is
# refused by name; --remake-other-settings makes the shard again, both keys, and says so of each.
mk=$work/mk
mkdir -p "$work/src-mk"
/usr/bin/python3 -c 'import json
for i in range(50): print(json.dumps({"text": "document %d body text" % i, "title": "Title %d" % i}))' |
  zstd -q -c >"$work/src-mk/00.jsonl.zst"
keys=(--json-keys text --json-keys title)
"$PILEPREP" --url "$work/src-mk" --files 0 --output-dir "$mk" --threads 2 "${keys[@]}" -q 2>/dev/null || bad "settings: two keys"
sed -i 's/"endoftext_as_text": false/"endoftext_as_text": true/' "$mk/my-gpt3_00_title_document.pileprep.json"
"$PILEPREP" --url "$work/src-mk" --files 0 --output-dir "$mk" --threads 2 "${keys[@]}" >"$work/out" 2>"$work/err"
[[ $? -eq 2 ]] && grep -q "my-gpt3_00_title_document.{bin,idx}: made with other settings (--endoftext-as-text: set then, not set now" "$work/err" &&
  ! grep -q "my-gpt3_00_text_document.{bin,idx}: made with" "$work/err" ||
  { bad "settings: two keys, one with other settings"; cat "$work/err"; }
"$PILEPREP" --url "$work/src-mk" --files 0 --output-dir "$mk" --threads 2 "${keys[@]}" --remake-other-settings 2>"$work/err" &&
  grep -q "my-gpt3_00_title_document.{bin,idx}: made with other settings .*: making it again" "$work/err" &&
  grep -q "my-gpt3_00_text_document.{bin,idx}: made again with its shard's other key(s)" "$work/err" &&
  grep -q '"endoftext_as_text": false' "$mk/my-gpt3_00_title_document.pileprep.json" ||
  { bad "settings: two keys, --remake-other-settings"; cat "$work/err"; }
# The key set decides each key's bytes (a document missing "title" is skipped for "text" too): a
# rerun with "text" alone is refused over the dataset made beside "title", not skipped.
cp -r "$mk" "$work/mk-keys"
"$PILEPREP" --url "$work/src-mk" --files 0 --output-dir "$mk" --threads 2 --json-keys text >"$work/out" 2>"$work/err"
[[ $? -eq 2 ]] && grep -q "my-gpt3_00_text_document.{bin,idx}: made with other settings (--json-keys: text title then, text now" "$work/err" &&
  diff -r "$mk" "$work/mk-keys" >/dev/null ||
  { bad "settings: a rerun with fewer --json-keys"; cat "$work/err"; }
grep -q '"json_keys": \["text", "title"\]' "$mk/my-gpt3_00_text_document.pileprep.json" ||
  bad "settings: the record does not list the run's keys"
# A record of a pileprep before the key set was kept: not compared on it (as before), not unreadable.
/usr/bin/python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); del r["json_keys"]; json.dump(r, open(sys.argv[1], "w"))' \
  "$mk/my-gpt3_00_text_document.pileprep.json"
"$PILEPREP" --url "$work/src-mk" --files 0 --output-dir "$mk" --json-keys text --dry-run 2>&1 |
  grep -q "00.jsonl.zst -> .*: made with these settings: skipped if it validates$" ||
  bad "settings: a record without the key set"
cp "$work/mk-keys/my-gpt3_00_text_document.pileprep.json" "$mk/"
# A key added to a finished job: each shard lacks the new key's dataset and is made again whole
# with the new set, so nothing made beside the old set is kept: not refused.
"$PILEPREP" --url "$work/src-mk" --files 0 --output-dir "$work/mk-add" --threads 2 --json-keys text -q 2>/dev/null &&
  "$PILEPREP" --url "$work/src-mk" --files 0 --output-dir "$work/mk-add" --threads 2 "${keys[@]}" -q 2>"$work/err" &&
  cmp -s "$work/mk-add/my-gpt3_00_title_document.bin" "$mk/my-gpt3_00_title_document.bin" &&
  grep -q '"json_keys": \["text", "title"\]' "$work/mk-add/my-gpt3_00_text_document.pileprep.json" ||
  { bad "settings: a key added to a finished job"; cat "$work/err"; }
# The first key valid, the second not: the shard is made again, and its summary lists each key's
# dataset once (the first key's was listed twice, or alone under a failure that published nothing).
printf '\x01\x00' >>"$mk/my-gpt3_00_title_document.bin"
"$PILEPREP" --url "$work/src-mk" --files 0 --output-dir "$mk" --threads 2 "${keys[@]}" -q 2>/dev/null ||
  bad "settings: two keys, the second damaged: not made again"
/usr/bin/python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))["shards"][0]
sys.exit(not (s["status"] == "done" and s["outputs"] == [sys.argv[2] + "_text_document", sys.argv[2] + "_title_document"]))' \
  "$mk/pileprep-summary-rank0.json" "$mk/my-gpt3_00" ||
  { bad "summary: a shard whose second key did not validate lists its outputs wrongly"; cat "$mk/pileprep-summary-rank0.json"; }
# Killed between two keys' renames: "text" published (its pending record names its files), "title"
# not (its pending record names files that never came). The shard is withdrawn and made again,
# not left with keys from two runs; it ends as an undisturbed run makes it.
mkt=$mk/my-gpt3_00_text_document mkl=$mk/my-gpt3_00_title_document
cp -r "$mk" "$work/mk-before"
rewrite "$mkt.pileprep.json" "$mkt.pileprep.json.pending"
rewrite "$mkl.pileprep.json" "$mkl.pileprep.json.pending" bin_inode=ino+7 idx_inode=ino+7
"$PILEPREP" --url "$work/src-mk" --files 0 --output-dir "$mk" "${keys[@]}" --dry-run 2>&1 |
  grep -q "00.jsonl.zst -> .*: made again: an interrupted run published it for some of its keys only$" ||
  bad "dry-run: a torn shard"
"$PILEPREP" --url "$work/src-mk" --files 0 --output-dir "$mk" --threads 2 "${keys[@]}" >"$work/out" 2>"$work/err" &&
  grep -q "00.jsonl.zst: an interrupted run published $mkt and not the shard's other key(s): withdrawn, the shard is made again" "$work/err" &&
  ! grep -q "skipped" "$work/err" && ! ls "$mk" | grep -q pending ||
  { bad "pending: a shard published for one key of two is not made again"; cat "$work/err"; }
for f in "$work"/mk-before/my-gpt3_00_*_document.{bin,idx}; do
  cmp -s "$f" "$mk/${f##*/}" || bad "pending: a torn shard made again differs: ${f##*/}"
done
check_records "$mk" "pending: a torn shard made again"
# A pending record that cannot be written (its temporary's name taken by a directory) publishes
# nothing: the shard fails, the old outputs and records stay, no pending record is left.
cp -r "$mk" "$work/mk-before2"
mkdir "$mkl.pileprep.json.pending.pileprep-tmp"
"$PILEPREP" --url "$work/src-mk" --files 0 --output-dir "$mk" --threads 2 "${keys[@]}" --force >"$work/out" 2>"$work/err"
rc=$?
rmdir "$mkl.pileprep.json.pending.pileprep-tmp"
[[ $rc -eq 1 ]] && grep -q "the record of $mkl could not be written (.*): nothing was published" "$work/err" &&
  diff -r -x 'pileprep-summary-rank0.json' "$mk" "$work/mk-before2" >/dev/null ||
  { bad "pending: a pending record that cannot be written publishes something (rc $rc)"; cat "$work/err"; diff -r -x 'pileprep-summary-rank0.json' "$mk" "$work/mk-before2"; }
# A --force run over a new input whose "title" rename fails once "text" is in place, and whose
# withdrawal of "text" then fails too (tests/shim/fs_fault_shim.cc): the new "text" stays in place
# (the old "title" .idx is gone, removed before its rename). Its pending records stay, so the next run finds the shard torn, withdraws it and
# makes it again: it ends as an undisturbed run on the new input, not with keys from two runs.
/usr/bin/python3 -c 'import json
for i in range(60): print(json.dumps({"text": "another body %d, longer than before" % i, "title": "T%d" % i}))' |
  zstd -q -c >"$work/src-mk/00.jsonl.zst"
"$PILEPREP" --url "$work/src-mk" --files 0 --output-dir "$work/mk-clean" --threads 2 "${keys[@]}" -q 2>/dev/null ||
  bad "withdrawal: the undisturbed run on the new input"
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" LD_PRELOAD=$SHIM \
  PILEPREP_FAULT_RENAME_TO=$mkl.idx PILEPREP_FAULT_UNLINK_AFTER=$mkt.idx:$mkt.bin \
  "$PILEPREP" --url "$work/src-mk" --files 0 --output-dir "$mk" --threads 2 "${keys[@]}" --force >"$work/out" 2>"$work/err"
rc=$?
[[ $rc -eq 1 ]] && cmp -s "$mkt.bin" "$work/mk-clean/${mkt##*/}.bin" &&
  grep -q "00.jsonl.zst: this run's outputs of $mkt could not be withdrawn; its pending records stay" "$work/err" &&
  [[ -e $mkt.pileprep.json.pending && -e $mkl.pileprep.json.pending ]] ||
  { bad "withdrawal: a failed withdrawal (rc $rc) does not keep the pending records"; cat "$work/err"; ls "$mk"; }
"$PILEPREP" --url "$work/src-mk" --files 0 --output-dir "$mk" --threads 2 "${keys[@]}" >"$work/out" 2>"$work/err" &&
  grep -q "00.jsonl.zst: an interrupted run published $mkt and not the shard's other key(s): withdrawn, the shard is made again" "$work/err" ||
  { bad "withdrawal: the run after a failed withdrawal does not make the shard again"; cat "$work/err"; }
for f in "$work"/mk-clean/my-gpt3_00_*_document.{bin,idx}; do
  cmp -s "$f" "$mk/${f##*/}" || bad "withdrawal: the shard after a failed withdrawal differs: ${f##*/}"
done
check_records "$mk" "withdrawal: after a failed withdrawal"
# The summary is written under a lock of its own (a straggler and its requeue of one rank would
# share its temporary): held by another process for longer than the run waits (5 s), the summary
# is not written, the run says by whom and exits 1.
# Held for a moment (2 s), it is waited for: the summary is written.
summary_lock() {  # seconds: hold the summary's lock that long, once it is held
  rm -f "$work/held"
  flock "$mk/pileprep-summary-rank0.pileprep-lock" -c "touch '$work/held'; sleep $1" &
  for _ in $(seq 100); do [[ -e $work/held ]] && break; sleep 0.05; done
}
summary_lock 12
# Without the lock a run removes no temporary of this host's: its writer may hold the lock.
dead_tmp="$mk/pileprep-summary-rank0.json.$(uname -n).4194998.pileprep-tmp"
touch "$dead_tmp"
"$PILEPREP" --url "$work/src-mk" --files 0 --output-dir "$mk" --threads 2 "${keys[@]}" >"$work/out" 2>"$work/err"
rc=$?
wait
[[ $rc -eq 1 ]] && grep -q "summary: .*pileprep-summary-rank0.json: not written: another process is writing it" "$work/err" ||
  { bad "summary: a held summary lock is not waited for and named (rc $rc)"; cat "$work/err"; }
[[ -e $dead_tmp ]] || bad "summary: a temporary was removed by a run that did not hold the summary lock"
rm -f "$dead_tmp"
rm -f "$mk/pileprep-summary-rank0.json"
summary_lock 2
"$PILEPREP" --url "$work/src-mk" --files 0 --output-dir "$mk" --threads 2 "${keys[@]}" >"$work/out" 2>"$work/err"
rc=$?
wait
[[ $rc -eq 0 ]] && grep -q '"exit_status": 0' "$mk/pileprep-summary-rank0.json" ||
  { bad "summary: a lock held for a moment is not waited for (rc $rc)"; cat "$work/err"; }
rm -f "$mk/pileprep-summary-rank0.pileprep-lock"
ls "$mk" | grep -q pileprep-tmp && bad "summary: a temporary is left: $(ls "$mk")"
# Ranks sharing a directory all refuse alike: rank 1, which has made nothing yet, refuses over the
# dataset rank 0 made with other settings, and makes nothing.
m=$work/m
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$m" --nodes 2 --rank 0 --threads 2 -q 2>/dev/null || bad "settings: rank 0 failed"
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$m" --nodes 2 --rank 1 --threads 2 --endoftext-as-text >"$work/out" 2>"$work/err"
[[ $? -eq 2 ]] && grep -q "my-gpt3_00_text_document.{bin,idx}: made with other settings" "$work/err" ||
  { bad "settings: rank 1 does not refuse over rank 0's dataset"; cat "$work/err"; }
[[ -e "$m/my-gpt3_01_text_document.bin" ]] && bad "settings: rank 1 made its shard with other settings than rank 0's"

# Another process holding a shard (flock(1) stands in for a second pileprep run on the same directory):
# that shard is FAILED and left alone, temporaries included; the others are made; exit 1. Once it
# is let go, a rerun makes it, and no lock file stays.
mkdir -p "$work/l"
touch "$work/l/my-gpt3_01_text_document.bin.pileprep-tmp"
# In a session of its own, so that the holder and the sleep that inherits its lock go together.
setsid flock -n "$work/l/my-gpt3_01.pileprep-lock" -c "touch '$work/l-held'; sleep 60" </dev/null >/dev/null 2>&1 &
holder=$!
for _ in $(seq 100); do [[ -e "$work/l-held" ]] && break; sleep 0.05; done
# --dry-run sees the held lock without taking it (the holder keeps it) and says what the run will do.
"$PILEPREP" --url "$work/src" --files 0-2 --output-dir "$work/l" --dry-run >"$work/out" 2>&1 ||
  bad "dry-run beside a held shard failed"
grep -q "01.jsonl.zst -> .*: FAILED, left alone: another pileprep process is making it (another process)$" "$work/out" &&
  grep -q "00.jsonl.zst -> .*: made$" "$work/out" && grep -q "the run would leave 1 shard(s) alone (FAILED above) and exit 1" "$work/out" ||
  { bad "dry-run: a shard another process holds"; cat "$work/out"; }
"$PILEPREP" --url "$work/src" --files 0-2 --output-dir "$work/l" --threads 2 >"$work/out" 2>"$work/err"
[[ $? -eq 1 ]] || bad "a shard held by another process: want exit 1"
grep -q "01.jsonl.zst: another pileprep process is making it" "$work/err" || { bad "held shard not reported"; cat "$work/err"; }
[[ -e "$work/l/my-gpt3_01_text_document.bin.pileprep-tmp" ]] || bad "the holder's temporary was removed"
[[ -e "$work/l/my-gpt3_01_text_document.bin" ]] && bad "a held shard was made"
for n in 00 02; do
  cmp -s "$work/ref/my-gpt3_${n}_text_document.bin" "$work/l/my-gpt3_${n}_text_document.bin" || bad "lock: shard $n not made"
done
kill -- -"$holder" 2>/dev/null; wait "$holder" 2>/dev/null; holder=
# The lock file flock(1) leaves behind is no one's lock now: the dry-run says the shard is made. One
# naming a process of another host, whose locks this node cannot see, may still be held there.
[[ -e "$work/l/my-gpt3_01.pileprep-lock" ]] || bad "flock(1) removed its lock file (this check needs it)"
"$PILEPREP" --url "$work/src" --files 1 --output-dir "$work/l" --dry-run 2>&1 | grep -q "01.jsonl.zst -> .*: made$" ||
  bad "dry-run: a lock file no process holds"
echo "pid 7 on $(hostname)" >"$work/l/my-gpt3_01.pileprep-lock"
"$PILEPREP" --url "$work/src" --files 1 --output-dir "$work/l" --dry-run 2>&1 | grep -q "01.jsonl.zst -> .*: made$" ||
  bad "dry-run: this host's lock file no process holds"
echo "pid 7 on pileprep-other-node" >"$work/l/my-gpt3_01.pileprep-lock"
"$PILEPREP" --url "$work/src" --files 1 --output-dir "$work/l" --dry-run 2>&1 |
  grep -q "01.jsonl.zst -> .*: made; unless pid 7 on pileprep-other-node still holds its lock (a lock file of another host, whose locks this node cannot see): left alone and FAILED if so$" ||
  bad "dry-run: another host's lock file"
"$PILEPREP" --url "$work/src" --files 1 --output-dir "$work/l" --dry-run 2>&1 | grep -q "would leave" &&
  bad "dry-run: another host's lock file is counted as a shard certainly left alone"
"$PILEPREP" --url "$work/src" --files 0-2 --output-dir "$work/l" --threads 2 -q >/dev/null 2>"$work/err" ||
  { bad "rerun after the holder left failed"; cat "$work/err"; }
cmp -s "$work/ref/my-gpt3_01_text_document.bin" "$work/l/my-gpt3_01_text_document.bin" || bad "lock: shard 01 not made on rerun"
if ls "$work/l" | grep -q -E 'pileprep-(lock|tmp)'; then bad "lock files or temporaries left: $(ls "$work/l")"; fi

# --dry-run says what the run would do where the inputs or directories are wrong: a local input
# that is not there fails its shard (exit 1; the plan said "made"); an output directory that cannot
# be made, or a --url that is no directory, refuse the run before any work (exit 2; the plan
# exited 0), and the run itself says so the same way (it failed every shard, exit 1).
"$PILEPREP" --url "$work/src" --files 0,29 --output-dir "$work/dm" --dry-run >"$work/out" 2>&1 ||
  bad "dry-run with a missing input: want exit 0 (nothing refused)"
grep -q "29.jsonl.zst -> .*: FAILED: $work/src/29.jsonl.zst: no such file$" "$work/out" &&
  grep -q "00.jsonl.zst -> .*: made$" "$work/out" &&
  grep -q "the run would fail 1 shard(s) whose input is missing or a directory (FAILED above) and exit 1" "$work/out" ||
  { bad "dry-run: a missing local input"; cat "$work/out"; }
[[ -e "$work/dm" ]] && bad "dry-run created the output directory"
# An input that is a directory fails its shard too ("is a directory, not a file"): the plan said
# "made" of it.
mkdir -p "$work/dirsrc/03.jsonl.zst"
"$PILEPREP" --url "$work/dirsrc" --files 3 --output-dir "$work/dm" --dry-run >"$work/out" 2>&1 ||
  bad "dry-run with an input that is a directory: want exit 0 (nothing refused)"
grep -q "03.jsonl.zst -> .*: FAILED: $work/dirsrc/03.jsonl.zst: is a directory, not a file$" "$work/out" &&
  grep -q "the run would fail 1 shard(s) whose input is missing or a directory" "$work/out" ||
  { bad "dry-run: a local input that is a directory"; cat "$work/out"; }
[[ -e "$work/dm" ]] && bad "dry-run created the output directory"
touch "$work/a-file"
"$PILEPREP" --url "$work/src" --files 0 --output-dir "$work/a-file/sub" --dry-run >"$work/out" 2>&1
[[ $? -eq 2 ]] && grep -q "error: --output-dir $work/a-file/sub: cannot create: Not a directory" "$work/out" ||
  { bad "dry-run: an output directory under a file: want exit 2 and the reason"; cat "$work/out"; }
for dry in --dry-run ""; do
  "$PILEPREP" --url "$work/no-such-dir" --files 0 --output-dir "$work/dm" $dry >"$work/out" 2>&1
  [[ $? -eq 2 ]] && grep -q "error: --url $work/no-such-dir: no such directory" "$work/out" ||
    { bad "--url of no directory ($dry): want exit 2 and the reason"; cat "$work/out"; }
  "$PILEPREP" --url "$work/a-file" --files 0 --output-dir "$work/dm" $dry >"$work/out" 2>&1
  [[ $? -eq 2 ]] && grep -q "error: --url $work/a-file: not a directory" "$work/out" ||
    { bad "--url of a file ($dry): want exit 2 and the reason"; cat "$work/out"; }
done
[[ -e "$work/dm" ]] && bad "a refused run created the output directory"
# A rank with no shard (more ranks than files) says so, and exits 0.
"$PILEPREP" --url "$work/src" --files 0 --nodes 3 --rank 0 --output-dir "$work/dn" >"$work/out" 2>&1 ||
  bad "a rank with no shard: want exit 0"
grep -q "note: rank 0 has no shard to make: 3 ranks share 1 file(s)" "$work/out" ||
  { bad "a rank with no shard: no note"; cat "$work/out"; }

# Every record describes the dataset beside it (which exists, with the sizes it lists), and every
# shard the last run made ("done" in its summary) has one.
# After an interruption: whatever is under a final name is complete: its .idx and its .bin are the
# reference's (a .bin is published before its .idx, so a .bin may be there alone, whole).
check_final_names() {  # dir what
  for f in "$1"/*.idx "$1"/*.bin; do
    [[ -e "$f" ]] || continue
    cmp -s "$f" "$work/kref/$(basename "$f")" || bad "$2: $(basename "$f") under its final name differs"
  done
  check_records "$1" "$2"
}
# After the rerun: every shard byte-identical to the reference, nothing else in the directory.
check_rerun() {  # dir what
  for n in 00 01 02; do
    for ext in bin idx; do
      cmp -s "$work/kref/my-gpt3_${n}_text_document.$ext" "$1/my-gpt3_${n}_text_document.$ext" ||
        bad "$2: shard $n .$ext differs"
    done
  done
  local extra
  extra=$(ls "$1" | grep -v -E '^my-gpt3_0[0-2]_text_document\.(bin|idx|pileprep\.json)$|^pileprep-summary-rank0\.json$')
  [[ -z "$extra" ]] || bad "$2: stray files after the rerun: $extra"
  # No instant without a record: every dataset the rerun skipped has one, completed from a pending
  # record if the kill came between its publish and the record's rename.
  check_records "$1" "$2"
}

# SIGKILL at several moments of a throttled 3-shard download (about 1.9 s + 0.9 s + 1.9 s), then a rerun:
# byte-identical, nothing stray. Each run skips what earlier runs completed, so the kills land in the
# first shard, in the second, in the third, and around publishing.
mkdir -p "$work/ksrc"
cp "$root/data/samples/00.jsonl.zst" "$work/ksrc/00.jsonl.zst"
cp "$root/data/samples/01.jsonl.zst" "$work/ksrc/01.jsonl.zst"
cp "$root/data/samples/00.jsonl.zst" "$work/ksrc/02.jsonl.zst"
"$PILEPREP" --url "$work/ksrc" --files 0-2 --output-dir "$work/kref" --threads 2 -q 2>/dev/null || bad "kill reference run"
rm -f "$work/port"
/usr/bin/python3 "$root/tests/testing/fault_server.py" --root "$work/ksrc" --port-file "$work/port" --rate 800000 \
  --parent-pid $$ </dev/null >>"$work/server.out" 2>&1 &
server_pid=$!
for _ in $(seq 100); do [[ -s "$work/port" ]] && break; sleep 0.1; done
[[ -s "$work/port" ]] || { bad "fault server did not start"; cat "$work/server.out"; exit 1; }
url="http://127.0.0.1:$(cat "$work/port")/"
for delay in 0.5 2.4 0.4 1.3 0.9 1.95 2.05; do
  "$PILEPREP" --url "$url" --files 0-2 --output-dir "$work/k" --threads 2 -q >/dev/null 2>&1 &
  pid=$!
  sleep "$delay"
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null
  pid=
  echo "killed at ${delay}s: $(ls "$work/k" 2>/dev/null | tr '\n' ' ')"
  check_final_names "$work/k" "after kill at ${delay}s"
done
"$PILEPREP" --url "$url" --files 0-2 --output-dir "$work/k" --threads 2 2>"$work/err" || { bad "rerun after kills failed"; cat "$work/err"; }
check_rerun "$work/k" "after kills"

# SIGKILL at fixed points of the publish, not at moments: the shim holds the run at one open() or
# rename() (tests/shim/fs_fault_shim.cc) until it is killed there, and each state the kill leaves
# is checked to be the one intended. Each run skips or completes what the run before it left.
kp=$work/kp
# start_held err dir variable path: a run of shards 0-2 into `dir`, stderr to `err`, started in the
# background ($pid) with the shim holding it at `path`; returns once it is held (or has ended).
start_held() {  # err-file out-dir variable path [flag]
  rm -f "$1"
  # shellcheck disable=SC2086
  env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" LD_PRELOAD="$SHIM" "$3=$4" \
    "$PILEPREP" --url "$work/ksrc" --files 0-2 --output-dir "$2" --threads 2 ${5:-} >/dev/null 2>"$1" &
  pid=$!
  for _ in $(seq 1200); do
    grep -q "fault shim: paused" "$1" && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.05
  done
}
kill_held_at() {  # what variable path: a run held by the shim at `path`, SIGKILLed there
  start_held "$work/kp-err" "$kp" "$2" "$3"
  grep -q "fault shim: paused" "$work/kp-err" && kill -0 $pid 2>/dev/null ||
    { bad "$1: the run was never held at $3"; cat "$work/kp-err"; }
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null
  pid=
  echo "held and $1: $(ls "$kp" | tr '\n' ' ')"
}
kp_same() {  # what name [reference name]: $kp/name is the reference's file
  cmp -s "$work/kref/${3:-$2}" "$kp/$2" || bad "$1: $2 missing or not the reference's ${3:-$2}"
}
kp_there() { local w=$1; shift; for f in "$@"; do [[ -e $kp/$f ]] || bad "$w: $f is missing"; done; }
kp_absent() { local w=$1; shift; for f in "$@"; do [[ -e $kp/$f ]] && bad "$w: $f is there"; done; }
d0=my-gpt3_00_text_document d1=my-gpt3_01_text_document d2=my-gpt3_02_text_document
# 1. Shard 01's outputs finished as temporaries, its pending record not yet written: 00 complete
# with its record; nothing of 01 under a final name and no pending record; nothing of 02.
w="killed before 01's pending record"
kill_held_at "$w" PILEPREP_FAULT_PAUSE_OPEN "$kp/$d1.pileprep.json.pending.pileprep-tmp"
kp_same "$w" $d0.bin; kp_same "$w" $d0.idx; kp_there "$w" $d0.pileprep.json
kp_absent "$w" $d0.pileprep.json.pending $d1.bin $d1.idx $d1.pileprep.json $d1.pileprep.json.pending
kp_same "$w" $d1.bin.pileprep-tmp $d1.bin; kp_same "$w" $d1.idx.pileprep-tmp $d1.idx
[[ -z $(ls "$kp" | grep "^$d2\." | grep -v '\.pileprep-lock$') ]] || bad "$w: something of 02: $(ls "$kp")"
check_final_names "$kp" "$w"
# 2. Shard 01 published (.bin and .idx under their final names), its pending record not yet renamed
# over the record: the pending record, naming the files, is their only record.
w="killed between 01's publish and its record's rename"
kill_held_at "$w" PILEPREP_FAULT_PAUSE_RENAME_TO "$kp/$d1.pileprep.json"
grep -q "^00.jsonl.zst: outputs already complete and valid; skipped" "$work/kp-err" || bad "$w: 00 not skipped"
kp_same "$w" $d0.bin; kp_same "$w" $d0.idx; kp_same "$w" $d1.bin; kp_same "$w" $d1.idx
kp_there "$w" $d1.pileprep.json.pending
kp_absent "$w" $d1.pileprep.json $d1.bin.pileprep-tmp $d1.idx.pileprep-tmp
[[ -z $(ls "$kp" | grep "^$d2\." | grep -v '\.pileprep-lock$') ]] || bad "$w: something of 02: $(ls "$kp")"
check_final_names "$kp" "$w"
# 3. Shard 02's .bin published, its .idx not yet (the old .idx goes first, the .bin next, the .idx
# last): its .bin alone under its final name, whole; 01's pending record completed by this run.
w="killed between 02's .bin and .idx renames"
kill_held_at "$w" PILEPREP_FAULT_PAUSE_RENAME_TO "$kp/$d2.idx"
grep -q "^01.jsonl.zst: an interrupted run's pending record $kp/$d1.pileprep.json.pending: its outputs were published; it is their record now$" "$work/kp-err" &&
  grep -q "^01.jsonl.zst: outputs already complete and valid; skipped" "$work/kp-err" ||
  { bad "$w: 01's pending record not taken as its record"; cat "$work/kp-err"; }
kp_same "$w" $d1.bin; kp_same "$w" $d1.idx; kp_there "$w" $d1.pileprep.json
kp_absent "$w" $d1.pileprep.json.pending
kp_same "$w" $d2.bin; kp_same "$w" $d2.idx.pileprep-tmp $d2.idx
kp_there "$w" $d2.pileprep.json.pending
kp_absent "$w" $d2.idx $d2.pileprep.json $d2.bin.pileprep-tmp
check_final_names "$kp" "$w"
# The rerun removes 02's pending record (it names an .idx that never came) and makes 02 again.
"$PILEPREP" --url "$work/ksrc" --files 0-2 --output-dir "$kp" --threads 2 2>"$work/err" ||
  { bad "rerun after the held kills failed"; cat "$work/err"; }
grep -q "^02.jsonl.zst: an interrupted run's pending record $kp/$d2.pileprep.json.pending: its outputs were not published; removed$" "$work/err" &&
  [[ $(grep -c "already complete and valid; skipped" "$work/err") -eq 2 ]] ||
  { bad "rerun after the held kills: 02's pending record not removed, or 00 and 01 not skipped"; cat "$work/err"; }
check_rerun "$kp" "after the held kills"
check_rerun "$kp" "after the held kills"

# A SIGTERM that comes as the last shard is being published (held just before its record's rename)
# cancels nothing: the publish completes, every shard is done, and the run exits 0 saying so. It
# exited 143 saying "the rest (marked cancelled) were not made".
w="SIGTERM while the last shard's record is renamed"
late=$work/late
rm -rf "$late"; mkdir -p "$late"
start_held "$work/late-err" "$late" PILEPREP_FAULT_PAUSE_RENAME_TO "$late/$d2.pileprep.json"
grep -q "fault shim: paused" "$work/late-err" || { bad "$w: the run was never held"; cat "$work/late-err"; }
kill -TERM $pid 2>/dev/null
wait $pid; rc=$?
pid=
[[ $rc -eq 0 ]] || { bad "$w: exit $rc, not 0"; cat "$work/late-err"; }
grep -q "^pileprep: SIGTERM came too late to cancel any shard: nothing was cancelled$" "$work/late-err" &&
  ! grep -q "marked cancelled" "$work/late-err" || { bad "$w: not said so"; cat "$work/late-err"; }
grep -q '"exit_status": *0' "$late/pileprep-summary.json" "$late"/pileprep-summary*.json 2>/dev/null ||
  { bad "$w: the summary's exit status is not 0"; cat "$late"/pileprep-summary*.json; }
for f in $d0 $d1 $d2; do
  cmp -s "$work/kref/$f.bin" "$late/$f.bin" && cmp -s "$work/kref/$f.idx" "$late/$f.idx" ||
    bad "$w: $f not the reference's"
done

# The same for a SIGTERM that comes while the summary is written or its lock removed (held at the
# summary's rename, then at its lock's removal, the run's last step, that one under -q, which does
# not hold back the handler's line either): the run exits 0 and its last words say the signal came
# too late. The handler's "stopping" line was the log's last, as if the run had been stopped.
for held in pileprep-summary-rank0.json pileprep-summary-rank0.pileprep-lock; do
  w="SIGTERM while $held is written or removed"
  rm -rf "$late"; mkdir -p "$late"
  var=PILEPREP_FAULT_PAUSE_RENAME_TO quiet=
  [[ $held == *.pileprep-lock ]] && var=PILEPREP_FAULT_PAUSE_UNLINK quiet=-q
  start_held "$work/late-err" "$late" $var "$late/$held" $quiet
  grep -q "fault shim: paused" "$work/late-err" || { bad "$w: the run was never held"; cat "$work/late-err"; }
  kill -TERM $pid 2>/dev/null
  wait $pid; rc=$?
  pid=
  [[ $rc -eq 0 ]] || { bad "$w: exit $rc, not 0"; cat "$work/late-err"; }
  [[ $(tail -n 1 "$work/late-err") == "pileprep: SIGTERM came too late to cancel any shard: nothing was cancelled" ]] ||
    { bad "$w: the last line does not say the signal came too late"; cat "$work/late-err"; }
  ls "$late" | grep -q "pileprep-summary-rank0\.json\..*pileprep-tmp\|\.pileprep-lock$" &&
    bad "$w: a temporary or lock left: $(ls "$late")"
done

# A run killed while writing its summary leaves the summary's temporary (HOST.PID in its name); the next
# run removes this host's (it holds the summary lock, so none is live) and another host's once old,
# and keeps another host's fresh one (flock may not reach across nodes: that run may be writing it).
s="$work/k/pileprep-summary-rank0.json"
# Kept too: this host's whose PID is a live process (here the test's shell), and rank 1's (an hour old:
# not this rank's to remove).
r1="$work/k/pileprep-summary-rank1.json.old-node.9.pileprep-tmp"
touch "$s.$(uname -n).4194999.pileprep-tmp" "$s.other-node.7.pileprep-tmp" "$s.old-node.8.pileprep-tmp" \
  "$s.$(uname -n).$$.pileprep-tmp" "$r1"
touch -d '1 hour ago' "$s.old-node.8.pileprep-tmp" "$r1"
"$PILEPREP" --url "$url" --files 0-2 --output-dir "$work/k" --threads 2 -q 2>"$work/err" || { bad "run over stale summary temporaries failed"; cat "$work/err"; }
[[ -e "$s.$(uname -n).4194999.pileprep-tmp" ]] && bad "this host's stale summary temporary was left"
[[ -e "$s.old-node.8.pileprep-tmp" ]] && bad "another host's hour-old summary temporary was left"
[[ -e "$s.other-node.7.pileprep-tmp" ]] || bad "another host's fresh summary temporary was removed"
[[ -e "$s.$(uname -n).$$.pileprep-tmp" ]] || bad "a summary temporary of a live process was removed"
[[ -e "$r1" ]] || bad "rank 1's summary temporary was removed by rank 0"
rm -f "$s.other-node.7.pileprep-tmp" "$s.$(uname -n).$$.pileprep-tmp" "$r1"
# Where flock fails (a file system without locks) only age tells a temporary stale: this host's fresh
# one is kept, an hour-old one removed.
fresh="$s.$(uname -n).4194999.pileprep-tmp" aged="$s.$(uname -n).4194997.pileprep-tmp"
touch "$fresh" "$aged"
touch -d '1 hour ago' "$aged"
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" LD_PRELOAD=$SHIM PILEPREP_FAULT_FLOCK=1 \
  "$PILEPREP" --url "$url" --files 0-2 --output-dir "$work/k" --threads 2 -q 2>"$work/err" ||
  { bad "run without flock over summary temporaries failed"; cat "$work/err"; }
[[ -e $fresh ]] || bad "without flock, this host's fresh summary temporary was removed"
[[ -e $aged ]] && bad "without flock, this host's hour-old summary temporary was left"
rm -f "$fresh"
check_rerun "$work/k" "after stale summary temporaries"
# NFS's ESTALE from flock (the lock file removed by its holder as the flock went out) is a file
# replaced under us: the lock is taken on the file the path names now, not given up as unsupported.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" LD_PRELOAD=$SHIM PILEPREP_FAULT_FLOCK=estale \
  "$PILEPREP" --url "$url" --files 0-1 --output-dir "$work/estale" --threads 2 2>"$work/err" ||
  { bad "a run whose flock meets ESTALE failed"; cat "$work/err"; }
grep -q "running without" "$work/err" && { bad "ESTALE from flock: ran unlocked"; cat "$work/err"; }
cmp -s "$work/estale/my-gpt3_00_text_document.bin" "$work/k/my-gpt3_00_text_document.bin" ||
  bad "a run whose flock meets ESTALE: shard 00 differs"

# Another user's lock file on NFS (the shim: this user may only open it read-only, and NFS refuses
# flock on a read-only descriptor, EBADF): its job may hold it, so the shard is left alone, not made
# unlocked beside it; the other shard is made. Once the file is gone a rerun makes the shard.
# Runs shards 0-1 into $work/nfs with the shim's fault VARIABLE on another user's lock file of shard
# 00 ($foreign, left there): the shard is left alone (exit 1, the message names why), not made
# unlocked beside it; shard 01 is made. foreign_lock_left_alone WHAT VARIABLE MESSAGE
foreign="$work/nfs/my-gpt3_00.pileprep-lock"
foreign_lock_left_alone() {
  local what=$1
  rm -rf "$work/nfs"; mkdir -p "$work/nfs"
  echo "pid 4194999 on another-users-node" >"$foreign"
  env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" LD_PRELOAD="$SHIM" "$2=$foreign" \
    "$PILEPREP" --url "$url" --files 0-1 --output-dir "$work/nfs" --threads 2 -q 2>"$work/err"
  local rc=$?
  [[ $rc == 1 ]] || { bad "$what: exit $rc, not 1"; cat "$work/err"; }
  grep -qF "00.jsonl.zst: another pileprep process is making it ($3" "$work/err" ||
    { bad "$what: no message naming it"; cat "$work/err"; }
  grep -q "running without shard locks" "$work/err" && bad "$what: ran unlocked"
  [[ -e "$work/nfs/my-gpt3_00_text_document.bin" ]] && bad "$what: shard 00 made beside it"
  [[ -e "$work/nfs/my-gpt3_01_text_document.bin" ]] || bad "$what: shard 01 not made"
  [[ -e $foreign ]] || bad "$what: removed"
}
foreign_lock_left_alone "another user's lock file on NFS" PILEPREP_FAULT_FOREIGN_LOCK \
  "pid 4194999 on another-users-node, in a lock file this user cannot write"
rm -f "$foreign"
"$PILEPREP" --url "$url" --files 0-1 --output-dir "$work/nfs" --threads 2 -q 2>"$work/err" ||
  { bad "rerun once another user's lock file is gone failed"; cat "$work/err"; }
cmp -s "$work/nfs/my-gpt3_00_text_document.bin" "$work/k/my-gpt3_00_text_document.bin" ||
  bad "rerun once another user's lock file is gone: shard 00 differs"

# Another user's lock file that this user cannot even read (mode 0600, made under umask 077; the
# shim: every open of it fails with EACCES): as on NFS, its job may hold it, so the shard is left
# alone (exit 1), not made unlocked beside it. Then a symbolic link where a lock file goes (planted
# in a shared directory): not followed (the file it names is not truncated or written), the shard
# left alone.
foreign_lock_left_alone "an unreadable lock file of another user" PILEPREP_FAULT_UNREADABLE \
  "another user's job, in a lock file this user cannot open"
rm -f "$foreign"
echo "precious" >"$work/victim"
ln -s "$work/victim" "$foreign"
"$PILEPREP" --url "$url" --files 0 --output-dir "$work/nfs" --threads 2 -q 2>"$work/err"
rc=$?
[[ $rc == 1 ]] || { bad "a symbolic link as a lock file: exit $rc, not 1"; cat "$work/err"; }
grep -q "00.jsonl.zst: another pileprep process is making it (or so it seems: the lock file is a symbolic link" "$work/err" ||
  { bad "a symbolic link as a lock file: no message naming it"; cat "$work/err"; }
[[ $(cat "$work/victim") == precious ]] || bad "a symbolic link as a lock file: the file it names was written"
[[ -e "$work/nfs/my-gpt3_00_text_document.bin" ]] && bad "a symbolic link as a lock file: shard 00 made"
[[ -L $foreign ]] || bad "a symbolic link as a lock file: removed"
rm -f "$foreign" "$work/victim"

# The same with two shards downloading at once: SIGKILLs mid-way, a SIGTERM (exit 143, nothing half
# made under a final name), then a rerun at once: byte-identical, nothing stray.
for delay in 0.6 1.5; do
  "$PILEPREP" --url "$url" --files 0-2 --output-dir "$work/k2" --threads 2 --shards-at-once 2 -q >/dev/null 2>&1 &
  pid=$!
  sleep "$delay"
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null
  pid=
done
"$PILEPREP" --url "$url" --files 0-2 --output-dir "$work/k2" --threads 2 --shards-at-once 2 -q >/dev/null 2>&1 &
pid=$!
sleep 0.5
kill -TERM $pid 2>/dev/null
wait $pid
status=$?
pid=
[[ $status -eq 143 ]] || bad "SIGTERM with two shards at once: exit $status, want 143"
# 143 is also what a process killed by SIGTERM's default action gives: the summary shows that
# pileprep itself stopped, abandoning (cancelling) what was in progress.
grep -q '"exit_status": 143' "$work/k2/pileprep-summary-rank0.json" 2>/dev/null &&
  grep -q '"status": "cancelled"' "$work/k2/pileprep-summary-rank0.json" ||
  bad "SIGTERM with two shards at once: no summary of a cancelled run"
check_final_names "$work/k2" "two at once, after SIGTERM"
"$PILEPREP" --url "$url" --files 0-2 --output-dir "$work/k2" --threads 2 --shards-at-once 2 2>"$work/err" ||
  { bad "rerun with two shards at once failed"; cat "$work/err"; }
check_rerun "$work/k2" "two at once, after kills"
stop_server

[[ $fail -eq 0 ]] && echo "ok: nodes and resume"
exit $fail
