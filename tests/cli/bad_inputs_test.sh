#!/usr/bin/env bash
# Every malformed or unusual shard in tests/data/bad gets the outcome its README lists:
#   error - exit 1, a message naming the file, nothing published and no temporaries left;
#   skip  - exit 0, the bad records counted with line numbers, the rest written exactly;
#   ok    - exit 0, every document written exactly.
# Expected counts and sha256 prefixes are Megatron's writer and GPT-2 tokenizer under the same policies.
set -uo pipefail
PILEPREP=$1
BAD=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
# The error of each error outcome, exactly: the file and the byte offset (the file's name alone is
# also in the summary table).
declare -A want_error=(
  [truncated.jsonl.zst]="truncated.jsonl.zst: byte 7411: zstd: truncated stream: input ends inside the frame starting at byte 0 (in the block starting at byte 7)"
  [bitflip.jsonl.zst]="bitflip.jsonl.zst: byte 7: zstd: corrupted block in the frame starting at byte 0"
  [not-zstd-plain.jsonl.zst]="not-zstd-plain.jsonl.zst: byte 0: not a zstd stream: looks like plain JSON lines (starts with 7b 22 74 65)"
)

# file outcome docs tokens bin_sha16 idx_sha16 bad_records
while read -r file outcome docs tokens bin idx bad; do
  [[ -z "$file" || "$file" == \#* ]] && continue
  out="$work/${file%%.*}"
  mkdir -p "$out"
  "$PILEPREP" preprocess --input "$BAD/$file" --output-prefix "$out/x" --append-eod --workers 2 \
    >"$out.stdout" 2>"$out.stderr"
  rc=$?
  what="$file ($outcome)"
  if [[ $outcome == error ]]; then
    if [[ $rc -ne 1 ]]; then echo "FAIL: $what: exit $rc, want 1"; fail=1; fi
    if ! grep -qxF "pileprep: error: $BAD/${want_error[$file]}" "$out.stderr"; then
      echo "FAIL: $what: want the error 'pileprep: error: $BAD/${want_error[$file]}'"; cat "$out.stderr"; fail=1
    fi
    if [[ -n "$(ls -A "$out")" ]]; then echo "FAIL: $what: left files: $(ls "$out")"; fail=1; fi
    echo "ok: $what: $(grep -m1 error: "$out.stderr")"
    continue
  fi
  if [[ $rc -ne 0 ]]; then echo "FAIL: $what: exit $rc"; cat "$out.stderr"; fail=1; continue; fi
  got_bin=$(sha256sum "$out/x_text_document.bin" | cut -c1-16)
  got_idx=$(sha256sum "$out/x_text_document.idx" | cut -c1-16)
  if [[ $got_bin != "$bin" || $got_idx != "$idx" ]]; then
    echo "FAIL: $what: sha256 bin $got_bin idx $got_idx, want $bin $idx"; fail=1
  fi
  if ! grep -q "^$file: $docs documents, $tokens tokens" "$out.stderr"; then
    echo "FAIL: $what: want $docs documents, $tokens tokens; got: $(grep documents "$out.stderr")"; fail=1
  fi
  if [[ $bad -gt 0 ]]; then
    noun="bad records"; [[ $bad -eq 1 ]] && noun="bad record"
    if ! grep -q "^$file: $bad $noun skipped:$" "$out.stderr" || ! grep -q "^  line [0-9]*: " "$out.stderr"; then
      echo "FAIL: $what: want $bad $noun reported with line numbers"; cat "$out.stderr"; fail=1
    fi
  elif grep -q "bad record" "$out.stderr"; then
    echo "FAIL: $what: unexpected bad records"; cat "$out.stderr"; fail=1
  fi
  if [[ -n "$(ls "$out" | grep -v -e '^x_text_document.bin$' -e '^x_text_document.idx$')" ]]; then
    echo "FAIL: $what: stray files: $(ls "$out")"; fail=1
  fi
  echo "ok: $what"
done <<'TABLE'
# file                          outcome docs tokens  bin              idx              bad
truncated.jsonl.zst             error   -    -       -                -                0
bitflip.jsonl.zst               error   -    -       -                -                0
not-zstd-plain.jsonl.zst        error   -    -       -                -                0
multi-frame.jsonl.zst           ok      60   10697   63a88aa6c6c13878 128ce15aa306a3f8 0
skippable-frames.jsonl.zst      ok      60   10697   63a88aa6c6c13878 128ce15aa306a3f8 0
invalid-json.jsonl.zst          skip    5    245     90ddad63100429ef f6f00ce763cb9938 24
missing-text.jsonl.zst          skip    3    188     33ab16912a8a44a9 7e1f740a3457bacb 12
text-not-string.jsonl.zst       skip    4    233     eca9a56c23667eb2 c4be06e90d544d23 9
invalid-utf8.jsonl.zst          skip    17   303     f030c212a763107f ada9bcb85b9fbb44 1
lone-surrogates.jsonl.zst       ok      11   213     106c306268ceaff8 9c6645544812287d 0
json-escapes.jsonl.zst          ok      13   206     1a8cd89a2cb410ce 353482ecfadf43db 0
crlf.jsonl.zst                  ok      20   1139    521357eaf7bed497 52a05e9e8d61cad8 0
crlf-lf-twin.jsonl.zst          ok      20   1139    521357eaf7bed497 52a05e9e8d61cad8 0
blank-lines.jsonl.zst           skip    10   554     a09cd2b2cd229668 ba1c10c0c8399275 14
no-final-newline.jsonl.zst      ok      10   530     cf7b9fbf29a06db4 4087c0bdee1ad87f 0
empty-and-tiny-texts.jsonl.zst  ok      14   46      4b5d102dc6cc7cf5 1abe2675f8ec0656 0
long-lines.jsonl.zst            ok      3    8672631 3160c691134e2e2d edf4b4f22a3ba34c 0
TABLE
# The U+FFFD repairs are counted in the summary: Python's counts (tests/data/bad/*.expected), and none
# where nothing was repaired.
# Without -v the first 5 bad records are listed and the rest counted; with -v (--verbose) every
# one, in line order, and the outputs are the same.
listed() { grep -c "^  line [0-9]*: invalid JSON: " "$1"; }
[[ $(listed "$work/invalid-json.stderr") -eq 5 ]] &&
  grep -qx "  \.\.\. 19 more (--verbose lists the first 100)" "$work/invalid-json.stderr" ||
  { echo "FAIL: invalid-json without -v: want 5 bad records listed and 19 more counted"; cat "$work/invalid-json.stderr"; fail=1; }
mkdir -p "$work/verbose"
"$PILEPREP" preprocess --input "$BAD/invalid-json.jsonl.zst" --output-prefix "$work/verbose/x" --append-eod \
  --workers 2 -v >"$work/verbose.stdout" 2>"$work/verbose.stderr" || { echo "FAIL: invalid-json -v: exit $?"; fail=1; }
lines=$(grep "^  line [0-9]*: invalid JSON: " "$work/verbose.stderr" | sed 's/^  line \([0-9]*\):.*/\1/' | tr '\n' ' ')
if [[ $(listed "$work/verbose.stderr") -ne 24 ]] || grep -q "more (--verbose" "$work/verbose.stderr" ||
   [[ $lines != "2 3 5 6 7 8 10 11 12 13 14 15 16 18 19 20 21 22 23 24 25 26 27 28 " ]]; then
  echo "FAIL: invalid-json -v: want all 24 bad records listed in line order, got lines: $lines"
  cat "$work/verbose.stderr"; fail=1
fi
grep -q "^invalid-json.jsonl.zst: 24 bad records skipped:$" "$work/verbose.stderr" ||
  { echo "FAIL: invalid-json -v: no count of 24"; fail=1; }
for ext in bin idx; do
  cmp -s "$work/verbose/x_text_document.$ext" "$work/invalid-json/x_text_document.$ext" ||
    { echo "FAIL: invalid-json: -v changes the .$ext"; fail=1; }
done
want_repairs() {  # name invalid_utf8 lone_surrogates
  grep -qx "$1.jsonl.zst: replaced with U+FFFD: $2 invalid UTF-8 sequences, $3 lone surrogate escapes" \
    "$work/$1.stderr" || { echo "FAIL: $1: want $2 and $3 repairs counted"; cat "$work/$1.stderr"; fail=1; }
}
want_repairs invalid-utf8 30 0
want_repairs lone-surrogates 0 11
for f in json-escapes crlf multi-frame long-lines; do
  grep -q "U+FFFD" "$work/$f.stderr" && { echo "FAIL: $f: repairs counted where there are none"; fail=1; }
done
exit $fail
