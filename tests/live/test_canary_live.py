"""canary_analysis through the ansible CLI against real vLLM 0.32 CPU servers on loopback.

The session's idle server (8 MiB KV, --max-num-seqs 16) is the baseline. The canaries: a server
with the same flags (for the first two tests), then one whose 2 MiB KV cache (64 blocks) is too
small for the load; one canary runs at a time, so that at most two engines share the cores.
Every loaded server gets the same load (the same Load, one process per server: 12 requests at a
time of 150 prompt words and 100 tokens, as the canary-* captures of tests/fixtures/metrics).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest

from conftest import MIB, requests_in, run_module
from test_hosttools_live import install
from vllm_server import Load, VllmServer

LOAD = (600, 12, 150, 100)   # requests, at a time, prompt words, max tokens: per server
WINDOW = {"duration": 8, "interval": 1}
# the restart guard's analysis, called in a process of its own on the installed program
GUARD_ANALYSIS = ("import importlib.util, json, sys; spec = importlib.util.spec_from_file_location('prog', sys.argv[1]); "
                  "prog = importlib.util.module_from_spec(spec); spec.loader.exec_module(prog); "
                  "print('VERDICT', prog.analyse_after_restart(json.loads(sys.argv[2]), json.loads(sys.argv[3])))")


class Canaries(object):
    """canaries.get("same") (8 MiB, --max-num-seqs 16) or get("small") (2 MiB): started on first
    use, the other one stopped first."""

    FLAGS = {"same": dict(kv_bytes=8 * MIB, max_num_seqs=16), "small": dict(kv_bytes=2 * MIB, max_num_seqs=16)}

    def __init__(self):
        self.kind, self.srv = None, None

    def get(self, kind):
        if kind != self.kind:
            self.close()
            self.srv, self.kind = VllmServer(**self.FLAGS[kind]).start(), kind
        return self.srv

    def close(self):
        if self.srv is not None:
            self.srv.cleanup()
        self.kind, self.srv = None, None


@pytest.fixture(scope="module")
def canaries():
    servers = Canaries()
    try:
        yield servers
    finally:
        servers.close()


def idle(srv, timeout=60):
    """Wait until an earlier test's load has left the server (vLLM aborts what its clients drop)."""
    deadline = time.time() + timeout
    while requests_in(srv, "running") + requests_in(srv, "waiting") > 0:
        if time.time() > deadline:
            raise AssertionError("%s was still busy %ss before this test's load" % (srv.url, timeout))
        time.sleep(0.5)


def same_load(servers, timeout=60):
    """The same load on each server, once each runs requests; the caller cancels the loads."""
    for srv in servers:
        idle(srv)
    loads = [Load(srv.url, *LOAD) for srv in servers]
    deadline = time.time() + timeout
    while not all(requests_in(srv, "running") >= 1 for srv in servers):
        if time.time() > deadline:
            for load in loads:
                load.cancel()
            raise AssertionError("no request running %ss after the loads started" % timeout)
        time.sleep(0.5)
    return loads


def analyse(canary, baseline, **extra):
    args = dict(WINDOW, canary=[{"name": "canary", "url": canary.url, "max_num_seqs": 16}],
                baseline=[{"name": "baseline", "url": baseline.url, "max_num_seqs": 16}], **extra)
    return run_module("canary_analysis", args, timed=True)


def test_the_same_flags_pass(canaries, idle_server):
    loads = same_load([canaries.get("same"), idle_server])
    try:
        failed, result, seconds = analyse(canaries.get("same"), idle_server)
    finally:
        for load in loads:
            load.cancel()
    assert not failed, result.get("reason") or result
    assert result["verdict"] == "pass", result["reason"]
    assert result["mode"] == "baseline" and result["causes"] == []
    assert result["requests"]["canary"] >= 20 and result["requests"]["baseline"] >= 20
    print("same flags: %s (%.1fs with the ansible CLI)" % (result["reason"], seconds))


def test_no_traffic_to_the_canary_is_inconclusive(canaries, idle_server):
    idle(canaries.get("same"))
    loads = same_load([idle_server])
    try:
        failed, result, seconds = analyse(canaries.get("same"), idle_server)
    finally:
        for load in loads:
            load.cancel()
    assert not failed and result["verdict"] == "inconclusive", result.get("reason") or result
    assert result["requests"]["canary"] == 0 and result["requests"]["baseline"] >= 20
    assert "not back in the load balancer?" in result["reason"]
    print("no traffic: %s (%.1fs with the ansible CLI)" % (result["reason"], seconds))


def test_a_kv_cache_too_small_fails_naming_the_metric(canaries, idle_server):
    small = canaries.get("small")
    loads = same_load([small, idle_server])
    try:
        failed, result, seconds = analyse(small, idle_server)
    finally:
        for load in loads:
            load.cancel()
    assert failed and result["verdict"] == "fail", result.get("reason") or result
    bad = [c["metric"] for c in result["checks"] if c["result"] == "fail"]
    assert {"preemptions_per_request", "kv_usage"} & set(bad), result["checks"]
    assert any(metric in result["reason"] for metric in ("preemptions_per_request", "kv_usage"))
    assert "kv_cache_exhausted" in [c["id"] for c in result["causes"]]
    print("small cache: %s (%.1fs with the ansible CLI)" % (result["reason"], seconds))


def test_the_restart_guard_judges_a_restarted_instance_the_same_way(canaries, idle_server, tmp_path):
    """The host program's analysis after a scheduled restart (vllm_restart_analysis_seconds), laid
    out as the hosttools role installs it (the shipped module_utils only, no Ansible): the small
    cache, under the same load as the other host's instance, fails naming the metric."""
    prog = install(tmp_path)
    small = canaries.get("small")
    cfg = {"host": "restarted-host", "analysis": {
        "seconds": WINDOW["duration"], "interval": WINDOW["interval"], "min_requests": 20, "fail_on": ["fail"],
        "baseline": [{"name": "other-host/main", "url": idle_server.url, "max_num_seqs": 16}]}}
    inst = {"name": "main", "unit": "vllm-main.service", "url": small.url, "max_num_seqs": 16}
    loads = same_load([small, idle_server])
    try:
        proc = subprocess.run(["/usr/bin/python3", "-I", "-c", GUARD_ANALYSIS, str(prog), json.dumps(cfg), json.dumps(inst)],
                              capture_output=True, text=True, timeout=120, check=False)
    finally:
        for load in loads:
            load.cancel()
    assert "VERDICT fail" in proc.stdout, proc.stdout + proc.stderr
    line = [x for x in proc.stderr.splitlines() if "analysis after the restart: fail" in x]
    assert line and ("kv_usage" in line[0] or "preemptions" in line[0]), proc.stderr
    print("restart guard: %s" % line[0])


def test_the_analysis_load_makes_a_quiet_window_conclusive(canaries, idle_server):
    """No users: kvfleet.vllm.analysis_load (the deploy's vllm_deploy_analysis_load) sends the same
    bounded load to the canary and the baseline while the analysis samples them."""
    same = canaries.get("same")
    idle(same)
    idle(idle_server)
    load = {}
    args = {"targets": [{"name": "canary", "url": same.url}, {"name": "baseline", "url": idle_server.url}],
            "prompts": [" ".join(["def class return"] * 50)], "duration": 22, "rate": 4, "concurrency": 6,
            "max_tokens": 16}
    sender = threading.Thread(target=lambda: load.update(zip(("failed", "result"), run_module("analysis_load", args))))
    sender.start()
    try:
        time.sleep(1)   # the window starts with requests in flight
        # 15 s inside the 22 s of load: beside the fleet's deploys these two engines finish about
        # 2 requests a second each, so an 8 s window can fall short of min_requests 20
        failed, result, seconds = analyse(same, idle_server, duration=15)
    finally:
        sender.join(120)
    assert not load["failed"] and load["result"]["requests_failed"] == 0, load["result"]
    per_target = dict((t["name"], t) for t in load["result"]["targets"])
    assert per_target["canary"]["ok"] >= 20 and per_target["baseline"]["ok"] >= 20, per_target
    assert not failed and result["verdict"] == "pass", result.get("reason") or result
    assert result["requests"]["canary"] >= 20 and result["requests"]["baseline"] >= 20
    print("analysis_load: %s sent, %s; %s (%.1fs)" % (load["result"]["requests_sent"], per_target, result["reason"], seconds))
