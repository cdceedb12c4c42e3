# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Normalise vLLM /metrics samples into one version-independent view.

vLLM renamed its metrics (``gpu_cache_usage_perc`` -> ``kv_cache_usage_perc`` in V1, the old
names gone in 0.12), exposes counters with ``_total``/``_created``, and labels engine series with
``model_name`` and ``engine``. Everything here maps those onto fixed field names; a value the
server does not expose stays ``None``, never 0. Standard library only (runs on managed hosts).
"""

from __future__ import annotations

import math

__all__ = ["FIELDS", "NotVllmMetrics", "normalize", "is_v0"]

# Fields of a normalised view, in the order the docs list them.
FIELDS = (
    "kv_cache_usage", "num_gpu_blocks", "block_size", "used_blocks_estimate",
    "requests_running", "requests_waiting", "waiting_capacity", "waiting_deferred",
    "requests_swapped", "preemptions_total", "admission_rejections_total",
    "request_errors_total", "requests_finished_total", "prefix_cache_hit_rate",
    "prefix_cache_queries_total", "prefix_cache_hits_total",
    "prompt_tokens_total", "generation_tokens_total",
)

# Fields that are plain sums over groups (engines/models).
_SUMMED = (
    "requests_running", "requests_waiting", "waiting_capacity", "waiting_deferred",
    "requests_swapped", "preemptions_total", "admission_rejections_total",
    "request_errors_total", "requests_finished_total", "prefix_cache_queries_total",
    "prefix_cache_hits_total", "prompt_tokens_total", "generation_tokens_total",
)

# canonical name (prefix and _total stripped) -> field, for simple one-series values.
_SIMPLE = {
    "num_requests_running": "requests_running",
    "num_requests_waiting": "requests_waiting",
    "num_requests_swapped": "requests_swapped",
    "num_preemptions": "preemptions_total",
    "prompt_tokens": "prompt_tokens_total",
    "generation_tokens": "generation_tokens_total",
}
_ERROR_REASONS = frozenset(("error", "abort"))
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


class NotVllmMetrics(ValueError):
    """Valid exposition text that is not from a vLLM server."""


def _finite(value):
    if value is None or math.isnan(value) or math.isinf(value):
        return None
    return value


def _num(value):
    """Counts as int when integral, so JSON shows 3 rather than 3.0."""
    value = _finite(value)
    if value is None:
        return None
    return int(value) if float(value).is_integer() else value


def _label_int(labels, key):
    raw = labels.get(key)
    if raw is None:
        return None
    try:
        return int(float(raw))
    except ValueError:  # V0 writes "None" for unset values
        return None


def _canonical(name):
    """'vllm:num_preemptions_total' -> 'num_preemptions'; None for series we never read."""
    base = name[len("vllm:"):]
    if base.endswith("_created"):
        return None
    if base.endswith(_HISTOGRAM_SUFFIXES):
        return None
    if base.endswith("_total"):
        base = base[:-len("_total")]
    return base


def _add(group, field, value):
    value = _finite(value)
    if value is None:
        return
    group[field] = group.get(field, 0) + value


def _extract(group_series, cache_config):
    """Raw values of one (model, engine) group: {field: value} plus private keys."""
    g = dict(cache_config)
    usage_new = usage_old = None
    hit_rate_gauge = []
    for canon, labels, value in group_series:
        field = _SIMPLE.get(canon)
        if field:
            _add(g, field, value)
        elif canon == "kv_cache_usage_perc":
            usage_new = _finite(value)
        elif canon == "gpu_cache_usage_perc":
            usage_old = _finite(value)
        elif canon == "num_requests_waiting_by_reason":
            reason = labels.get("reason")
            if reason == "capacity":
                _add(g, "waiting_capacity", value)
            elif reason == "deferred":
                _add(g, "waiting_deferred", value)
        elif canon == "admission_rejections":
            _add(g, "admission_rejections_total", value)
        elif canon == "request_success":
            _add(g, "requests_finished_total", value)
            # Errors are 0 (not None) once the family exists at all.
            _add(g, "request_errors_total",
                 value if labels.get("finished_reason") in _ERROR_REASONS else 0.0)
        elif canon in ("prefix_cache_queries", "gpu_prefix_cache_queries"):
            g.setdefault("_queries_by_name", {})[canon] = _finite(value)
        elif canon in ("prefix_cache_hits", "gpu_prefix_cache_hits"):
            g.setdefault("_hits_by_name", {})[canon] = _finite(value)
        elif canon == "gpu_prefix_cache_hit_rate":
            # V0 gauge; -1 means prefix caching is off.
            v = _finite(value)
            if v is not None and v >= 0:
                hit_rate_gauge.append(v)
    # 0.9.2-0.10.x expose old and new names side by side with equal values: prefer the new
    # name and never add the two.
    usage = usage_new if usage_new is not None else usage_old
    if usage is not None:
        g["kv_cache_usage"] = usage
    for src, field, new, old in (("_queries_by_name", "prefix_cache_queries_total",
                                  "prefix_cache_queries", "gpu_prefix_cache_queries"),
                                 ("_hits_by_name", "prefix_cache_hits_total",
                                  "prefix_cache_hits", "gpu_prefix_cache_hits")):
        by_name = g.pop(src, None)
        if by_name:
            v = by_name.get(new)
            g[field] = v if v is not None else by_name.get(old)
    if hit_rate_gauge:
        g["_hit_rate_gauge"] = sum(hit_rate_gauge) / len(hit_rate_gauge)
    return g


def _aggregate(groups):
    """One normalised view over raw groups: sums, and the block-weighted mean of usage."""
    out = dict((f, None) for f in FIELDS)
    for field in _SUMMED:
        vals = [g[field] for g in groups if g.get(field) is not None]
        out[field] = _num(sum(vals)) if vals else None

    with_usage = [g for g in groups if g.get("kv_cache_usage") is not None]
    # Blocks belong to an engine, not to a model name: count each engine once.
    blocks = dict((g["_engine"], g["num_gpu_blocks"]) for g in groups
                  if g.get("num_gpu_blocks") is not None)
    out["num_gpu_blocks"] = sum(blocks.values()) if blocks else None
    sizes = [g["block_size"] for g in groups if g.get("block_size") is not None]
    out["block_size"] = max(set(sizes), key=sizes.count) if sizes else None

    if with_usage:
        if all(g.get("num_gpu_blocks") for g in with_usage):
            weight = sum(g["num_gpu_blocks"] for g in with_usage)
            usage = sum(g["kv_cache_usage"] * g["num_gpu_blocks"] for g in with_usage) / weight
        else:
            usage = sum(g["kv_cache_usage"] for g in with_usage) / len(with_usage)
        out["kv_cache_usage"] = usage
        # vLLM computes usage as 1 - free / (num_gpu_blocks - 1): invert that per engine.
        if all(g.get("num_gpu_blocks") for g in with_usage):
            out["used_blocks_estimate"] = int(sum(
                round(g["kv_cache_usage"] * max(g["num_gpu_blocks"] - 1, 0)) for g in with_usage))

    queries, hits = out["prefix_cache_queries_total"], out["prefix_cache_hits_total"]
    if queries:
        out["prefix_cache_hit_rate"] = round(float(hits or 0) / queries, 6)
    else:
        gauges = [g["_hit_rate_gauge"] for g in groups if "_hit_rate_gauge" in g]
        if gauges:
            out["prefix_cache_hit_rate"] = round(sum(gauges) / len(gauges), 6)
    return out


def is_v0(vllm_series):
    """V1 labels engine series with 'engine' and names usage kv_cache_usage_perc."""
    for canon, labels, _value in vllm_series:
        if canon == "kv_cache_usage_perc" or "engine" in labels:
            return False
    return True


def normalize(samples):
    """Samples from _prom.parse -> normalised dict (FIELDS + schema, engines, models)."""
    series = []
    families = set()
    for s in samples:
        families.add(s.name)
        if not s.name.startswith("vllm:"):
            continue
        canon = _canonical(s.name)
        if canon is not None:
            series.append((canon, s.labels, s.value))
    if not series:
        names = sorted(families)
        raise NotVllmMetrics(
            "no vllm: metrics in %d series of %d families (e.g. %s): not a vLLM server, or one "
            "started with --disable-log-stats" % (len(samples), len(names), ", ".join(names[:5])))

    # cache_config_info describes an engine's block pool; it carries 'engine' (V1) but not
    # always 'model_name', so it is joined to the other series by engine.
    configs = {}
    by_group = {}
    for canon, labels, value in series:
        if canon == "cache_config_info":
            cfg = configs.setdefault(labels.get("engine"), {"_model": labels.get("model_name")})
            for field in ("num_gpu_blocks", "block_size"):
                parsed = _label_int(labels, field)
                if parsed is not None:
                    cfg[field] = parsed
            continue
        key = (labels.get("model_name", ""), labels.get("engine"))
        by_group.setdefault(key, []).append((canon, labels, value))
    for engine, cfg in configs.items():
        # A fresh V0 server exposes only cache_config_info until its first request.
        if not any(k[1] == engine for k in by_group):
            by_group[(cfg["_model"] or "", engine)] = []
    groups = {}
    for key, items in by_group.items():
        cfg = dict((k, v) for k, v in configs.get(key[1], {}).items() if not k.startswith("_"))
        groups[key] = _extract(items, cfg)
        groups[key]["_engine"] = key[1]

    view = _aggregate(list(groups.values()))
    view["schema"] = "v0" if is_v0(series) else "v1"

    engine_ids = sorted(set(k[1] for k in groups if k[1] is not None), key=_engine_sort_key)
    if engine_ids:
        view["engines"] = dict(
            (e, _aggregate([g for k, g in groups.items() if k[1] == e])) for e in engine_ids)
    else:
        # V0 has one engine and no engine label.
        view["engines"] = {"0": _aggregate(list(groups.values()))}
    model_names = sorted(set(k[0] for k in groups))
    view["models"] = dict(
        (m, _aggregate([g for k, g in groups.items() if k[0] == m])) for m in model_names)
    return view


def _engine_sort_key(engine):
    return (0, int(engine), "") if engine.isdigit() else (1, 0, engine)
