"""A private index URL with user:password@ goes onto pip's command line, which Ansible's pip
module returns in its result: the server and router roles' pip tasks that take an index run
under no_log when one of their URLs carries credentials (and only then: a plain URL stays
visible to the operator)."""

from __future__ import annotations

import os

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.kvfleet.vllm.tests.unit.plugins.test_unit_security import ROLES, _role_vars


def _tasks(role, name):
    with open(os.path.join(ROLES, role, "tasks", name), encoding="utf-8") as f:
        return yaml.safe_load(f)


@pytest.mark.parametrize("index, extra, hidden", [
    ("", [], False),
    ("https://pypi.internal/simple", [], False),
    ("https://ci:s3cret@pypi.internal/simple", [], True),
    ("", ["https://token@mirror.internal/simple"], True),
])
def test_the_server_roles_pip_runs_under_no_log_with_credentials(index, extra, hidden):
    variables = dict(_role_vars("cpu"), vllm_server_pip_index_url=index, vllm_server_pip_extra_index_urls=extra)
    pip = [t for t in _tasks("server", "install.yml") if "ansible.builtin.pip" in t
           and "__server_pip_args" in str(t["ansible.builtin.pip"].get("extra_args", ""))]
    assert len(pip) == 2   # vLLM, and Ray
    for task in pip:
        value = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(task["no_log"]))
        assert value is hidden, (task["name"], value)


@pytest.mark.parametrize("index, hidden", [("", False), ("https://ci:s3cret@pypi.internal/simple", True)])
def test_the_router_roles_pip_runs_under_no_log_with_credentials(index, hidden):
    (task,) = [t for t in _tasks("router", "main.yml") if "ansible.builtin.pip" in t]
    value = Templar(loader=DataLoader(), variables={"vllm_router_pip_index_url": index}).template(
        trust_as_template(task["no_log"]))
    assert value is hidden
