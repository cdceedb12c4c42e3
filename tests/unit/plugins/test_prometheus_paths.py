"""docs/monitoring.md's lines for a fleet whose node_exporter and Prometheus come from the
prometheus.prometheus collection set the roles' own options: each key of its YAML block is an
option of the role it names, with the Debian default the page says it replaces."""

from __future__ import annotations

import os
import re

import yaml

from ansible_collections.kvfleet.vllm.plugins.module_utils import _nvml

COLLECTION = os.path.abspath(os.path.join(os.path.dirname(_nvml.__file__), "..", ".."))


def _spec(role):
    with open(os.path.join(COLLECTION, "roles", role, "meta", "argument_specs.yml"), encoding="utf-8") as f:
        return yaml.safe_load(f)["argument_specs"]["main"]["options"]


def test_the_one_line_settings_are_the_roles_options():
    with open(os.path.join(COLLECTION, "docs", "monitoring.md"), encoding="utf-8") as f:
        page = f.read()
    section = page.split("### Beside prometheus.prometheus", 1)[1]
    block = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))
    assert block == {"vllm_monitor_textfile_dir": "/var/lib/node_exporter",
                     "vllm_prometheus_promtool": "/usr/local/bin/promtool"}
    assert _spec("monitor")["vllm_monitor_textfile_dir"]["default"] == "/var/lib/prometheus/node-exporter"
    assert _spec("prometheus")["vllm_prometheus_promtool"]["default"] == "/usr/bin/promtool"
    for default in ("/var/lib/prometheus/node-exporter", "/usr/bin/promtool"):
        assert default in section
