"""The router role refuses a host where accounts other than its administrators log in: its admin
API answers every local user, loopback included. The role's own task, evaluated here as Ansible
evaluates it (its vars templated, its `that:` as a conditional), on getent's facts."""
from __future__ import annotations

import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.kvfleet.vllm.tests.unit.plugins.test_unit_security import _trusted
from ansible_collections.kvfleet.vllm.tests.unit.plugins.test_validator_anchors import _role_vars, _task

NAME = "Assert no other user logs into the router host, or the operator accepted them"

# getent passwd and group as a Debian 12 host has them (the test-host image), before additions
PASSWD = {
    "root": ["x", "0", "0", "root", "/root", "/bin/bash"],
    "daemon": ["x", "1", "1", "daemon", "/usr/sbin", "/usr/sbin/nologin"],
    "sync": ["x", "4", "65534", "sync", "/bin", "/bin/sync"],
    "nobody": ["x", "65534", "65534", "nobody", "/nonexistent", "/usr/sbin/nologin"],
    "_apt": ["x", "42", "65534", "", "/nonexistent", "/usr/sbin/nologin"],
    "systemd-network": ["x", "998", "998", "systemd Network Management", "/", "/usr/sbin/nologin"],
}
GROUP = {"root": ["x", "0", ""], "sudo": ["x", "27", ""], "users": ["x", "100", ""]}


def _other_users(passwd, group, **over):
    task = _task("router", "main.yml", NAME)
    variables = _role_vars("router")
    variables.update(_trusted(task.get("vars", {})))
    variables["ansible_facts"] = {"getent_passwd": passwd, "getent_group": group}
    variables.update(over)
    templar = Templar(loader=DataLoader(), variables=variables)
    users = templar.template(trust_as_template("{{ _router_other_users }}"))
    holds = templar.evaluate_conditional(trust_as_template(task["ansible.builtin.assert"]["that"]))
    return users, holds


def test_a_host_only_root_logs_into_passes():
    assert _other_users(PASSWD, GROUP) == ([], True)


def test_an_administrator_in_the_sudo_group_is_no_other_user():
    passwd = dict(PASSWD, ops=["x", "1000", "1000", "", "/home/ops", "/bin/bash"])
    assert _other_users(passwd, dict(GROUP, sudo=["x", "27", "ops"])) == ([], True)
    assert _other_users(passwd, dict(GROUP, wheel=["x", "10", "admin2,ops"])) == ([], True)


@pytest.mark.parametrize("shell", ["/bin/bash", "/bin/sh", "/usr/bin/zsh"])
def test_another_login_account_is_refused_unless_accepted(shell):
    passwd = dict(PASSWD, alice=["x", "1001", "1001", "", "/home/alice", shell])
    assert _other_users(passwd, GROUP) == (["alice"], False)
    assert _other_users(passwd, GROUP, vllm_router_shared_host_ok=True) == (["alice"], True)


def test_the_refusal_names_the_accounts_and_the_opt_in():
    task = _task("router", "main.yml", NAME)
    msg = task["ansible.builtin.assert"]["fail_msg"]
    assert "_router_other_users" in msg and "vllm_router_shared_host_ok: true" in msg


@pytest.mark.parametrize("account, over", [("vllm", {}), ("kvfleet-monitor", {}),
                                           ("svc-vllm", {"vllm_server_user": "svc-vllm"})])
def test_a_vllm_hosts_service_accounts_count_whatever_their_shell(account, over):
    # vLLM's service user runs model code (trust_remote_code) and has no login shell: on a host
    # that also runs vLLM it could register a backend of its own and read every client's
    # Authorization header; so could the monitor's user
    passwd = dict(PASSWD, **{account: ["x", "990", "990", "", "/var/lib/x", "/usr/sbin/nologin"]})
    assert _other_users(passwd, GROUP, **over) == ([account], False)
    assert _other_users(passwd, GROUP, vllm_router_shared_host_ok=True, **over) == ([account], True)
