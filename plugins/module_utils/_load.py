# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A bounded, open-loop request load (the analysis_load module): each target gets one request
every 1/rate seconds for `duration` seconds, at most `concurrency` of them in flight; a request
due while the target is at its cap is not sent and counted as skipped (a load that queues
behind a slow server would hide that it is slow). Stdlib only; the sending is injected.
"""

from __future__ import annotations

import threading
import time

# what a generated request may ask of a server, at most
MAX_RATE = 100.0
MAX_CONCURRENCY = 64
MAX_DURATION = 3600.0


def check(targets, prompts, duration, rate, concurrency, max_tokens):
    """None, or the words naming the first option that is wrong."""
    if not targets:
        return "targets must list at least one server"
    if not prompts or not all(isinstance(p, str) and p for p in prompts):
        return "prompts must be a non-empty list of non-empty strings"
    if not 0 < duration <= MAX_DURATION:
        return "duration must be more than 0 and at most %d seconds, got %r" % (MAX_DURATION, duration)
    if not 0 < rate <= MAX_RATE:
        return "rate must be more than 0 and at most %g requests per second per target, got %r" % (MAX_RATE, rate)
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        return "concurrency must be 1 to %d, got %r" % (MAX_CONCURRENCY, concurrency)
    if not 1 <= max_tokens <= 1000000:
        return "max_tokens must be 1 or more, got %r" % (max_tokens,)
    return None


class _Target(object):
    def __init__(self, name, send):
        self.name, self.send = name, send
        self.lock = threading.Lock()
        self.in_flight = 0
        self.counts = {"sent": 0, "ok": 0, "failed": 0, "skipped": 0}
        self.errors = []
        self.seconds = []
        self.threads = []

    def one(self, index):
        t0 = time.monotonic()
        try:
            error = self.send(index)
        except Exception as exc:  # pylint: disable=broad-except  # a request never stops the load
            error = "%s: %s" % (type(exc).__name__, exc)
        with self.lock:
            self.in_flight -= 1
            if error:
                self.counts["failed"] += 1
                if len(self.errors) < 3:
                    self.errors.append(str(error)[:300])
            else:
                self.counts["ok"] += 1
                self.seconds.append(time.monotonic() - t0)

    def tick(self, index, concurrency):
        with self.lock:
            if self.in_flight >= concurrency:
                self.counts["skipped"] += 1
                return
            self.in_flight += 1
            self.counts["sent"] += 1
        thread = threading.Thread(target=self.one, args=(index,), name="kvfleet-load")
        thread.daemon = True
        thread.start()
        self.threads.append(thread)

    def result(self):
        done = sorted(self.seconds)
        return dict(self.counts, name=self.name, errors=list(self.errors),
                    median_seconds=round(done[len(done) // 2], 3) if done else None,
                    p95_seconds=round(done[min(int(len(done) * 0.95), len(done) - 1)], 3) if done else None)


def run(senders, duration, rate, concurrency, wait, clock=time.monotonic, sleep=time.sleep, stop=None):
    """senders: [(name, send(index) -> None or an error's words)]. Sends for `duration` seconds,
    or until stop() says so (looked at before each round of requests), then waits up to `wait`
    seconds for what is in flight. -> {'targets': [per target: name, sent, ok, failed, skipped,
    errors, median_seconds, p95_seconds], 'seconds', 'unfinished', 'stopped' (by stop())}."""
    targets = [_Target(name, send) for name, send in senders]
    start = clock()
    period = 1.0 / rate
    index = 0
    stopped = False
    while True:
        due = start + index * period
        now = clock()
        if due - start >= duration:
            break
        if due > now:
            sleep(due - now)
        if stop is not None and stop():
            stopped = True
            break
        for target in targets:
            target.tick(index, concurrency)
        index += 1
    end = clock() + wait
    for target in targets:
        for thread in target.threads:
            thread.join(max(end - clock(), 0))
    unfinished = sum(1 for t in targets for th in t.threads if th.is_alive())
    return {"targets": [t.result() for t in targets], "seconds": round(clock() - start, 1),
            "unfinished": unfinished, "stopped": stopped}
