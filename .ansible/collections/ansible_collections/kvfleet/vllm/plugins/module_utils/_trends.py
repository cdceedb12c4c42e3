# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Trends over a monitor history (one snapshot per interval, oldest first). Stdlib only.

- usage_falling_rate_steady: the fragmentation guide's (docs/kv-cache.md) "accumulating degradation" signal, KV cache usage
  falling steadily while the request rate holds. PagedAttention does not fragment, so when it
  shows, look for a leak or a changing workload rather than scheduling a restart.
- sustained causes: a cause present in most of the recent diagnoses.
- persisting causes: a cause named by every sample of an instance for a time (the watchdog's
  trigger).
"""

from __future__ import annotations

import math

__all__ = ["TREND_IDS", "DEFAULTS", "finite", "fitted_slope", "history_series", "persisting_causes",
           "sustained_causes", "trends"]

TREND_IDS = ("usage_falling_rate_steady",)
DEFAULTS = {"min_points": 10, "usage_drop": 0.1, "rate_tolerance": 0.2, "sustained_share": 0.8}


def fitted_slope(xs, ys):
    """Least-squares slope of ys over xs (0 when the xs do not vary)."""
    n = float(len(xs))
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var


def trends(history, settings=None):
    """history: snapshots with 'time', 'kv_cache_usage', 'rates' -> {trend id: evidence or None}."""
    cfg = dict(DEFAULTS, **(settings or {}))
    points = [(h["time"], h["kv_cache_usage"], (h.get("rates") or {}).get("requests_finished_per_s"))
              for h in history
              if not h.get("error") and h.get("kv_cache_usage") is not None]
    found = dict((t, None) for t in TREND_IDS)
    rated = [p for p in points if p[2] is not None]
    if len(rated) < cfg["min_points"]:
        return found
    times = [p[0] for p in rated]
    usage = [p[1] for p in rated]
    rates = [p[2] for p in rated]
    span = times[-1] - times[0]
    slope = fitted_slope(times, usage)
    drop = -slope * span
    half = len(rates) // 2
    early, late = sum(rates[:half]) / half, sum(rates[half:]) / (len(rates) - half)
    steady = early > 0 and abs(late - early) / early <= cfg["rate_tolerance"]
    if drop >= cfg["usage_drop"] and steady:
        found["usage_falling_rate_steady"] = {
            "usage_first": round(usage[0], 4), "usage_last": round(usage[-1], 4),
            "usage_drop_fitted": round(drop, 4), "window_seconds": round(span, 1),
            "request_rate_early": round(early, 4), "request_rate_late": round(late, 4)}
    return found


def sustained_causes(diagnoses, settings=None):
    """diagnoses: recent gate results, oldest first -> sorted cause ids present in most of them."""
    cfg = dict(DEFAULTS, **(settings or {}))
    if not diagnoses:
        return []
    counts = {}
    for d in diagnoses:
        for cid in set(c["id"] for c in d.get("causes", [])):
            counts[cid] = counts.get(cid, 0) + 1
    need = cfg["sustained_share"] * len(diagnoses)
    return sorted(cid for cid, n in counts.items() if n >= need and len(diagnoses) >= 2)


def persisting_causes(history, now, causes, for_seconds, stale_seconds=None):
    """history: one instance's monitor lines, oldest first ({'time', 'cause_ids'}).

    -> {cause id: seconds it has persisted} for each of `causes` that the newest lines all name,
    over at least `for_seconds` (from the first line of that unbroken run to the newest) and at
    least two lines. Nothing when the newest line is older than `stale_seconds` (default
    max(120, for_seconds)): a monitor that stopped says nothing about now.
    """
    lines = [h for h in history if isinstance(h, dict) and isinstance(h.get("time"), (int, float))
             and not isinstance(h.get("time"), bool)]
    if not lines:
        return {}
    stale = max(120.0, float(for_seconds)) if stale_seconds is None else float(stale_seconds)
    if now - lines[-1]["time"] > stale:
        return {}
    found = {}
    for cause in causes:
        run = []
        for h in reversed(lines):
            named = h.get("cause_ids")
            if not isinstance(named, list) or cause not in named:
                break
            run.append(h)
        if len(run) >= 2:
            persisted = run[0]["time"] - run[-1]["time"]
            if persisted >= for_seconds:
                found[cause] = round(persisted, 1)
    return found


def finite(value):
    """value when it is a finite number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def history_series(history, limit=60):
    """The newest `limit` monitor lines of one instance as compact points for charts: {'t', 'kv'
    (usage 0..1), 'running', 'waiting', 'tokens_per_s' (generated), 'ttft_p90' (seconds), 'error'
    (bool)}; absent values are None, never 0."""
    out = []
    for h in history[-int(limit):]:
        if not isinstance(h, dict) or finite(h.get("time")) is None:
            continue
        rates = h.get("rates") if isinstance(h.get("rates"), dict) else {}
        lat = h.get("latency") if isinstance(h.get("latency"), dict) else {}
        ttft = lat.get("ttft") if isinstance(lat.get("ttft"), dict) else {}
        out.append({"t": h["time"], "kv": finite(h.get("kv_cache_usage")),
                    "running": finite(h.get("requests_running")),
                    "waiting": finite(h.get("requests_waiting")),
                    "tokens_per_s": finite(rates.get("generation_tokens_per_s")),
                    "ttft_p90": finite(ttft.get("p90")), "error": bool(h.get("error"))})
    return out
