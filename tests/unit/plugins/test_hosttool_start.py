"""`kvfleet-vllm start`: the server role's run step in one call (tasks/service.yml). A failed unit
has its start limit cleared, a unit that does not run is enabled and started, one that runs is
asked whether its process predates its files; --check changes nothing; a systemctl that fails
is named. A fake systemctl keeps each unit's state."""

from __future__ import annotations

import json

import pytest

from ansible_collections.kvfleet.vllm.tests.unit.plugins import hostprog

prog = hostprog.load("kvfleet_vllm_start")


class FakeSystemd(object):
    def __init__(self, units, fail=None):
        self.units, self.calls, self.fail = units, [], fail

    def run(self, argv, **_kwargs):
        assert argv[0] == "systemctl"
        self.calls.append(argv[1:])
        verb = argv[1]
        if verb == "show":
            unit = self.units.get(argv[-1], {"ActiveState": "inactive", "UnitFileState": "disabled"})
            out = "".join("%s=%s\n" % kv for kv in unit.items())
            return prog.subprocess.CompletedProcess(argv, 0, out + "MainPID=0\n", "")
        if verb == self.fail:
            return prog.subprocess.CompletedProcess(argv, 1, "", "Failed to %s %s: Access denied" % (verb, argv[-1]))
        unit = self.units.setdefault(argv[-1], {}) if len(argv) > 2 else {}
        if verb == "start":
            unit["ActiveState"] = "active"
        elif verb == "reset-failed":
            unit["ActiveState"] = "inactive"
        elif verb == "enable":
            unit["UnitFileState"] = "enabled"
        elif verb == "disable":
            unit["UnitFileState"] = "disabled"
        return prog.subprocess.CompletedProcess(argv, 0, "", "")


@pytest.fixture
def systemd(monkeypatch):
    def make(units, fail=None):
        fake = FakeSystemd(units, fail)
        monkeypatch.setattr(prog.subprocess, "run", fake.run)
        monkeypatch.setattr(prog, "stale", lambda unit, files: {
            "unit": unit, "stale": unit == "vllm-old.service", "active": True,
            "why": "the running process (PID 7) predates %s" % files[0] if unit == "vllm-old.service" else None})
        return fake
    return make


def _spec(*units):
    return [{"unit": u, "files": ["/etc/systemd/system/" + u]} for u in units]


def test_failed_new_and_running_units_in_one_call(systemd):
    fake = systemd({"vllm-a.service": {"ActiveState": "failed", "UnitFileState": "enabled"},
                    "vllm-old.service": {"ActiveState": "active", "UnitFileState": "enabled"},
                    "vllm-ok.service": {"ActiveState": "active", "UnitFileState": "enabled"}})
    out = prog.start_units(_spec("vllm-a.service", "vllm-new.service", "vllm-old.service", "vllm-ok.service"),
                           reload=True)
    rows = dict((r["unit"], r) for r in out["units"])
    assert out["changed"] is True
    assert (rows["vllm-a.service"]["reset"], rows["vllm-a.service"]["started"]) == (True, True)
    assert rows["vllm-new.service"]["started"] and rows["vllm-new.service"]["enabled_changed"]
    assert rows["vllm-old.service"]["stale"] and "PID 7" in rows["vllm-old.service"]["why"]
    assert not rows["vllm-ok.service"]["started"] and not rows["vllm-ok.service"]["stale"]
    assert all(r["active"] for r in out["units"])
    verbs = [c for c in fake.calls if c[0] != "show"]
    assert verbs == [["daemon-reload"], ["reset-failed", "vllm-a.service"], ["start", "vllm-a.service"],
                     ["enable", "vllm-new.service"], ["start", "vllm-new.service"]]


def test_nothing_to_do_is_no_change_and_no_reload_unless_asked(systemd):
    fake = systemd({"vllm-ok.service": {"ActiveState": "active", "UnitFileState": "enabled"}})
    out = prog.start_units(_spec("vllm-ok.service"))
    assert out["changed"] is False and [c for c in fake.calls if c[0] != "show"] == []


def test_not_enabled_at_boot_disables(systemd):
    fake = systemd({"vllm-ok.service": {"ActiveState": "active", "UnitFileState": "enabled"}})
    out = prog.start_units(_spec("vllm-ok.service"), enabled=False)
    assert out["changed"] and ["disable", "vllm-ok.service"] in fake.calls


def test_check_mode_says_what_it_would_do_and_does_nothing(systemd):
    fake = systemd({"vllm-a.service": {"ActiveState": "failed", "UnitFileState": "enabled"}})
    out = prog.start_units(_spec("vllm-a.service", "vllm-new.service"), reload=True, check=True)
    assert out["changed"] and all(r["started"] for r in out["units"])
    assert [c for c in fake.calls if c[0] != "show"] == []


def test_the_command_prints_json_and_names_a_failing_systemctl(systemd, capsys):
    systemd({})
    assert prog.main(["start", "--spec", json.dumps(_spec("vllm-new.service"))]) == 0
    assert json.loads(capsys.readouterr().out)["units"][0]["started"] is True
    systemd({}, fail="start")
    assert prog.main(["start", "--spec", json.dumps(_spec("vllm-new.service"))]) == 1
    assert "systemctl start vllm-new.service failed (exit 1): Failed to start" in capsys.readouterr().err
    assert prog.main(["start", "--spec", "not json"]) == 1
    assert "Expecting value" in capsys.readouterr().err
    for bad in ('{"unit": "x"}', '[{"files": []}]', "[1]"):
        assert prog.main(["start", "--spec", bad]) == 1
        assert "--spec must be a JSON list of {unit, files}" in capsys.readouterr().err


def test_units_of_instances_the_host_no_longer_has_are_removed_with_their_files(systemd, tmp_path):
    units, conf = tmp_path / "systemd", tmp_path / "vllm"
    units.mkdir()
    conf.mkdir()
    for name in ("vllm-main.service", "vllm-ray.service", "vllm-old.service", "sshd.service", "vllm-x.service.d"):
        (units / name).write_text("[Service]\n")
    for name in ("main.env", "ray.env", "old.env", "old.keys.yaml", "notes.txt"):
        (conf / name).write_text("x\n")
    fake = systemd({"vllm-main.service": {"ActiveState": "active", "UnitFileState": "enabled"}})
    # check mode: named, nothing touched
    out = prog.start_units(_spec("vllm-main.service"), config_dir=str(conf), unit_dir=str(units), check=True)
    assert out["removed"] == ["vllm-old.service", "vllm-ray.service"] and out["changed"]
    assert sorted(p.name for p in units.iterdir()) == ["sshd.service", "vllm-main.service", "vllm-old.service",
                                                       "vllm-ray.service", "vllm-x.service.d"]
    assert [c for c in fake.calls if c[0] != "show"] == []
    out = prog.start_units(_spec("vllm-main.service"), config_dir=str(conf), unit_dir=str(units))
    assert out["removed"] == ["vllm-old.service", "vllm-ray.service"]
    assert sorted(p.name for p in units.iterdir()) == ["sshd.service", "vllm-main.service", "vllm-x.service.d"]
    assert sorted(p.name for p in conf.iterdir()) == ["main.env", "notes.txt"]
    assert ["disable", "--now", "vllm-ray.service"] in fake.calls and ["daemon-reload"] in fake.calls
    # nothing else to remove: no change, no reload
    fake.calls[:] = []
    out = prog.start_units(_spec("vllm-main.service"), config_dir=str(conf), unit_dir=str(units))
    assert out["removed"] == [] and not out["changed"] and [c for c in fake.calls if c[0] != "show"] == []
