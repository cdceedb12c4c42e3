"""A role included with a templated tasks_from runs the first host's entry point on every host.

ansible-core tells one include from another by its arguments without tasks_from (it pops the
*_from arguments first: ansible/playbook/included_file.py:206, ansible-core 2.19.14), so an
include_role whose tasks_from differs from host to host is run once, for all of them, with the
first host's. The deploy's change step did that (reconfigure or main, per host's plan) and a host
that needed the install steps went without them. Each entry point gets a task of its own."""

from __future__ import annotations

import os

import pytest
import yaml

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
FROM_ARGS = ("tasks_from", "vars_from", "defaults_from", "handlers_from")
INCLUDES = ("include_role", "ansible.builtin.include_role")


def _yaml_files():
    for top in ("playbooks", "roles"):
        for folder, _dirs, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if name.endswith((".yml", ".yaml")):
                    yield os.path.join(folder, name)


def _tasks(node):
    """Every mapping in a YAML document that could be a task (blocks, plays and lists walked)."""
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        yield node
        for value in node.values():
            if isinstance(value, (list, dict)):
                yield from _tasks(value)


def templated_from(task):
    """The *_from arguments of an include_role task that vary per host (templated, not looped)."""
    for key in INCLUDES:
        args = task.get(key)
        if isinstance(args, dict) and "loop" not in task and not any(k.startswith("with_") for k in task):
            return [a for a in FROM_ARGS if "{{" in str(args.get(a, ""))]
    return []


def test_no_include_role_takes_its_entry_point_from_a_template():
    found = []
    for path in _yaml_files():
        with open(path, encoding="utf-8") as f:
            try:
                doc = yaml.safe_load(f)
            except yaml.YAMLError:
                continue   # templates and other non-task YAML
        for task in _tasks(doc):
            bad = templated_from(task)
            if bad:
                found.append("%s: %s %s" % (os.path.relpath(path, ROOT), task.get("name"), bad))
    assert found == []


@pytest.mark.parametrize("task, bad", [
    ({"ansible.builtin.include_role": {"name": "r", "tasks_from": "{{ 'a' if x else 'b' }}"}}, ["tasks_from"]),
    ({"include_role": {"name": "r", "tasks_from": "a"}}, []),
    ({"ansible.builtin.include_role": {"name": "r", "tasks_from": "{{ item }}"}, "loop": ["a", "b"]}, []),
])
def test_the_check_tells_a_templated_entry_point(task, bad):
    assert templated_from(task) == bad
