from __future__ import annotations

import socket

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils import _probe
from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import add_rates, diagnose
from ansible_collections.kvfleet.vllm.plugins.module_utils._probe import (
    Response, sample_until_decided, sample_window)


def _metrics(prompt, gen, running, waiting, usage):
    return ("vllm:num_requests_running{engine=\"0\",model_name=\"m\"} %d\n"
            "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} %d\n"
            "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} %s\n"
            "vllm:prompt_tokens_total{engine=\"0\",model_name=\"m\"} %d\n"
            "vllm:generation_tokens_total{engine=\"0\",model_name=\"m\"} %d\n"
            % (running, waiting, usage, prompt, gen)).encode()


def _server(readings, now):
    """A fake server whose /metrics gives the next reading per scrape (the last one repeats)."""
    def fetch(path):
        if path == "/metrics":
            body = readings.pop(0) if len(readings) > 1 else readings[0]
            return Response(200, body)
        return Response(200, b"{}")
    return fetch


def _run(readings, samples=3, interval=2.0):
    now = [100.0]

    def sleep(seconds):
        now[0] += seconds

    def judge(snaps):
        return diagnose(add_rates(snaps))

    return sample_until_decided(_server(readings, now), "http://h:1", samples, interval, judge,
                                sleep=sleep, clock=lambda: now[0])


def test_a_healthy_window_is_not_extended():
    moving = [_metrics(100, g, 2, 0, 0.3) for g in (10, 50, 90)]
    snaps, result, extended = _run(moving)
    assert len(snaps) == 3 and extended == 0.0 and result["pending"] == []


def test_a_window_that_looks_stalled_is_sampled_until_a_step_completes():
    # one long prefill step: nothing moves for 10 s, then the prompt tokens are counted
    held = _metrics(100, 10, 1, 3, 0.3)
    readings = [held] * 6 + [_metrics(4100, 11, 4, 0, 0.5)]
    snaps, result, extended = _run(readings)
    assert len(snaps) == 7 and extended == 8.0
    assert result["causes"] == [] and result["pending"] == []


def test_a_real_stall_is_confirmed_after_stall_seconds():
    snaps, result, extended = _run([_metrics(100, 10, 0, 5, 0.2)])
    assert [c["id"] for c in result["causes"]] == ["admission_stall"]
    assert result["verdict"] == "unhealthy" and 56.0 <= extended <= 58.0


def test_sample_window_keeps_cadence_and_records_unreachable():
    now = [100.0]
    slept = []

    def sleep(seconds):
        slept.append(round(seconds, 3))
        now[0] += seconds

    def fetch(path):
        now[0] += 0.5  # each request takes half a second
        return Response(None, b"", "Connection refused")

    snaps = sample_window(fetch, "http://h:1", 3, 2.0, sleep=sleep, clock=lambda: now[0])
    assert slept == [1.5, 1.5]  # due every 2 s, minus the 0.5 s the scrape took
    # starts every 2 s; an unreachable record is stamped when the failure is known
    assert [s["time"] for s in snaps] == [100.5, 102.5, 104.5]
    assert all(s["healthy"] is False and "Connection refused" in s["error"] for s in snaps)


def test_the_sockets_own_timeout_is_the_deadline():
    # the socket's timeout and the deadline have the same length: whichever fires first, the
    # caller sees DeadlineExceeded (the host program names a lost engine on it)
    def work():
        raise socket.timeout("timed out")
    with pytest.raises(_probe.DeadlineExceeded, match="within 3s"):
        _probe.with_deadline(work, 3)

    def refused():
        raise ConnectionRefusedError(111, "Connection refused")
    with pytest.raises(ConnectionRefusedError):
        _probe.with_deadline(refused, 3)
