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
  - "Causes it reports: C(engine_down), C(kv_cache_exhausted), C(concurrency_cap),
    C(head_of_line_blocking), C(admission_stall), C(admission_rejections), C(request_errors),
    C(invalid_metrics). When the cache has room but requests queue, it names the scheduler limit
    that does it; PagedAttention has no external fragmentation, so no cause is called that."
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
      - The server's configured C(--max-num-seqs). vLLM does not expose it in C(/metrics).
      - Without it, a cap is inferred when C(requests_running) stays at one value while
        requests wait (the evidence then says C(cap_inferred=true)).
    type: int
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
        description: Shortest window without any token that counts as an admission stall, 0 to 3600. Default 3.
        type: float
      error_ratio_unhealthy:
        description: >-
          Share of finished requests ending in error or abort at or above which C(request_errors)
          is critical. Default 0.5.
        type: float
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
    each of which ends within O(timeout).
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
  description: C(idle) or C(serving); null when the engine is down.
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
      description: The numbers that triggered the cause.
      type: dict
    advice:
      description: One or two plain sentences with the flag or setting to change.
      type: str
samples:
  description: The normalised snapshots (as M(kvfleet.vllm.metrics_info) returns them, without
    the per-engine and per-model views, with their C(invalid) lists), each with C(rates) per
    second against the one before.
  returned: always
  type: list
  elements: dict
window_seconds:
  description: Seconds between the first and the last sample.
  returned: always
  type: float
msg:
  description: The verdict and causes in one line.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import (
    VERDICTS, add_rates, diagnose)
from ansible_collections.kvfleet.vllm.plugins.module_utils._fetch import (
    CONNECTION_ARGS, check_connection_params, make_fetcher, shown_url)
from ansible_collections.kvfleet.vllm.plugins.module_utils._probe import (
    check_range, check_window, sample_window)

# thresholds.stall_seconds: as long as the longest window
_STALL_SECONDS = (0, True, 3600, "0 or more")


def _check(module):
    p = module.params
    error = (check_range("samples", p["samples"]) or check_range("interval", p["interval"])
             or check_window(p["samples"], p["interval"]))
    if error:
        module.fail_json(msg=error)
    if p["max_num_seqs"] is not None and p["max_num_seqs"] < 1:
        module.fail_json(msg="max_num_seqs must be 1 or more, got %s" % p["max_num_seqs"])
    th = p["thresholds"] or {}
    if th.get("kv_usage_high") is not None and not 0 < th["kv_usage_high"] <= 1:
        module.fail_json(msg="thresholds.kv_usage_high must be in (0, 1], got %s"
                         % th["kv_usage_high"])
    if th.get("stall_seconds") is not None:
        error = check_range("thresholds.stall_seconds", th["stall_seconds"], _STALL_SECONDS)
        if error:
            module.fail_json(msg=error)
    if (th.get("error_ratio_unhealthy") is not None
            and not 0 < th["error_ratio_unhealthy"] <= 1):
        module.fail_json(msg="thresholds.error_ratio_unhealthy must be in (0, 1], got %s"
                         % th["error_ratio_unhealthy"])


def summary(url, result):
    if not result["causes"]:
        return "vLLM at %s is %s (%s)" % (url, result["verdict"], result["state"])
    parts = []
    for cause in result["causes"]:
        ev = cause["evidence"]
        detail = ev.get("error") or ev.get("health_error")
        parts.append("%s [%s]%s" % (cause["id"], cause["severity"],
                                    (": %s" % detail) if detail else ""))
    return "vLLM at %s is %s: %s" % (url, result["verdict"], "; ".join(parts))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            CONNECTION_ARGS,
            samples=dict(type="int", default=3),
            interval=dict(type="float", default=2.0),
            max_num_seqs=dict(type="int"),
            # no defaults here: diagnose() fills what is left out from DEFAULT_THRESHOLDS
            thresholds=dict(type="dict", default={}, options=dict(
                kv_usage_high=dict(type="float"),
                stall_seconds=dict(type="float"),
                error_ratio_unhealthy=dict(type="float"),
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
    snaps = sample_window(fetch, shown_url(module), p["samples"], p["interval"])
    add_rates(snaps)
    result = diagnose(snaps, max_num_seqs=p["max_num_seqs"], thresholds=p["thresholds"])
    msg = summary(shown_url(module), result)
    out = dict(changed=False, msg=msg, samples=snaps, **result)
    if result["verdict"] in p["fail_on"]:
        module.fail_json(**out)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
