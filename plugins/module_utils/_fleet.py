# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Sample many vLLM servers at once from one module run.

Each target has its own window (``TargetWindow``): a number of samples at its own cadence, then,
while the diagnosis says the window only looks like a stall or an outage, more samples until it
is decided (as ``_probe.sample_until_decided``). ``run_windows`` steps every window with at most
``concurrency`` requests in flight: a worker takes whichever sample is due next and never waits
out a target's interval, so a run lasts about one window plus the sampling work, and a target
that hangs holds one worker for its own request only.

The transport is injected (``connect(target) -> fetch``), as in ``_probe``. Used by cache_gate
(``targets``) and canary_analysis (``canary``, ``baseline``). Standard library only.
"""

from __future__ import annotations

import copy
import heapq
import threading
import time

from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import LIMIT_NAMES
from ansible_collections.kvfleet.vllm.plugins.module_utils._probe import (
    extension_delay, redact_url, sample)

__all__ = ["TARGET_OPTIONS", "TargetWindow", "check_target_limits", "record_limits", "run_windows",
           "target_limits", "target_options"]

# The suboptions of a list of servers (cache_gate's targets, canary_analysis' canary and
# baseline): documented in each module as its own option's suboptions.
TARGET_OPTIONS = dict(
    name=dict(type="str", required=True),
    url=dict(type="str", required=True),
    host=dict(type="str"),
    api_key=dict(type="str", no_log=True),
    max_num_seqs=dict(type="int"),
    max_num_batched_tokens=dict(type="int", no_log=False),
    max_num_active_seqs=dict(type="int"),
    max_model_len=dict(type="int"),
)


def target_options():
    """A fresh copy of TARGET_OPTIONS for one argument spec."""
    return copy.deepcopy(TARGET_OPTIONS)


def target_limits(params, target):
    """A target's own scheduler limits; a limit it leaves out is the module's (None when the
    module has no such option)."""
    return dict((name, target.get(name) if target.get(name) is not None else params.get(name))
                for name in LIMIT_NAMES)


def record_limits(record):
    """A target's scheduler limits from a deployment record's instance (the server role's):
    max_num_seqs its own or in 'limits', the others in 'limits'; a limit left out, or not a
    positive whole number, is not set. The deploy's analysis targets and the restart guard's
    canary are built with it."""
    limits = record.get("limits") if isinstance(record.get("limits"), dict) else {}
    out = {}
    for name in ("max_num_seqs", "max_num_batched_tokens", "max_num_active_seqs", "max_model_len"):
        value = (record.get(name) if name == "max_num_seqs" else None) or limits.get(name)
        if isinstance(value, bool) or not value:
            continue
        try:
            value = int(value)
        except (TypeError, ValueError):
            continue
        if value > 0:
            out[name] = value
    return out


def check_target_limits(targets, option="targets"):
    """None, or why a target's scheduler limit cannot be (the message names the field)."""
    for i, target in enumerate(targets or []):
        for name in LIMIT_NAMES:
            if target.get(name) is not None and target[name] < 1:
                return "%s[%d].%s must be 1 or more, got %s" % (option, i, name, target[name])
    return None


class TargetWindow(object):
    """One target's window, taken one sample at a time (step) so that a worker never holds a
    target while it waits for its next sample.

    `samples` samples, each `interval` s after the previous one was due (and more, up to
    `max_samples`, while more() says so); then judge(snaps) (a diagnosis); with `extend`, more samples while it has `pending` entries (extension_delay).
    watch(window), when given, runs after each sample (it may set `stop`). Once `stop` is set the
    window ends at its next step, without extension. After the last step: snaps, result (the
    judgement, None when it failed), extended (seconds added), error (the exception that ended
    the window early, or None) and seconds (wall time from the first request).
    """

    def __init__(self, target, connect, samples, interval, judge, extend=True, watch=None,
                 stop=None, more=None, max_samples=None):
        self.target, self.connect, self.judge = target, connect, judge
        self.samples, self.interval, self.extend = samples, interval, extend
        # more(): whether to go on past `samples` (up to max_samples), asked once they are taken
        self.more, self.max_samples = more, max_samples or samples
        self.watch, self.stop = watch, stop
        self.url = redact_url(target["url"])
        self.fetch = None
        self.snaps, self.result, self.extended, self.error = [], None, 0.0, None
        self.started = self.begun = self.seconds = None

    def stopped(self):
        return self.stop is not None and self.stop.is_set()

    def step(self):
        """Take the next sample; returns when the next one is due (time.monotonic()), or None
        once the window is over."""
        try:
            if self.started is None:
                self.started = time.monotonic()
                self.fetch = self.connect(self.target)
            self.snaps.append(sample(self.fetch, self.url))
            if self.watch is not None:
                self.watch(self)
            taken = len(self.snaps)
            wanted = taken < self.samples or (
                self.more is not None and taken < self.max_samples and self.more())
            if wanted and not self.stopped():
                # as sample_window: each sample `interval` s after the previous one was due
                return self.started + taken * self.interval
            self.result = self.judge(self.snaps)
            if self.extend and not self.stopped():
                if self.begun is None:
                    self.begun = time.time()
                delay = extension_delay(self.result, self.snaps, self.interval, time.time(),
                                        self.begun)
                if delay is not None:
                    return time.monotonic() + delay
            self.extended = round(time.time() - self.begun, 2) if self.begun is not None else 0.0
        except Exception as exc:  # anything unexpected is this target's finding, not the run's
            self.error = exc
        self.seconds = round(time.monotonic() - self.started, 2)
        return None


def run_windows(windows, concurrency, stop=None, name="kvfleet-gate"):
    """Step every window (anything with step() -> next due time or None) until all are over,
    with at most `concurrency` steps at a time. Once `stop` (a threading.Event) is set, every
    window's next step is due at once. Returns the number of workers."""
    due = [(0.0, i) for i in range(len(windows))]   # a heap of (when, window index)
    busy = [0]
    cond = threading.Condition()

    def worker():
        while True:
            with cond:
                while True:
                    if not due and not busy[0]:
                        cond.notify_all()
                        return
                    wait = (due[0][0] - time.monotonic()) if due else None
                    if wait is not None and (wait <= 0 or (stop is not None and stop.is_set())):
                        unused, index = heapq.heappop(due)
                        busy[0] += 1
                        break
                    cond.wait(wait)
            following = windows[index].step()
            with cond:
                busy[0] -= 1
                if following is not None:
                    heapq.heappush(due, (following, index))
                cond.notify_all()

    workers = [threading.Thread(target=worker, name="%s-%d" % (name, i))
               for i in range(min(concurrency, len(windows)))]
    for thread in workers:
        thread.daemon = True
        thread.start()
    for thread in workers:
        thread.join()
    return len(workers)
