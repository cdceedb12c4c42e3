"""Hostile HTTP servers on 127.0.0.1 for the unit tests (http.server, one thread per request).

Each server records what it was sent (path and headers) in `requests`, so a test can assert on
what a second server saw. Behaviours that hold a client (trickling) stop by themselves after
STOP_AFTER seconds, so that code without a deadline fails its test instead of hanging it.
"""

from __future__ import annotations

import gzip
import http.server
import os
import ssl
import threading
import time

from ansible_collections.kvfleet.vllm.tests.unit import fixtures

STOP_AFTER = 20.0
IDLE = fixtures.read(os.path.join(fixtures.METRICS, "vllm-0.32.0-cpu-idle-0.txt")).encode()
MB = 1024 * 1024


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        # read a POST's body: a TLS connection closed with unread data is reset, not answered
        length = self.headers.get("Content-Length")
        if length and length.isdigit():
            self.rfile.read(int(length))
        self.server.owner.requests.append({"method": "GET", "path": self.path,
                                           "headers": dict(self.headers.items())})
        try:
            self.server.owner.behaviour(self)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass  # the client gave up, as it should

    do_POST = do_GET

    # helpers for behaviours
    def answer(self, status=200, body=b"", headers=None, length=True):
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


TLS = os.path.join(os.path.dirname(fixtures.METRICS), "tls")


def tls_file(name):
    """A file of the test-only TLS material (tests/fixtures/tls/README.md)."""
    return os.path.join(TLS, name)


class _TLSServer(http.server.ThreadingHTTPServer):
    # the handshake happens in the request's thread: a client that fails it (an untrusted
    # certificate, no client certificate) cannot stall the accept loop
    def finish_request(self, request, client_address):
        try:
            request = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        http.server.ThreadingHTTPServer.finish_request(self, request, client_address)


class LocalServer(object):
    """with LocalServer(behaviour) as srv: srv.url, srv.requests.

    `tls`: None (http), "server" (https with tests/fixtures/tls/server.crt), or "client"
    (https that also requires a client certificate signed by the test CA)."""

    def __init__(self, behaviour, tls=None):
        self.behaviour = behaviour
        self.requests = []
        self.httpd = (_TLSServer if tls else http.server.ThreadingHTTPServer)(("127.0.0.1", 0), _Handler)
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(tls_file("server.crt"), tls_file("server.key"))
            if tls == "client":
                context.verify_mode = ssl.CERT_REQUIRED
                context.load_verify_locations(tls_file("ca.crt"))
            self.httpd.context = context
        self.httpd.daemon_threads = True
        self.httpd.owner = self
        self.url = "%s://127.0.0.1:%d" % ("https" if tls else "http", self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def saw_header(self, name):
        return [r for r in self.requests
                if any(k.lower() == name.lower() for k in r["headers"])]


def vllm(metrics=IDLE):
    """A sane vLLM: /metrics, /health, /version, /v1/models, /v1/completions."""
    def behaviour(h):
        path = h.path.split("?", 1)[0]
        if path.endswith("/metrics"):
            h.answer(200, metrics() if callable(metrics) else metrics)
        elif path.endswith("/health"):
            h.answer(200)
        elif path.endswith("/version"):
            h.answer(200, b'{"version": "0.32.0"}')
        elif path.endswith("/v1/models"):
            h.answer(200, b'{"data": [{"id": "tiny"}]}')
        elif path.endswith("/v1/completions"):
            h.answer(200, b'{"choices": [{"finish_reason": "length"}], "usage": {"completion_tokens": 4}}')
        else:
            h.answer(404)
    return behaviour


def redirect_to(target, status=302):
    """Every request is sent on to `target` + its path (another origin)."""
    def behaviour(h):
        h.answer(status, headers={"Location": target + h.path})
    return behaviour


def _drip(h, byte, every):
    """One byte every `every` s until STOP_AFTER (each socket read on the other side succeeds)."""
    end = time.monotonic() + STOP_AFTER
    while time.monotonic() < end:
        h.wfile.write(byte)
        h.wfile.flush()
        time.sleep(every)


def trickle_body(every=1.0):
    """Headers at once, then one byte of body every `every` s."""
    def behaviour(h):
        h.send_response(200)
        h.send_header("Content-Length", "100000")
        h.end_headers()
        h.wfile.flush()
        _drip(h, b"#", every)
    return behaviour


def trickle_headers(every=1.0):
    """The status line, then one byte of a never-ending header every `every` s."""
    def behaviour(h):
        h.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        h.wfile.flush()
        _drip(h, b"a", every)
    return behaviour


def _padded_stream(h, total):
    """`total` bytes of valid exposition text: comment padding, then a real idle body."""
    pad = (b"# padding " + b"x" * 1013 + b"\n") * 64  # 64 KiB
    sent = 0
    while sent + len(pad) <= total - len(IDLE):
        h.wfile.write(pad)
        sent += len(pad)
    rest = total - len(IDLE) - sent
    if rest > 0:
        h.wfile.write(b"#" * (rest - 1) + b"\n")
    h.wfile.write(IDLE)


def huge_body(total=50 * MB, declare_length=True):
    """A valid /metrics `total` bytes long; with or without a Content-Length (then the end of
    the body is the end of the connection)."""
    def behaviour(h):
        path = h.path.split("?", 1)[0]
        if not path.endswith("/metrics"):
            return vllm()(h)
        h.send_response(200)
        if declare_length:
            h.send_header("Content-Length", str(total))
        h.end_headers()
        _padded_stream(h, total)
    return behaviour


def gzip_bomb(expanded=64 * MB):
    """A small gzip body that expands to `expanded` bytes of comments, sent unasked."""
    bomb = gzip.compress(b"#" * (expanded - 1) + b"\n", 9)

    def behaviour(h):
        path = h.path.split("?", 1)[0]
        if not path.endswith("/metrics"):
            return vllm()(h)
        h.answer(200, bomb, headers={"Content-Encoding": "gzip"})
    return behaviour
