"""model_store runs as root in a store beside what the service user owns: prune and promote never
reach outside the store through a symbolic link that user put in place."""
from __future__ import annotations

import hashlib
import os

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils import _model_store as ms
from ansible_collections.kvfleet.vllm.plugins.modules import model_store

FILES = {"config.json": b'{"a": 1}', "model.safetensors": b"\x00" * 100}
MANIFEST = "".join("%s  %s\n" % (hashlib.sha256(v).hexdigest(), k) for k, v in FILES.items())


def _write(root, files):
    os.makedirs(root, exist_ok=True)
    for rel, data in files.items():
        with open(os.path.join(root, rel), "wb") as handle:
            handle.write(data)


def _victim(tmp_path):
    """Folders outside the store that look like old, never verified revisions."""
    outside = tmp_path / "outside"
    for name in ("etc", "lib", "usr"):
        _write(str(outside / name), {"precious": b"keep me"})
    return outside


def _outside_intact(outside):
    return all((outside / name / "precious").read_bytes() == b"keep me" for name in ("etc", "lib", "usr"))


def _store_with_revisions(tmp_path, names):
    store = tmp_path / "state" / "models" / "tiny"
    for i, name in enumerate(names):
        _write(str(store / name), FILES)
        ms.write_stamp(str(store / name), ms.parse_manifest(MANIFEST))
        os.utime(str(store / name / ms.STAMP), (1000 + i, 1000 + i))
    return store


def test_prune_refuses_a_model_folder_that_is_a_link_and_removes_nothing(run_module, tmp_path):
    outside = _victim(tmp_path)
    models = tmp_path / "state" / "models"
    models.mkdir(parents=True)
    os.symlink(str(outside), str(models / "tiny"))
    failed, result = run_module(model_store, {"operation": "prune", "path": str(models / "tiny"), "keep": 1})
    assert failed and result["removed"] == []
    assert str(models / "tiny") in result["msg"] and "symbolic link" in result["msg"] and str(outside) in result["msg"]
    assert _outside_intact(outside)


def test_prune_refuses_a_store_that_is_a_link_above_the_model_folder(run_module, tmp_path):
    outside = tmp_path / "outside"
    _write(str(outside / "tiny" / "old"), {"precious": b"keep me"})
    _write(str(outside / "tiny" / "older"), {"precious": b"keep me"})
    state = tmp_path / "state"
    state.mkdir()
    os.symlink(str(outside), str(state / "models"))   # the service user swapped the whole store
    failed, result = run_module(model_store, {"operation": "prune", "path": str(state / "models" / "tiny"),
                                              "keep": 1})
    assert failed and str(state / "models") + " is a symbolic link" in result["msg"]
    assert (outside / "tiny" / "old" / "precious").exists() and (outside / "tiny" / "older" / "precious").exists()


def test_prune_skips_a_revision_that_is_a_link_and_reports_it(run_module, tmp_path, monkeypatch):
    warned = []
    monkeypatch.setattr(model_store.AnsibleModule, "warn", lambda self, text: warned.append(text))
    outside = _victim(tmp_path)
    store = _store_with_revisions(tmp_path, ["r1", "r2", "r3"])
    for name in ("etc", "lib", "usr"):
        os.symlink(str(outside / name), str(store / ("a-" + name)))
    failed, result = run_module(model_store, {"operation": "prune", "path": str(store), "keep": 1})
    assert not failed and result["removed"] == ["r1", "r2"] and result["kept"] == ["r3"]
    assert sorted(item["name"] for item in result["not_followed"]) == ["a-etc", "a-lib", "a-usr"]
    assert all("symbolic link" in item["reason"] and str(outside) in item["reason"] for item in result["not_followed"])
    assert len(warned) == 3 and all(w.startswith("prune skipped the revision ") for w in warned)
    assert _outside_intact(outside) and all(os.path.islink(str(store / ("a-" + n))) for n in ("etc", "lib", "usr"))


def test_prune_removes_links_inside_a_revision_not_what_they_point_at(run_module, tmp_path):
    outside = _victim(tmp_path)
    store = _store_with_revisions(tmp_path, ["r1", "r2"])
    os.symlink(str(outside / "etc"), str(store / "r1" / "dir-link"))
    os.symlink(str(outside / "lib" / "precious"), str(store / "r1" / "file-link"))
    failed, result = run_module(model_store, {"operation": "prune", "path": str(store), "keep": 1})
    assert not failed and result["removed"] == ["r1"] and not os.path.lexists(str(store / "r1"))
    assert _outside_intact(outside)


def test_prune_stops_at_a_folder_swapped_for_a_link_during_removal(tmp_path, monkeypatch):
    """The service user replaces a folder inside a revision by a link between the check of what
    it is and its removal: the removal stops there, reports it, and what the link points at stays."""
    outside = _victim(tmp_path)
    store = _store_with_revisions(tmp_path, ["r1", "r2"])
    sub = store / "r1" / "sub"
    _write(str(sub), {"inner": b"x"})
    real_stat = os.stat

    def stat_then_swap(path, *args, **kwargs):
        result = real_stat(path, *args, **kwargs)
        if path == "sub" and not sub.is_symlink():
            os.unlink(str(sub / "inner"))
            os.rmdir(str(sub))
            os.symlink(str(outside / "usr"), str(sub))
        return result
    monkeypatch.setattr(ms.os, "stat", stat_then_swap)
    result = ms.prune(str(store), 1, [])
    assert result["removed"] == [] and [item["name"] for item in result["not_followed"]] == ["r1"]
    assert str(sub) + " is a symbolic link" in result["not_followed"][0]["reason"] and _outside_intact(outside)


def test_prune_check_mode_and_a_missing_folder(run_module, tmp_path):
    store = _store_with_revisions(tmp_path, ["r1", "r2"])
    failed, result = run_module(model_store, {"operation": "prune", "path": str(store), "keep": 1,
                                              "_ansible_check_mode": True})
    assert not failed and result["changed"] and result["removed"] == ["r1"] and (store / "r1").is_dir()
    failed, result = run_module(model_store, {"operation": "prune", "path": str(tmp_path / "none"), "keep": 1})
    assert not failed and not result["changed"] and result["removed"] == []


def test_promote_refuses_a_model_folder_that_is_a_link(run_module, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    models = tmp_path / "models"
    models.mkdir()
    os.symlink(str(outside), str(models / "tiny"))
    staging = models / "tiny" / ".staging-r1"
    _write(str(staging), FILES)
    failed, result = run_module(model_store, {"operation": "promote", "src": str(staging),
                                              "path": str(models / "tiny" / "r1"), "manifest": MANIFEST})
    assert failed and str(models / "tiny") + " is a symbolic link" in result["msg"]
    assert not (outside / "r1").exists() and (outside / ".staging-r1" / "config.json").exists()


@pytest.mark.parametrize("kind", ["link", "file"])
def test_open_dir_refuses_a_part_that_is_not_a_plain_folder(tmp_path, kind):
    target = tmp_path / "real"
    target.mkdir()
    if kind == "link":
        os.symlink(str(target), str(tmp_path / "part"))
    else:
        (tmp_path / "part").write_text("x")
    with pytest.raises(ms.UnsafePath) as info:
        ms._open_dir(str(tmp_path / "part" / "below"))
    assert str(tmp_path / "part") in str(info.value)
