"""The server role's plan entry point compares the files the role writes by rendering them the
way tasks/configure.yml writes them, in check mode: the two must not drift apart, or a changed
file would read as converged (and the host be left alone)."""

from __future__ import annotations

import os

import yaml

TASKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                     "roles", "server", "tasks")
MODULES = ("ansible.builtin.template", "ansible.builtin.copy")
# what writes differ in, by design: the plan only compares
WRITE_ONLY = ("validate",)


def _writes(name):
    with open(os.path.join(TASKS, name), encoding="utf-8") as f:
        tasks = yaml.safe_load(f)
    out = {}
    for task in tasks:
        for module in MODULES:
            args = task.get(module)
            if isinstance(args, dict) and "src" in args:
                key = (module, args["src"])
                assert key not in out, key
                out[key] = (dict((k, v) for k, v in args.items() if k not in WRITE_ONLY), task)
    return out


def test_the_plan_compares_every_file_configure_writes_with_the_same_arguments():
    plan, configure = _writes("plan.yml"), _writes("configure.yml")
    assert set(plan) == set(configure)
    for key, (args, task) in plan.items():
        assert args == configure[key][0], key
        # the plan must never write nor show a secret
        assert task.get("check_mode") is True and task.get("diff") is False, key
        assert task.get("loop") is not None and "notify" not in task, key
