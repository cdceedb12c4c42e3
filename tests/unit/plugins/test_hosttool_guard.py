"""The restart guard's safety rules (roles/hosttools/files/kvfleet_vllm.py, restart_one): it never
starts a unit that was stopped, and never restarts one still within its health timeout."""

from __future__ import annotations

import time

import pytest

from ansible_collections.kvfleet.vllm.tests.unit.plugins import hostprog

INST = {"name": "main", "unit": "vllm-main.service", "url": "http://127.0.0.1:9", "graceful": True}


prog = hostprog.load("kvfleet_vllm_guard")


@pytest.fixture
def host(monkeypatch):
    """A unit in a given state; records the commands the guard would run."""
    calls = []

    class Host(object):
        state = {"ActiveState": "active", "Result": "success", "NRestarts": 0}

    def run(argv, **_kwargs):
        calls.append(argv)
        raise AssertionError("the guard ran %r" % (argv,))

    monkeypatch.setattr(prog, "unit_state", lambda unit: dict(Host.state))
    monkeypatch.setattr(prog.subprocess, "run", run)
    monkeypatch.setattr(prog, "run_gate", lambda *a, **k: {
        "verdict": "unhealthy", "causes": [{"id": "engine_down"}]})
    monkeypatch.setattr(prog, "take", lambda *a, **k: dict(Host.snapshot))
    Host.snapshot = {"healthy": True, "engines_sleeping": 0}
    Host.calls = calls
    return Host


@pytest.mark.parametrize("mode", ["always", "when_degraded"])
@pytest.mark.parametrize("active", ["inactive", "deactivating"])
def test_a_stopped_unit_is_never_started(host, capsys, mode, active):
    host.state = {"ActiveState": active, "Result": "success", "NRestarts": 0}
    assert prog.restart_one({"mode": mode, "causes": ["engine_down"]}, INST) == "skipped"
    assert host.calls == []
    assert "never starts a stopped unit" in capsys.readouterr().out


@pytest.mark.parametrize("mode", ["always", "when_degraded"])
def test_a_unit_still_within_its_health_timeout_is_left_to_load(host, capsys, mode):
    started = time.monotonic() - 120   # two minutes ago
    host.state = {"ActiveState": "active", "Result": "success", "NRestarts": 0,
                  "ActiveEnterTimestampMonotonic": str(int(started * 1e6))}
    cfg = {"mode": mode, "causes": ["engine_down"], "health_timeout": 900}
    assert prog.restart_one(cfg, INST) == "skipped"
    assert host.calls == []
    assert "started 120s ago, within its health timeout (900s)" in capsys.readouterr().out


@pytest.mark.parametrize("mode", ["always", "when_degraded"])
def test_a_sleeping_engine_is_never_restarted(host, capsys, mode):
    host.snapshot = {"healthy": True, "engines_sleeping": 1}
    assert prog.restart_one({"mode": mode, "causes": ["engine_down"]}, INST) == "skipped"
    assert host.calls == []
    assert "never restarts a sleeping engine" in capsys.readouterr().out


def test_a_failed_or_long_running_sick_unit_is_restarted(host, monkeypatch):
    """Past the health timeout (or failed, not stopped), the guard goes on to restart."""
    monkeypatch.setattr(prog, "_wait_idle", lambda inst, timeout: {})
    for state in ({"ActiveState": "failed", "Result": "exit-code"},
                  {"ActiveState": "active", "Result": "success",
                   "ActiveEnterTimestampMonotonic": str(int((time.monotonic() - 3600) * 1e6))}):
        host.state = dict(state, NRestarts=0)
        with pytest.raises(AssertionError, match="systemctl', 'restart'"):
            prog.restart_one({"mode": "when_degraded", "causes": ["engine_down"], "health_timeout": 900}, INST)


@pytest.mark.parametrize("value, expected", [("0", None), ("", None), ("junk", None), ("5000000", 5.0)])
def test_seconds_since_start(value, expected):
    assert prog.seconds_since_start({"ActiveEnterTimestampMonotonic": value}, now=10.0) == (
        None if expected is None else 10.0 - expected)
