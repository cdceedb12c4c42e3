"""roles/server/files/rollback_backup.py: the deploy's backup for a rollback, in one call.

tasks/rollback.yml puts back what it keeps: every vLLM unit, environment and key file and the
deployment record. A file missing from the backup is an instance a rollback cannot restore; a
file of a removed instance left in it is one a rollback would bring back; a backup that rewrites
unchanged files makes a converged deploy report changes."""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import subprocess
import sys

from ansible_collections.kvfleet.vllm.plugins.module_utils._layout import LAYOUT

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
SCRIPT = os.path.join(ROOT, "roles", "server", "files", "rollback_backup.py")

_spec = importlib.util.spec_from_file_location("rollback_backup", SCRIPT)
rb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rb)

SECRET = "sk-canary-4d1f"
UNIT_GLOB = LAYOUT["unit_glob"]


def _write(path, text, mode):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(path, mode)


def _host(tmp_path):
    """A host's files: two instances, a foreign unit and file, a link, the record."""
    units, conf = tmp_path / "systemd", tmp_path / "etc-vllm"
    _write(str(units / "vllm-a.service"), "[Service]\nExecStart=/bin/true a\n", 0o644)
    _write(str(units / "vllm-b.service"), "[Service]\nExecStart=/bin/true b\n", 0o644)
    _write(str(units / "sshd.service"), "[Service]\n", 0o644)
    os.symlink(str(units / "vllm-a.service"), str(units / "vllm-link.service"))
    _write(str(conf / "a.env"), "VLLM_API_KEY=%s\n" % SECRET, 0o600)
    _write(str(conf / "b.env"), "VLLM_API_KEY=%s\n" % SECRET, 0o600)
    _write(str(conf / "a.keys.yaml"), "keys: [%s]\n" % SECRET, 0o640)
    _write(str(conf / "notes.txt"), "not ours\n", 0o644)
    record = tmp_path / "facts.d" / "kvfleet_vllm_server.fact"
    _write(str(record), '{"current": {"version": "0.32.0"}}\n', 0o644)
    return str(units), str(conf), str(record)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_it_keeps_every_vllm_file_and_the_record_root_only(tmp_path):
    units, conf, record = _host(tmp_path)
    dest = str(tmp_path / "state" / "rollback")
    out = rb.backup(dest, conf, record, units, UNIT_GLOB)
    assert out["changed"] is True
    assert sorted(out["kept"]) == ["env/a.env", "env/a.keys.yaml", "env/b.env", "record.json",
                                   "units/vllm-a.service", "units/vllm-b.service"]
    assert sorted(os.listdir(os.path.join(dest, "units"))) == ["vllm-a.service", "vllm-b.service"]
    assert sorted(os.listdir(os.path.join(dest, "env"))) == ["a.env", "a.keys.yaml", "b.env"]
    for sub in ("", "units", "env"):
        assert _mode(os.path.join(dest, sub)) == 0o700
    # the parent stays readable: the monitor's own folder is beside the backup
    assert _mode(os.path.dirname(dest)) == 0o755
    assert _mode(os.path.join(dest, "env", "a.env")) == 0o600
    assert _mode(os.path.join(dest, "env", "a.keys.yaml")) == 0o640
    assert _mode(os.path.join(dest, "record.json")) == 0o600
    with open(os.path.join(dest, "units", "vllm-b.service"), encoding="utf-8") as f:
        assert f.read() == "[Service]\nExecStart=/bin/true b\n"


def test_a_second_backup_of_the_same_host_changes_nothing(tmp_path):
    units, conf, record = _host(tmp_path)
    dest = str(tmp_path / "state" / "rollback")
    rb.backup(dest, conf, record, units, UNIT_GLOB)
    before = {n: os.stat(os.path.join(dest, "units", n)).st_mtime_ns for n in os.listdir(os.path.join(dest, "units"))}
    out = rb.backup(dest, conf, record, units, UNIT_GLOB)
    assert out["changed"] is False and out["removed"] == []
    assert before == {n: os.stat(os.path.join(dest, "units", n)).st_mtime_ns for n in before}


def test_a_changed_file_or_mode_is_copied_again(tmp_path):
    units, conf, record = _host(tmp_path)
    dest = str(tmp_path / "state" / "rollback")
    rb.backup(dest, conf, record, units, UNIT_GLOB)
    _write(os.path.join(units, "vllm-a.service"), "[Service]\nExecStart=/bin/true a --max-num-seqs 8\n", 0o644)
    assert rb.backup(dest, conf, record, units, UNIT_GLOB)["changed"] is True
    with open(os.path.join(dest, "units", "vllm-a.service"), encoding="utf-8") as f:
        assert "--max-num-seqs 8" in f.read()
    os.chmod(os.path.join(dest, "env", "b.env"), 0o644)   # someone widened the kept copy
    assert rb.backup(dest, conf, record, units, UNIT_GLOB)["changed"] is True
    assert _mode(os.path.join(dest, "env", "b.env")) == 0o600


def test_files_of_a_removed_instance_leave_the_backup(tmp_path):
    units, conf, record = _host(tmp_path)
    dest = str(tmp_path / "state" / "rollback")
    rb.backup(dest, conf, record, units, UNIT_GLOB)
    os.unlink(os.path.join(units, "vllm-b.service"))
    os.unlink(os.path.join(conf, "b.env"))
    os.unlink(os.path.join(conf, "a.keys.yaml"))   # a finished key rotation
    out = rb.backup(dest, conf, record, units, UNIT_GLOB)
    assert out["changed"] is True
    assert sorted(out["removed"]) == ["env/a.keys.yaml", "env/b.env", "units/vllm-b.service"]
    assert os.listdir(os.path.join(dest, "units")) == ["vllm-a.service"]
    assert os.listdir(os.path.join(dest, "env")) == ["a.env"]


def test_no_record_now_removes_the_kept_one(tmp_path):
    """Before the first deployment there is no record: a rollback must then remove the new one,
    not put back a stale one."""
    units, conf, record = _host(tmp_path)
    dest = str(tmp_path / "state" / "rollback")
    rb.backup(dest, conf, record, units, UNIT_GLOB)
    os.unlink(record)
    out = rb.backup(dest, conf, record, units, UNIT_GLOB)
    assert "record.json" in out["removed"] and out["changed"] is True
    assert not os.path.exists(os.path.join(dest, "record.json"))
    assert rb.backup(dest, conf, record, units, UNIT_GLOB)["changed"] is False


def test_a_fresh_host_backs_up_nothing_and_does_not_fail(tmp_path):
    dest = str(tmp_path / "state" / "rollback")
    out = rb.backup(dest, str(tmp_path / "no-conf"), str(tmp_path / "no-record"), str(tmp_path / "no-units"), UNIT_GLOB)
    assert out["kept"] == [] and out["removed"] == []
    assert sorted(os.listdir(dest)) == ["env", "units"]


def test_the_command_prints_names_never_contents(tmp_path):
    units, conf, record = _host(tmp_path)
    dest = str(tmp_path / "state" / "rollback")
    proc = subprocess.run([sys.executable, SCRIPT, dest, conf, record, units, UNIT_GLOB], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["changed"] is True
    for short in ([dest], [dest, conf, record, units]):
        bad = subprocess.run([sys.executable, SCRIPT] + short, capture_output=True, text=True, check=False)
        assert bad.returncode == 2 and "ROLLBACK_DIR" in bad.stderr


def _run_stdin(args):
    """The script run by python3 from its stdin (as it runs from a file: tasks/backup.yml)."""
    with open(SCRIPT, encoding="utf-8") as f:
        source = f.read()
    return subprocess.run([sys.executable, "-"] + args, input=source, capture_output=True, text=True, check=False)


def test_the_drain_marker_rides_along_before_the_drain_and_after_the_undrain(tmp_path):
    units, conf, record = _host(tmp_path)
    dest = str(tmp_path / "state" / "rollback")
    marker = str(tmp_path / "facts.d" / "kvfleet_vllm_drained.fact")
    proc = _run_stdin([dest, conf, record, units, UNIT_GLOB, "--mark-drained", marker, "kvfleet.vllm.deploy"])
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    # what tasks/record.yml would read back as local facts, and the backup done
    with open(marker, encoding="utf-8") as f:
        written = json.load(f)
    assert written["by"] == "kvfleet.vllm.deploy" and written["since"].endswith("Z")
    assert _mode(marker) == 0o644
    assert out["drained"] == written and out["current"] == {"version": "0.32.0"}
    assert "record.json" in out["kept"]
    # after the undrain: the marker goes, the record's current part comes back, nothing re-copied
    proc = _run_stdin([dest, conf, record, units, UNIT_GLOB, "--clear-drained", marker])
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert not os.path.exists(marker)
    assert out["drained"] is None and out["current"] == {"version": "0.32.0"} and out["changed"] is False
    assert SECRET not in proc.stdout + proc.stderr
    # clearing an absent marker is not an error (a host whose marker a rescue already removed)
    assert _run_stdin([dest, conf, record, units, UNIT_GLOB, "--clear-drained", marker]).returncode == 0


def test_no_record_reads_as_an_empty_current_part(tmp_path):
    units, conf, unused = _host(tmp_path)
    dest = str(tmp_path / "state" / "rollback")
    for text in (None, "not json", "[1, 2]", '{"current": "garbage"}'):
        record = str(tmp_path / "record.fact")
        if text is None:
            if os.path.exists(record):
                os.unlink(record)
        else:
            _write(record, text, 0o644)
        proc = _run_stdin([dest, conf, record, units, UNIT_GLOB])
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["current"] == {}


def test_bad_options_change_nothing(tmp_path):
    units, conf, record = _host(tmp_path)
    dest = str(tmp_path / "state" / "rollback")
    full = [dest, conf, record, units, UNIT_GLOB]
    for args in (full + ["--mark-drained", "only-one"], full + ["--nope"],
                 full + ["--mark-drained", "m", "by", "--clear-drained", "m"]):
        proc = _run_stdin(args)
        assert proc.returncode == 2 and "ROLLBACK_DIR" in proc.stderr, args
    assert not os.path.exists(dest)


def test_the_drain_marker_alone_without_a_backup(tmp_path):
    """tasks/drain_marker.yml: a restart that changes nothing marks and clears the host the same
    way, with the same code, and backs nothing up."""
    marker = str(tmp_path / "facts.d" / "kvfleet_vllm_drained.fact")
    proc = _run_stdin(["--mark-drained", marker, "kvfleet.vllm.rolling_restart"])
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    with open(marker, encoding="utf-8") as f:
        written = json.load(f)
    assert written["by"] == "kvfleet.vllm.rolling_restart" and _mode(marker) == 0o644
    assert out == {"changed": True, "current": {}, "drained": written}
    proc = _run_stdin(["--clear-drained", marker])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"changed": True, "current": {}, "drained": None}
    assert not os.path.exists(marker)
    # a marker already gone: nothing to do, not an error
    assert json.loads(_run_stdin(["--clear-drained", marker]).stdout)["changed"] is False
    # neither a backup nor a marker, or a backup short of its folders: refused
    for args in ([], [str(tmp_path / "rollback")], ["--mark-drained", marker]):
        proc = _run_stdin(args)
        assert proc.returncode == 2 and "ROLLBACK_DIR" in proc.stderr, args
    assert not os.path.exists(tmp_path / "rollback")
