# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Reading one host's variables (an entry of Ansible's hostvars) in a filter: one way, for every
filter that looks across hosts."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def var(hv, key, default=None):
    """hv[key], or default where it is missing, null, or a template that cannot be rendered
    (hostvars render a value when it is read)."""
    try:
        value = hv[key] if key in hv else None
    except Exception:  # an undefined variable in the value's template
        return default
    return default if value is None else value


def server_result(hv, key, default=None):
    """One key of the server role's documented result (server_result, roles/server/README.md
    "Result") as the role left it on this host in this run; default where the role did not set it."""
    result = var(hv, "server_result", {})
    value = result.get(key) if hasattr(result, "get") else None
    return default if value is None else value


def current_record(hv):
    """The host's deployment record as last read (ansible_local.kvfleet_vllm_server.current), {} if none."""
    facts = var(hv, "ansible_local", {})
    return ((facts.get("kvfleet_vllm_server") or {}).get("current") or {}) if hasattr(facts, "get") else {}


def host_names(filter_name, hosts):
    """The host names a filter across hosts takes, as a list; a clear error for anything else."""
    if isinstance(hosts, (str, bytes)) or not hasattr(hosts, "__iter__"):
        raise AnsibleFilterError("%s takes a list of host names, got %s" % (filter_name, type(hosts).__name__))
    return list(hosts)
