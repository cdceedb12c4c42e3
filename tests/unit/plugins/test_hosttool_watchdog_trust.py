"""The watchdog runs as root; the monitor's history is written by the monitor's unprivileged user.
Lines in that history never restart anything alone: the watchdog samples the instance itself
and acts only on the causes it confirms (memory_growth: on its own memory record)."""

from __future__ import annotations

import json
import socket
import time

import pytest

from ansible_collections.kvfleet.vllm.tests.unit.plugins import hostprog
from ansible_collections.kvfleet.vllm.tests.unit.plugins import local_servers as ls

prog = hostprog.load("kvfleet_vllm_watchdog_trust")
GIB = 1024 ** 3


def _line(t, causes, instance="main"):
    return {"instance": instance, "time": t, "cause_ids": list(causes), "verdict": "unhealthy"}


def _write(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path), "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


def _closed_port_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "http://127.0.0.1:%d" % s.getsockname()[1]


@pytest.fixture
def host(tmp_path, monkeypatch):
    calls = []

    class Host(object):
        def __init__(self):
            self.calls, self.history = calls, tmp_path / "monitor" / "history.jsonl"
            self.actions = tmp_path / "wd" / "actions.jsonl"
            self.memory = tmp_path / "wd" / "memory.jsonl"

        def config(self, url, causes=("engine_down", "admission_stall")):
            record = tmp_path / "record.json"
            record.write_text(json.dumps({"current": {"instances": [
                {"name": "main", "unit": "vllm-main.service", "url": url}]}}))
            monitor = tmp_path / "monitor.json"
            monitor.write_text(json.dumps({"history": str(self.history), "record": str(record)}))
            cfg = tmp_path / "watchdog.json"
            cfg.write_text(json.dumps({"record": str(record), "monitor_config": str(monitor),
                                       "state": str(tmp_path / "wd" / "restarts.json"), "causes": list(causes),
                                       "for_seconds": 600, "max_per_day": 2, "gate_samples": 2,
                                       "gate_interval": 0.2}))
            return type("A", (), {"config": str(cfg)})()

        def outcome(self):
            return json.loads(self.actions.read_text().splitlines()[-1])["outcome"]

    def restart_one(cfg, inst):
        calls.append(cfg["reason"])
        return "restarted"
    monkeypatch.setattr(prog, "restart_one", restart_one)
    return Host()


def test_two_forged_engine_down_lines_and_a_healthy_fresh_sample_restart_nothing(host, capsys):
    now = time.time()
    _write(host.history, [_line(now - 700, ["engine_down"]), _line(now - 5, ["engine_down"])])
    with ls.LocalServer(ls.vllm()) as server:
        assert prog.watchdog(host.config(server.url)) == 0
        assert server.requests, "the watchdog sampled the instance itself"
    assert host.calls == [] and host.outcome() == "unconfirmed"
    assert "does not confirm it" in capsys.readouterr().out


def test_an_engine_down_the_watchdog_measures_itself_is_restarted(host):
    now = time.time()
    _write(host.history, [_line(now - 700, ["engine_down"]), _line(now - 5, ["engine_down"])])
    assert prog.watchdog(host.config(_closed_port_url())) == 0
    assert len(host.calls) == 1 and host.calls[0].startswith("engine_down for 695s")
    assert host.outcome() == "restarted"


def test_only_the_causes_it_confirms_are_acted_on_and_named(host):
    now = time.time()
    _write(host.history, [_line(now - 700, ["engine_down", "admission_stall"]),
                          _line(now - 5, ["engine_down", "admission_stall"])])
    assert prog.watchdog(host.config(_closed_port_url())) == 0
    assert len(host.calls) == 1 and "engine_down" in host.calls[0] and "admission_stall" not in host.calls[0]


def _points(start, rss_start, rss_step, n=8, pid=4242):
    return [{"instance": "main", "time": start + 3600 * i,
             "unit_memory": {"rss_bytes": rss_start + rss_step * i, "main_pid": pid}} for i in range(n)]


@pytest.mark.parametrize("own_growth, restarted", [(0, False), (GIB // 2, True)])
def test_memory_growth_is_judged_on_the_watchdogs_own_readings(host, monkeypatch, own_growth, restarted):
    now = time.time()
    start = now - 8 * 3600
    # the monitor user's history claims a leak, whatever the process really holds
    forged = [dict(_line(now - 700, ["memory_growth"]), unit_memory={"rss_bytes": GIB, "main_pid": 4242}),
              dict(_line(now - 5, ["memory_growth"]), unit_memory={"rss_bytes": 9 * GIB, "main_pid": 4242})]
    _write(host.history, forged)
    own = _points(start, 2 * GIB, own_growth)
    _write(host.memory, own[:-1])
    monkeypatch.setattr(prog, "own_memory_point", lambda inst: dict(own[-1], time=now))
    assert prog.watchdog(host.config("http://127.0.0.1:9", causes=["memory_growth"])) == 0
    assert (len(host.calls) == 1) is restarted
    assert host.outcome() == ("restarted" if restarted else "unconfirmed")
    # this run's own reading joined the record
    assert json.loads(host.memory.read_text().splitlines()[-1])["unit_memory"] == own[-1]["unit_memory"]
