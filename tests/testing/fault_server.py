#!/usr/bin/python3
"""A loopback HTTP server with fault injection, for pileprep's download tests.

Serves the files of --root on 127.0.0.1 with an ephemeral port (written to --port-file once listening).
Supports Range (single "bytes=N-" / "bytes=N-M"), strong ETags, Last-Modified and If-Range, and per-file
fault plans: each request for FILE takes the next action of its plan (then behaves normally):

  --plan 00.jsonl.zst=503,drop:100000,drop:50000
      503[:S]   answer 503 with Retry-After: S (default 1; S = none: no Retry-After header)
      429[:S]   the same with 429
      500       answer 500                                      404      answer 404
      403       answer 403                                      408      answer 408
      drop:N    send the headers (full Content-Length) and N body bytes, then close the connection
      overlong:N  send the headers (the answer's true Content-Length or Content-Range), the body and
                N bytes more than they announce ("x"), then close the connection; with --chunked
                the N bytes go in the chunks, after the body, before the last chunk
      stall:N:S send N body bytes, then sleep S seconds, then close
      longer:N  announce a Content-Length N bytes more than the body, send the body, then close (a
                server or proxy that misstates the length)
      204       answer 204 No Content (no body, no Content-Length)
      202       answer 202 Accepted with an empty body, as a server still preparing the file may
      ok        answer normally
  --no-range          ignore Range (always 200 with the whole file), as some servers do
  --no-etag           send neither ETag nor Last-Modified
  --last-modified-only  send Last-Modified but never an ETag (as python -m http.server does)
  --ignore-if-range   answer a Range request with 206 even when If-Range names another version
  --no-etag-on-206    leave ETag out of 206 answers (Last-Modified stays)
  --no-validators-on-206  leave ETag and Last-Modified out of 206 answers
  --unknown-total     a size the server does not state: "bytes N-M/*" in 206 answers, and 416
                      answers without Content-Range (as a server streaming a file it is still
                      making, or a proxy that does not know the length, may answer)
  --cap-ranges N      answer every request with a 206 of at most N bytes, a request without Range
                      too (its first N bytes), as a server or cache that serves large files in parts
  --range-end-minus-one  206 answers state their range as "bytes START--1/..." (a broken end)
  --content-range-garbage  206 answers state their range as "bytes=START-END" (no total, the '='
                      of a request's Range header: unreadable)
  --content-encoding CODING  send "Content-Encoding: CODING" with 206 answers, or with every 200
                      and 206 answer when CODING ends in "!" (the "!" not sent), the bytes unchanged:
                      a server that ignores "Accept-Encoding: identity", or labels a .zst as zstd
  --redirect-to URL   answer every request 302 with Location: URL + the request's path (no body)
  --reason TEXT       the reason phrase of error answers (503, 429, 500, 408, 404, 403); Python
                      escapes: "\x1b" in TEXT is the byte 0x1B
  --vary-last-modified  a Last-Modified that differs from request to request (same ETag), as
                      mirrors behind one name may serve the same bytes with other file times
  --chunked           send bodies with Transfer-Encoding: chunked, no Content-Length (a drop sends
                      its N bytes, then closes without the last chunk)
  --chunked-first K   send the first K answers for each file chunked (as --chunked), later ones with
                      Content-Length, as a cache may stream a miss and then serve its copy
  --empty-error-bodies  answer 503, 429, 500, 408, 404 and 403 with no body (Content-Length: 0)
  --change FILE=K:ALT from the K-th request for FILE on (1-based), serve the bytes of ALT instead
                      (a new ETag and Last-Modified), as if the file changed on the server
  --rate BYTES        send bodies at about this many bytes per second (for kill-at-a-moment tests)
  --log FILE          one JSON line per request: path, range, if_range, accept_encoding, status,
                      bytes sent; written
                      when the answer ends (a client may see the end, or hang up, before the line is there)
  --tls CERT KEY      serve HTTPS with this certificate chain and key (PEM) instead of plain HTTP; the
                      handshake runs in the request's thread, so a client that rejects the certificate
                      just ends its connection
  --parent-pid PID    die with PID, which must be this server's parent (PR_SET_PDEATHSIG), so that a
                      killed test script or test binary never leaves the server running

Stops on SIGTERM.
"""
import argparse
import email.utils
import hashlib
import http.server
import os
import re
import socket
import ssl
import threading
import time

import loopback_serve


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--plan", action="append", default=[])
    ap.add_argument("--change", action="append", default=[])
    ap.add_argument("--no-range", action="store_true")
    ap.add_argument("--no-etag", action="store_true")
    ap.add_argument("--last-modified-only", action="store_true")
    ap.add_argument("--ignore-if-range", action="store_true")
    ap.add_argument("--vary-last-modified", action="store_true")
    ap.add_argument("--no-etag-on-206", action="store_true")
    ap.add_argument("--no-validators-on-206", action="store_true")
    ap.add_argument("--unknown-total", action="store_true")
    ap.add_argument("--cap-ranges", type=int, default=0)
    ap.add_argument("--range-end-minus-one", action="store_true")
    ap.add_argument("--content-range-garbage", action="store_true")
    ap.add_argument("--content-encoding")
    ap.add_argument("--redirect-to")
    ap.add_argument("--reason")
    ap.add_argument("--chunked", action="store_true")
    ap.add_argument("--chunked-first", type=int, default=0)
    ap.add_argument("--empty-error-bodies", action="store_true")
    ap.add_argument("--log")
    ap.add_argument("--rate", type=float, default=0)
    ap.add_argument("--parent-pid", type=int, default=0)
    ap.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    args = ap.parse_args()
    if args.parent_pid:
        loopback_serve.die_with_parent(args.parent_pid)

    plans = {}
    for p in args.plan:
        name, _, actions = p.partition("=")
        plans[name] = [a for a in actions.split(",") if a]
    changes = {}
    for c in args.change:
        name, _, rest = c.partition("=")
        k, _, alt = rest.partition(":")
        changes[name] = (int(k), alt)
    counts = {}
    lock = threading.Lock()
    log = loopback_serve.JsonLog(args.log)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def setup(self):
            if args.tls:
                self.request.do_handshake()  # raises for a client that rejects the certificate
            super().setup()

        def do_GET(self):
            self.handle_request(True)

        def do_HEAD(self):
            self.handle_request(False)

        def simple(self, status, retry_after=None, body=b""):
            if args.reason is not None:
                self.send_response(status, args.reason.encode().decode("unicode_escape"))
            else:
                self.send_response(status)
            if retry_after is not None:
                self.send_header("Retry-After", str(retry_after))
            if args.empty_error_bodies:
                body = b""
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def handle_request(self, with_body):
            name = self.path.split("?")[0].lstrip("/")
            rng = self.headers.get("Range")
            if_range = self.headers.get("If-Range")
            entry = {"path": name, "range": rng, "if_range": if_range,
                     "accept_encoding": self.headers.get("Accept-Encoding")}
            if "?" in self.path:  # logged when there is one: a test sees the client kept it
                entry["query"] = self.path.split("?", 1)[1]
            # Test headers (X-Pileprep-*) are logged so tests can see what the client sent.
            test_headers = sorted(f"{k}: {v}" for k, v in self.headers.items()
                                  if k.lower().startswith("x-pileprep-"))
            if test_headers:
                entry["test_headers"] = test_headers
            with lock:
                n = counts.get(name, 0) + 1
                counts[name] = n
                plan = plans.get(name, [])
                action = plan.pop(0) if plan else "ok"
            path = os.path.join(args.root, name)
            if name in changes and n >= changes[name][0]:
                path = changes[name][1]
            kind, *params = action.split(":")
            chunked = args.chunked or n <= args.chunked_first
            if args.redirect_to:
                entry["status"] = 302
                log(entry)
                self.send_response(302)
                self.send_header("Location", args.redirect_to.rstrip("/") + "/" + name)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if kind in ("503", "429"):
                entry["status"] = int(kind)
                log(entry)
                retry_after = params[0] if params else "1"
                return self.simple(int(kind), None if retry_after == "none" else retry_after,
                                   b"busy\n")
            if kind == "204":
                entry["status"] = 204
                log(entry)
                self.send_response(204)
                self.end_headers()
                return
            if kind == "202":
                entry["status"] = 202
                log(entry)
                return self.simple(202)
            if kind in ("500", "408", "404", "403") or not os.path.isfile(path):
                status = int(kind) if kind in ("500", "408", "403") else 404
                entry["status"] = status
                log(entry)
                return self.simple(status, body=b"no\n")
            with open(path, "rb") as f:
                data = f.read()
            etag = '"%s"' % hashlib.md5(data).hexdigest()
            mtime = email.utils.formatdate(1600000000 + int(hashlib.md5(data).hexdigest()[:6], 16)
                                           + (n if args.vary_last_modified else 0), usegmt=True)
            start, end = 0, len(data) - 1
            status = 200
            m = re.match(r"bytes=(\d+)-(\d*)$", rng or "")
            if m and not args.no_range:
                valid = if_range is None or if_range in (etag, mtime) or args.ignore_if_range
                if valid:
                    start = int(m.group(1))
                    if m.group(2):
                        end = min(end, int(m.group(2)))
                    if start >= len(data):
                        entry["status"] = 416
                        log(entry)
                        self.send_response(416)
                        if not args.unknown_total:
                            self.send_header("Content-Range", "bytes */%d" % len(data))
                        self.send_header("Content-Length", "0")
                        if not args.no_etag:  # as nginx does: a 416 names the file it judged
                            self.send_header("ETag", etag)
                            self.send_header("Last-Modified", mtime)
                        self.end_headers()
                        return
                    status = 206
            if args.cap_ranges and not args.no_range and status in (200, 206):
                status = 206
                end = min(end, start + args.cap_ranges - 1)
            body = data[start:end + 1]
            announced = len(body)  # what Content-Length (or the chunks' end) says
            if kind == "overlong":
                body += b"x" * int(params[0])
            self.send_response(status)
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.send_header("Content-Length",
                                 str(announced + (int(params[0]) if kind == "longer" else 0)))
            self.send_header("Accept-Ranges", "none" if args.no_range else "bytes")
            if not args.no_etag and not (status == 206 and args.no_validators_on_206):
                if not (status == 206 and args.no_etag_on_206) and not args.last_modified_only:
                    self.send_header("ETag", etag)
                self.send_header("Last-Modified", mtime)
            if status == 206 and args.content_range_garbage:
                self.send_header("Content-Range", "bytes=%d-%d" % (start, end))
            elif status == 206:
                self.send_header("Content-Range", "bytes %d-%d/%s" % (
                    start, -1 if args.range_end_minus_one else end,
                    "*" if args.unknown_total else len(data)))
            coding = args.content_encoding or ""
            if coding and (status == 206 or coding.endswith("!")):
                self.send_header("Content-Encoding", coding.rstrip("!"))
            self.end_headers()
            entry["status"] = status
            if not with_body:
                entry["sent"] = 0
                log(entry)
                return
            limit = len(body)
            sleep = 0
            if kind == "drop":
                limit = min(limit, int(params[0]))
            elif kind == "stall":
                limit = min(limit, int(params[0]))
                sleep = float(params[1])
            sent = 0
            try:
                step = 16384 if args.rate else 65536
                while sent < limit:
                    k = min(step, limit - sent)
                    if chunked:
                        self.wfile.write(b"%x\r\n" % k + body[sent:sent + k] + b"\r\n")
                    else:
                        self.wfile.write(body[sent:sent + k])
                    sent += k
                    if args.rate:
                        self.wfile.flush()
                        time.sleep(k / args.rate)
                if chunked and kind not in ("drop", "stall"):
                    self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass
            entry["sent"] = sent
            if kind in ("drop", "stall", "overlong", "longer"):
                entry["fault"] = action
            log(entry)
            if (limit < len(body) or kind in ("overlong", "longer")
                    or (chunked and kind in ("drop", "stall"))):
                if sleep:
                    time.sleep(sleep)
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    server = loopback_serve.QuietThreadingServer(("127.0.0.1", 0), Handler)
    if args.tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*args.tls)
        # No handshake in accept(): it would block the serving thread on a slow client; Handler.setup
        # does it in the request's thread, where a failure ends that connection alone.
        server.socket = context.wrap_socket(server.socket, server_side=True,
                                            do_handshake_on_connect=False)
    loopback_serve.serve(server, args.port_file)


if __name__ == "__main__":
    main()
