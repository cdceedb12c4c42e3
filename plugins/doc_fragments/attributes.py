# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment(object):
    # The modules of this collection only read: they run unchanged in check mode.
    INFO_MODULE = r"""
attributes:
  check_mode:
    support: full
    description: The module only reads; it runs unchanged in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is nothing to diff.
"""

    # The modules in meta/runtime.yml's action group vllm (their transport options set once).
    ACTION_GROUP = r"""
attributes:
  action_group:
    description: Use C(group/kvfleet.vllm.vllm) in C(module_defaults) to set the transport options
      (O(timeout), O(validate_certs), O(ca_path), O(client_cert), O(client_key), O(max_body_bytes))
      once for every module of the group.
    support: full
    membership:
      - kvfleet.vllm.vllm
"""
