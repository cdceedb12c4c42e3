"""The server role loops over its instances (_server_instances) in some fifteen tasks, and Ansible
prints a loop's whole item with -v whatever loop_control.label says. So the instances carry the
names of their environment variables only; the values (vllm_server_environment and each
instance's own environment: secrets, perhaps) reach the environment file alone, through
_server_environments, which no task loops over and which is read with no_log only."""

from __future__ import annotations

import json
import os
import re

import pytest
import yaml

from ansible.errors import AnsibleFilterError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.kvfleet.vllm.plugins.filter.serving_group import serving_group
from ansible_collections.kvfleet.vllm.plugins.filter.vllm_instance_environments import (
    FilterModule as EnvironmentsFilter)
from ansible_collections.kvfleet.vllm.plugins.filter.vllm_instances import FilterModule as InstancesFilter
from ansible_collections.kvfleet.vllm.tests.unit.plugins.plugin_utils.test_instances import settings
from ansible_collections.kvfleet.vllm.tests.unit.plugins.test_playbook_includes import ROOT, _tasks, _yaml_files
from ansible_collections.kvfleet.vllm.tests.unit.plugins.test_unit_security import _role_vars

SHARED, OWN, RAY = "SHAREDCANARY-4b1f", "OWNCANARY-9c2e", "RAYCANARY-77d0"
SERVER = os.path.join(ROOT, "roles", "server")
# the only files that may name the mapping of environment values: where it is set, where it is read
ENV_READERS = {"roles/server/tasks/instances.yml", "roles/server/templates/vllm.env.j2"}


def _load(path):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def _derive_task():
    tasks = _load(os.path.join(SERVER, "tasks", "instances.yml"))
    return [t for t in tasks if t.get("name") == "Derive every instance"][0]


def _squash(text):
    return re.sub(r"\s+", "", text)


def _role_model(variables):
    """_server_instances and _server_environments as tasks/instances.yml sets them: its expressions
    checked here, then evaluated with the filters and the role's templated variables."""
    facts = _derive_task()["ansible.builtin.set_fact"]
    assert _squash(facts["_server_instances"]) == \
        _squash("{{ __server_instances_in | kvfleet.vllm.vllm_instances(__server_settings) }}")
    assert _squash(facts["_server_environments"]) == \
        _squash("{{ __server_instances_in | kvfleet.vllm.vllm_instance_environments(__server_settings) }}")
    role_vars = _load(os.path.join(SERVER, "vars", "main.yml"))
    assert _squash(role_vars["__server_instances_in"]).startswith(
        _squash("{{ vllm_server_instances | kvfleet.vllm.serving_group(vllm_server_serving_group,"))
    templar = Templar(loader=DataLoader(), variables=variables)
    settings = templar.template(trust_as_template("{{ __server_settings }}"))
    group = templar.template(trust_as_template("{{ vllm_server_serving_group }}"))
    assert group == ""  # the role's default: the instances go to the filter as they are
    instances_in = serving_group(templar.template(trust_as_template("{{ vllm_server_instances }}")), group,
                                 {}, {}, "h1")
    instances = InstancesFilter().filters()["vllm_instances"](instances_in, settings)
    environments = EnvironmentsFilter().filters()["vllm_instance_environments"](instances_in, settings)
    return instances, environments


def _render_env(variables, instance, environments):
    variables = dict(variables, item=instance, _server_environments=environments)
    with open(os.path.join(SERVER, "templates", "vllm.env.j2"), encoding="utf-8") as f:
        return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(f.read()))


def test_no_loop_item_carries_an_environment_value_and_the_env_file_still_gets_it():
    variables = _role_vars("cpu")
    variables.update(vllm_server_environment={"SHARED_TOKEN": SHARED},
                     vllm_server_instances=[{"name": "main", "port": 8000, "environment": {"OWN_TOKEN": OWN}},
                                            {"name": "second", "port": 8001}])
    instances, environments = _role_model(variables)
    assert [i["name"] for i in instances] == ["main", "second"]
    for inst in instances:
        text = json.dumps(inst)
        assert SHARED not in text and OWN not in text, inst["name"]
        assert "environment" not in inst
    # the names stay, for checks such as 'HF_HUB_OFFLINE' not in ...
    assert instances[0]["environment_keys"] == ["OWN_TOKEN", "SHARED_TOKEN"]
    assert instances[1]["environment_keys"] == ["SHARED_TOKEN"]
    assert environments == {"main": {"SHARED_TOKEN": SHARED, "OWN_TOKEN": OWN},
                            "second": {"SHARED_TOKEN": SHARED}}
    main = _render_env(variables, instances[0], environments)
    assert 'SHARED_TOKEN="%s"\n' % SHARED in main and 'OWN_TOKEN="%s"\n' % OWN in main
    assert "VLLM_CACHE_ROOT=\"/var/lib/vllm/cache/main\"" in main
    second = _render_env(variables, instances[1], environments)
    assert 'SHARED_TOKEN="%s"\n' % SHARED in second and OWN not in second


def test_an_instances_own_hf_hub_offline_still_wins_over_the_roles():
    variables = _role_vars("cpu")
    variables.update(vllm_server_instances=[{"name": "main", "port": 8000, "environment": {"HF_HUB_OFFLINE": "0"}}],
                     __server_artefacts=[{"name": "m"}])
    instances, environments = _role_model(variables)
    text = _render_env(variables, instances[0], environments)
    assert 'HF_HUB_OFFLINE="0"\n' in text and 'HF_HUB_OFFLINE="1"' not in text
    variables.update(vllm_server_instances=[{"name": "main", "port": 8000}])
    instances, environments = _role_model(variables)
    assert 'HF_HUB_OFFLINE="1"\n' in _render_env(variables, instances[0], environments)


def test_a_ray_groups_head_and_node_carry_no_environment_value():
    settings = Templar(loader=DataLoader(), variables=dict(_role_vars("cuda"), vllm_server_options={
        "tensor_parallel_size": 2})).template(trust_as_template("{{ __server_settings }}"))
    settings["environment"] = {"SHARED_TOKEN": RAY}
    hostvars = {"n1": {"vllm_server_serving_group_backend": "ray", "ansible_host": "10.0.0.1"},
                "n2": {"vllm_server_serving_group_backend": "ray", "ansible_host": "10.0.0.2"}}
    insts_in = serving_group([{"name": "main", "port": 8000}], "g", {"g": ["n1", "n2"]}, hostvars, "n1",
                             address="10.0.0.1", backend="ray", trusted_network=True)
    instances = InstancesFilter().filters()["vllm_instances"](insts_in, settings)
    environments = EnvironmentsFilter().filters()["vllm_instance_environments"](insts_in, settings)
    assert sorted(i["unit"] for i in instances) == ["vllm-main.service", "vllm-ray.service"]
    for inst in instances:
        assert RAY not in json.dumps(inst) and "environment" not in inst, inst["unit"]
        assert environments[inst["name"]]["SHARED_TOKEN"] == RAY
    head = [i for i in instances if i["ray"]][0]
    assert head["environment_keys"] == ["RAY_ADDRESS", "SHARED_TOKEN"]
    assert environments[head["name"]]["RAY_ADDRESS"] == "10.0.0.1:6379"
    # the Ray node's environment file is written from the same values: checked as the head's are
    node_in = [i for i in insts_in if i.get("ray_node")]
    assert len(node_in) == 1
    settings["environment"] = {"SHARED_TOKEN": RAY + "\nExecStartPre=+/bin/sh"}
    for filters in (InstancesFilter().filters()["vllm_instances"],
                    EnvironmentsFilter().filters()["vllm_instance_environments"]):
        with pytest.raises(AnsibleFilterError, match=r"\[ray\]\.environment\.SHARED_TOKEN: must not contain") as err:
            filters(node_in, settings)
        assert RAY not in str(err.value)


def test_no_task_loops_over_the_environment_values_and_only_no_log_tasks_read_them():
    readers = set()
    for top in ("roles", "playbooks"):
        for folder, _dirs, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    if "_server_environments" in f.read():
                        readers.add(os.path.relpath(path, ROOT))
    assert readers == ENV_READERS
    for path in _yaml_files():
        for task in _tasks(_load(path)):
            for key, value in task.items():
                if key == "loop" or key.startswith("with_"):
                    assert "_server_environments" not in str(value), (path, task.get("name"))
    assert _derive_task().get("no_log") is True
    # every task that renders the environment file: no_log and no diff (the values never print)
    renders = [(path, task) for path in _yaml_files() for task in _tasks(_load(path))
               if isinstance(task.get("ansible.builtin.template"), dict)
               and task["ansible.builtin.template"].get("src") == "vllm.env.j2"]
    expected = ["roles/server/tasks/configure.yml", "roles/server/tasks/plan.yml"]
    assert sorted(os.path.relpath(p, ROOT) for p, _t in renders) == expected
    for path, task in renders:
        assert task.get("no_log") is True and task.get("diff") is False, path


def test_the_environments_filter_fails_as_the_instances_filter_does_without_echoing_a_value():
    bad = [{"name": "main", "port": 8000, "environment": {"OK": OWN + "\nExecStartPre=+/bin/sh"}}]
    for filters in (EnvironmentsFilter().filters()["vllm_instance_environments"],
                    InstancesFilter().filters()["vllm_instances"]):
        with pytest.raises(AnsibleFilterError, match=r"vllm_server_instances\[main\]\.environment\.OK: must not contain") as err:
            filters(bad, settings())
        assert OWN not in str(err.value)
