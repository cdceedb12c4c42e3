from __future__ import annotations

import json
import os
from urllib.error import HTTPError, URLError

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.kvfleet.vllm.tests.unit import fixtures


class FakeResponse(object):
    """What open_url returns, as far as the fetcher uses it: read in pieces, headers, close."""

    def __init__(self, body, headers=None):
        self.body = body
        self.headers = dict(headers or {})
        self.closed = False

    def getcode(self):
        return 200

    def read(self, amt=None):
        amt = len(self.body) if amt is None or amt < 0 else amt
        piece, self.body = self.body[:amt], self.body[amt:]
        return piece

    def close(self):
        self.closed = True


class FakeServer(object):
    """Answers _fetch._get (open_url's GET) by path; a value is bytes (200), an int (HTTP
    error) or an exception."""

    def __init__(self, routes):
        self.routes = routes
        self.calls = []

    def __call__(self, url, headers=None, timeout=None, **kwargs):
        path = "/" + url.split("/", 3)[3]
        self.calls.append(dict(url=url, headers=headers, timeout=timeout, **kwargs))
        answer = self.routes.get(path, 404)
        if callable(answer) and not isinstance(answer, type):
            answer = answer()
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, int):
            raise HTTPError(url, answer, "status %d" % answer, {}, None)

        return FakeResponse(answer)


def capture_path(name):
    return fixtures.read(os.path.join(fixtures.METRICS, name)).encode()


def routes(metrics, health=200, version=b'{"version":"0.32.0"}'):
    return {"/metrics": metrics, "/health": b"" if health == 200 else health, "/version": version}


REFUSED = URLError(ConnectionRefusedError(111, "Connection refused"))


@pytest.fixture
def run_module(monkeypatch, capsys):
    """run_module(module, args, server) -> (failed, result dict)."""
    def run(module, args, server=None):
        if server is not None:
            monkeypatch.setattr(
                "ansible_collections.kvfleet.vllm.plugins.module_utils._fetch._get", server)
        with patch_module_args(args):
            with pytest.raises(SystemExit) as exit_info:
                module.main()
        result = json.loads(capsys.readouterr().out)
        return exit_info.value.code != 0 or result.get("failed", False), result
    return run
