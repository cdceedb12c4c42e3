"""The JSON configurations the roles write for the host program (restart guard, monitor,
watchdog), rendered by Ansible's own templating from the roles' defaults: valid JSON with the keys
the program reads. A template that does not render (a comment inside an expression did once)
fails here, not in a fleet's converge."""

from __future__ import annotations

import json
import os

import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.kvfleet.vllm.tests.unit.plugins.test_unit_security import ROLES, _role_vars


@pytest.mark.parametrize("role, template, keys", [
    ("scheduled_restart", "restart.json.j2", {"record", "monitor_config", "mode", "causes", "slot", "host", "analysis"}),
    ("monitor", "monitor.json.j2", {"record", "history", "memory", "trend"}),
    ("monitor", "watchdog.json.j2", {"record", "monitor_config", "state", "causes", "for_seconds", "max_per_day"}),
])
def test_config_templates_render_to_json(role, template, keys):
    variables = _role_vars("cuda")
    variables.update(inventory_hostname="gpu-01", _scheduled_restart_plan={"gpu-01": {"slot": 0}})
    with open(os.path.join(ROLES, role, "templates", template), encoding="utf-8") as f:
        text = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(f.read()))
    config = json.loads(text)
    assert keys <= set(config)
    if template == "monitor.json.j2":
        assert config["memory"] == {"ratio": 0.2, "min_bytes": 256 * 1024 ** 2, "min_seconds": 6 * 3600}
    if template == "restart.json.j2":
        # off by default; the guard reads these keys (analyse_after_restart)
        assert config["analysis"] == {"seconds": 0, "interval": 15, "min_requests": 20, "fail_on": ["fail"],
                                      "baseline": []}
        assert config["host"] == "gpu-01"
    if template == "watchdog.json.j2":
        assert config["monitor_config"] == "/etc/kvfleet/monitor.json" and config["for_seconds"] == 600


def test_prometheus_targets_leave_out_serving_group_workers():
    """A headless worker serves no API (its engines are in the head's /metrics): never a vLLM
    target, whether the host has a deployment record or only the instance model; a host that
    runs only workers still has its node_exporter target and is not reported as unknown."""
    head = {"name": "main", "unit": "vllm-main.service", "url": "http://10.0.0.1:8000", "port": 8000,
            "max_num_seqs": 4, "group": {"key": "10.0.0.1:13345", "role": "head"}}
    worker = {"name": "main", "unit": "vllm-main.service", "url": None, "port": 8000, "max_num_seqs": 4,
              "group": {"key": "10.0.0.1:13345", "role": "worker"}}
    hostvars = {
        "gpu-01": {"vllm_prometheus_address": "10.0.0.1", "ansible_local": {"kvfleet_vllm_server": {
            "current": {"version": "0.32.0", "device": "cuda", "instances": [head], "workers": []}}}},
        "gpu-02": {"vllm_prometheus_address": "10.0.0.2", "ansible_local": {"kvfleet_vllm_server": {
            "current": {"version": "0.32.0", "device": "cuda", "instances": [], "workers": [worker]}}}},
        # no record yet: the instance model of this run
        "gpu-03": {"vllm_prometheus_address": "10.0.0.3", "vllm_server_version": "0.32.0",
                   "_server_instances": [{"name": "main", "headless": True, "argv": [], "record": worker}]},
        "gpu-04": {"vllm_prometheus_address": "10.0.0.4", "vllm_server_version": "0.32.0",
                   "_server_instances": [{"name": "main", "headless": False, "argv": [], "record": head}]},
        "gpu-05": {"vllm_prometheus_address": "10.0.0.5"},
    }
    variables = {"groups": {"vllm": sorted(hostvars)}, "hostvars": hostvars, "vllm_prometheus_vllm_group": "vllm",
                 "vllm_prometheus_node_exporter_port": 9100}
    with open(os.path.join(ROLES, "prometheus", "templates", "targets.j2"), encoding="utf-8") as f:
        found = json.loads(Templar(loader=DataLoader(), variables=variables).template(trust_as_template(f.read())))
    assert [t["targets"] for t in found["vllm"]] == [["10.0.0.1:8000"], ["10.0.0.4:8000"]]
    assert [t["labels"]["host"] for t in found["node"]] == ["gpu-01", "gpu-02", "gpu-03", "gpu-04", "gpu-05"]
    assert found["missing"] == ["gpu-05"]
