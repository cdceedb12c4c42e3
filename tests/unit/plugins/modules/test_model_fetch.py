"""kvfleet.vllm.model_fetch against tests/support/fake_hub.py (a local stand-in for the hub's
resolve URLs: large files redirected to a "CDN" that refuses the token, a gated repository)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time

import pytest

from ansible_collections.kvfleet.vllm.plugins.modules import model_fetch

HUB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "support", "fake_hub.py")
COMMIT = "0123456789abcdef0123456789abcdef01234567"
FILES = {"config.json": b'{"a": 1}', "model.safetensors": os.urandom(4096), "sub/tok.json": b"{}"}
MANIFEST = "".join("%s  %s\n" % (hashlib.sha256(v).hexdigest(), k) for k, v in sorted(FILES.items()))


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    for rel, data in FILES.items():
        path = root / "org" / "tiny" / COMMIT / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (root / "org" / "tiny" / COMMIT / "README.md").write_text("not in the manifest")
    log, pid = root / "log.jsonl", root / "pid"
    proc = subprocess.Popen([sys.executable, HUB, "--root", str(root), "--token", "hf_secret",
                             "--lfs-over", "1024", "--log", str(log), "--pid-file", str(pid)],
                            stdout=subprocess.DEVNULL)
    for _attempt in range(100):
        if pid.exists() and pid.read_text().strip():
            break
        time.sleep(0.05)
    port = int(pid.read_text().split()[1])

    class Hub(object):
        url = "http://127.0.0.1:%d/org/tiny/resolve/%s/" % (port, COMMIT)

        def requests(self):
            lines = log.read_text().splitlines() if log.exists() else []
            log.write_text("")
            return [json.loads(line) for line in lines]
    yield Hub()
    proc.terminate()
    proc.wait()


def test_downloads_the_manifest_files_checked_and_then_nothing(run_module, tmp_path, hub):
    hub.requests()
    dest = str(tmp_path / "tiny" / COMMIT)
    args = {"path": dest, "url": hub.url, "manifest": MANIFEST, "token": "hf_secret"}
    failed, result = run_module(model_fetch, args)
    assert not failed and result["changed"] and result["verified"], result
    assert result["downloaded"] == sorted(FILES) and result["bytes"] == sum(len(v) for v in FILES.values())
    for rel, data in FILES.items():
        with open(os.path.join(dest, rel), "rb") as f:
            assert f.read() == data
    assert not os.path.exists(os.path.join(dest, "README.md"))        # only the manifest's files
    assert not os.path.exists(str(tmp_path / "tiny" / (".fetching-" + COMMIT)))
    seen = hub.requests()
    # the large file went through the redirect, and the token did not follow it
    cdn = [r for r in seen if r["path"].startswith("/cdn/")]
    assert [r["path"].rsplit("/", 1)[1] for r in cdn] == ["model.safetensors"] and not any(r["auth"] for r in cdn)
    assert all(r["auth"] for r in seen if "/resolve/" in r["path"])
    assert "hf_secret" not in json.dumps(result)
    # stamped: a second run asks the hub nothing
    failed, result = run_module(model_fetch, args)
    assert not failed and not result["changed"] and result["verified"] and result["downloaded"] == []
    assert hub.requests() == []


def test_check_mode_reports_what_and_how_much_and_writes_nothing(run_module, tmp_path, hub):
    dest = str(tmp_path / "r")
    failed, result = run_module(model_fetch, {"path": dest, "url": hub.url, "manifest": MANIFEST,
                                              "token": "hf_secret", "_ansible_check_mode": True})
    assert not failed and result["changed"] and not result["verified"], result
    assert result["downloaded"] == sorted(FILES) and result["bytes"] == sum(len(v) for v in FILES.values())
    assert not os.path.exists(dest) and os.listdir(str(tmp_path)) == []
    assert {r["method"] for r in hub.requests()} == {"HEAD"}


def test_a_gated_repository_without_the_token_is_named(run_module, tmp_path, hub):
    failed, result = run_module(model_fetch, {"path": str(tmp_path / "r"), "url": hub.url, "manifest": MANIFEST})
    assert failed and "401" in result["msg"] and "set vllm_server_hf_token" in result["msg"]
    assert os.listdir(str(tmp_path)) == []
    failed, result = run_module(model_fetch, {"path": str(tmp_path / "r"), "url": hub.url, "manifest": MANIFEST,
                                              "token": "wrong"})
    assert failed and "the token was refused" in result["msg"] and "wrong" not in result["msg"]


def test_bytes_that_differ_from_the_manifest_stop_it_named_and_nothing_is_kept(run_module, tmp_path, hub):
    bad = MANIFEST.replace(hashlib.sha256(FILES["model.safetensors"]).hexdigest(), "0" * 64)
    dest = tmp_path / "r"
    failed, result = run_module(model_fetch, {"path": str(dest), "url": hub.url, "manifest": bad, "token": "hf_secret"})
    assert failed and result["msg"].startswith("model.safetensors from ") and "nothing was kept" in result["msg"]
    assert os.listdir(str(tmp_path)) == []


@pytest.mark.parametrize("args, words", [
    ({"url": "ftp://x/"}, "url: must be an http(s) URL ending in /"),
    ({"url": "http://x/resolve/c"}, "url: must be an http(s) URL ending in /"),
    ({"timeout": 0}, "timeout: must be 1 second or more"),
    ({"manifest": "nonsense"}, "manifest: manifest line 1"),
    ({"url": "http://127.0.0.1:9/org/tiny/resolve/%s/" % COMMIT}, "downloading config.json failed"),
])
def test_bad_input_is_named_and_changes_nothing(run_module, tmp_path, hub, args, words):
    base = {"path": str(tmp_path / "r"), "url": hub.url, "manifest": MANIFEST, "token": "hf_secret", "timeout": 5}
    base.update(args)
    failed, result = run_module(model_fetch, base)
    assert failed and words in result["msg"], result["msg"]
    assert os.listdir(str(tmp_path)) == []


def test_a_missing_file_is_a_404_with_advice(run_module, tmp_path, hub):
    extra = MANIFEST + "%s  absent.bin\n" % ("1" * 64)
    failed, result = run_module(model_fetch, {"path": str(tmp_path / "r"), "url": hub.url, "manifest": extra,
                                              "token": "hf_secret"})
    assert failed and "absent.bin" in result["msg"] and "404 Not Found (check the repository" in result["msg"]
    assert os.listdir(str(tmp_path)) == []
