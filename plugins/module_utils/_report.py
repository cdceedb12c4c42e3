# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet table of kvfleet.vllm.diagnose, as plain text lines. Stdlib only."""

from __future__ import annotations

__all__ = ["COLUMNS", "table_lines"]

COLUMNS = (("HOST", 20), ("INSTANCE", 10), ("VERSION", 9), ("VERDICT", 10), ("CAUSES", 36),
           ("KV%", 6), ("RUN", 5), ("WAIT", 5), ("PREEMPT/s", 9), ("BLOCK", 5), ("TRENDS", 30))


def _cell(value, fmt="%s"):
    return "-" if value is None or value == "" else fmt % value


def table_lines(rows):
    """rows: the diagnose playbook's per-instance dicts -> header + one line per instance."""
    def line(cells):
        return " ".join(str(c).ljust(w) for c, (_n, w) in zip(cells, COLUMNS)).rstrip()

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
