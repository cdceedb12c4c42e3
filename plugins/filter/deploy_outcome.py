# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: deploy_outcome
short_description: (internal) A host's outcome in kvfleet.vllm.deploy, from what happened to it
version_added: 0.4.0
description:
  - The host's report entry updated for an event of its deploy, in one place for every step that
    ends a host; its C(outcome), and for a failure its C(failed_stage) and C(detail).
  - C(converged) (nothing to change, every instance answered) gives C(unchanged); C(unhealthy)
    (a converged host whose health read failed) C(unhealthy).
  - C(kept) (a changed or resumed host verified and kept) gives C(checked) in check mode, else
    C(upgraded) when its version or settings differ from before the run, C(restarted) when only
    processes restarted, C(resumed) for a host an earlier run left drained, else C(unchanged).
  - C(failed) (a step of the change failed) gives C(failed before change) when the drain failed,
    C(first install failed) when the host had no deployment before, else C(rolled back).
  - C(group) (another member of the host's serving group failed) sends a member that did not
    fail back with it, naming the members that failed; C(rollback_failed) gives
    C(rollback failed), the rollback's failure added to the detail; C(restarted) (a host
    C(kvfleet.vllm.rolling_restart) restarted) C(restarted).
options:
  _input:
    description: The host's report entry (C(before), C(left_drained), C(outcome) so far, ...).
    type: dict
    required: true
  event:
    description: What happened to the host.
    type: str
    required: true
    choices: [converged, unhealthy, kept, failed, group, rollback_failed, restarted]
  now:
    description: What the host runs now (its deployment record's C(current)), for C(converged), C(kept) and C(restarted).
    type: dict
  restarted:
    description: The instances the change restarted (C(kept)).
    type: list
    elements: raw
  check_mode:
    description: The run is a C(--check) run (C(kept)).
    type: bool
    default: false
  stage:
    description: The step that failed (C(failed)), C(drain), C(change), C(restart), C(verify), ...
    type: str
  why:
    description: The failed task and its message (C(unhealthy), C(failed), C(rollback_failed)).
    type: str
    default: ""
  members:
    description: The report entries of the host's serving group, in the group's order (C(group)).
    type: list
    elements: dict
  group:
    description: The serving group's name (C(group)).
    type: str
"""

EXAMPLES = r"""
- name: Record the outcome of a kept host
  ansible.builtin.set_fact:
    _rollout_row: >-
      {{ _rollout_row | kvfleet.vllm.deploy_outcome('kept', now=rollout_record, check_mode=ansible_check_mode,
                                                    restarted=server_result.restart.restart | default([])) }}
"""

RETURN = r"""
_value:
  description: The report entry with C(outcome) set (and C(after), C(failed_stage), C(detail) where the event sets them).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._outcome import OutcomeError, outcome


def _deploy_outcome(deploy, event, now=None, restarted=None, check_mode=False, stage=None, why="",
                    members=None, group=None):
    try:
        return outcome(deploy, event, now=now, restarted=restarted, check_mode=bool(check_mode), stage=stage,
                       why=why or "", members=members, group=group)
    except OutcomeError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {"deploy_outcome": _deploy_outcome}
