# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Render monitor results as a Prometheus textfile-collector file (node_exporter). Stdlib only."""

from __future__ import annotations

import math

from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import CAUSE_IDS, VERDICTS
from ansible_collections.kvfleet.vllm.plugins.module_utils._latency import METRICS, QUANTILES
from ansible_collections.kvfleet.vllm.plugins.module_utils._trends import TREND_IDS

__all__ = ["GPU_HEALTH_VALUES", "render"]

# name, help, where the value comes from: (section, key)
_GAUGES = (
    ("kvfleet_vllm_kv_cache_usage_ratio", "KV cache usage, 0..1 (vLLM kv_cache_usage_perc or gpu_cache_usage_perc).", ("snap", "kv_cache_usage")),
    ("kvfleet_vllm_kv_cache_blocks", "Blocks in the KV cache pool.", ("snap", "num_gpu_blocks")),
    ("kvfleet_vllm_used_blocks_estimate", "Blocks in use, usage x (blocks - 1).", ("snap", "used_blocks_estimate")),
    ("kvfleet_vllm_block_size_tokens", "Tokens per KV cache block.", ("snap", "block_size")),
    ("kvfleet_vllm_requests_running", "Requests being processed.", ("snap", "requests_running")),
    ("kvfleet_vllm_requests_waiting", "Requests queued.", ("snap", "requests_waiting")),
    ("kvfleet_vllm_request_rate", "Requests finished per second since the previous sample.", ("rates", "requests_finished_per_s")),
    ("kvfleet_vllm_generation_tokens_rate", "Tokens generated per second since the previous sample.", ("rates", "generation_tokens_per_s")),
    ("kvfleet_vllm_preemption_rate", "Preemptions per second since the previous sample.", ("rates", "preemptions_per_s")),
    ("kvfleet_vllm_unit_restarts", "Restarts systemd made of the instance since its last requested start (NRestarts).", ("snap", "unit_restarts")),
    ("kvfleet_vllm_memory_rss_bytes", "Resident memory of the instance's server and its engine cores (VmRSS).",
     ("unit_memory", "rss_bytes")),
    ("kvfleet_vllm_memory_gpu_bytes", "GPU memory the instance's server and its engine cores hold (NVML); absent without NVML.",
     ("unit_memory", "gpu_bytes")),
)


def _escape(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels):
    return "{%s}" % ",".join('%s="%s"' % (k, _escape(v)) for k, v in sorted(labels.items()))


def _number(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


# kvfleet_vllm_gpu_health's values (_nvml.HEALTH_VERDICTS in order)
GPU_HEALTH_VALUES = {"healthy": 0, "degraded": 1, "unhealthy": 2}


def render(results, gpus=None):
    """results: [{'instance', 'snapshot' (or None), 'diagnosis', 'trends', 'sustained'}].

    gpus: the host's GPUs with their health (_nvml.collect's 'gpus'), for kvfleet_vllm_gpu_health
    and kvfleet_vllm_gpu_health_reason; None (a CPU host, no NVML) leaves both families out.
    """
    families = []

    def family(name, help_text, samples):
        lines = ["# HELP %s %s" % (name, help_text), "# TYPE %s gauge" % name]
        lines += ["%s%s %s" % (name, _labels(**labels), _number(value)) for labels, value in samples]
        families.append("\n".join(lines))

    family("kvfleet_vllm_up", "1 when the instance answered /metrics and /health 200.",
           [({"instance": r["instance"]}, bool(r["snapshot"] and r["snapshot"].get("healthy")))
            for r in results])
    for name, help_text, (section, key) in _GAUGES:
        samples = []
        for r in results:
            snap = r["snapshot"] or {}
            source = snap if section == "snap" else (snap.get(section) or {})
            if source.get(key) is not None:  # absent, not 0, when vLLM does not expose it
                samples.append(({"instance": r["instance"]}, source[key]))
        family(name, help_text, samples)
    samples = []
    for r in results:
        lat = (r["snapshot"] or {}).get("latency")
        for metric, _families in METRICS:
            entry = lat.get(metric) if isinstance(lat, dict) else None
            for name, q in QUANTILES:
                value = entry.get(name) if isinstance(entry, dict) else None
                # absent, not 0 or NaN, when there is no quantile (see the entry's reason)
                if (isinstance(value, (int, float)) and not isinstance(value, bool)
                        and math.isfinite(value)):
                    samples.append(({"instance": r["instance"], "metric": metric,
                                     "quantile": repr(q)}, value))
    family("kvfleet_vllm_latency_seconds",
           "Latency quantile over the monitor window, from vLLM's histograms (metric: ttft, itl, "
           "queue, e2e; see docs/kv-cache.md).", samples)
    family("kvfleet_vllm_verdict", "1 for the instance's current cache_gate verdict.",
           [({"instance": r["instance"], "verdict": v}, r["diagnosis"]["verdict"] == v)
            for r in results for v in VERDICTS])
    family("kvfleet_vllm_cause", "1 when the diagnosis names this cause now.",
           [({"instance": r["instance"], "cause": c},
             c in [x["id"] for x in r["diagnosis"]["causes"]]) for r in results for c in CAUSE_IDS])
    family("kvfleet_vllm_cause_sustained", "1 when the cause was named in most recent samples.",
           [({"instance": r["instance"], "cause": c}, c in r.get("sustained", []))
            for r in results for c in CAUSE_IDS])
    family("kvfleet_vllm_trend", "1 when the history shows the trend (see docs/kv-cache.md).",
           [({"instance": r["instance"], "trend": t}, bool((r.get("trends") or {}).get(t)))
            for r in results for t in TREND_IDS])
    family("kvfleet_vllm_last_sample_timestamp_seconds", "Unix time of the last sample.",
           [({"instance": r["instance"]}, r["time"]) for r in results])
    if gpus is not None:
        read = [g for g in gpus if (g.get("health") or {}).get("verdict") in GPU_HEALTH_VALUES]
        # absent, not 0, for a GPU whose health NVML cannot read
        family("kvfleet_vllm_gpu_health", "The GPU's health as NVML reads it: 0 healthy, 1 degraded, "
               "2 unhealthy (see docs/gpu-health.md).",
               [({"gpu": g["index"], "uuid": g.get("uuid") or ""},
                 GPU_HEALTH_VALUES[g["health"]["verdict"]]) for g in read])
        family("kvfleet_vllm_gpu_health_reason", "1 for each reason that makes the GPU degraded or unhealthy.",
               [({"gpu": g["index"], "uuid": g.get("uuid") or "", "reason": r["id"],
                  "severity": r.get("severity", "")}, 1)
                for g in read for r in g["health"].get("reasons") or []])
    return "\n".join(families) + "\n"
