"""cache_gate over many servers at once (targets): real HTTP against local servers."""

from __future__ import annotations

import os
import time

import pytest

from ansible_collections.kvfleet.vllm.plugins.modules import cache_gate
from ansible_collections.kvfleet.vllm.tests.unit import fixtures
from ansible_collections.kvfleet.vllm.tests.unit.plugins import local_servers
from ansible_collections.kvfleet.vllm.tests.unit.plugins.local_servers import LocalServer

SINGLE_KEYS = {"verdict", "state", "causes", "samples", "engines", "pending", "extended_seconds",
               "window_seconds", "msg"}


def capture(name):
    return fixtures.read(os.path.join(fixtures.METRICS, name)).encode()


def replay(condition):
    """The recorded captures of one condition, one per scrape, the last one repeated."""
    bodies = [capture("vllm-0.32.0-cpu-%s-%d.txt" % (condition, i)) for i in range(3)]
    return lambda: bodies.pop(0) if len(bodies) > 1 else bodies[0]


def hung(h):
    """Accepts and never answers (until local_servers.STOP_AFTER)."""
    time.sleep(local_servers.STOP_AFTER)


def test_each_target_gets_what_a_single_run_returns(run_module):
    with LocalServer(local_servers.vllm(replay("idle"))) as idle, \
            LocalServer(local_servers.vllm(replay("cap2"))) as capped:
        failed, fleet = run_module(cache_gate, {
            "targets": [{"name": "a", "host": "h1", "url": idle.url},
                        {"name": "b", "host": "h2", "url": capped.url, "max_num_seqs": 2}],
            "interval": 0, "fail_on": []})
    with LocalServer(local_servers.vllm(replay("cap2"))) as capped:
        unused, single = run_module(cache_gate, {"url": capped.url, "interval": 0,
                                                 "max_num_seqs": 2, "fail_on": []})
    assert not failed
    a, b = fleet["results"]
    assert SINGLE_KEYS <= set(a) and SINGLE_KEYS <= set(b)
    assert (a["name"], a["host"], a["verdict"], a["state"]) == ("a", "h1", "healthy", "idle")
    assert (b["name"], b["host"], b["verdict"]) == ("b", "h2", "degraded")
    # the same diagnosis as a single-server run over the same captures
    assert [c["id"] for c in b["causes"]] == [c["id"] for c in single["causes"]] == ["concurrency_cap"]
    assert b["causes"][0]["evidence"] == single["causes"][0]["evidence"]
    assert fleet["fleet"]["healthy"] == 1 and fleet["fleet"]["degraded"] == 1
    assert fleet["fleet"]["failed"] == [] and "2 vLLM server(s)" in fleet["msg"]


def test_a_hung_target_holds_only_itself(run_module):
    """Four healthy servers and one that never answers, two workers: the hung one ends at its
    own deadline (samples x timeout) as engine_down, the others are done before it.

    The timeout (4 s) is long beside what a healthy target needs, so that the bounds hold on a
    busy machine (tests/run.sh runs the units at nice 19 beside vLLM; 1.9 s was seen there for
    a healthy target's two samples)."""
    timeout = 4.0
    servers = [LocalServer(local_servers.vllm()) for unused in range(4)]
    stuck = LocalServer(hung)
    for srv in servers + [stuck]:
        srv.__enter__()
    try:
        targets = [{"name": "stuck", "url": stuck.url}] + [
            {"name": "ok%d" % i, "url": srv.url} for i, srv in enumerate(servers)]
        t0 = time.monotonic()
        failed, res = run_module(cache_gate, {"targets": targets, "samples": 2, "interval": 0.2,
                                              "timeout": timeout, "concurrency": 2, "extend": False})
        wall = time.monotonic() - t0
    finally:
        for srv in servers + [stuck]:
            srv.__exit__(None, None, None)
    by_name = dict((r["name"], r) for r in res["results"])
    assert failed  # unhealthy is in the default fail_on, for that target
    assert res["fleet"]["failed"] == ["stuck"]
    assert [c["id"] for c in by_name["stuck"]["causes"]] == ["engine_down"]
    assert "timed out" in by_name["stuck"]["samples"][-1]["error"]
    assert by_name["stuck"]["in_fail_on"] and not by_name["ok0"]["in_fail_on"]
    assert all(by_name["ok%d" % i]["verdict"] == "healthy" for i in range(4))
    # its own deadline: two requests of at most `timeout` each (the hung server holds a client
    # for 20 s: without the deadline this is far above)
    assert 2 * timeout - 0.1 <= by_name["stuck"]["seconds"] < 3 * timeout
    # the other worker served all four healthy ones meanwhile: no healthy target's window waited
    # for a hung request, and the run lasted the hung one's time, not the sum
    assert max(by_name["ok%d" % i]["seconds"] for i in range(4)) < timeout
    assert wall < by_name["stuck"]["seconds"] + timeout
    # results come in the order of the targets
    assert [r["name"] for r in res["results"]] == [t["name"] for t in targets]


@pytest.mark.parametrize("count, concurrency", [(20, 20), (10, 1)])
def test_many_targets_share_one_window(run_module, count, concurrency):
    """Servers sampled 3 times 0.5 s apart, as many workers as servers or just one: about one
    window, not one per server. A worker never waits out a target's interval while another
    target's sample is due (with one worker, one window per server ran one after another)."""
    servers = [LocalServer(local_servers.vllm()) for unused in range(count)]
    for srv in servers:
        srv.__enter__()
    try:
        failed, res = run_module(cache_gate, {
            "targets": [{"name": str(i), "url": s.url} for i, s in enumerate(servers)],
            "interval": 0.5, "concurrency": concurrency})
    finally:
        for srv in servers:
            srv.__exit__(None, None, None)
    assert not failed and res["fleet"]["healthy"] == count
    assert res["fleet"]["concurrency"] == concurrency
    assert all(len(r["samples"]) == 3 for r in res["results"])
    # one window for all: every target's window began before any target's ended. No wall-clock
    # bound: the machine may be loaded.
    firsts = [r["samples"][0]["time"] for r in res["results"]]
    lasts = [r["samples"][-1]["time"] for r in res["results"]]
    assert max(firsts) < min(lasts)
    # each target keeps its own cadence (as a single run's window): sample i is not taken before
    # i intervals after its first
    for r in res["results"]:
        times = [snap["time"] for snap in r["samples"]]
        assert all(t >= times[0] + i * 0.5 - 0.01 for i, t in enumerate(times)), times


def test_a_refused_target_is_its_own_engine_down(run_module):
    with LocalServer(local_servers.vllm()) as srv:
        gone = LocalServer(local_servers.vllm())
        dead_url = gone.url
        gone.httpd.server_close()  # nothing listens there any more
        failed, res = run_module(cache_gate, {
            "targets": [{"name": "dead", "url": dead_url}, {"name": "up", "url": srv.url}],
            "interval": 0, "fail_on": []})
    assert not failed
    dead, up = res["results"]
    assert dead["verdict"] == "unhealthy" and [c["id"] for c in dead["causes"]] == ["engine_down"]
    assert up["verdict"] == "healthy"


def test_each_target_gets_its_own_api_key_and_limits(run_module):
    with LocalServer(local_servers.vllm(replay("cap2"))) as one, \
            LocalServer(local_servers.vllm(replay("cap2"))) as two:
        failed, res = run_module(cache_gate, {
            "targets": [{"name": "one", "url": one.url, "api_key": "k-one", "max_num_seqs": 2},
                        {"name": "two", "url": two.url}],
            "interval": 0, "max_num_seqs": 64, "fail_on": []})
        assert {r["headers"].get("Authorization") for r in one.requests} == {"Bearer k-one"}
        assert not two.saw_header("Authorization")
    assert not failed
    one_ev = res["results"][0]["causes"][0]["evidence"]
    assert one_ev.get("max_num_seqs") == 2 or one_ev.get("cap") == 2 or "2" in str(one_ev)
    assert "k-one" not in str(res)


@pytest.mark.parametrize("args, text", [
    ({"targets": [{"name": "x", "url": "ftp://h:1"}]}, "targets[0].url"),
    ({"targets": [{"name": "x", "url": "http://h:1", "max_num_seqs": 0}]}, "targets[0].max_num_seqs"),
    ({"targets": [{"name": "x", "url": "http://h:1"}], "concurrency": 0}, "concurrency"),
    ({"targets": [{"name": "x", "url": "http://h:1"}], "url": "http://h:1"}, "mutually exclusive"),
    ({}, "one of the following is required"),
])
def test_bad_targets_fail_before_any_request(run_module, args, text):
    failed, res = run_module(cache_gate, args)
    assert failed and text in res["msg"]


def test_url_password_in_a_target_is_masked(run_module):
    with LocalServer(local_servers.vllm()) as srv:
        url = srv.url.replace("http://", "http://user:s3cr3t-pw@")
        failed, res = run_module(cache_gate, {"targets": [{"name": "x", "url": url}], "interval": 0})
    assert not failed and "s3cr3t-pw" not in str(res)
    assert res["results"][0]["url"] == srv.url
