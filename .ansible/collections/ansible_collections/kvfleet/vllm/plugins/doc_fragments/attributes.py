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
