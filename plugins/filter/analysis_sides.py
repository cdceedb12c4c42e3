# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: analysis_sides
short_description: (internal) The canary and the baseline of a host's analysis in kvfleet.vllm.deploy
version_added: 0.4.0
description:
  - From the deploy's host rows (each host's C(_rollout_row)), the servers that
    M(kvfleet.vllm.canary_analysis) judges for one changed host (the canary, what it runs now)
    and the servers it is judged against (the baseline, every other serving host that has not
    changed yet, with what it ran before; for the last batch, the hosts already verified).
  - Each instance is reached as a router reaches it (at its host's O(addresses) entry, when it is
    bound to every address or to that address), with its record's scheme.
  - Fails, naming the host and the instance, when O(analysis_from) cannot reach an instance (bound
    to loopback on another host), and for a canary without an instance it can sample.
  - The returned targets hold the API keys; pass them to the module only (its O(canary[].api_key)
    is never logged), never to a fact or a debug task.
options:
  _input:
    description: The deploy's host rows (C(host), C(outcome), C(batch), C(before), C(after), C(left_drained)).
    type: list
    elements: dict
    required: true
  host:
    description: The changed host (the canary). Without it, O(planned) is checked instead.
    type: str
  records:
    description: The canary's instance records now (the server role's C(server_result.records)).
    type: list
    elements: dict
  planned:
    description:
      - Without O(host), before anything changes, in one pass over the play; the instances each host
        to be analysed will run, by host name (the server role's instance model, C(server_result.instances),
        or records). The filter fails naming every instance of these hosts, and of the serving hosts
        that may be a baseline, that O(analysis_from) cannot reach; otherwise it returns
        C(checked), the hosts checked.
    type: dict
  api_keys:
    description: Each host's API key (C(vllm_server_api_key)) by host name; empty for none.
    type: dict
    default: {}
  analysis_from:
    description: The host the module runs on (C(vllm_deploy_analysis_from)).
    type: str
    default: localhost
  addresses:
    description: Where each host's instances bound to every address are reached, by host name
      (C(vllm_router_backend_address), else C(ansible_host), as the router hook reaches them); the
      host's name where missing. An instance whose record binds another address is refused (a
      record cannot aim the analysis elsewhere).
    type: dict
    default: {}
  batch_records:
    description: The instance records now of every host analysed in this batch, by host name; their
      targets are returned as C(batch_canary) (the analysis load sends to them and the baseline).
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Judge the host against the hosts that have not changed yet
  kvfleet.vllm.canary_analysis:
    canary: "{{ _sides.canary }}"
    baseline: "{{ _sides.baseline }}"
  delegate_to: localhost
  vars:
    _sides: >-
      {{ ansible_play_hosts_all | map('extract', hostvars, '_rollout_row') | list
         | kvfleet.vllm.analysis_sides(host=inventory_hostname, records=server_result.records) }}
"""

RETURN = r"""
_value:
  description: C(canary), C(batch_canary) and C(baseline) (targets of M(kvfleet.vllm.canary_analysis)), C(baseline_hosts),
    and C(baseline_kind) (C(unchanged), C(verified) or C(none)).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._rollout import RolloutError, check_reach, sides


def _analysis_sides(rows, host=None, records=None, api_keys=None, analysis_from="localhost", batch_records=None,
                    addresses=None, planned=None):
    api_keys, addresses = api_keys or {}, addresses or {}
    hosts = []
    for row in rows or []:
        if not isinstance(row, dict):
            continue
        h = dict(row, api_key=api_keys.get(row.get("host")) or "", address=addresses.get(row.get("host")) or "")
        if host is not None and h.get("host") == host:
            h["after"] = {"instances": list(records or [])}
        hosts.append(h)
    try:
        if host is None:
            # the instance model's entries carry their record ('record'); a record is taken as is
            check_reach(hosts, dict((name, [i.get("record", i) for i in insts or [] if isinstance(i, dict)])
                                    for name, insts in (planned or {}).items()), analysis_from=analysis_from)
            return {"checked": sorted(planned or {})}
        return sides(hosts, host, analysis_from=analysis_from, batch_records=batch_records)
    except RolloutError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {"analysis_sides": _analysis_sides}
