"""Where the playbooks and roles become root (docs/playbooks.md#logging-in-an-ordinary-user-and-sudo).

The login is an ordinary user with sudo, and no play sets become for everything it does:
- every step of the playbooks that changes or reads a host's root-owned state (the server role's
  entry points, the deploy's host steps, rolling_restart's unit restarts) runs with become,
  through `apply` on its include or a block around it;
- every task that runs elsewhere (delegate_to: the load balancer host, a router, the
  controller) says become: false, so that a block's root never reaches another host's sudo;
- every handler that touches units or the journal says become: true (a handler runs as its play
  does, not as the task that notified it).
The Molecule fleet scenario proves it on real hosts (it logs in as kvops); this test keeps a new
task from slipping.
"""

from __future__ import annotations

import glob
import os
import re

import pytest
import yaml

from ansible_collections.kvfleet.vllm.tests.unit.plugins.test_playbook_includes import ROOT, _tasks, _yaml_files

PLAYBOOKS = os.path.join(ROOT, "playbooks")
# task files and role entry points that read world-readable files or only compute: no root
NO_ROOT = {"record.yml", "serving_group_batch.yml", "serving_group_barrier.yml", "deploy_analyse.yml",
           "report.yml", "step_start.yml", "play_settings.yml",
           "kvfleet.vllm.server:instances", "kvfleet.vllm.hosttools:paths", "kvfleet.vllm.rollout:record"}
ROLLOUT = os.path.join(ROOT, "roles", "rollout", "tasks")
# the rollout role's entry points: the plays apply them without become, and each becomes root
# where it needs to itself (checked below as a playbook's tasks are)
ENTRY_POINTS = {"main.yml", "check.yml", "stage.yml", "batch.yml", "report.yml", "restart_check.yml", "restart_batch.yml"}
# modules that do not reach a host (no become to speak of)
LOCAL = ("set_fact", "assert", "debug", "include_tasks", "import_tasks", "include_role", "import_role", "meta", "fail")
HOST_MODULES = ("systemd_service", "systemd", "command", "shell", "file", "copy", "template")


def _module(task):
    for key in task:
        short = key.rsplit(".", 1)[-1]
        if short in LOCAL + HOST_MODULES or "." in key:
            return short
    return None


def _include_target(task):
    for key in ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks", "ansible.builtin.include_role",
                "ansible.builtin.import_role"):
        if key in task:
            args = task[key]
            if key.endswith("_role"):
                return "%s:%s" % (args["name"], args.get("tasks_from", "main")), args.get("apply", {})
            if isinstance(args, dict):
                return args["file"], args.get("apply", {})
            return args, {}
    return None, {}


def slips(tasks, where, become=False):
    """(where, task name, what is wrong) for each task of a playbook's task list."""
    bad = []
    for task in tasks or []:
        here = task.get("become", become)
        for key in ("block", "rescue", "always"):
            if key in task:
                bad += slips(task[key], where, here)
        if "block" in task:
            continue
        name = task.get("name", "?")
        module = _module(task)
        if "delegate_to" in task and module not in LOCAL and task.get("become") is not False:
            bad.append((where, name, "delegated without become: false"))
        target, apply = _include_target(task)
        rollout_entry = target is not None and target.startswith("kvfleet.vllm.rollout:")
        if target is not None and target not in NO_ROOT and not rollout_entry and not (here or apply.get("become")):
            bad.append((where, name, "includes %s without become" % target))
        if module in ("systemd_service", "systemd") and "delegate_to" not in task and not here:
            bad.append((where, name, "a unit without become"))
    return bad


def playbook_slips(path):
    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    where = os.path.relpath(path, ROOT)
    bad = []
    if isinstance(doc, list) and doc and "hosts" in doc[0]:
        for play in doc:
            if "become" in play:
                bad.append((where, play.get("name"), "become for the whole play"))
            for role in play.get("roles", []):
                name = role if isinstance(role, str) else role.get("role")
                if not (isinstance(role, dict) and "become" in role):
                    bad.append((where, name, "a role without become"))
            bad += slips(play.get("tasks"), where)
    else:
        # a task file: root comes from its include, which the playbooks' check above requires
        # unless the file is one that needs none
        name = os.path.basename(path)
        bad += slips(doc, where, become=name not in NO_ROOT and name not in ENTRY_POINTS)
    return bad


def handler_slips(path):
    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f) or []
    return [(os.path.relpath(path, ROOT), h.get("name"), "a handler without become")
            for h in doc if _module(h) != "uri" and h.get("become") is not True]


def test_the_playbooks_become_root_where_they_need_it_and_nowhere_else():
    bad = []
    paths = sorted(glob.glob(os.path.join(PLAYBOOKS, "*.yml")) + glob.glob(os.path.join(ROLLOUT, "*.yml")))
    assert len(paths) > 20
    for path in paths:
        bad += playbook_slips(path)
    assert bad == []


def test_every_handler_that_touches_a_unit_becomes_root():
    paths = sorted(glob.glob(os.path.join(ROOT, "roles", "*", "handlers", "main.yml")))
    assert len(paths) >= 3
    assert sum((handler_slips(p) for p in paths), []) == []


@pytest.mark.parametrize("tasks, wrong", [
    # the load balancer's command inside a host block that became root
    ([{"name": "b", "become": True, "block": [
        {"name": "lb", "ansible.builtin.command": {"argv": ["x"]}, "delegate_to": "lb"}]}], "delegated without become: false"),
    ([{"name": "s", "ansible.builtin.include_role": {"name": "kvfleet.vllm.server", "tasks_from": "rollback"}}],
     "includes kvfleet.vllm.server:rollback without become"),
    ([{"name": "r", "ansible.builtin.systemd_service": {"name": "vllm-main.service", "state": "restarted"}}],
     "a unit without become"),
    ([{"name": "h", "ansible.builtin.include_tasks": "lb_hook.yml"}], "includes lb_hook.yml without become"),
    ([{"name": "m", "ansible.builtin.import_role": {"name": "kvfleet.vllm.server", "tasks_from": "model"}}],
     "includes kvfleet.vllm.server:model without become"),
])
def test_the_check_flags_each_slip(tasks, wrong):
    assert [w for _f, _n, w in slips(tasks, "x.yml")] == [wrong]


@pytest.mark.parametrize("tasks", [
    [{"name": "b", "become": True, "block": [
        {"name": "lb", "ansible.builtin.command": {"argv": ["x"]}, "delegate_to": "lb", "become": False},
        {"name": "s", "ansible.builtin.include_role": {"name": "kvfleet.vllm.server", "tasks_from": "rollback"}}]}],
    [{"name": "h", "ansible.builtin.include_tasks": {"file": "lb_hook.yml", "apply": {"become": True}}}],
    [{"name": "n", "ansible.builtin.set_fact": {"x": 1}, "delegate_to": "localhost"}],
    [{"name": "r", "ansible.builtin.include_tasks": "record.yml"}],
    [{"name": "b", "ansible.builtin.import_role": {"name": "kvfleet.vllm.rollout", "tasks_from": "batch"}}],
])
def test_the_check_passes_what_is_right(tasks):
    assert slips(tasks, "x.yml") == []


def test_a_play_that_becomes_root_for_everything_is_flagged(tmp_path):
    path = tmp_path / "p.yml"
    path.write_text(yaml.safe_dump([{"name": "p", "hosts": "all", "become": True, "tasks": []},
                                    {"name": "q", "hosts": "all", "roles": ["kvfleet.vllm.router"]}]))
    assert [w for _f, _n, w in playbook_slips(str(path))] == ["become for the whole play", "a role without become"]


SECRET = re.compile(r"(api_key|token|secret|password|passwd|credential)", re.I)


def secret_environments(tasks):
    """(task name, variable) of each task that hands a secret-looking value to its environment:
    with become, Ansible writes a task's environment on sudo's command line, which sudo logs to
    the journal (the fleet scenario's secrets section caught its own search doing so)."""
    bad = []
    for task in tasks:
        env = task.get("environment")
        if isinstance(env, dict):
            bad += [(task.get("name"), k) for k, v in env.items() if SECRET.search("%s %s" % (k, v))]
        elif isinstance(env, str) and SECRET.search(env):
            bad.append((task.get("name"), env))
    return bad


def test_no_task_hands_a_secret_to_its_environment():
    tasks = []
    for path in _yaml_files():
        with open(path, encoding="utf-8") as f:
            tasks += list(_tasks(yaml.safe_load(f)))
    assert secret_environments(tasks) == []


def test_the_environment_check_flags_a_secret():
    assert secret_environments([{"name": "t", "environment": {"HF_TOKEN": "{{ vllm_server_hf_token }}"}},
                                {"name": "u", "environment": {"PIP_DISABLE_PIP_VERSION_CHECK": "1"}},
                                {"name": "v", "environment": "{{ lb_credentials }}"}]) == [
        ("t", "HF_TOKEN"), ("v", "{{ lb_credentials }}")]
