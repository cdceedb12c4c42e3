"""kvfleet.vllm.model_fetch keeps its credentials: a password in the URL never shows in a message
or a result, and a token (or that password) is not sent in clear to another machine unless the
operator says so by name (allow_insecure_token)."""

from __future__ import annotations

import hashlib
import json
from urllib.error import HTTPError, URLError

import pytest

from ansible_collections.kvfleet.vllm.plugins.modules import model_fetch

MANIFEST = "%s  config.json\n" % hashlib.sha256(b"{}").hexdigest()
PASSWORD = "s3cret-Pa55word"


@pytest.fixture
def requests(monkeypatch):
    """open_url replaced: records each call and answers with a network error naming the URL."""
    calls = []

    def fake_open_url(url, **kwargs):
        calls.append(dict(url=url, **kwargs))
        raise URLError("cannot reach %s" % url)
    monkeypatch.setattr(model_fetch, "open_url", fake_open_url)
    return calls


@pytest.mark.parametrize("url", ["http://10.0.0.5/org/m/resolve/abc/", "http://hub.example.net:8080/r/",
                                 "http://127.0.0.1.example.net/r/"])
def test_a_token_over_plain_http_to_another_machine_is_refused_before_any_request(run_module, tmp_path, requests, url):
    failed, result = run_module(model_fetch, {"path": str(tmp_path / "r"), "url": url, "manifest": MANIFEST,
                                              "token": "hf_secret_token"})
    assert failed and "token: plain http:// to" in result["msg"] and "allow_insecure_token" in result["msg"]
    assert requests == [] and "hf_secret_token" not in json.dumps(result)


def test_a_password_in_the_url_over_plain_http_is_refused_too(run_module, tmp_path, requests):
    url = "http://mirror:%s@10.0.0.5/r/" % PASSWORD
    failed, result = run_module(model_fetch, {"path": str(tmp_path / "r"), "url": url, "manifest": MANIFEST})
    assert failed and "url: plain http:// to 10.0.0.5" in result["msg"] and requests == []
    assert PASSWORD not in json.dumps(result)


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/r/", "http://localhost:9/r/", "http://[::1]:9/r/",
                                 "https://hub.example.net/r/"])
def test_loopback_and_https_carry_the_token(run_module, tmp_path, requests, url):
    failed, result = run_module(model_fetch, {"path": str(tmp_path / "r"), "url": url, "manifest": MANIFEST,
                                              "token": "hf_secret_token", "retry_delay": 0})
    assert failed and "downloading config.json failed" in result["msg"]
    assert requests[0]["headers"] == {"Authorization": "Bearer hf_secret_token"}


def test_the_operator_can_allow_it_by_name(run_module, tmp_path, requests):
    failed, result = run_module(model_fetch, {"path": str(tmp_path / "r"), "url": "http://10.0.0.5/r/",
                                              "manifest": MANIFEST, "token": "hf_secret_token",
                                              "allow_insecure_token": True, "retry_delay": 0})
    # a network error is tried again (retries: 3), each try to that URL with the token
    assert failed and "downloading config.json failed" in result["msg"] and len(requests) == 4
    assert {r["url"] for r in requests} == {"http://10.0.0.5/r/config.json"} and result["retried"] == 3


@pytest.mark.parametrize("error", ["network", 401, 404, "sha256"])
def test_a_password_in_the_url_never_shows(run_module, tmp_path, monkeypatch, error):
    url = "https://mirror:%s@hub.example.net/org/m/resolve/abc/" % PASSWORD

    class Body(object):
        def __init__(self):
            self.data = b"not what the manifest says"

        def read(self, amt=None):
            out, self.data = self.data, b""
            return out

    def fake_open_url(target, **kwargs):
        assert PASSWORD in target   # it is still used for the request itself
        if error == "network":
            raise URLError("cannot reach %s" % target)
        if error == "sha256":
            return Body()
        raise HTTPError(target, error, "refused for %s" % target, {}, None)
    monkeypatch.setattr(model_fetch, "open_url", fake_open_url)
    failed, result = run_module(model_fetch, {"path": str(tmp_path / "r"), "url": url, "manifest": MANIFEST,
                                              "retry_delay": 0})
    text = json.dumps(result)
    assert failed and PASSWORD not in text and "mirror:" not in text
    assert "https://hub.example.net/org/m/resolve/abc/config.json" in result["msg"]


def test_a_bad_url_is_named_without_its_password(run_module, tmp_path, requests):
    failed, result = run_module(model_fetch, {"path": str(tmp_path / "r"), "manifest": MANIFEST,
                                              "url": "ftp://mirror:%s@hub.example.net/r" % PASSWORD})
    assert failed and result["msg"].startswith("url: must be an http(s) URL") and PASSWORD not in json.dumps(result)


def test_a_token_alone_in_the_url_over_plain_http_is_refused(run_module, tmp_path, requests):
    # http://<token>@mirror/: no password, but the user part is the credential
    url = "http://hf_UserOnlyToken12345@10.0.0.5/r/"
    failed, result = run_module(model_fetch, {"path": str(tmp_path / "r"), "url": url, "manifest": MANIFEST})
    assert failed and "url: plain http:// to 10.0.0.5 would send the credentials in url" in result["msg"]
    assert requests == [] and "hf_UserOnlyToken12345" not in json.dumps(result)


def test_an_endless_body_is_cut_at_max_file_bytes_and_nothing_is_kept(run_module, tmp_path, monkeypatch):
    class Endless(object):
        def read(self, n):
            return b"x" * n
    monkeypatch.setattr(model_fetch, "open_url", lambda url, **kwargs: Endless())
    failed, result = run_module(model_fetch, {"path": str(tmp_path / "r"), "url": "https://hub.example.net/r/",
                                              "manifest": MANIFEST, "max_file_bytes": 5 * 1024 * 1024})
    assert failed and "sent more than max_file_bytes (5242880); the file was removed; nothing was kept" in result["msg"]
    assert not (tmp_path / "r").exists() and not (tmp_path / ".fetching-r").exists()
