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


# A LoRA adapter loaded at runtime (tasks/lora_runtime.yml): the unit now lists it, the process
# serves it; the stamp of `applied` says so, for that process only.
def test_a_unit_stamped_as_applied_for_this_process_is_not_stale(tmp_path, monkeypatch, capsys):
    fake_show(monkeypatch)
    unit = touch(tmp_path / "vllm-a.service", 2_000_000_000)
    stamp = str(tmp_path / "applied" / "vllm-a.service.json")
    assert prog.main(["applied", "--unit", "vllm-a.service", "--file", unit, "--stamp", stamp]) == 0
    assert json.loads(capsys.readouterr().out)["pid"] == "4242"
    assert oct(os.stat(stamp).st_mode & 0o777) == "0o600"
    assert not prog.stale("vllm-a.service", [unit], NOW, NOW_MONO, applied=stamp)["stale"]
    # the unit changed again after the stamp: stale
    (tmp_path / "vllm-a.service").write_text("other")
    assert prog.stale("vllm-a.service", [unit], NOW, NOW_MONO, applied=stamp)["stale"]


def test_a_stamp_of_another_process_or_a_broken_stamp_counts_for_nothing(tmp_path, monkeypatch):
    unit = touch(tmp_path / "vllm-a.service", 2_000_000_000)
    stamp = tmp_path / "stamp.json"
    stamp.write_text(json.dumps({"pid": "4242", "files": {unit: prog._sha256(unit)}}))
    fake_show(monkeypatch, pid="4243")   # restarted since: the new process read the unit anyway,
    out = prog.stale("vllm-a.service", [unit], NOW, NOW_MONO, applied=str(stamp))
    assert out["stale"]                  # but this one started before the file: stale
    fake_show(monkeypatch)
    for text in ("not json", "[]", json.dumps({"pid": "4242", "files": []})):
        stamp.write_text(text)
        assert prog.stale("vllm-a.service", [unit], NOW, NOW_MONO, applied=str(stamp))["stale"], text
    assert prog.stale("vllm-a.service", [unit], NOW, NOW_MONO, applied=str(tmp_path / "none"))["stale"]


def test_applied_refuses_a_unit_that_does_not_run(tmp_path, monkeypatch, capsys):
    fake_show(monkeypatch, active="inactive", pid="0")
    stamp = tmp_path / "s.json"
    assert prog.main(["applied", "--unit", "vllm-a.service", "--file", str(tmp_path), "--stamp", str(stamp)]) == 1
    assert "not running" in capsys.readouterr().err and not stamp.exists()


def test_the_stale_check_finds_the_stamp_by_the_units_name(tmp_path, monkeypatch, capsys):
    # the roles call `stale` without naming the stamp: a host with an older program still works
    fake_show(monkeypatch)
    monkeypatch.setattr(prog, "APPLIED_DIR", str(tmp_path / "applied"))
    unit = touch(tmp_path / "vllm-a.service", 2_000_000_000)
    assert prog.main(["stale", "--unit", "vllm-a.service", "--file", unit]) == 0
    assert json.loads(capsys.readouterr().out)["stale"]
    assert prog.main(["applied", "--unit", "vllm-a.service", "--file", unit]) == 0
    assert json.loads(capsys.readouterr().out)["stamp"] == str(tmp_path / "applied" / "vllm-a.service.json")
    assert prog.main(["stale", "--unit", "vllm-a.service", "--file", unit]) == 0
    assert not json.loads(capsys.readouterr().out)["stale"]
