"""The plays' hosts and batches (vllm_deploy_hosts, vllm_deploy_serial, vllm_rolling_restart_hosts)
are read by the plays' hosts and serial lines, which see extra vars only: set in the inventory,
they would be ignored without a word. The first play of kvfleet.vllm.deploy and of
kvfleet.vllm.rolling_restart names what the run uses, and roles/rollout/tasks/play_settings.yml
refuses an inventory that says otherwise, naming the setting, the hosts and the fix. Run through
ansible-playbook with each playbook's own first play (its name and hosts line, as written)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.kvfleet.vllm.plugins.module_utils import _nvml

COLLECTION = os.path.abspath(os.path.join(os.path.dirname(_nvml.__file__), "..", ".."))


def first_play(playbook):
    with open(os.path.join(COLLECTION, "playbooks", playbook), encoding="utf-8") as f:
        play = yaml.safe_load(f)[0]
    # the playbook's own name and hosts lines; the check's first tasks stand in for the rest
    return [{"name": play["name"], "hosts": play["hosts"], "gather_facts": False, "tasks": [
        {"ansible.builtin.import_tasks": os.path.join(COLLECTION, "roles", "rollout", "tasks", "play_settings.yml")},
        {"ansible.builtin.debug": {"msg": "PASSED THE CHECK"}}]}]


@pytest.fixture
def play(tmp_path):
    def run(playbook, inventory, extra=None, imported_vars=None):
        plays = first_play(playbook)
        if imported_vars is not None:
            (tmp_path / "first.yml").write_text(yaml.safe_dump(plays))
            plays = [{"ansible.builtin.import_playbook": str(tmp_path / "first.yml"), "vars": imported_vars}]
        (tmp_path / "play.yml").write_text(yaml.safe_dump(plays))
        (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
        env = dict(os.environ, ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
                   ANSIBLE_NOCOLOR="1")
        argv = [sys.executable, "-m", "ansible.cli.playbook", "-i", str(tmp_path / "inventory.yml"),
                "-e", "ansible_python_interpreter=%s" % sys.executable, str(tmp_path / "play.yml")]
        if extra is not None:
            argv[-1:-1] = ["-e", json.dumps(extra)]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
        return proc.returncode, proc.stdout + proc.stderr
    return run


def fleet(group_vars=None, node1=None):
    return {"all": {"children": {"gpu": {"hosts": {
        "node1": dict({"ansible_connection": "local"}, **(node1 or {})),
        "node2": {"ansible_connection": "local"}}}}, "vars": group_vars or {}}}


@pytest.mark.parametrize("playbook", ["deploy.yml", "rolling_restart.yml"])
def test_the_serial_in_group_vars_is_refused_and_the_same_as_an_extra_var_runs(play, playbook):
    rc, out = play(playbook, fleet({"vllm_deploy_serial": 3}))
    flat = " ".join(out.split())
    assert rc != 0 and "PASSED THE CHECK" not in out, out
    assert ("vllm_deploy_serial is 3 in the inventory (node1, node2), but this run's plays use [1, \\\"25%\\\"]"
            in flat), flat
    assert "Run with -e '{\\\"vllm_deploy_serial\\\": 3}'" in flat and "docs/playbooks.md#play-level-settings" in flat
    # the name shows what the run uses
    assert '"vllm_deploy_serial": [1, "25%"]' in out
    rc, out = play(playbook, fleet({"vllm_deploy_serial": 3}), extra={"vllm_deploy_serial": 3})
    assert rc == 0 and "PASSED THE CHECK" in out and '"vllm_deploy_serial": 3}' in out, out


@pytest.mark.parametrize("playbook, setting", [("deploy.yml", "vllm_deploy_hosts"),
                                               ("rolling_restart.yml", "vllm_rolling_restart_hosts")])
def test_the_hosts_in_host_vars_are_refused(play, playbook, setting):
    rc, out = play(playbook, fleet(node1={setting: "gpu"}))
    flat = " ".join(out.split())
    assert rc != 0 and '%s is \\"gpu\\" in the inventory (node1), but this run\'s plays use \\"all\\"' % setting in flat, flat
    rc, out = play(playbook, fleet(node1={setting: "gpu"}), extra={setting: "gpu"})
    assert rc == 0 and "PASSED THE CHECK" in out, out


def test_the_defaults_and_an_imported_playbooks_vars_run(play):
    rc, out = play("deploy.yml", fleet())
    assert rc == 0 and "PASSED THE CHECK" in out, out
    # as the fleet scenario's converge imports the deploy: the play's own vars reach its lines
    rc, out = play("deploy.yml", fleet(), imported_vars={"vllm_deploy_serial": 3})
    assert rc == 0 and "PASSED THE CHECK" in out and '"vllm_deploy_serial": 3}' in out, out
