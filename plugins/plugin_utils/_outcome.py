# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A host's outcome in kvfleet.vllm.deploy, decided in one place.

The deploy's YAML says what happened to a host (an event) and hands over the facts it has; this
module says what the host's report entry becomes: its `outcome`, and for a failure its
`failed_stage` and `detail`. The events, in the order a host can meet them:

- `converged`: the plan found nothing to change and each instance answered `/health`;
- `unhealthy`: a converged host whose `/health` read failed (nothing was changed);
- `kept`: a changed (or resumed) host verified, put back and kept;
- `failed`: a step of the host's change failed (the batch's rescue), at `stage`;
- `group`: another member of the host's serving group failed, and this one goes back with it;
- `rollback_failed`: putting the host back failed too;
- `restarted`: kvfleet.vllm.rolling_restart restarted the host's instances.

Pure functions over plain data; plugins/filter/deploy_outcome.py reads the play's facts into them,
plugin_utils/_report.py lists every outcome the report knows.
"""

from __future__ import annotations

EVENTS = ("converged", "unhealthy", "kept", "failed", "group", "rollback_failed", "restarted")
# What a deploy did to a host, as the report shows it (plugin_utils/_report.py); 'checked': a
# --check run (the role's changed tasks say what would change); 'restarted': same settings, a
# process older than its files restarted; 'resumed': a host an earlier run left drained, verified
# and put back; 'untouched' hosts were never reached (a batch before them failed); 'interrupted'
# and 'unreachable' come from the deploy_report callback when a run ends before its own summary.
OUTCOMES = ("upgraded", "restarted", "resumed", "unchanged", "checked", "rolled back",
            "rollback failed", "first install failed", "failed before change", "unhealthy", "interrupted",
            "unreachable", "refused", "untouched")
# a host that serves what the run left: its "after" is what runs
SERVING = ("upgraded", "restarted", "resumed", "unchanged")
# a host that went well; any other outcome stops the run after its batch (deploy.yml's
# _rollout_ok, which a unit test keeps equal to this)
OK = SERVING + ("checked",)


class OutcomeError(ValueError):
    """An event or a fact this module cannot decide from; the message names it."""


def _first_install(deploy):
    """The host had no deployment record before this run: nothing to roll back to."""
    before = deploy.get("before") or {}
    return not (before.get("version") or "")


def _config(record):
    record = record or {}
    return [record.get("version") or "", record.get("config") or ""]


def _failure(deploy, stage):
    """A failed host's outcome: before its change nothing needs undoing; a first install has
    nothing to go back to; anything else is rolled back."""
    if stage == "drain":
        return "failed before change"
    return "first install failed" if _first_install(deploy) else "rolled back"


def failed_members(members):
    """The entries of a serving group's members (in the group's order) that failed themselves:
    neither untouched nor gone well."""
    return [m for m in members if isinstance(m, dict) and m.get("outcome") not in OK + ("untouched",)]


def outcome(deploy, event, now=None, restarted=None, check_mode=False, stage=None, why="",
            members=None, group=None):
    """The host's report entry `deploy` (its `before`, `left_drained`, ...) updated for `event`.

    now: what the host runs now (its record's `current`), for `converged`, `kept` and `restarted`;
    restarted: the instances the change restarted (`kept`: same settings, restarted);
    check_mode: a --check run (`kept`: 'checked');
    stage: the step that failed (`failed`); why: the failed task and its message (`failed`,
    `unhealthy`, `rollback_failed`);
    members: the report entries of the host's serving group, this one's too, group: its name
    (`group`; nothing changes when no member failed).
    """
    if not isinstance(deploy, dict):
        raise OutcomeError("the host's deploy entry must be a dict, got %s" % type(deploy).__name__)
    if event not in EVENTS:
        raise OutcomeError("event must be one of %s, got %r" % (", ".join(EVENTS), event))
    out = dict(deploy)
    if event == "converged":
        out.update(after=now or {}, outcome="unchanged")
    elif event == "restarted":
        out.update(after=now or {}, outcome="restarted")
    elif event == "unhealthy":
        out.update(outcome="unhealthy", failed_stage="health", detail=why)
    elif event == "kept":
        if check_mode:
            result = "checked"
        elif _config(now) != _config(deploy.get("before")):
            result = "upgraded"
        elif restarted:
            result = "restarted"
        elif deploy.get("left_drained") is not None:
            result = "resumed"
        else:
            result = "unchanged"
        out.update(after=now or {}, outcome=result)
    elif event == "failed":
        if not stage:
            raise OutcomeError("a failed host needs the stage it failed in")
        out.update(outcome=_failure(deploy, stage), failed_stage=stage, detail=why)
    elif event == "group":
        failed = failed_members(members or [])
        if not failed or deploy.get("outcome") not in OK + ("untouched",):
            return out   # nothing failed, or it failed itself: its own outcome says why
        out.update(outcome="first install failed" if _first_install(deploy) else "rolled back",
                   failed_stage="group",
                   detail="serving group %s goes back as one unit: %s" % (group, ", ".join(
                       "%s failed in %s" % (m.get("host"), m.get("failed_stage")) for m in failed)))
    else:   # rollback_failed
        out.update(outcome="rollback failed",
                   detail="%s | rollback: %s" % (deploy.get("detail") or "", why))
    if out["outcome"] not in OUTCOMES:   # the report could not show it
        raise OutcomeError("outcome %r is not one the report knows" % out["outcome"])
    return out
