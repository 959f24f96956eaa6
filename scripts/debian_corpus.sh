#!/usr/bin/env bash
# Builds a larger multilingual benchmark corpus than data/samples from Debian packages and prints its
# path: the manual pages in 12 languages (de fr ja ru pl es it pt zh uk nl cs) and in English, and the
# Debian Reference in 7 (de fr ja zh-cn es it pt), one document per page, HTML tags stripped, shuffled
# (seed 7). Debian 12: 6,344 documents, 81.5 MB of text. Cached in ~/.cache/pileprep/debian-corpus.
#
#   PILEPREP_BENCH_CORPUS=$(scripts/debian_corpus.sh) build/bin/tokenize_bench
#   PILEPREP_BENCH_CORPUS=$(scripts/debian_corpus.sh) scripts/bench.sh
#
# Needs apt-get (Debian's archive: `apt-get download`, no installation) and zstd. Not used by tests.
set -euo pipefail
# Its own set-up (python3, zstd): in `$(scripts/debian_corpus.sh) scripts/bench.sh` it runs first.
"$(dirname "$0")/setup.sh" >&2
dir=${XDG_CACHE_HOME:-$HOME/.cache}/pileprep/debian-corpus
out=$dir/corpus.jsonl.zst
if [[ ! -s $out ]]; then
  mkdir -p "$dir/debs" "$dir/root"
  packages=(manpages manpages-dev manpages-de manpages-fr manpages-ja manpages-ru manpages-pl
            manpages-es manpages-it manpages-pt manpages-zh manpages-uk manpages-nl manpages-cs
            debian-reference-de debian-reference-fr debian-reference-ja debian-reference-zh-cn
            debian-reference-es debian-reference-it debian-reference-pt)
  # apt-get download needs the package lists, which images often ship without (and setup.sh
  # updates only when it installs something): fetched when the first package has no candidate.
  if ! apt-cache policy manpages 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    # As setup.sh does it: root or sudo (said, not a bare "sudo: command not found"), and the
    # proxy variables passed through sudo's env_reset.
    update=(env)
    for v in http_proxy https_proxy HTTP_PROXY HTTPS_PROXY no_proxy NO_PROXY; do
      if [[ -n ${!v:-} ]]; then update+=("$v=${!v}"); fi
    done
    update+=(apt-get update)
    if [[ $(id -u) -ne 0 ]]; then
      if ! command -v sudo >/dev/null; then
        echo "debian_corpus: the package lists need an apt-get update, which needs root: run this" \
             "as root, or install sudo, or run apt-get update yourself" >&2
        exit 1
      fi
      update=(sudo "${update[@]}")
    fi
    "${update[@]}" >&2
  fi
  (cd "$dir/debs" && apt-get download "${packages[@]}" >&2)
  for deb in "$dir"/debs/*.deb; do dpkg-deb -x "$deb" "$dir/root"; done
  /usr/bin/python3 - "$dir/root" "$dir/corpus.jsonl" <<'PY'
import gzip, html, json, os, random, re, sys
root, out = sys.argv[1], sys.argv[2]
docs = []
for dirpath, _, names in sorted(os.walk(root)):
    for name in sorted(names):
        path = os.path.join(dirpath, name)
        if os.path.islink(path) or name.endswith(('.png', '.svg', '.jpg', '.css', '.js')):
            continue
        data = open(path, 'rb').read()
        if name.endswith('.gz'):
            data = gzip.decompress(data)
        try:
            text = data.decode('utf-8')
        except UnicodeDecodeError:
            continue
        if name.endswith(('.html', '.htm')):
            text = re.sub(r'<script.*?</script>|<style.*?</style>', '', text, flags=re.S)
            text = html.unescape(re.sub(r'<[^>]+>', '', text))
        if len(text) >= 50:
            docs.append(text)
random.seed(7)
random.shuffle(docs)
with open(out, 'w') as f:
    for text in docs:
        f.write(json.dumps({"text": text, "meta": {"pile_set_name": "Debian"}}) + "\n")
print(f"{len(docs)} documents, {sum(len(t.encode()) for t in docs) / 1e6:.1f} MB of text", file=sys.stderr)
PY
  zstd -q -f "$dir/corpus.jsonl" -o "$out"
  rm -rf "$dir/root" "$dir/corpus.jsonl"
fi
echo "$out"
