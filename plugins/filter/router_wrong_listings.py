# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
name: router_wrong_listings
short_description: (internal) The routers that do not list a host's instances as a drain or an undrain should leave them
version_added: 0.4.0
description:
  - After the deploy's drain of a host (C(tasks/router_hook.yml)), the routers that still list any of
    its instances' URLs; after its undrain, the routers that lack any of them.
  - vllm-router answers 200 to the removal of a URL it does not have, so its C(/list_workers) is the proof.
options:
  _input:
    description: The results of the C(/list_workers) reads, one per router (each with C(item), the router,
      and C(json.urls)); a router that did not answer lists nothing.
    type: list
    elements: dict
    required: true
  urls:
    description: The host's instances' URLs (P(kvfleet.vllm.router_backends#filter)).
    type: list
    elements: str
    required: true
  hook:
    description: C(drain) or C(undrain).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Assert the routers list this host's instances as they should
  ansible.builtin.assert:
    that: _rollout_router_lists.results | kvfleet.vllm.router_wrong_listings(_rollout_router_urls, 'drain') | length == 0
"""

RETURN = r"""
_value:
  description: One C({router, lists}) per router whose list is wrong, with what it lists.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._router import RouterError, wrong_listings


def _router_wrong_listings(results, urls, hook):
    listings = [{"router": r.get("item"), "urls": (r.get("json") or {}).get("urls")} for r in results or []]
    try:
        return wrong_listings(listings, list(urls or []), hook)
    except RouterError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {"router_wrong_listings": _router_wrong_listings}
