# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: deploy_report
type: notification
short_description: The kvfleet.vllm.deploy summary and report for a run that ends early
version_added: 0.4.0
description:
  - The C(kvfleet.vllm.deploy) playbook prints its summary and writes
    C(kvfleet-vllm-deploy.json) itself when it ends normally or after a failed batch. A run
    stopped by Ctrl-C (or another signal that Ansible turns into an interrupt), a canary batch whose
    host became unreachable, or a refusal in the checks ends before that. This callback
    follows each host's line of the summary and, when the run ends without the playbook's own
    report, prints the summary and writes the report (C(ended) says why), naming every host left
    out of the load balancer.
  - The hosts keep their own drain marker, so the next deploy finishes a host left drained even
    where this callback is not enabled or the controller itself was lost.
  - Does nothing for other playbooks.
requirements:
  - enabled in C(callbacks_enabled) (C(ANSIBLE_CALLBACKS_ENABLED=kvfleet.vllm.deploy_report))
"""

import atexit
import json
import os
from datetime import datetime, timezone

from ansible import context
from ansible.plugins.callback import CallbackBase

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import deploy_lines, end_rows


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "kvfleet.vllm.deploy_report"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._rows = {}          # host -> its line (the playbook's _rollout_row)
        self._stages = {}        # host -> the deploy step it started
        self._unreachable = {}
        self._failures = {}
        self._report_dir = None
        self._reported = False   # the playbook wrote its own report, or this callback did
        self._order = []         # the first play's hosts, in inventory order (the report's order)
        # Ctrl-C: ansible-playbook catches the interrupt and exits; no callback is called then
        atexit.register(self._at_exit)

    def v2_playbook_on_play_start(self, play):
        if self._order:
            return
        try:
            inventory = play.get_variable_manager()._inventory
            self._order = [h.get_name() for h in inventory.get_hosts(play.hosts)]
        except Exception:  # pylint: disable=broad-except
            self._order = []   # the report then lists hosts as their lines arrived

    # ansible-core 2.19 and later name them host, task and result (the underscored names are to go
    # in 2.23); 2.17 and 2.18 have only the underscored ones
    @staticmethod
    def _parts(result):
        if hasattr(result, "result"):
            return result.host, result.task, result.result
        return result._host, result._task, result._result

    def _host(self, result):
        return self._parts(result)[0].get_name()

    def v2_runner_on_ok(self, result):
        _host, task, res = self._parts(result)
        facts = res.get("ansible_facts") or {}
        if task.delegate_to and task.delegate_facts:
            return
        host = self._host(result)
        if isinstance(facts.get("_rollout_row"), dict):
            self._rows[host] = facts["_rollout_row"]
        if facts.get("_rollout_stage"):
            self._stages[host] = facts["_rollout_stage"]
        if facts.get("_rollout_report_dir"):
            self._report_dir = facts["_rollout_report_dir"]
        if facts.get("_rollout_reported"):
            self._reported = True

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if ignore_errors:
            return
        # a rescued failure is overwritten by the host's finished line; keep the first
        _host, task, res = self._parts(result)
        self._failures.setdefault(self._host(result), "%s: %s" % (task.get_name(), str(res.get("msg") or "")[:500]))

    def v2_runner_on_unreachable(self, result):
        _host, task, res = self._parts(result)
        self._unreachable[self._host(result)] = "unreachable at %s: %s" % (
            task.get_name(), str(res.get("msg") or "")[:500])

    def v2_playbook_on_stats(self, stats):
        self._finish(interrupted=False)

    def _at_exit(self):
        self._finish(interrupted=True)

    def _finish(self, interrupted):
        if self._reported or not self._rows:
            return
        self._reported = True
        rank = {h: i for i, h in enumerate(self._order)}
        hosts = sorted(self._rows, key=lambda h: rank.get(h, len(rank)))
        rows = end_rows([self._rows[h] for h in hosts], self._stages, self._unreachable,
                        self._failures, interrupted=interrupted)
        ended = "interrupted" if interrupted else "stopped early"
        self._display.banner("KVFLEET DEPLOY SUMMARY (the run was %s)" % ended)
        for line in deploy_lines(rows):
            self._display.display(line)
        folder = self._report_dir or os.path.join(os.getcwd(), "kvfleet-report")
        path = os.path.join(folder, "kvfleet-vllm-deploy.json")
        report = {"finished": datetime.now(timezone.utc).isoformat(),
                  "check_mode": bool(context.CLIARGS.get("check")), "ended": ended, "hosts": rows}
        try:
            os.makedirs(folder, exist_ok=True)
            with open(path + ".tmp", "w") as f:
                f.write(json.dumps(report, indent=4, sort_keys=True) + "\n")
            os.chmod(path + ".tmp", 0o644)
            os.replace(path + ".tmp", path)
            self._display.display("report: %s" % path)
        except OSError as e:
            self._display.warning("kvfleet.vllm.deploy_report could not write %s: %s" % (path, e))
