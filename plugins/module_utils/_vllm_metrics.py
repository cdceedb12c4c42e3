# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Normalise vLLM /metrics samples into one version-independent view.

vLLM renamed its metrics (``gpu_cache_usage_perc`` -> ``kv_cache_usage_perc`` in V1, the old
names gone in 0.12), exposes counters with ``_total``/``_created``, and labels engine series with
``model_name`` and ``engine``. Everything here maps those onto fixed field names; a value the
server does not expose stays ``None``, never 0. Standard library only (runs on managed hosts).

Values that cannot be true are never used: NaN or infinite values, negative counts or counters,
usage outside 0..1, block counts or sizes that are not positive whole numbers, and series that
appear more than once (every copy is discarded: there is no telling which one is right). Such a
field is ``None`` in the view, and the ``invalid`` list says which field, which series and why.
"""

from __future__ import annotations

import math

from ansible_collections.kvfleet.vllm.plugins.module_utils._prom import repeated_series

__all__ = ["EDGE_FIELDS", "FIELDS", "INFERENCE_HANDLERS", "MAX_COUNT", "NotVllmMetrics", "edge_counters",
           "normalize", "is_v0"]

# Fields of a normalised view, in the order the docs list them.
FIELDS = (
    "kv_cache_usage", "num_gpu_blocks", "block_size", "used_blocks_estimate",
    "requests_running", "requests_waiting", "waiting_capacity", "waiting_deferred",
    "requests_swapped", "preemptions_total", "admission_rejections_total",
    "request_errors_total", "request_aborts_total", "requests_finished_total",
    "prefix_cache_hit_rate", "prefix_cache_queries_total", "prefix_cache_hits_total",
    "prompt_tokens_total", "generation_tokens_total", "engine_steps_total",
    "batched_tokens_total", "request_prompt_tokens_sum", "request_prompt_tokens_count",
    "engines_sleeping", "admission_rejections_by_reason",
)

# Fields that are plain sums over groups (engines/models).
_SUMMED = (
    "requests_running", "requests_waiting", "waiting_capacity", "waiting_deferred",
    "requests_swapped", "preemptions_total", "admission_rejections_total",
    "request_errors_total", "request_aborts_total", "requests_finished_total",
    "prefix_cache_queries_total", "prefix_cache_hits_total", "prompt_tokens_total",
    "generation_tokens_total", "engine_steps_total", "batched_tokens_total",
    "request_prompt_tokens_sum", "request_prompt_tokens_count", "engines_sleeping",
)

# canonical name (prefix and _total stripped) -> field, for simple one-series values.
_SIMPLE = {
    "num_requests_running": "requests_running",
    "num_requests_waiting": "requests_waiting",
    "num_requests_swapped": "requests_swapped",
    "num_preemptions": "preemptions_total",
    "prompt_tokens": "prompt_tokens_total",
    "generation_tokens": "generation_tokens_total",
    # histogram parts (see _HISTOGRAM_PARTS): engine steps and the tokens they scheduled, and
    # the prompt sizes of recent requests
    "iteration_tokens:count": "engine_steps_total",
    "iteration_tokens:sum": "batched_tokens_total",
    "request_prompt_tokens:sum": "request_prompt_tokens_sum",
    "request_prompt_tokens:count": "request_prompt_tokens_count",
}
# finished_reason: "error" is the engine's failure (HTTP 500), "abort" a client that went away
# or a stop without drain (vLLM 0.32 v1/engine/__init__.py FinishReason)
_FINISHED_AS = {"error": "request_errors_total", "abort": "request_aborts_total"}
# the histograms whose _count/_sum are read (full name -> canonical part name)
_HISTOGRAM_PARTS = {
    "vllm:iteration_tokens_total_count": "iteration_tokens:count",
    "vllm:iteration_tokens_total_sum": "iteration_tokens:sum",
    "vllm:request_prompt_tokens_count": "request_prompt_tokens:count",
    "vllm:request_prompt_tokens_sum": "request_prompt_tokens:sum",
}
# Counts and counters above this are not counts (and lose integer precision as floats).
MAX_COUNT = 2 ** 53
# Gauges read as a share 0..1 (the V0 hit-rate gauge also writes -1 for "prefix caching off").
_RATIOS = ("kv_cache_usage_perc", "gpu_cache_usage_perc", "gpu_prefix_cache_hit_rate")
# canonical name -> the field(s) of the view that it feeds
_FEEDS = {
    "kv_cache_usage_perc": ("kv_cache_usage",),
    "gpu_cache_usage_perc": ("kv_cache_usage",),
    "admission_rejections": ("admission_rejections_total",),
    "request_success": ("requests_finished_total", "request_errors_total",
                        "request_aborts_total"),
    "engine_sleep_state": ("engines_sleeping",),
    "prefix_cache_queries": ("prefix_cache_queries_total", "prefix_cache_hit_rate"),
    "gpu_prefix_cache_queries": ("prefix_cache_queries_total", "prefix_cache_hit_rate"),
    "prefix_cache_hits": ("prefix_cache_hits_total", "prefix_cache_hit_rate"),
    "gpu_prefix_cache_hits": ("prefix_cache_hits_total", "prefix_cache_hit_rate"),
    "gpu_prefix_cache_hit_rate": ("prefix_cache_hit_rate",),
}
_FEEDS.update((canon, (field,)) for canon, field in (
    ("num_requests_running", "requests_running"), ("num_requests_waiting", "requests_waiting"),
    ("num_requests_swapped", "requests_swapped"), ("num_preemptions", "preemptions_total"),
    ("prompt_tokens", "prompt_tokens_total"), ("generation_tokens", "generation_tokens_total"),
    ("iteration_tokens:count", "engine_steps_total"),
    ("iteration_tokens:sum", "batched_tokens_total"),
    ("request_prompt_tokens:sum", "request_prompt_tokens_sum"),
    ("request_prompt_tokens:count", "request_prompt_tokens_count")))
# The fields the diagnosis reads; a body that gives none of them says nothing about the server.
_CORE = ("kv_cache_usage", "num_gpu_blocks", "requests_running", "requests_waiting")
_EXCERPT = 160
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


def _block_label(labels, key):
    """(value, reason): a positive whole number, or None with why (reason None: not given).

    V0 writes "None" for unset values: that is "not given", not invalid.
    """
    raw = labels.get(key)
    if raw is None or raw.strip() in ("", "None"):
        return None, None
    try:
        value = float(raw)
    except ValueError:
        return None, "not a number"
    if math.isnan(value) or math.isinf(value):
        return None, "not a finite number"
    if value != int(value):
        return None, "not a whole number"
    if value < 1:
        return None, "not positive"
    if value > MAX_COUNT:
        return None, "larger than %d" % MAX_COUNT
    return int(value), None


def _check_value(canon, value):
    """Why a value read for `canon` cannot be true, or None when it can."""
    if math.isnan(value) or math.isinf(value):
        return "not a finite number"
    if canon in _RATIOS:
        if canon == "gpu_prefix_cache_hit_rate" and value == -1:
            return None
        if not 0 <= value <= 1:
            return "outside 0..1"
        return None
    if value < 0:
        return "negative"
    if value > MAX_COUNT:
        return "larger than %d" % MAX_COUNT
    return None


def _series_text(name, labels):
    text = "%s{%s}" % (name, ",".join('%s="%s"' % (k, labels[k]) for k in sorted(labels)))
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "..."


class _Invalid(object):
    """What was refused, one entry per (field, reason) with a count and the first example."""

    def __init__(self):
        self.entries = {}

    def add(self, field, reason, series, value):
        key = (field, reason)
        if key in self.entries:
            self.entries[key]["count"] += 1
            return
        value = value if isinstance(value, str) else repr(float(value))
        self.entries[key] = {"field": field, "reason": reason, "series": series,
                             "value": value[:_EXCERPT], "count": 1}

    def as_list(self):
        return list(self.entries.values())


def _canonical(name):
    """'vllm:num_preemptions_total' -> 'num_preemptions'; None for series we never read."""
    if name in _HISTOGRAM_PARTS:
        return _HISTOGRAM_PARTS[name]
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
    """Raw values of one (model, engine) group: {field: value} plus private keys.

    Every value here is valid (see normalize); '_invalid' (fields with a refused value) is
    carried from the caller's config.
    """
    g = dict(cache_config)
    g["_invalid"] = set(cache_config.get("_invalid", ()))
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
            reason = labels.get("reason") or "unknown"
            by_reason = g.setdefault("_rejections_by_reason", {})
            by_reason[reason] = by_reason.get(reason, 0) + value
        elif canon == "request_success":
            _add(g, "requests_finished_total", value)
            # Errors and aborts are 0 (not None) once the family exists at all.
            for reason, field in _FINISHED_AS.items():
                _add(g, field, value if labels.get("finished_reason") == reason else 0.0)
        elif canon == "engine_sleep_state":
            # one series per state; "awake" is 0 while the engine sleeps (vLLM 0.32
            # v1/metrics/loggers.py record_sleep_state)
            if labels.get("sleep_state") == "awake":
                _add(g, "engines_sleeping", 1.0 if value == 0 else 0.0)
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


def _check_group(g, invalid, where):
    """Cross-field checks of one group: more prefix cache hits than queries cannot be."""
    hits, queries = g.get("prefix_cache_hits_total"), g.get("prefix_cache_queries_total")
    if hits is not None and queries is not None and hits > queries:
        invalid.add("prefix_cache_hits_total", "more hits than queries", where, hits)
        g["_invalid"].update(("prefix_cache_hits_total", "prefix_cache_hit_rate"))


def _aggregate(groups):
    """One normalised view over raw groups: sums, and the block-weighted mean of usage."""
    out = dict((f, None) for f in FIELDS)
    # A field with a refused value in any group is unknown for the whole: a partial sum or mean
    # would look like a real reading.
    bad = set()
    for g in groups:
        bad.update(g.get("_invalid", ()))
    groups = [dict((k, v) for k, v in g.items() if k not in bad) for g in groups]
    for field in _SUMMED:
        vals = [g[field] for g in groups if g.get(field) is not None]
        out[field] = _num(sum(vals)) if vals else None
    by_reason = {}
    for g in groups:
        for reason, value in g.get("_rejections_by_reason", {}).items():
            by_reason[reason] = by_reason.get(reason, 0) + value
    if by_reason and out["admission_rejections_total"] is not None:
        out["admission_rejections_by_reason"] = dict((r, _num(v)) for r, v in by_reason.items())

    with_usage = [g for g in groups if g.get("kv_cache_usage") is not None]
    # Blocks belong to an engine, not to a model name: count each engine once.
    blocks = dict((g["_engine"], g["num_gpu_blocks"]) for g in groups
                  if g.get("num_gpu_blocks") is not None)
    out["num_gpu_blocks"] = sum(blocks.values()) if blocks and "num_gpu_blocks" not in bad else None
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
    if "prefix_cache_hit_rate" in bad:
        pass
    elif queries:
        out["prefix_cache_hit_rate"] = round(float(hits or 0) / queries, 6)
    else:
        gauges = [g["_hit_rate_gauge"] for g in groups if "_hit_rate_gauge" in g]
        if gauges:
            out["prefix_cache_hit_rate"] = round(sum(gauges) / len(gauges), 6)
    for field in bad:
        if field in out:
            out[field] = None
    return out


def is_v0(vllm_series):
    """V1 labels engine series with 'engine' and names usage kv_cache_usage_perc."""
    for canon, labels, _value in vllm_series:
        if canon == "kv_cache_usage_perc" or "engine" in labels:
            return False
    return True


def _is_rank(engine):
    """vLLM's engine label is the data-parallel rank: ASCII digits ('²'.isdigit() is true too)."""
    return engine.isascii() and engine.isdigit()


def _fields_of(canon, labels):
    """The fields of the view that a series feeds."""
    if canon == "cache_config_info":
        return ("num_gpu_blocks", "block_size")
    if canon == "num_requests_waiting_by_reason":
        return {"capacity": ("waiting_capacity",),
                "deferred": ("waiting_deferred",)}.get(labels.get("reason"), ())
    if canon == "request_success":
        return ("requests_finished_total",) + tuple(
            f for r, f in _FINISHED_AS.items() if labels.get("finished_reason") == r)
    if canon == "engine_sleep_state":
        return ("engines_sleeping",) if labels.get("sleep_state") == "awake" else ()
    return _FEEDS.get(canon, ())


def _valid_series(series, invalid):
    """Drop every copy of a duplicated series and every value that cannot be true.

    Returns [(canon, labels, value, invalid_fields)]: a refused value is kept as None with the
    fields it feeds, so that those fields read None for its group (not a partial sum).
    """
    copies = {}
    for canon, name, labels, value in series:
        key = (canon, tuple(sorted(labels.items())))
        copies[key] = copies.get(key, 0) + 1
    out = []
    for canon, name, labels, value in series:
        fields = _fields_of(canon, labels)
        key = (canon, tuple(sorted(labels.items())))
        if copies[key] > 1:
            for field in fields:
                invalid.add(field, "duplicate series (%d copies, all discarded)" % copies[key],
                            _series_text(name, labels), value)
            out.append((canon, labels, None, fields))
            continue
        if canon == "cache_config_info":
            out.append((canon, labels, value, ()))
            continue
        reason = _check_value(canon, value) if fields else None
        if reason:
            for field in fields:
                invalid.add(field, reason, _series_text(name, labels), value)
            out.append((canon, labels, None, fields))
            continue
        out.append((canon, labels, value, ()))
    return out


def _repeated_elsewhere(samples, series, invalid):
    """A series repeated with different values among those no field reads (histogram buckets,
    series of other exporters, vLLM series the view leaves out): the body is not one consistent
    reading, and a Prometheus scraping it keeps one copy. _valid_series refuses the others."""
    read = set((name, frozenset(labels.items())) for canon, name, labels, _value in series
               if _fields_of(canon, labels))
    for name, labels, values in repeated_series(samples):
        if (name, frozenset(labels.items())) in read or len(set(repr(v) for v in values)) < 2:
            continue
        invalid.add(name, "duplicate series with different values (%d copies)" % len(values),
                    _series_text(name, labels), " vs ".join(repr(v) for v in values[:4]))


def _cache_configs(series, invalid):
    """engine -> {'_model', 'num_gpu_blocks', 'block_size', '_invalid'} from cache_config_info.

    Two different configurations for one engine cannot both be true: both are refused.
    """
    configs = {}
    for canon, labels, value, bad_fields in series:
        if canon != "cache_config_info":
            continue
        engine = labels.get("engine")
        cfg = {"_model": labels.get("model_name"), "_invalid": set(bad_fields)}
        where = _series_text("vllm:cache_config_info", labels)
        if not bad_fields:
            for field in ("num_gpu_blocks", "block_size"):
                parsed, reason = _block_label(labels, field)
                if reason:
                    invalid.add(field, "label %s: %s" % (field, reason), where, labels[field])
                    cfg["_invalid"].add(field)
                elif parsed is not None:
                    cfg[field] = parsed
            # With data parallelism the front end sums num_gpu_blocks over the ranks and every
            # rank logs that sum (vLLM 0.32 v1/engine/core_client.py: "Sum num_gpu_blocks from
            # all engines in DP case"); kv_cache_size_tokens is the rank's own pool.
            tokens, reason = _block_label(labels, "kv_cache_size_tokens")
            if (not reason and tokens and cfg.get("block_size") and "num_gpu_blocks" in cfg
                    and tokens % cfg["block_size"] == 0
                    and tokens // cfg["block_size"] <= cfg["num_gpu_blocks"]):
                cfg["num_gpu_blocks"] = tokens // cfg["block_size"]
        if engine in configs:
            old = configs[engine]
            for field in ("num_gpu_blocks", "block_size"):
                if old.get(field) != cfg.get(field):
                    invalid.add(field, "conflicting cache_config_info series for one engine",
                                where, labels.get(field, ""))
                    old["_invalid"].add(field)
                    old.pop(field, None)
            old["_invalid"].update(cfg["_invalid"])
            continue
        configs[engine] = cfg
    return configs


def normalize(samples):
    """Samples from _prom.parse -> normalised dict (FIELDS + schema, invalid, engines, models)."""
    series = []
    families = set()
    for s in samples:
        families.add(s.name)
        if not s.name.startswith("vllm:"):
            continue
        canon = _canonical(s.name)
        if canon is not None:
            series.append((canon, s.name, s.labels, s.value))
    if not series:
        names = sorted(families)
        raise NotVllmMetrics(
            "no vllm: metrics in %d series of %d families (e.g. %s): not a vLLM server, or one "
            "started with --disable-log-stats" % (len(samples), len(names), ", ".join(names[:5])))

    invalid = _Invalid()
    for name, labels in set((n, tuple(sorted(l.items()))) for _c, n, l, _v in series):
        engine = dict(labels).get("engine")
        if engine is not None and not _is_rank(engine):
            invalid.add("engine", "engine label is not a data-parallel rank (ASCII digits)",
                        _series_text(name, dict(labels)), engine)
    _repeated_elsewhere(samples, series, invalid)
    series = _valid_series(series, invalid)

    # cache_config_info describes an engine's block pool; it carries 'engine' (V1) but not
    # always 'model_name', so it is joined to the other series by engine.
    configs = _cache_configs(series, invalid)
    by_group = {}
    for canon, labels, value, bad_fields in series:
        if canon == "cache_config_info":
            continue
        key = (labels.get("model_name", ""), labels.get("engine"))
        by_group.setdefault(key, []).append((canon, labels, value, bad_fields))
    for engine, cfg in configs.items():
        # A fresh V0 server exposes only cache_config_info until its first request.
        if not any(k[1] == engine for k in by_group):
            by_group[(cfg["_model"] or "", engine)] = []
    groups = {}
    for key, items in by_group.items():
        cfg = dict((k, v) for k, v in configs.get(key[1], {}).items()
                   if not k.startswith("_") or k == "_invalid")
        refused = set(cfg.get("_invalid", ()))
        for _canon, _labels, _value, bad_fields in items:
            refused.update(bad_fields)
        cfg["_invalid"] = refused
        groups[key] = _extract([(c, l, v) for c, l, v, bad in items if v is not None], cfg)
        groups[key]["_engine"] = key[1]
        _check_group(groups[key], invalid, "model %r engine %r" % (key[0][:40], key[1]))

    view = _aggregate(list(groups.values()))
    view["schema"] = "v0" if is_v0([(c, l, v) for c, l, v, _b in series]) else "v1"
    if not invalid.entries and all(view[f] is None for f in _CORE):
        invalid.add("metrics", "none of %s is exposed" % ", ".join(_CORE),
                    "%d vllm: series" % len(series), "")
    view["invalid"] = invalid.as_list()

    model_names = sorted(set(k[0] for k in groups))
    engine_ids = sorted(set(k[1] for k in groups if k[1] is not None), key=_engine_sort_key)
    if engine_ids:
        view["engines"] = dict(
            (e, _aggregate([g for k, g in groups.items() if k[1] == e])) for e in engine_ids)
        for e, engine_view in view["engines"].items():
            engine_view["model"] = ", ".join(sorted(set(
                k[0] for k in groups if k[1] == e and k[0]))) or None
    else:
        # V0 has one engine and no engine label.
        view["engines"] = {"0": _aggregate(list(groups.values()))}
        view["engines"]["0"]["model"] = ", ".join(m for m in model_names if m) or None
    view["model"] = ", ".join(m for m in model_names if m) or None
    view["models"] = dict(
        (m, _aggregate([g for k, g in groups.items() if k[0] == m])) for m in model_names)
    return view


# The HTTP handlers that serve inference: their answers are what clients see, beside the engine's
# own counters (vLLM 0.32 entrypoints/serve/instrumentator/metrics.py: prometheus-fastapi-
# instrumentator's http_requests_total{handler, method, status}, status grouped as "2xx".."5xx").
INFERENCE_HANDLERS = ("/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/embeddings",
                      "/v1/messages", "/invocations", "/v1/audio/transcriptions", "/v1/audio/translations")
EDGE_FIELDS = ("process_start_time", "http_requests_total", "http_5xx_total")


def edge_counters(samples):
    """What the HTTP layer and the process say beside the engine's series (samples from
    _prom.parse): {"process_start_time": the API server's start (prometheus_client's process
    collector), "http_requests_total" and "http_5xx_total": answers of the inference handlers,
    all and 5xx; 0 before the first answer of a process that reports its start}. A value not exposed, not a finite number 0 or more, or in a series repeated in
    the body is None (the normaliser lists the repeated series as invalid)."""
    repeated = set((name, frozenset(labels.items())) for name, labels, unused in repeated_series(samples))
    start, total, errors, bad = None, None, None, False
    for s in samples:
        if s.name not in ("process_start_time_seconds", "http_requests_total"):
            continue
        if (s.name, frozenset(s.labels.items())) in repeated or _finite(s.value) is None or s.value < 0:
            if s.name == "process_start_time_seconds":
                start = False
            else:
                bad = True
            continue
        if s.name == "process_start_time_seconds":
            start = s.value if start is None else False
        elif s.labels.get("handler") in INFERENCE_HANDLERS:
            total = (total or 0) + s.value
            status = str(s.labels.get("status", ""))
            if status.startswith("5"):
                errors = (errors or 0) + s.value
            elif errors is None:
                errors = 0
    if start and total is None:
        # prometheus-fastapi-instrumentator writes a handler's series at its first answer: a
        # process that reports its start and no inference answer yet has answered none
        total = errors = 0
    if bad:
        total = errors = None
    return {"process_start_time": start if start else None, "http_requests_total": total,
            "http_5xx_total": errors if total is not None else None}


def _engine_sort_key(engine):
    return (0, int(engine), "") if _is_rank(engine) else (1, 0, engine)
