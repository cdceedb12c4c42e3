# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where the collection's fixed things live on a managed host: written once.

The unit of each vLLM instance (vllm-NAME.service, in systemd's folder for local units), the
deployment record (a local fact file, read back as ansible_local.kvfleet_vllm_server), the drain
marker a host keeps while a deploy has it out of its load balancer, the router's record, and
the kvfleet-vllm command. The paths a user chooses (the venv's base folder, the state and
configuration folders) are the server role's settings, with their defaults in its
defaults/main.yml.

Read by the modules and filters (Python), by the roles and playbooks through the
kvfleet.vllm.layout lookup (each role's vars/main.yml names what it uses), and by the
host program, which has a copy of this file among its module_utils. The scripts the roles run
with ansible.builtin.script get what they need as arguments. A unit test fails on a copy of any
of these values elsewhere in plugins/, roles/ or playbooks/.
"""

from __future__ import annotations

import re

__all__ = ["LAYOUT", "unit_name", "unit_instance"]

UNIT_DIR = "/etc/systemd/system"
UNIT_PREFIX = "vllm-"
UNIT_SUFFIX = ".service"
FACTS_DIR = "/etc/ansible/facts.d"

LAYOUT = {
    # systemd's folder for the units the roles write
    "unit_dir": UNIT_DIR,
    # every vLLM unit of the collection's, as a shell or find pattern
    "unit_glob": UNIT_PREFIX + "*" + UNIT_SUFFIX,
    # what the host runs (tasks/record.yml of the server role writes it); world-readable
    "record": FACTS_DIR + "/kvfleet_vllm_server.fact",
    # present while a deploy has the host out of its load balancer: the next run finishes it
    "drain_marker": FACTS_DIR + "/kvfleet_vllm_drained.fact",
    # the router role's record: the admin API the deploy's hooks call
    "router_record": FACTS_DIR + "/kvfleet_vllm_router.fact",
    # the host program
    "command": "/usr/local/bin/kvfleet-vllm",
    # what the last verified deploy left on the host (module_utils/_converged.py); root only
    "converged_state": "/var/lib/kvfleet/converged.json",
    # root's own readings of each instance's memory (the monitor role's watchdog writes them,
    # beside its state): what memory_growth is judged on before root restarts anything
    "watchdog_memory": "/var/lib/kvfleet/watchdog/memory.jsonl",
}

# an instance name as the server role accepts it (plugin_utils/_instances.py)
_UNIT = re.compile("^" + re.escape(UNIT_PREFIX) + "([a-z0-9][a-z0-9_-]*)" + re.escape(UNIT_SUFFIX) + "$")


def unit_name(instance):
    """The systemd unit of instance NAME."""
    if not isinstance(instance, str) or not instance:
        raise ValueError("an instance name must be a non-empty string, got %r" % (instance,))
    return UNIT_PREFIX + instance + UNIT_SUFFIX


def unit_instance(unit):
    """The instance a unit runs, or None for a unit that is not one of the collection's vLLM units."""
    match = _UNIT.match(unit or "")
    return match.group(1) if match else None
