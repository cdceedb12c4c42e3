from __future__ import annotations

import hashlib
import os

from ansible_collections.kvfleet.vllm.plugins.modules import model_store

FILES = {"config.json": b'{"a": 1}', "model.safetensors": b"\x00" * 100}
MANIFEST = "".join("%s  %s\n" % (hashlib.sha256(v).hexdigest(), k) for k, v in FILES.items())


def _write(root, files):
    os.makedirs(root, exist_ok=True)
    for rel, data in files.items():
        with open(os.path.join(root, rel), "wb") as handle:
            handle.write(data)


def test_info_full_and_stamp(run_module, tmp_path):
    src = str(tmp_path / "src")
    _write(src, FILES)
    failed, result = run_module(model_store, {"path": src, "manifest": MANIFEST})
    assert not failed and result["verified"] and result["bytes"] == 108 and not result["changed"]
    assert result["free_bytes"] > 0
    # no stamp: verify=stamp says not verified (the role then stages it)
    failed, result = run_module(model_store, {"path": src, "manifest": MANIFEST, "verify": "stamp"})
    assert not failed and not result["verified"]


def test_promote_then_idempotent_then_check_mode(run_module, tmp_path):
    store = tmp_path / "tiny"
    staging, target = str(store / ".staging-r1"), str(store / "r1")
    _write(staging, FILES)
    args = {"operation": "promote", "src": staging, "path": target, "manifest": MANIFEST}
    failed, result = run_module(model_store, args)
    assert not failed and result["changed"] and os.path.isdir(target) and not os.path.exists(staging)
    failed, result = run_module(model_store, args)
    assert not failed and not result["changed"]
    failed, result = run_module(model_store, {"path": target, "manifest": MANIFEST, "verify": "stamp"})
    assert result["verified"]
    # check mode changes nothing
    other = str(store / "r2")
    failed, result = run_module(model_store, dict(args, path=other, src=str(store / ".staging-r2"),
                                                  _ansible_check_mode=True))
    assert not failed and result["changed"] and not os.path.exists(other)


def test_promote_refuses_corruption_naming_the_file(run_module, tmp_path):
    store = tmp_path / "tiny"
    staging, target = str(store / ".staging-r1"), str(store / "r1")
    _write(staging, dict(FILES, **{"config.json": b'{"a": 9}'}))
    failed, result = run_module(model_store, {"operation": "promote", "src": staging, "path": target,
                                              "manifest": MANIFEST})
    assert failed and "sha256 differs: config.json" in result["msg"]
    assert not os.path.exists(target) and not os.path.exists(staging)


def test_promote_needs_staging_beside_the_target(run_module, tmp_path):
    staging = str(tmp_path / "elsewhere" / ".staging-r1")
    _write(staging, FILES)
    failed, result = run_module(model_store, {"operation": "promote", "src": staging,
                                              "path": str(tmp_path / "tiny" / "r1"), "manifest": MANIFEST})
    assert failed and "beside path" in result["msg"]


def test_bad_manifest_names_the_field(run_module, tmp_path):
    failed, result = run_module(model_store, {"path": str(tmp_path), "manifest": "nonsense line\n"})
    assert failed and result["msg"].startswith("manifest: manifest line 1")


def test_prune(run_module, tmp_path):
    store = tmp_path / "tiny"
    for i, name in enumerate(["r1", "r2", "r3"]):
        staging = str(store / (".staging-" + name))
        _write(staging, FILES)
        run_module(model_store, {"operation": "promote", "src": staging, "path": str(store / name),
                                 "manifest": MANIFEST})
        os.utime(str(store / name / ".kvfleet-verified.json"), (1000 + i, 1000 + i))
    os.makedirs(str(store / ".staging-r4"))
    failed, result = run_module(model_store, {"operation": "prune", "path": str(store), "keep": 2,
                                              "protect": ["r1"], "_ansible_check_mode": True})
    assert not failed and result["removed"] == ["r2"] and os.path.isdir(str(store / "r2"))
    failed, result = run_module(model_store, {"operation": "prune", "path": str(store), "keep": 2, "protect": ["r1"]})
    assert result["removed"] == ["r2"] and result["kept"] == ["r1", "r3"] and not os.path.exists(str(store / "r2"))
    failed, result = run_module(model_store, {"operation": "prune", "path": str(store), "keep": 0})
    assert failed and "keep: must be at least 1" in result["msg"]


def test_promote_of_a_folder_hashed_while_written_checks_its_shape(tmp_path):
    from ansible_collections.kvfleet.vllm.plugins.module_utils._model_store import promote
    store = tmp_path / "tiny"
    staging, target = str(store / ".fetching-r1"), str(store / "r1")
    _write(staging, {"config.json": FILES["config.json"]})          # model.safetensors missing
    result = promote(staging, target, _parse(MANIFEST), hashed=True)
    assert not result["verified"] and result["missing"] == ["model.safetensors"]
    assert not os.path.exists(staging) and not os.path.exists(target)
    _write(staging, FILES)
    assert promote(staging, target, _parse(MANIFEST), hashed=True)["verified"] and os.path.isdir(target)


def _parse(text):
    from ansible_collections.kvfleet.vllm.plugins.module_utils._model_store import parse_manifest
    return parse_manifest(text)
