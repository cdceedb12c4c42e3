"""A host's outcome in kvfleet.vllm.deploy (plugin_utils/_outcome.py), decided once for every
step that ends a host, and the deploy playbook's list of good outcomes kept equal to it."""

from __future__ import annotations

import os

import pytest
import yaml

from ansible.errors import AnsibleFilterError
from ansible_collections.kvfleet.vllm.plugins.filter.deploy_outcome import FilterModule
from ansible_collections.kvfleet.vllm.plugins.plugin_utils import _outcome
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._outcome import OK, OutcomeError, outcome

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", ".."))
A = {"version": "0.32.0", "config": "aaaa"}
B = {"version": "0.32.0", "config": "bbbb"}


def entry(before=None, left_drained=None, result="untouched", host="h1"):
    return {"host": host, "before": dict(A) if before is None else before, "outcome": result, "batch": 1,
            "left_drained": left_drained}


@pytest.mark.parametrize("now, restarted, drained, check, expected", [
    (B, [], None, False, "upgraded"),                         # settings changed
    ({"version": "0.33.0", "config": "aaaa"}, [], None, False, "upgraded"),   # the version alone
    (A, ["main"], None, False, "restarted"),                  # same settings, a process restarted
    (A, [], {"by": "deploy"}, False, "resumed"),              # left drained, verified, put back
    (A, ["main"], {"by": "deploy"}, False, "restarted"),      # a restart says more than the resume
    (A, [], None, False, "unchanged"),
    (B, ["main"], None, True, "checked"),                     # --check says what would change, never more
])
def test_kept(now, restarted, drained, check, expected):
    out = outcome(entry(left_drained=drained), "kept", now=now, restarted=restarted, check_mode=check)
    assert out["outcome"] == expected
    assert out["after"] == now


def test_kept_first_install_is_an_upgrade():
    assert outcome(entry(before={}), "kept", now=B)["outcome"] == "upgraded"


def test_restarted_by_rolling_restart():
    out = outcome(entry(), "restarted", now=A)
    assert (out["outcome"], out["after"]) == ("restarted", A)


def test_converged_and_unhealthy():
    out = outcome(entry(), "converged", now=A)
    assert (out["outcome"], out["after"]) == ("unchanged", A)
    out = outcome(entry(), "unhealthy", why="Read /health: refused")
    assert (out["outcome"], out["failed_stage"], out["detail"]) == ("unhealthy", "health", "Read /health: refused")
    assert "after" not in out


@pytest.mark.parametrize("before, stage, expected", [
    (A, "drain", "failed before change"),       # nothing changed yet
    ({}, "drain", "failed before change"),
    (A, "restart", "rolled back"),
    (A, "analyse", "rolled back"),
    ({}, "restart", "first install failed"),    # nothing to go back to
    ({"version": None}, "verify", "first install failed"),
])
def test_failed(before, stage, expected):
    out = outcome(entry(before=before), "failed", stage=stage, why="Restart: engine died")
    assert (out["outcome"], out["failed_stage"], out["detail"]) == (expected, stage, "Restart: engine died")


def test_failed_needs_its_stage():
    with pytest.raises(OutcomeError, match="stage"):
        outcome(entry(), "failed")


def test_a_group_goes_back_as_one_unit():
    head = dict(entry(host="n2"), outcome="rolled back", failed_stage="restart")
    worker = dict(entry(host="n3"), outcome="upgraded")
    out = outcome(worker, "group", members=[head, worker], group="pair")
    assert (out["outcome"], out["failed_stage"]) == ("rolled back", "group")
    assert out["detail"] == "serving group pair goes back as one unit: n2 failed in restart"
    # a member that never ran its change (untouched) goes back too; a first install is left as such
    fresh = dict(entry(host="n4", before={}), outcome="untouched")
    assert outcome(fresh, "group", members=[head, fresh], group="pair")["outcome"] == "first install failed"


def test_a_group_names_every_failed_member_in_its_order():
    a = dict(entry(host="n9"), outcome="rolled back", failed_stage="verify")
    b = dict(entry(host="n1"), outcome="rollback failed", failed_stage="restart")
    ok = dict(entry(host="n5"), outcome="unchanged")
    assert outcome(ok, "group", members=[a, ok, b], group="g")["detail"].endswith("n9 failed in verify, n1 failed in restart")


def test_a_group_member_that_failed_itself_keeps_its_own_outcome():
    head = dict(entry(host="n2"), outcome="rolled back", failed_stage="restart", detail="engine died")
    assert outcome(head, "group", members=[head], group="pair") == head


def test_a_group_where_nothing_failed_changes_nothing():
    a, b = dict(entry(host="n2"), outcome="upgraded"), dict(entry(host="n3"), outcome="checked")
    assert outcome(a, "group", members=[a, b], group="pair") == a


def test_rollback_failed_keeps_the_first_failure():
    failed = outcome(entry(), "failed", stage="restart", why="Restart: engine died")
    out = outcome(failed, "rollback_failed", why="Rollback: unit missing")
    assert out["outcome"] == "rollback failed"
    assert out["detail"] == "Restart: engine died | rollback: Rollback: unit missing"


def test_bad_input_names_what_is_wrong():
    with pytest.raises(OutcomeError, match="event must be one of converged, unhealthy, kept"):
        outcome(entry(), "finished")
    with pytest.raises(OutcomeError, match="must be a dict"):
        outcome(None, "kept")


def test_the_input_is_not_changed():
    e = entry()
    outcome(e, "kept", now=B)
    assert e["outcome"] == "untouched" and "after" not in e


def test_every_outcome_it_gives_is_one_the_report_knows():
    assert set(OK) <= set(_outcome.OUTCOMES)
    assert {"rolled back", "rollback failed", "first install failed", "failed before change", "unhealthy"} <= set(_outcome.OUTCOMES)


def test_the_playbook_calls_the_same_outcomes_good():
    """The rollout role's _rollout_ok (which stops the run after a batch with any other) is OK."""
    with open(os.path.join(ROOT, "roles", "rollout", "vars", "main.yml")) as f:
        assert tuple(yaml.safe_load(f)["_rollout_ok"]) == OK


def test_the_filter_says_what_is_wrong():
    f = FilterModule().filters()["deploy_outcome"]
    assert f(entry(), "kept", now=B, check_mode=False)["outcome"] == "upgraded"
    with pytest.raises(AnsibleFilterError, match="event must be one of"):
        f(entry(), "done")


def test_no_playbook_decides_an_outcome_itself():
    """Every step that ends a host goes through the filter: no task file writes an outcome."""
    offenders = []
    for folder in ("playbooks", os.path.join("roles", "rollout", "tasks")):
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if not name.endswith(".yml"):
                continue
            with open(os.path.join(ROOT, folder, name)) as f:
                text = f.read()
            # a dict key written, or a conditional that picks an outcome (reading one is fine)
            for word in ("'outcome':", "outcome: upgraded", "'rolled back' if", "'first install failed' if",
                         "'upgraded' if", "'restarted' if", "'unchanged' if"):
                if word in text:
                    offenders.append("%s/%s: %s" % (folder, name, word))
    assert not offenders, offenders
