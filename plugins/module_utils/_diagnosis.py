# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Diagnose a window of vLLM snapshots: rates, causes, verdict.

The causes are the real ones behind "usage below 80% but requests queue" (scheduler limits) and
real KV exhaustion; none is "fragmentation", which PagedAttention does not have. Standard library
only: the gate module, the restart guard and the monitor on hosts all call this one function.

The rules run on each engine's own view (data-parallel ranks each have their own scheduler,
cache and --max-num-seqs); the server's verdict is its worst engine's. A cause is critical only
when the window proves it; a window that merely looks like a stall or an outage says so in
``pending``, and callers that can keep sampling (``_probe.sample_until_decided``) do so until
it is decided.
"""

from __future__ import annotations

from ansible_collections.kvfleet.vllm.plugins.module_utils._dp_links import links_per_engine
from ansible_collections.kvfleet.vllm.plugins.module_utils._trends import fitted_slope
from ansible_collections.kvfleet.vllm.plugins.module_utils._version import release

__all__ = ["CAUSE_IDS", "DEFAULT_THRESHOLDS", "LIMIT_NAMES", "MEMORY_GROWTH", "MIN_RESTARTS", "VERDICTS",
           "add_rates", "cause_advice", "diagnose", "gpu_unhealthy", "group_member_lost", "memory_growth",
           "since_last_down",
           "unit_restarts"]

CAUSE_IDS = ("engine_down", "probe_errors", "kv_cache_exhausted", "concurrency_cap",
             "active_seq_cap", "token_budget", "head_of_line_blocking", "scheduler_limit", "admission_stall",
             "deferred_backlog", "deferred_deadlock", "admission_rejections", "request_errors",
             "request_aborts", "invalid_metrics", "crash_loop", "memory_growth", "group_member_lost",
             "gpu_unhealthy")
VERDICTS = ("healthy", "degraded", "unhealthy")
DEFAULT_THRESHOLDS = {
    # usage at or above this counts as "near full"; below it the cache has room.
    "kv_usage_high": 0.9,
    # a stall needs requests waiting and no engine step seen for this long. A single prefill
    # step holds every gauge and counter still until it ends, so this must be longer than any
    # real step.
    "stall_seconds": 60.0,
    # engine errors over finished requests at or above this (with min_request_errors) make
    # request_errors critical; client aborts at or above it make request_aborts a warning.
    "error_ratio_unhealthy": 0.5,
    # fewer errors (or aborts) than this in the window are never more than a warning (or noise)
    "min_request_errors": 3,
    # preemptions in the window, and per finished request, that make exhaustion critical
    "min_preemptions": 3,
    "preemption_ratio_unhealthy": 0.5,
    # requests deferred (LoRA budget, KV transfer, grammar) that, with tokens flowing into
    # prefill and none out of decode, make the deferred-request deadlock
    "deferred_deadlock_min": 100,
}
# systemd restarts of the unit in the window that make crash_loop critical (fewer: a warning);
# the host program reads them, the gate module cannot
MIN_RESTARTS = 3
# What makes the resident memory of one server process (all the unit's processes: the API server,
# the engine cores) a memory_growth: over at least min_seconds and min_points monitor samples of
# the same process, a fitted growth of at least ratio of its start and of min_bytes, the later
# half above the earlier. Leaks over days have been reported on several vLLM releases; hours of
# steady growth at a steady load are the signal, a warm-up is not (min_seconds, the fit).
MEMORY_GROWTH = {"ratio": 0.2, "min_bytes": 256 * 1024 ** 2, "min_seconds": 6 * 3600, "min_points": 6}
# Scheduler settings that /metrics does not show; the gate takes them as options.
LIMIT_NAMES = ("max_num_seqs", "max_num_batched_tokens", "max_num_active_seqs", "max_model_len")

# counter field -> rate name
_RATES = (
    ("preemptions_total", "preemptions_per_s"),
    ("admission_rejections_total", "admission_rejections_per_s"),
    ("request_errors_total", "request_errors_per_s"),
    ("request_aborts_total", "request_aborts_per_s"),
    ("requests_finished_total", "requests_finished_per_s"),
    ("prompt_tokens_total", "prompt_tokens_per_s"),
    ("generation_tokens_total", "generation_tokens_per_s"),
)
# What moves when an engine completes a step: a trailing run of samples where none of these
# changed, with requests pending, is a window without a step.
_PROGRESS = ("prompt_tokens_total", "generation_tokens_total", "requests_finished_total",
             "preemptions_total", "engine_steps_total", "request_errors_total",
             "request_aborts_total", "kv_cache_usage", "requests_running", "requests_waiting",
             "waiting_deferred")
_SEVERITY_ORDER = {"critical": 0, "warning": 1}
# free tokens below this many mean prompts: no room for admission (the running sequences'
# decode takes blocks every step while the next prompt waits for its whole size)
_ROOM_FACTOR = 2
# tokens per step, per running sequence, above which steps are prefill-bound, not decode-bound
_PREFILL_HEAVY = 4
# admission_rejections{reason} -> the flag that set the limit (vLLM 0.32 v1/engine/async_llm.py)
_QUEUE_FLAGS = {"max_num_queued_reqs": "--max-num-queued-reqs",
                "max_num_queued_tokens": "--max-num-queued-tokens"}

_ADVICE = {
    "engine_down": (
        "The engine is not serving. Read the unit's journal for the start-up or crash error; a "
        "restart cures a dead engine, not a rejected flag or a model that does not fit."),
    "probe_errors": (
        "Some samples could not be read (a timeout or refused connection) while the others show "
        "a live engine: an overloaded API server or a network hiccup, not an outage. Raise the "
        "probe timeout if it recurs under load."),
    "kv_cache_exhausted": (
        "The KV cache is full and requests wait for blocks: real exhaustion, not fragmentation. "
        "Give the cache more memory (--gpu-memory-utilization or --kv-cache-memory-bytes), lower "
        "--max-model-len, or add replicas."),
    "concurrency_cap": (
        "Requests queue because the engine already runs its maximum number of sequences while "
        "the cache has room: a scheduler cap, not fragmentation. Raise --max-num-seqs (it "
        "applies to each data-parallel rank) or add replicas."),
    "active_seq_cap": (
        "Requests queue because the engine runs --max-num-active-seqs sequences, below "
        "--max-num-seqs, while the cache has room. Raise --max-num-active-seqs."),
    "token_budget": (
        "Each engine step is filled to --max-num-batched-tokens while requests wait and the cache "
        "has room: the token budget per step is the limit. Raise --max-num-batched-tokens."),
    "head_of_line_blocking": (
        "Requests wait although blocks are free and the engine is below its sequence cap: the "
        "first waiting request cannot be scheduled and the FCFS scheduler does not skip it."),
    "scheduler_limit": (
        "Requests wait while the cache has room and the number of running requests holds flat "
        "below --max-num-seqs: a scheduler limit lower than that cap admits no more "
        "(--max-num-active-seqs, or the token budget of a step), not fragmentation and not a "
        "long prompt at the head of the queue."),
    "admission_stall": (
        "Requests are waiting but no engine step completed for the whole window while /health "
        "may still say 200: a hung engine or an admission stall. Only a restart recovers it; "
        "read the journal and upgrade past a release with a known scheduler deadlock."),
    "deferred_backlog": (
        "Requests are deferred, not waiting for capacity: the LoRA budget (--max-loras), a KV "
        "transfer or a grammar compile holds them. Raise --max-loras or check the KV connector; "
        "more --max-num-seqs does not help."),
    "deferred_deadlock": (
        "Hundreds of requests are deferred while prompt tokens still flow and almost nothing is "
        "generated: the deferred-request deadlock (vLLM 0.27). Only a restart recovers it; "
        "upgrade past the affected release."),
    "admission_rejections": (
        "The server turns requests away with HTTP 503 because a queue limit is reached."),
    "request_errors": (
        "Requests finished with finished_reason=error (HTTP 500): a request-level failure such "
        "as a grammar error or a failed KV load. Read the server log."),
    "request_aborts": (
        "Many requests were aborted by the server itself: a stop without drain "
        "(--shutdown-timeout 0), a pause or sleep with mode=abort, or requests refused during "
        "shutdown (vLLM does not count a client that disconnects). Not an engine fault; check "
        "who stops or pauses this server."),
    "crash_loop": (
        "systemd restarted the instance after exits nobody asked for (an engine killed by the "
        "kernel's OOM killer, a CUDA/Xid error, a crash at start). Read the journal lines "
        "'exited: result=...' and the errors before them; a start limit hit leaves the unit "
        "failed until someone fixes the cause and starts it."),
    "memory_growth": (
        "The server's resident memory (every process of its unit), or the GPU memory those "
        "processes hold, has grown steadily for hours: a leak, not a cache (vLLM's KV cache is "
        "allocated once at start). A restart frees it: "
        "let the scheduled restart cure it (mode when_degraded with memory_growth among "
        "vllm_restart_causes), and report the version and the workload upstream."),
    "group_member_lost": (
        "An engine of this serving group is gone: its links into the head closed (read on the "
        "head's host). vLLM does not notice: the head still answers /health and shows the engine's "
        "last metrics, and the requests it routes there hang. A member cannot rejoin a head that "
        "serves: restart the whole group (kvfleet.vllm.rolling_restart), after reading the lost "
        "member's journal for why it went."),
    "gpu_unhealthy": (
        "A GPU this server runs on is not healthy as NVML reads it (kvfleet.vllm.gpu_info): "
        "uncorrectable ECC errors, a pending row remap or page retirement, a critical Xid or a GPU "
        "off the bus make it unhealthy; heat or power slowdown, a narrowed PCIe link or NVLink "
        "errors degraded. The other causes may be its symptoms, and a restart of vLLM does not "
        "cure it: do what each reason says (docs/gpu-health.md), or move the instance off the GPU."),
    "invalid_metrics": (
        "The server's /metrics holds values that cannot be true (NaN or infinite values, negative "
        "counts, usage outside 0..1, bad block counts, duplicated series); the diagnosis ignored "
        "them, so it cannot call this server healthy. Check what answers on this address (a proxy, "
        "another exporter, a patched vLLM) and compare with a plain vLLM of the same version."),
}


def cause_advice(cause_id):
    """The advice every finding of this cause starts with (the Prometheus alerts carry it too)."""
    return _ADVICE[cause_id]


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


def _n(value):
    return value or 0


def _cap_waiting(view):
    """Requests waiting for capacity. vLLM's waiting gauge includes the deferred ones
    (loggers.py: 'Sum of all reasons equals vllm:num_requests_waiting'); before the by-reason
    gauge existed there was no deferral to tell apart."""
    if view.get("waiting_capacity") is not None:
        return view["waiting_capacity"]
    return _n(view.get("requests_waiting"))


def _pending_work(view):
    return _n(view.get("requests_running")) + _n(view.get("requests_waiting")) >= 1


def _cause(cid, severity, evidence, advice=None):
    text = _ADVICE[cid] + ((" " + advice) if advice else "")
    return {"id": cid, "severity": severity, "evidence": evidence, "advice": text}


def _is_down(snap):
    return bool(snap.get("error")) or not snap.get("healthy")


def _down_evidence(snaps, down):
    last = down[-1]
    evidence = {"samples_down": len(down), "samples": len(snaps)}
    if last.get("error"):
        evidence["error"] = last["error"]
    else:
        evidence["health_status"] = last.get("health_status")
        evidence["health_error"] = last.get("health_error")
    return evidence


def _availability(snaps):
    """(cause or None, pending or None, outage proven).

    Critical only when the latest two samples are down, or most are (a /health that times out
    once under load is not an outage). One trailing down sample is unconfirmed: a warning, and
    one more sample decides.
    """
    down = [s for s in snaps if _is_down(s)]
    if not down:
        return None, None, False
    trailing = 0
    for snap in reversed(snaps):
        if not _is_down(snap):
            break
        trailing += 1
    ev = _down_evidence(snaps, down)
    if trailing >= 2 or len(down) * 2 > len(snaps) or len(snaps) == 1:
        return _cause("engine_down", "critical", dict(ev, confirmed=True)), None, True
    if trailing == 1:
        return (_cause("engine_down", "warning", dict(ev, confirmed=False)),
                {"id": "engine_down", "engine": None, "seconds_left": 0.0}, False)
    return _cause("probe_errors", "warning", ev), None, False


def _engine_ids(snaps):
    ids = []
    for snap in snaps:
        for e in (snap.get("engines") or {"0": None}):
            if e not in ids:
                ids.append(e)
    return ids


def _engine_series(snaps, engine):
    """The engine's views, oldest first, with each sample's time (a sample without per-engine
    views is one engine's view itself)."""
    out = []
    for snap in snaps:
        engines = snap.get("engines")
        if engines:
            view = engines.get(engine)
            if view is None:
                continue
            view = dict(view, time=snap["time"])
            view.setdefault("version", snap.get("version"))
        elif engine == "0":
            view = snap
        else:
            continue
        out.append(view)
    return out


def _pinned(values, cap):
    """At the cap in at least half the samples (gauges dip between steps)."""
    hits = sum(1 for v in values if v >= cap)
    return bool(values) and hits * 2 >= len(values)


def _free_blocks(view):
    blocks, used = view.get("num_gpu_blocks"), view.get("used_blocks_estimate")
    if not blocks or used is None:
        return None
    return max(blocks - 1 - used, 0)


def _min_free_tokens(views):
    """The fewest free tokens among `views` (free blocks x block size); None if none can tell."""
    known = [_free_blocks(v) * v["block_size"] for v in views
             if _free_blocks(v) is not None and v.get("block_size")]
    return min(known) if known else None


def _mean_prompt(first, last):
    """Mean prompt tokens of the requests that finished prefill: in the window when any did,
    else over the server's life (vllm:request_prompt_tokens; the counters as a fallback).
    Before any request finished (a fresh server under a first load of long generations), the
    prompt tokens counted so far over the requests admitted: vLLM counts a prompt at its first
    token (vllm/v1/metrics/stats.py, IterationStats.update_from_output, 0.32.0), so these are
    the running requests, less any still in their first prefill."""
    d_sum = _delta(first, last, "request_prompt_tokens_sum")
    d_cnt = _delta(first, last, "request_prompt_tokens_count")
    if d_cnt:
        return d_sum / float(d_cnt) if d_sum is not None else None
    if last.get("request_prompt_tokens_count"):
        return last.get("request_prompt_tokens_sum", 0) / float(last["request_prompt_tokens_count"])
    fin = _delta(first, last, "requests_finished_total")
    prompt = _delta(first, last, "prompt_tokens_total")
    if fin and prompt is not None:
        return prompt / float(fin)
    admitted = _n(last.get("requests_finished_total")) + _n(last.get("requests_running"))
    if last.get("prompt_tokens_total") and admitted:
        return last["prompt_tokens_total"] / float(admitted)
    return None


def _cache_size(view, limits):
    """The cache in tokens and in sequences (of max_model_len when given)."""
    blocks, size = view.get("num_gpu_blocks"), view.get("block_size")
    if not blocks or not size:
        return {}
    tokens = blocks * size
    out = {"cache_tokens": tokens, "cache_blocks": blocks}
    if limits.get("max_model_len"):
        out["sequences_of_max_model_len"] = tokens // limits["max_model_len"]
    return out


def _distinct(series):
    """The series with each run of identical readings (no step between them) kept once."""
    out = [series[0]]
    for view in series[1:]:
        if any(view.get(f) != out[-1].get(f) for f in _PROGRESS):
            out.append(view)
    return out


def _waiting(view):
    return _n(view.get("requests_waiting")) >= 1


def _no_progress(series):
    """Seconds of the trailing run in which nothing an engine step moves has changed and
    requests waited throughout (0.0 when the last two samples differ or nothing waits).

    Running requests alone do not count: one prefill step holds them still for as long as it
    takes (57 s for a 1201-token prompt on the loaded 2-core CPU of a real capture).
    """
    if len(series) < 2 or not _waiting(series[-1]):
        return 0.0
    k = len(series) - 1
    while (k > 0 and _waiting(series[k - 1])
           and all(series[k - 1].get(f) == series[k].get(f) for f in _PROGRESS)):
        k -= 1
    return series[-1]["time"] - series[k]["time"]


def _minor(version):
    """'0.32.0+cpu' -> (0, 32); None when it cannot be read."""
    parts = release(version)
    return tuple(parts[:2]) if parts is not None and len(parts) >= 2 else None


def _hol_advice(version):
    """The remedy that works on this version.

    From 0.26 (checked to 0.33) a waiting request is admitted only when its whole prompt fits in
    free blocks (SchedulerConfig.scheduler_reserve_full_isl, default on; kv_cache_manager.py), so
    a bigger token budget cannot clear the head; before, only the first chunk had to fit.
    """
    minor = _minor(version)
    if minor is not None and minor >= (0, 26):
        return ("vLLM %s admits a waiting request only when its whole prompt fits in free "
                "blocks, so --max-num-batched-tokens cannot clear it: lower --max-model-len, "
                "route long prompts to their own instances, or admit on the first chunk with "
                "--no-scheduler-reserve-full-isl (more preemptions under pressure)." % version)
    return ("The head request needs room for its first chunk: raise --max-num-batched-tokens "
            "or set --long-prefill-token-threshold, lower --max-model-len, or route long prompts "
            "to their own instances.")


def _engine_causes(series, engine, th, limits):
    """The causes of one engine's window: (causes, state, pending)."""
    first, last = series[0], series[-1]
    model = last.get("model")
    where = {"engine": engine, "model": model}
    causes, pending = [], []
    n = len(series)

    def d(field):
        return _delta(first, last, field) if n > 1 else None

    if _n(last.get("engines_sleeping")) >= 1:
        # vllm:engine_sleep_state awake=0: put to sleep on purpose (--enable-sleep-mode); no
        # step runs, which is not a stall and not something a restart should "cure".
        return [], "sleeping", []

    usage = [v["kv_cache_usage"] for v in series if v.get("kv_cache_usage") is not None]
    max_usage = max(usage) if usage else None
    near_full = max_usage is not None and max_usage >= th["kv_usage_high"]
    # A frozen engine repeats one reading: count it once. A queue is sustained when most
    # readings and the latest show it.
    readings = _distinct(series)
    cap_queue = [v for v in readings if _cap_waiting(v) >= 1]
    sustained = _cap_waiting(readings[-1]) >= 1 and len(cap_queue) * 2 >= len(readings)
    running = [_n(v.get("requests_running")) for v in series]
    preempted, finished = d("preemptions_total"), d("requests_finished_total")
    prompt, gen = d("prompt_tokens_total"), d("generation_tokens_total")
    base = dict(where, kv_cache_usage_max=max_usage,
                requests_waiting=[v.get("requests_waiting") for v in series],
                requests_running=[v.get("requests_running") for v in series])
    size = _cache_size(last, limits)

    # --- the engine made no step for the whole trailing run
    quiet = _no_progress(series)
    stalled = False
    if quiet >= th["stall_seconds"]:
        stalled = True
        causes.append(_cause("admission_stall", "critical", dict(
            base, seconds_without_progress=round(quiet, 2),
            stall_seconds=th["stall_seconds"],
            waiting_deferred=[v.get("waiting_deferred") for v in series]),
            "No token, step or gauge moved for %.0f s with %d request(s) waiting."
            % (quiet, _n(last.get("requests_waiting")))))
    elif quiet > 0:
        # may be one long prefill step: keep sampling rather than guess
        pending.append(dict(where, id="admission_stall",
                            seconds_left=round(th["stall_seconds"] - quiet, 2)))

    # --- cache really full. Usage alone under-reads it: from 0.26 a waiting request is admitted
    # only when its whole prompt fits, so a cache whose free blocks cannot hold a prompt of the
    # recent mean size is full for admission at 80% (a real 64-block cache under 32 requests
    # of ~200 tokens sat at 0.86); and vLLM preempts only when blocks run out.
    # Judged at the window's fullest reading that had requests waiting, not only the last: a
    # live run on a 64-block cache read 57 blocks used with 28 waiting, then 41 free two seconds
    # later as running sequences finished, and the queue never moved.
    free_tokens = _min_free_tokens([v for v in series if _cap_waiting(v) >= 1] or [last])
    mean_prompt = _mean_prompt(first, last)
    no_room = (sustained and free_tokens is not None and bool(mean_prompt)
               and free_tokens < _ROOM_FACTOR * mean_prompt)
    near_full = near_full or no_room or _n(preempted) >= th["min_preemptions"]
    if near_full and (sustained or _n(preempted) > 0):
        ratio = round(preempted / float(max(_n(finished), 1)), 4) if preempted else 0.0
        critical = (_n(preempted) >= th["min_preemptions"]
                    and ratio >= th["preemption_ratio_unhealthy"])
        ev = dict(base, kv_usage_high=th["kv_usage_high"], preemptions_in_window=preempted,
                  finished_in_window=finished, preemptions_per_finished=ratio,
                  min_preemptions=th["min_preemptions"],
                  preemption_ratio_unhealthy=th["preemption_ratio_unhealthy"],
                  waiting_capacity=[v.get("waiting_capacity") for v in series],
                  num_gpu_blocks=last.get("num_gpu_blocks"),
                  used_blocks_estimate=last.get("used_blocks_estimate"),
                  free_tokens_estimate=free_tokens,
                  mean_prompt_tokens=round(mean_prompt, 1) if mean_prompt else None,
                  admits_a_mean_prompt=not no_room, **size)
        advice = None
        if size.get("cache_tokens"):
            advice = "The cache holds %d tokens (%d blocks of %s)%s." % (
                size["cache_tokens"], size["cache_blocks"], last.get("block_size"),
                (", %d sequence(s) of --max-model-len %d" % (
                    size["sequences_of_max_model_len"], limits["max_model_len"]))
                if "sequences_of_max_model_len" in size else "")
        causes.append(_cause("kv_cache_exhausted", "critical" if critical else "warning", ev,
                             advice))

    # --- deferred requests (not capacity)
    deferred = [_n(v.get("waiting_deferred")) for v in series]
    deferred_max = max(deferred) if deferred else 0
    flowing_in = _n(prompt) > 0
    starved = gen is not None and _n(gen) <= 0.05 * _n(prompt)
    if deferred_max >= th["deferred_deadlock_min"] and flowing_in and starved:
        causes.append(_cause("deferred_deadlock", "critical", dict(
            base, waiting_deferred=deferred, prompt_tokens_in_window=prompt,
            generation_tokens_in_window=gen,
            prefix_cache_hit_rate=[v.get("prefix_cache_hit_rate") for v in series],
            deferred_deadlock_min=th["deferred_deadlock_min"])))
    elif sum(1 for x in deferred if x >= 1) * 2 >= n and deferred_max >= 1:
        causes.append(_cause("deferred_backlog", "warning", dict(
            base, waiting_deferred=deferred)))

    # --- requests wait for capacity while the cache has room: which scheduler limit?
    # (not while the whole window is one frozen reading: a step in progress tells nothing yet)
    frozen = quiet > 0 and quiet >= last["time"] - first["time"]
    if sustained and not near_full and not stalled and not frozen:
        causes.append(_queue_cause(series, first, last, base, running, limits, size))

    # --- request outcomes
    errors, aborts = d("request_errors_total"), d("request_aborts_total")
    if errors:
        ratio = round(errors / float(max(_n(finished), errors)), 4)
        critical = errors >= th["min_request_errors"] and ratio >= th["error_ratio_unhealthy"]
        causes.append(_cause("request_errors", "critical" if critical else "warning", dict(
            where, errors_in_window=errors, aborts_in_window=aborts,
            finished_in_window=finished, error_ratio=ratio,
            min_request_errors=th["min_request_errors"],
            error_ratio_unhealthy=th["error_ratio_unhealthy"])))
    if aborts and aborts >= th["min_request_errors"]:
        ratio = round(aborts / float(max(_n(finished), aborts)), 4)
        if ratio >= th["error_ratio_unhealthy"]:
            causes.append(_cause("request_aborts", "warning", dict(
                where, aborts_in_window=aborts, finished_in_window=finished, abort_ratio=ratio)))

    idle = all(not _pending_work(v) for v in series) and not gen
    return causes, "idle" if idle else "serving", pending


def _queue_cause(series, first, last, base, running, limits, size):
    """Requests wait for capacity, the cache has room: name the limit, with numbers."""
    cap, active = limits.get("max_num_seqs"), limits.get("max_num_active_seqs")
    budget = limits.get("max_num_batched_tokens")
    free = _free_blocks(last)
    block = last.get("block_size")
    free_tokens = free * block if free is not None and block else None
    mean_prompt = _mean_prompt(first, last)
    ev = dict(base, max_num_seqs=cap, free_blocks_estimate=free, free_tokens_estimate=free_tokens,
              block_size=block, mean_prompt_tokens=round(mean_prompt, 1) if mean_prompt else None,
              **size)
    run_now = _n(last.get("requests_running"))
    used = last.get("used_blocks_estimate")
    extra = None
    if free is not None and used and run_now:
        # sequences of the running ones' mean size that the free blocks would still hold
        extra = int(free / (float(used) / run_now))
    ev["estimated_extra_sequences"] = extra

    if active and (cap is None or active < cap) and _pinned(running, active):
        ev["max_num_active_seqs"] = active
        return _cause("active_seq_cap", "warning", ev,
                      "The engine runs %d of --max-num-active-seqs %d%s." % (
                          run_now, active, (" and the free blocks hold about %d more; try "
                                            "--max-num-active-seqs %d" % (extra, active + extra))
                          if extra else ""))
    if cap is not None and _pinned(running, cap):
        ev["cap_known"] = True
        advice = "The engine runs %d of --max-num-seqs %d." % (run_now, cap)
        if extra:
            advice += (" Its free blocks hold about %d more sequence(s) of the running ones' "
                       "size: --max-num-seqs %d would use them." % (extra, cap + extra))
        return _cause("concurrency_cap", "warning", ev, advice)
    prompt = _delta(first, last, "prompt_tokens_total")
    gen = _delta(first, last, "generation_tokens_total")
    if prompt and gen is not None and gen < max(running + [1]) and (cap is None or max(running) < cap):
        # The running requests prefill (prompt tokens advance, next to no token is generated)
        # while others wait below the cap: a long prompt holds the step's token budget, chunk
        # after chunk, and the short requests behind it are not admitted. Not a limit that
        # admits more: neither the cap nor a plateau of decoding requests.
        ev.update(prompt_tokens_in_window=prompt, generation_tokens_in_window=gen,
                  running_max=max(running), cap_known=cap is not None)
        return _cause("head_of_line_blocking", "warning", ev, _hol_advice(last.get("version")))
    steps = _delta(first, last, "engine_steps_total")
    batched = _delta(first, last, "batched_tokens_total")
    per_step = batched / float(steps) if steps and batched is not None else None
    if per_step is not None:
        ev["tokens_per_step"] = round(per_step, 1)
    if budget and per_step is not None:
        ev["max_num_batched_tokens"] = budget
        if per_step >= 0.9 * budget:
            ev["budget_known"] = True
            return _cause("token_budget", "warning", ev,
                          "Steps carried %.0f tokens on average against a budget of %d."
                          % (per_step, budget))
    room = free_tokens is None or not mean_prompt or free_tokens >= mean_prompt
    top = max(running + [1])
    if not budget and per_step is not None and room and per_step >= _PREFILL_HEAVY * top:
        # Decode adds one token per running sequence and step; steps carrying many times more
        # are prefill chunks cut to a budget (a capture: 63 tokens per step, 7 running, 40
        # waiting, 10% usage under --max-num-batched-tokens 64).
        ev.update(budget_known=False, likely_limit="max_num_batched_tokens",
                  why="steps carry %.0f tokens each, %.0f times the %d running sequences: "
                      "prefill chunks cut to a token budget, while the cache has room"
                      % (per_step, per_step / top, max(running)))
        return _cause("token_budget", "warning", ev,
                      "Pass max_num_batched_tokens to the gate to confirm; the budget is "
                      "probably about %.0f tokens." % per_step)
    plateau = max(running)
    if cap is not None and len(running) > 1 and 0 < plateau < cap and _pinned(running, plateau) and room:
        return _scheduler_limit(ev, running, plateau, cap, active, budget, per_step, free_tokens,
                                mean_prompt)
    if cap is None:
        # No cap given: do not call a flat `running` a cap; weigh the free blocks against the
        # size of recent prompts.
        ev["cap_known"] = False
        if free_tokens is not None and mean_prompt:
            if free_tokens >= mean_prompt:
                ev["likely_limit"] = "max_num_seqs"
                ev["why"] = ("the free blocks hold %d tokens, room for %d prompt(s) of the recent "
                             "mean size (%.0f tokens), yet requests wait: a scheduler limit "
                             "(most often --max-num-seqs) holds them"
                             % (free_tokens, free_tokens // mean_prompt, mean_prompt))
                return _cause("concurrency_cap", "warning", ev,
                              "Pass max_num_seqs to the gate to confirm; with %d running, "
                              "--max-num-seqs is probably %d." % (run_now, max(running)))
            ev["likely_limit"] = "free_blocks"
            ev["why"] = ("the free blocks hold %d tokens, less than a prompt of the recent mean "
                         "size (%.0f tokens)" % (free_tokens, mean_prompt))
        else:
            ev["likely_limit"] = None
            ev["why"] = "no cap given and no prompt sizes seen: the limit cannot be told apart"
    return _cause("head_of_line_blocking", "warning", ev, _hol_advice(last.get("version")))


def _scheduler_limit(ev, running, plateau, cap, active, budget, per_step, free_tokens, mean_prompt):
    """`running` flat below a known --max-num-seqs, requests waiting, blocks with room: a lower
    limit. vLLM 0.32.0's scheduler (v1/core/sched/scheduler.py, schedule()) stops admitting
    waiting requests when len(running) reaches max_num_active_seqs (max_num_seqs when unset) or
    when the step's token budget (max_num_scheduled_tokens, else max_num_batched_tokens) is
    spent; the running requests take theirs from it first, one token each while they decode.
    /metrics shows neither limit, so both stay candidates until the gate is given them."""
    held = sum(1 for v in running if v >= plateau)
    unknown = [name for name, value in (("max_num_active_seqs", active),
                                        ("max_num_batched_tokens", budget)) if not value]
    ev.update(running_plateau=plateau, samples_at_plateau=held, limits_not_given=unknown)
    if free_tokens is not None and mean_prompt:
        ev["prompts_the_free_blocks_hold"] = int(free_tokens // mean_prompt)
        room = ("%d tokens, room for %d prompt(s) of the recent mean size (%.0f tokens)"
                % (free_tokens, free_tokens // mean_prompt, mean_prompt))
    elif free_tokens is not None:
        room = "%d tokens" % free_tokens
    else:
        room = "room (usage below the high mark)"
    advice = ("Running holds at %d in %d of %d samples, below --max-num-seqs %d, while requests "
              "wait and the free blocks hold %s. vLLM stops admitting when the running requests "
              "reach --max-num-active-seqs, or when a step's token budget (--max-num-batched-tokens, "
              "or --max-num-scheduled-tokens when set) is spent, each running request taking its "
              "tokens first" % (plateau, held, len(running), cap, room))
    if per_step is not None:
        advice += "; steps here carried %.0f tokens, %.1f per running request" % (
            per_step, per_step / float(plateau))
    if unknown:
        advice += (". Pass %s to the gate to tell which; a budget of about %.0f tokens or "
                   "--max-num-active-seqs %d would hold it here. Raise that limit."
                   % (" and ".join(unknown), per_step if per_step is not None else plateau, plateau))
    else:
        advice += (". Neither --max-num-active-seqs %d nor --max-num-batched-tokens %d is reached: "
                   "check --max-num-scheduled-tokens." % (active, budget))
    return _cause("scheduler_limit", "warning", ev, advice)


def _rejections(snaps):
    """Queue-limit rejections: counted by the API server (no engine label)."""
    readable = [s for s in snaps if not _is_down(s)]
    if len(readable) < 2:
        return None
    first, last = readable[0], readable[-1]
    rejected = _delta(first, last, "admission_rejections_total")
    if not rejected:
        return None
    window = last["time"] - first["time"]
    by_reason = {}
    before = first.get("admission_rejections_by_reason") or {}
    for reason, value in (last.get("admission_rejections_by_reason") or {}).items():
        grew = value - before.get(reason, 0)
        if grew > 0:
            by_reason[reason] = grew
    flags = [_QUEUE_FLAGS.get(r, r) for r in sorted(by_reason)]
    advice = ("The limit that fired: %s. Raise it, or add capacity so the queue drains faster."
              % ", ".join("%s (%d rejected)" % (f, by_reason[r])
                          for f, r in zip(flags, sorted(by_reason)))) if by_reason else None
    return _cause("admission_rejections", "warning", {
        "rejections_in_window": rejected, "by_reason": by_reason,
        "per_second": round(rejected / window, 4) if window > 0 else None}, advice)


def unit_restarts(points, min_restarts=MIN_RESTARTS):
    """The crash_loop cause from the unit's state over the window, or None.

    points: oldest first, each {'time', 'unit_restarts' (systemd's NRestarts), 'unit_active_state',
    'unit_result'}. NRestarts counts automatic restarts since the last start someone asked for,
    so a drop is such a start, not a negative count.
    """
    seen = [p for p in points if isinstance(p.get("unit_restarts"), int)]
    if not seen:
        return None
    grew = 0
    for before, after in zip(seen, seen[1:]):
        if after["unit_restarts"] >= before["unit_restarts"]:
            grew += after["unit_restarts"] - before["unit_restarts"]
        else:
            grew += after["unit_restarts"]
    last = seen[-1]
    gave_up = last.get("unit_active_state") == "failed" and last["unit_restarts"] > 0
    if not grew and not gave_up:
        return None
    critical = gave_up or grew >= min_restarts
    return _cause("crash_loop", "critical" if critical else "warning", {
        "restarts_in_window": grew, "restarts_total": last["unit_restarts"],
        "active_state": last.get("unit_active_state"), "result": last.get("unit_result"),
        "gave_up": gave_up, "min_restarts": min_restarts,
        "window_seconds": round(last["time"] - seen[0]["time"], 2)})


def group_member_lost(snapshots):
    """The group_member_lost cause from a serving group head's links (each sample's
    'group_links': links, remote_engines, by_address; the host program and the gate read them on
    the head's host), weighed against links_per_engine(the sample's vLLM version), or None.
    Critical once the last two samples that have them both lack links (an engine does not come
    back), a warning when only the last does."""
    seen = []
    for snap in snapshots:
        g = snap.get("group_links")
        if not isinstance(g, dict) or not all(isinstance(g.get(k), int) and not isinstance(g.get(k), bool)
                                              for k in ("links", "remote_engines")):
            continue
        seen.append((g, links_per_engine(snap.get("version")) * g["remote_engines"]))
    if not seen or seen[-1][0]["links"] >= seen[-1][1]:
        return None
    last, expected = seen[-1]
    per_engine = links_per_engine(next((s.get("version") for s in reversed(snapshots) if s.get("version")), None))
    critical = len(seen) == 1 or seen[-2][0]["links"] < seen[-2][1]
    by_address = last.get("by_address") if isinstance(last.get("by_address"), dict) else {}
    return _cause("group_member_lost", "critical" if critical else "warning", {
        "links": last["links"], "expected_links": expected, "links_per_engine": per_engine,
        "engines_lost": -(-(expected - last["links"]) // per_engine),
        "remote_engines": last["remote_engines"], "links_by_address": by_address,
        "samples_with_loss": sum(1 for g, want in seen if g["links"] < want), "samples": len(seen)},
        "Here: %d of %d links from the group's %d remote engine(s) are open%s." % (
            last["links"], expected, last["remote_engines"],
            (" (%s)" % ", ".join("%s: %s" % kv for kv in sorted(by_address.items()))) if by_address else ""))


def memory_growth(points, settings=None):
    """The memory_growth cause from the monitor's history, or None.

    points: oldest first, each {'time', 'unit_memory': {'rss_bytes', 'main_pid'[, 'gpu_bytes']}}
    (lines without it are skipped). Only the samples of the last point's process count: a restart
    frees the memory, and a new process starts a new series. Resident memory is read first, then
    GPU memory (NVML; vLLM takes its KV cache at start, so what it holds should stay flat).
    settings: MEMORY_GROWTH's keys.
    """
    cfg = dict(MEMORY_GROWTH, **dict((k, v) for k, v in (settings or {}).items() if v is not None))
    return _growth(points, cfg, "rss_bytes", "rss") or _growth(points, cfg, "gpu_bytes", "gpu")


def _growth(points, cfg, key, prefix):
    seen = [(p["time"], p["unit_memory"]) for p in points
            if isinstance(p.get("unit_memory"), dict) and isinstance(p.get("time"), (int, float))
            and isinstance(p["unit_memory"].get(key), int) and not isinstance(p["unit_memory"][key], bool)
            and p["unit_memory"][key] > 0]
    if not seen:
        return None
    pid = seen[-1][1].get("main_pid")
    same = [(t, m[key]) for t, m in seen if m.get("main_pid") == pid]
    if len(same) < cfg["min_points"]:
        return None
    times, used = [t for t, _r in same], [r for _t, r in same]
    span = times[-1] - times[0]
    if span < cfg["min_seconds"]:
        return None
    slope = fitted_slope(times, used)
    # the fitted memory at the first sample (the fit runs through the means)
    start = sum(used) / len(used) - slope * (sum(times) / len(times) - times[0])
    grown = slope * span
    half = len(used) // 2
    early, late = sum(used[:half]) / half, sum(used[half:]) / (len(used) - half)
    if start <= 0 or grown < cfg["min_bytes"] or grown / start < cfg["ratio"] or late <= early:
        return None
    return _cause("memory_growth", "warning", {
        "memory": "resident" if prefix == "rss" else "gpu",
        prefix + "_first_bytes": used[0], prefix + "_last_bytes": used[-1], "growth_fitted_bytes": int(grown),
        "growth_ratio": round(grown / start, 3), "bytes_per_hour": int(slope * 3600),
        "window_seconds": round(span, 1), "points": len(same), "main_pid": pid,
        "ratio": cfg["ratio"], "min_bytes": cfg["min_bytes"]},
        "Here: %s%.0f MiB -> %.0f MiB over %.1f h (+%.0f%%, %.0f MiB an hour)." % (
            "" if prefix == "rss" else "GPU memory ",
            used[0] / 1048576.0, used[-1] / 1048576.0, span / 3600.0, 100 * grown / start,
            slope * 3600 / 1048576.0))


def gpu_unhealthy(gpus):
    """The gpu_unhealthy cause from GPU health readings, or None.

    gpus: the GPUs the server runs on, as kvfleet.vllm.gpu_info returns them (or
    _nvml.collect): each with 'index', 'uuid', 'name' and 'health' ({'verdict', 'reasons'}).
    Critical when one is unhealthy, a warning when the worst is degraded; a GPU whose health
    NVML cannot read (verdict None) is no evidence either way.
    """
    sick = [g for g in gpus or [] if isinstance(g, dict) and isinstance(g.get("health"), dict)
            and g["health"].get("verdict") in ("unhealthy", "degraded")]
    if not sick:
        return None
    critical = any(g["health"]["verdict"] == "unhealthy" for g in sick)
    listed = [{"index": g.get("index"), "uuid": g.get("uuid"), "name": g.get("name"),
               "verdict": g["health"]["verdict"],
               "reasons": [dict((k, r.get(k)) for k in ("id", "severity", "evidence", "remedy"))
                           for r in g["health"].get("reasons") or [] if isinstance(r, dict)]}
              for g in sick]
    listed.sort(key=lambda g: (g["verdict"] != "unhealthy", str(g["index"])))
    return _cause("gpu_unhealthy", "critical" if critical else "warning", {
        "gpus": listed, "gpus_read": len(gpus)},
        "Here: %s." % "; ".join(
            "GPU %s%s is %s (%s)" % (g["index"], " (%s)" % g["uuid"] if g["uuid"] else "", g["verdict"],
                                     ", ".join("%s: %s" % (r["id"], r["remedy"]) for r in g["reasons"]))
            for g in listed))


def _gpu_first(causes, gpu):
    """A sick GPU explains the other symptoms (a dead engine, a full or stalled cache): its cause
    leads its severity, and names what it may explain."""
    if gpu is None:
        return causes
    gpu["evidence"]["may_explain"] = [c["id"] for c in causes]
    causes = [gpu] + causes
    causes.sort(key=lambda c: _SEVERITY_ORDER[c["severity"]])
    return causes


def diagnose(snapshots, max_num_seqs=None, thresholds=None, limits=None, unit_points=None,
             memory_points=None, memory_settings=None, gpu_health=None):
    """Snapshots (oldest first, with rates) -> {'verdict', 'state', 'causes', 'window_seconds',
    'engines', 'pending'}.

    limits: the scheduler settings /metrics does not show (LIMIT_NAMES); max_num_seqs is kept
    as its own argument for callers that know only that one. unit_points: the unit's restart
    counts over a longer span than the snapshots (unit_restarts); the snapshots' own otherwise.
    memory_points: the monitor's history with each sample's unit memory (memory_growth; the
    host program has it, the gate module does not). gpu_health: the GPUs the server runs on with
    their health (gpu_unhealthy); absent, no GPU is judged.
    """
    th = dict(DEFAULT_THRESHOLDS)
    th.update(dict((k, v) for k, v in (thresholds or {}).items() if v is not None))
    lim = dict((k, v) for k, v in (limits or {}).items() if v)
    if max_num_seqs:
        lim["max_num_seqs"] = max_num_seqs
    looping = unit_restarts(snapshots if unit_points is None else unit_points)
    down_cause, down_pending, outage = _availability(snapshots)
    sick_gpu = gpu_unhealthy(gpu_health) if gpu_health else None
    if outage:
        # Other rules read a live engine; a dead one can serve frozen metrics (facts §4).
        return _result(_gpu_first([down_cause] + ([looping] if looping else []), sick_gpu),
                       None, snapshots, {}, [])
    causes = [down_cause] if down_cause else []
    pending = [down_pending] if down_pending else []
    readable = [s for s in snapshots if not _is_down(s)]
    engines = {}
    for engine in _engine_ids(readable):
        series = _engine_series(readable, engine)
        if not series:
            continue
        found, state, waiting = _engine_causes(series, engine, th, lim)
        engines[engine] = {"model": series[-1].get("model"), "state": state,
                           "verdict": _verdict(found)}
        causes.extend(found)
        pending.extend(waiting)
    rejected = _rejections(snapshots)
    if rejected:
        causes.append(rejected)
    invalid = _invalid_metrics(readable)
    if invalid:
        causes.append(invalid)
    if looping:
        causes.append(looping)
    lost = group_member_lost(readable)
    if lost:
        causes.append(lost)
    leaking = memory_growth(memory_points, memory_settings) if memory_points else None
    if leaking:
        causes.append(leaking)
    states = set(e["state"] for e in engines.values())
    state = ("serving" if "serving" in states else "sleeping" if "sleeping" in states
             else "idle")
    # critical first; the order found within a severity
    causes.sort(key=lambda c: _SEVERITY_ORDER[c["severity"]])
    return _result(_gpu_first(causes, sick_gpu), state, snapshots, engines, pending)


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


def _verdict(causes):
    severities = set(c["severity"] for c in causes)
    return ("unhealthy" if "critical" in severities
            else "degraded" if severities else "healthy")


def _result(causes, state, snapshots, engines, pending):
    window = snapshots[-1]["time"] - snapshots[0]["time"] if len(snapshots) > 1 else 0.0
    return {"verdict": _verdict(causes), "state": state, "causes": causes,
            "window_seconds": round(window, 2), "engines": engines, "pending": pending}
