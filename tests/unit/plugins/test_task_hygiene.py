"""Static checks of the roles' and playbooks' tasks where a slip leaks a secret or lets root
write through a link:

- a loop over the instances shows only each instance's name (loop_control.label), or nothing
  (no_log): an instance carries its argv (its environment's values are kept apart, and -v prints
  a loop's whole item whatever the label: test_instance_environment_secrets.py);
- files that hold the drain hooks (which may carry load-balancer credentials) are 0600 and never
  diffed;
- the store's folders are made without following a link, after a check that none is one.
"""

from __future__ import annotations

import os

import pytest
import yaml

from ansible_collections.kvfleet.vllm.tests.unit.plugins.test_playbook_includes import ROOT, _tasks, _yaml_files

ROLES = os.path.join(ROOT, "roles")


def _load(path):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def _all_tasks():
    for path in _yaml_files():
        for task in _tasks(_load(path)):
            yield os.path.relpath(path, ROOT), task


def unlabelled_instance_loops(tasks):
    """(file, task name) of each task looping over _server_instances without a label that
    names the instance only, and without no_log."""
    bad = []
    for where, task in tasks:
        loop = task.get("loop", task.get("with_items"))
        if not (isinstance(loop, str) and "_server_instances" in loop):
            continue
        label = (task.get("loop_control") or {}).get("label")
        if task.get("no_log") is True:
            continue
        if label is None or label.replace(" ", "") != "{{item.name}}":
            bad.append((where, task.get("name")))
    return bad


def test_every_loop_over_the_instances_has_a_name_label_or_no_log():
    assert unlabelled_instance_loops(_all_tasks()) == []


@pytest.mark.parametrize("task", [
    {"name": "x", "loop": "{{ _server_instances }}", "ansible.builtin.debug": {"msg": "{{ item.name }}"}},
    {"name": "x", "loop": "{{ _server_instances | list }}", "loop_control": {"label": "{{ item }}"}},
    {"name": "x", "loop": "{{ _server_instances }}", "no_log": "{{ false }}"},
])
def test_the_check_flags_a_loop_that_would_print_the_instance(task):
    assert unlabelled_instance_loops([("t.yml", task)]) == [("t.yml", "x")]


def _task(path, name):
    for task in _tasks(_load(os.path.join(ROOT, path))):
        if task.get("name") == name:
            return task
    raise AssertionError("no task %r in %s" % (name, path))


@pytest.mark.parametrize("path, name, hooks", [
    ("roles/monitor/tasks/main.yml", "Write the watchdog's configuration",
     ("vllm_monitor_watchdog_pre_commands", "vllm_monitor_watchdog_post_commands")),
    ("roles/scheduled_restart/tasks/main.yml", "Write the guard's configuration", ()),
])
def test_files_with_drain_hooks_are_private_and_never_diffed(path, name, hooks):
    task = _task(path, name)
    args = task["ansible.builtin.template"]
    assert (args["owner"], args["group"], str(args["mode"])) == ("root", "root", "0600")
    assert task.get("diff") is False
    for var in hooks:
        assert var in str(task.get("no_log")), "no_log must follow %s" % var


def test_the_store_folders_are_made_without_following_a_link():
    path = "roles/server/tasks/stage_copy.yml"
    block = _task(path, "Copy and promote {{ _artefact.label }}")["block"]
    names = [t["name"] for t in block]
    make = names.index("Create the model's folder in the store")
    check = names.index("Assert neither the store nor the model's folder is a symbolic link")
    read = names.index("Read whether the store or the model's folder is a symbolic link")
    assert read < check < make
    assert block[read]["ansible.builtin.stat"]["follow"] is False
    assert block[make]["ansible.builtin.file"]["follow"] is False
    assert block[read]["loop"] == block[make]["loop"]
    assert "islnk" in str(block[check]["ansible.builtin.assert"]["that"])


@pytest.mark.parametrize("results, holds", [
    ([{"item": "/s", "stat": {"exists": False}}, {"item": "/s/m", "stat": {"exists": False}}], True),
    ([{"item": "/s", "stat": {"exists": True, "islnk": False}}, {"item": "/s/m", "stat": {"exists": True, "islnk": False}}], True),
    ([{"item": "/s", "stat": {"exists": True, "islnk": False}}, {"item": "/s/m", "stat": {"exists": True, "islnk": True}}], False),
    ([{"item": "/s", "stat": {"exists": True, "islnk": True}}, {"item": "/s/m", "stat": {"exists": False}}], False),
])
def test_the_store_link_assert_refuses_a_link_and_names_it(results, holds):
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template
    block = _task("roles/server/tasks/stage_copy.yml", "Copy and promote {{ _artefact.label }}")["block"]
    check = [t for t in block if "ansible.builtin.assert" in t][0]["ansible.builtin.assert"]
    templar = Templar(loader=DataLoader(), variables={"_server_artefact_links": {"results": results},
                                                      "inventory_hostname": "gpu-01"})
    assert templar.evaluate_conditional(trust_as_template(check["that"])) is holds
    if not holds:
        link = [r["item"] for r in results if r["stat"].get("islnk")][0]
        assert templar.template(trust_as_template(check["fail_msg"])).startswith("gpu-01: %s is a symbolic link" % link)


def _monitor_history_assert_holds(history_file):
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template
    from ansible_collections.kvfleet.vllm.tests.unit.plugins.test_unit_security import _trusted
    task = _task("roles/monitor/tasks/main.yml", "Assert the history folder holds nothing of root's")
    variables = {}
    for role in ("hosttools", "monitor"):
        for part in ("defaults", "vars"):
            variables.update(_trusted(_load(os.path.join(ROLES, role, part, "main.yml")) or {}))
    variables.update(_trusted(task["vars"]))
    variables["vllm_monitor_history_file"] = history_file
    templar = Templar(loader=DataLoader(), variables=variables)
    return all(templar.evaluate_conditional(trust_as_template(c)) for c in task["ansible.builtin.assert"]["that"])


@pytest.mark.parametrize("history_file, holds", [
    ("/var/lib/kvfleet/monitor/history.jsonl", True),     # the default
    ("/srv/kvfleet-monitor/history.jsonl", True),
    ("/var/lib/kvfleet/history.jsonl", False),            # the state root itself
    ("/var/lib/history.jsonl", False),                    # a folder above it
    ("/history.jsonl", False),
    ("/var/lib/kvfleet/rollback/history.jsonl", False),   # the rollback copies (API keys)
    ("/var/lib/kvfleet/watchdog/history.jsonl", False),   # the watchdog's state
    ("/etc/kvfleet/history.jsonl", False),                # the configuration
    ("/var/lib/kvfleet/monitor/../history.jsonl", False),
    ("/var/lib/kvfleet//history.jsonl", False),
    # an allowlist, not a denylist: system and secret folders are refused however they are named
    ("/etc/vllm/history.jsonl", False),                   # environment files with API keys
    ("/opt/kvfleet/history.jsonl", False),
    ("/etc/systemd/system/history.jsonl", False),
    ("/root/history.jsonl", False),
    ("/var/lib/dpkg/history.jsonl", False),
    ("/var/log/kvfleet/history.jsonl", True),
])
def test_the_history_folder_handed_to_the_sampler_holds_nothing_of_roots(history_file, holds):
    assert _monitor_history_assert_holds(history_file) is holds


def test_the_recursive_chown_comes_after_the_history_folder_check():
    tasks = _load(os.path.join(ROLES, "monitor", "tasks", "main.yml"))
    names = [t.get("name") for t in tasks]
    chown = names.index("Hand the history files to the sampler's user")
    assert tasks[chown]["ansible.builtin.file"]["recurse"] is True
    assert names.index("Assert the history folder holds nothing of root's") < chown


def test_the_monitor_knows_the_server_roles_rollback_folder():
    monitor = _load(os.path.join(ROLES, "monitor", "vars", "main.yml"))
    server = _load(os.path.join(ROLES, "server", "vars", "main.yml"))
    assert monitor["__monitor_rollback_dir"] == server["__server_rollback_dir"]
    assert server["__server_rollback_dir"].startswith(monitor["__monitor_state_root"] + "/")
    assert monitor["__monitor_watchdog_state"].startswith(monitor["__monitor_state_root"] + "/")


def test_the_textfile_folder_is_group_writable_only_with_the_sticky_bit():
    task = _task("roles/monitor/tasks/main.yml", "Create folders")
    for item in task["loop"]:
        mode = int(str(item["mode"]), 8)
        if mode & 0o020 or mode & 0o002:
            assert mode & 0o1000, "%s is writable by others than its owner without the sticky bit" % item["path"]
