"""The server role refreshes the package lists only when an OS package it needs is missing: a host
that has them all (an air-gapped one, docs/offline.md) never reaches a mirror. Read from
roles/server/tasks/install.yml itself: its dpkg-query run here, its list of missing packages
worked out by Ansible's own templating."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.kvfleet.vllm.tests.unit.plugins.test_unit_security import _trusted

ROLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "roles")


def _tasks(path):
    with open(os.path.join(ROLES, *path), encoding="utf-8") as f:
        return yaml.safe_load(f)


def _walk(tasks):
    for task in tasks or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _walk(task.get(key))


BLOCK = [t for t in _tasks(("server", "tasks", "install.yml")) if "block" in t
         and "__server_os_packages" in t.get("vars", {})][0]
PROBE, APT = BLOCK["block"]


def missing(stdout):
    variables = dict(_trusted(BLOCK["vars"]), _server_dpkg={"stdout": stdout, "rc": 0})
    return Templar(loader=DataLoader(), variables=variables).template(
        trust_as_template("{{ __server_os_missing }}"))


def test_every_package_installed_means_no_apt_call_at_all():
    assert missing("python3-venv:installed python3-packaging:installed libnuma1:installed ") == []
    assert APT["when"] == "__server_os_missing | length > 0"
    assert APT["ansible.builtin.apt"]["name"] == "{{ __server_os_missing }}"


@pytest.mark.parametrize("stdout, expected", [
    # dpkg knows it but it is not installed, or only its configuration files are left
    ("python3-venv:not-installed python3-packaging:installed libnuma1:installed ", ["python3-venv"]),
    ("python3-venv:installed python3-packaging:config-files libnuma1:installed ", ["python3-packaging"]),
    # dpkg has never heard of it (dpkg-query prints nothing for it and exits 1)
    ("python3-venv:installed libnuma1:installed ", ["python3-packaging"]),
    ("", ["python3-venv", "python3-packaging", "libnuma1"]),
    # half-installed is not installed
    ("python3-venv:half-installed python3-packaging:installed libnuma1:unpacked ", ["python3-venv", "libnuma1"]),
])
def test_only_the_missing_packages_are_installed_with_a_refreshed_cache(stdout, expected):
    assert sorted(missing(stdout)) == sorted(expected)   # apt takes them in any order
    assert APT["ansible.builtin.apt"]["update_cache"] is True


def test_the_probe_reads_without_changing_and_runs_in_check_mode():
    assert PROBE["changed_when"] is False and PROBE["check_mode"] is False
    assert PROBE["register"] == "_server_dpkg"
    assert BLOCK["when"] == "ansible_facts.os_family | default('') == 'Debian'"


def test_the_probe_command_reads_this_machines_dpkg():
    # a Debian machine, as the test hosts are: the same argv, its output parsed the same way
    assert shutil.which("dpkg-query"), "dpkg-query is missing (a Debian machine runs these tests)"
    argv = Templar(loader=DataLoader(), variables=_trusted(BLOCK["vars"])).template(
        trust_as_template(PROBE["ansible.builtin.command"]["argv"]))
    proc = subprocess.run(argv + ["dpkg", "kvfleet-no-such-package"], capture_output=True, text=True, check=False)
    assert proc.returncode == 1       # the unknown one; the task accepts 0 and 1
    assert "dpkg:installed" in proc.stdout.split()
    assert sorted(missing(proc.stdout)) == sorted(p for p in BLOCK["vars"]["__server_os_packages"]
                                                  if "%s:installed" % p not in proc.stdout.split())


def test_no_role_refreshes_the_package_lists_unconditionally():
    for role in sorted(os.listdir(ROLES)):
        folder = os.path.join(ROLES, role, "tasks")
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            for task in _walk(_tasks((role, "tasks", name))):
                for module in ("ansible.builtin.apt", "apt", "ansible.builtin.package"):
                    args = task.get(module)
                    if isinstance(args, dict) and args.get("update_cache"):
                        assert task.get("when"), "%s/tasks/%s: %s" % (role, name, task.get("name"))
