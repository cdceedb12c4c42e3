"""The deploy's analysis under traffic: its sides, its decision and its report line (_rollout, the
analysis_sides and analysis_outcome filters, _report.deploy_lines), on results the real analysis
gives for recorded vLLM 0.32 CPU pairs (tests/fixtures/metrics canary-*)."""

from __future__ import annotations

import copy

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.filter.analysis_charts import FilterModule as ChartFilters
from ansible_collections.kvfleet.vllm.plugins.filter.analysis_outcome import FilterModule as OutcomeFilters
from ansible_collections.kvfleet.vllm.plugins.filter.analysis_sides import FilterModule as SidesFilters
from ansible_collections.kvfleet.vllm.plugins.module_utils._canary import analyse
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import deploy_lines
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._rollout import RolloutError, action, sides
from ansible_collections.kvfleet.vllm.tests.unit import fixtures

analysis_sides = SidesFilters().filters()["analysis_sides"]
analysis_outcome = OutcomeFilters().filters()["analysis_outcome"]
analysis_charts = ChartFilters().filters()["analysis_charts"]


def rec(host, name="main", port=8000, **extra):
    """A deployment record's instance, bound to `host` (an address)."""
    return dict({"name": name, "port": port, "bind": host, "url": "http://%s:%d" % (host, port), "max_num_seqs": 4,
                 "limits": {"max_num_seqs": 4, "max_model_len": 1024}}, **extra)


def row(host, outcome="untouched", batch=None, **extra):
    return dict({"host": host, "outcome": outcome, "batch": batch, "left_drained": None,
                 "before": {"version": "0.32.0", "instances": [rec(host)]}}, **extra)


def fleet(*rows):
    return list(rows)


def test_the_baseline_is_every_serving_host_not_changed_yet():
    hosts = fleet(row("n1", batch=1), row("n2"), row("n3"), row("n4", batch=1))
    hosts[0]["after"] = {"instances": [rec("n1")]}
    out = sides(hosts, "n1")
    assert [t["name"] for t in out["canary"]] == ["n1/main"]
    # n4 is in the canary's own batch: it is changing too
    assert out["baseline_hosts"] == ["n2", "n3"] and out["baseline_kind"] == "unchanged"
    assert out["canary"][0] == {"name": "n1/main", "host": "n1", "url": "http://n1:8000", "max_num_seqs": 4,
                                "max_model_len": 1024}


def test_a_drained_host_is_no_baseline_and_the_last_batch_is_judged_against_the_verified_ones():
    hosts = fleet(row("n1", outcome="upgraded", batch=1, after={"instances": [rec("n1", port=9000)]},
                      analysis={"verdict": "pass"}),
                  row("n2", outcome="rolled back", batch=2),
                  row("n3", left_drained={"by": "deploy"}),
                  row("n4", batch=3, after={"instances": [rec("n4")]}))
    out = sides(hosts, "n4")
    # n3 is out of the load balancer, n2 failed: only n1 serves, with what it runs now
    assert out["baseline_hosts"] == ["n1"] and out["baseline_kind"] == "verified"
    assert out["baseline"][0]["url"] == "http://n1:9000"
    # nobody left: the absolute limits apply (the module's mode 'absolute')
    hosts[0]["analysis"] = {"verdict": "inconclusive"}
    assert sides(hosts, "n4")["baseline"] == [] and sides(hosts, "n4")["baseline_kind"] == "none"


def test_a_host_found_converged_is_a_baseline_once_no_host_is_left_unchanged():
    # n3 was already at the target (settled by the check, in no batch); n1 and n2 change together
    hosts = fleet(row("n1", batch=1, after={"instances": [rec("n1")]}),
                  row("n2", batch=1, after={"instances": [rec("n2")]}),
                  row("n3", outcome="unchanged", after={"instances": [rec("n3", port=9000)]}))
    out = sides(hosts, "n1")
    assert out["baseline_hosts"] == ["n3"] and out["baseline_kind"] == "verified"
    assert out["baseline"][0]["url"] == "http://n3:9000"
    # while a host is left unchanged, the baseline is the hosts that run what the canary ran
    hosts.append(row("n4"))
    assert sides(hosts, "n1")["baseline_hosts"] == ["n4"]
    # a converged host out of the load balancer is no baseline
    hosts.pop()
    hosts[2]["left_drained"] = {"by": "deploy"}
    assert sides(hosts, "n1")["baseline_kind"] == "none"


def test_loopback_instances_of_other_hosts_are_refused_by_name():
    hosts = fleet(row("n1", batch=1, after={"instances": [rec("127.0.0.1")]}), row("n2"))
    with pytest.raises(RolloutError, match=r"the analysis samples every instance from localhost \(vllm_deploy_analysis_from\): "
                                           r"n1: instance main listens on 127\.0\.0\.1 only: the analysis host, localhost "
                                           r"\(vllm_deploy_analysis_from\), cannot reach it"):
        sides(hosts, "n1")
    # sampled on the canary itself, its own loopback is reachable; n2's is not
    hosts[1]["before"]["instances"] = [rec("localhost")]
    with pytest.raises(RolloutError, match="n2: instance main listens on localhost only"):
        sides(hosts, "n1", analysis_from="n1")
    hosts[1]["before"]["instances"] = [rec("10.0.0.2")]
    hosts[1]["address"] = "10.0.0.2"
    out = sides(hosts, "n1", analysis_from="n1")
    assert out["baseline_hosts"] == ["n2"] and out["canary"][0]["url"] == "http://127.0.0.1:8000"


def test_an_instance_on_every_address_is_reached_at_the_hosts_address_with_its_scheme():
    hosts = fleet(row("n1", batch=1, after={"instances": [rec("0.0.0.0", tls={"ca": "x"})]}),
                  row("n2", before={"instances": [rec("::", port=9000)]}))
    out = analysis_sides(hosts, host="n1", records=[rec("0.0.0.0", tls={"ca": "x"})],
                         addresses={"n1": "gpu-01.example.net", "n2": "fd00::2"})
    assert out["canary"][0]["url"] == "https://gpu-01.example.net:8000"
    assert out["baseline"][0]["url"] == "http://[fd00::2]:9000"
    # without an address the inventory name is used, as the router hook does
    assert analysis_sides(hosts, host="n1", records=[rec("0.0.0.0")])["baseline"][0]["url"] == "http://n2:9000"


def test_a_serving_group_member_or_a_ray_node_cannot_be_a_canary():
    hosts = fleet(row("n1", batch=1, after={"instances": [rec("n1", group={"size": 2}), {"name": "ray", "url": None}]}),
                  row("n2", before={"instances": [rec("n2", group={"size": 2})]}))
    with pytest.raises(RolloutError, match="n1 has no instance the analysis can sample"):
        sides(hosts, "n1")
    # the group member is no baseline either
    hosts[0]["after"]["instances"].append(rec("n1", name="solo", port=8001))
    assert sides(hosts, "n1")["baseline"] == []


def test_the_filter_takes_the_canary_records_and_the_keys_by_host():
    rows = [row("n1", batch=1), row("n2")]
    out = analysis_sides(rows, host="n1", records=[rec("n1", port=8100)], api_keys={"n1": "k1", "n2": ""})
    assert out["canary"][0]["url"] == "http://n1:8100" and out["canary"][0]["api_key"] == "k1"
    assert "api_key" not in out["baseline"][0]
    with pytest.raises(AnsibleFilterError, match="n9 is not a host of this deploy"):
        analysis_sides(rows, host="n9", records=[])


def result_of(name, **kwargs):
    """canary_analysis's result for a recorded pair, as the module computes it."""
    canary, baseline = fixtures.replay(name + "-canary"), fixtures.replay(name + "-baseline")
    out = analyse([{"name": "n1/main", "samples": copy.deepcopy(canary), "limits": {"max_num_seqs": 16}}],
                  [{"name": "n2/main", "samples": copy.deepcopy(baseline), "limits": {}}], **kwargs)
    for t in out["targets"]:
        t["host"] = t["name"].split("/")[0]
    return out


def test_a_failed_analysis_rolls_back_and_the_summary_shows_the_failed_check():
    out = analysis_outcome(result_of("canary-small-kv"), seconds=61.5)
    assert out["keep"] is False and out["why"].startswith("analysis failed: ")
    a = out["analysis"]
    assert a["verdict"] == "fail" and a["canary_hosts"] == ["n1"] and a["baseline_hosts"] == ["n2"]
    assert a["seconds"] == 61.5 and "samples" not in a
    r = dict(row("n1", outcome="rolled back", batch=1), analysis=a, failed_stage="analyse", detail="x")
    lines = deploy_lines([r, row("n2")])
    line = [ln for ln in lines if ln.startswith("  n1 analysis")][0]
    # the canary's and the baseline's numbers of the failed check, whole
    assert "analysis fail against n2 (65 and 84 requests): preemptions_per_request: 0.446, above the limit" in line
    assert "(baseline 0)" in line
    assert lines[-1] == "1 rolled back, 1 untouched"


def test_the_same_flags_pass_and_are_kept():
    out = analysis_outcome(result_of("canary-same"))
    assert out["keep"] is True and out["analysis"]["verdict"] == "pass"
    lines = deploy_lines([dict(row("n1", outcome="upgraded", batch=1), analysis=out["analysis"])])
    assert any(ln.startswith("  n1 analysis pass against n2 (") for ln in lines)


@pytest.mark.parametrize("policy, canary_batch, keep", [
    ("fail_canary", True, False), ("fail_canary", False, True),
    ("fail", False, False), ("pass", True, True)])
def test_an_inconclusive_window_does_what_the_policy_says(policy, canary_batch, keep):
    result = result_of("canary-small-kv", min_requests=10 ** 6)
    assert result["verdict"] == "inconclusive"
    out = action(result, inconclusive=policy, canary_batch=canary_batch)
    assert out["keep"] is keep
    assert ("rolled back" if not keep else "kept") in out["why"] and policy in out["why"]


def test_no_verdict_or_a_bad_policy_is_never_kept():
    assert action({}, "pass")["keep"] is False
    with pytest.raises(AnsibleFilterError, match="vllm_deploy_analysis_inconclusive must be one of fail_canary, fail, pass"):
        analysis_outcome({"verdict": "pass"}, inconclusive="maybe")


def test_the_report_charts_the_canary_against_the_baseline_over_the_window():
    canary, baseline = fixtures.replay("canary-small-kv-canary"), fixtures.replay("canary-small-kv-baseline")
    result = dict(result_of("canary-small-kv"), samples={"canary": {"n1/main": canary}, "baseline": {"n2/main": baseline}})
    points = analysis_outcome(result)["analysis"]["series"]
    assert len(points) == 20 and points[0]["t"] == 0 and points[-1]["t"] == round(canary[-1]["time"] - canary[0]["time"], 1)
    # the same counters the check read: 29 preemptions on the canary, none on the baseline
    assert points[-1]["preempt_canary"] == 29 and points[-1]["preempt_baseline"] == 0
    assert points[3]["kv_canary"] == round(canary[3]["kv_cache_usage"], 4)
    # the small cache fills up, the baseline's stays below half
    assert max(p["kv_canary"] for p in points) == 1.0 and max(p["kv_baseline"] for p in points) < 0.5
    html = analysis_charts(analysis_outcome(result)["analysis"])
    assert html.count("<svg") == 4 and "canary against baseline" in html and "<script" not in html
    assert analysis_charts({"verdict": "pass"}) == "" and analysis_charts(None) == ""


def test_the_load_goes_to_every_host_analysed_in_the_batch_and_the_baseline():
    hosts = fleet(row("n1", batch=2), row("n2", batch=2), row("n3"), row("n0", outcome="upgraded", batch=1))
    out = analysis_sides(hosts, host="n1", records=[rec("n1")], api_keys={"n2": "k2"},
                         batch_records={"n2": [rec("n2")], "n1": [rec("n1")]})
    assert [t["name"] for t in out["batch_canary"]] == ["n1/main", "n2/main"]
    assert out["batch_canary"][1]["api_key"] == "k2"
    assert out["baseline_hosts"] == ["n3"]
    assert analysis_sides(hosts, host="n1", records=[rec("n1")])["batch_canary"] == []


def test_the_preflight_checks_the_whole_play_in_one_pass():
    rows = [row("n1"), row("n2", before={"version": "0.32.0", "instances": [rec("127.0.0.1")]}),
            row("n3", before={"version": None, "instances": []})]
    planned = {"n1": [{"name": "main", "record": rec("10.0.0.1")}], "n3": [{"name": "main", "record": rec("127.0.0.1")}]}
    # n2 may be a baseline and listens on loopback; n3 is a first install (not analysed)
    with pytest.raises(AnsibleFilterError, match=r"from localhost \(vllm_deploy_analysis_from\): n2: instance main "
                                                 r"listens on 127\.0\.0\.1 only") as err:
        analysis_sides(rows, planned=planned, addresses={"n1": "10.0.0.1"})
    assert "n3" not in str(err.value)
    rows[1]["before"]["instances"] = [rec("10.0.0.2")]
    addresses = {"n1": "10.0.0.1", "n2": "10.0.0.2"}
    assert analysis_sides(rows, planned=planned, addresses=addresses) == {"checked": ["n1", "n3"]}
    # the records bind the hosts' addresses; without the inventory's word for them, refused by name
    with pytest.raises(AnsibleFilterError, match=r"n1: instance main: its record's bind '10\.0\.0\.1' is not the address"):
        analysis_sides(rows, planned=planned)
    # a serving group member's records are not sampled
    planned["n1"] = [{"name": "main", "record": rec("127.0.0.1", group={"size": 2})}]
    assert analysis_sides(rows, planned=planned, addresses=addresses) == {"checked": ["n1", "n3"]}
    planned["n1"] = [{"name": "main", "record": rec("127.0.0.1")}]
    with pytest.raises(AnsibleFilterError, match="n1: instance main listens on 127.0.0.1 only"):
        analysis_sides(rows, planned=planned, addresses=addresses)


# ---- the baseline of the analysis after a scheduled restart (restart_baseline, peer_targets) ----

def test_the_restart_baseline_is_every_other_hosts_instance_reached_from_this_one_without_keys():
    from ansible_collections.kvfleet.vllm.plugins.filter.restart_baseline import FilterModule
    restart_baseline = FilterModule().filters()["restart_baseline"]
    records = {
        "node2": {"instances": [rec("10.0.0.2"), rec("0.0.0.0", name="small", port=8001),
                                # a serving group's member and a Ray node: judged by their gate alone
                                rec("10.0.0.2", name="member", port=8002, group={"key": "g"}),
                                {"name": "ray", "port": 6379}]},
        "node3": {},                                   # no record (not in the play): left out
        "node4": {"instances": [rec("10.0.0.4", tls={"ca_path": "/x"}, url="https://10.0.0.4:8000")]},
    }
    got = restart_baseline(records, host="node1", addresses={"node2": "10.0.0.2", "node4": "10.0.0.4"})
    assert [(t["name"], t["url"]) for t in got] == [
        ("node2/main", "http://10.0.0.2:8000"), ("node2/small", "http://10.0.0.2:8001"),
        ("node4/main", "https://10.0.0.4:8000")]
    # node2's record binds 10.0.0.2, the inventory says node2.example: refused, naming both
    with pytest.raises(AnsibleFilterError, match=r"node2: instance main: its record's bind '10\.0\.0\.2' is not the "
                                                 r"address the inventory gives for the host \('node2\.example'"):
        restart_baseline(records, host="node1", addresses={"node2": "node2.example", "node4": "10.0.0.4"})
    assert all("api_key" not in t for t in got)
    assert got[0]["max_num_seqs"] == 4 and got[0]["max_model_len"] == 1024


def test_a_peer_bound_to_loopback_is_refused_naming_it():
    from ansible_collections.kvfleet.vllm.plugins.filter.restart_baseline import FilterModule
    restart_baseline = FilterModule().filters()["restart_baseline"]
    with pytest.raises(AnsibleFilterError, match=r"node2: instance main listens on 127\.0\.0\.1 only: the restart guard on "
                                                 r"node1 \(vllm_restart_analysis_seconds\) cannot reach it.*vllm_restart_analysis_baseline"):
        restart_baseline({"node2": {"instances": [rec("127.0.0.1")]}}, host="node1")
    with pytest.raises(AnsibleFilterError, match="needs host"):
        restart_baseline({}, host="")


def test_batch_order_puts_hosts_left_drained_first_in_inventory_order():
    from ansible_collections.kvfleet.vllm.plugins.plugin_utils._rollout import batch_order
    hosts = ["n1", "n2", "n3", "n4"]
    assert batch_order(hosts, hosts, []) == hosts
    assert batch_order(hosts, hosts, ["n4", "n2"]) == ["n2", "n4", "n1", "n3"]
    # an unreachable host left drained keeps its place: it cannot be finished first
    assert batch_order(hosts, ["n1", "n2", "n4"], ["n3", "n4"]) == ["n4", "n1", "n2", "n3"]
    # a name that is not among the hosts changes nothing
    assert batch_order(hosts, hosts, ["elsewhere"]) == hosts


def test_batch_order_leaves_settled_hosts_out_so_the_canary_changes():
    """A host the check found converged is in no batch: with serial [1, '25%'] the first batch
    (the canary) is the first host that changes, not a converged one that would fill it."""
    from ansible_collections.kvfleet.vllm.plugins.filter.deploy_order import FilterModule
    order = FilterModule().filters()["deploy_order"]
    hosts = ["n1", "n2", "n3", "n4"]
    assert order(hosts, hosts, [], settled=["n1", "n3"]) == ["n2", "n4"]
    assert order(hosts, hosts, [], settled=hosts) == []
    # a host left drained is never settled: the next deploy finishes it first
    assert order(hosts, hosts, ["n3"], settled=["n1", "n3"]) == ["n3", "n2", "n4"]
    # without the option: every host, as before
    assert order(hosts, hosts, []) == hosts


def test_batch_order_refuses_what_is_not_a_list():
    import pytest
    from ansible.errors import AnsibleFilterError
    from ansible_collections.kvfleet.vllm.plugins.filter.deploy_order import FilterModule
    with pytest.raises(AnsibleFilterError, match="hosts must be a list"):
        FilterModule().filters()["deploy_order"]("n1", [], [])


def test_an_inconclusive_host_stops_the_run_and_the_summary_says_it_was_not_judged():
    # a later batch's host the policy keeps: kept, and still the run stops, named as not judged
    result = result_of("canary-small-kv", min_requests=10 ** 6)
    out = analysis_outcome(result, inconclusive="fail_canary", canary_batch=False)
    assert (out["keep"], out["stop"], out["judged"]) == (True, True, False)
    a = dict(out["analysis"], kept=out["keep"], stop=out["stop"], judged=out["judged"])
    line = [ln for ln in deploy_lines([dict(row("n1", outcome="upgraded", batch=2), analysis=a)])
            if ln.startswith("  n1 analysis")][0]
    assert line.startswith("  n1 analysis inconclusive (not judged, kept) against n2")
    # the module's own decision wins over the filter's policy (the deploy passed its policy there)
    result["decision"] = {"keep": False, "stop": True, "judged": False, "why": "from the module"}
    assert analysis_outcome(result, inconclusive="pass")["why"] == "from the module"


def test_the_analysis_loads_failed_requests_fail_the_host():
    result = result_of("canary-same")
    assert result["verdict"] == "pass"
    load = {"targets": [{"host": "n1", "sent": 40, "failed": 12}, {"host": "n2", "sent": 40, "failed": 0}]}
    out = analysis_outcome(result, load=load, host="n1")
    assert (out["keep"], out["stop"]) == (False, True)
    assert out["why"].startswith("analysis failed: the analysis load's requests to n1 failed, 12 of 40 "
                                 "(the other servers: 0 of 40)")
    # failures everywhere alike are not the change's
    load = {"targets": [{"host": "n1", "sent": 40, "failed": 2}, {"host": "n2", "sent": 40, "failed": 2}]}
    assert analysis_outcome(result, load=load, host="n1")["keep"] is True
