# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: analysis_outcome
short_description: (internal) What kvfleet.vllm.deploy does with a host's canary analysis
version_added: 0.4.0
description:
  - From a M(kvfleet.vllm.canary_analysis) result, what the deploy does with the changed host, that is the
    module's own RV(kvfleet.vllm.canary_analysis#module:decision) (kept or rolled back, and whether
    the run stops; an inconclusive host always stops it), else the same decision worked out with
    O(inconclusive); and what the deploy's report keeps of the result (no samples).
options:
  _input:
    description: The module's registered result.
    type: dict
    required: true
  inconclusive:
    description:
      - For a result without the module's decision. C(fail_canary) rolls back an inconclusive
        host of the first batch analysed (the canary) and keeps later ones; C(fail) always rolls
        back; C(pass) always keeps. The run stops after an inconclusive host whatever it says.
    type: str
    default: fail_canary
    choices: [fail_canary, fail, pass]
  canary_batch:
    description: This host's batch is the first one analysed.
    type: bool
    default: true
  seconds:
    description: Seconds the analysis took, for the report.
    type: float
  load:
    description: The M(kvfleet.vllm.analysis_load) result of the batch, when one ran; its failed
      requests to O(host) fail the host when their share is more than 1% above the other servers'.
    type: dict
  host:
    description: The analysed host (its targets in O(load)).
    type: str
  routers:
    description:
      - Where the deploy manages routers (C(vllm_deploy_routers)), what they counted for O(host)'s instances over
        the window. C(before) and C(after) are each router's C(/metrics) text at the window's start and end (in
        the same order), C(urls) the URLs the routers reach the host's instances at.
      - The host's share of failed attempts (vllm-router's C(vllm_router_cb_outcomes_total)) more than 0.01 above
        the other backends' median share, with at least 3 failed and a binomial p below 0.01 at that share, fails it
        (check C(router_errors)).
    type: dict
"""

EXAMPLES = r"""
- name: Decide
  ansible.builtin.set_fact:
    _outcome: "{{ _analysis | kvfleet.vllm.analysis_outcome(inconclusive='fail') }}"
"""

RETURN = r"""
_value:
  description: C(keep) (bool), C(stop) (bool; no later batch), C(judged) (bool), C(why) (one sentence) and C(analysis) (the report's digest of the result,
    C(verdict), C(reason), C(mode), C(checks), C(requests), C(causes), C(window_seconds),
    C(canary_hosts), C(baseline_hosts), C(seconds); the C(router_errors) check among its C(checks) when
    O(routers) counted attempts), and C(edge) (that check, or null).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._rollout import RolloutError, action, digest


def _analysis_outcome(result, inconclusive="fail_canary", canary_batch=True, seconds=None, load=None, host=None, routers=None):
    try:
        out = action(result, inconclusive=inconclusive, canary_batch=bool(canary_batch), load=load, host=host,
                     routers=routers)
    except RolloutError as exc:
        raise AnsibleFilterError(str(exc))
    out["analysis"] = digest(result, seconds=seconds)
    if out.get("edge"):
        out["analysis"]["checks"] = list(out["analysis"].get("checks") or []) + [out["edge"]]
    return out


class FilterModule(object):
    def filters(self):
        return {"analysis_outcome": _analysis_outcome}
