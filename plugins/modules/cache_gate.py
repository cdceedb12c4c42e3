#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: cache_gate
short_description: Gate a rollout on a vLLM server's KV cache and scheduler health
version_added: 0.1.0
description:
  - Samples a vLLM server several times, computes rates between the samples and names what is
    wrong with its KV cache or scheduler, in plain words, with the numbers that show it.
  - Fails the task when the verdict is in O(fail_on), so a rolling play stops at that host.
  - "Causes it reports (docs/kv-cache.md has what each one means, its evidence and the real
    capture that shows it): C(engine_down), C(probe_errors), C(kv_cache_exhausted),
    C(concurrency_cap), C(active_seq_cap), C(token_budget), C(head_of_line_blocking),
    C(scheduler_limit), C(admission_stall), C(deferred_backlog), C(deferred_deadlock), C(admission_rejections),
    C(request_errors), C(request_aborts), C(invalid_metrics). When the cache has room but
    requests queue, it names the scheduler limit that does it; PagedAttention has no external
    fragmentation, so no cause is called that."
  - The rules run on each engine (data-parallel rank) on its own; the verdict is the worst
    engine's, and each cause's evidence names its C(engine) and C(model).
  - A cause is C(critical) only when the window proves it. C(engine_down) needs the latest two
    samples, or most, unreadable; C(admission_stall) needs requests pending with no engine step
    for O(thresholds.stall_seconds). When the window only looks like a stall or an outage (one
    long prefill step freezes every counter), the module keeps sampling every O(interval)
    seconds until it is decided, so a healthy server costs no more time than before.
  - C(invalid_metrics) (a warning) means that C(/metrics) held values that cannot be true (NaN or
    infinite values, negative counts, usage outside 0..1, block counts or sizes that are not
    positive whole numbers, duplicated series). They are ignored, listed in each sample's
    C(invalid), and the verdict is never C(healthy) while they are there.
  - A cause of severity C(critical) makes the verdict C(unhealthy); a C(warning) makes it
    C(degraded).
  - With O(targets) instead of O(url), one run samples many servers at once (at most
    O(concurrency) requests at a time), each on its own cadence with its own per-request
    O(timeout), all in about one window, and returns RV(results), one entry per target with the
    keys of a single-server run. A target that cannot be read, or hangs, is that target's
    C(engine_down); it holds one worker while its request lasts, never the others, and never
    fails the module by itself.
author:
  - kvfleet maintainers (@kvfleet)
extends_documentation_fragment:
  - kvfleet.vllm.connection
  - kvfleet.vllm.connection.transport
  - kvfleet.vllm.attributes.action_group
  - kvfleet.vllm.attributes.info_module
options:
  url:
    description:
      - Base URL of the vLLM OpenAI-compatible server, without a path, for example
        C(http://127.0.0.1:8000).
      - The module reads C(/metrics), C(/health) and C(/version) under it.
      - C(http://) or C(https://) with a host; a query (C(?...)) or a fragment (C(#...)) is refused.
      - C(user:password@) in it is used for basic authentication and never shown in results or
        messages.
      - Redirects are never followed (a C(3xx) answer is reported as such), so that the API key
        and credentials reach this server only.
      - Exactly one of O(url) and O(targets) is required.
    type: str
    required: false
  targets:
    version_added: 0.3.0
    description:
      - Many servers to diagnose in one run, instead of O(url) (for a whole fleet from the
        controller). Each is sampled as O(url) would be, at the same time as the others.
      - The options other than these (O(samples), O(interval), O(timeout), O(thresholds),
        O(fail_on), the TLS and body options) apply to every target; a scheduler limit a target
        leaves out is the module's own option of that name.
      - O(fail_on) applies to each target on its own (RV(results[].in_fail_on)); the module
        fails after every target has been sampled when any target's verdict is in O(fail_on),
        with every result returned.
    type: list
    elements: dict
    suboptions:
      name:
        description: The target's name, returned as is (such as the instance name).
        type: str
        required: true
      url:
        description: The server's base URL, as for O(url).
        type: str
        required: true
      host:
        description: The inventory host the server belongs to, returned as is.
        type: str
      api_key:
        description: API key for this server, as for O(api_key) (which is not used with O(targets)).
        type: str
      max_num_seqs:
        description: As O(max_num_seqs), for this server.
        type: int
      max_num_batched_tokens:
        description: As O(max_num_batched_tokens), for this server.
        type: int
      max_num_active_seqs:
        description: As O(max_num_active_seqs), for this server.
        type: int
      max_model_len:
        description: As O(max_model_len), for this server.
        type: int
  serving_group_head:
    version_added: 0.4.0
    description:
      - The instance as the server role's deployment record lists it, when it may head a
        serving group across hosts (the record's C(unit), C(port) and C(group)); ignored for
        any other instance.
      - Read on the head's host (the module runs there, as the role and the playbooks run it),
        each sample also counts the links the group's engines on other hosts hold into the head
        (C(/proc/net/tcp), the head's user from systemd's C(MainPID); no privilege needed); fewer
        than four per remote engine (two in vLLM 0.9.0) is C(group_member_lost). vLLM itself
        never notices a lost member.
    type: dict
    suboptions:
      unit:
        description: The head's systemd unit.
        type: str
        required: true
      port:
        description: The head's API port (its HTTP clients are not engines).
        type: int
        required: true
      group:
        description: The record's C(group) (C(key), C(role), C(size), C(size_local)).
        type: dict
      record:
        description:
          - The deployment record on the host, whose headless workers of the same group count as
            engines on this host (not remote).
        type: path
        default: /etc/ansible/facts.d/kvfleet_vllm_server.fact
  concurrency:
    version_added: 0.3.0
    description:
      - With O(targets), how many servers are read at the same time, 1 to 1024. Each worker
        holds a thread and at most one connection, and takes whichever target's sample is due
        next; no worker waits out a target's O(interval). The module's wall time is about one
        window plus the sampling work shared among the workers (a few milliseconds of CPU per
        sample, or up to O(timeout) for a server that does not answer).
    type: int
    default: 32
  samples:
    description:
      - Number of snapshots to take, 1 to 1000.
    type: int
    default: 3
  interval:
    description:
      - Seconds between snapshots, 0 to 3600.
      - The window, (O(samples) - 1) x O(interval), may be at most 3600 seconds.
    type: float
    default: 2
  max_num_seqs:
    description:
      - The server's configured C(--max-num-seqs) (per data-parallel rank). vLLM does not
        expose it in C(/metrics).
      - Without it, a queue with free blocks is weighed against the recent prompt sizes
        (C(vllm:request_prompt_tokens)) and the evidence says which limit is likelier and why
        (C(cap_known=false), C(likely_limit), C(why)).
    type: int
  max_num_batched_tokens:
    description:
      - The server's C(--max-num-batched-tokens). With it, steps filled to the budget while
        requests wait are reported as C(token_budget).
    type: int
  max_num_active_seqs:
    description:
      - The server's C(--max-num-active-seqs) (vLLM 0.31 and later), reported as
        C(active_seq_cap) when running sits at it.
    type: int
  max_model_len:
    description:
      - The server's C(--max-model-len), used in the advice (how many such sequences the cache
        holds).
    type: int
  extend:
    description:
      - Keep sampling while the window looks like a stall or an outage, until it is decided
        (at most O(thresholds.stall_seconds) more). With C(false) such a window is reported as
        it is, in C(pending), and never as a critical cause.
    type: bool
    default: true
  thresholds:
    description:
      - Limits of the diagnosis. A limit left out takes the diagnosis's own default (the one copy
        of them, in the collection's C(_diagnosis) module), which the host program, the monitor and
        the restart guard use too.
    type: dict
    default: {}
    suboptions:
      kv_usage_high:
        description: KV cache usage (0..1) at or above which the cache counts as full. Default 0.9.
        type: float
      stall_seconds:
        description: >-
          Seconds with requests pending and no engine step (no token, no step, no gauge moving)
          that make an admission stall, more than 0 and at most 3600. Longer than any real
          prefill step. Default 60.
        type: float
      error_ratio_unhealthy:
        description: >-
          Share of finished requests ending in error at or above which C(request_errors) is
          critical (with O(thresholds.min_request_errors)); the same share of aborts makes
          C(request_aborts) a warning. Default 0.5.
        type: float
      min_request_errors:
        description: >-
          Fewest errors (or aborts) in the window for C(request_errors) to be critical (or for
          C(request_aborts) at all), 1 or more. Default 3.
        type: int
      min_preemptions:
        description: >-
          Fewest preemptions in the window for C(kv_cache_exhausted) to be critical, 1 or more.
          Default 3.
        type: int
      preemption_ratio_unhealthy:
        description: >-
          Preemptions per finished request in the window at or above which C(kv_cache_exhausted)
          is critical (with O(thresholds.min_preemptions)); fewer make it a warning. Default 0.5.
        type: float
      deferred_deadlock_min:
        description: >-
          Deferred requests that, with prompt tokens flowing and almost none generated, make
          C(deferred_deadlock), 1 or more. Default 100.
        type: int
  fail_on:
    description: Verdicts that fail the task.
    type: list
    elements: str
    choices: [healthy, degraded, unhealthy]
    default: [unhealthy]
notes:
  - A server that cannot be read is not an error of the module; it is the cause C(engine_down)
    and the verdict C(unhealthy).
  - The wall time is about O(samples) x O(interval) seconds plus three HTTP requests per sample,
    each of which ends within O(timeout); a window that looks like a stall or an outage adds
    samples until it is decided (C(extended_seconds)).
  - With O(targets), the module's wall time is about the slowest target's (a hung server takes
    up to O(samples) x O(timeout)) when O(concurrency) is at least the number of targets.
seealso:
  - module: kvfleet.vllm.metrics_info
"""

EXAMPLES = r"""
- name: Stop the rollout here if the server is unhealthy
  kvfleet.vllm.cache_gate:
    url: http://127.0.0.1:8000
    max_num_seqs: 128

- name: Be stricter during a canary batch
  kvfleet.vllm.cache_gate:
    url: http://127.0.0.1:8000
    samples: 5
    interval: 3
    fail_on: [degraded, unhealthy]
    thresholds:
      kv_usage_high: 0.85

- name: Only report
  kvfleet.vllm.cache_gate:
    url: http://127.0.0.1:8000
    fail_on: []
  register: gate

- name: Say what is wrong
  ansible.builtin.debug:
    msg: "{{ item.id }}: {{ item.advice }}"
  loop: "{{ gate.causes }}"

- name: Diagnose a whole fleet from the controller, 64 servers at a time
  kvfleet.vllm.cache_gate:
    targets:
      - {name: gpu0, host: gpu-01, url: "http://gpu-01.example.net:8000", max_num_seqs: 128}
      - {name: gpu1, host: gpu-01, url: "http://gpu-01.example.net:8001", max_num_seqs: 128}
    concurrency: 64
    fail_on: []
  delegate_to: localhost
  run_once: true
  register: fleet

- name: Name the servers that are not healthy
  ansible.builtin.debug:
    msg: "{{ fleet.results | rejectattr('verdict', 'eq', 'healthy') | map(attribute='msg') | list }}"
"""

RETURN = r"""
verdict:
  description: C(healthy), C(degraded) (a warning cause) or C(unhealthy) (a critical cause).
  returned: with O(url)
  type: str
  sample: degraded
state:
  description: C(idle), C(serving) or C(sleeping) (every busy engine asleep on purpose,
    C(vllm:engine_sleep_state); not a fault); null when the engine is down.
  returned: with O(url)
  type: str
  sample: serving
causes:
  description: What is wrong, most important first as found.
  returned: with O(url)
  type: list
  elements: dict
  contains:
    id:
      description:
        - One of the cause ids listed in the description.
        - C(invalid_metrics) has the refused values in its evidence (C(fields), C(invalid)).
      type: str
      sample: concurrency_cap
    severity:
      description: C(critical) or C(warning).
      type: str
    evidence:
      description: The numbers that triggered the cause, with its C(engine) and C(model) for
        the per-engine causes.
      type: dict
    advice:
      description: Plain sentences with the flag or setting to change, with the numbers of this
        server (sizes, the value that would use the free blocks, the queue limit that fired).
      type: str
samples:
  description: The normalised snapshots (as M(kvfleet.vllm.metrics_info) returns them, without
    the per-engine and per-model views and without C(latency), see RV(latency)), with their
    C(invalid) lists, each with C(rates) per second against the one before.
  returned: with O(url)
  type: list
  elements: dict
window_seconds:
  description: Seconds between the first and the last sample (extension included).
  returned: with O(url)
  type: float
latency:
  version_added: 0.3.0
  description:
    - Time-to-first-token (C(ttft)), inter-token (C(itl)), queue (C(queue)) and end-to-end
      (C(e2e)) latency quantiles over the window, from the difference of vLLM's histogram
      bucket counts between the first and the last readable sample (C(basis=window)), as
      Prometheus' C(histogram_quantile) over C(rate()) computes them; since the server started
      (C(basis=since_start)) when only one sample could be read.
    - Each has C(p50), C(p90), C(p99) (seconds), C(count) (observations in the window) and
      C(reason) (why the quantiles are null, such as nothing observed in the window, or counts
      that went down because the server restarted); C(engines) has them per engine when there
      are several. M(kvfleet.vllm.metrics_info) documents the keys (its C(metrics.latency))
      and the interpolation rule.
    - They are reported, not judged; no cause comes from them.
  returned: with O(url)
  type: dict
  sample: {"basis": "window", "seconds": 5.8, "ttft": {"p50": 0.0079, "p90": 0.0163,
           "p99": 0.0196, "count": 11, "reason": null}}
engines:
  description: Per engine (data-parallel rank) its C(model), C(state) and C(verdict).
  returned: with O(url)
  type: dict
  sample: {"0": {"model": "tiny-llama", "state": "serving", "verdict": "healthy"}}
pending:
  description: What the window could not decide (C(id), C(engine), C(seconds_left)); empty
    when the extension decided it or nothing looked wrong.
  returned: with O(url)
  type: list
  elements: dict
extended_seconds:
  description: Seconds of sampling added because the window looked like a stall or an outage.
  returned: with O(url)
  type: float
msg:
  description: The verdict and causes in one line; with O(targets), the count per verdict and
    the targets whose verdict is in O(fail_on).
  returned: always
  type: str
results:
  description: With O(targets), one entry per target, in the order of O(targets), each with
    the keys a run with O(url) returns (C(verdict), C(state), C(causes), C(samples),
    C(window_seconds), C(latency), C(engines), C(pending), C(extended_seconds), C(msg)) and
    these.
  returned: with O(targets)
  type: list
  elements: dict
  contains:
    name:
      description: The target's O(targets[].name).
      type: str
    host:
      description: The target's O(targets[].host), or null.
      type: str
    url:
      description: The target's URL, without C(user:password@).
      type: str
    seconds:
      description: Wall seconds this target took, from its first request to its verdict.
      type: float
    in_fail_on:
      description: Whether this target's verdict is in O(fail_on).
      type: bool
fleet:
  description: With O(targets), the run in numbers.
  returned: with O(targets)
  type: dict
  contains:
    targets:
      description: Number of targets.
      type: int
    healthy:
      description: Targets whose verdict is C(healthy).
      type: int
    degraded:
      description: Targets whose verdict is C(degraded).
      type: int
    unhealthy:
      description: Targets whose verdict is C(unhealthy).
      type: int
    failed:
      description: Names of the targets whose verdict is in O(fail_on).
      type: list
      elements: str
    concurrency:
      description: Targets sampled at the same time, at most.
      type: int
    seconds:
      description: Wall seconds of the whole run.
      type: float
  sample: {"targets": 2, "healthy": 1, "degraded": 1, "unhealthy": 0, "failed": [],
           "concurrency": 2, "seconds": 4.1}
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import (
    LIMIT_NAMES, VERDICTS, add_rates, diagnose)
from ansible_collections.kvfleet.vllm.plugins.module_utils._dp_links import head_links, local_engines
from ansible_collections.kvfleet.vllm.plugins.module_utils._layout import LAYOUT
from ansible_collections.kvfleet.vllm.plugins.module_utils._fetch import (
    CONNECTION_ARGS, check_connection_params, make_fetcher, shown_url)
from ansible_collections.kvfleet.vllm.plugins.module_utils._fleet import (
    TargetWindow, check_target_limits, run_windows, target_limits, target_options)
from ansible_collections.kvfleet.vllm.plugins.module_utils._latency import window
from ansible_collections.kvfleet.vllm.plugins.module_utils._probe import (
    check_range, check_window, sample_until_decided, sample_window, scrub)

# requests in flight at once, at most (each worker holds a thread and, during a request, a socket)
MAX_CONCURRENCY = 1024

# thresholds -> (lowest, lowest allowed itself, highest, how the lower bound reads)
_THRESHOLD_RANGES = {
    "kv_usage_high": (0, False, 1, "more than 0"),
    "stall_seconds": (0, False, 3600, "more than 0 seconds"),
    "error_ratio_unhealthy": (0, False, 1, "more than 0"),
    "preemption_ratio_unhealthy": (0, False, 1000, "more than 0"),
    "min_request_errors": (1, True, 10 ** 9, "1 or more"),
    "min_preemptions": (1, True, 10 ** 9, "1 or more"),
    "deferred_deadlock_min": (1, True, 10 ** 9, "1 or more"),
}


def _check(module):
    p = module.params
    error = (check_range("samples", p["samples"]) or check_range("interval", p["interval"])
             or check_window(p["samples"], p["interval"]))
    if error:
        module.fail_json(msg=error)
    for name in LIMIT_NAMES:
        if p[name] is not None and p[name] < 1:
            module.fail_json(msg="%s must be 1 or more, got %s" % (name, p[name]))
    for name, value in sorted((p["thresholds"] or {}).items()):
        if value is not None:
            error = check_range("thresholds." + name, value, _THRESHOLD_RANGES[name])
            if error:
                module.fail_json(msg=error)


def summary(url, result):
    if not result["causes"]:
        return "vLLM at %s is %s (%s)" % (url, result["verdict"], result["state"])
    parts = []
    for cause in result["causes"]:
        ev = cause["evidence"]
        detail = ev.get("error") or ev.get("health_error")
        where = (", engine %s" % ev["engine"]) if len(result.get("engines") or {}) > 1 and \
            ev.get("engine") is not None else ""
        parts.append("%s [%s%s]%s" % (cause["id"], cause["severity"], where,
                                      (": %s" % detail) if detail else ""))
    return "vLLM at %s is %s: %s" % (url, result["verdict"], "; ".join(parts))


def _judge(module, limits, snaps):
    return diagnose(add_rates(snaps), thresholds=module.params["thresholds"], limits=limits)


def _outcome(url, snaps, result, extended):
    """What a single-server run returns (without changed), from its window and diagnosis."""
    latency = window(snaps)
    for snap in snaps:
        snap.pop("histograms", None)  # raw bucket counts: what latency was computed from
    return dict(msg=summary(url, result), samples=snaps, extended_seconds=extended,
                latency=latency, **result)


def _head_observer(module):
    """observe() for each sample: a serving group head's links, read on this host; None when
    the instance is no such head."""
    head = module.params["serving_group_head"]
    if not head or not isinstance(head.get("group"), dict) or head["group"].get("role") != "head":
        return None

    def show(unit):
        rc, out, unused = module.run_command(["systemctl", "show", "-p", "MainPID", unit])
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line) if rc == 0 else {}

    try:
        with open(head["record"]) as f:
            record = json.load(f)
    except (OSError, ValueError):
        record = {}
    local = local_engines(record, head["group"])
    return lambda: head_links(show, head["unit"], head["port"], head["group"], local)


def _gate(module, fetch, url, limits):
    """Sample one server and diagnose it: the result of a single-target run (without changed)."""
    p = module.params
    observe = _head_observer(module)

    def judge(snaps):
        return _judge(module, limits, snaps)

    if p["extend"]:
        snaps, result, extended = sample_until_decided(fetch, url, p["samples"], p["interval"], judge,
                                                       observe=observe)
    else:
        snaps = sample_window(fetch, url, p["samples"], p["interval"], observe=observe)
        result, extended = judge(snaps), 0.0
    return _outcome(url, snaps, result, extended)


def _failed_target(url, exc):
    """A bug must not cost the other targets their results: it is this target's finding."""
    error = scrub("%s: %s" % (type(exc).__name__, exc))
    return dict(verdict="unhealthy", state=None, causes=[dict(
        id="engine_down", severity="critical", evidence=dict(error=error),
        advice="The gate could not sample this server: %s" % error)], samples=[],
        engines={}, pending=[], window_seconds=0.0, extended_seconds=0.0,
        latency=window([]), msg="vLLM at %s could not be sampled: %s" % (url, error))


class _Window(object):
    """One target's window in a fleet run (the shared TargetWindow: the same cadence and
    extension as _gate), and what a single-server run returns for it once it is over."""

    def __init__(self, module, target):
        p = module.params
        self.module, self.target = module, target
        limits = target_limits(p, target)
        self.window = TargetWindow(target, lambda t: make_fetcher(module, t), p["samples"],
                                   p["interval"], lambda snaps: _judge(module, limits, snaps),
                                   extend=p["extend"])
        self.out = None

    def step(self):
        """Take the next sample; returns when the next one is due (time.monotonic()), or None
        once the target is decided (self.out holds its result)."""
        following = self.window.step()
        if following is not None:
            return following
        w = self.window
        error = w.error
        if error is None:
            try:
                self.out = _outcome(w.url, w.snaps, w.result, w.extended)
            except Exception as exc:  # anything unexpected is this target's finding
                error = exc
        if error is not None:
            self.out = _failed_target(w.url, error)
        self.out.update(name=self.target["name"], host=self.target.get("host"), url=w.url,
                        seconds=w.seconds, in_fail_on=self.out["verdict"] in self.module.params["fail_on"])
        return None


def _gate_fleet(module):
    """Every target in one window: at most `concurrency` requests at a time, each target on its
    own cadence. Workers take whichever sample is due next; none waits on a target's interval,
    so the run lasts about one window plus the sampling work shared among the workers."""
    targets = [_Window(module, t) for t in module.params["targets"]]
    started = time.monotonic()
    workers = run_windows(targets, module.params["concurrency"])
    results = [t.out for t in targets]
    counts = dict((verdict, sum(1 for r in results if r["verdict"] == verdict))
                  for verdict in VERDICTS)
    failed = [r["name"] for r in results if r["in_fail_on"]]
    fleet = dict(targets=len(results), failed=failed, seconds=round(time.monotonic() - started, 2),
                 concurrency=workers, **counts)
    msg = "%d vLLM server(s): %s" % (len(results), ", ".join(
        "%d %s" % (counts[v], v) for v in VERDICTS))
    if failed:
        msg += "; verdict in fail_on for %s" % ", ".join(
            "%s (%s)" % (r["name"], r["msg"]) for r in results if r["in_fail_on"])
    return dict(changed=False, msg=msg, results=results, fleet=fleet)


def main():
    connection = dict(CONNECTION_ARGS, url=dict(type="str"))
    module = AnsibleModule(
        argument_spec=dict(
            connection,
            targets=dict(type="list", elements="dict", options=target_options()),
            serving_group_head=dict(type="dict", options=dict(
                unit=dict(type="str", required=True),
                port=dict(type="int", required=True),
                group=dict(type="dict"),
                record=dict(type="path", default=LAYOUT["record"]),
            )),
            concurrency=dict(type="int", default=32),
            samples=dict(type="int", default=3),
            interval=dict(type="float", default=2.0),
            max_num_seqs=dict(type="int"),
            max_num_batched_tokens=dict(type="int", no_log=False),
            max_num_active_seqs=dict(type="int"),
            max_model_len=dict(type="int"),
            extend=dict(type="bool", default=True),
            # no defaults here: diagnose() fills what is left out from DEFAULT_THRESHOLDS
            thresholds=dict(type="dict", default={}, options=dict(
                kv_usage_high=dict(type="float"),
                stall_seconds=dict(type="float"),
                error_ratio_unhealthy=dict(type="float"),
                min_request_errors=dict(type="int"),
                min_preemptions=dict(type="int"),
                preemption_ratio_unhealthy=dict(type="float"),
                deferred_deadlock_min=dict(type="int"),
            )),
            fail_on=dict(type="list", elements="str", choices=list(VERDICTS),
                         default=["unhealthy"]),
        ),
        mutually_exclusive=[("url", "targets"), ("serving_group_head", "targets")],
        required_one_of=[("url", "targets")],
        supports_check_mode=True,
    )
    p = module.params
    if p["targets"] is not None:
        check_connection_params(module, [("targets[%d].url" % i, t["url"])
                                         for i, t in enumerate(p["targets"])])
        _check(module)
        error = check_target_limits(p["targets"])
        if error:
            module.fail_json(msg=error)
        if not 1 <= p["concurrency"] <= MAX_CONCURRENCY:
            module.fail_json(msg="concurrency must be 1 to %d, got %s"
                             % (MAX_CONCURRENCY, p["concurrency"]))
        out = _gate_fleet(module)
        if out["fleet"]["failed"]:
            module.fail_json(**out)
        module.exit_json(**out)
    check_connection_params(module)
    _check(module)
    limits = dict((name, p[name]) for name in LIMIT_NAMES)
    out = dict(changed=False, **_gate(module, make_fetcher(module), shown_url(module), limits))
    if out["verdict"] in p["fail_on"]:
        module.fail_json(**out)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
