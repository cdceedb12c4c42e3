"""The Grafana dashboard (plugins/plugin_utils/_grafana.py): its model holds together, every query
is PromQL that promtool accepts, and it reads the series the rules record. Not loaded into a
real Grafana (none can be installed here): a structural check of the JSON model."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.filter.grafana_dashboard import grafana_dashboard
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._prometheus_rules import rules
from ansible_collections.kvfleet.vllm.tests.unit.plugins.filter.test_prometheus_rules import _promtool


def _queries(dash):
    for panel in dash["panels"]:
        for target in panel["targets"]:
            yield panel, target["expr"]
    for note in dash["annotations"]["list"]:
        yield note, note["expr"]


def test_the_model_holds_together():
    dash = grafana_dashboard({})
    json.dumps(dash)   # plain JSON
    assert dash["uid"] == "kvfleet-vllm" and dash["schemaVersion"] >= 36
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for p in dash["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0
        mine = set((x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"]))
        assert not cells & mine, "panel %s overlaps another" % p["title"]
        cells |= mine
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs))
        assert p["datasource"]["uid"] == "${datasource}" and p["type"] in ("timeseries", "state-timeline")
    names = [v["name"] for v in dash["templating"]["list"]]
    assert names == ["datasource", "instance"]
    # every vLLM query is filtered by the instance variable
    for _p, expr in _queries(dash):
        if "vllm:" in expr and "process_start" not in expr:
            assert 'instance=~"$instance"' in expr, expr


def test_it_shows_what_issue_asks_for():
    text = json.dumps(grafana_dashboard({}))
    for series in ("kvfleet_vllm_cause", "kvfleet_vllm_verdict", "kvfleet_vllm:kv_cache_usage:ratio",
                   "vllm:num_requests_waiting_by_reason", "vllm:num_preemptions_total",
                   "vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_bucket",
                   "vllm:inter_token_latency_seconds_bucket", "vllm:request_queue_time_seconds_bucket",
                   "kvfleet_vllm_memory_rss_bytes", "kvfleet_vllm_memory_gpu_bytes", "process_start_time_seconds"):
        assert series in text, series


def test_every_query_is_promql_and_recorded_series_exist(tmp_path):
    promtool = _promtool()
    dash = grafana_dashboard({"job": "gpu-vllm", "node_job": "gpu-node"})
    exprs = [e.replace("$__rate_interval", "5m").replace("$instance", ".*") for _p, e in _queries(dash)]
    assert all('job="gpu-vllm"' in e or 'job="gpu-node"' in e for e in exprs)
    doc = {"groups": [{"name": "dashboard", "rules": [
        {"record": "kvfleet_vllm_dashboard:q%d" % i, "expr": e} for i, e in enumerate(exprs)]}]}
    (tmp_path / "q.yml").write_text(yaml.safe_dump(doc, width=1000))
    out = subprocess.run([promtool, "check", "rules", str(tmp_path / "q.yml")],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    recorded = set(r["record"] for g in rules()["groups"] for r in g["rules"] if "record" in r)
    used = set(re.findall(r"kvfleet_vllm:[a-z0-9_:]+", " ".join(exprs)))
    assert used and used <= recorded


def test_bad_settings_name_the_setting():
    with pytest.raises(AnsibleFilterError, match="grafana_dashboard: window must be a Prometheus duration"):
        grafana_dashboard({"window": "five"})
    with pytest.raises(AnsibleFilterError, match="grafana_dashboard: unknown setting"):
        grafana_dashboard({"nope": 1})
