# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The generated Prometheus rules: structure, one alert per cause with the cause's advice, and
promtool's own checks (check rules; test rules with series from the real captures)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.filter.prometheus_rules import prometheus_rules
from ansible_collections.kvfleet.vllm.plugins.module_utils import _diagnosis
from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import CAUSE_IDS, cause_advice
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._prometheus_rules import (
    ALERT_NAMES, SEVERITIES, rules)

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(HERE, "..", "..", "..", "prometheus")


def _alerts(doc):
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def _promtool():
    # tests/setup.sh installs it (Debian package prometheus): a missing one is a failure, not a skip
    path = shutil.which("promtool") or ("/usr/bin/promtool" if os.path.exists("/usr/bin/promtool") else None)
    assert path, "promtool not found: run bash tests/setup.sh tools (installs the Debian package prometheus)"
    return path


def test_every_cause_has_one_alert_with_its_advice():
    alerts = _alerts(rules())
    for cause in CAUSE_IDS:
        mine = [a for a in alerts if a["labels"].get("cause") == cause]
        assert mine, cause
        assert set(a["alert"] for a in mine) == {ALERT_NAMES[cause]}
        assert all(a["annotations"]["description"] == cause_advice(cause) for a in mine)
        assert set(a["labels"]["severity"] for a in mine) <= set(SEVERITIES[cause])


def test_severities_are_the_ones_the_diagnosis_gives():
    """SEVERITIES is read back from _diagnosis' source: every _cause(id, severity) call."""
    with open(_diagnosis.__file__, encoding="utf-8") as f:
        src = f.read()
    found = {}
    for cid, expr in re.findall(r'_cause\("(\w+)",\s*([^,]+),', src):
        found.setdefault(cid, set()).update(re.findall(r'"(critical|warning)"', expr))
    assert set(found) == set(CAUSE_IDS)
    assert dict((c, set(s)) for c, s in SEVERITIES.items()) == found


def test_structure_and_names():
    doc = rules()
    assert [g["name"] for g in doc["groups"]] == [
        "kvfleet_vllm_records", "kvfleet_vllm_causes", "kvfleet_vllm_monitor", "kvfleet_vllm_slo"]
    for rule in doc["groups"][0]["rules"]:
        assert re.match(r"^kvfleet_vllm:[a-z0-9_:]+$", rule["record"])
    records = set(r["record"] for r in doc["groups"][0]["rules"])
    for alert in _alerts(doc):
        assert alert["labels"]["severity"] in ("warning", "critical")
        assert set(alert["annotations"]) == {"summary", "description"}
        for used in re.findall(r"kvfleet_vllm:[a-z0-9_:]+", alert["expr"]):
            assert used in records, (alert["alert"], used)
    usage = [r for r in doc["groups"][0]["rules"] if r["record"] == "kvfleet_vllm:kv_cache_usage:ratio"]
    assert usage[0]["expr"] == "vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc"


def test_settings_reach_the_expressions():
    doc = rules({"job": "llm", "node_job": "nodes", "window": "10m", "kv_usage_high": 0.8,
                 "ttft_p95_seconds": 1.5})
    exprs = dict((a["alert"] + a["labels"]["severity"], a["expr"]) for a in _alerts(doc))
    assert exprs["VllmEngineDowncritical"] == 'up{job="llm"} == 0'
    assert "[10m]) >= 0.8" in exprs["VllmKvCacheExhaustedcritical"]
    assert exprs["VllmTtftP95Highwarning"].endswith("> 1.5")
    assert 'job="nodes"' in exprs["VllmMonitorVerdictcritical"]


@pytest.mark.parametrize("bad, word", [
    ({"windw": "5m"}, "unknown setting"), ({"window": "5 min"}, "window"),
    ({"job": 'a"b'}, "job"), ({"kv_usage_high": 90}, "kv_usage_high"),
    ({"ttft_p95_seconds": 0}, "ttft_p95_seconds"), ({"min_preemptions": True}, "min_preemptions"),
])
def test_bad_settings_name_the_setting(bad, word):
    with pytest.raises(AnsibleFilterError, match=word):
        prometheus_rules(bad)


def test_promtool_check_and_test_rules(tmp_path):
    promtool = _promtool()
    doc = rules()
    (tmp_path / "kvfleet_vllm.rules.yml").write_text(yaml.safe_dump(doc, sort_keys=False, width=1000))
    out = subprocess.run([promtool, "check", "rules", str(tmp_path / "kvfleet_vllm.rules.yml")],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    alerts = _alerts(doc)
    by_key = dict(((a["alert"], a["labels"]["severity"]), a["annotations"]) for a in alerts)
    with open(os.path.join(TESTS, "kvfleet_vllm_test.yml"), encoding="utf-8") as f:
        suite = yaml.safe_load(f)
    firing, quiet = set(), set()
    for case in suite["tests"]:
        for check in case["alert_rule_test"]:
            (firing if check["exp_alerts"] else quiet).add(check["alertname"])
            # the annotations are the rules' own (the causes' advice): filled in, not copied
            for exp in check["exp_alerts"]:
                exp["exp_annotations"] = by_key[(check["alertname"], exp["exp_labels"]["severity"])]
    names = set(a["alert"] for a in alerts)
    assert names - firing == set(), "alerts without a firing case"
    assert names - quiet == set(), "alerts without a not-firing case"
    (tmp_path / "kvfleet_vllm_test.yml").write_text(yaml.safe_dump(suite, sort_keys=False, width=1000))
    out = subprocess.run([promtool, "test", "rules", "kvfleet_vllm_test.yml"], cwd=str(tmp_path),
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
