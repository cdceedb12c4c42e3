# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet tables of kvfleet.vllm.diagnose and kvfleet.vllm.deploy, as plain text lines. Stdlib only."""

from __future__ import annotations

__all__ = ["COLUMNS", "DEPLOY_COLUMNS", "OUTCOMES", "deploy_lines", "table_lines"]

COLUMNS = (("HOST", 20), ("INSTANCE", 10), ("VERSION", 9), ("VERDICT", 10), ("CAUSES", 36),
           ("KV%", 6), ("RUN", 5), ("WAIT", 5), ("PREEMPT/s", 9), ("BLOCK", 5), ("TRENDS", 30))


def _cell(value, fmt="%s"):
    return "-" if value is None or value == "" else fmt % value


def _line(columns, cells):
    return " ".join(str(c).ljust(w) for c, (_n, w) in zip(cells, columns)).rstrip()


def table_lines(rows):
    """rows: the diagnose playbook's per-instance dicts -> header + one line per instance."""
    def line(cells):
        return _line(COLUMNS, cells)

    out = [line([name for name, _w in COLUMNS])]
    for r in rows:
        usage = r.get("kv_cache_usage")
        out.append(line([
            r.get("host"), r.get("instance"), _cell(r.get("version")), r.get("verdict"),
            ",".join(c["id"] for c in r.get("causes") or []) or "-",
            _cell(usage * 100 if usage is not None else None, "%.1f"),
            _cell(r.get("requests_running")), _cell(r.get("requests_waiting")),
            _cell(r.get("preemptions_per_s"), "%.2f"), _cell(r.get("block_size")),
            ",".join(list(r.get("trends") or []) + ["sustained:" + c for c in r.get("sustained") or []])
            or "-"]))
    return out


DEPLOY_COLUMNS = (("HOST", 20), ("BATCH", 5), ("BEFORE", 22), ("AFTER", 22), ("OUTCOME", 16),
                  ("SECONDS", 7), ("DETAIL", 60))
# what a deploy did to a host; 'checked': a --check run (the role's changed tasks say what
# would change); 'untouched' hosts were never reached (a batch before them failed)
OUTCOMES = ("upgraded", "unchanged", "checked", "rolled back", "rollback failed",
            "failed before change", "untouched")


def _version(rec):
    if not rec or not rec.get("version"):
        return "-"
    return "%s (%s)" % (rec["version"], rec["config"]) if rec.get("config") else rec["version"]


def deploy_lines(rows):
    """rows: {'host', 'batch', 'before', 'after', 'outcome', 'seconds', 'detail'} per host, where
    before/after are deployment records ({'version', 'config'}) -> header, lines, totals."""
    out = [_line(DEPLOY_COLUMNS, [name for name, _w in DEPLOY_COLUMNS])]
    counts = {}
    for r in rows:
        outcome = r.get("outcome") or "untouched"
        counts[outcome] = counts.get(outcome, 0) + 1
        detail = " ".join(str(r.get("detail") or "-").split())
        out.append(_line(DEPLOY_COLUMNS, [
            r.get("host"), _cell(r.get("batch")), _version(r.get("before")),
            _version(r.get("after")) if outcome in ("upgraded", "unchanged") else "-",
            outcome, _cell(r.get("seconds"), "%.0f"),
            detail if len(detail) <= 120 else detail[:117] + "..."]))
    out.append(", ".join("%d %s" % (counts[o], o) for o in OUTCOMES if o in counts) or "no hosts")
    return out
