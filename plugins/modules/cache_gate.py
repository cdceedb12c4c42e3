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
    C(admission_stall), C(deferred_backlog), C(deferred_deadlock), C(admission_rejections),
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
author:
  - kvfleet maintainers (@kvfleet)
extends_documentation_fragment:
  - kvfleet.vllm.connection
  - kvfleet.vllm.attributes.info_module
options:
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
"""

RETURN = r"""
verdict:
  description: C(healthy), C(degraded) (a warning cause) or C(unhealthy) (a critical cause).
  returned: always
  type: str
  sample: degraded
state:
  description: C(idle), C(serving) or C(sleeping) (every busy engine asleep on purpose,
    C(vllm:engine_sleep_state); not a fault); null when the engine is down.
  returned: always
  type: str
  sample: serving
causes:
  description: What is wrong, most important first as found.
  returned: always
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
    the per-engine and per-model views, with their C(invalid) lists), each with C(rates) per
    second against the one before.
  returned: always
  type: list
  elements: dict
window_seconds:
  description: Seconds between the first and the last sample (extension included).
  returned: always
  type: float
engines:
  description: Per engine (data-parallel rank) its C(model), C(state) and C(verdict).
  returned: always
  type: dict
  sample: {"0": {"model": "tiny-llama", "state": "serving", "verdict": "healthy"}}
pending:
  description: What the window could not decide (C(id), C(engine), C(seconds_left)); empty
    when the extension decided it or nothing looked wrong.
  returned: always
  type: list
  elements: dict
extended_seconds:
  description: Seconds of sampling added because the window looked like a stall or an outage.
  returned: always
  type: float
msg:
  description: The verdict and causes in one line.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import (
    LIMIT_NAMES, VERDICTS, add_rates, diagnose)
from ansible_collections.kvfleet.vllm.plugins.module_utils._fetch import (
    CONNECTION_ARGS, check_connection_params, make_fetcher, shown_url)
from ansible_collections.kvfleet.vllm.plugins.module_utils._probe import (
    check_range, check_window, sample_until_decided, sample_window)

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


def main():
    module = AnsibleModule(
        argument_spec=dict(
            CONNECTION_ARGS,
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
        supports_check_mode=True,
    )
    check_connection_params(module)
    _check(module)
    p = module.params
    fetch = make_fetcher(module)
    limits = dict((name, p[name]) for name in LIMIT_NAMES)

    def judge(snaps):
        return diagnose(add_rates(snaps), thresholds=p["thresholds"], limits=limits)

    if p["extend"]:
        snaps, result, extended = sample_until_decided(
            fetch, shown_url(module), p["samples"], p["interval"], judge)
    else:
        snaps = sample_window(fetch, shown_url(module), p["samples"], p["interval"])
        result, extended = judge(snaps), 0.0
    msg = summary(shown_url(module), result)
    out = dict(changed=False, msg=msg, samples=snaps, extended_seconds=extended, **result)
    if result["verdict"] in p["fail_on"]:
        module.fail_json(**out)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
