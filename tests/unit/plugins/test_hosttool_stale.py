"""`kvfleet-vllm stale`: a unit whose running process is older than its files (an earlier run
wrote them, then stopped before restarting the server) is named, with why."""

from __future__ import annotations

import json
import os

from ansible_collections.kvfleet.vllm.tests.unit.plugins import hostprog

prog = hostprog.load("kvfleet_vllm_stale")
NOW, NOW_MONO = 1_000_000.0, 5_000.0   # wall clock and monotonic clock "now"


def fake_show(monkeypatch, active="active", pid="4242", started_mono=4_000.0):
    """systemctl show for a process started at monotonic `started_mono` (NOW - 1000 s here)."""
    class Done(object):
        stdout = "ActiveState=%s\nMainPID=%s\nExecMainStartTimestampMonotonic=%d\n" % (
            active, pid, int(started_mono * 1e6))
    monkeypatch.setattr(prog.subprocess, "run", lambda *a, **k: Done())


def touch(path, when):
    path.write_text("x")
    os.utime(str(path), (when, when))
    return str(path)


def test_a_file_written_after_the_process_started_makes_it_stale(tmp_path, monkeypatch):
    fake_show(monkeypatch)
    unit = touch(tmp_path / "vllm-a.service", NOW - 10)      # written 990 s after the start
    env = touch(tmp_path / "a.env", NOW - 5000)
    out = prog.stale("vllm-a.service", [unit, env, str(tmp_path / "missing.crt")], NOW, NOW_MONO)
    assert out["stale"] and "PID 4242" in out["why"] and "vllm-a.service (changed 990s" in out["why"]
    assert "a.env" not in out["why"]


def test_files_older_than_the_process_are_not_stale(tmp_path, monkeypatch):
    fake_show(monkeypatch)
    files = [touch(tmp_path / "u", NOW - 1001), touch(tmp_path / "e", NOW - 2000)]
    assert prog.stale("vllm-a.service", files, NOW, NOW_MONO) == {
        "unit": "vllm-a.service", "stale": False, "why": None, "active": True}


def test_a_unit_that_is_not_running_is_never_stale(tmp_path, monkeypatch):
    newer = [touch(tmp_path / "u", NOW)]
    for kwargs in ({"active": "inactive"}, {"active": "failed"}, {"pid": "0"}, {"started_mono": 0}):
        fake_show(monkeypatch, **kwargs)
        out = prog.stale("vllm-a.service", newer, NOW, NOW_MONO)
        assert not out["stale"], kwargs
        assert out["active"] == (kwargs.get("active", "active") == "active"), kwargs


def test_the_command_prints_json(tmp_path, monkeypatch, capsys):
    fake_show(monkeypatch)
    unit = touch(tmp_path / "u", 2_000_000_000)   # the future: surely after the start
    assert prog.main(["stale", "--unit", "vllm-a.service", "--file", unit]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stale"] and out["unit"] == "vllm-a.service"
