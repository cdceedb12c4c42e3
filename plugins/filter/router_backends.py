# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: router_backends
short_description: The URLs a router reaches one host's vLLM instances at
version_added: 0.4.0
description:
  - From the instances of one host's deployment record (or the server role's instance model),
    the URL a router sends requests to for each, at O(address) (the host's address as the
    inventory gives it) for an instance bound to every address or to that address.
  - The P(kvfleet.vllm.router#role) role lists these URLs in the router's C(--worker-urls), and the
    deploy and rolling_restart playbooks remove and add the same ones when they drain a host;
    vllm-router answers 200 to the removal of a URL it does not have, so both must build the same
    string.
  - Fails, naming the host and the instance, for an instance that serves TLS (vllm-router 0.1.17
    has no option for a backend CA or a client certificate) and for one bound to loopback unless
    O(same_host).
options:
  _input:
    description: The instance records (C(name), C(port), C(bind), C(url), C(tls)).
    type: list
    elements: dict
    required: true
  address:
    description: The host's address as the router sees it.
    type: str
    required: true
  host:
    description: The host's inventory name, for the error messages.
    type: str
    default: ""
  same_host:
    description: The router runs on this host, so loopback-bound instances are reachable.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: The router's backends on node1
  ansible.builtin.debug:
    msg: "{{ rollout_record.instances | kvfleet.vllm.router_backends(address=ansible_host, host=inventory_hostname) }}"
"""

RETURN = r"""
_value:
  description: One C(http://ADDRESS:PORT) URL per instance, in the records' order.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._router import RouterError, backend_urls


def _router_backends(records, address, host="", same_host=False):
    try:
        return backend_urls(records, address, host=host, same_host=same_host)
    except RouterError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {"router_backends": _router_backends}
