# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Spread a fleet's scheduled restarts over a window so that few hosts restart at once.

The fragmentation guide's (docs/kv-cache.md) `0 4 * * * systemctl restart vllm.service` on every host takes the whole fleet
down at 04:00. Here hosts get slots, in inventory order, with at most `max_concurrent` per slot.
Pure and deterministic: the same inventory gives the same plan on every run and every controller.
"""

from __future__ import annotations

import math
import re

__all__ = ["PlanError", "max_per_slot", "plan"]


class PlanError(ValueError):
    """The settings cannot give a plan; the message names the variable."""


def max_per_slot(max_concurrent, group_size, var="vllm_restart_max_concurrent"):
    """A count (3) or a share of the group ('10%') -> hosts per slot, at least 1."""
    text = str(max_concurrent).strip()
    match = re.match(r"^(\d+(?:\.\d+)?)\s*%$", text)
    if match:
        share = float(match.group(1))
        if not 0 < share <= 100:
            raise PlanError("%s: %s is not a percentage in (0, 100]" % (var, text))
        return max(1, int(math.floor(group_size * share / 100.0)))
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise PlanError("%s: %r must be a count of hosts (1 or more) or a percentage such as 10%%"
                    % (var, max_concurrent))


def _minutes(hhmm, var):
    match = re.match(r"^([01]?\d|2[0-3]):([0-5]\d)$", str(hhmm).strip())
    if not match:
        raise PlanError("%s: %r is not a time of day HH:MM" % (var, hhmm))
    return int(match.group(1)) * 60 + int(match.group(2))


def plan(hosts, max_concurrent, window_start="04:00", window_minutes=120, slot_minutes=10):
    """hosts (inventory order) -> {host: {'slot', 'hour', 'minute', 'time', 'day_offset'}}.

    Slots are `slot_minutes` long; a host's restart (drain, restart, wait healthy) must fit in
    one. The used slots are spread evenly over the window.
    """
    hosts = list(hosts)
    if len(set(hosts)) != len(hosts):
        raise PlanError("the host list has duplicates")
    start = _minutes(window_start, "vllm_restart_window_start")
    if not isinstance(window_minutes, int) or isinstance(window_minutes, bool) or window_minutes < 1:
        raise PlanError("vllm_restart_window_minutes: %r must be a positive integer" % (window_minutes,))
    if (not isinstance(slot_minutes, int) or isinstance(slot_minutes, bool)
            or not 1 <= slot_minutes <= window_minutes):
        raise PlanError("vllm_restart_slot_minutes: %r must be an integer from 1 to "
                        "vllm_restart_window_minutes (%s)" % (slot_minutes, window_minutes))
    if not hosts:
        return {}
    per_slot = max_per_slot(max_concurrent, len(hosts))
    slots = window_minutes // slot_minutes
    needed = int(math.ceil(len(hosts) / float(per_slot)))
    if needed > slots:
        raise PlanError(
            "vllm_restart_window_minutes: %d hosts at most %d at a time need %d slots of %d "
            "minutes (%d minutes); the window has %d. Widen the window, shorten "
            "vllm_restart_slot_minutes or raise vllm_restart_max_concurrent."
            % (len(hosts), per_slot, needed, slot_minutes, needed * slot_minutes, window_minutes))
    spacing = slots // needed
    out = {}
    for index, host in enumerate(hosts):
        slot = (index // per_slot) * spacing
        at = start + slot * slot_minutes
        out[host] = {"slot": slot, "hour": (at // 60) % 24, "minute": at % 60,
                     "time": "%02d:%02d" % ((at // 60) % 24, at % 60),
                     "day_offset": at // (24 * 60)}
    return out
