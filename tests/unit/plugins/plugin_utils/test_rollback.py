"""The server role's rollback plan (plugin_utils/_rollback.py): what restarts, and a serving
group's stop and start order."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.kvfleet.vllm.plugins.filter.rollback_plan import FilterModule
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._rollback import RollbackError, plan

MAIN, SIDE = "vllm-main.service", "vllm-side.service"
HEAD, WORKER = "vllm-g0.service", "vllm-g1.service"
GROUP = {"instances": [{"name": "g0", "unit": HEAD, "group": {"role": "head"}}, {"name": "main", "unit": MAIN}],
         "workers": [{"name": "g1", "unit": WORKER, "group": {"role": "worker"}}]}
NOTHING = {"added": [], "restart": [], "stop_heads": [], "stop_workers": [], "start_heads": [], "start_workers": []}


def test_an_untouched_running_host_restarts_nothing():
    assert plan([MAIN, SIDE], now_units=[MAIN, SIDE], running=[MAIN, SIDE]) == NOTHING


def test_what_changed_back_restarts_and_nothing_else():
    # the unit of one, the environment file of the other (named after its instance)
    out = plan([MAIN, SIDE], now_units=[MAIN, SIDE], changed=["side.env"], running=[MAIN, SIDE])
    assert out["restart"] == [SIDE]
    out = plan([MAIN, SIDE], now_units=[MAIN, SIDE], changed=[MAIN, "side.keys.yaml"], running=[MAIN, SIDE])
    assert out["restart"] == [MAIN, SIDE]


def test_an_instance_that_is_not_running_restarts():
    assert plan([MAIN, SIDE], now_units=[MAIN, SIDE], running=[MAIN])["restart"] == [SIDE]


def test_units_the_failed_deployment_added_go():
    out = plan([MAIN], now_units=[MAIN, SIDE, SIDE], running=[MAIN, SIDE])
    assert out["added"] == [SIDE] and out["restart"] == []


def test_a_group_restarts_as_one_unit_when_the_deploy_asks():
    out = plan([HEAD, WORKER, MAIN], now_units=[HEAD, WORKER, MAIN], running=[HEAD, WORKER, MAIN],
               current=GROUP, group_restart=True)
    assert out == dict(NOTHING, stop_heads=[HEAD], stop_workers=[WORKER], start_workers=[WORKER], start_heads=[HEAD])


def test_a_group_unit_changed_back_restarts_the_whole_group_and_no_group_unit_alone():
    out = plan([HEAD, WORKER, MAIN], now_units=[HEAD, WORKER, MAIN], changed=["g1.env"],
               running=[HEAD, WORKER, MAIN], current=GROUP)
    assert (out["stop_heads"], out["stop_workers"], out["start_workers"], out["start_heads"]) == ([HEAD], [WORKER], [WORKER], [HEAD])
    assert out["restart"] == []


def test_a_group_nobody_touched_keeps_serving():
    out = plan([HEAD, WORKER, MAIN], now_units=[HEAD, WORKER, MAIN], changed=["main.env"],
               running=[HEAD, WORKER, MAIN], current=GROUP)
    assert out == dict(NOTHING, restart=[MAIN])


def test_the_failed_deployments_own_group_units_stop_in_the_groups_order():
    # the failed deployment made this host a group's head (vllm-new) and a headless worker; the
    # record it goes back to has no group: they stop, heads first, and only the kept one restarts
    failed = [{"unit": "vllm-new.service", "headless": False, "record": {"group": {"role": "head"}}},
              {"unit": "vllm-nw.service", "headless": True, "record": {"group": {"role": "worker"}}},
              {"unit": MAIN, "headless": False, "record": {}}]
    out = plan([MAIN], now_units=[MAIN, "vllm-new.service", "vllm-nw.service"], changed=[MAIN],
               running=[MAIN, "vllm-new.service"], current={"instances": [{"unit": MAIN}]}, instances=failed)
    assert out["added"] == ["vllm-new.service", "vllm-nw.service"]
    assert (out["stop_heads"], out["stop_workers"]) == (["vllm-new.service"], ["vllm-nw.service"])
    assert (out["start_heads"], out["start_workers"], out["restart"]) == ([], [], [MAIN])


def test_a_first_deployment_rolled_back_has_no_record():
    assert plan([], now_units=[MAIN], running=[MAIN], current={}) == dict(NOTHING, added=[MAIN])


def test_bad_input_names_the_field():
    with pytest.raises(RollbackError, match="changed must be a list"):
        plan([MAIN], changed="main.env")
    with pytest.raises(AnsibleFilterError, match="backup_units must be a list"):
        FilterModule().filters()["rollback_plan"](None)
