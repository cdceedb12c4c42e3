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


def _start_hub(root, *extra):
    for rel, data in FILES.items():
        path = root / "org" / "tiny" / COMMIT / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (root / "org" / "tiny" / COMMIT / "README.md").write_text("not in the manifest")
    log, pid = root / "log.jsonl", root / "pid"
    proc = subprocess.Popen([sys.executable, HUB, "--root", str(root), "--token", "hf_secret",
                             "--lfs-over", "1024", "--log", str(log), "--pid-file", str(pid)] + list(extra),
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
    return proc, Hub()


@pytest.fixture
def dropping_hub(tmp_path_factory):
    """A hub whose CDN cuts each large file's first download off after 1000 of its 4096 bytes."""
    proc, hub = _start_hub(tmp_path_factory.mktemp("hub-drop"), "--drop-after", "1000")
    yield hub
    proc.terminate()
    proc.wait()


def test_a_download_cut_off_half_way_goes_on_from_its_bytes_in_the_same_run(run_module, tmp_path, dropping_hub):
    dest = tmp_path / "tiny" / COMMIT
    failed, result = run_module(model_fetch, {"path": str(dest), "url": dropping_hub.url, "manifest": MANIFEST,
                                              "token": "hf_secret", "retry_delay": 0})
    assert not failed and result["verified"] and result["retried"] == 1, result.get("msg")
    assert result["resumed"] == ["model.safetensors"]
    assert (dest / "model.safetensors").read_bytes() == FILES["model.safetensors"]
    cdn = [r for r in dropping_hub.requests() if r["path"].startswith("/cdn/")]
    # the second try asked only for the rest: what the first received, checked as it was hashed
    assert [r["range"] for r in cdn][0] is None and cdn[-1]["status"] == 206
    assert cdn[-1]["range"].startswith("bytes=") and 0 < int(cdn[-1]["range"][6:-1]) <= 1000


def test_a_run_that_gave_up_leaves_its_bytes_and_the_next_run_resumes(run_module, tmp_path, dropping_hub):
    dest = tmp_path / "tiny" / COMMIT
    args = {"path": str(dest), "url": dropping_hub.url, "manifest": MANIFEST, "token": "hf_secret", "retries": 0}
    failed, result = run_module(model_fetch, args)
    staging = tmp_path / "tiny" / (".fetching-" + COMMIT)
    assert failed and "downloading model.safetensors failed" in result["msg"], result
    assert "is kept in %s, and the next run goes on from it" % staging in result["msg"]
    part = staging / "model.safetensors.part"
    assert 0 < part.stat().st_size <= 1000 and (staging / "config.json").read_bytes() == FILES["config.json"]
    dropping_hub.requests()
    failed, result = run_module(model_fetch, args)
    assert not failed and result["verified"], result
    # config.json was finished before: taken from the staging folder, checked, not fetched again
    assert sorted(result["resumed"]) == ["config.json", "model.safetensors"]
    assert result["downloaded"] == ["model.safetensors", "sub/tok.json"]
    assert (dest / "model.safetensors").read_bytes() == FILES["model.safetensors"] and not staging.exists()
    seen = dropping_hub.requests()
    assert not any(r["path"].endswith("/config.json") for r in seen)
    assert [r["status"] for r in seen if r["path"].startswith("/cdn/")] == [206]


def test_a_staging_file_that_is_not_the_manifests_is_fetched_again(run_module, tmp_path, hub):
    dest = tmp_path / "tiny" / COMMIT
    staging = tmp_path / "tiny" / (".fetching-" + COMMIT)
    (staging / "sub").mkdir(parents=True)
    (staging / "config.json").write_bytes(b"tampered")
    (staging / "stray.bin").write_bytes(b"x")
    os.symlink("/etc/passwd", str(staging / "sub" / "tok.json.part"))
    hub.requests()
    failed, result = run_module(model_fetch, {"path": str(dest), "url": hub.url, "manifest": MANIFEST,
                                              "token": "hf_secret"})
    assert not failed and result["verified"] and result["resumed"] == [], result
    assert result["downloaded"] == sorted(FILES) and sorted(os.listdir(str(dest))) == sorted(
        os.listdir(str(dest)))
    assert (dest / "config.json").read_bytes() == FILES["config.json"] and not (dest / "stray.bin").exists()
    assert (dest / "sub" / "tok.json").read_bytes() == FILES["sub/tok.json"]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    proc, server = _start_hub(tmp_path_factory.mktemp("hub"))
    yield server
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


def test_bytes_that_differ_from_the_manifest_stop_it_named_and_that_file_is_removed(run_module, tmp_path, hub):
    bad = MANIFEST.replace(hashlib.sha256(FILES["model.safetensors"]).hexdigest(), "0" * 64)
    dest = tmp_path / "r"
    failed, result = run_module(model_fetch, {"path": str(dest), "url": hub.url, "manifest": bad, "token": "hf_secret"})
    assert failed and result["msg"].startswith("downloading model.safetensors failed: ") and "the file was removed" in result["msg"]
    assert "0" * 64 in result["msg"] and not dest.exists()
    # the file before it in the manifest's order is kept for the next run, the bad one is not
    staging = tmp_path / ".fetching-r"
    assert sorted(str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file()) == ["config.json"]
    assert "is kept in %s" % staging in result["msg"]


@pytest.mark.parametrize("args, words", [
    ({"url": "ftp://x/"}, "url: must be an http(s) URL ending in /"),
    ({"url": "http://x/resolve/c"}, "url: must be an http(s) URL ending in /"),
    ({"timeout": 0}, "timeout: must be 1 second or more"),
    ({"manifest": "nonsense"}, "manifest: manifest line 1"),
    ({"url": "http://127.0.0.1:9/org/tiny/resolve/%s/" % COMMIT}, "downloading config.json failed"),
])
def test_bad_input_is_named_and_changes_nothing(run_module, tmp_path, hub, args, words):
    base = {"path": str(tmp_path / "r"), "url": hub.url, "manifest": MANIFEST, "token": "hf_secret", "timeout": 5,
            "retry_delay": 0}
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
