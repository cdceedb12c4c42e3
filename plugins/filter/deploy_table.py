# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: deploy_table
short_description: (internal) The summary table of the kvfleet.vllm.deploy playbook, as text lines
version_added: 0.2.0
description:
  - One header line, one line per host (host, batch, version and config hash before and after,
    outcome, seconds, what failed) and a line of totals per outcome; then, when any host is left
    out of the load balancer (C(drained)), a line naming those hosts.
  - Outcomes are C(upgraded), C(restarted) (same settings, but its process predated them),
    C(resumed) (an earlier run left the host drained; verified and put back), C(unchanged),
    C(checked) (a check-mode run), C(rolled back), C(rollback failed), C(first install failed)
    (nothing to roll back to; files kept, left drained), C(failed before change) (a drain hook
    or the backup failed), C(unhealthy) (a converged host, left alone, whose health read
    failed), C(interrupted), C(unreachable) and C(refused) (from the
    P(kvfleet.vllm.deploy_report#callback) callback, for a run that ended early) and
    C(untouched) (never reached).
options:
  _input:
    description:
      - One dict per host with C(host), C(batch), C(before), C(after), C(outcome), C(seconds),
        C(detail), C(drained).
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Print the summary
  ansible.builtin.debug:
    msg: "{{ rows | kvfleet.vllm.deploy_table }}"
"""

RETURN = r"""
_value:
  description: Text lines, the header first and the totals last.
  type: list
  elements: str
"""

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import deploy_lines


class FilterModule(object):
    def filters(self):
        return {"deploy_table": deploy_lines}
