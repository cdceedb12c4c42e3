# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Diagnose a window of vLLM snapshots: rates, causes, verdict.

The causes are the real ones behind "usage below 80% but requests queue" (scheduler limits) and
real KV exhaustion; none is "fragmentation", which PagedAttention does not have. Standard library
only: the gate module, the restart guard and the monitor on hosts all call this one function.
"""

from __future__ import annotations

__all__ = ["CAUSE_IDS", "DEFAULT_THRESHOLDS", "VERDICTS", "add_rates", "diagnose", "since_last_down"]

CAUSE_IDS = ("engine_down", "kv_cache_exhausted", "concurrency_cap", "head_of_line_blocking",
             "admission_stall", "admission_rejections", "request_errors", "invalid_metrics")
VERDICTS = ("healthy", "degraded", "unhealthy")
DEFAULT_THRESHOLDS = {
    # usage at or above this counts as "near full"; below it the cache has room.
    "kv_usage_high": 0.9,
    # an admission stall needs at least this many seconds without a single token.
    "stall_seconds": 3.0,
    # errors+aborts over finished requests at or above this make request_errors critical.
    "error_ratio_unhealthy": 0.5,
}

# counter field -> rate name
_RATES = (
    ("preemptions_total", "preemptions_per_s"),
    ("admission_rejections_total", "admission_rejections_per_s"),
    ("request_errors_total", "request_errors_per_s"),
    ("requests_finished_total", "requests_finished_per_s"),
    ("prompt_tokens_total", "prompt_tokens_per_s"),
    ("generation_tokens_total", "generation_tokens_per_s"),
)

_ADVICE = {
    "engine_down": (
        "The engine is not serving. Read the unit's journal for the start-up or crash error; a "
        "restart cures a dead engine, not a rejected flag or a model that does not fit."),
    "kv_cache_exhausted": (
        "The KV cache is full and requests wait for blocks: real exhaustion, not fragmentation. "
        "Give the cache more memory (--gpu-memory-utilization or --kv-cache-memory-bytes), lower "
        "--max-model-len, or add replicas."),
    "concurrency_cap": (
        "Requests queue because the server already runs its maximum number of sequences while "
        "the cache has room: a scheduler cap, not fragmentation. Raise --max-num-seqs or add "
        "replicas."),
    "head_of_line_blocking": (
        "Requests wait although blocks are free and the server is below its sequence cap: the "
        "first waiting request needs room for its whole prompt and the FCFS scheduler does not "
        "skip it. Lower --max-model-len, raise --max-num-batched-tokens (chunked prefill), or "
        "route long prompts to their own instances."),
    "admission_stall": (
        "Requests are queued or deferred but no token was produced while /health says 200: an "
        "admission stall (such as the vLLM 0.27 deferred-request deadlock). Only a restart "
        "recovers it; upgrade past the affected release."),
    "admission_rejections": (
        "The server turns requests away with HTTP 503 because its queue limits are reached: "
        "raise --max-num-queued-reqs / --max-num-queued-tokens or add capacity."),
    "request_errors": (
        "Requests finished with error or abort. Read the server log; aborts also come from "
        "clients that disconnect and from stops without --shutdown-timeout."),
    "invalid_metrics": (
        "The server's /metrics holds values that cannot be true (NaN or infinite values, negative "
        "counts, usage outside 0..1, bad block counts, duplicated series); the diagnosis ignored "
        "them, so it cannot call this server healthy. Check what answers on this address (a proxy, "
        "another exporter, a patched vLLM) and compare with a plain vLLM of the same version."),
}


def _delta(first, last, field):
    a, b = first.get(field), last.get(field)
    if a is None or b is None or b < a:  # absent, or the counter reset (server restarted)
        return None
    return b - a


def add_rates(snapshots):
    """Add 'rates' (per second, against the previous readable snapshot) to each snapshot."""
    prev = None
    for snap in snapshots:
        if snap.get("error"):
            continue
        rates = dict((name, None) for _f, name in _RATES)
        if prev is not None:
            dt = snap["time"] - prev["time"]
            if dt > 0:
                for field, name in _RATES:
                    d = _delta(prev, snap, field)
                    if d is not None:
                        rates[name] = round(d / dt, 4)
        snap["rates"] = rates
        prev = snap
    return snapshots


def since_last_down(snapshots):
    """The trailing run of snapshots after the last unreadable or unhealthy one.

    For a monitor whose samples are minutes apart: a server that was down a few samples ago and
    answers now was restarted; the older samples belong to another process (its counters reset)
    and must not keep it 'engine_down'. The last snapshot is always kept.
    """
    kept = []
    for snap in reversed(snapshots[:-1]):
        if snap.get("error") or not snap.get("healthy"):
            break
        kept.append(snap)
    return list(reversed(kept)) + snapshots[-1:]


def _queued(snap):
    waiting = snap.get("requests_waiting") or 0
    return waiting >= 1 or (snap.get("waiting_deferred") or 0) >= 1


def _cause(cid, severity, evidence):
    return {"id": cid, "severity": severity, "evidence": evidence, "advice": _ADVICE[cid]}


def _engine_down(snapshots):
    down = [s for s in snapshots if s.get("error") or not s.get("healthy")]
    if not down:
        return None
    last = down[-1]
    evidence = {"samples_down": len(down), "samples": len(snapshots)}
    if last.get("error"):
        evidence["error"] = last["error"]
    else:
        evidence["health_status"] = last.get("health_status")
        evidence["health_error"] = last.get("health_error")
    return _cause("engine_down", "critical", evidence)


def _pinned(queued, cap):
    """Running at the cap in at least half the queued samples (gauges dip between steps)."""
    hits = sum(1 for s in queued if (s.get("requests_running") or 0) >= cap)
    return hits * 2 >= len(queued)


def _infer_cap(queued):
    """Without a configured cap: running stayed at one value >= 1 while requests waited."""
    if len(queued) < 2:
        return None
    top = max(s.get("requests_running") or 0 for s in queued)
    if top < 1:
        return None
    at_top = sum(1 for s in queued if (s.get("requests_running") or 0) == top)
    return top if at_top >= 2 and at_top * 2 >= len(queued) else None


def _extra_sequences(snap):
    """How many more sequences of the running ones' average size the free blocks would hold."""
    blocks, used, running = (snap.get("num_gpu_blocks"), snap.get("used_blocks_estimate"),
                             snap.get("requests_running"))
    if not blocks or used is None or not running or used <= 0:
        return None
    return int((blocks - 1 - used) / (float(used) / running))


def diagnose(snapshots, max_num_seqs=None, thresholds=None):
    """Snapshots (oldest first, with rates) -> {'verdict', 'state', 'causes', 'window'}."""
    th = dict(DEFAULT_THRESHOLDS)
    th.update(dict((k, v) for k, v in (thresholds or {}).items() if v is not None))
    causes = []
    down = _engine_down(snapshots)
    if down:
        # Other rules read a live engine; a dead one can serve frozen metrics (facts §4).
        return _result([down], None, snapshots)

    first, last = snapshots[0], snapshots[-1]
    window = last["time"] - first["time"]
    deltas = dict((f, _delta(first, last, f)) for f, _n in _RATES) if len(snapshots) > 1 else {}
    usage = [s["kv_cache_usage"] for s in snapshots if s.get("kv_cache_usage") is not None]
    max_usage = max(usage) if usage else None
    queued = [s for s in snapshots if _queued(s)]
    sustained = len(queued) * 2 >= len(snapshots) and bool(queued)
    preempting = (deltas.get("preemptions_total") or 0) > 0
    near_full = max_usage is not None and max_usage >= th["kv_usage_high"]

    base = {"kv_cache_usage_max": max_usage,
            "requests_waiting": [s.get("requests_waiting") for s in snapshots],
            "requests_running": [s.get("requests_running") for s in snapshots]}

    if near_full and (sustained or preempting):
        ev = dict(base, kv_usage_high=th["kv_usage_high"],
                  preemptions_in_window=deltas.get("preemptions_total"),
                  waiting_capacity=[s.get("waiting_capacity") for s in snapshots],
                  num_gpu_blocks=last.get("num_gpu_blocks"),
                  used_blocks_estimate=last.get("used_blocks_estimate"))
        causes.append(_cause("kv_cache_exhausted", "critical" if preempting else "warning", ev))

    stalled = False
    gen, prompt = deltas.get("generation_tokens_total"), deltas.get("prompt_tokens_total")
    if (len(snapshots) >= 2 and len(queued) == len(snapshots) and window >= th["stall_seconds"]
            and gen == 0 and prompt in (0, None)):
        stalled = True
        causes.append(_cause("admission_stall", "critical", dict(
            base, window_seconds=round(window, 2), generation_tokens_in_window=gen,
            prompt_tokens_in_window=prompt,
            waiting_deferred=[s.get("waiting_deferred") for s in snapshots])))

    if sustained and not near_full and not stalled:
        cap, inferred = max_num_seqs, False
        if cap is None:
            cap, inferred = _infer_cap(queued), True
        if cap is not None and _pinned(queued, cap):
            causes.append(_cause("concurrency_cap", "warning", dict(
                base, max_num_seqs=cap, cap_inferred=inferred,
                estimated_extra_sequences=_extra_sequences(last))))
        else:
            free = None
            if last.get("num_gpu_blocks") and last.get("used_blocks_estimate") is not None:
                free = last["num_gpu_blocks"] - 1 - last["used_blocks_estimate"]
            causes.append(_cause("head_of_line_blocking", "warning", dict(
                base, max_num_seqs=max_num_seqs, free_blocks_estimate=free,
                block_size=last.get("block_size"))))

    rejected = deltas.get("admission_rejections_total")
    if rejected:
        causes.append(_cause("admission_rejections", "warning", {
            "rejections_in_window": rejected,
            "per_second": round(rejected / window, 4) if window > 0 else None}))

    errors = deltas.get("request_errors_total")
    if errors:
        finished = deltas.get("requests_finished_total") or errors
        ratio = round(float(errors) / finished, 4)
        causes.append(_cause(
            "request_errors", "critical" if ratio >= th["error_ratio_unhealthy"] else "warning",
            {"errors_in_window": errors, "finished_in_window": finished, "error_ratio": ratio,
             "error_ratio_unhealthy": th["error_ratio_unhealthy"]}))

    invalid = _invalid_metrics(snapshots)
    if invalid:
        causes.append(invalid)

    idle = (all(not s.get("requests_running") and not _queued(s) for s in snapshots)
            and not gen)
    return _result(causes, "idle" if idle else "serving", snapshots, window)


def _invalid_metrics(snapshots):
    """Values the normaliser refused (its 'invalid' list): the other rules read them as absent,
    which must never add up to 'healthy'."""
    bad = [s for s in snapshots if s.get("invalid")]
    if not bad:
        return None
    seen, listed = set(), []
    for snap in bad:
        for entry in snap["invalid"]:
            key = (entry.get("field"), entry.get("reason"))
            if key not in seen:
                seen.add(key)
                listed.append(entry)
    return _cause("invalid_metrics", "warning", {
        "samples_with_invalid": len(bad), "samples": len(snapshots),
        "fields": sorted(set(str(e.get("field")) for e in listed)), "invalid": listed[:20]})


def _result(causes, state, snapshots, window=None):
    severities = set(c["severity"] for c in causes)
    verdict = ("unhealthy" if "critical" in severities
               else "degraded" if severities else "healthy")
    if window is None and len(snapshots) > 1:
        window = snapshots[-1]["time"] - snapshots[0]["time"]
    return {"verdict": verdict, "state": state, "causes": causes,
            "window_seconds": round(window, 2) if window is not None else 0.0}
