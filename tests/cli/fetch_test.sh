#!/usr/bin/env bash
# The shard job over HTTP against a loopback server with fault injection (tests/testing/fault_server.py):
# 503 then drops resumed with Range; 404 on one shard; a server without Range; a file that changes
# between requests; --keep-downloads. Every output must equal a clean local run.
set -uo pipefail
PILEPREP=$1
SHIM=$2  # tests/shim/fs_fault_shim.cc, built
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
# ld.so splits LD_PRELOAD at spaces and colons: the shim is preloaded from a copy in $work.
cp "$SHIM" "$work/fault_shim.so" && SHIM=$work/fault_shim.so
server_pid=
# The server dies with this script even when it is SIGKILLed (--parent-pid: PR_SET_PDEATHSIG), and its
# output goes to a file: an orphan holding CTest's pipe would keep CTest waiting after a failure.
stop_server() { [[ -n "$server_pid" ]] && kill -KILL "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null; server_pid=; }
trap 'stop_server; rm -rf "$work"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

start_server() {  # args for fault_server.py; sets $url
  rm -f "$work/port" "$work/log"
  /usr/bin/python3 "$root/tests/testing/fault_server.py" --root "$work/src" --port-file "$work/port" \
    --log "$work/log" --parent-pid $$ "$@" </dev/null >>"$work/server.out" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do [[ -s "$work/port" ]] && break; sleep 0.1; done
  [[ -s "$work/port" ]] || { bad "fault server did not start"; cat "$work/server.out"; exit 1; }
  url="http://127.0.0.1:$(cat "$work/port")/"
}

same_outputs() {  # name dir shards...
  local name=$1 dir=$2; shift 2
  for n in "$@"; do
    for ext in bin idx; do
      cmp -s "$work/ref/my-gpt3_${n}_text_document.$ext" "$dir/my-gpt3_${n}_text_document.$ext" ||
        bad "$name: shard $n .$ext differs from the local run"
    done
  done
  if ls "$dir" | grep -q pileprep-tmp; then bad "$name: stray temporaries: $(ls "$dir")"; fi
}

mkdir -p "$work/src"
cp "$root/data/samples/00.jsonl.zst" "$work/src/00.jsonl.zst"
cp "$root/data/samples/01.jsonl.zst" "$work/src/01.jsonl.zst"
cp "$root/tests/data/bad/multi-frame.jsonl.zst" "$work/src/02.jsonl.zst"
"$PILEPREP" --url "$work/src" --files 0-2 --output-dir "$work/ref" -q 2>/dev/null || bad "local reference run"

# 1. 503, then a drop mid-body, then a drop after the ranged resume.
start_server --plan 00.jsonl.zst=503:1,drop:100000,drop:50000 --plan 01.jsonl.zst=drop:200000
"$PILEPREP" --url "$url" --files 0-2 --output-dir "$work/a" --retry-wait 0.05 >"$work/out" 2>"$work/err"
rc=$?
[[ $rc -eq 0 ]] || { bad "faults: exit $rc"; cat "$work/err"; }
same_outputs "503+drops" "$work/a" 00 01 02
grep -q '"range": "bytes=100000-"' "$work/log" || bad "no Range resume from byte 100000: $(cat "$work/log")"
grep -q '"range": "bytes=150000-"' "$work/log" || bad "no Range resume from byte 150000"
[[ $(grep -c '"path": "00.jsonl.zst".*"status": 200' "$work/log") -eq 1 ]] || bad "00 downloaded whole more than once"
grep -q "HTTP 503 Service Unavailable; retry 1" "$work/err" || bad "503 retry not logged"
grep -q "from byte 100000 (Range)" "$work/err" || bad "resume not logged"
/usr/bin/python3 - "$work/a/pileprep-summary-rank0.json" "$work/src" "$work/ref" <<'PY' || bad "summary JSON"
import json, os, subprocess, sys
s = json.load(open(sys.argv[1]))
sh = {x["shard"]: x for x in s["shards"]}
assert s["exit_status"] == 0 and s["rank"] == 0 and s["nodes"] == 1, s
assert sh["00.jsonl.zst"]["retries"] == 3 and sh["00.jsonl.zst"]["resumes"] == 2, sh["00.jsonl.zst"]
assert sh["01.jsonl.zst"]["resumes"] == 1
for x in s["shards"]:
    assert x["status"] == "done" and x["documents"] > 0 and x["tokens"] > 0 and x["bytes_in"] > 0
    for k in ("bad_records", "bad_record_samples", "replaced_invalid_utf8", "replaced_lone_surrogates", "seconds"):
        assert k in x, k
# Exact counts, whatever the faults: documents and tokens of a clean run (shard 02: tests/data/bad's
# README, Megatron's), each .bin two bytes a token; bytes_in and bytes_downloaded the file's size,
# bytes_decompressed its JSON lines' size.
want = {"00.jsonl.zst": (2575, 3489275), "01.jsonl.zst": (2575, 1531066), "02.jsonl.zst": (60, 10697)}
assert sorted(sh) == sorted(want), sorted(sh)
for name, (docs, tokens) in want.items():
    x, src = sh[name], os.path.join(sys.argv[2], name)
    got = (x["documents"], x["tokens"], x["bad_records"], x["bytes_in"], x["bytes_downloaded"], x["bytes_decompressed"])
    size = os.path.getsize(src)
    json_bytes = len(subprocess.run(["zstd", "-q", "-d", "-c", src], check=True, capture_output=True).stdout)
    assert got == (docs, tokens, 0, size, size, json_bytes), (name, got, (docs, tokens, 0, size, size, json_bytes))
    bin_size = os.path.getsize(os.path.join(sys.argv[3], "my-gpt3_" + name[:2] + "_text_document.bin"))
    assert bin_size == 2 * tokens, (name, bin_size, tokens)
PY
# The summary table: each shard's row and the total row (1.5 MB + 750.7 kB + 19.8 kB; 3 + 1 retries).
grep -Eq '^00\.jsonl\.zst +done +1\.5 MB +2575 +3489275 +0 +3 +[0-9.]+ +[0-9.]+$' "$work/err" &&
  grep -Eq '^01\.jsonl\.zst +done +750\.7 kB +2575 +1531066 +0 +1 +[0-9.]+ +[0-9.]+$' "$work/err" &&
  grep -Eq '^02\.jsonl\.zst +done +19\.8 kB +60 +10697 +0 +0 +[0-9.]+ +[0-9.]+$' "$work/err" &&
  grep -Eq '^total +2\.2 MB +5210 +5031038 +0 +4 +[0-9.]+ +[0-9.]+$' "$work/err" ||
  { bad "summary table: rows or total"; cat "$work/err"; }
stop_server

# Progress lines: with stderr not a terminal, a plain line every --progress-interval seconds. A
# download at 400 kB/s (00: 1.5 MB, about 3.7 s) prints at least two at 1 s, and none at the
# default 30 s. (The size is not known until the answer's headers have come.)
start_server --rate 400000
"$PILEPREP" --url "$url" --files 0 --output-dir "$work/p1" --progress-interval 1 >"$work/out" 2>"$work/err" ||
  { bad "progress: run failed"; cat "$work/err"; }
line_re='^00\.jsonl\.zst: downloaded [0-9.]+ (B|kB|MB)( / 1\.5 MB, [0-9]+% processed)?(, ETA [0-9]+(s|m[0-9]{2}s))?, [0-9.]+ (B|kB|MB)/s in, [0-9.]+ (B|kB|MB|GB)/s of JSON, [0-9.]+k? docs, [0-9.]+[kM]? tokens( \((no batch finished for|waiting for the first batch,) [0-9]+s\))?$'
n_progress=$(grep -c ': downloaded ' "$work/err")
n_matching=$(grep -Ec "$line_re" "$work/err")
[[ $n_progress -ge 2 && $n_matching -eq $n_progress ]] && ! grep -q $'[\r\033]' "$work/err" ||
  { bad "progress: want 2 or more plain lines of the documented form, got $n_matching of $n_progress"; cat "$work/err"; }
# ...the downloaded bytes never going back, and growing from the first line to the last (not from
# each line to the next: where tokenizing is slower than the download, as in a sanitizer build,
# the last lines all say the whole file).
{ grep -E "$line_re" "$work/err" || true; } | sed -E 's/^[^:]*: downloaded ([0-9.]+) (B|kB|MB) .*/\1 \2/' |
  awk '{ b = $1 * ($2 == "MB" ? 1e6 : $2 == "kB" ? 1e3 : 1); if (NR > 1 && b < last) back = 1;
         if (NR == 1) first = b; last = b } END { exit back || !(last > first) }' ||
  bad "progress: the downloaded bytes go back, or do not grow, from line to line"
started=$SECONDS
"$PILEPREP" --url "$url" --files 0 --output-dir "$work/p30" >"$work/out" 2>"$work/err" ||
  { bad "progress: run at the default interval failed"; cat "$work/err"; }
# (Only where the run took less than the 30 s: a sanitizer build on a loaded machine may not.)
if (( SECONDS - started < 29 )) && grep -q ': downloaded ' "$work/err"; then
  bad "progress: a line within the default 30 s"; cat "$work/err"
fi
same_outputs "progress" "$work/p1" 00
stop_server
# ...and while no batch comes: the download stalls for 4 s after its first 100 kB (then the
# connection closes and the download resumes). Lines tied to batches went silent there.
start_server --plan 00.jsonl.zst=stall:100000:4
"$PILEPREP" --url "$url" --files 0 --output-dir "$work/p2" --progress-interval 1 >"$work/out" 2>"$work/err" ||
  { bad "progress: stalled run failed"; cat "$work/err"; }
n_quiet=$(grep -Ec "$line_re" "$work/err" | tr -d ' ')
n_waiting=$(grep -Ec '(no batch finished for|waiting for the first batch,) [0-9]+s\)$' "$work/err")
[[ $n_waiting -ge 2 && $n_quiet -ge 2 ]] ||
  { bad "progress: want 2 or more lines during a 4 s stall, got $n_waiting ($n_quiet of the form)"; cat "$work/err"; }
same_outputs "progress" "$work/p2" 00
stop_server

# A shard whose download began ahead (01, 1.5 MB, while 00, 0.75 MB, was made; at 200 kB/s) is
# processed fast while its head start lasts: its ETA must still cover the bytes to come at the rate
# they come in ("downloaded 1.1 MB / 3.0 MB, 36% processed, ETA 2s, 196.6 kB/s in" once promised 2 s
# for 9.5 s of download).
mkdir -p "$work/src_ahead"
cp "$root/data/samples/01.jsonl.zst" "$work/src_ahead/00.jsonl.zst"
cp "$root/data/samples/00.jsonl.zst" "$work/src_ahead/01.jsonl.zst"
start_server --root "$work/src_ahead" --rate 200000
"$PILEPREP" --url "$url" --files 0,1 --output-dir "$work/p3" --progress-interval 1 >"$work/out" 2>"$work/err" ||
  { bad "progress: slow download ahead failed"; cat "$work/err"; }
/usr/bin/python3 - "$work/err" <<'PY' || { bad "progress: the ETA of a shard downloaded ahead ignores the bytes still to come"; cat "$work/err"; }
import re, sys
unit = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}
def secs(s):
    m = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", s)
    h, mi, se = (int(x or 0) for x in m.groups())
    return h * 3600 + mi * 60 + se
checked = 0
for line in open(sys.argv[1]):
    m = re.match(r"01\.jsonl\.zst: downloaded ([0-9.]+) (B|kB|MB) / ([0-9.]+) (B|kB|MB), [0-9]+% processed, "
                 r"ETA ([0-9hms]+), ([0-9.]+) (B|kB|MB)/s in", line)
    if not m:
        continue
    got, total = float(m[1]) * unit[m[2]], float(m[3]) * unit[m[4]]
    rate = float(m[6]) * unit[m[7]]
    if rate <= 0:
        continue
    left = (total - got) / rate  # what the line's own figures say is left to download
    if left < 2:
        continue
    checked += 1
    eta = secs(m[5])
    # The byte counts are printed to 0.1 MB (0.5 s at 200 kB/s), the ETA to the second.
    if eta < 0.8 * left - 1:
        print("ETA", eta, "s with", left, "s of download left:", line.strip())
        sys.exit(1)
print("progress lines of 01 checked:", checked)
sys.exit(0 if checked > 0 else 1)
PY
for ext in bin idx; do
  cmp -s "$work/ref/my-gpt3_01_text_document.$ext" "$work/p3/my-gpt3_00_text_document.$ext" &&
    cmp -s "$work/ref/my-gpt3_00_text_document.$ext" "$work/p3/my-gpt3_01_text_document.$ext" ||
    bad "slow download ahead: .$ext differs"
done
stop_server

# 2. 404 on one shard: named, nothing published for it, the others complete, exit 1.
start_server
"$PILEPREP" --url "$url" --files 0,5,1 --output-dir "$work/b" --retry-wait 0.05 >"$work/out" 2>"$work/err"
rc=$?
[[ $rc -eq 1 ]] || bad "404: exit $rc, want 1"
grep -q "05.jsonl.zst: HTTP 404" "$work/err" || { bad "404 message does not name the shard"; cat "$work/err"; }
same_outputs "404" "$work/b" 00 01
if ls "$work/b" | grep -q _05_; then bad "404: something published for 05"; fi
[[ $(grep -c '"path": "05.jsonl.zst"' "$work/log") -eq 1 ]] || bad "404 was retried"
grep -q '"status": "FAILED"' "$work/b/pileprep-summary-rank0.json" || bad "summary lacks the failure"
stop_server

# 3. A server that ignores Range (same ETag: the delivered prefix is skipped; no ETag: restart).
start_server --no-range --plan 00.jsonl.zst=drop:300000
"$PILEPREP" --url "$url" --files 0 --output-dir "$work/c" --retry-wait 0.05 -q 2>"$work/err" || bad "no-range: failed"
same_outputs "no-range" "$work/c" 00
stop_server
start_server --no-range --no-etag --plan 00.jsonl.zst=drop:300000
"$PILEPREP" --url "$url" --files 0 --output-dir "$work/d" --retry-wait 0.05 2>"$work/err" || bad "no-range no-etag: failed"
same_outputs "no-range no-etag" "$work/d" 00
grep -q "restarting the shard from byte 0; restart 1 of 3" "$work/err" || { bad "restart not reported"; cat "$work/err"; }
grep -q '"restarts": 1' "$work/d/pileprep-summary-rank0.json" || bad "restart not in the summary"
stop_server
# Drops, no Range, no validator (each restart takes two requests): three restarts, then the shard
# fails, and its error says it gave up rather than that it is restarting.
start_server --no-range --no-etag --plan 00.jsonl.zst=drop:300000,drop:300000,drop:300000,drop:300000,drop:300000,drop:300000,drop:300000,drop:300000
"$PILEPREP" --url "$url" --files 0 --output-dir "$work/d4" --retry-wait 0.05 -q 2>"$work/err" && bad "out of restarts: did not fail"
grep -q "error: gave up after 3 restarts of the shard: " "$work/err" && grep -q '"restarts": 3' "$work/d4/pileprep-summary-rank0.json" \
  || { bad "out of restarts: not said"; cat "$work/err"; }
grep "error: gave up after" "$work/err" | grep -q "restarting" && { bad "out of restarts: still says restarting"; cat "$work/err"; }
grep '"error"' "$work/d4/pileprep-summary-rank0.json" | grep -q "restarting" && bad "out of restarts: the summary says restarting"
stop_server

# 4. The file changes between requests: If-Range makes the server send the new file whole; the shard
#    restarts and the output is exactly the new file's.
cp "$root/data/samples/01.jsonl.zst" "$work/new01"
start_server --plan 00.jsonl.zst=drop:300000 --change "00.jsonl.zst=2:$work/new01"
"$PILEPREP" --url "$url" --files 0 --output-dir "$work/e" --retry-wait 0.05 2>"$work/err" || bad "changed file: failed"
for ext in bin idx; do
  cmp -s "$work/ref/my-gpt3_01_text_document.$ext" "$work/e/my-gpt3_00_text_document.$ext" ||
    bad "changed file: .$ext is not the new file's"
done
grep -q "the file changed" "$work/err" || { bad "changed file not reported"; cat "$work/err"; }
stop_server
# The shard's seconds count every attempt, as its bytes_downloaded does: the first attempt here
# takes 2.8 s or more (1,400,000 bytes at 500,000 B/s before the drop), the second 1.5 s or more.
# The row showed the last attempt's alone.
start_server --rate 500000 --plan 00.jsonl.zst=drop:1400000 --change "00.jsonl.zst=2:$work/new01"
"$PILEPREP" --url "$url" --files 0 --output-dir "$work/e2" --retry-wait 0.05 -q 2>"$work/err" \
  || bad "changed file, slow server: failed"
/usr/bin/python3 - "$work/e2/pileprep-summary-rank0.json" <<'PY' || bad "restarted shard: seconds of the last attempt only"
import json, sys
shard = json.load(open(sys.argv[1]))["shards"][0]
seconds = shard["seconds"]
print("restarted shard:", shard["restarts"], "restart(s),", seconds, "s")
sys.exit(0 if shard["restarts"] == 1 and seconds >= 4.0 else 1)
PY
stop_server

# 5. --keep-downloads keeps complete compressed shards; a rerun with --force reads them, not the server.
start_server --plan 01.jsonl.zst=drop:100000
"$PILEPREP" --url "$url" --files 0-1 --output-dir "$work/f" --keep-downloads "$work/cache" --retry-wait 0.05 -q 2>/dev/null ||
  bad "keep-downloads: failed"
cmp -s "$work/src/00.jsonl.zst" "$work/cache/00.jsonl.zst" || bad "cache 00 differs"
cmp -s "$work/src/01.jsonl.zst" "$work/cache/01.jsonl.zst" || bad "cache 01 differs"
n_before=$(wc -l <"$work/log")
"$PILEPREP" --url "$url" --files 0-1 --output-dir "$work/f" --keep-downloads "$work/cache" --force -q 2>/dev/null ||
  bad "keep-downloads rerun: failed"
[[ $(wc -l <"$work/log") -eq $n_before ]] || bad "rerun downloaded again despite the cache"
same_outputs "keep-downloads" "$work/f" 00 01
# The dry run names the kept copy as the input the run reads (it named the URL).
"$PILEPREP" --url "$url" --files 0-1 --output-dir "$work/f-dry" --keep-downloads "$work/cache" --dry-run \
  >"$work/plan" 2>&1 || bad "keep-downloads dry run: failed"
grep -qF "$work/cache/00.jsonl.zst (kept from ${url}00.jsonl.zst: what the run reads, not downloaded) -> " "$work/plan" ||
  { bad "keep-downloads dry run: the kept copy not named as the input"; cat "$work/plan"; }
[[ $(wc -l <"$work/log") -eq $n_before ]] || bad "the dry run asked the server"
# A kept copy is read only for the source it came from (DIR/NN.jsonl.zst.pileprep-source): with another
# --url (--force after a change of source) the shard is downloaded again and its copy replaced, and
# back on the first source, again.
mkdir -p "$work/src/other" "$work/o"
cp "$work/src/00.jsonl.zst" "$work/src/other/01.jsonl.zst"
"$PILEPREP" --url "${url}other/" --files 1 --output-dir "$work/o" --keep-downloads "$work/cache" \
  --force >/dev/null 2>"$work/err" || { bad "another source: failed"; cat "$work/err"; }
grep -q "01.jsonl.zst: the copy kept in $work/cache is not known to come from ${url}other/01.jsonl.zst: downloading it again" "$work/err" ||
  { bad "another source: the kept copy's replacement not said"; cat "$work/err"; }
cmp -s "$work/src/other/01.jsonl.zst" "$work/cache/01.jsonl.zst" || bad "another source: kept copy not replaced"
cmp -s "$work/ref/my-gpt3_00_text_document.bin" "$work/o/my-gpt3_01_text_document.bin" ||
  bad "another source: made from the copy the first source left"
"$PILEPREP" --url "$url" --files 1 --output-dir "$work/o" --keep-downloads "$work/cache" --force -q \
  2>"$work/err" || { bad "back on the first source: failed"; cat "$work/err"; }
cmp -s "$work/src/01.jsonl.zst" "$work/cache/01.jsonl.zst" || bad "back on the first source: kept copy not replaced"
same_outputs "back on the first source" "$work/o" 01
ls "$work/cache" | grep -q 'pileprep-tmp' && bad "another source: a temporary is left: $(ls "$work/cache")"
# A kept download that turns out damaged (cut short, as a close-delimited answer can be) fails its
# shard and is removed, so that the next run downloads it again instead of failing on it forever.
truncate -s 300000 "$work/cache/01.jsonl.zst"
"$PILEPREP" --url "$url" --files 1 --output-dir "$work/f" --keep-downloads "$work/cache" --force \
  >/dev/null 2>"$work/err"
[[ $? -eq 1 ]] || bad "damaged kept download: want exit 1"
grep -q "removed the kept download .*01.jsonl.zst: its bytes are damaged" "$work/err" ||
  { bad "damaged kept download not removed"; cat "$work/err"; }
[[ -e "$work/cache/01.jsonl.zst" ]] && bad "damaged kept download still there"
"$PILEPREP" --url "$url" --files 1 --output-dir "$work/f" --keep-downloads "$work/cache" --force \
  --retry-wait 0.05 -q 2>/dev/null || bad "rerun after a damaged kept download failed"
cmp -s "$work/src/01.jsonl.zst" "$work/cache/01.jsonl.zst" || bad "kept download not fetched again"
same_outputs "keep-downloads again" "$work/f" 01
# Only the copy that was read: another job's download that replaced it meanwhile (here the shim
# renames a good copy over it right after this run opened it) stays.
cp "$work/src/01.jsonl.zst" "$work/fresh01"
truncate -s 300000 "$work/cache/01.jsonl.zst"
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" LD_PRELOAD=$SHIM \
  PILEPREP_FAULT_REPLACE_AFTER_OPEN="$work/cache/01.jsonl.zst:$work/fresh01" \
  "$PILEPREP" --url "$url" --files 1 --output-dir "$work/f" --keep-downloads "$work/cache" --force \
  >/dev/null 2>"$work/err"
[[ $? -eq 1 ]] || bad "damaged kept download replaced as read: want exit 1"
[[ ! -e "$work/fresh01" ]] || bad "damaged kept download replaced as read: the shim did not replace it"
cmp -s "$work/src/01.jsonl.zst" "$work/cache/01.jsonl.zst" ||
  bad "damaged kept download replaced as read: the new copy was removed"
grep -q "the kept download $work/cache/01.jsonl.zst read by this run is damaged, but another job replaced it meanwhile: the new copy stays" "$work/err" ||
  { bad "damaged kept download replaced as read: not said"; cat "$work/err"; }
grep -q "removed the kept download" "$work/err" && bad "damaged kept download replaced as read: said removed"
# Not for failures that are not the bytes' (a wrong --json-keys: every record lacks the key, and
# --max-bad-records 0 fails the shard), and never a local source directory's own files.
"$PILEPREP" --url "$url" --files 1 --output-dir "$work/f" --keep-downloads "$work/cache" --force \
  --json-keys nosuchkey --max-bad-records 0 -q >/dev/null 2>&1 && bad "wrong --json-keys did not fail"
cmp -s "$work/src/01.jsonl.zst" "$work/cache/01.jsonl.zst" || bad "a bad-records failure removed a good kept download"
mkdir -p "$work/local"
cp "$work/src/00.jsonl.zst" "$work/local/00.jsonl.zst"
truncate -s 300000 "$work/local/00.jsonl.zst"
"$PILEPREP" --url "$work/local" --files 0 --output-dir "$work/lo" --keep-downloads "$work/local" -q \
  >/dev/null 2>&1 && bad "a damaged local shard did not fail"
[[ -e "$work/local/00.jsonl.zst" ]] || bad "a local source file was removed as a damaged kept download"
stop_server
# Two jobs with their own outputs sharing one --keep-downloads directory: while the first keeps
# 01 (its answer stalls for 15 s), the second finds the kept file locked and only reads the shard;
# both shards' outputs and the kept copy are whole.
rm -f "$work/cache/01.jsonl.zst"
start_server --plan 01.jsonl.zst=stall:100000:15
"$PILEPREP" --url "$url" --files 1 --output-dir "$work/k1" --keep-downloads "$work/cache" \
  --retry-wait 0.05 -q >/dev/null 2>"$work/err-k1" &
k1=$!
for _ in $(seq 200); do [[ -s "$work/cache/01.jsonl.zst.pileprep-tmp" ]] && break; sleep 0.05; done
[[ -s "$work/cache/01.jsonl.zst.pileprep-tmp" ]] || bad "shared --keep-downloads: the first job keeps nothing"
"$PILEPREP" --url "$url" --files 1 --output-dir "$work/k2" --keep-downloads "$work/cache" \
  --retry-wait 0.05 >/dev/null 2>"$work/err" &&
  grep -q "01.jsonl.zst: another process is keeping it in $work/cache (pid $k1 on .*); this run reads it without keeping a copy" "$work/err" ||
  { bad "shared --keep-downloads: the second job"; cat "$work/err"; }
wait "$k1" || { bad "shared --keep-downloads: the first job failed"; cat "$work/err-k1"; }
cmp -s "$work/src/01.jsonl.zst" "$work/cache/01.jsonl.zst" || bad "shared --keep-downloads: the kept copy differs"
same_outputs "shared --keep-downloads, first" "$work/k1" 01
same_outputs "shared --keep-downloads, second" "$work/k2" 01
ls "$work/cache" | grep -q 'pileprep-tmp\|pileprep-lock' && bad "shared --keep-downloads: a temporary or lock is left: $(ls "$work/cache")"
stop_server

# 6. Secrets stay out of the logs.
start_server
"$PILEPREP" --url "$url" --files 5 --output-dir "$work/g" --header "Authorization: Bearer sekrit-token" \
  >"$work/out" 2>"$work/err"
if grep -q sekrit "$work/out" "$work/err" "$work/g/pileprep-summary-rank0.json"; then bad "header value printed"; fi
# A repeated --header sends every header, not just the last.
"$PILEPREP" --url "$url" --files 0 --output-dir "$work/h" --header "X-Pileprep-A: one" \
  --header "X-Pileprep-B: two" -q >/dev/null 2>&1 || bad "repeated --header: run failed"
grep -q '"test_headers": \["X-Pileprep-A: one", "X-Pileprep-B: two"\]' "$work/log" \
  || bad "repeated --header: not every header reached the server"
# A --url with a query (an Azure container's SAS token): each file name goes into the path and the
# query after it (appended to the whole URL, the name became part of the query's last value).
"$PILEPREP" --url "${url}?sv=2024&sig=ab%2Fc" --files 0 --output-dir "$work/q" -q >/dev/null 2>"$work/err" \
  || { bad "--url with a query: run failed"; cat "$work/err"; }
same_outputs "--url with a query" "$work/q" 00
grep -q '"path": "00.jsonl.zst".*"query": "sv=2024&sig=ab%2Fc"' "$work/log" \
  || bad "--url with a query: the server did not get 00.jsonl.zst?sv=2024&sig=ab%2Fc: $(tail -2 "$work/log")"
stop_server

# 7. SIGTERM while a shard waits to retry (503 asking for 30 s): the job stops at once, exit 143, with
# its summary. The download thread once deadlocked there and only SIGKILL ended the process.
# The next shard's download, begun ahead and retrying too, is counted in its row (it read 0
# retries under log lines of its retries).
start_server --plan 00.jsonl.zst=503:30 --plan 01.jsonl.zst=503:30
"$PILEPREP" --url "$url" --files 0,1 --shards-at-once 1 --output-dir "$work/t" >"$work/out" 2>"$work/err" &
pid=$!
for _ in $(seq 200); do
  grep -q "00.jsonl.zst.*retry 1" "$work/err" && grep -q "01.jsonl.zst.*retry 1" "$work/err" && break
  sleep 0.05
done
grep -q "00.jsonl.zst.*retry 1" "$work/err" && grep -q "01.jsonl.zst.*retry 1" "$work/err" ||
  bad "SIGTERM in a retry wait: the 503s were not retried: $(cat "$work/err")"
kill -TERM $pid
for _ in $(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
if kill -0 $pid 2>/dev/null; then
  bad "SIGTERM in a retry wait: still running 10 s later"; kill -KILL $pid
fi
wait $pid; rc=$?
[[ $rc -eq 143 ]] || { bad "SIGTERM in a retry wait: exit $rc, want 143"; cat "$work/err"; }
[[ -f "$work/t/pileprep-summary-rank0.json" ]] || bad "SIGTERM in a retry wait: no summary"
/usr/bin/python3 - "$work/t/pileprep-summary-rank0.json" <<'PY' || bad "SIGTERM in a retry wait: the read-ahead shard's row"
import json, sys
sh = {s["shard"]: s for s in json.load(open(sys.argv[1]))["shards"]}
one = sh["01.jsonl.zst"]
assert one["status"] == "cancelled" and one["retries"] >= 1, one
assert "its download, begun ahead, stopped" in one["error"], one
PY
stop_server

# 8. A shard that fails at its first line (--max-bad-records 0) while its download stalls for 40 s:
# the failure ends it at once, not once the stalled read gives up.
{ printf 'not json\n'; zstd -q -d -c "$work/src/01.jsonl.zst"; } | zstd -q -c >"$work/src/03.jsonl.zst"
start_server --plan 03.jsonl.zst=stall:300000:40
started=$SECONDS
"$PILEPREP" --url "$url" --files 3 --output-dir "$work/st" --max-bad-records 0 >"$work/out" 2>"$work/err"
rc=$?
[[ $rc -eq 1 ]] || { bad "failed shard, stalled download: exit $rc, want 1"; cat "$work/err"; }
grep -q "more than 0 bad records" "$work/err" || bad "failed shard, stalled download: $(cat "$work/err")"
(( SECONDS - started < 20 )) || bad "failed shard, stalled download: took $((SECONDS - started)) s"
stop_server

[[ $fail -eq 0 ]] && echo "ok: fetch"
exit $fail
