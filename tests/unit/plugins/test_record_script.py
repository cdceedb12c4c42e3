"""roles/server/files/record.py: the deployment record in one call (tasks/service.yml, the
deploy's sizing). It must keep what the copy it replaced kept: `previous` when the version or the
flags change, the sizing while they stay, the same text (no spurious change on a converged host),
and write nothing in check mode."""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import subprocess
import sys

from ansible.plugins.filter.core import to_nice_json

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
SCRIPT = os.path.join(ROOT, "roles", "server", "files", "record.py")
_spec = importlib.util.spec_from_file_location("record_script", SCRIPT)
rec = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rec)

A = {"version": "0.32.0", "config": "aaaa", "instances": [{"name": "main", "url": "http://10.0.0.1:8000"}]}
B = dict(A, config="bbbb")
SIZING = {"measured": "2026-12-04T10:00:00Z", "typical_tokens": 2048, "instances": [{"name": "main"}]}


def _run(path, *args):
    with open(SCRIPT, encoding="utf-8") as f:
        source = f.read()
    proc = subprocess.run([sys.executable, "-", str(path)] + list(args), input=source, capture_output=True,
                          text=True, check=False)
    return proc.returncode, (json.loads(proc.stdout) if proc.returncode == 0 else proc.stderr)


def _read(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def test_a_first_record_then_a_change_keeps_the_one_before_as_previous(tmp_path):
    path = tmp_path / "kvfleet_vllm_server.fact"
    assert _run(path, "--current", json.dumps(A)) == (0, {"changed": True})
    assert _read(path) == {"current": A, "previous": {}}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    # the same again changes nothing (a converged host's idempotence)
    assert _run(path, "--current", json.dumps(A)) == (0, {"changed": False})
    assert _run(path, "--current", json.dumps(B)) == (0, {"changed": True})
    assert _read(path) == {"current": B, "previous": A}


def test_the_sizing_stays_while_the_settings_do_and_carries_their_config(tmp_path):
    path = tmp_path / "kvfleet_vllm_server.fact"
    _run(path, "--current", json.dumps(A))
    assert _run(path, "--sizing", json.dumps(SIZING)) == (0, {"changed": True})
    assert _read(path)["sizing"] == dict(SIZING, config="aaaa")
    # the role applied again with the same settings (an instance's URL only): sizing kept
    moved = dict(A, instances=[{"name": "main", "url": "http://10.0.0.2:8000"}])
    _run(path, "--current", json.dumps(moved))
    assert _read(path)["sizing"]["config"] == "aaaa" and _read(path)["previous"] == {}
    # new flags: the sizing was of the old ones
    _run(path, "--current", json.dumps(B))
    assert "sizing" not in _read(path) and _read(path)["previous"] == moved
    # no record yet: nothing to size
    empty = tmp_path / "none.fact"
    assert _run(empty, "--sizing", json.dumps(SIZING)) == (0, {"changed": True})
    assert _read(empty) == {}


def test_the_text_is_what_to_nice_json_wrote(tmp_path):
    """The copy it replaces wrote `to_nice_json` and a newline: the same text, so that a host
    whose record the old way wrote is not rewritten (changed) by the new one."""
    path = tmp_path / "kvfleet_vllm_server.fact"
    old = {"current": A, "previous": {"version": "0.31.0", "config": "zzzz"}, "sizing": dict(SIZING, config="aaaa")}
    path.write_text(to_nice_json(old) + "\n")
    assert _run(path, "--current", json.dumps(A)) == (0, {"changed": False})
    assert rec.text(old) == to_nice_json(old) + "\n"


def test_check_mode_writes_nothing_and_bad_input_changes_nothing(tmp_path):
    path = tmp_path / "kvfleet_vllm_server.fact"
    assert _run(path, "--current", json.dumps(A), "--check") == (0, {"changed": True})
    assert not path.exists()
    for args in ([], ["--current"], ["--current", "not json"], ["--current", "[1]"], ["--nope", "x"],
                 ["--current", json.dumps(A), "extra"]):
        code, unused = _run(path, *args)
        assert code == 2, args
    assert not path.exists()
    # an unreadable record is replaced, as a copy would have replaced it
    path.write_text("{not json")
    assert _run(path, "--current", json.dumps(A)) == (0, {"changed": True})
    assert _read(path)["current"] == A
