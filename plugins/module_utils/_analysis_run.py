# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Run one canary analysis: sample every server of both sides at once, then judge.

``run_analysis`` is the whole of it, written once for the two callers: the canary_analysis
module (on the controller or a delegate, HTTP through Ansible's urls) and the host program's
analysis after a scheduled restart (urllib on the host). The transport is injected
(``connect(target) -> fetch``, as ``_fleet`` takes it). Sampling is ``_fleet``'s; the judgement
``_canary.analyse``; a canary window that proves a critical cause ends every window early,
since the verdict is then fail whatever follows. Standard library only.
"""

from __future__ import annotations

import threading

from ansible_collections.kvfleet.vllm.plugins.module_utils._canary import (
    DEFAULT_MIN_REQUESTS, analyse)
from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import add_rates, diagnose
from ansible_collections.kvfleet.vllm.plugins.module_utils._fleet import (
    TargetWindow, run_windows, target_limits)
from ansible_collections.kvfleet.vllm.plugins.module_utils._probe import scrub

__all__ = ["MAX_CONCURRENCY", "SIDES", "run_analysis", "samples_in"]

MAX_CONCURRENCY = 64
SIDES = ("canary", "baseline")


def samples_in(duration, interval):
    """Samples per server of a window (a little slack: 60 / 0.1 is 599.99... in floating point)."""
    return int(duration / interval + 1e-9) + 1


def _failed(error):
    """The diagnosis of a server whose window ended on an unexpected error (as cache_gate's)."""
    text = scrub("%s: %s" % (type(error).__name__, error))
    return {"verdict": "unhealthy", "state": None, "pending": [], "causes": [{
        "id": "engine_down", "severity": "critical", "evidence": {"error": text},
        "advice": "The analysis could not sample this server: %s" % text}]}


def _judge(limits):
    return lambda snaps: diagnose(add_rates(snaps), limits=limits)


def _proves_critical(limits, stop):
    """watch() of a canary window: stop every window once this one proves a critical cause
    (decided, not pending)."""
    def watch(window):
        if len(window.snaps) < 2 or stop.is_set():
            return
        result = diagnose(add_rates([dict(s) for s in window.snaps]), limits=limits)
        if not result["pending"] and any(c["severity"] == "critical" for c in result["causes"]):
            stop.set()
    return watch


def run_analysis(canary, baseline, connect, duration, interval, min_requests=DEFAULT_MIN_REQUESTS,
                 thresholds=None, defaults=None):
    """Sample canary and baseline (lists of targets: name, url, the scheduler limits) for
    `duration` s every `interval` s, then judge. defaults: the caller's scheduler limits for a
    target that leaves one out. Returns _canary.analyse's result with, per target, its url
    (redacted), seconds and extended_seconds, and 'samples': {side: {name: snapshots}} without
    the raw histogram counts."""
    stop = threading.Event()
    windows = []
    for side, targets in (("canary", canary), ("baseline", baseline or [])):
        for target in targets:
            limits = target_limits(defaults or {}, target)
            windows.append((side, target, limits, TargetWindow(
                target, connect, samples_in(duration, interval), interval, _judge(limits),
                extend=True, watch=_proves_critical(limits, stop) if side == "canary" else None,
                stop=stop)))
    run_windows([w for unused, unused2, unused3, w in windows], min(len(windows), MAX_CONCURRENCY),
                stop=stop, name="kvfleet-canary")
    sides = dict((side, []) for side in SIDES)
    for side, target, limits, w in windows:
        diagnosis = _failed(w.error) if w.error is not None else w.result
        sides[side].append({"name": target["name"], "samples": w.snaps, "diagnosis": diagnosis,
                            "limits": limits})
    result = analyse(sides["canary"], sides["baseline"], min_requests=min_requests,
                     thresholds=thresholds)
    for side, target, limits, w in windows:
        for entry in result["targets"]:
            if entry["name"] == target["name"]:
                entry.update(host=target.get("host"), url=w.url, seconds=w.seconds,
                             extended_seconds=w.extended)
    samples = dict((side, {}) for side in SIDES)
    for side, target, limits, w in windows:
        for snap in w.snaps:
            snap.pop("histograms", None)  # raw bucket counts: what the checks were computed from
        samples[side][target["name"]] = w.snaps
    result["samples"] = samples
    return result
