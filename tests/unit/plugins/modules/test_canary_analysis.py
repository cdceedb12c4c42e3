"""canary_analysis replaying real captures of a canary and a baseline under the same load (vLLM CPU
0.32.0, tests/fixtures/metrics/MANIFEST.json pairs canary-*), each server at its own URL, each
sample with the time it was recorded: the module returns what _canary.analyse finds on the same
captures, stops early on a critical cause, and refuses bad options before any request."""

from __future__ import annotations

import json
import os
import re
from urllib.error import HTTPError

import pytest
import yaml

from ansible_collections.kvfleet.vllm.plugins.doc_fragments.connection import ModuleDocFragment
from ansible_collections.kvfleet.vllm.plugins.module_utils import _fleet
from ansible_collections.kvfleet.vllm.plugins.module_utils._canary import (
    CHECKS, DEFAULT_THRESHOLDS, analyse)
from ansible_collections.kvfleet.vllm.plugins.module_utils._fetch import CONNECTION_ARGS
from ansible_collections.kvfleet.vllm.plugins.module_utils._probe import sample as real_sample
from ansible_collections.kvfleet.vllm.plugins.modules import canary_analysis
from ansible_collections.kvfleet.vllm.tests.unit import fixtures
from ansible_collections.kvfleet.vllm.tests.unit.plugins.modules.conftest import REFUSED, FakeResponse

CANARY, BASELINE, OTHER = "http://127.0.0.1:18001", "http://127.0.0.1:18002", "http://127.0.0.1:18003"


def recording(condition):
    """[(time, /metrics text or None, /health status)] of a recorded server, oldest first."""
    out = []
    for name, e in fixtures.manifest().items():
        if e["condition"] != condition or ("metrics" not in e and e["sequence_index"] is None):
            continue
        metrics = e.get("metrics", name)
        text = None if metrics is None else fixtures.read(os.path.join(fixtures.METRICS, metrics))
        out.append((1000.0 + e["seconds_after_first"], text, e.get("health_status", 200)))
    return sorted(out, key=lambda item: item[0])


class Replay(object):
    """Recorded servers by base URL, for _fetch._get: each GET /metrics serves the server's next
    recording (the last again, a second later each time, once they run out), /health its
    recorded status. clock(url): when the next recording was taken, for the sample's time."""

    def __init__(self, servers):
        self.servers = dict((url, recording(cond)) for url, cond in servers.items())
        self.next = dict((url, 0) for url in servers)
        self.current = dict((url, None) for url in servers)
        self.calls = []

    def entry(self, url, index):
        entries = self.servers[url]
        when, text, health = entries[min(index, len(entries) - 1)]
        return when + max(0, index - len(entries) + 1), text, health

    def clock(self, url):
        return self.entry(url, self.next[url])[0]

    def __call__(self, url, headers=None, timeout=None, **kwargs):
        base, path = url.rsplit("/", 1)
        self.calls.append((url, dict(headers or {})))
        if path == "metrics":
            self.current[base] = self.next[base]
            self.next[base] += 1
        unused, text, health = self.entry(base, self.current[base] or 0)
        if text is None:
            raise REFUSED
        if path == "metrics":
            return FakeResponse(text.encode())
        if path == "health":
            if health != 200:
                raise HTTPError(url, health, "status %s" % health, {}, None)
            return FakeResponse(b"")
        return FakeResponse(b'{"version":"0.32.0"}')


@pytest.fixture
def replay(monkeypatch):
    """replay({url: condition}) -> Replay, wired into the module's HTTP and sample clock."""
    def make(servers):
        server = Replay(servers)
        monkeypatch.setattr("ansible_collections.kvfleet.vllm.plugins.module_utils._fetch._get", server)
        monkeypatch.setattr(_fleet, "sample", lambda fetch, url, clock=None, observe=None: real_sample(
            fetch, url, clock=lambda: server.clock(url)))
        return server
    return make


# 20 samples, as recorded (1 s apart); the module's own interval is short so the test is quick
WINDOW = {"duration": 0.95, "interval": 0.05}


def args(canary_cond=None, baseline=(), **extra):
    out = dict(WINDOW, canary=[{"name": "new", "url": CANARY, "max_num_seqs": 16}],
               baseline=[{"name": "old%d" % i, "url": url, "max_num_seqs": 16}
                         for i, url in enumerate(baseline)])
    out.update(extra)
    return out


def test_the_same_flags_pass_as_the_pure_judgement_says(run_module, replay):
    replay({CANARY: "canary-same-canary", BASELINE: "canary-same-baseline"})
    failed, result = run_module(canary_analysis, args(baseline=[BASELINE]))
    assert not failed and result["changed"] is False
    assert result["verdict"] == "pass" and result["msg"] == result["reason"]
    assert result["requests"] == {"canary": 144, "baseline": 144}
    # the same numbers as _canary.analyse on the recorded snapshots
    expected = analyse([{"name": "new", "samples": fixtures.replay("canary-same-canary"),
                         "limits": {"max_num_seqs": 16}}],
                       [{"name": "old0", "samples": fixtures.replay("canary-same-baseline"),
                         "limits": {"max_num_seqs": 16}}])
    assert result["checks"] == expected["checks"]
    assert len(result["samples"]["canary"]["new"]) == len(result["samples"]["baseline"]["old0"]) == 20
    assert "histograms" not in result["samples"]["canary"]["new"][0]
    assert [(t["name"], t["side"], t["url"]) for t in result["targets"]] == [
        ("new", "canary", CANARY), ("old0", "baseline", BASELINE)]
    assert set(result["thresholds"]) == set(DEFAULT_THRESHOLDS)


def test_a_cache_too_small_fails_at_once(run_module, replay):
    # the small cache's first second is critical (3 preemptions for 3 finished): sampling stops
    replay({CANARY: "canary-small-kv-canary", BASELINE: "canary-small-kv-baseline"})
    failed, result = run_module(canary_analysis, args(baseline=[BASELINE]))
    assert failed and result["verdict"] == "fail"
    assert result["reason"].startswith("The canary fails at once on a critical cause: new: kv_cache_exhausted")
    assert "preemptions_per_request" in result["reason"]
    assert len(result["samples"]["canary"]["new"]) == 2
    # the baseline's window stops too (a sample of it may be in flight when the canary's proves it)
    assert len(result["samples"]["baseline"]["old0"]) <= 4
    assert [(c["id"], c["severity"], c["target"]) for c in result["causes"]] == [
        ("kv_cache_exhausted", "critical", "new")]


def test_a_low_max_num_seqs_fails_on_queue_time_and_ttft(run_module, replay):
    replay({CANARY: "canary-low-seqs-canary", BASELINE: "canary-low-seqs-baseline"})
    failed, result = run_module(canary_analysis, dict(args(baseline=[BASELINE]), canary=[
        {"name": "new", "url": CANARY, "max_num_seqs": 4}]))
    assert failed and result["verdict"] == "fail"
    bad = [c["metric"] for c in result["checks"] if c["result"] == "fail"]
    # the queue the cap makes: requests waiting, queue time, TTFT (which of them is significant
    # first depends on where the window ended)
    assert {"requests_waiting", "queue_time_p95", "ttft_p95"} & set(bad), bad
    assert re.search(r"(requests_waiting [0-9.]+ > 2 \(baseline 0|queue_time_p95 [0-9.]+ s > 0.427 s "
                     r"\(baseline 0.285 s), p=", result["reason"])
    # overwhelming from its twentieth request on: the window ended early
    assert result["decided_early"] and len(result["samples"]["canary"]["new"]) < 20
    assert [c["id"] for c in result["causes"]] == ["concurrency_cap"]


def test_no_traffic_is_a_fail_not_a_pass(run_module, replay):
    # the load balancer forgot the canary: its share of the traffic fails, with both rates
    servers = {CANARY: "canary-idle-canary", BASELINE: "canary-idle-baseline"}
    replay(servers)
    failed, result = run_module(canary_analysis, args(baseline=[BASELINE]))
    assert failed and result["verdict"] == "fail"
    share = [c for c in result["checks"] if c["metric"] == "traffic_share"][0]
    assert share["result"] == "fail" and share["canary"] == 0 and share["baseline"] > 0
    assert "not back in the load balancer?" in share["why"]
    assert result["decision"]["keep"] is False and result["decision"]["stop"] is True
    # fail_on decides only whether the task fails; the verdict and the decision stay
    replay(servers)
    failed, result = run_module(canary_analysis, args(baseline=[BASELINE], fail_on=[]))
    assert not failed and result["verdict"] == "fail"


def test_an_idle_fleet_is_inconclusive_and_its_decision_follows_the_policy(run_module, replay):
    # both sides idle: nothing to judge; the decision stops the rollout, the host kept or not
    servers = {CANARY: "idle", BASELINE: "idle"}
    replay(servers)
    failed, result = run_module(canary_analysis, args(baseline=[BASELINE], fail_on=[], canary_batch=False))
    assert not failed and result["verdict"] == "inconclusive"
    assert result["decision"] == {"keep": True, "stop": True, "judged": False, "why": result["decision"]["why"]}
    assert result["decision"]["why"].startswith("analysis inconclusive, not judged; kept")
    replay(servers)
    failed, result = run_module(canary_analysis, args(baseline=[BASELINE], fail_on=["fail", "inconclusive"],
                                                      inconclusive="fail"))
    assert failed and result["decision"]["keep"] is False


def test_a_dead_baseline_is_left_out_and_a_dead_canary_fails(run_module, replay):
    replay({CANARY: "canary-same-canary", BASELINE: "engine-core-killed"})
    failed, result = run_module(canary_analysis, args(baseline=[BASELINE]))
    assert not failed and result["verdict"] == "pass" and result["mode"] == "absolute"
    dead = result["targets"][1]
    assert (dead["name"], dead["pooled"], dead["why"]) == ("old0", False, "left out: itself unhealthy (engine_down)")
    # the other way round: the dead canary is proven down at its third sample, and sampling stops
    replay({CANARY: "engine-core-killed", BASELINE: "canary-same-baseline"})
    failed, result = run_module(canary_analysis, args(baseline=[BASELINE]))
    assert failed and result["verdict"] == "fail"
    assert "engine_down (critical: 2 of 3 samples unreadable" in result["reason"]
    assert len(result["samples"]["canary"]["new"]) == 3


def test_baseline_servers_are_pooled_and_keys_go_to_their_own_server(run_module, replay):
    server = replay({CANARY: "canary-same-canary", BASELINE: "canary-same-baseline",
                     OTHER: "canary-small-kv-baseline"})
    spec = args(baseline=[BASELINE, OTHER])
    spec["canary"][0]["api_key"] = "canary-secret"
    spec["baseline"][1]["api_key"] = "other-secret"
    failed, result = run_module(canary_analysis, spec)
    assert not failed and result["verdict"] == "pass"
    assert result["requests"] == {"canary": 144, "baseline": 228}
    sent = dict((url.rsplit("/", 1)[0], h.get("Authorization")) for url, h in server.calls)
    assert sent == {CANARY: "Bearer canary-secret", BASELINE: None, OTHER: "Bearer other-secret"}
    assert "secret" not in json.dumps(result)


def test_a_result_before_the_change_comes_back_as_before(run_module, replay):
    """The deploy registers the window before the change and passes it as it came back (JSON)."""
    replay({CANARY: "canary-same-canary", BASELINE: "canary-same-baseline"})
    unused, first = run_module(canary_analysis, dict(args(baseline=[BASELINE]), fail_on=[]))
    replay({CANARY: "canary-same-canary", BASELINE: "canary-same-baseline"})
    failed, result = run_module(canary_analysis, dict(args(baseline=[BASELINE]), before=json.loads(json.dumps(first))))
    assert not failed and result["verdict"] == "pass"
    assert result["before"]["used"] is True and result["before"]["why"] is None
    ttft = [c for c in result["checks"] if c["metric"] == "ttft_p95"][0]
    assert ttft["before"]["canary"] == first["checks"][[c["metric"] for c in first["checks"]].index("ttft_p95")]["canary"]
    assert "before" not in first


def test_check_mode_reads_as_usual(run_module, replay):
    replay({CANARY: "canary-same-canary", BASELINE: "canary-same-baseline"})
    failed, result = run_module(canary_analysis, dict(args(baseline=[BASELINE]), _ansible_check_mode=True))
    assert not failed and result["verdict"] == "pass" and result["changed"] is False


@pytest.mark.parametrize("changes, text", [
    ({"canary": []}, "canary must list at least one server"),
    ({"duration": 1, "interval": 2}, "duration must be at least interval (2.0)"),
    ({"interval": 0}, "interval must be more than 0 seconds"),
    ({"duration": 4000}, "at most 3600 seconds"),
    ({"duration": 3000, "interval": 0.1}, "more than 1000: raise interval"),
    ({"min_requests": -1}, "min_requests must be 0 or more"),
    ({"thresholds": {"ttft_relative": -1}}, "thresholds.ttft_relative must be a number, 0 or more"),
    ({"thresholds": {"min_intervals": 1}}, "thresholds.min_intervals must be a whole number"),
    ({"thresholds": {"ttft": 1}}, "ttft"),
    ({"baseline": [{"name": "new", "url": BASELINE}]}, "used more than once: new"),
    ({"baseline": [{"name": "b", "url": BASELINE, "max_num_seqs": 0}]}, "baseline[0].max_num_seqs must be 1 or more"),
    ({"baseline": [{"name": "b", "url": "ftp://x"}]}, "baseline[0].url must start with http:// or https://"),
    ({"fail_on": ["unhealthy"]}, "fail_on"),
    ({"before": {"verdict": "pass"}}, "before must be a result of kvfleet.vllm.canary_analysis for the same canary"),
])
def test_bad_options_fail_before_any_request(run_module, replay, changes, text):
    server = replay({CANARY: "canary-same-canary", BASELINE: "canary-same-baseline"})
    failed, result = run_module(canary_analysis, dict(args(baseline=[BASELINE]), **changes))
    assert failed and text in result["msg"], result["msg"]
    assert server.calls == []


# --- the documentation and the code agree -------------------------------------------------------------

DOC = yaml.safe_load(canary_analysis.DOCUMENTATION)


def test_threshold_defaults_have_one_copy():
    """The documentation states the defaults of _canary (the one copy), or says there is none."""
    options = DOC["options"]["thresholds"]["suboptions"]
    assert set(options) == set(DEFAULT_THRESHOLDS)
    for name, spec in options.items():
        assert "default" not in spec, name
        text = " ".join(spec["description"]) if isinstance(spec["description"], list) else spec["description"]
        found = re.search(r"Default ([0-9.]+)\.", text)
        if DEFAULT_THRESHOLDS[name] is None:
            assert found is None and "No limit by default" in text, name
        else:
            assert float(found.group(1)) == DEFAULT_THRESHOLDS[name], name


def test_documented_checks_and_options_are_the_real_ones():
    metrics = DOC and yaml.safe_load(canary_analysis.RETURN)["checks"]["contains"]["metric"]["description"]
    for check in CHECKS:
        assert "C(%s)" % check[0] in metrics
    for side in ("canary", "baseline"):
        assert set(DOC["options"][side]["suboptions"]) == set(_fleet.TARGET_OPTIONS)
    transport = yaml.safe_load(ModuleDocFragment.TRANSPORT)["options"]
    assert set(transport) == set(CONNECTION_ARGS) - {"url", "api_key"}
