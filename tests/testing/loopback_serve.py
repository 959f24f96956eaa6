"""What the loopback test servers (fault_server.py, forward_proxy.py) share: dying with the test
that started them, a JSON-lines request log, a threading HTTP server that keeps quiet when clients hang up, and serving it
with the bound port published to a file (written whole, then renamed: the tests wait for it) until
SIGTERM."""
import ctypes
import http.server
import json
import os
import signal
import threading


def die_with_parent(parent_pid):
    """SIGKILL this process when `parent_pid` (the test) dies, so no server outlives a killed test."""
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
    # The parent may have died before prctl: then we were reparented and must go now.
    if os.getppid() != parent_pid:
        os._exit(1)


class QuietThreadingServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # clients hanging up mid-answer is what these tests do


def serve(server, port_file):
    signal.signal(signal.SIGTERM, lambda *a: (server.server_close(), os._exit(0)))
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, port_file)
    server.serve_forever()


class JsonLog:
    """log(entry) appends one JSON line to `path` (nothing when path is empty); safe from any thread."""

    def __init__(self, path):
        self._path = path
        self._lock = threading.Lock()

    def __call__(self, entry):
        if not self._path:
            return
        with self._lock, open(self._path, "a") as f:
            f.write(json.dumps(entry) + "\n")
