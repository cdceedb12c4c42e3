from __future__ import annotations

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import table_lines


def test_table_lines():
    rows = [{"host": "gpu-01", "instance": "main", "version": "0.32.0", "verdict": "degraded",
             "causes": [{"id": "concurrency_cap"}], "kv_cache_usage": 0.184, "requests_running": 2,
             "requests_waiting": 30, "preemptions_per_s": 0.0, "block_size": 32,
             "trends": ["usage_falling_rate_steady"], "sustained": ["concurrency_cap"]},
            {"host": "gpu-02", "instance": "main", "version": None, "verdict": "unhealthy",
             "causes": [{"id": "engine_down"}], "kv_cache_usage": None, "requests_running": None,
             "requests_waiting": None, "preemptions_per_s": None, "block_size": None}]
    lines = table_lines(rows)
    assert lines[0].split()[:4] == ["HOST", "INSTANCE", "VERSION", "VERDICT"]
    assert lines[1].split() == ["gpu-01", "main", "0.32.0", "degraded", "concurrency_cap",
                                "18.4", "2", "30", "0.00", "32",
                                "usage_falling_rate_steady,sustained:concurrency_cap"]
    assert lines[2].split() == ["gpu-02", "main", "-", "unhealthy", "engine_down",
                                "-", "-", "-", "-", "-", "-"]


def test_deploy_lines():
    from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import deploy_lines
    a = {"version": "0.32.0", "config": "aaaa"}
    b = {"version": "0.33.1", "config": "bbbb"}
    rows = [{"host": "h1", "batch": 1, "before": a, "after": b, "outcome": "upgraded", "seconds": 61.2},
            {"host": "h2", "batch": 2, "before": a, "after": b, "outcome": "rolled back", "seconds": 90,
             "detail": "Wait until each instance answers /health:\n vllm-main.service failed " + "x" * 200},
            {"host": "h3", "before": a, "outcome": None}]
    lines = deploy_lines(rows)
    assert lines[0].split() == ["HOST", "BATCH", "BEFORE", "AFTER", "OUTCOME", "SECONDS", "DETAIL"]
    assert lines[1].split() == ["h1", "1", "0.32.0", "(aaaa)", "0.33.1", "(bbbb)", "upgraded", "61", "-"]
    # a rolled-back host shows no "after": it runs what it ran before
    assert lines[2].split()[:7] == ["h2", "2", "0.32.0", "(aaaa)", "-", "rolled", "back"]
    assert "failed" in lines[2] and lines[2].endswith("...") and "\n" not in lines[2]
    assert lines[3].split() == ["h3", "-", "0.32.0", "(aaaa)", "-", "untouched", "-", "-"]
    assert lines[4] == "1 upgraded, 1 rolled back, 1 untouched"
    assert deploy_lines([])[-1] == "no hosts"
    assert deploy_lines([{"host": "h", "outcome": "checked"}])[-1] == "1 checked"


def test_deploy_lines_name_hosts_left_drained_and_count_every_outcome():
    from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import deploy_lines
    a = {"version": "0.32.0", "config": "aaaa"}
    rows = [{"host": "h1", "batch": 1, "before": a, "after": a, "outcome": "resumed"},
            {"host": "h2", "batch": 2, "before": a, "after": a, "outcome": "restarted"},
            {"host": "h3", "batch": 3, "before": {}, "after": None, "outcome": "first install failed",
             "drained": True, "detail": "vLLM 0.32.0 installed; not serving"},
            {"host": "h4", "batch": 3, "before": a, "outcome": "interrupted", "drained": True},
            {"host": "h5", "before": a, "outcome": "someday"}]
    lines = deploy_lines(rows)
    # the hosts that serve what the run left show it
    assert lines[1].split()[:7] == ["h1", "1", "0.32.0", "(aaaa)", "0.32.0", "(aaaa)", "resumed"]
    assert lines[2].split()[:7] == ["h2", "2", "0.32.0", "(aaaa)", "0.32.0", "(aaaa)", "restarted"]
    assert lines[3].split()[:8] == ["h3", "3", "-", "-", "first", "install", "failed", "-"]
    assert "LEFT DRAINED. vLLM 0.32.0 installed" in lines[3]
    assert "LEFT DRAINED." in lines[4]
    # every outcome is counted, an unknown one too
    assert lines[6] == "1 restarted, 1 resumed, 1 first install failed, 1 interrupted, 1 someday"
    assert lines[7] == "left out of the load balancer: h3, h4 (the next deploy finishes them first)"


def _gate(verdict="healthy", samples=None, **extra):
    return dict(verdict=verdict, state="idle", causes=[], samples=samples or [
        {"version": "0.32.0", "kv_cache_usage": 0.1, "requests_running": 0, "requests_waiting": 0,
         "block_size": 32, "num_gpu_blocks": 100, "rates": {"preemptions_per_s": 0.0}}], **extra)


def test_rows_are_the_same_from_a_host_loop_and_from_targets():
    from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import diagnosis_rows
    dead = [{"url": "http://h:1", "healthy": False, "error": "cannot read http://h:1/metrics: refused"}]
    per_host = diagnosis_rows(
        [_gate(item={"name": "a"}), _gate("unhealthy", dead, item={"name": "b"})], "h1",
        [{"metrics": {"version": "0.32.0"}},
         {"failed": False, "msg": "cannot read http://h:1/metrics: refused"}], 0)
    fleet = diagnosis_rows([_gate(name="a", host="h1"), _gate("unhealthy", dead, name="b", host="h1")])
    assert [dict(r, gpus=None) for r in per_host] == fleet
    assert fleet[0]["version"] == "0.32.0" and fleet[0]["preemptions_per_s"] == 0.0
    assert fleet[1]["error"].startswith("cannot read") and fleet[1]["version"] is None
    assert per_host[0]["gpus"] == 0 and fleet[0]["gpus"] is None
