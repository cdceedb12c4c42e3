"""The opt-in watchdog (roles/hosttools/files/kvfleet_vllm.py, watchdog): after a monitor round,
it restarts an instance whose samples have all named a cause a restart cures for long enough,
through the guard's restart_one, rate-limited, and records every decision."""

from __future__ import annotations

import json
import time

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils._trends import persisting_causes
from ansible_collections.kvfleet.vllm.tests.unit.plugins import hostprog

prog = hostprog.load("kvfleet_vllm_watchdog")
NOW = 1800000000.0


def _line(t, causes, instance="main", **extra):
    return dict(instance=instance, time=t, cause_ids=list(causes), verdict="degraded" if causes else "healthy", **extra)


@pytest.mark.parametrize("lines, found", [
    # named by every sample of the last 10 minutes (and before): acts
    ([_line(NOW - 900 + 60 * i, ["admission_stall"]) for i in range(16)], {"admission_stall": 900.0}),
    # for 5 minutes only
    ([_line(NOW - 900 + 60 * i, [] if i < 10 else ["admission_stall"]) for i in range(16)], {}),
    # one healthy sample in the middle breaks the run
    ([_line(NOW - 900 + 60 * i, [] if i == 12 else ["admission_stall"]) for i in range(16)], {}),
    # a cause the watchdog does not act on
    ([_line(NOW - 900 + 60 * i, ["concurrency_cap"]) for i in range(16)], {}),
    # the monitor stopped 20 minutes ago: nothing about now
    ([_line(NOW - 2100 + 60 * i, ["admission_stall"]) for i in range(16)], {}),
    # one sample is not a run
    ([_line(NOW, ["admission_stall"])], {}),
    ([], {}),
])
def test_persisting_causes(lines, found):
    assert persisting_causes(lines, NOW, ["admission_stall", "engine_down"], 600) == found


def test_persisting_causes_skips_odd_lines():
    good = [_line(NOW - 700, ["engine_down"]), _line(NOW, ["engine_down"])]
    odd = [{"time": "x", "cause_ids": ["engine_down"]}, {"time": True, "cause_ids": ["engine_down"]}, "junk"]
    assert persisting_causes(good[:1] + odd + good[1:], NOW, ["engine_down"], 600) == {"engine_down": 700.0}
    good[-1]["cause_ids"] = "engine_down"   # not a list: not named
    assert persisting_causes(good, NOW, ["engine_down"], 600) == {}


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A host with one instance, a monitor history and the watchdog's configuration."""
    record = tmp_path / "record.json"
    record.write_text(json.dumps({"current": {"instances": [
        {"name": "main", "unit": "vllm-main.service", "url": "http://127.0.0.1:9"},
        {"name": "other", "unit": "vllm-other.service", "url": "http://127.0.0.1:10"}]}}))
    history = tmp_path / "history.jsonl"
    monitor = tmp_path / "monitor.json"
    monitor.write_text(json.dumps({"history": str(history), "record": str(record)}))
    cfg = tmp_path / "watchdog.json"
    cfg.write_text(json.dumps({"record": str(record), "monitor_config": str(monitor),
                               "state": str(tmp_path / "wd" / "restarts.json"),
                               "causes": ["admission_stall", "engine_down"], "for_seconds": 600,
                               "max_per_day": 2}))
    calls = []

    def restart_one(c, inst):
        calls.append((c["mode"], c["reason"], inst["name"]))
        return host.outcome

    class host(object):   # noqa: N801 (a namespace for the test)
        outcome = "restarted"
        args = type("A", (), {"config": str(cfg)})()

    host.calls, host.history, host.state = calls, history, tmp_path / "wd" / "restarts.json"
    host.actions = tmp_path / "wd" / "actions.jsonl"
    monkeypatch.setattr(prog, "restart_one", restart_one)
    # the watchdog's own fresh sample confirms what the history names (its refusals when it does
    # not: test_hosttool_watchdog_trust.py)
    monkeypatch.setattr(prog, "fresh_causes", lambda c, monitor, inst, wanted, points: set(wanted))
    return host


def _write(path, lines):
    with open(path, "w") as f:
        for ln in lines:
            f.write(json.dumps(ln) + "\n")


def _stalled(now, minutes=12, instance="main"):
    return [_line(now - 60 * (minutes - i), ["admission_stall"], instance=instance) for i in range(minutes + 1)]


def test_restarts_a_stalled_instance_once_and_records_it(host, capsys):
    now = time.time()
    _write(host.history, _stalled(now) + [_line(now, [], instance="other")])
    assert prog.watchdog(host.args) == 0
    assert [(m, i) for m, _r, i in host.calls] == [("watchdog", "main")]
    assert host.calls[0][1].startswith("admission_stall for 7") and host.calls[0][1].endswith("s (a restart cures it)")
    last = json.loads(host.actions.read_text().splitlines()[-1])
    assert last["instance"] == "main" and last["outcome"] == "restarted"
    assert list(last["causes"]) == ["admission_stall"]
    assert len(json.loads(host.state.read_text())["restarts"]) == 1
    # the next round, the same run of samples: decided already, nothing done
    assert prog.watchdog(host.args) == 0 and len(host.calls) == 1


def test_a_healthy_instance_is_left_alone(host):
    now = time.time()
    _write(host.history, [_line(now - 60 * i, []) for i in range(12, -1, -1)])
    assert prog.watchdog(host.args) == 0
    assert host.calls == [] and not host.state.exists() and not host.actions.exists()


def test_rate_limited_per_host_per_day(host, capsys):
    now = time.time()
    host.state.parent.mkdir()
    host.state.write_text(json.dumps({"restarts": [now - 3600, now - 7200, now - 2 * 86400]}))
    _write(host.history, _stalled(now))
    assert prog.watchdog(host.args) == 0
    assert host.calls == []
    assert "2 watchdog restart(s) on this host in 24 h, the most allowed" in capsys.readouterr().out
    assert json.loads(host.actions.read_text().splitlines()[-1])["outcome"] == "rate-limited"
    # the day-old restart is forgotten
    assert len(json.loads(host.state.read_text())["restarts"]) == 2


def test_a_unit_the_guard_leaves_alone_is_recorded_as_skipped(host):
    """A sleeping or stopped unit: restart_one says 'skipped' (its own tests prove why)."""
    host.outcome = "skipped"
    now = time.time()
    _write(host.history, _stalled(now))
    assert prog.watchdog(host.args) == 0
    assert json.loads(host.actions.read_text().splitlines()[-1])["outcome"] == "skipped"
    assert not json.loads(host.state.read_text())["restarts"]   # a skip is not a restart


def test_a_failed_restart_fails_the_unit_and_stops_there(host):
    host.outcome = "failed"
    now = time.time()
    _write(host.history, _stalled(now) + _stalled(now, instance="other"))
    assert prog.watchdog(host.args) == 1
    assert [i for _m, _r, i in host.calls] == ["main"]   # never a second instance after a failure


def test_a_decision_is_not_repeated_within_for_seconds(host):
    """A unit the guard left alone is looked at again after for_seconds, not at every round."""
    host.outcome = "skipped"
    now = time.time()
    _write(host.history, _stalled(now))
    host.actions.parent.mkdir()
    _write(host.actions, [{"instance": "main", "time": now - 300, "outcome": "skipped"}])
    assert prog.watchdog(host.args) == 0 and host.calls == []
    _write(host.actions, [{"instance": "main", "time": now - 700, "outcome": "skipped"}])
    assert prog.watchdog(host.args) == 0 and len(host.calls) == 1


def test_the_monitor_history_is_readable_by_the_watchdog(tmp_path, monkeypatch):
    """The sampler (UMask=0077) leaves its history 0644: root without capabilities reads it."""
    import os
    import stat
    record = tmp_path / "record.json"
    record.write_text(json.dumps({"current": {"instances": [{"name": "main", "url": "http://127.0.0.1:9"}]}}))
    cfg = tmp_path / "monitor.json"
    cfg.write_text(json.dumps({"history": str(tmp_path / "h" / "history.jsonl"), "record": str(record)}))
    monkeypatch.setattr(prog, "take", lambda *a, **k: {"time": time.time(), "healthy": True})
    old = os.umask(0o077)
    try:
        assert prog.sample(type("A", (), {"config": str(cfg)})()) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "h" / "history.jsonl").st_mode) == 0o644
