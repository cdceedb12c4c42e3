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
    _WITHOUT_REQUESTS, DEFAULT_MIN_REQUESTS, DEFAULT_THRESHOLDS, analyse)
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


class _Verdicts(object):
    """The verdict so far, worked out after each sample of the first canary server: whether the
    window may end (enough requests on both sides once `duration` is reached; until then, or up
    to `max_duration`, the window goes on: it counts requests, not only the clock), and whether
    the evidence is already overwhelming (a fail at thresholds.early_alpha for
    thresholds.early_intervals evaluations in a row: the window ends early)."""

    def __init__(self, windows, min_requests, thresholds, warmup, duration, stop, before=None):
        self.windows, self.min_requests, self.warmup, self.before = windows, min_requests, warmup, before
        self.th = dict(DEFAULT_THRESHOLDS)
        self.th.update(thresholds or {})
        self.duration, self.stop = duration, stop
        self.enough = False
        self.fails = 0
        self.early = None   # the early verdict's reason, when it ended the window
        self.lock = threading.Lock()

    def _now(self, early):
        sides = dict((side, []) for side in SIDES)
        for side, target, limits, w in self.windows:
            sides[side].append({"name": target["name"], "host": target.get("host"),
                                "samples": list(w.snaps), "limits": limits})
        th = dict(self.th, alpha=self.th["early_alpha"]) if early else self.th
        return analyse(sides["canary"], sides["baseline"], min_requests=self.min_requests,
                       thresholds=th, warmup=self.warmup, before=self.before, early=early)

    def watch(self, window):
        """After each sample of the first canary server."""
        with self.lock:
            if self.stop.is_set() or len(window.snaps) < 3:
                return
            elapsed = window.snaps[-1].get("time", 0) - window.snaps[0].get("time", 0)
            if elapsed <= self.warmup:
                return
            result = self._now(early=True)
            # early only on the whole evidence: enough canary requests for every check, a canary
            # that finished nothing while the baseline's share says it should have, or one that
            # holds a queue (or a cache) its baseline does not, which needs no finished request
            # (a slow canary's few requests are judged at the end, on every check)
            failed = [c["metric"] for c in result["checks"] if c["result"] == "fail"]
            whole = (result["requests"]["canary"] >= self.min_requests
                     or (result["requests"]["canary"] == 0 and "traffic_share" in failed)
                     or any(m in _WITHOUT_REQUESTS for m in failed))
            decided = result["verdict"] == "fail" and (whole or "fails at once" in result["reason"])
            self.fails = self.fails + 1 if decided else 0
            if self.fails >= self.th["early_intervals"]:
                self.early = result["reason"]
                self.stop.set()
                return
            if elapsed >= self.warmup + self.duration and not self.enough:
                requests = result["requests"]
                self.enough = (requests["canary"] >= self.min_requests
                               and (not any(s == "baseline" for s, unused, unused2, unused3 in self.windows)
                                    or requests["baseline"] >= self.min_requests))

    def more(self):
        return not self.enough

    def final(self, thresholds):
        """The thresholds and the look of the final judgement. When the early verdict ended the
        window, the same look (the per-request tests) at the caller's alpha: the early verdict
        failed at the stricter early_alpha on nearly the same samples, so it fails here too,
        where early_alpha again could miss by a sample the other windows read after it."""
        return thresholds, self.early is not None


def _both(first, second):
    def watch(window):
        first(window)
        second(window)
    return watch


def run_analysis(canary, baseline, connect, duration, interval, min_requests=DEFAULT_MIN_REQUESTS,
                 thresholds=None, defaults=None, warmup=0, max_duration=None, before=None):
    """Sample canary and baseline (lists of targets: name, url, the scheduler limits) for
    `warmup` + `duration` s every `interval` s, then judge; while either side has finished
    fewer than `min_requests`, go on up to `warmup` + `max_duration` s; end early on a critical
    cause or overwhelming evidence (_Verdicts). defaults: the caller's scheduler limits for a
    target that leaves one out. Returns _canary.analyse's result with, per target, its url
    (redacted), seconds and extended_seconds, 'samples': {side: {name: snapshots}} without the
    raw histogram counts, and 'decided_early' (the early verdict's reason, or None). before: the
    canary host's result before its change (_canary.analyse's, the difference of differences)."""
    stop = threading.Event()
    windows = []
    longest = max(duration, max_duration or duration)
    plan = _Verdicts(windows, min_requests, thresholds, warmup, duration, stop, before)
    for side, targets in (("canary", canary), ("baseline", baseline or [])):
        for target in targets:
            limits = target_limits(defaults or {}, target)
            watch = _proves_critical(limits, stop) if side == "canary" else None
            if side == "canary" and not any(w[0] == "canary" for w in windows):
                watch = _both(watch, plan.watch)   # the first canary server paces the verdicts
            windows.append((side, target, limits, TargetWindow(
                target, connect, samples_in(warmup + duration, interval), interval, _judge(limits),
                extend=True, watch=watch, stop=stop, more=plan.more,
                max_samples=samples_in(warmup + longest, interval))))
    run_windows([w for unused, unused2, unused3, w in windows], min(len(windows), MAX_CONCURRENCY),
                stop=stop, name="kvfleet-canary")
    sides = dict((side, []) for side in SIDES)
    for side, target, limits, w in windows:
        diagnosis = _failed(w.error) if w.error is not None else w.result
        if warmup and w.error is None and not any(
                c.get("severity") == "critical" for c in (diagnosis or {}).get("causes") or []):
            diagnosis = None   # judged from the end of the warm-up on (analyse works it out)
        sides[side].append({"name": target["name"], "host": target.get("host"), "samples": w.snaps,
                            "diagnosis": diagnosis, "limits": limits})
    final, early = plan.final(thresholds)
    result = analyse(sides["canary"], sides["baseline"], min_requests=min_requests,
                     thresholds=final, warmup=warmup, before=before, early=early)
    result["decided_early"] = plan.early
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
