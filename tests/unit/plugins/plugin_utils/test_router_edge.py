"""The routers' per-backend failures over an analysis window (_router.edge_errors) and what the
deploy does with them (_rollout.action, the analysis_outcome filter). Real vllm-router 0.1.17
captures (tests/fixtures/router/MANIFEST.json) and text derived from their series."""

from __future__ import annotations

import copy
import os

import pytest

from ansible_collections.kvfleet.vllm.plugins.filter.analysis_outcome import FilterModule as OutcomeFilters
from ansible_collections.kvfleet.vllm.plugins.module_utils._canary import analyse
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._rollout import action
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._router import backend_outcomes, edge_errors
from ansible_collections.kvfleet.vllm.tests.unit import fixtures

ROUTER = os.path.join(fixtures.ROOT, "router")
GOOD, BAD = "http://127.0.0.1:31801", "http://127.0.0.1:31802"
analysis_outcome = OutcomeFilters().filters()["analysis_outcome"]


def capture(name):
    return fixtures.read(os.path.join(ROUTER, "vllm-router-0.1.17-%s.txt" % name))


def text(**workers):
    """A router's /metrics with vllm_router_cb_outcomes_total per worker: name=(success, failure)."""
    lines = ["# TYPE vllm_router_cb_outcomes_total counter"]
    for worker, (ok, failed) in sorted(workers.items()):
        url = "http://%s:8000" % worker
        lines.append('vllm_router_cb_outcomes_total{worker="%s",outcome="success"} %d' % (url, ok))
        lines.append('vllm_router_cb_outcomes_total{worker="%s",outcome="failure"} %d' % (url, failed))
    return "\n".join(lines) + "\n"


def test_the_real_routers_count_is_read_per_backend():
    assert backend_outcomes(capture("before")) == {}
    assert backend_outcomes(capture("after")) == {GOOD: {"success": 39, "failure": 0},
                                                  BAD: {"success": 11, "failure": 21}}


def test_a_backend_the_routers_retries_hid_fails_and_a_healthy_one_passes():
    # every client got 200 in this capture: only the router's own count shows the backend failing
    bad = edge_errors([capture("before")], [capture("after")], [BAD])
    assert (bad["result"], bad["canary"], bad["baseline"], bad["requests"]) == (
        "fail", round(21 / 32.0, 4), 0.0, {"canary": 32, "failed": 21})
    assert bad["why"].startswith("21 of 32 attempts the routers sent it failed")
    assert edge_errors([capture("before")], [capture("after")], [GOOD])["result"] == "pass"
    # the window is what changed between the reads: 3 failures (the refused connections) of 3
    late = edge_errors([capture("mid")], [capture("after")], [BAD])
    assert (late["result"], late["requests"]) == ("fail", {"canary": 3, "failed": 3})


def test_one_broken_baseline_backend_moves_neither_verdict():
    # n4 fails 30 of 40: by the other backends' mean (0.25) a canary failing 5 of 40 would pass
    before = [text(n1=(0, 0), n2=(0, 0), n3=(0, 0), n4=(0, 0))]
    after = [text(n1=(35, 5), n2=(40, 0), n3=(40, 0), n4=(10, 30))]
    out = edge_errors(before, after, ["http://n1:8000"])
    assert (out["result"], out["baseline"]) == ("fail", 0.0)
    healthy = edge_errors(before, [text(n1=(40, 0), n2=(40, 0), n3=(40, 0), n4=(10, 30))], ["http://n1:8000"])
    assert healthy["result"] == "pass"


def test_few_failures_or_failures_everywhere_alike_are_not_the_hosts():
    before = [text(n1=(0, 0), n2=(0, 0), n3=(0, 0))]
    assert edge_errors(before, [text(n1=(8, 2), n2=(10, 0), n3=(10, 0))], ["http://n1:8000"])["result"] == "pass"
    assert edge_errors(before, [text(n1=(30, 10), n2=(30, 10), n3=(31, 9))], ["http://n1:8000"])["result"] == "pass"


def test_the_routers_are_added_up_and_a_router_restarted_counts_from_zero():
    # router a restarted during the window (its counters went down): its after is the window
    before = [text(n1=(100, 0), n2=(100, 0)), text(n1=(0, 0), n2=(0, 0))]
    after = [text(n1=(10, 4), n2=(120, 0)), text(n1=(10, 0), n2=(10, 0))]
    out = edge_errors(before, after, ["http://n1:8000"])
    assert (out["result"], out["requests"]) == ("fail", {"canary": 24, "failed": 4})


def test_no_router_read_or_no_attempt_on_the_host_is_no_check():
    assert edge_errors([], [], ["http://n1:8000"]) is None
    assert edge_errors([""], [text(n1=(0, 9))], ["http://n1:8000"]) is None
    assert edge_errors(["<html>404</html>"], [text(n1=(0, 9))], ["http://n1:8000"]) is None
    assert edge_errors([text(n2=(0, 0))], [text(n2=(5, 0))], ["http://n1:8000"]) is None


def canary_pass():
    canary, baseline = fixtures.replay("canary-same-canary"), fixtures.replay("canary-same-baseline")
    out = analyse([{"name": "n1/main", "samples": copy.deepcopy(canary), "limits": {"max_num_seqs": 16}}],
                  [{"name": "n2/main", "samples": copy.deepcopy(baseline), "limits": {}}])
    assert out["verdict"] == "pass"
    return out


def test_a_passing_analysis_is_rolled_back_on_the_routers_count_and_the_report_shows_the_check():
    routers = {"before": [capture("before")], "after": [capture("after")], "urls": [BAD]}
    out = analysis_outcome(canary_pass(), host="n1", routers=routers)
    assert (out["keep"], out["stop"], out["judged"]) == (False, True, True)
    assert out["why"].startswith("analysis failed: router_errors: 21 of 32 attempts")
    assert [c["metric"] for c in out["analysis"]["checks"] if c["result"] == "fail"] == ["router_errors"]
    # the same window for a healthy backend: kept, the check passed and shown
    out = analysis_outcome(canary_pass(), host="n1", routers=dict(routers, urls=[GOOD]))
    assert out["keep"] is True and out["analysis"]["checks"][-1]["metric"] == "router_errors"
    # no router managed by the deploy: no check
    plain = action(canary_pass(), host="n1")
    assert plain["keep"] is True and plain["edge"] is None


@pytest.mark.parametrize("routers", [None, {}, {"before": [], "after": [], "urls": []}])
def test_a_deploy_without_routers_is_decided_as_before(routers):
    assert analysis_outcome(canary_pass(), host="n1", routers=routers)["keep"] is True
