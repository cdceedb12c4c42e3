"""The one order every restart uses (module_utils/_group_order.py), and the YAML that runs it:
the server role's handlers, its rollback and kvfleet.vllm.rolling_restart each run the group
steps as tasks of their own in that order."""

from __future__ import annotations

import os
import re

import pytest
import yaml

from ansible_collections.kvfleet.vllm.plugins.filter.restart_order import _restart_order
from ansible_collections.kvfleet.vllm.plugins.module_utils._group_order import (
    GROUP_STEPS, restart_order, systemctl_steps)
from ansible_collections.kvfleet.vllm.tests.unit.plugins.test_playbook_includes import ROOT

KEYS = [key for key, _verb in GROUP_STEPS]


def test_heads_stop_first_and_start_last_and_the_rest_restart_on_their_own():
    # the instance model's items: a group member's group is in its record
    units = [{"unit": "vllm-a.service", "record": {}},
             {"unit": "vllm-g0.service", "record": {"group": {"key": "h:1"}}},
             {"unit": "vllm-g1.service", "headless": True, "record": {"group": {"key": "h:1"}}},
             {"unit": "vllm-b.service"}]
    order = restart_order(units)
    assert order == {"restart": ["vllm-a.service", "vllm-b.service"],
                     "stop_heads": ["vllm-g0.service"], "stop_workers": ["vllm-g1.service"],
                     "start_workers": ["vllm-g1.service"], "start_heads": ["vllm-g0.service"]}
    assert systemctl_steps(order) == [
        ("restart", "vllm-a.service"), ("restart", "vllm-b.service"), ("stop", "vllm-g0.service"),
        ("stop", "vllm-g1.service"), ("start", "vllm-g1.service"), ("start", "vllm-g0.service")]
    assert KEYS == ["stop_heads", "stop_workers", "start_workers", "start_heads"]


def test_a_records_workers_and_a_record_written_before_units_were_named():
    # a deployment record: heads carry 'group', its workers are listed apart; before 0.3.0 a
    # record named the instance only
    order = restart_order([{"name": "main"}, {"name": "g0", "unit": "vllm-g0.service", "group": {"key": "h:1"}}],
                          workers=[{"name": "ray", "unit": "vllm-ray.service", "group": {"key": "h:1"}}])
    assert order["restart"] == ["vllm-main.service"]
    assert (order["stop_heads"], order["stop_workers"]) == (["vllm-g0.service"], ["vllm-ray.service"])
    # a worker whose head runs elsewhere is still a worker: it stops after the heads' step
    alone = restart_order([], workers=[{"unit": "vllm-w.service"}, {"unit": "vllm-w.service"}])
    assert alone["start_workers"] == ["vllm-w.service"] and alone["restart"] == []


@pytest.mark.parametrize("bad", [["vllm-a.service"], [{"port": 8000}], [None]])
def test_bad_input_is_refused_naming_what_is_missing(bad):
    with pytest.raises(ValueError, match="'unit'"):
        restart_order(bad)
    with pytest.raises(Exception, match="restart_order: each unit must be a dict"):
        _restart_order(bad)


def _loops(path):
    """The group step each task of a YAML task list loops over, in the file's order."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = f.read()
    plays = yaml.safe_load(text)
    tasks = [t for p in plays for t in (p.get("tasks") or [])] if plays and "hosts" in plays[0] else plays
    found = []
    for task in tasks:
        m = re.search(r"\.(%s)\b" % "|".join(KEYS), str(task.get("loop", "")))
        if m:
            found.append(m.group(1))
    return found


@pytest.mark.parametrize("path", ["roles/server/handlers/main.yml", "roles/rollout/tasks/restart_batch.yml"])
def test_the_handlers_and_rolling_restart_run_each_group_step_once_in_the_one_order(path):
    assert _loops(path) == KEYS


def test_the_rollback_runs_the_group_steps_in_the_one_order():
    # the rollback also starts restored units before it starts the groups (one loop names three
    # steps): the group steps it loops over on their own come in the one order
    steps = _loops("roles/server/tasks/rollback.yml")
    assert [k for k in dict.fromkeys(steps) if k in KEYS] == KEYS


def test_no_yaml_orders_a_group_by_hand():
    # the order came from sorting the instance model by 'headless' before; nothing may again
    from ansible_collections.kvfleet.vllm.tests.unit.plugins.test_playbook_includes import _yaml_files
    found = []
    for path in _yaml_files():
        with open(path, encoding="utf-8") as f:
            if re.search(r"sort\(attribute='headless'", f.read()):
                found.append(os.path.relpath(path, ROOT))
    assert found == []
