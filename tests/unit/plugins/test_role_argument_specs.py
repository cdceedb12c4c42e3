"""Every role default is documented in meta/argument_specs.yml and every documented option exists."""

from __future__ import annotations

import os

import pytest
import yaml

ROLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "roles")
# documented but without a default on purpose: required, or set by the calling role
NO_DEFAULT = {"hosttools": {"__hosttools_caller"},
              "rollout": {"vllm_deploy_analysis_ca_path", "vllm_deploy_analysis_client_cert",
                          "vllm_deploy_analysis_client_key"}}


def load(role, *path):
    with open(os.path.join(ROLES, role, *path), encoding="utf-8") as f:
        return yaml.safe_load(f) or {}


@pytest.mark.parametrize("role", sorted(os.listdir(ROLES)))
def test_defaults_and_argument_specs_agree(role):
    defaults = set(load(role, "defaults", "main.yml"))
    documented = set(load(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"])
    assert defaults - documented == set(), "defaults not documented"
    assert documented - defaults == NO_DEFAULT.get(role, set()), "documented but no default"


@pytest.mark.parametrize("role", sorted(os.listdir(ROLES)))
def test_role_variables_carry_the_role_prefix(role):
    prefix = {"server": "vllm_server_", "scheduled_restart": "vllm_restart_",
              "monitor": "vllm_monitor_", "hosttools": "kvfleet_hosttools_",
              "prometheus": "vllm_prometheus_", "router": "vllm_router_",
              "rollout": ("vllm_deploy_", "vllm_rolling_restart_")}[role]
    assert all(name.startswith(prefix) for name in load(role, "defaults", "main.yml"))


@pytest.mark.parametrize("role", sorted(os.listdir(ROLES)))
def test_role_readme_is_generated_from_the_argument_specs(role):
    import importlib.util
    path = os.path.join(ROLES, "..", "tests", "support", "role_readme.py")
    spec = importlib.util.spec_from_file_location("role_readme", path)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    with open(os.path.join(ROLES, role, "README.md"), encoding="utf-8") as f:
        assert f.read() == gen.render(role), "run python3 tests/support/role_readme.py"


def test_the_verify_entry_point_accepts_every_record_the_instance_model_writes():
    """deploy and rolling_restart hand the record's instances to tasks_from verify, whose argument
    spec validation refuses unknown keys: the two must not drift apart."""
    from ansible_collections.kvfleet.vllm.plugins.plugin_utils._instances import build
    group = {"size": 2, "size_local": 1, "address": "10.0.0.1", "rpc_port": 13345}
    instances, _warnings = build([{"name": "main", "port": 8000},
                                  # a serving group's head: its record carries the group too
                                  {"name": "head", "port": 8001, "data_parallel": group}], {
        "version": "0.32.0", "device": "cpu",
        "options": {"model": "/m", "block_size": 32, "host": "127.0.0.1"}})
    assert "group" in instances[1]["record"]
    spec = load("server", "meta", "argument_specs.yml")["argument_specs"]["verify"]["options"]
    for inst in instances:
        assert set(inst["record"]) <= set(spec["vllm_server_verify_instances"]["options"])


@pytest.mark.parametrize("role, ids_var, causes_var", [
    ("scheduled_restart", "__scheduled_restart_cause_ids", "vllm_restart_causes"),
    ("monitor", "__monitor_cause_ids", "vllm_monitor_watchdog_causes")])
def test_roles_know_every_cause_of_the_diagnosis(role, ids_var, causes_var):
    """The scheduled_restart and monitor roles check the causes a restart cures (the guard's,
    the watchdog's) against a copy of the cause ids."""
    from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import CAUSE_IDS
    with open(os.path.join(ROLES, role, "vars", "main.yml")) as f:
        ids = yaml.safe_load(f)[ids_var]
    assert ids == list(CAUSE_IDS)
    with open(os.path.join(ROLES, role, "defaults", "main.yml")) as f:
        assert set(yaml.safe_load(f)[causes_var]) <= set(CAUSE_IDS)


@pytest.mark.parametrize("role", sorted(os.listdir(ROLES)))
def test_the_defaults_that_are_not_templates_pass_the_argument_specs(role):
    """What Ansible checks when the role is included: a default (an empty source dictionary, an
    empty list of adapters) must pass its own spec, or every play that leaves it alone fails."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
    spec = load(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    defaults = dict((k, v) for k, v in load(role, "defaults", "main.yml").items()
                    if "{{" not in str(v) and v is not None)
    # the spec of those options only (a missing one would take the spec's documented default)
    result = ArgumentSpecValidator(dict((k, spec[k]) for k in defaults)).validate(defaults)
    assert not result.error_messages, result.error_messages


def test_a_partial_model_source_is_left_to_the_preflight():
    """The filter names what is missing (tests/unit/plugins/plugin_utils/test_model_source.py)."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
    spec = load("server", "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    result = ArgumentSpecValidator({"vllm_server_model_source": spec["vllm_server_model_source"]}).validate(
        {"vllm_server_model_source": {"name": "tiny"}})
    assert not result.error_messages


def test_the_rollout_checks_its_settings_once_before_any_host_changes():
    """The first play of deploy and of rolling_restart validates every setting of the role's spec
    once (run_once: the play's settings, not a host's); no entry point is in the spec, or Ansible
    would validate again for every host of every play that applies it."""
    specs = load("rollout", "meta", "argument_specs.yml")["argument_specs"]
    assert list(specs) == ["main"]
    assert {n for n in specs["main"]["options"] if n.startswith("vllm_deploy_")} >= {
        "vllm_deploy_serial", "vllm_deploy_analysis_seconds", "vllm_deploy_routers"}
    for entry in ("check", "restart_check"):
        first = load("rollout", "tasks", entry + ".yml")[0]
        assert first["run_once"] is True, entry
        assert "argument_specs.main.options" in first["ansible.builtin.validate_argument_spec"]["argument_spec"], entry
