from __future__ import annotations

from ansible_collections.kvfleet.vllm.plugins.module_utils._probe import Response, sample_window


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
