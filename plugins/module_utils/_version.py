# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A vLLM version's release on the hosts, standard library only (the controller reads versions
with packaging: plugin_utils/_vllm_flags.parse_version; tests/unit/plugins/module_utils/
test_version.py holds both to one table). PEP 440's public version: an optional epoch, the
release numbers, then a pre-, post- or dev-release and a local label, each read past."""

from __future__ import annotations

import re

__all__ = ["release"]

# PEP 440, appendix B (the canonical form's regular expression, the release group captured)
_PEP440 = re.compile(
    r"""^\s*v?(?:[0-9]+!)?(?P<release>[0-9]+(?:\.[0-9]+)*)
        (?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_.]?[0-9]*)?
        (?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?
        (?:[-_.]?dev[-_.]?[0-9]*)?
        (?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?\s*$""", re.VERBOSE | re.IGNORECASE)


def release(version):
    """'0.32.0+cpu' -> (0, 32, 0), '0.12.0rc1' -> (0, 12, 0), '0.11.0.post1' -> (0, 11, 0); None
    for anything that is not a PEP 440 version."""
    match = _PEP440.match(str(version)) if version is not None else None
    if not match:
        return None
    return tuple(int(part) for part in match.group("release").split("."))
