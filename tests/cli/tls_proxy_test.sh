#!/usr/bin/env bash
# TLS certificate verification and proxies for the shard job, on 127.0.0.1 only: the sample shards served
# over HTTPS by tests/testing/fault_server.py --tls, with self-signed certificates made here by the
# openssl CLI (one for IP:127.0.0.1, one only for DNS:example.invalid), and a forward proxy
# (tests/testing/forward_proxy.py: absolute-URI GET for http://, CONNECT for https://) that logs every
# request. Every success must equal a local run byte for byte; every failure must exit 1, say why, and
# publish nothing. Usage: tls_proxy_test.sh PILEPREP SHIM (SHIM: tests/shim/fs_fault_shim.cc, built)
set -uo pipefail
PILEPREP=$1
SHIM=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
# ld.so splits LD_PRELOAD at spaces and colons: the shim is preloaded from a copy in $work, so a
# clone whose path has a space still gets it.
cp "$SHIM" "$work/fault_shim.so" && SHIM=$work/fault_shim.so
pids=()
# Helpers die with this script even when it is SIGKILLed (--parent-pid: PR_SET_PDEATHSIG), and their
# output goes to files: an orphan holding CTest's pipe would keep CTest waiting after a failure.
stop_helpers() { for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; pids=(); }
trap 'stop_helpers; rm -rf "$work"' EXIT
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; [[ -f "$work/err" ]] && tail -5 "$work/err"; fail=1; }
# The proxy settings of whoever runs the tests must not route these loopback downloads: each check
# sets the variables it is about, and nothing else is set.
unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY all_proxy ALL_PROXY no_proxy NO_PROXY

expect() {  # name want_rc want_stderr_regex -- command...
  local name=$1 want_rc=$2 want=$3; shift 4
  "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  if [[ $rc -ne $want_rc ]]; then bad "$name: exit $rc, want $want_rc"; return 1; fi
  if [[ -n "$want" ]] && ! grep -qE -- "$want" "$work/err"; then bad "$name: stderr lacks /$want/"; return 1; fi
  ok "$name"
}
same_as_local() {  # name dir: both shards byte-identical to the local run, no temporaries
  local n ext
  for n in 00 01; do
    for ext in bin idx; do
      cmp -s "$work/ref/my-gpt3_${n}_text_document.$ext" "$2/my-gpt3_${n}_text_document.$ext" ||
        { bad "$1: shard $n .$ext missing or different from the local run"; return; }
    done
  done
  if [[ -n $(find "$2" -name '*pileprep-tmp*') ]]; then bad "$1: temporaries left"; return; fi
  ok "$1"
}
nothing_published() {  # name dir: no .bin/.idx and no temporaries, only the summary
  if [[ -n $(find "$2" -name '*.bin' -o -name '*.idx' -o -name '*pileprep-tmp*') ]]; then
    bad "$1: $(ls "$2")"
  else ok "$1"; fi
}
start() {  # name script args...: a loopback helper; sets $port
  local name=$1 script=$2; shift 2
  /usr/bin/python3 "$root/tests/testing/$script" --port-file "$work/$name.port" --parent-pid $$ "$@" \
    </dev/null >>"$work/$name.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do [[ -s "$work/$name.port" ]] && break; sleep 0.1; done
  [[ -s "$work/$name.port" ]] || { echo "FAIL: $name did not start"; cat "$work/$name.out"; exit 1; }
  port=$(cat "$work/$name.port")
}
cert() {  # name subjectAltName: a self-signed leaf certificate (no CA) and its key
  command -v openssl >/dev/null || { echo "FAIL: the openssl CLI is missing (scripts/setup.sh installs it)"; exit 1; }
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=pileprep test $1" \
    -addext "subjectAltName=$2" -addext "basicConstraints=critical,CA:FALSE" \
    -keyout "$work/$1.key" -out "$work/$1.pem" >"$work/openssl.out" 2>&1 ||
    { echo "FAIL: openssl req for $1"; cat "$work/openssl.out"; exit 1; }
}
new_lines() { tail -n +"$(( $2 + 1 ))" "$1" 2>/dev/null; }  # file n: the lines after the first n
lines() { if [[ -f "$1" ]]; then wc -l <"$1"; else echo 0; fi; }

mkdir -p "$work/src"
cp "$root/data/samples/00.jsonl.zst" "$root/data/samples/01.jsonl.zst" "$work/src/"
"$PILEPREP" --url "$work/src" --files 0-1 --output-dir "$work/ref" -q 2>/dev/null || bad "local reference run"
cert ip IP:127.0.0.1
cert dns DNS:example.invalid
start tls fault_server.py --root "$work/src" --log "$work/tls.log" --tls "$work/ip.pem" "$work/ip.key"
https_url="https://127.0.0.1:$port/"
tls_port=$port
start wronghost fault_server.py --root "$work/src" --log "$work/wronghost.log" \
  --tls "$work/dns.pem" "$work/dns.key"
wronghost_url="https://127.0.0.1:$port/"
start plain fault_server.py --root "$work/src" --log "$work/plain.log"
http_url="http://127.0.0.1:$port/"
# Redirectors: an HTTPS server sending every request on to the plain HTTP one, and one sending it on
# to the HTTPS one (the certificate of both is ip.pem).
start down fault_server.py --root "$work/src" --log "$work/down.log" --tls "$work/ip.pem" "$work/ip.key" \
  --redirect-to "$http_url"
down_url="https://127.0.0.1:$port/"
start up fault_server.py --root "$work/src" --log "$work/up.log" --tls "$work/ip.pem" "$work/ip.key" \
  --redirect-to "$https_url"
up_url="https://127.0.0.1:$port/"
start proxy forward_proxy.py --log "$work/proxy.log"
proxy="http://127.0.0.1:$port"
# A port nothing listens on: bound, then closed (another process could take it within the second
# this test needs it; unlikely).
closed_port=$(/usr/bin/python3 -c \
  'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
run=("$PILEPREP" --files 0-1 --retry-wait 0.05 --retries 1)
# libcurl's default CA bundle (Debian: ca-certificates, which scripts/setup.sh installs): without it
# every check below that expects a verification verdict would get "cannot read the bundle" instead.
system_ca=$(curl-config --ca 2>/dev/null) || true
[[ -n $system_ca ]] || system_ca=/etc/ssl/certs/ca-certificates.crt
[[ -r $system_ca ]] || bad "no system CA bundle at $system_ca (scripts/setup.sh installs ca-certificates)"

# ---------------------------------------------------------------- TLS verification
# The reasons after "curl: " are libcurl's and OpenSSL's words (libcurl4-openssl-dev); the hint in
# parentheses is pileprep's.
hint="\(TLS certificate verification failed: .*--ca-file FILE.*--insecure skips the check, for testing only\)"
want="^pileprep: error: ${https_url}00\.jsonl\.zst: curl: SSL certificate problem: self.signed certificate $hint"
expect "HTTPS: a self-signed certificate is rejected by default, naming the shard and the cause" 1 "$want" -- \
  "${run[@]}" --url "$https_url" --output-dir "$work/a"
nothing_published "HTTPS: nothing is published after a verification failure" "$work/a"
grep -q "retry 1" "$work/err" && bad "HTTPS: a verification failure was retried" ||
  ok "HTTPS: a verification failure is not retried"
[[ ! -s "$work/tls.log" ]] && ok "HTTPS: no request goes over the unverified connection" ||
  bad "HTTPS: the server got requests: $(cat "$work/tls.log")"
[[ $(grep -c '"status": "FAILED"' "$work/a/pileprep-summary-rank0.json") -eq 2 ]] &&
  ok "HTTPS: the summary JSON has both shards FAILED" || bad "HTTPS: summary JSON"

# A machine without that bundle (a minimal Debian: libcurl4 only recommends ca-certificates), shown
# by the shim hiding the file: the message says what to install, not to mend a --ca-file never given.
want="^pileprep: error: ${https_url}00\.jsonl\.zst: curl: error setting certificate file: ${system_ca//./\\.}"
want+=" \(the system's CA certificates could not be read: .*apt-get install ca-certificates.*--ca-file FILE\)"
# (Under ASan the shim loads before its runtime: verify_asan_link_order=0, as hardening_test.sh.)
expect "HTTPS without the system's CA bundle: the error says to install ca-certificates" 1 "$want" -- \
  env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" LD_PRELOAD="$SHIM" \
  PILEPREP_FAULT_MISSING="$system_ca" "${run[@]}" --url "$https_url" --output-dir "$work/a2"
nothing_published "HTTPS without the system's CA bundle: nothing is published" "$work/a2"
grep -q "retry 1" "$work/err" && bad "HTTPS without the system's CA bundle: retried" ||
  ok "HTTPS without the system's CA bundle: not retried"

expect "HTTPS --ca-file with the server's certificate: exit 0" 0 "" -- \
  "${run[@]}" --url "$https_url" --output-dir "$work/b" --ca-file "$work/ip.pem"
same_as_local "HTTPS --ca-file: outputs identical to the local run" "$work/b"
expect "HTTPS --insecure: exit 0" 0 "" -- "${run[@]}" --url "$https_url" --output-dir "$work/c" --insecure
same_as_local "HTTPS --insecure: outputs identical to the local run" "$work/c"

# curl 8 writes "hostname" where 7.88 writes "host name".
want="^pileprep: error: ${wronghost_url}00\.jsonl\.zst: curl: SSL: no alternative certificate subject name"
want+=" matches target host ?name '127\.0\.0\.1' $hint"
expect "HTTPS: a trusted certificate for another host name is rejected" 1 "$want" -- \
  "${run[@]}" --url "$wronghost_url" --output-dir "$work/d" --ca-file "$work/dns.pem"
nothing_published "HTTPS: nothing is published after a host name mismatch" "$work/d"
[[ ! -s "$work/wronghost.log" ]] && ok "HTTPS: no request goes to the wrong host" ||
  bad "HTTPS wrong host: the server got requests"
# The same certificate is accepted when the host name is not checked: the mismatch above was the host.
expect "HTTPS --insecure also skips the host name check" 0 "" -- \
  "${run[@]}" --url "$wronghost_url" --output-dir "$work/d2" --insecure
same_as_local "HTTPS --insecure with the other host's certificate: outputs identical" "$work/d2"
# A --ca-file that cannot be read is refused before any work (it failed each shard in turn, exit 1);
# one that can be read but holds no certificate fails the shards, named as libcurl finds it.
expect "HTTPS --ca-file naming a missing file is a set-up error" 2 \
  "--ca-file $work/no-such.pem: no such file \(it must name a readable PEM file of CA certificates\)" -- \
  "${run[@]}" --url "$https_url" --output-dir "$work/a3" --ca-file "$work/no-such.pem"
[[ ! -e $work/a3 ]] || bad "HTTPS: a missing --ca-file made the output directory"
echo "not a certificate" >"$work/not-pem.pem"
expect "HTTPS --ca-file naming a file of no certificates fails clearly" 1 \
  "--ca-file must name a readable PEM file of CA certificates" -- \
  "${run[@]}" --url "$https_url" --output-dir "$work/a2" --ca-file "$work/not-pem.pem"
nothing_published "HTTPS: nothing is published without a CA file" "$work/a2"

# ---------------------------------------------------------------- redirects
# An https URL is followed to https only: a redirect to plain http would take the shard's bytes
# unauthenticated (and the --header values libcurl keeps on a redirect) while the run reports the
# https URL. It was followed, and the shards made from the plain server's bytes.
n=$(lines "$work/plain.log")
expect "HTTPS redirected to plain HTTP is refused, naming the shard" 1 \
  "^pileprep: error: ${down_url}00\.jsonl\.zst: curl: Unsupported protocol \(an https download follows redirects to https only: .*plain http" -- \
  "${run[@]}" --url "$down_url" --output-dir "$work/r1" --ca-file "$work/ip.pem" --header "X-Pileprep-Key: k"
nothing_published "HTTPS redirected to plain HTTP: nothing is published" "$work/r1"
[[ $(lines "$work/plain.log") -eq $n ]] && ok "HTTPS redirected to plain HTTP: no request went over plain HTTP" ||
  bad "HTTPS redirected to plain HTTP: the plain server got: $(new_lines "$work/plain.log" "$n")"
grep -q '"status": 302' "$work/down.log" && ok "HTTPS redirected to plain HTTP: the redirect was sent" ||
  bad "HTTPS redirected to plain HTTP: the redirector got no request"
expect "HTTPS redirected to HTTPS is followed" 0 "" -- \
  "${run[@]}" --url "$up_url" --output-dir "$work/r2" --ca-file "$work/ip.pem"
same_as_local "HTTPS redirected to HTTPS: outputs identical to the local run" "$work/r2"

# A 401/403 from another host that a redirect led to: libcurl does not send the Authorization header
# there (as browsers do not), so the message says that, where it asked for the header already given.
start gated fault_server.py --root "$work/src" --log "$work/gated.log" --plan 00.jsonl.zst=403,403,403,403
gated_port=$port
start away fault_server.py --root "$work/src" --log "$work/away.log" \
  --redirect-to "http://localhost:$gated_port/"
expect "a 403 after a redirect to another host names the redirect" 1 \
  "00\.jsonl\.zst: HTTP 403 .*\(the server redirected it to another host, localhost:$gated_port, which libcurl does not send the Authorization header to" -- \
  "${run[@]}" --url "http://127.0.0.1:$port/" --output-dir "$work/r3" --header "Authorization: Bearer t"
grep -q "a gated dataset needs" "$work/err" && bad "a 403 after a redirect: asks for the header given"
expect "a 403 without a redirect to the header given says it was refused" 1 \
  "00\.jsonl\.zst: HTTP 403 .*\(the Authorization header given was refused: a wrong or expired token" -- \
  "${run[@]}" --url "http://127.0.0.1:$gated_port/" --output-dir "$work/r4" --header "Authorization: Bearer t"
grep -q "a gated dataset needs" "$work/err" && bad "a 403 to the header given: asks for a header"
expect "a 403 without a header asks for one" 1 \
  "00\.jsonl\.zst: HTTP 403 .*\(a gated dataset needs --header" -- \
  "${run[@]}" --url "http://127.0.0.1:$gated_port/" --output-dir "$work/r5"
# "Authorization:" with nothing after it (a script's $TOKEN unset) sends no header (libcurl's rule):
# nothing was refused, so the message asks for one.
expect "a 403 to an empty Authorization header asks for one" 1 \
  "00\.jsonl\.zst: HTTP 403 .*\(a gated dataset needs --header" -- \
  "${run[@]}" --url "http://127.0.0.1:$gated_port/" --output-dir "$work/r6" --header "Authorization: "

# ---------------------------------------------------------------- proxies (libcurl reads the environment)
# libcurl does not exempt 127.0.0.1 from a proxy unless no_proxy says so: these go through it.
n=$(lines "$work/proxy.log")
expect "http_proxy: the download succeeds through the proxy" 0 "" -- \
  env http_proxy="$proxy" "${run[@]}" --url "$http_url" --output-dir "$work/e1"
same_as_local "http_proxy: outputs identical to the local run" "$work/e1"
new_lines "$work/proxy.log" "$n" >"$work/seen"
if grep -qF "{\"method\": \"GET\", \"target\": \"${http_url}00.jsonl.zst\"}" "$work/seen" &&
   grep -qF "{\"method\": \"GET\", \"target\": \"${http_url}01.jsonl.zst\"}" "$work/seen"; then
  ok "http_proxy: the proxy log has both shards' requests"
else bad "http_proxy: the proxy did not see the requests: $(cat "$work/seen")"; fi

n=$(lines "$work/proxy.log")
expect "https_proxy --ca-file: the download succeeds through a CONNECT tunnel" 0 "" -- \
  env https_proxy="$proxy" "${run[@]}" --url "$https_url" --output-dir "$work/e2" --ca-file "$work/ip.pem"
same_as_local "https_proxy: outputs identical to the local run" "$work/e2"
new_lines "$work/proxy.log" "$n" >"$work/seen"
grep -qF "{\"method\": \"CONNECT\", \"target\": \"127.0.0.1:$tls_port\"}" "$work/seen" &&
  ok "https_proxy: the proxy log has the CONNECT" || bad "https_proxy: no CONNECT: $(cat "$work/seen")"
# Through the tunnel the origin's certificate is still verified.
n=$(lines "$work/proxy.log")
expect "https_proxy: the certificate is still verified through the tunnel" 1 \
  "TLS certificate verification failed" -- \
  env https_proxy="$proxy" "${run[@]}" --url "$https_url" --output-dir "$work/e3"
nothing_published "https_proxy: nothing is published after a verification failure" "$work/e3"
new_lines "$work/proxy.log" "$n" >"$work/seen"
grep -qF '"CONNECT"' "$work/seen" &&
  ok "https_proxy: that failure was through the tunnel" || bad "https_proxy: the failing run did not use the proxy"

# A proxy that is down: the message names the proxy (never its credentials); nothing is published.
want="^pileprep: error: ${http_url}00\.jsonl\.zst: curl: Failed to connect to 127\.0\.0\.1 port $closed_port"
want+=".*, via the proxy http://127\.0\.0\.1:$closed_port from http_proxy \(gave up after 1 retries"
expect "http_proxy down: the shard fails naming the proxy and the variable" 1 "$want" -- \
  env http_proxy="http://user:proxysecret9@127.0.0.1:$closed_port" "${run[@]}" --url "$http_url" \
  --output-dir "$work/e4"
nothing_published "http_proxy down: nothing is published" "$work/e4"
if grep -q proxysecret9 "$work/err" "$work/out" "$work/e4/pileprep-summary-rank0.json"; then
  bad "http_proxy down: the proxy's password is printed"
else ok "http_proxy down: the proxy's credentials are not printed"; fi

# no_proxy exempts the host: the dead proxy is not used.
expect "no_proxy=127.0.0.1 bypasses http_proxy" 0 "" -- \
  env http_proxy="http://127.0.0.1:$closed_port" no_proxy=127.0.0.1 "${run[@]}" --url "$http_url" \
  --output-dir "$work/e5"
same_as_local "no_proxy: outputs identical to the local run" "$work/e5"

[[ $fail -eq 0 ]] && echo "ok: tls and proxies"
exit $fail
