"""The monitor's latency quantiles: each round's window from the history lines' bucket counts,
and the textfile's kvfleet_vllm_latency_seconds gauges, against real vLLM 0.32.0 captures."""

from __future__ import annotations

import argparse
import json
import os

from ansible_collections.kvfleet.vllm.plugins.module_utils._prom import parse
from ansible_collections.kvfleet.vllm.tests.unit import fixtures
from ansible_collections.kvfleet.vllm.tests.unit.plugins import hostprog, local_servers as ls

prog = hostprog.load("kvfleet_vllm_latency")


def capture(name):
    return fixtures.read(os.path.join(fixtures.METRICS, "vllm-0.32.0-cpu-%s.txt" % name)).encode()


def monitor(tmp_path, url):
    record = tmp_path / "record.fact"
    record.write_text(json.dumps({"current": {"instances": [
        {"name": "a", "unit": "vllm-a.service", "url": url}]}}))
    cfg = {"record": str(record), "history": str(tmp_path / "mon" / "history.jsonl"),
           "textfile": str(tmp_path / "textfile" / "kvfleet_vllm.prom"), "window": 3}
    path = tmp_path / "monitor.json"
    path.write_text(json.dumps(cfg))
    return argparse.Namespace(config=str(path))


def gauges(tmp_path):
    text = (tmp_path / "textfile" / "kvfleet_vllm.prom").read_text()
    return dict((tuple(sorted(s.labels.items())), s.value) for s in parse(text)[0]
                if s.name == "kvfleet_vllm_latency_seconds")


def test_rounds_give_since_start_then_the_window_then_none_after_a_restart(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(prog, "unit_state", lambda unit: {"ActiveState": "active", "NRestarts": 0})
    # one capture per round; busy-0 again in the third round: the server restarted (its counts
    # went down) without the monitor seeing it down
    bodies = [capture("busy-0"), capture("busy-2"), capture("busy-0")]
    with ls.LocalServer(ls.vllm(lambda: bodies.pop(0))) as server:
        args = monitor(tmp_path, server.url)
        history = tmp_path / "mon" / "history.jsonl"

        assert prog.sample(args) == 0
        first = json.loads(history.read_text().splitlines()[-1])
        assert first["latency"]["basis"] == "since_start"
        assert first["histograms"]["ttft"]["0"]["counts"][-1] == 4  # kept for the next rounds
        # busy-0 TTFT: 0, 1, 2, 3, 4 up to le=0.04; p50 rank 2 -> le=0.01: 0.005 + 0.005 x 1/1
        assert first["latency"]["ttft"]["p50"] == 0.01

        assert prog.sample(args) == 0
        second = json.loads(history.read_text().splitlines()[-1])
        lat = second["latency"]
        assert lat["basis"] == "window" and lat["seconds"] == round(second["time"] - first["time"], 3)
        # the window busy-0 -> busy-2, computed by hand in module_utils/test_latency.py
        assert (lat["ttft"]["p50"], lat["ttft"]["p90"], lat["ttft"]["p99"]) == (0.007917, 0.016333, 0.019633)
        found = gauges(tmp_path)
        assert found[(("instance", "a"), ("metric", "ttft"), ("quantile", "0.9"))] == 0.016333
        assert found[(("instance", "a"), ("metric", "e2e"), ("quantile", "0.99"))] == 1.495
        assert len(found) == 12  # four metrics, three quantiles

        assert prog.sample(args) == 0
        third = json.loads(history.read_text().splitlines()[-1])
        for metric in ("ttft", "itl", "queue", "e2e"):
            assert third["latency"][metric]["p50"] is None
            assert "restarted" in third["latency"][metric]["reason"]
        assert gauges(tmp_path) == {}  # no value rather than a wrong or negative one
    out = capsys.readouterr()
    assert "Traceback" not in out.err


def test_history_lines_with_damaged_histograms_never_stop_a_round(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(prog, "unit_state", lambda unit: {"ActiveState": "active", "NRestarts": 0})
    with ls.LocalServer(ls.vllm(capture("busy-2"))) as server:
        args = monitor(tmp_path, server.url)
        history = tmp_path / "mon" / "history.jsonl"
        history.parent.mkdir(parents=True)
        history.write_text(json.dumps({"instance": "a", "time": 1.0, "healthy": True,
                                       "histograms": {"ttft": {"0": {"le": "x"}}, "itl": 7}}) + "\n")
        assert prog.sample(args) == 0
    line = json.loads(history.read_text().splitlines()[-1])
    assert line["verdict"] == "healthy"
    assert line["latency"]["ttft"]["p50"] is None and "malformed" in line["latency"]["ttft"]["reason"]
    assert line["latency"]["itl"]["p50"] is None and line["latency"]["itl"]["reason"]
    assert (("instance", "a"), ("metric", "ttft"), ("quantile", "0.5")) not in gauges(tmp_path)


def test_gate_command_reports_the_window_without_raw_counts(monkeypatch):
    bodies = [capture("busy-0"), capture("busy-1"), capture("busy-2")]
    with ls.LocalServer(ls.vllm(lambda: bodies.pop(0))) as server:
        result = prog.run_gate(server.url, samples=3, interval=0, timeout=3)
    assert result["latency"]["ttft"]["p90"] == 0.016333
    assert not [s for s in result["samples"] if "histograms" in s]
    json.dumps(result, allow_nan=False)
