from __future__ import annotations

import hashlib
import os

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils import _model_store as ms


def _write(root, files):
    for rel, data in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)


def _manifest(files, binary=False):
    return "".join("%s %s%s\n" % (hashlib.sha256(data).hexdigest(), "*" if binary else " ", rel)
                   for rel, data in sorted(files.items()))


FILES = {"config.json": b'{"a": 1}', "model.safetensors": b"\x00" * 1000, "sub/tok.json": b"{}"}


def test_parse_manifest_both_sha256sum_modes_and_comments():
    text = "# made by sha256sum\n\n" + _manifest(FILES, binary=True).replace("sub/", "./sub/")
    parsed = ms.parse_manifest(text)
    assert sorted(parsed) == ["config.json", "model.safetensors", "sub/tok.json"]
    assert parsed["config.json"] == hashlib.sha256(b'{"a": 1}').hexdigest()


@pytest.mark.parametrize("text, words", [
    ("", "empty"),
    ("# only a comment\n", "lists no file"),
    ("abc  config.json\n", "line 1: expected <sha256"),
    ("%s  ../etc/passwd\n" % ("0" * 64), "relative path inside"),
    ("%s  /etc/passwd\n" % ("0" * 64), "relative path inside"),
    ("%s  a//b\n" % ("0" * 64), "relative path inside"),
    ("%s  a\n%s  a\n" % ("0" * 64, "1" * 64), "line 2: a is listed twice"),
    ("%s  %s\n" % ("0" * 64, ms.STAMP), "collection's own file"),
])
def test_parse_manifest_refuses(text, words):
    with pytest.raises(ms.ManifestError, match=words.replace("(", r"\(")):
        ms.parse_manifest(text)


def test_scan_promote_stamp_and_corruption(tmp_path):
    manifest = ms.parse_manifest(_manifest(FILES))
    staging, target = str(tmp_path / ".staging-r1"), str(tmp_path / "r1")
    _write(staging, dict(FILES, **{"notes.txt": b"not in the manifest"}))
    result = ms.scan(staging, manifest)
    assert result["verified"] and result["bytes"] == 1010 and result["extra"] == ["notes.txt"]
    result = ms.promote(staging, target, manifest)
    assert result["verified"] and not os.path.exists(staging)
    assert not os.path.exists(os.path.join(target, "notes.txt"))  # only the artefact's files travel
    assert ms.stamp_ok(target, manifest)
    # a file whose size changes breaks the stamp; a changed byte of the same size needs a full scan
    with open(os.path.join(target, "config.json"), "wb") as handle:
        handle.write(b'{"a": 2}')
    assert ms.stamp_ok(target, manifest)
    assert ms.scan(target, manifest)["mismatched"] == ["config.json"]
    with open(os.path.join(target, "config.json"), "wb") as handle:
        handle.write(b'{"a": 22}')
    assert not ms.stamp_ok(target, manifest)
    # another manifest (another revision's) does not match the stamp either
    other = dict(manifest, **{"config.json": "f" * 64})
    assert not ms.stamp_ok(target, other)


def test_promote_refuses_a_corrupt_copy_and_leaves_the_target(tmp_path):
    manifest = ms.parse_manifest(_manifest(FILES))
    staging, target = str(tmp_path / ".staging-r2"), str(tmp_path / "r2")
    bad = dict(FILES, **{"model.safetensors": b"\x01" + b"\x00" * 999})
    del bad["sub/tok.json"]
    _write(staging, bad)
    result = ms.promote(staging, target, manifest)
    assert not result["verified"]
    assert result["mismatched"] == ["model.safetensors"] and result["missing"] == ["sub/tok.json"]
    assert not os.path.exists(staging) and not os.path.exists(target)


def test_links_are_not_model_files(tmp_path):
    manifest = ms.parse_manifest(_manifest(FILES))
    root = str(tmp_path / "r1")
    _write(root, {k: v for k, v in FILES.items() if k != "config.json"})
    outside = tmp_path / "outside.json"
    outside.write_bytes(FILES["config.json"])
    os.symlink(str(outside), os.path.join(root, "config.json"))
    result = ms.scan(root, manifest)
    assert result["not_regular"] == ["config.json"] and not result["verified"]


def test_scan_of_a_missing_folder(tmp_path):
    manifest = ms.parse_manifest(_manifest(FILES))
    result = ms.scan(str(tmp_path / "nope"), manifest)
    assert not result["exists"] and not result["verified"] and len(result["missing"]) == 3


def test_prune_plan_keeps_newest_and_protected():
    revs = [("r1", 1.0), ("r2", 2.0), ("r3", 3.0), ("broken", 0.0)]
    assert ms.prune_plan(revs, 2, []) == ["broken", "r1"]
    # the one in use counts among those kept; a newer revision not in use (a rolled back one) may go
    assert ms.prune_plan(revs, 2, ["r1"]) == ["broken", "r2"]
    assert ms.prune_plan(revs, 1, ["r2"]) == ["broken", "r1", "r3"]
    assert ms.prune_plan(revs, 0, []) == ["broken", "r1", "r2"]  # at least one kept
    assert ms.prune_plan(revs, 3, ["gone"]) == ["broken"]


def test_free_bytes_of_a_folder_not_made_yet(tmp_path):
    free, where = ms.free_bytes(str(tmp_path / "a" / "b"))
    assert free > 0 and where == str(tmp_path)
