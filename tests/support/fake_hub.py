"""A stand-in for the Hugging Face hub's file downloads, for tests (nothing here reaches the hub).

Serves <root>/<org>/<repo>/<commit>/<file> as GET/HEAD /<org>/<repo>/resolve/<commit>/<file>, the
URL template of huggingface_hub 2.4.0 (constants.py: HUGGINGFACE_CO_URL_TEMPLATE). Like the hub,
a file of --lfs-over bytes or more is answered with a 302 to another path ("the CDN", here
/cdn/...) carrying X-Linked-Size and X-Repo-Commit, and small files directly (file_download.py
get_hf_file_metadata reads the same headers). With --token, /resolve/ answers 401 without
"Authorization: Bearer <token>" (a gated model); the CDN path answers 400 to any Authorization
header, so a client that sends the token on to the CDN fails its test. The CDN answers a
"Range: bytes=N-" request with 206 and the rest of the file, as the hub's CDN does; with
--drop-after N, its first answer for each file without a Range announces the whole file and
drops the connection after N bytes (a download cut off half-way).
Every request goes to --log as a JSON line (method, path, status, auth: whether one was sent,
range: the Range header or null).

  python3 fake_hub.py --root DIR --port 18080 [--token T] [--lfs-over 1024] [--drop-after N] [--log F] [--pid-file F]
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import json
import os
import sys
import threading
import time
from urllib.parse import unquote


def make_handler(args, log_lock):
    dropped = set()   # the files whose first download was cut off (--drop-after)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):   # the JSON log below is the record
            pass

        def _log(self, status):
            if args.log:
                with log_lock, open(args.log, "a") as f:
                    f.write(json.dumps({"method": self.command, "path": self.path, "status": status,
                                        "auth": "Authorization" in self.headers,
                                        "range": self.headers.get("Range")}) + "\n")

        def _send(self, status, body=b"", headers=None):
            self._log(status)
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _file(self, rel):
            path = os.path.realpath(os.path.join(args.root, rel))
            if not path.startswith(os.path.realpath(args.root) + os.sep) or not os.path.isfile(path):
                return None
            return path

        def do_GET(self):
            parts = unquote(self.path.split("?", 1)[0]).lstrip("/").split("/")
            if parts[0] == "cdn":
                if "Authorization" in self.headers:
                    return self._send(400, b"the token must not reach the CDN")
                path = self._file("/".join(parts[1:]))
                if path is None:
                    return self._send(404, b"Entry not found")
                with open(path, "rb") as f:
                    data = f.read()
                wanted = self.headers.get("Range", "")
                if wanted.startswith("bytes=") and wanted.endswith("-") and wanted[6:-1].isdigit():
                    start = int(wanted[6:-1])
                    if start >= len(data):
                        return self._send(416, b"", {"Content-Range": "bytes */%d" % len(data)})
                    return self._send(206, data[start:], {"Content-Type": "application/octet-stream",
                                                          "Content-Range": "bytes %d-%d/%d" % (start, len(data) - 1, len(data))})
                if args.drop_after and path not in dropped and self.command == "GET":
                    dropped.add(path)
                    self._log(200)
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data[:args.drop_after])
                    self.wfile.flush()
                    self.close_connection = True
                    return None
                return self._send(200, data, {"Content-Type": "application/octet-stream"})
            # <org>/<repo>/resolve/<commit>/<file...>
            if len(parts) < 5 or parts[2] != "resolve":
                return self._send(404, b"Repository not found")
            if args.token and self.headers.get("Authorization") != "Bearer " + args.token:
                return self._send(401, b'{"error":"Access to model is restricted. You must have access to it and be authenticated to access it."}',
                                  {"Content-Type": "application/json"})
            repo, commit, rel = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
            path = self._file("/".join([repo, commit, rel]))
            if path is None:
                return self._send(404, b"Entry not found", {"X-Error-Code": "EntryNotFound"})
            size = os.path.getsize(path)
            head = {"X-Repo-Commit": commit}
            if size >= args.lfs_over:
                with open(path, "rb") as f:
                    etag = hashlib.sha256(f.read()).hexdigest()
                head.update({"Location": "/cdn/%s/%s/%s" % (repo, commit, rel), "X-Linked-Size": str(size),
                             "X-Linked-Etag": '"%s"' % etag})
                return self._send(302, b"", head)
            with open(path, "rb") as f:
                return self._send(200, f.read(), dict(head, **{"Content-Type": "application/octet-stream"}))

        do_HEAD = do_GET

    return Handler


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--token")
    p.add_argument("--lfs-over", type=int, default=1024)
    p.add_argument("--drop-after", type=int, default=0)
    p.add_argument("--log")
    p.add_argument("--pid-file")
    args = p.parse_args(argv)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(args, threading.Lock()))
    if args.pid_file:
        with open(args.pid_file, "w") as f:
            f.write("%d %d\n" % (os.getpid(), server.server_address[1]))
    sys.stdout.write("serving on 127.0.0.1:%d\n" % server.server_address[1])
    sys.stdout.flush()
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    server.serve_forever()


def _exit_with_parent(parent, every=1.0):
    """A test's stand-in ends with the test process that started it: a pytest worker that exits
    without its fixtures' teardown (ansible-test's xdist workers did) left one running per worker."""
    while os.getppid() == parent:
        time.sleep(every)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
