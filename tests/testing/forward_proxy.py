#!/usr/bin/python3
"""A minimal forward proxy on 127.0.0.1, for pileprep's proxy tests.

  GET http://127.0.0.1:PORT/path HTTP/1.1   (plain HTTP: the absolute URI a client sends to a proxy)
      is forwarded to the origin with its headers (less the hop-by-hop ones) and the answer streamed back;
  CONNECT 127.0.0.1:PORT HTTP/1.1           (HTTPS) opens a TCP tunnel to the origin; TLS runs end to
      end through it, so the client still verifies the origin's certificate.

Only 127.0.0.1 origins are served (403 otherwise): the tests must never reach another host.

  --port-file FILE    the ephemeral port, written once listening
  --log FILE          one JSON line per request, written when it arrives: method, target
  --parent-pid PID    die with PID (PR_SET_PDEATHSIG), as tests/testing/fault_server.py

Stops on SIGTERM.
"""
import argparse
import http.client
import http.server
import select
import socket
import urllib.parse

import loopback_serve

# Headers that concern one connection, not the request (RFC 9110 7.6.1), plus the proxy's own.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate",
              "te", "trailer", "transfer-encoding", "upgrade"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log")
    ap.add_argument("--parent-pid", type=int, default=0)
    args = ap.parse_args()
    if args.parent_pid:
        loopback_serve.die_with_parent(args.parent_pid)
    log = loopback_serve.JsonLog(args.log)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def refuse(self, status, why):
            body = (why + "\n").encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self.forward("GET")

        def do_HEAD(self):
            self.forward("HEAD")

        def forward(self, method):
            log({"method": method, "target": self.path})
            u = urllib.parse.urlsplit(self.path)
            if u.scheme != "http" or u.hostname != "127.0.0.1":
                return self.refuse(403, "this test proxy forwards only http://127.0.0.1 URLs")
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            upstream = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=30)
            try:
                upstream.request(method, (u.path or "/") + ("?" + u.query if u.query else ""),
                                 headers=headers)
                answer = upstream.getresponse()
            except OSError as e:
                return self.refuse(502, f"origin: {e}")
            self.send_response(answer.status, answer.reason)
            for k, v in answer.getheaders():
                if k.lower() not in HOP_BY_HOP:
                    self.send_header(k, v)
            if answer.getheader("Content-Length") is None:
                # A chunked or close-delimited origin answer is relayed decoded: the end of the
                # connection marks its end.
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            try:
                while method != "HEAD":
                    block = answer.read(65536)
                    if not block:
                        break
                    self.wfile.write(block)
            except OSError:
                self.close_connection = True  # the origin or the client went away mid-body
            if answer.length:  # a short origin answer: end the connection, as the origin did
                self.close_connection = True
            upstream.close()

        def do_CONNECT(self):
            log({"method": "CONNECT", "target": self.path})
            host, _, port = self.path.rpartition(":")
            if host != "127.0.0.1" or not port.isdigit():
                return self.refuse(403, "this test proxy tunnels only to 127.0.0.1")
            try:
                origin = socket.create_connection((host, int(port)), timeout=30)
            except OSError as e:
                return self.refuse(502, f"origin: {e}")
            self.send_response(200, "Connection established")
            self.end_headers()
            self.wfile.flush()
            self.close_connection = True
            client = self.connection
            try:
                while True:
                    ready, _, _ = select.select([client, origin], [], [], 60)
                    if not ready:
                        break
                    for s in ready:
                        data = s.recv(65536)
                        if not data:
                            return
                        (origin if s is client else client).sendall(data)
            except OSError:
                pass
            finally:
                origin.close()

    server = loopback_serve.QuietThreadingServer(("127.0.0.1", 0), Handler)
    loopback_serve.serve(server, args.port_file)


if __name__ == "__main__":
    main()
