# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the server role's rollback restarts, and in which order (roles/server/tasks/rollback.yml).

A restored instance restarts when its unit or environment file changed back, when it is not
running, or when the failed deployment added a unit. A serving group restarts as one unit
(docs/serving-groups.md): its heads stop first (their in-flight requests still need the workers'
engines), then its workers; the workers start before the heads. It restarts when the deploy asks
(a member changed on another host), when the failed deployment touched one of its units, or when
one of the restored group's units is touched. The failed deployment's own group units stop in the
same order before the restored instances start. Pure; plugins/filter/rollback_plan.py reads the
role's facts into it.
"""

from __future__ import annotations

import re

# an instance's environment (or key) file, named after the instance: its unit restarts with it
_INSTANCE_FILE = re.compile(r"^(.*)\.(env|keys\.yaml)$")


class RollbackError(ValueError):
    """Input the plan cannot be made from; the message names it."""


def _unique(items):
    """Unit names once each, in their first order."""
    return list(dict.fromkeys(items))


def _names(value, what):
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise RollbackError("%s must be a list of file or unit names, got %r" % (what, value))
    return list(value)


def plan(backup_units, now_units=(), changed=(), running=(), current=None, instances=(), group_restart=False):
    """backup_units: the kept units (file names) put back; now_units: the units in place before
    the rollback; changed: the units and environment files the rollback changed back; running:
    the host's running services; current: the restored record's `current` (its instances and
    headless workers); instances: the failed deployment's instance model (each `unit`,
    `headless`, `record`); group_restart: the deploy asks for the groups' restart.

    Returns {added, restart, stop_heads, stop_workers, start_heads, start_workers}: units the
    failed deployment added (stopped and removed), the restored instances outside any group that
    restart, and each group step in its order."""
    backup_units = _names(backup_units, "backup_units")
    now_units = _names(now_units, "now_units")
    changed = _names(changed, "changed")
    running = set(_names(running, "running"))
    current = current if isinstance(current, dict) else {}
    changed_back = [_INSTANCE_FILE.sub(r"vllm-\1.service", name) for name in changed]
    not_running = [u for u in backup_units if u not in running]
    added = [u for u in _unique(now_units) if u not in backup_units]
    touched = changed_back + not_running + added
    heads = [i.get("unit") for i in current.get("instances") or [] if isinstance(i, dict) and "group" in i]
    workers = [w.get("unit") for w in current.get("workers") or [] if isinstance(w, dict)]
    failed_group = [i for i in instances or [] if isinstance(i, dict) and "group" in (i.get("record") or {})
                    and i.get("unit") in touched]
    failed_heads = [i["unit"] for i in failed_group if not i.get("headless")]
    failed_workers = [i["unit"] for i in failed_group if i.get("headless")]
    restart_groups = bool(group_restart) or bool(failed_group) or any(u in touched for u in heads + workers)
    stop = heads + failed_heads + workers + failed_workers if restart_groups else []
    return {
        "added": added,
        "restart": [u for u in backup_units if u in touched + stop and u not in heads + workers],
        "stop_heads": _unique(heads + failed_heads) if restart_groups else [],
        "stop_workers": _unique(workers + failed_workers) if restart_groups else [],
        "start_heads": heads if restart_groups else [],
        "start_workers": workers if restart_groups else [],
    }
