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
