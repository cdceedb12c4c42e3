"""canary_analysis through the ansible CLI against real vLLM 0.32 CPU servers on loopback.

The session's idle server (8 MiB KV, --max-num-seqs 16) is the baseline. The canaries: a server
with the same flags (for the first two tests), then one whose 2 MiB KV cache (64 blocks) is too
small for the load; one canary runs at a time, so that at most two engines share the cores.
Every loaded server gets the same load (the same Load, one process per server: 12 requests at a
time of 150 prompt words and 100 tokens, as the canary-* captures of tests/fixtures/metrics).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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


def test_no_traffic_to_the_canary_fails_on_its_share(canaries, idle_server):
    # the load balancer forgot the canary: no data is never a pass
    idle(canaries.get("same"))
    loads = same_load([idle_server])
    try:
        failed, result, seconds = analyse(canaries.get("same"), idle_server)
    finally:
        for load in loads:
            load.cancel()
    assert failed and result["verdict"] == "fail", result.get("reason") or result
    assert result["requests"]["canary"] == 0 and result["requests"]["baseline"] >= 20
    share = [c for c in result["checks"] if c["metric"] == "traffic_share"][0]
    assert share["result"] == "fail" and "not back in the load balancer?" in share["why"], share
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
    # named by the cache's checks, or by the critical cause that ended the window at once (its
    # few intervals then leave the checks inconclusive: the tolerance alone decides nothing)
    bad = [c["metric"] for c in result["checks"] if c["result"] == "fail"]
    critical = [c["id"] for c in result["causes"] if c.get("severity") == "critical"]
    assert {"preemptions_per_request", "kv_usage", "kv_cache_exhausted"} & set(bad + critical), result["checks"]
    assert any(name in result["reason"] for name in ("preemptions_per_request", "kv_usage", "kv_cache_exhausted (critical"))
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


# --- what real failures must not fool -------------------------------------------------------------

def test_a_canary_restarted_mid_window_fails_at_once(canaries, idle_server):
    """The canary's vLLM is restarted a few seconds into a 60 s window (stopped, then started as a
    new process): the analysis fails it as soon as the outage is proven (two unreadable samples:
    engine_down), without waiting for the window's end. (Back as a new process within the
    window, it fails on its process start time: the unit tests' restart cases.)"""
    same = canaries.get("same")
    loads = same_load([same, idle_server])
    box = {}
    thread = threading.Thread(target=lambda: box.update(zip(("failed", "result", "seconds"), analyse(
        same, idle_server, duration=60))))
    try:
        thread.start()
        time.sleep(4)
        same.stop()
        thread.join(300)
        same.start()
    finally:
        for load in loads:
            load.cancel()
    failed, result = box["failed"], box["result"]
    assert failed and result["verdict"] == "fail", result.get("reason") or result
    assert ("engine_down (critical" in result["reason"] or "restarted in the window" in result["reason"]
            or "could not be read" in result["reason"]), result["reason"]
    assert box["seconds"] < 45, (box["seconds"], result["reason"])
    print("restart mid-window: %s (%.1fs with the ansible CLI)" % (result["reason"], box["seconds"]))


class _Stand(object):
    """A local HTTP server with one handler function: handle(method, path, body) -> (status,
    content type, bytes)."""

    def __init__(self, handle):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _do(self, method):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, kind, data = handle(method, self.path, body, dict(self.headers))
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._do("GET")

            def do_POST(self):
                self._do("POST")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        outer.requests = 0

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _forward(url, method, path, body, headers, timeout=300):
    req = urllib.request.Request(url + path, data=body if method == "POST" else None, method=method,
                                 headers=dict((k, v) for k, v in headers.items()
                                              if k.lower() in ("content-type", "authorization")))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers.get("Content-Type", "text/plain"), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", "text/plain"), e.read()


_ABSURD_START = {}


def _absurd(text):
    """A real /metrics body made absurd: a million more finished requests every second since the
    stand-in started, all of them in the slowest bucket of every latency histogram (a broken or
    lying exporter)."""
    started = _ABSURD_START.setdefault("at", time.time())
    extra = int((time.time() - started) * 1000000)
    out = []
    for line in text.splitlines():
        m = re.match(r'^(vllm:(?:time_to_first_token_seconds|e2e_request_latency_seconds|request_queue_time_seconds|'
                     r'inter_token_latency_seconds)_(?:bucket|count)\{.*?\}) ([0-9.e+]+)$', line)
        if m and ('le="+Inf"' in line or line.split("{")[0].endswith("_count")):
            line = "%s %s" % (m.group(1), float(m.group(2)) + extra)
        m = re.match(r'^(vllm:request_success_total\{.*finished_reason="length".*\}) ([0-9.e+]+)$', line)
        if m:
            line = "%s %s" % (m.group(1), float(m.group(2)) + extra)
        out.append(line)
    return "\n".join(out) + "\n"


def test_one_baseline_host_that_serves_absurd_histograms_sways_nothing(canaries, idle_server):
    """The same settings as the pass above, with a second baseline host: a stand-in that serves
    the real baseline's /metrics with a million slow requests more each second. Pooled by counts,
    it alone would have made the baseline's p95 its own; judged per host, the canary passes."""
    same = canaries.get("same")

    def absurd(method, path, body, headers):
        status, kind, data = _forward(idle_server.url, method, path, body, headers, timeout=10)
        if path.startswith("/metrics") and status == 200:
            data = _absurd(data.decode()).encode()
        return status, kind, data

    stand = _Stand(absurd)
    loads = same_load([same, idle_server])
    try:
        failed, result, seconds = run_module("canary_analysis", dict(
            WINDOW, canary=[{"name": "canary", "host": "canary-host", "url": same.url, "max_num_seqs": 16}],
            baseline=[{"name": "baseline", "host": "real-host", "url": idle_server.url, "max_num_seqs": 16},
                      {"name": "liar", "host": "liar-host", "url": stand.url, "max_num_seqs": 16}]), timed=True)
    finally:
        for load in loads:
            load.cancel()
        stand.close()
    assert not failed and result["verdict"] == "pass", result.get("reason") or result
    ttft = [c for c in result["checks"] if c["metric"] == "ttft_p95"][0]
    assert "the baseline's two hosts disagree" in ttft["why"], ttft
    print("absurd baseline host: %s (%.1fs)" % (result["reason"], seconds))


def test_a_canary_whose_proxy_answers_5xx_is_failed_by_the_analysis_load(canaries, idle_server):
    """A proxy in front of the canary answers every other completion with 502 (a proxy or route
    error vLLM never sees): the deploy's analysis load to it counts the failures, and the
    deploy's decision (the analysis_outcome filter) rolls it back whatever the engine says."""
    sys.path.insert(0, os.environ["KVFLEET_COLLECTIONS"])
    from ansible_collections.kvfleet.vllm.plugins.plugin_utils._rollout import action
    same = canaries.get("same")
    idle(same)
    idle(idle_server)
    count = [0]

    def flaky(method, path, body, headers):
        if method == "POST" and path.startswith("/v1/completions"):
            count[0] += 1
            if count[0] % 2:
                return 502, "text/plain", b"bad gateway"
        return _forward(same.url, method, path, body, headers)

    proxy = _Stand(flaky)
    load = {}
    args = {"targets": [{"name": "canary", "host": "canary-host", "url": proxy.url},
                        {"name": "baseline", "host": "real-host", "url": idle_server.url}],
            "prompts": [" ".join(["def class return"] * 50)], "duration": 15, "rate": 3, "concurrency": 6,
            "max_tokens": 16}
    sender = threading.Thread(target=lambda: load.update(zip(("failed", "result"), run_module("analysis_load", args))))
    sender.start()
    try:
        time.sleep(1)
        failed, result, seconds = analyse(proxy, idle_server, duration=12, fail_on=[])
    finally:
        sender.join(120)
        proxy.close()
    per_target = dict((t["name"], t) for t in load["result"]["targets"])
    assert per_target["canary"]["failed"] >= 5 and per_target["baseline"]["failed"] == 0, per_target
    out = action(result, load=load["result"], host="canary-host")
    assert out["keep"] is False and out["stop"] is True, out
    assert out["why"].startswith("analysis failed: the analysis load's requests to canary-host failed"), out
    print("5xx proxy: engine verdict %s; decision: %s" % (result["verdict"], out["why"][:200]))
