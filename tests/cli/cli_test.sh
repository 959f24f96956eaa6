#!/usr/bin/env bash
# The CLI's contract: exact messages, exit codes, and the missing-shard behaviour.
set -uo pipefail
PILEPREP=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0

expect() {  # name want_rc want_stderr_substring -- command...
  local name=$1 want_rc=$2 want=$3; shift 4
  "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  if [[ $rc -ne $want_rc ]]; then
    echo "FAIL: $name: exit $rc, want $want_rc"; cat "$work/err"; fail=1; return
  fi
  if [[ -n "$want" ]] && ! grep -qF -- "$want" "$work/err" "$work/out"; then
    echo "FAIL: $name: output lacks: $want"; cat "$work/out" "$work/err"; fail=1; return
  fi
  echo "ok: $name"
}

expect "version" 0 "pileprep 0." -- "$PILEPREP" --version
# --version after a command, or after other flags, prints the version too (it was an unknown flag).
for cmd in validate inspect merge preprocess "--files 0 --dry-run"; do
  # shellcheck disable=SC2086
  expect "$cmd --version prints the version" 0 "pileprep 0." -- "$PILEPREP" $cmd --version
done
expect "help lists the shard job" 0 "Usage: pileprep [--url SRC]" -- "$PILEPREP" --help
for flag in url files output-dir output-prefix threads vocab-file merge-file max-bad-records \
            zstd-window-log-max endoftext-as-text quiet; do
  expect "help explains --$flag" 0 "  --$flag" -- "$PILEPREP" --help
done
expect "help lists exit codes" 0 "Exit status:" -- "$PILEPREP" --help
expect "help: a summary not written exits 1" 0 "or the summary JSON could not be written" -- \
  "$PILEPREP" --help
expect "help: a local --url of no directory exits 2" 0 "a local --url that is no directory" -- \
  "$PILEPREP" --help
expect "help: an unusable --keep-downloads exits 2" 0 "a --keep-downloads directory unusable" -- \
  "$PILEPREP" --help
# preprocess's exit codes are its own: a held lock is 1, and it has no records or --force.
expect "preprocess help: a held lock exits 1" 0 "another pileprep process is writing the output" -- \
  "$PILEPREP" preprocess --help
for dry in "" --dry-run; do
  expect "an empty --output-dir is a usage error ${dry:-(the run)}" 2 "--output-dir is empty" -- \
    "$PILEPREP" --url "$root/data/samples" --files 0 --output-dir "" $dry
done
# A mistyped command is named as one, with the command meant, before its flags are read as the shard job's.
expect "a mistyped command is named" 2 "unknown command 'prepro' (did you mean 'preprocess'?)" -- \
  "$PILEPREP" prepro --input x
expect "a misspelt command is named" 2 "unknown command 'valdate' (did you mean 'validate'?)" -- \
  "$PILEPREP" valdate x
expect "an unknown command lists the commands" 2 "unknown command 'foo'; the commands: inspect, merge" -- \
  "$PILEPREP" foo
expect "a URL as the first argument points to --url, its credentials left out" 2 \
  "'https://host/pile/' is not a command: where the shards are goes in --url" -- \
  "$PILEPREP" "https://user:secret@host/pile/?sig=token"
grep -q 'secret\|token' "$work/err" && { echo "FAIL: a URL's credentials were printed"; fail=1; }
# A short flag the command lacks is named as typed (inspect has no --quiet: "unknown flag --quiet").
expect "inspect -q is named as typed" 2 "unknown flag -q (see --help)" -- "$PILEPREP" inspect -q x
# A set-up error found loading the tokenizer leaves no empty output directory behind.
expect "a tokenizer directory without its files is a set-up error" 2 "" -- \
  env PILEPREP_TOKENIZER_DIR="$work/no-such-tokenizer" "$PILEPREP" --url "$root/data/samples" --files 0 \
  --output-dir "$work/not-made"
[[ -e "$work/not-made" ]] && { echo "FAIL: a tokenizer set-up error left the output directory"; fail=1; }
expect "preprocess: a vocabulary that does not load is a set-up error" 2 "vocabulary is not a JSON object" -- \
  "$PILEPREP" preprocess --input "$root/data/samples/00.jsonl.zst" --output-prefix "$work/not-made/sub/x" \
  --vocab-file "$root/README.md" --merge-file "$root/README.md"
[[ -e "$work/not-made" ]] && { echo "FAIL: preprocess: a tokenizer set-up error left the output directory"; fail=1; }
# An input that cannot be opened (missing, a directory, a file with a slash after it, a symlink
# loop) fails (exit 1, its row in the summary) before the output directory is made.
mkdir -p "$work/in-dir" && echo '{"text": "a"}' >"$work/in-file.jsonl"
ln -sfn "$work/loop-b" "$work/loop-a" && ln -sfn "$work/loop-a" "$work/loop-b"
for bad in "no-such.jsonl|no such file|no-such.jsonl" "in-dir|is a directory, not a file|in-dir" \
           "in-file.jsonl/|cannot open: Not a directory|$work/in-file.jsonl/" \
           "loop-a|cannot open: Too many levels of symbolic links|loop-a"; do
  IFS='|' read -r name why row <<<"$bad"
  expect "preprocess: an input that cannot be opened ($name) fails by name" 1 "$work/$name: $why" -- \
    "$PILEPREP" preprocess --input "$work/$name" --output-prefix "$work/not-made/sub/x"
  grep -qF "$row " "$work/err" && grep -q " FAILED " "$work/err" ||
    { echo "FAIL: preprocess: no FAILED row named $row for $name"; cat "$work/err"; fail=1; }
  [[ -e "$work/not-made" ]] && { echo "FAIL: preprocess: input $name left the output directory"; fail=1; }
done
# A file of CR-only line ends (old Mac) is one line, one bad record: the error says why.
printf '{"text":"a"}\r{"text":"b"}\r' >"$work/cr-only.jsonl"
expect "a file of CR-only line ends is named as one line" 1 "if its lines end in CR alone: lines end at LF" -- \
  "$PILEPREP" preprocess --input "$work/cr-only.jsonl" --output-prefix "$work/cr-only"
# A dry run's plan over far more nodes than files: the ranks without a file are one line per run.
"$PILEPREP" --url "$root/data/samples" --files 0-1 --nodes 1000000 --rank 5 --dry-run >"$work/out" 2>"$work/err"
if [[ $? -eq 0 && $(wc -l <"$work/out") -lt 20 ]] && grep -q "ranks 6\.\.499998 of 1000000: (none)" "$work/out" \
   && grep -q "rank 5 of 1000000: (none)   <- this process" "$work/out"; then
  echo "ok: a dry run over 1000000 nodes prints the ranks without a file as runs"
else echo "FAIL: a dry run over 1000000 nodes: $(head -c 600 "$work/out")"; fail=1; fi
# Empty path values (a script's unset variable) are usage errors, not the default quietly.
expect "an empty --vocab-file is a usage error" 2 "--vocab-file is empty" -- \
  "$PILEPREP" preprocess --input "$work/cr-only.jsonl" --output-prefix "$work/empty-vocab" --vocab-file= --merge-file=
expect "an empty --keep-downloads is a usage error" 2 "--keep-downloads is empty" -- \
  "$PILEPREP" --url "$root/data/samples" --files 0 --output-dir "$work/empty-keep" --keep-downloads= --dry-run
# A --keep-downloads that cannot be made leaves no empty --output-dir behind either (a URL, as a local
# --url keeps nothing; port 9, discard, is never asked: the set-up fails first).
touch "$work/a-file"
expect "a --keep-downloads under a file is a usage error" 2 "--keep-downloads" -- \
  "$PILEPREP" --url http://127.0.0.1:9/ --files 0 --output-dir "$work/not-made2" --keep-downloads "$work/a-file/sub"
[[ -e "$work/not-made2" ]] && { echo "FAIL: a --keep-downloads set-up error left the output directory"; fail=1; }
# More shards at once than threads: the run takes as many as it has threads, and says so.
expect "--shards-at-once above the threads is capped, saying so" 0 \
  "--shards-at-once 4 is more than the 1 thread: at most 1 at once" -- \
  "$PILEPREP" --url "$root/data/samples" --files 0 --output-dir "$work/capped" --threads 1 --shards-at-once 4
rm -rf "$work/capped"
# With a local --url there is nothing to keep: said, the directory not made, the shards made as without it.
expect "a local --url says --keep-downloads is not used" 0 "--keep-downloads $work/kept is not used" -- \
  "$PILEPREP" --url "$root/data/samples" --files 0 --output-dir "$work/local-keep" --keep-downloads "$work/kept"
[[ -e "$work/kept" ]] && { echo "FAIL: a local --url made the --keep-downloads directory"; fail=1; }
[[ -s "$work/local-keep/my-gpt3_00_text_document.bin" ]] || { echo "FAIL: a local --url with --keep-downloads made no .bin"; fail=1; }
rm -rf "$work/local-keep"
expect "help of no such command is a usage error" 2 "help: no command 'bogus'" -- "$PILEPREP" help bogus
expect "help of a mistyped command names the one meant" 2 "help: no command 'prepro'; did you mean 'preprocess'?" -- \
  "$PILEPREP" help prepro
expect "help --help is the shard job's help" 0 "Usage: pileprep [--url SRC]" -- "$PILEPREP" help --help
# Help, a version or a --dry-run plan that does not reach stdout (a full disk) is no success.
for args in "--help" "--version" "merge --help" "--url $root/data/samples --files 0 --dry-run"; do
  # shellcheck disable=SC2086
  "$PILEPREP" $args >/dev/full 2>"$work/err"
  rc=$?
  if [[ $rc -eq 1 ]] && grep -q "stdout: not written in full" "$work/err"; then echo "ok: $args to a full stdout exits 1"
  else echo "FAIL: $args to a full stdout: exit $rc"; cat "$work/err"; fail=1; fi
done
if "$PILEPREP" preprocess --help | grep -qE -- "--remake-other-settings|--force|summary JSON"; then
  echo "FAIL: preprocess help gives the shard job's exit codes"; fail=1
else
  echo "ok: preprocess help gives its own exit codes"
fi
for flag in input output-prefix json-keys append-eod workers tokenizer-type vocab-file merge-file; do
  expect "preprocess help explains --$flag" 0 "  --$flag" -- "$PILEPREP" preprocess --help
done
expect "unknown flag is a usage error" 2 "pileprep: error: unknown flag --bogus (see --help)" -- \
  "$PILEPREP" --bogus
expect "bad --files is a usage error" 2 \
  'pileprep: error: --files: cannot read "x" in "1,x"; use numbers 0-9999 and inclusive ranges, e.g. 0-29 or 0,3,5-7' -- \
  "$PILEPREP" --files 1,x --url "$root/data/samples"
expect "reversed range is a usage error" 2 'the range "5-3" runs backwards; write 3-5' -- "$PILEPREP" --files 5-3
# The default source has shards 00-29 alone: 30 would be a 404 hours into the job (a dry run asks no
# server); another --url may have it.
expect "a shard past 29 at the default --url" 2 "shard 30 is not in The Pile at the default --url" -- \
  "$PILEPREP" --files 28-30 --dry-run
# The default named again, without its last '/' or with a query, is the same source.
for spelled in "https://huggingface.co/datasets/monology/pile-uncopyrighted/resolve/main/train" \
               "https://huggingface.co/datasets/monology/pile-uncopyrighted/resolve/main/train/?download=true" \
               "HTTP://HuggingFace.co/datasets/monology/pile-uncopyrighted/resolve/main/train/"; do
  expect "a shard past 29 at the default --url spelled $spelled" 2 \
    "shard 30 is not in The Pile at the default --url" -- "$PILEPREP" --files 28-30 --url "$spelled" --dry-run
done
expect "a shard past 29 at another --url" 0 "" -- "$PILEPREP" --files 28-30 --url http://127.0.0.1:9/ \
  --output-dir "$work/past29" --dry-run
# A CA bundle that cannot be read is the run's set-up (it failed each shard in turn, exit 1) where
# libcurl reads it (https, verifying); a FIFO is refused without waiting for a writer.
expect "a missing --ca-file is a set-up error" 2 "--ca-file $work/no-such.pem: no such file" -- \
  "$PILEPREP" --files 1-3 --url https://127.0.0.1:9/ --ca-file "$work/no-such.pem" \
  --output-dir "$work/cafile" --dry-run
expect "an empty --ca-file= (an unset \$CA) is a usage error" 2 "--ca-file is empty: name a PEM file" -- \
  "$PILEPREP" --files 1-3 --url https://127.0.0.1:9/ --ca-file= --output-dir "$work/cafile" --dry-run
expect "an empty --output-prefix= is named as empty" 2 "--output-prefix is empty: name the datasets' prefix, or leave the flag out (my-gpt3)" -- \
  "$PILEPREP" --url "$root/data/samples" --output-prefix= --output-dir "$work/o" --dry-run
expect "a file URL with localhost and escapes is this machine's directory" 0 "" -- \
  "$PILEPREP" --url "file://localhost${root// /%20}/data/sam%70les" --files 0 --output-dir "$work/furl" --dry-run
# A Slurm array task whose number --files does not list is the job's set-up: refused, nothing made.
expect "an array task not among the --files numbers is a set-up error" 2 \
  "Slurm array task 12 is not among the --files numbers; use --array with the same numbers as --files" -- \
  env SLURM_ARRAY_TASK_ID=12 SLURM_ARRAY_TASK_MIN=0 SLURM_ARRAY_TASK_MAX=29 \
  "$PILEPREP" --url "$root/data/samples" --files 0-9 --output-dir "$work/array12"
[[ -e "$work/array12" ]] && { echo "FAIL: a refused array task made its output directory"; fail=1; }
expect "a file URL naming another host is refused" 2 'host must be empty or localhost, not "nas"' -- \
  "$PILEPREP" --url "file://nas/data" --files 0 --output-dir "$work/furl" --dry-run
# Flags as argparse reads them: an unknown single-dash flag is a usage error (exit 2), not a file
# or dataset named "-expect-eod" that fails to open (exit 1) while the check asked for never ran;
# "--" ends the flags.
expect "validate: a single-dash flag is unknown, with a hint" 2 "unknown flag -expect-eod; flags take two dashes: --expect-eod" -- \
  "$PILEPREP" validate -expect-eod "$root/data/samples"
expect "the hint names the flag, not its value" 2 "unknown flag -expect-eod=1; flags take two dashes: --expect-eod (see" -- \
  "$PILEPREP" validate -expect-eod=1 "$root/data/samples"
expect "merge: a single-dash flag is unknown" 2 "unknown flag -input-dir" -- \
  "$PILEPREP" merge --output-prefix "$work/m" -input-dir "$work"
expect "preprocess: a single-dash flag is unknown" 2 "unknown flag -input; flags take two dashes: --input" -- \
  "$PILEPREP" preprocess -input "$work/x.jsonl" --output-prefix "$work/p"
expect "a directory as --ca-file is a set-up error" 2 "--ca-file $work: a directory, not a file" -- \
  "$PILEPREP" --files 1-3 --url https://127.0.0.1:9/ --ca-file "$work" --output-dir "$work/cafile"
mkfifo "$work/ca-fifo"
expect "a FIFO as --ca-file is a set-up error, at once" 2 "--ca-file $work/ca-fifo: not a regular file" -- \
  timeout 10 "$PILEPREP" --files 1-3 --url https://127.0.0.1:9/ --ca-file "$work/ca-fifo" \
  --output-dir "$work/cafile" --dry-run
[[ ! -e $work/cafile ]] && echo "ok: a bad --ca-file: no output directory made" \
  || { echo "FAIL: a bad --ca-file: $work/cafile was made"; fail=1; }
# Where libcurl never reads it (plain http, --insecure) it is not looked at, as before.
expect "--ca-file with plain http is not read" 0 "" -- "$PILEPREP" --files 1-3 \
  --url http://127.0.0.1:9/ --ca-file "$work/no-such.pem" --output-dir "$work/cafile" --dry-run
expect "--ca-file with --insecure is not read" 0 "" -- "$PILEPREP" --files 1-3 --insecure \
  --url https://127.0.0.1:9/ --ca-file "$work/no-such.pem" --output-dir "$work/cafile" --dry-run
expect "unsupported scheme is refused" 2 'unsupported scheme "ftp"' -- "$PILEPREP" --url ftp://x/
expect "prefix with a slash is refused" 2 "--output-prefix must be a plain name" -- \
  "$PILEPREP" --url "$root/data/samples" --output-prefix a/b --output-dir "$work/o"
expect "bad thread count" 2 "--threads 0: expected a whole number from 1 to 4096" -- \
  "$PILEPREP" --threads 0
expect "--retry-wait nan is a usage error" 2 "--retry-wait nan: expected seconds from 0 to 3600" -- \
  "$PILEPREP" --url "$root/data/samples" --retry-wait nan
# Seconds as Python's float() reads them (argparse's type=float): C's hex forms are refused; too
# small a number is 0 and too large one inf, whatever zeros its mantissa and exponent are written with.
z400=$(printf '0%.0s' {1..400})
for w in 0x10 0x1p4 1__0 _1 1_ 1e 1.e+ . "1 0" 1e400 "1${z400}e-0000001"; do
  expect "--retry-wait '$w' is a usage error" 2 "--retry-wait $w: expected seconds from 0 to 3600" -- \
    "$PILEPREP" --url "$root/data/samples" --files 0 --output-dir "$work/rw" --retry-wait "$w" --dry-run
done
for w in 1_0 " 2.5 " +.5 1. 5e-1 1E+0_1 3_600 1e-400 0.0000e-99999999999 "0.${z400}1e+0000001"; do
  expect "--retry-wait '$w' reads as Python's float()" 0 "" -- \
    "$PILEPREP" --url "$root/data/samples" --files 0 --output-dir "$work/rw" --retry-wait "$w" --dry-run
done
# A value flag does not take the next flag for its value (an empty $OUT must not turn the dry run
# into a real run into a directory named "--dry-run"); a value starting with '-' goes inline.
expect "a value flag followed by a flag is a usage error" 2 \
  "--output-dir needs a value: --output-dir DIR, not --dry-run (a value that starts with '-' goes as --output-dir=VALUE)" -- \
  "$PILEPREP" --url "$root/data/samples" --files 0 --output-dir --dry-run
[[ -e ./--dry-run ]] && { echo "FAIL: a directory named --dry-run was made"; fail=1; }
expect "a negative number is still a value" 0 "" -- "$PILEPREP" --url "$root/data/samples" --files 0 \
  --output-dir "$work/neg" --max-bad-records -1 --dry-run
# A merges file Megatron's reader (split('\n')[1:-1]) reads otherwise: said, naming the line.
v=$root/tokenizers/gpt2
printf '{"text": "the gazed"}\n' >"$work/m.jsonl"
head -c -1 "$v/vocab.bpe" >"$work/nonl.bpe"
tail -n +2 "$v/vocab.bpe" >"$work/nohdr.bpe"
expect "merges without a final newline: warned" 0 \
  "nonl.bpe: Megatron's reader (and GPT-2's encoder.py) would drop its last line (\"Ġg azed\")" -- \
  "$PILEPREP" preprocess --input "$work/m.jsonl" --output-prefix "$work/m1" --append-eod -q \
  --vocab-file "$v/encoder.json" --merge-file "$work/nonl.bpe"
expect "merges without a #version line: warned" 0 "would drop its first line (\"Ġ t\"), which is no" -- \
  "$PILEPREP" preprocess --input "$work/m.jsonl" --output-prefix "$work/m2" --append-eod -q \
  --vocab-file "$v/encoder.json" --merge-file "$work/nohdr.bpe"
"$PILEPREP" preprocess --input "$work/m.jsonl" --output-prefix "$work/m3" --append-eod -q \
  --vocab-file "$v/encoder.json" --merge-file "$v/vocab.bpe" 2>"$work/m3.err"
grep -q "warning" "$work/m3.err" && { echo "FAIL: the shipped merges file warned: $(cat "$work/m3.err")"; fail=1; } ||
  echo "ok: the shipped merges file gives no warning"
expect "vocab without merges" 2 "--vocab-file and --merge-file go together" -- \
  "$PILEPREP" --vocab-file x --url "$root/data/samples"
expect "missing vocabulary file" 2 "nope.json: cannot open" -- \
  "$PILEPREP" --vocab-file "$work/nope.json" --merge-file "$work/nope.bpe" --url "$root/data/samples" --output-dir "$work/o"
expect "preprocess needs input" 2 "preprocess needs --input FILE and --output-prefix P" -- \
  "$PILEPREP" preprocess --output-prefix "$work/p"
printf '{"text": "hello world"}\n{"text": "again"}\n' > "$work/t.jsonl"
expect "preprocess refuses a second input" 2 'unexpected argument "b.jsonl" (preprocess takes one --input FILE' -- \
  "$PILEPREP" preprocess --input "$work/t.jsonl" b.jsonl --output-prefix "$work/p"
expect "preprocess checks --threads beside --workers" 2 "--threads abc: expected a whole number" -- \
  "$PILEPREP" preprocess --input "$work/t.jsonl" --output-prefix "$work/p" --workers 2 --threads abc
[[ -e "$work/p_text_document.bin" ]] && { echo "FAIL: a refused preprocess wrote outputs"; fail=1; }
# A key given twice is one dataset, as Megatron's dict of keys makes it.
expect "preprocess: a key given twice" 0 "" -- \
  "$PILEPREP" preprocess --input "$work/t.jsonl" --output-prefix "$work/twice" --json-keys text text -q
expect "preprocess: the key once" 0 "" -- \
  "$PILEPREP" preprocess --input "$work/t.jsonl" --output-prefix "$work/once" -q
# -q: errors and the summary only (--help), as the shard job.
grep -q "^t.jsonl  *done " "$work/err" || { echo "FAIL: preprocess -q printed no summary"; cat "$work/err"; fail=1; }
grep -q " documents, " "$work/err" && { echo "FAIL: preprocess -q printed its progress line"; cat "$work/err"; fail=1; }
# Megatron's and NeMo's command lines (review): what changes the output is refused, what does not
# is accepted; flags read as argparse reads them.
expect "preprocess: --partitions 2 would interleave in Megatron" 2 "Megatron then interleaves the documents" -- \
  "$PILEPREP" preprocess --input "$work/t.jsonl" --output-prefix "$work/part" --partitions 2
expect "preprocess: --partitions 2 --keep-sequential-samples keeps the order" 0 "" -- \
  "$PILEPREP" preprocess --input "$work/t.jsonl" --output-prefix "$work/part" --partitions 2 --keep-sequential-samples --append-eod -q
expect "preprocess: a glob with --partitions" 2 "Megatron globs it" -- \
  "$PILEPREP" preprocess --input "$work/*.jsonl" --output-prefix "$work/part" --partitions 2 --keep-sequential-samples
expect "preprocess: NeMo's launcher's flags and argparse abbreviations" 0 "" -- \
  "$PILEPREP" preprocess --input "$work/t.jsonl" --output-prefix "$work/nemo" --dataset-impl mmap \
  --tokenizer-type GPT2BPETokenizer --tokenizer-library megatron --tokenizer-model None --workers 2 \
  --vocab "$root/tokenizers/gpt2/encoder.json" --merge "$root/tokenizers/gpt2/vocab.bpe" --append-eod \
  --json-key text --keep-newlines --lang english --log-interval 100 -q
cmp -s "$work/nemo_text_document.bin" "$work/part_text_document.bin" \
  || { echo "FAIL: the NeMo command line's .bin differs"; fail=1; }
expect "preprocess: --tokenizer-model other than None" 2 "GPT-2 BPE reads --vocab-file and --merge-file" -- \
  "$PILEPREP" preprocess --input "$work/t.jsonl" --output-prefix "$work/tm" --tokenizer-model gpt2
expect "preprocess: --log-interval 0" 2 "--log-interval 0: expected a whole number" -- \
  "$PILEPREP" preprocess --input "$work/t.jsonl" --output-prefix "$work/li" --log-interval 0
# Whole numbers as argparse's type=int (Python's int()) reads them: a sign, blanks, underscores.
expect "preprocess: --workers +2 and --log-interval 1_000 as int() reads them" 0 "" -- \
  "$PILEPREP" preprocess --input "$work/t.jsonl" --output-prefix "$work/plus" --workers +2 \
  --log-interval " 1_000 " --append-eod -q
cmp -s "$work/plus_text_document.bin" "$work/part_text_document.bin" \
  || { echo "FAIL: the --workers +2 run's .bin differs"; fail=1; }
expect "a doubled underscore is no number (as int())" 2 "--log-interval 1__000: expected a whole number" -- \
  "$PILEPREP" preprocess --input "$work/t.jsonl" --output-prefix "$work/li" --log-interval 1__000
expect "a sign alone is no number" 2 "--workers +: expected a whole number" -- \
  "$PILEPREP" preprocess --input "$work/t.jsonl" --output-prefix "$work/li" --workers +
expect "an ambiguous abbreviation" 2 "ambiguous flag --re: it could be --remake-other-settings, --retries, --retry-wait" -- \
  "$PILEPREP" --re 1
expect "a hidden flag only by its full name" 2 "flag --ins: write it out as --insecure (this flag is not taken abbreviated)" -- \
  "$PILEPREP" --url "$root/data/samples" --ins
# Hidden flags count in what an abbreviation could mean, as in argparse: Megatron's parser reads --p
# as --partitions (hidden here), so it is ambiguous, not --progress-interval.
expect "preprocess: --p is ambiguous with Megatron's --partitions" 2 "ambiguous flag --p: it could be --partitions, --progress-interval" -- \
  "$PILEPREP" preprocess --input "$work/t.jsonl" --output-prefix "$work/pp" --p 2
# --flag=VALUE is one value, as in argparse: the words after it are not more keys.
expect "preprocess: --json-keys=a b takes a alone" 2 'unexpected argument "title"' -- \
  "$PILEPREP" preprocess --input "$work/t.jsonl" --output-prefix "$work/pp" --json-keys=text title
# --json-keys given twice: the last list, as argparse (the first key, absent, would fail every record).
expect "preprocess: --json-keys twice keeps the last" 0 "" -- \
  "$PILEPREP" preprocess --input "$work/t.jsonl" --output-prefix "$work/last" --json-keys nosuch --json-keys text -q
[[ -e "$work/last_nosuch_document.idx" ]] && { echo "FAIL: --json-keys twice made the first key's dataset"; fail=1; }
# A key with a '/' puts its dataset in a directory named by the prefix and the key, as Megatron does
# (which writes there when the directory exists); made when missing, as --output-prefix's directory
# is (it failed as an input, exit 1, after a note about running without a lock).
printf '{"a/b": "hello world"}\n' > "$work/slash.jsonl"
expect "preprocess: a key with a slash makes its dataset's directory" 0 "" -- \
  "$PILEPREP" preprocess --input "$work/slash.jsonl" --output-prefix "$work/sl/c" --json-keys a/b -q
grep -q "without a lock" "$work/err" && { echo "FAIL: a key with a slash ran without a lock"; cat "$work/err"; fail=1; }
"$PILEPREP" validate -q "$work/sl/c_a/b_document" || { echo "FAIL: a key with a slash: no valid dataset"; fail=1; }
# One that cannot be made is named by the key that asked for it (it was --output-prefix's).
mkdir -p "$work/sf" && : > "$work/sf/c_a"
expect "preprocess: a key's directory that cannot be made" 2 "--json-keys a/b: the directory $work/sf/c_a: cannot create" -- \
  "$PILEPREP" preprocess --input "$work/slash.jsonl" --output-prefix "$work/sf/c" --json-keys a/b -q
# The gzip check looks only at a regular file: a pipe's first bytes, read for it, would be lost.
cat "$work/t.jsonl" | "$PILEPREP" preprocess --input /dev/stdin --output-prefix "$work/pipe" -q 2>/dev/null
expect "preprocess from a pipe keeps every document" 0 "documents:  2" -- \
  "$PILEPREP" inspect "$work/pipe_text_document"
gzip -c "$work/t.jsonl" >"$work/t.jsonl.gz"
expect "preprocess: a gzip file is named as such" 1 "gzip-compressed (it starts with 1f 8b)" -- \
  "$PILEPREP" preprocess --input "$work/t.jsonl.gz" --output-prefix "$work/gz"
# More workers than cores (Megatron's --workers 16 on a smaller node): no warning from TBB's runtime.
expect "preprocess: more workers than cores: no TBB warning" 0 "" -- \
  "$PILEPREP" preprocess --input "$work/t.jsonl" --output-prefix "$work/many" --workers $(( $(nproc) + 2 )) -q
grep -q "TBB" "$work/err" && { echo "FAIL: TBB printed: $(cat "$work/err")"; fail=1; }
# The same split between shards at once (pipelines side by side, unequal shares).
expect "shard job: more threads than cores, two shards at once: no TBB warning" 0 "" -- \
  "$PILEPREP" --url "$root/data/samples" --files 0-1 --output-dir "$work/many2" \
  --threads $(( 2 * $(nproc) + 1 )) --shards-at-once 2 -q
grep -q "TBB" "$work/err" && { echo "FAIL: TBB printed: $(cat "$work/err")"; fail=1; }
# A failed input lists its bad records as found, not skipped: nothing was made to skip them from.
printf '{"text": "a"}\nnot json\n{"text": "b"}\n' >"$work/onebad.jsonl"
expect "preprocess: a failed input's bad records are not called skipped" 1 \
  "onebad.jsonl: 1 bad record found; nothing was published:" -- \
  "$PILEPREP" preprocess --input "$work/onebad.jsonl" --output-prefix "$work/ob" --max-bad-records 0
grep -q "skipped" "$work/err" && { echo "FAIL: a failed input's bad records called skipped"; fail=1; }
# zstd under a plain name (the format is chosen by the name) and another compressor: named too.
zstd -q -c "$work/t.jsonl" >"$work/zst-named-plain.jsonl"
want="zst-named-plain.jsonl: zstd-compressed (it starts with a zstd frame), under a plain name: "
want+="pileprep reads a file as zstd when its name ends in .zst; rename it (NAME.jsonl.zst)"
expect "preprocess: zstd under a plain name is named, with the name to give it" 1 "$want" -- \
  "$PILEPREP" preprocess --input "$work/zst-named-plain.jsonl" --output-prefix "$work/zn"
printf '\x27\xb5\x2f\xfd\x00\x00' >"$work/legacy.jsonl"  # a zstd v0.7 frame's magic
expect "preprocess: a legacy zstd frame is named, not sent to a rename" 1 \
  "legacy.jsonl: a legacy zstd frame (v0.1-v0.7), which pileprep does not read" -- \
  "$PILEPREP" preprocess --input "$work/legacy.jsonl" --output-prefix "$work/lg"
printf 'BZh91AY&SY' >"$work/t.jsonl.bz2"
expect "preprocess: a bzip2 file is named as such" 1 "t.jsonl.bz2: bzip2-compressed; pileprep reads" -- \
  "$PILEPREP" preprocess --input "$work/t.jsonl.bz2" --output-prefix "$work/bz"
for ext in bin idx; do
  cmp -s "$work/twice_text_document.$ext" "$work/once_text_document.$ext" ||
    { echo "FAIL: a key given twice: .$ext differs from the key once"; fail=1; }
done

# A missing shard fails by name, publishes nothing for itself, and the others still complete.
expect "missing shard fails, others complete" 1 "05.jsonl.zst: no such file" -- \
  "$PILEPREP" --url "$root/data/samples" --files 0,5,1 --output-dir "$work/m" -q
for n in 00 01; do
  for ext in bin idx; do
    [[ -s "$work/m/my-gpt3_${n}_text_document.$ext" ]] || { echo "FAIL: shard $n.$ext missing"; fail=1; }
  done
done
if ls "$work/m" | grep -q -e _05_ -e pileprep-tmp; then echo "FAIL: stray files: $(ls "$work/m")"; fail=1; fi
grep -q "FAILED" "$work/err" || { echo "FAIL: summary does not mark the failed shard"; fail=1; }
grep -q "1 of 3 shard(s) FAILED" "$work/err" || { echo "FAIL: no failure count"; cat "$work/err"; fail=1; }

# Another --output-prefix in the same directory writes its own summary: a validation set's job
# beside the training set's overwrote the other's verdict (one name per rank).
expect "another --output-prefix: its own summary" 0 "" -- \
  "$PILEPREP" --url "$root/data/samples" --files 1 --output-dir "$work/m" --output-prefix val -q
[[ -s "$work/m/pileprep-summary-val-rank0.json" ]] ||
  { echo "FAIL: no pileprep-summary-val-rank0.json: $(ls "$work/m")"; fail=1; }
grep -q '"shard": "05.jsonl.zst"' "$work/m/pileprep-summary-rank0.json" ||
  { echo "FAIL: the default prefix's summary was overwritten"; fail=1; }

# A corrupt shard among good ones: same.
mkdir -p "$work/src"
cp "$root/data/samples/00.jsonl.zst" "$work/src/00.jsonl.zst"
head -c 5000 "$root/data/samples/01.jsonl.zst" > "$work/src/01.jsonl.zst"
expect "truncated shard fails naming the file and the byte" 1 \
  "pileprep: error: $work/src/01.jsonl.zst: byte 5000: zstd: truncated stream: input ends inside the frame starting at byte 0" -- \
  "$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$work/c" -q
[[ -s "$work/c/my-gpt3_00_text_document.bin" ]] || { echo "FAIL: good shard not published"; fail=1; }
if ls "$work/c" | grep -q -e _01_ -e pileprep-tmp; then echo "FAIL: stray: $(ls "$work/c")"; fail=1; fi

# An output directory that cannot be created (a path through a file) is a set-up error: exit 2,
# naming it and why, for the shard job, preprocess and merge.
expect "an --output-dir that cannot be created" 2 "pileprep: error: --output-dir /dev/null/x: cannot create: Not a directory" -- \
  "$PILEPREP" --url "$root/data/samples" --files 0 --output-dir /dev/null/x -q
expect "preprocess: an output directory that cannot be created" 2 \
  "pileprep: error: --output-prefix /dev/null/x: cannot create: Not a directory" -- \
  "$PILEPREP" preprocess --input "$work/t.jsonl" --output-prefix /dev/null/x/p -q
expect "merge: an output directory that cannot be created" 2 \
  "pileprep: error: --output-prefix /dev/null/x: cannot create: Not a directory" -- \
  "$PILEPREP" merge --output-prefix /dev/null/x/m "$work/c/my-gpt3_00_text_document" -q
# An --output-dir that is a file: named as such ("cannot create: File exists" read as if a
# directory were in the way).
touch "$work/a-file"
expect "an --output-dir that is a file" 2 "pileprep: error: --output-dir $work/a-file: not a directory" -- \
  "$PILEPREP" --url "$root/data/samples" --files 0 --output-dir "$work/a-file" -q

# Plain JSON lines read (the default) or mapped (--mmap-input): the same files.
zstd -q -d -c "$root/data/samples/01.jsonl.zst" > "$work/plain.jsonl"
expect "plain input read" 0 "" -- \
  "$PILEPREP" preprocess --input "$work/plain.jsonl" --output-prefix "$work/read" --append-eod -q
expect "plain input mapped" 0 "" -- "$PILEPREP" preprocess --input "$work/plain.jsonl" \
  --output-prefix "$work/mapped" --append-eod --mmap-input -q
for ext in bin idx; do
  cmp -s "$work/read_text_document.$ext" "$work/mapped_text_document.$ext" \
    || { echo "FAIL: --mmap-input changes the .$ext"; fail=1; }
done

# Summary table at the end.
expect "summary table" 0 "shard            status" -- \
  "$PILEPREP" --url "$root/data/samples" --files 1 --output-dir "$work/s"
# A row named after a long input file keeps its columns under the header's: the first column is as
# wide as the longest name (it was 16, and such a row pushed every column three places right).
cp "$work/plain.jsonl" "$work/a-rather-long-input-name.jsonl"
"$PILEPREP" preprocess --input "$work/a-rather-long-input-name.jsonl" --output-prefix "$work/long" \
  --append-eod -q >/dev/null 2>"$work/err"
header=$(grep '^shard ' "$work/err"); row=$(grep '^a-rather-long-input-name.jsonl ' "$work/err")
hpre=${header%%status*}; rpre=${row%%done*}
if [[ -n $row && ${#hpre} -eq ${#rpre} && ${#header} -eq ${#row} ]]; then
  echo "ok: summary table: a long name keeps the columns aligned"
else
  echo "FAIL: summary table: a long name shifts the columns"; printf '%s\n%s\n' "$header" "$row"; fail=1
fi

# preprocess and merge publish under a shard job's names without a record: they remove its record
# first, so that it never vouches for their bytes (a record listing the same sizes would).
rec="$work/s/my-gpt3_01_text_document.pileprep.json"
[[ -f $rec ]] || { echo "FAIL: the shard job wrote no record"; fail=1; }
expect "preprocess onto a shard job's dataset" 0 "" -- "$PILEPREP" preprocess \
  --input "$root/data/samples/00.jsonl.zst" --output-prefix "$work/s/my-gpt3_01" --append-eod -q
[[ ! -e $rec ]] || { echo "FAIL: preprocess left the shard job's record beside its own outputs"; fail=1; }
expect "the shard job again" 0 "" -- "$PILEPREP" --url "$root/data/samples" --files 1 \
  --output-dir "$work/s" --force -q
[[ -f $rec ]] || { echo "FAIL: the shard job wrote no record"; fail=1; }
expect "merge onto a shard job's dataset" 0 "" -- "$PILEPREP" merge \
  --output-prefix "$work/s/my-gpt3_01_text_document" "$work/read_text_document" -q
[[ ! -e $rec ]] || { echo "FAIL: merge left the shard job's record beside its own outputs"; fail=1; }
# Two writers of one dataset would share its temporaries: preprocess, merge and the shard job each
# take the dataset's lock ({dataset}.pileprep-lock), so a second is refused, naming the lock. The
# lock is held (by flock(1), as a run would hold it) until this script lets it go.
mkdir -p "$work/pl"
lk=$work/pl/my-gpt3_01_text_document.pileprep-lock
flock "$lk" -c "touch '$work/pl/held'; while [ -e '$work/pl/held' ]; do sleep 0.05; done" &
for _ in $(seq 200); do [[ -e $work/pl/held ]] && break; sleep 0.05; done
expect "preprocess into a dataset another process holds" 1 "another pileprep process is writing it (another process, lock $lk)" -- \
  "$PILEPREP" preprocess --input "$work/t.jsonl" --output-prefix "$work/pl/my-gpt3_01" -q
[[ -e "$work/pl/my-gpt3_01_text_document.bin" ]] && { echo "FAIL: a refused preprocess wrote outputs"; fail=1; }
expect "a shard job whose dataset another process holds" 1 "another pileprep process is writing one of its datasets (another process, lock $lk" -- \
  "$PILEPREP" --url "$root/data/samples" --files 1 --output-dir "$work/pl" -q
expect "a merge into a dataset another process holds" 1 "another pileprep process is writing it (another process, lock $lk)" -- \
  "$PILEPREP" merge --output-prefix "$work/pl/my-gpt3_01_text_document" "$work/read_text_document" -q
[[ -e "$work/pl/my-gpt3_01_text_document.bin" ]] && { echo "FAIL: a refused run wrote outputs"; fail=1; }
# Locks are taken in sorted order, whatever the order of --json-keys (two writers asking in other
# orders could each take one and both be refused): with code's held too, code's is the one named.
lk2=$work/pl/my-gpt3_01_code_document.pileprep-lock
flock "$lk2" -c "touch '$work/pl/held2'; while [ -e '$work/pl/held2' ]; do sleep 0.05; done" &
holder2=$!
for _ in $(seq 200); do [[ -e $work/pl/held2 ]] && break; sleep 0.05; done
expect "preprocess takes its locks in sorted order" 1 "another pileprep process is writing it (another process, lock $lk2)" -- \
  "$PILEPREP" preprocess --input "$work/t.jsonl" --output-prefix "$work/pl/my-gpt3_01" --json-keys text code -q
rm -f "$work/pl/held2"
wait $holder2
rm -f "$lk2"
expect "the dry run names a held dataset lock" 0 "FAILED, left alone: another pileprep process is writing one of its datasets (another process, lock $lk)" -- \
  "$PILEPREP" --url "$root/data/samples" --files 1 --output-dir "$work/pl" --dry-run
rm -f "$work/pl/held"
wait
for t in bin idx lengths docidx; do echo stale >"$work/pl/my-gpt3_01_text_document.$t.pileprep-tmp"; done
expect "preprocess removes a killed run's temporaries" 0 "removed a stale temporary file of an interrupted run: $work/pl/my-gpt3_01_text_document.docidx.pileprep-tmp" -- \
  "$PILEPREP" preprocess --input "$work/t.jsonl" --output-prefix "$work/pl/my-gpt3_01"
left=$(ls "$work/pl" | grep 'pileprep-tmp\|pileprep-lock')
[[ -z $left ]] || { echo "FAIL: preprocess left temporaries or its lock: $left"; fail=1; }
# Merge takes the same lock, so it removes the same temporaries (a killed preprocess's spill files too).
for t in bin idx lengths docidx; do echo stale >"$work/pl/my-gpt3_02_text_document.$t.pileprep-tmp"; done
expect "merge removes a killed writer's temporaries" 0 "removed a stale temporary file of an interrupted run: $work/pl/my-gpt3_02_text_document.lengths.pileprep-tmp" -- \
  "$PILEPREP" merge --output-prefix "$work/pl/my-gpt3_02_text_document" "$work/pl/my-gpt3_01_text_document"
left=$(ls "$work/pl" | grep 'pileprep-tmp\|pileprep-lock')
[[ -z $left ]] || { echo "FAIL: merge left temporaries or its lock: $left"; fail=1; }
# A usage error changes nothing on disk.
expect "merge into a prefix ending in /" 2 "names no file" -- \
  "$PILEPREP" merge --output-prefix "$work/newdir/" "$work/pl/my-gpt3_01_text_document"
[[ -e "$work/newdir" ]] && { echo "FAIL: a refused merge made its output directory"; fail=1; }
expect "--json-keys with a slash" 2 'a key names the outputs' -- "$PILEPREP" --url "$root/data/samples" \
  --files 1 --output-dir "$work/s2" --json-keys a/b
# A literal <|endoftext|> in text: one id 50256 by default (NeMo's data preparation, whose GPT-2
# tokenizer is Hugging Face's, and the golden data), ordinary text with --endoftext-as-text (Megatron-LM's
# own preprocess_data.py: its gpt2_tokenization.py has no special tokens; tiktoken's encode_ordinary).
printf '{"text": "a<|endoftext|>b"}\n' >"$work/eot.jsonl"
"$PILEPREP" preprocess --input "$work/eot.jsonl" --output-prefix "$work/eot" --append-eod -q 2>/dev/null
expect "a literal <|endoftext|> is id 50256 by default" 0 "64 50256 65 50256" -- \
  "$PILEPREP" inspect "$work/eot_text_document" --doc 0
"$PILEPREP" preprocess --input "$work/eot.jsonl" --output-prefix "$work/eot" --append-eod -q \
  --endoftext-as-text 2>/dev/null
expect "--endoftext-as-text gives legacy Megatron-LM's ids for it" 0 "64 27 91 437 1659 5239 91 29 65 50256" -- \
  "$PILEPREP" inspect "$work/eot_text_document" --doc 0
rm -f "$work/eot.jsonl" "$work"/eot_text_document.*

# On a terminal the live progress line fits its width (a wrapped line leaves rows behind at every
# redraw): whole fields are dropped, the counts first, rather than the line cut mid-word. `script`
# gives the run a terminal of 80 and of 50 columns.
if command -v script >/dev/null; then
  # (About a second of work on one thread here: several redraws, 0.2 s apart.)
  for _ in $(seq 20); do zstd -q -d -c "$root/data/samples/00.jsonl.zst"; done >"$work/wide.jsonl"
  whole='(%\)|ETA [0-9]+(s|m[0-9]{2}s|h[0-9]{2}m)|B/s of JSON|docs|tokens|bad records|retr(y|ies)|\))$'
  for cols in 80 50; do
    (cd "$work" && script -qc "stty cols $cols; \"$PILEPREP\" preprocess --input wide.jsonl --output-prefix wide --workers 1" \
      /dev/null >"$work/tty" 2>&1 </dev/null)
    tr '\r' '\n' <"$work/tty" | grep -a '%)' | sed 's/\x1b\[K//' >"$work/live"
    live=$(wc -l <"$work/live")
    over=$(awk -v w=$((cols - 1)) 'length($0) > w' "$work/live" | wc -l)
    cut=$(grep -avE "$whole" "$work/live" | wc -l)
    if [[ $live -gt 0 && $over -eq 0 && $cut -eq 0 ]]; then
      echo "ok: the live line fits a $cols-column terminal in whole fields ($live redraws)"
    else
      echo "FAIL: live line on a $cols-column terminal: $live redraws, $over wider than $((cols - 1)), $cut cut mid-field"
      head -3 "$work/live"; fail=1
    fi
    # 80 columns hold the rate and the documents (the tokens go first).
    if [[ $cols == 80 ]] && ! grep -aq 'B/s of JSON, .* docs$' "$work/live"; then
      echo "FAIL: an 80-column line dropped more than the token count:"; head -3 "$work/live"; fail=1
    fi
  done
  # A name of wide characters (two columns each) still fits.
  ln "$work/wide.jsonl" "$work/数据集数据集.jsonl"
  (cd "$work" && script -qc "stty cols 50; \"$PILEPREP\" preprocess --input 数据集数据集.jsonl --output-prefix wide --workers 1" \
    /dev/null >"$work/tty" 2>&1 </dev/null)
  tr '\r' '\n' <"$work/tty" | grep -a '%)' | sed 's/\x1b\[K//' >"$work/live"
  over=$(/usr/bin/python3 -c '
import sys, unicodedata
lines = open(sys.argv[1], encoding="utf-8", errors="replace").read().splitlines()
print(sum(1 for l in lines if sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in l) > 49))
' "$work/live")
  if [[ $(wc -l <"$work/live") -gt 0 && $over -eq 0 ]]; then echo "ok: a name of wide characters fits a 50-column terminal"
  else echo "FAIL: a name of wide characters: $over of $(wc -l <"$work/live") redraws wider than 49 columns"; fail=1; fi
  rm -f "$work/wide.jsonl" "$work/数据集数据集.jsonl" "$work"/wide_text_document.*
else
  echo "skip: no script(1) to give a run a terminal"
fi
exit $fail
