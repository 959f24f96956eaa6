#!/usr/bin/env bash
# `pileprep validate`, `inspect` and `merge` through the CLI: the golden dev shards (regenerated from
# data/samples; byte-identical to Megatron's, checked by the golden test) validate; corruptions exit 1
# with their kind; merge equals preprocessing the concatenation byte for byte.
set -uo pipefail
PILEPREP=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0

expect() {  # name want_rc want_output_substring -- command...
  local name=$1 want_rc=$2 want=$3; shift 4
  "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  if [[ $rc -ne $want_rc ]]; then
    echo "FAIL: $name: exit $rc, want $want_rc"; cat "$work/out" "$work/err"; fail=1; return
  fi
  if [[ -n "$want" ]] && ! grep -qF -- "$want" "$work/err" "$work/out"; then
    echo "FAIL: $name: output lacks: $want"; cat "$work/out" "$work/err"; fail=1; return
  fi
  echo "ok: $name"
}

g=$work/golden
"$PILEPREP" --url "$root/data/samples" --files 0-1 --output-dir "$g" -q || { echo "FAIL: shard job"; exit 1; }
p0=$g/my-gpt3_00_text_document

expect "golden pairs validate" 0 "my-gpt3_01_text_document: ok" -- "$PILEPREP" validate --expect-eod "$g"
expect "prefix form" 0 "ok (uint16, 2572 sequences, 2575 documents, 3489275 tokens)" -- "$PILEPREP" validate "$p0"
expect ".idx path form" 0 ": ok" -- "$PILEPREP" validate "$p0.idx"
expect "more threads than cores" 0 ": ok" -- "$PILEPREP" validate --threads $(( $(nproc) + 2 )) "$p0"
grep -q "TBB" "$work/err" && { echo "FAIL: TBB printed: $(cat "$work/err")"; fail=1; }
expect "json" 0 '"ok":true' -- "$PILEPREP" validate --json "$p0"
expect "index only" 0 "tokens not checked" -- "$PILEPREP" validate --index-only "$p0"
expect "--index-only leaves the final EOD unread" 2 "--expect-eod reads the .bin" -- \
  "$PILEPREP" validate --index-only --expect-eod "$p0"
expect "help" 0 "--expect-eod" -- "$PILEPREP" validate --help
expect "-- ends the flags: what follows is a dataset" 0 "my-gpt3_00_text_document: ok" -- \
  "$PILEPREP" validate --expect-eod -- "$p0"
# Even a dataset named --version: after "--" it is no flag, and the check runs.
mkdir -p "$work/vdir" && cp "$p0.bin" "$work/vdir/--version.bin" && cp "$p0.idx" "$work/vdir/--version.idx"
expect "-- then a dataset named --version validates it" 0 "--version: ok" -- \
  bash -c 'cd "$1/vdir" && "$2" validate --expect-eod -- --version' _ "$work" "$PILEPREP"
# One dash, as argparse: "-1x" is an unknown flag (not a negative number), "-my data" a name.
expect "validate: -1x is an unknown flag" 2 "unknown flag -1x" -- "$PILEPREP" validate -1x
expect "validate: a one-dash name with a space is a dataset's" 1 "-my data.idx" -- \
  "$PILEPREP" validate "-my data"
expect "--eod-id alone checks nothing: a usage error" 2 "--eod-id names the token --expect-eod looks for" -- \
  "$PILEPREP" validate --eod-id 0 "$p0"
expect "--eod-id past --vocab-size is a usage error" 2 "--eod-id 70000 is not below --vocab-size 50257" -- \
  "$PILEPREP" validate --expect-eod --eod-id 70000 "$p0"
expect "--eod-id with --expect-eod checks for it" 1 "ends with token 50256, not EOD 50255" -- \
  "$PILEPREP" validate --expect-eod --eod-id 50255 "$p0"
expect "validate's missing-EOD message gives its own advice" 1 "made with --append-eod (drop --expect-eod if that is intended)" -- \
  "$PILEPREP" validate --expect-eod --eod-id 50255 "$p0"
expect "no argument" 2 "at least one PREFIX" -- "$PILEPREP" validate
expect "missing dataset" 1 "nope.idx" -- "$PILEPREP" validate "$work/nope"

c=$work/corrupt
mkdir -p "$c"
cp "$p0.idx" "$c/long.idx"; cp "$p0.bin" "$c/long.bin"; printf '\x01\x00' >> "$c/long.bin"
expect "over-long .bin" 1 "2 extra bytes" -- "$PILEPREP" validate "$c/long"
expect "over-long .bin, json" 1 '"kind":"bin_size"' -- "$PILEPREP" validate --json "$c/long"
cp "$p0.idx" "$c/short.idx"; head -c 1000 "$p0.bin" > "$c/short.bin"
expect "truncated .bin" 1 "truncated" -- "$PILEPREP" validate "$c/short"
cp "$p0.bin" "$c/f7.bin"; { head -c 17 "$p0.idx"; printf '\x07'; tail -c +19 "$p0.idx"; } > "$c/f7.idx"
expect "float dtype code" 1 "byte 17: dtype code 7" -- "$PILEPREP" validate "$c/f7"
expect "a directory with a bad pair fails" 1 "[bin_size]" -- "$PILEPREP" validate "$c"
# A .bin cut short into a file of its full size (a preallocated or extended download) has the
# right size and reads as zeros: the hole is the violation, found without reading the .bin.
# (Where the file system shows holes to lseek, as pileprep looks for them: a file extended by
# truncate has one. Allocated blocks are no proof: 9p or NFS may count a hole that lseek never shows.)
cp "$p0.idx" "$c/holed.idx"; cp "$p0.bin" "$c/holed.bin"
size=$(stat -c %s "$p0.bin"); truncate -s 1048576 "$c/holed.bin"; truncate -s "$size" "$c/holed.bin"
first_hole=$(/usr/bin/python3 -c 'import os, sys; print(os.lseek(os.open(sys.argv[1], os.O_RDONLY), 0, os.SEEK_HOLE))' "$c/holed.bin")
if [[ $first_hole =~ ^[0-9]+$ && $first_hole -lt $size ]]; then
  expect "a .bin with a hole fails, naming where" 1 "holed.bin: byte 1048576: bytes 1048576..$((size - 1)) hold no data" -- \
    "$PILEPREP" validate "$c/holed"
  expect "the same with --index-only" 1 "[hole]" -- "$PILEPREP" validate --index-only "$c/holed"
  # A sparse copy of a file with runs of zero bytes has holes too: --allow-holes accepts them (and
  # this damaged .bin, its zeros valid tokens, then passes: what the hole check is for).
  expect "--allow-holes accepts a hole" 0 "holed: ok" -- "$PILEPREP" validate --allow-holes "$c/holed"
  # merge validates its inputs the same way, and takes the same switch.
  expect "merge refuses an input with a hole" 1 "merge --allow-holes takes such inputs" -- \
    "$PILEPREP" merge -q --output-prefix "$work/holed-merged" "$c/holed"
  [[ -e $work/holed-merged.idx ]] && { echo "FAIL: a refused merge published"; fail=1; }
  expect "merge --allow-holes takes it" 0 "" -- \
    "$PILEPREP" merge -q --allow-holes --output-prefix "$work/holed-merged" "$c/holed"
  cmp -s "$work/holed-merged.idx" "$p0.idx" || { echo "FAIL: merge --allow-holes: not the input's index"; fail=1; }
else
  echo "skip: this file system shows no holes"
fi
# The same .bin cut short with its zeros written out (a hole copied dense: cp --sparse=never, scp, a
# downloader that zero-fills its preallocation) has no hole to find: its blocks of 4096 tokens 0
# are the violation, and --allow-holes accepts them too.
cp "$p0.idx" "$c/dense.idx"; cp "$p0.bin" "$c/dense.bin"
/usr/bin/python3 -c 'import os, sys; f = open(sys.argv[1], "r+b"); f.seek(1048576); f.write(bytes(os.path.getsize(sys.argv[1]) - 1048576))' "$c/dense.bin"
expect "a zero-filled .bin fails, naming where" 1 "dense.bin: byte 1048576: bytes 1048576..1056767" -- \
  "$PILEPREP" validate "$c/dense"
expect "its violation kind" 1 "[zero_fill:" -- "$PILEPREP" validate "$c/dense"
expect "--allow-holes accepts zero runs" 0 "dense: ok" -- "$PILEPREP" validate --allow-holes "$c/dense"
# A name that is both a directory and a prefix: the pair (what a training job's --data-path reads)
# is checked as well as the directory's pairs; a trailing '/' or '.idx' picks one.
mkdir -p "$work/amb"; cp "$p0.idx" "$p0.bin" "$work/amb/"; cp "$c/short.idx" "$work/amb.idx"; cp "$c/short.bin" "$work/amb.bin"
expect "a directory that is also a prefix: the pair is checked" 1 "$work/amb.bin: the .bin is 1000 bytes" -- \
  "$PILEPREP" validate "$work/amb"
grep -q "my-gpt3_00_text_document: ok" "$work/out" || { echo "FAIL: a directory that is also a prefix: its pairs unchecked"; fail=1; }
expect "the directory, named with a /" 0 "my-gpt3_00_text_document: ok" -- "$PILEPREP" validate "$work/amb/"
grep -q "amb: " "$work/out" && { echo "FAIL: the directory named with a / checked the pair"; fail=1; }
expect "the pair, named by its .idx" 1 "truncated" -- "$PILEPREP" validate "$work/amb.idx"
# A lone .bin beside a directory of its name is half a dataset (a publish killed between its
# renames) or another file: named as a lone half, the directory's pairs checked all the same;
# with a trailing '/' the directory alone.
mkdir -p "$work/stray"; cp "$p0.idx" "$p0.bin" "$work/stray/"; echo "not a dataset" > "$work/stray.bin"
expect "a directory with a lone .bin beside it" 1 "$work/stray.bin has no stray.idx beside it (\`validate $work/stray/\` checks" -- \
  "$PILEPREP" validate "$work/stray"
grep -q "my-gpt3_00_text_document: ok" "$work/out" || { echo "FAIL: a lone .bin beside a directory hid its pairs"; fail=1; }
expect "the directory alone, named with a /" 0 "my-gpt3_00_text_document: ok" -- "$PILEPREP" validate "$work/stray/"
# A prefix that itself ends in .bin (corpus.bin.idx, corpus.bin.bin) is that prefix, unless the
# shorter prefix's .idx is there: then corpus.bin names the pair corpus (its .bin missing here).
mkdir -p "$work/dotbin"; cp "$p0.idx" "$work/dotbin/corpus.bin.idx"; cp "$p0.bin" "$work/dotbin/corpus.bin.bin"
expect "a prefix ending in .bin" 0 "corpus.bin: ok" -- "$PILEPREP" validate "$work/dotbin/corpus.bin"
expect "inspect of a prefix ending in .bin" 0 "2575" -- "$PILEPREP" inspect "$work/dotbin/corpus.bin"
cp "$p0.idx" "$work/dotbin/corpus.idx"
expect "x.bin beside x.idx names the pair x" 1 "corpus.bin: cannot open" -- "$PILEPREP" validate "$work/dotbin/corpus.bin"
# A file without its other half fails, and every pair beside it is still checked and reported.
mkdir -p "$work/half"
cp "$p0.idx" "$p0.bin" "$work/half/"; cp "$p0.bin" "$work/half/lone.bin"
expect "a directory with a lone .bin fails, naming it" 1 "$work/half/lone.bin has no lone.idx beside it" -- \
  "$PILEPREP" validate "$work/half"
grep -q "my-gpt3_00_text_document: ok" "$work/out" || { echo "FAIL: a lone .bin hid the pair beside it"; fail=1; }
expect "the same, as JSON: one object per dataset" 1 '"ok":true' -- "$PILEPREP" validate --json "$work/half"
grep -q '"prefix":"'"$work/half/lone"'"' "$work/out" || { echo "FAIL: json names no lone prefix"; cat "$work/out"; fail=1; }

expect "inspect" 0 "sequences:  2572" -- "$PILEPREP" inspect "$p0"
expect "inspect histogram" 0 "length histogram" -- "$PILEPREP" inspect "$p0"
expect "inspect --doc" 0 "50256" -- "$PILEPREP" inspect "$p0" --doc 1
expect "inspect --doc --decode" 0 "<|endoftext|>" -- "$PILEPREP" inspect "$p0" --doc 1 --decode
expect "inspect to a full stdout exits 1" 1 "stdout: " -- sh -c '"$0" inspect "$1" --doc 1 >/dev/full' "$PILEPREP" "$p0"
expect "validate --vocab-size past 2^31 is refused" 2 "--vocab-size 4294967296: expected a whole number from 1 to 2147483648" -- \
  "$PILEPREP" validate --vocab-size 4294967296 "$p0"
expect "validate --json to a full stdout exits 1" 1 "stdout: the report was not written in full" -- \
  sh -c '"$0" validate --json "$1" >/dev/full' "$PILEPREP" "$p0"
expect "inspect --vocab-file alone" 2 "go together" -- "$PILEPREP" inspect "$p0" --doc 1 --decode --vocab-file x.json
expect "inspect --doc out of range" 1 "document 99999 does not exist" -- "$PILEPREP" inspect "$p0" --doc 99999
expect "inspect broken index" 1 "dtype code 7" -- "$PILEPREP" inspect "$c/f7"
# An id past the vocabulary: --decode stops there and says so (it used to leave the id out).
mkdir -p "$work/unk" && cp "$p0.idx" "$work/unk/u.idx" && cp "$p0.bin" "$work/unk/u.bin" &&
  printf '\xff\xff' | dd of="$work/unk/u.bin" bs=1 seek=4 conv=notrunc status=none
expect "inspect --decode an id past the vocabulary" 1 "token 2 is id 65535, which the vocabulary does not have" -- \
  "$PILEPREP" inspect "$work/unk/u" --doc 0 --decode
"$PILEPREP" inspect "$p0" --doc 0 >"$work/ids"
# The longest document (over 65,536 tokens: printed in several chunks) prints every id, one space
# apart. Its index and length come from the .idx's arrays (header: S at byte 18, D+1 at byte 26).
S=$(od -An -v -t u8 -j 18 -N 8 "$p0.idx" | tr -d ' ')
D1=$(od -An -v -t u8 -j 26 -N 8 "$p0.idx" | tr -d ' ')
read -r longest longest_len < <( { od -An -v -t d4 -w4 -j 34 -N $((4 * S)) "$p0.idx"; echo SPLIT;
  od -An -v -t d8 -w8 -j $((34 + 12 * S)) -N $((8 * D1)) "$p0.idx"; } |
  awk '/SPLIT/ {part = 1; next} part == 0 {len[n++] = $1; next}
       {idx[m++] = $1} END {for (d = 0; d + 1 < m; ++d) {t = 0; for (i = idx[d]; i < idx[d + 1]; ++i) t += len[i];
       if (t > best) {best = t; bd = d}} print bd, best}')
"$PILEPREP" inspect "$p0" --doc "$longest" >"$work/long-ids"
if [[ $longest_len -gt 65536 && $(wc -w <"$work/long-ids") -eq $longest_len && $(wc -l <"$work/long-ids") -eq 1 ]] &&
   ! grep -q '  \|^ \| $' "$work/long-ids"; then
  echo "ok: inspect --doc prints every id of a $longest_len-token document"
else
  echo "FAIL: inspect --doc $longest: $(wc -w <"$work/long-ids") ids on $(wc -l <"$work/long-ids") line(s), want $longest_len on one"; fail=1
fi
expect "inspect --doc prints the ids of a doctored .bin" 0 "$(cut -d' ' -f1-2 "$work/ids") 65535 $(cut -d' ' -f4-5 "$work/ids")" -- \
  "$PILEPREP" inspect "$work/unk/u" --doc 0
# An int32 dataset's ids are signed: a corrupt -1 prints as -1 (as validate reports it), not 4294967295.
cp "$root/tests/data/format/hand_int32.idx" "$work/unk/i32.idx" && cp "$root/tests/data/format/hand_int32.bin" "$work/unk/i32.bin" &&
  printf '\xff\xff\xff\xff' | dd of="$work/unk/i32.bin" bs=1 seek=0 conv=notrunc status=none
expect "inspect --doc prints an int32 dataset's ids signed" 0 "-1 2147483647 0" -- "$PILEPREP" inspect "$work/unk/i32" --doc 0
# A document that is not there: the error alone, no empty line of ids on stdout.
for decode in "" --decode; do
  "$PILEPREP" inspect "$p0" --doc 99999 $decode >"$work/none" 2>/dev/null
  [[ ! -s "$work/none" ]] && echo "ok: inspect --doc${decode:+ $decode} of a missing document prints nothing on stdout" \
    || { echo "FAIL: inspect --doc 99999${decode:+ $decode} printed $(wc -c <"$work/none") bytes on stdout"; fail=1; }
done

m=$work/merge
expect "merge --input-dir" 0 "merged 2 datasets" -- "$PILEPREP" merge --output-prefix "$m/dir" --input-dir "$g"
# A second --input-dir would leave the first one's datasets out of an output that looks complete.
expect "merge refuses a second --input-dir" 2 "merge takes one --input-dir DIR (given 2 times)" -- \
  "$PILEPREP" merge --output-prefix "$m/twice" --input-dir "$g" --input-dir "$g"
[[ -e "$m/twice.bin" ]] && { echo "FAIL: a refused merge wrote $m/twice.bin"; fail=1; }
expect "merge prefixes" 0 "" -- "$PILEPREP" merge --output-prefix "$m/list" "$p0" "$g/my-gpt3_01_text_document" -q
{ zstd -q -d -c "$root/data/samples/00.jsonl.zst"; zstd -q -d -c "$root/data/samples/01.jsonl.zst"; } > "$work/cat.jsonl"
"$PILEPREP" preprocess --input "$work/cat.jsonl" --output-prefix "$m/cat" --append-eod -q
for f in dir list; do
  for ext in bin idx; do
    if cmp -s "$m/$f.$ext" "$m/cat_text_document.$ext"; then
      echo "ok: merge ($f) .$ext equals preprocessing the concatenation"
    else
      echo "FAIL: merge ($f) .$ext differs from preprocessing the concatenation"; fail=1
    fi
  done
done
expect "merged validates" 0 ": ok" -- "$PILEPREP" validate --expect-eod "$m/dir"
expect "merge refuses a broken input" 1 "not sound" -- "$PILEPREP" merge --output-prefix "$m/bad" "$p0" "$c/long"
[[ -e "$m/bad.bin" ]] && { echo "FAIL: a failed merge published"; fail=1; }

# A shard whose files are dangling symlinks (storage not mounted) is not left out of a directory's
# listing: validate and merge --input-dir fail naming it (merge published 2 of 3 and validate
# passed before).
dl=$work/dangling; mkdir -p "$dl"
cp "$p0.idx" "$dl/a.idx"; cp "$p0.bin" "$dl/a.bin"; cp "$p0.idx" "$dl/c.idx"; cp "$p0.bin" "$dl/c.bin"
ln -s "$work/unmounted/b.idx" "$dl/b.idx"; ln -s "$work/unmounted/b.bin" "$dl/b.bin"
# A directory named like a dataset's half is skipped, as Megatron's merge_datasets.py skips it.
mkdir -p "$work/withdir/sub.bin"; cp "$p0.idx" "$p0.bin" "$work/withdir/"
expect "validate DIR skips a directory named *.bin" 0 "my-gpt3_00_text_document: ok" -- \
  "$PILEPREP" validate "$work/withdir"
expect "validate DIR fails a dangling pair" 1 "$dl/b.idx: cannot open: No such file or directory" -- \
  "$PILEPREP" validate "$dl"
expect "merge --input-dir fails a dangling pair" 1 "$dl/b.idx: cannot open: No such file or directory" -- \
  "$PILEPREP" merge --output-prefix "$m/dangling" --input-dir "$dl"
[[ -e "$m/dangling.bin" ]] && { echo "FAIL: a merge without a dangling shard published"; fail=1; }
# A FIFO named like a dataset's half is refused at once (validate and inspect waited for a writer
# forever).
ff=$work/fifo; mkdir -p "$ff"; mkfifo "$ff/f.idx"; cp "$p0.bin" "$ff/f.bin"
expect "validate refuses a FIFO" 1 "$ff/f.idx: not a regular file" -- timeout 60 "$PILEPREP" validate "$ff/f"
expect "inspect refuses a FIFO" 1 "$ff/f.idx: not a regular file" -- timeout 60 "$PILEPREP" inspect "$ff/f"
expect "validate DIR refuses a FIFO" 1 "$ff/f.idx: not a regular file" -- timeout 60 "$PILEPREP" validate "$ff"
# Each input merged once: a glob names each pair twice, as its .bin and its .idx, which is one input
# (it merged every dataset twice); a prefix given twice, or the same files by another path, is a
# usage error (Megatron's merge takes each pair of a directory once).
mkdir -p "$m/glob"
cp "$p0".bin "$p0".idx "$g/my-gpt3_01_text_document".bin "$g/my-gpt3_01_text_document".idx "$m/glob/"
expect "merge of a glob: each pair once" 0 "merged 2 datasets" -- \
  "$PILEPREP" merge --output-prefix "$m/globbed" "$m"/glob/*
cmp -s "$m/globbed.bin" "$m/dir.bin" && cmp -s "$m/globbed.idx" "$m/dir.idx" \
  && echo "ok: merge of a glob equals merge --input-dir" \
  || { echo "FAIL: merge of a glob differs from merge --input-dir"; fail=1; }
# The output named as an input, by its prefix or by another path to its files: a usage error too.
expect "merge refuses an output that is also an input" 2 "is also an input" -- \
  "$PILEPREP" merge --output-prefix "$p0" "$p0" "$g/my-gpt3_01_text_document"
ln -sf "$p0.idx" "$m/alias.idx"
ln -sf "$p0.bin" "$m/alias.bin"
expect "merge refuses an output that is an input by another path" 2 "is also an input" -- \
  "$PILEPREP" merge --output-prefix "$m/alias" "$g/my-gpt3_01_text_document" "$p0"
rm -f "$m/alias.idx" "$m/alias.bin"
expect "merge refuses a prefix given twice" 2 "each input is merged once" -- \
  "$PILEPREP" merge --output-prefix "$m/twice" "$p0" "$g/my-gpt3_01_text_document" "$p0"
expect "merge refuses the same files by another path" 2 "by another path" -- \
  "$PILEPREP" merge --output-prefix "$m/twice" "$m/glob/my-gpt3_00_text_document" \
  "$m/glob/../glob/my-gpt3_00_text_document"
expect "merge refuses one half given twice by two paths" 2 "by another path" -- \
  "$PILEPREP" merge --output-prefix "$m/twice" "$m/glob/my-gpt3_00_text_document.idx" \
  "$m/glob/../glob/my-gpt3_00_text_document.idx"
[[ -e "$m/twice.bin" ]] && { echo "FAIL: a refused merge published"; fail=1; }
# The two halves of one pair by two spellings are one input, as a glob's are.
expect "merge of a pair's halves by two paths: one input" 0 "merged 1 dataset (" -- \
  "$PILEPREP" merge --output-prefix "$m/halves" "$m/glob/my-gpt3_00_text_document.idx" \
  "$m/glob/../glob/my-gpt3_00_text_document.bin"
cmp -s "$m/halves.bin" "$p0.bin" && cmp -s "$m/halves.idx" "$p0.idx" \
  && echo "ok: a pair's halves by two paths merge to the pair" \
  || { echo "FAIL: a pair's halves by two paths did not merge to the pair"; fail=1; }
# Two datasets whose equal .idx files a deduplicating tool hard-linked, their .bin files different:
# one's .idx and the other's .bin are two inputs, not the halves of one.
mkdir -p "$m/linked"
ln "$m/glob/my-gpt3_00_text_document.idx" "$m/linked/x.idx"
cp "$p0.bin" "$m/linked/x.bin"; printf '\x01\x00' | dd of="$m/linked/x.bin" bs=1 seek=2 conv=notrunc 2>/dev/null
expect "merge of hard-linked .idx files with other .bin files: two inputs" 0 "merged 2 datasets (" -- \
  "$PILEPREP" merge --output-prefix "$m/linked-merged" "$m/glob/my-gpt3_00_text_document.idx" \
  "$m/linked/x.bin"
# A missing input fails before the output's directory is made: a failed merge leaves nothing.
expect "merge of a missing input" 1 "nothere.idx: cannot open: No such file or directory" -- \
  "$PILEPREP" merge --output-prefix "$m/newdir/x" "$m/nothere"
[[ -e "$m/newdir" ]] && { echo "FAIL: a merge of a missing input made its output directory"; fail=1; }
expect "merge needs inputs" 2 "merge needs input PREFIXes or --input-dir DIR (see --help)" -- "$PILEPREP" merge --output-prefix "$m/x"
expect "merge takes inputs one way" 2 "merge takes --input-dir DIR or --input DIR (the same flag), not both" -- \
  "$PILEPREP" merge --output-prefix "$m/x" --input-dir "$m" --input "$m"
# A refused merge leaves a shard job's record beside the output as it was (it is removed only
# when the merge is complete, before it is published).
echo '{"pileprep_version": "x"}' >"$m/bad.pileprep.json"
expect "merge refuses a broken input, record kept" 1 "not sound" -- "$PILEPREP" merge --output-prefix "$m/bad" "$p0" "$c/long"
[[ -e "$m/bad.pileprep.json" ]] || { echo "FAIL: a refused merge removed the output's record"; fail=1; }
rm -f "$m/bad.pileprep.json"
# Two merges into one output at once: the second is refused, naming the lock.
# The lock is held until this script lets it go (a fixed sleep could end before the merge looks).
flock "$m/list.pileprep-lock" -c "touch '$m/held'; while [ -e '$m/held' ]; do sleep 0.05; done" &
for _ in $(seq 200); do [[ -e $m/held ]] && break; sleep 0.05; done
expect "a merge into an output another merge holds" 1 "another pileprep process is writing it" -- \
  "$PILEPREP" merge --output-prefix "$m/list" "$p0" -q
rm -f "$m/held"
wait
rm -f "$m/list.pileprep-lock"
# Without validation, lengths that do not cover their .bin (two stray bytes) are still refused:
# every later input would be shifted.
mkdir -p "$work/stray" && cp "$p0.idx" "$work/stray/s.idx" && cp "$p0.bin" "$work/stray/s.bin" &&
  printf 'xx' >>"$work/stray/s.bin"
expect "merge --no-validate refuses lengths that do not cover the .bin" 1 "the pair does not belong together" -- \
  "$PILEPREP" merge --no-validate --output-prefix "$m/stray" "$work/stray/s" "$p0"
[[ -e "$m/stray.bin" ]] && { echo "FAIL: a refused --no-validate merge published"; fail=1; }
# A directory named as a pair's other half: named as a directory, not as missing (DIR mode skips
# directories when listing, as merge_datasets.py does).
mkdir -p "$work/dirbin/a.bin" && cp "$p0.idx" "$work/dirbin/a.idx"
expect "validate DIR: a .bin that is a directory is named so" 1 "a.bin: not a regular file (a directory)" -- \
  "$PILEPREP" validate "$work/dirbin"
rm -rf "$work/dirbin"
# SIGBUS while validate reads (a .bin truncated under its mapping): exit 135, and the message says
# there is no verdict, not what a writing command leaves behind ("nothing was published"). The
# signal is sent by hand, as a truncation at the right moment would be a race; the dataset is an
# 8 GiB sparse .bin, so validate is still reading. (Not in sanitizer builds: their runtimes
# handle SIGBUS themselves.)
if [[ -z ${PILEPREP_SANITIZER:-} ]] && ! grep -q '__[at]san_init' < <(nm "$PILEPREP" 2>/dev/null); then
  mkdir -p "$work/bus"
  /usr/bin/python3 - "$work/bus/big" <<'PY'
import struct, sys
n, length = 4, 1 << 30  # 4 sequences of 2^30 uint16 tokens
idx = b"MMIDIDX\0\0" + struct.pack("<QBQQ", 1, 8, n, n + 1)
idx += struct.pack(f"<{n}i", *[length] * n) + struct.pack(f"<{n}q", *[2 * length * i for i in range(n)])
idx += struct.pack(f"<{n + 1}q", *range(n + 1))
open(sys.argv[1] + ".idx", "wb").write(idx)
with open(sys.argv[1] + ".bin", "wb") as f:
    f.truncate(2 * length * n)
PY
  # (No core file from the signal's default action.)
  (ulimit -c 0; exec "$PILEPREP" validate --allow-holes --threads 1 "$work/bus/big") >"$work/out" 2>"$work/err" &
  pid=$!
  # Sent once the .bin is mapped: validate is past its set-up then, reading.
  for _ in $(seq 1 400); do grep -q "big.bin" "/proc/$pid/maps" 2>/dev/null && break; sleep 0.05; done
  kill -BUS $pid
  wait $pid
  rc=$?
  if [[ $rc -eq 135 ]] && grep -qF "no verdict" "$work/err" && ! grep -qF "published" "$work/err"; then
    echo "ok: SIGBUS during validate: exit 135, no verdict"
  else
    echo "FAIL: SIGBUS during validate: exit $rc: $(cat "$work/err")"; fail=1
  fi
  rm -rf "$work/bus"
fi
exit $fail
