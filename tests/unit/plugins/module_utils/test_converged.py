"""A host's converged state (module_utils/_converged.py): recorded after a verified deploy, and
every change a deploy must not miss is a reason; an unchanged host has none."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils import _converged as conv

FP = "f" * 64


@pytest.fixture
def host(tmp_path):
    """A host's files: two units and their environment files, the record, the venv stamp, the
    host tools, a staged model."""
    units = tmp_path / "systemd"
    units.mkdir()
    for name in ("a", "b"):
        (units / ("vllm-%s.service" % name)).write_text("[Service]\nExecStart=/x %s\n" % name)
        (tmp_path / ("%s.env" % name)).write_text("KEY=%s\n" % name)
    (units / "other.service").write_text("not ours")
    (tmp_path / "record.fact").write_text('{"current": {}}')
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".kvfleet-complete").write_text("0.32.0")
    tools = tmp_path / "tools" / "lib"
    tools.mkdir(parents=True)
    (tools / "x.py").write_text("print(1)")
    model = tmp_path / "models" / "tiny" / "r1"
    model.mkdir(parents=True)
    (model / "weights.bin").write_bytes(b"\0" * 64)
    spec = {
        "files": [str(units / "vllm-a.service"), str(units / "vllm-b.service"), str(tmp_path / "a.env"),
                  str(tmp_path / "b.env"), str(tmp_path / "record.fact"), str(venv / ".kvfleet-complete")],
        "trees": [str(tmp_path / "tools")],
        "stat_trees": [str(model)],
        "globs": [str(units) + "/vllm-*.service"],
        "absent": [str(tmp_path / "venv.installing")],
        "units": [{"unit": "vllm-a.service", "files": [str(units / "vllm-a.service")]}],
    }
    return tmp_path, spec


def test_an_unchanged_host_has_no_reason(host):
    _root, spec = host
    recorded = conv.state(spec, FP)
    assert json.loads(json.dumps(recorded)) == recorded   # what the host program writes and reads back
    assert conv.differences(recorded, FP) == []


@pytest.mark.parametrize("change, words", [
    (lambda r: (r / "a.env").write_text("KEY=rotated\n"), "a.env changed"),
    (lambda r: os.remove(str(r / "b.env")), "b.env is gone"),
    (lambda r: (r / "systemd" / "vllm-a.service").write_text("edited by hand"), "vllm-a.service changed"),
    (lambda r: (r / "systemd" / "vllm-c.service").write_text("[Service]"), "vllm-c.service appeared"),
    (lambda r: (r / "tools" / "lib" / "x.py").write_text("print(2)"), "tools changed"),
    (lambda r: (r / "tools" / "lib" / "new.py").write_text(""), "tools changed"),
    (lambda r: (r / "models" / "tiny" / "r1" / "weights.bin").write_bytes(b"\1" * 65), "r1 changed"),
    (lambda r: (r / "venv.installing").write_text(""), "venv.installing exists"),
    (lambda r: (r / "venv" / ".kvfleet-complete").write_text("0.31.0"), ".kvfleet-complete changed"),
    (lambda r: (r / "record.fact").write_text('{"current": {"version": "0.31.0"}}'), "record.fact changed"),
])
def test_each_change_is_a_reason(host, change, words):
    root, spec = host
    recorded = conv.state(spec, FP)
    change(root)
    reasons = conv.differences(recorded, FP)
    assert len(reasons) == 1 and words in reasons[0], reasons


def test_a_file_outside_the_units_pattern_is_not_counted(host):
    root, spec = host
    recorded = conv.state(spec, FP)
    (root / "systemd" / "unrelated.service").write_text("x")
    assert conv.differences(recorded, FP) == []


def test_other_settings_or_another_collection_is_a_reason_before_any_file_is_read(host):
    _root, spec = host
    recorded = conv.state(spec, FP)
    assert conv.differences(recorded, "0" * 64) == [
        "the settings or the collection changed since the host was last verified"]


@pytest.mark.parametrize("recorded", [None, {}, {"version": 0}, "text", {"version": 2, "fingerprint": FP}])
def test_no_state_or_another_version_is_never_converged(recorded):
    assert conv.differences(recorded, FP) == [
        "no verified state recorded (a first deploy, or one by an older collection)"]


def test_an_unreadable_spec_is_a_reason(host):
    _root, spec = host
    recorded = conv.state(spec, FP)
    recorded["spec"]["files"] = ["relative/path"]
    assert conv.differences(recorded, FP)[0].startswith("the recorded state is unreadable: spec.files")


@pytest.mark.parametrize("spec, field", [
    ([], "JSON object"),
    ({"files": "/a"}, "spec.files"),
    ({"trees": ["rel"]}, "spec.trees"),
    ({"globs": [1]}, "spec.globs"),
    ({"units": [{"files": []}]}, "spec.units"),
    ({"units": "vllm-a.service"}, "spec.units"),
])
def test_a_bad_spec_is_refused_naming_the_field(spec, field):
    with pytest.raises(ValueError, match=field):
        conv.check_spec(spec)


def test_the_fingerprint_must_be_given():
    with pytest.raises(ValueError, match="fingerprint"):
        conv.state({}, "")


def test_load_reads_a_state_or_says_none(tmp_path):
    path = tmp_path / "converged.json"
    assert conv.load(str(path)) is None
    path.write_text("not json")
    assert conv.load(str(path)) is None
    path.write_text('{"version": 1}')
    assert conv.load(str(path)) == {"version": 1}


def test_a_link_is_not_read_as_the_file(tmp_path):
    target = tmp_path / "t"
    target.write_text("x")
    link = tmp_path / "l"
    link.symlink_to(target)
    recorded = conv.state({"files": [str(link)]}, FP)
    assert recorded["snapshot"]["files"][str(link)] is None
