from __future__ import annotations

from ansible_collections.kvfleet.vllm.plugins.module_utils._report import table_lines


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
