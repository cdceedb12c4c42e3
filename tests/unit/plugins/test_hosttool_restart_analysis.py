"""The analysis after a scheduled restart (roles/hosttools/files/kvfleet_vllm.py,
analyse_after_restart): the restarted instance against the other hosts' instances, judged as the
deploy judges a canary. Two local servers replay real captures of vLLM 0.32.0 CPU under one load
(tests/fixtures/metrics/MANIFEST.json, conditions canary-small-kv and canary-idle), one
capture per /metrics request."""

from __future__ import annotations

import os

import pytest

from ansible_collections.kvfleet.vllm.tests.unit import fixtures
from ansible_collections.kvfleet.vllm.tests.unit.plugins import hostprog, local_servers

prog = hostprog.load("kvfleet_vllm_restart_analysis")
KEY = "own-instance-key-5d1e"


def _replay(condition):
    """/metrics answers: the condition's captures in order, then the last one again."""
    pages = [fixtures.read(os.path.join(fixtures.METRICS, "vllm-0.32.0-cpu-%s-%d.txt" % (condition, i))).encode()
             for i in range(20)]
    served = [0]

    def metrics():
        page = pages[min(served[0], len(pages) - 1)]
        served[0] += 1
        return page
    return metrics


def _cfg(baseline_url, seconds=3.8, fail_on=("fail",)):
    # 20 samples 0.2 s apart: one per capture
    return {"host": "node1", "analysis": {
        "seconds": seconds, "interval": 0.2, "min_requests": 20, "fail_on": list(fail_on),
        "baseline": [{"name": "node2/main", "host": "node2", "url": baseline_url, "max_num_seqs": 16}]}}


def _inst(url):
    return {"name": "main", "unit": "vllm-main.service", "url": url, "max_num_seqs": 16}


def test_a_cache_too_small_fails_naming_the_check_and_only_the_own_instance_gets_the_key(monkeypatch, capsys):
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    with local_servers.LocalServer(local_servers.vllm(_replay("canary-small-kv-canary"))) as canary, \
            local_servers.LocalServer(local_servers.vllm(_replay("canary-small-kv-baseline"))) as peer:
        verdict = prog.analyse_after_restart(_cfg(peer.url), _inst(canary.url))
    out = "".join(capsys.readouterr())   # errors go to stderr
    assert verdict == "fail", out
    line = [x for x in out.splitlines() if "analysis after the restart" in x][0]
    assert line.startswith(prog.ERR) and "vllm-main.service: analysis after the restart: fail" in line
    assert "kv_usage" in line or "preemptions" in line or "kv_cache_exhausted" in line, line
    assert "against 1 instance(s) of the other hosts" in out
    # the own instance with its key; the other host's /metrics, /health and /version without one
    assert canary.saw_header("Authorization") and all(
        r["headers"].get("Authorization") == "Bearer " + KEY for r in canary.requests)
    assert peer.requests and not peer.saw_header("Authorization")


def test_an_instance_no_traffic_reached_fails_on_its_share(monkeypatch, capsys):
    # back from its restart but not back in the load balancer: no data is never a pass
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    with local_servers.LocalServer(local_servers.vllm(_replay("canary-idle-canary"))) as canary, \
            local_servers.LocalServer(local_servers.vllm(_replay("canary-idle-baseline"))) as peer:
        verdict = prog.analyse_after_restart(_cfg(peer.url), _inst(canary.url))
    out = "".join(capsys.readouterr())   # errors go to stderr
    assert verdict == "fail", out
    line = [x for x in out.splitlines() if "analysis after the restart" in x][0]
    assert line.startswith(prog.ERR), line
    assert "traffic_share" in line and "not back in the load balancer?" in line


def test_an_idle_fleet_after_a_restart_is_inconclusive_and_only_warned_about(monkeypatch, capsys):
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    with local_servers.LocalServer(local_servers.vllm(_replay("canary-idle-canary"))) as canary, \
            local_servers.LocalServer(local_servers.vllm(_replay("canary-idle-canary"))) as peer:
        verdict = prog.analyse_after_restart(_cfg(peer.url), _inst(canary.url))
    out = capsys.readouterr().out
    assert verdict == "inconclusive", out
    line = [x for x in out.splitlines() if "analysis after the restart" in x][0]
    assert line.startswith(prog.WARNING), line


def test_off_samples_nothing(monkeypatch):
    monkeypatch.setattr(prog, "run_analysis", lambda *a, **k: pytest.fail("the analysis ran"))
    assert prog.analyse_after_restart({"analysis": {"seconds": 0}}, _inst("http://127.0.0.1:9")) is None
    assert prog.analyse_after_restart({}, _inst("http://127.0.0.1:9")) is None


@pytest.fixture
def restarts(monkeypatch):
    """restart_one up to its analysis, on two instances: every systemctl succeeds, each comes
    back healthy; records the units restarted."""
    restarted = []

    class Proc(object):
        returncode, stderr = 0, ""

    def run(argv, **_kwargs):
        restarted.append(argv[-1])
        return Proc()

    monkeypatch.setattr(prog, "unit_state", lambda unit: {"ActiveState": "active", "Result": "success"})
    monkeypatch.setattr(prog, "take", lambda *a, **k: {"healthy": True, "engines_sleeping": 0})
    monkeypatch.setattr(prog, "decision_gpus", lambda cfg, inst: ([], None))
    monkeypatch.setattr(prog, "_wait_idle", lambda inst, timeout: {})
    monkeypatch.setattr(prog, "wait_healthy", lambda args: 0)
    monkeypatch.setattr(prog.subprocess, "run", run)
    monkeypatch.setattr(prog, "load_config", lambda path: {"mode": "always", "analysis": {"seconds": 60, "fail_on": ["fail"]}})
    monkeypatch.setattr(prog, "load_instances", lambda cfg: [_inst("http://127.0.0.1:9"),
                                                             dict(_inst("http://127.0.0.1:9"), name="second",
                                                                  unit="vllm-second.service")])
    return restarted


@pytest.mark.parametrize("verdict, code, units", [
    ("fail", 1, ["vllm-main.service"]),           # worse than the others: the guard stops there
    ("inconclusive", 0, ["vllm-main.service", "vllm-second.service"]),
    ("pass", 0, ["vllm-main.service", "vllm-second.service"]),
])
def test_a_failed_analysis_fails_the_unit_and_stops_the_guard(restarts, monkeypatch, capsys, verdict, code, units):
    monkeypatch.setattr(prog, "analyse_after_restart", lambda cfg, inst: verdict)
    assert prog.restart_guard(type("Args", (), {"config": "/unused"})()) == code
    assert restarts == units
    out = "".join(capsys.readouterr())
    assert ("vllm-main.service analysis-failed" in out) == (verdict == "fail"), out
