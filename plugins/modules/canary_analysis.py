#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: canary_analysis
short_description: Judge a vLLM canary against a baseline under the same load
version_added: 0.4.0
description:
  - Samples the O(canary) servers and the O(baseline) servers at the same time, every O(interval)
    seconds, for O(warmup) + O(duration) seconds (longer, up to O(max_duration), while either side
    has finished fewer than O(min_requests); shorter when the verdict is already certain), and says
    whether the canary is worse than the baseline. RV(verdict) is C(pass), C(fail) or
    C(inconclusive), RV(reason) one sentence with the numbers, RV(checks) one entry per metric,
    and RV(decision) what a rollout does with it (O(inconclusive)).
  - The canary fails at once when it restarted in the window (its C(process_start_time_seconds)
    changed, its counters went down, or its engine set changed), when it could not be read for
    more than O(thresholds.max_unreadable_samples) samples in a row, or on a critical cause of the
    diagnosis on a canary server (the causes of M(kvfleet.vllm.cache_gate), such as an engine that
    is down, a KV cache exhausted with preemptions, request errors or an admission stall);
    sampling stops as soon as a canary window proves one.
  - No data is never a pass. C(traffic_share) compares the canary's finished requests per second
    per server with the median baseline server's; far below O(thresholds.traffic_share_min) of it
    (a one-sided Poisson test), the canary fails, and the reason says whether it held requests
    (slow) or none (not in the load balancer). A canary that finished fewer than O(min_requests)
    is judged only on that, on the requests it holds (C(requests_waiting)) and its cache per
    sequence, and is otherwise C(inconclusive).
  - The other checks compare the window's numbers, each normalised per request (or per running
    sequence), such as errors, HTTP 5xx answers of the inference handlers (C(http_requests_total), which
    the engine's counters never see), aborts, preemptions, KV cache usage per running sequence,
    requests waiting, queue time, time to first token (TTFT), inter-token latency (ITL) and
    end-to-end latency at p50 and p95, and generated tokens per second per running sequence.
  - The baseline is matched and robust. A baseline server that is unhealthy, restarted, or serves
    another model or another number of engines than the canary is left out. Each check's baseline
    value is the median of the baseline hosts' own values (a host's servers pooled); a host more
    than O(thresholds.outlier_rooms) tolerances from it is left out of that check; two hosts that
    disagree that much decide only what both agree on (the check is C(inconclusive) in between).
    One host that reports nonsense changes no verdict.
  - A check fails when the canary is worse than the baseline by more than the larger of its
    relative and its absolute tolerance (O(thresholds)) and a one-sided Mann-Whitney U test on
    per-interval values (exact without ties up to 60 values, else the normal approximation) finds
    it worse at O(thresholds.alpha) with Holm's correction over all the checks. Beyond the
    tolerance with fewer than O(thresholds.min_intervals) values a side, the check is
    C(inconclusive), unless the canary is beyond the baseline by more than
    O(thresholds.decisive_rooms) tolerances (a difference no noise of a few intervals makes).
  - Without a matching, healthy, busy enough baseline, the canary is checked against absolute
    limits instead (the C(*_max) and C(*_min) O(thresholds)); a metric without such a limit is
    C(skipped).
  - docs/canary-analysis.md has what is compared and why, the defaults, how to size
    O(duration) to the traffic, and worked examples from real captures.
author:
  - kvfleet maintainers (@kvfleet)
extends_documentation_fragment:
  - kvfleet.vllm.connection.transport
  - kvfleet.vllm.attributes.action_group
  - kvfleet.vllm.attributes.info_module
options:
  canary:
    description:
      - The servers of the canary (the new version or flags), judged together.
      - The TLS and timeout options apply to every server of both lists.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The server's name, returned as is (such as the instance name); unique among
          O(canary) and O(baseline).
        type: str
        required: true
      url:
        description:
          - The server's base URL, as M(kvfleet.vllm.cache_gate)'s O(kvfleet.vllm.cache_gate#module:url)
            (C(http://) or C(https://), no path, query or fragment; C(user:password@) is used
            and never shown).
        type: str
        required: true
      host:
        description: The inventory host the server belongs to, returned as is.
        type: str
      api_key:
        description: API key for this server, sent as a bearer token.
        type: str
      max_num_seqs:
        description: The server's C(--max-num-seqs), for its diagnosis (as cache_gate's).
        type: int
      max_num_batched_tokens:
        description: The server's C(--max-num-batched-tokens), for its diagnosis.
        type: int
      max_num_active_seqs:
        description: The server's C(--max-num-active-seqs), for its diagnosis.
        type: int
      max_model_len:
        description: The server's C(--max-model-len), for its diagnosis's advice.
        type: int
  baseline:
    description:
      - The servers that keep the current version or flags, under the same load balancer as the
        canary. Their windows are pooled.
      - May be empty; then the absolute limits of O(thresholds) apply.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: As O(canary[].name).
        type: str
        required: true
      url:
        description: As O(canary[].url).
        type: str
        required: true
      host:
        description: As O(canary[].host).
        type: str
      api_key:
        description: As O(canary[].api_key).
        type: str
      max_num_seqs:
        description: As O(canary[].max_num_seqs).
        type: int
      max_num_batched_tokens:
        description: As O(canary[].max_num_batched_tokens).
        type: int
      max_num_active_seqs:
        description: As O(canary[].max_num_active_seqs).
        type: int
      max_model_len:
        description: As O(canary[].max_model_len).
        type: int
  duration:
    description:
      - Seconds of the window, from the first sample to the last, at least O(interval) and at
        most 3600. The canary must finish O(min_requests) requests in it.
      - A window that looks like a stall or an outage of a server is extended for that server
        until it is decided (as M(kvfleet.vllm.cache_gate) does).
    type: float
    default: 60
  interval:
    description:
      - Seconds between two samples of a server, more than 0 and at most 3600. Each interval
        gives one value per server to the statistical test.
    type: float
    default: 5
  warmup:
    description:
      - Seconds after the first sample that no check counts (a canary just put back warms its
        prefix cache; its first requests are slower for that alone), 0 or more. Sampled all the
        same, and a critical cause in it still fails the canary.
    type: float
    default: 0
  max_duration:
    description:
      - Seconds the window may grow to, past O(duration), while the canary or the baseline has
        finished fewer than O(min_requests) (a window sized by requests, not only the clock).
        At least O(duration) and at most 3600; the default is O(duration) (no growth).
    type: float
  before:
    description:
      - This module's result for the same canary host before its change, under the same traffic
        against the same baseline (the canary then ran what it ran before, and C(fail_on=[]) there).
      - The difference of differences. A check the host was already worse in than its baseline
        before the change is judged on what the change added. That pre-change difference is taken
        off the canary's values (and its interval values for the test) before the comparison, so a
        host slower than its peers is not rolled back for a harmless change. A host that was better
        before gets no credit. RV(checks[].before) and RV(before) say what was taken off.
      - Not used (and said in RV(before.why)) when that window had no baseline or its canary finished
        fewer than O(min_requests) requests.
    type: dict
  inconclusive:
    description:
      - What RV(decision) says of an C(inconclusive) verdict. The rollout always stops after it
        (RV(decision.stop)); C(fail_canary) rolls the host back when O(canary_batch) is true and
        keeps it otherwise, C(fail) rolls it back, C(pass) keeps it.
    type: str
    choices: [fail_canary, fail, pass]
    default: fail_canary
  canary_batch:
    description: The canary is the first batch of a rollout (for O(inconclusive)).
    type: bool
    default: true
  min_requests:
    description:
      - Requests the canary must finish in the window (all its servers together) before a
        comparison may pass or fail it, 0 or more. Fewer, and no critical cause, is
        C(inconclusive).
      - Also the fewest requests the pooled baseline must finish for the comparison; fewer, and
        the absolute limits apply.
    type: int
    default: 20
  thresholds:
    description:
      - Limits of the comparison. A limit left out takes its default (the one copy of them is in
        the collection's C(_canary) module). Tolerances are in the metric's unit (a share, a
        count per request, seconds, tokens per second); relative ones are a share of the
        baseline's value.
      - The limit of a check is the baseline's value plus the larger of C(<metric>_relative) x
        the baseline's value and C(<metric>_absolute) (minus, for C(gen_tokens_per_seq)).
      - The diagnosis that finds critical causes keeps its own defaults (as cache_gate's).
    type: dict
    default: {}
    suboptions:
      alpha:
        description: The analysis's level, between 0 and 1, over all its checks (Holm's
          step-down correction). Default 0.05.
        type: float
      min_intervals:
        description: Fewest per-interval values on each side for the test, 2 or more; fewer, and a
          check beyond its tolerance is C(inconclusive). Default 5.
        type: int
      early_alpha:
        description: The level of the verdict worked out after every sample, between 0 and 1
          (stricter than O(thresholds.alpha), as it is looked at many times). Default 0.005. In it,
          the ratios and the latency quantiles are tested on the canary's requests against their
          limits (C(test=per_request)), as one or two intervals are too few for the rank test.
        type: float
      early_intervals:
        description: Evaluations in a row (one per canary sample) that must fail at
          O(thresholds.early_alpha) before the window ends early with C(fail), 1 or more. Default 2.
        type: int
      max_unreadable_samples:
        description: Consecutive unreadable samples of a canary server beyond which it fails (a
          restart, an outage), 0 or more. Default 2.
        type: int
      traffic_share_min:
        description: The share, 0 to 1, of the median baseline server's finished requests per
          second below which (significantly) a canary server fails C(traffic_share). Default 0.3.
        type: float
      decisive_rooms:
        description: Tolerances beyond the baseline past which a check with too few interval values
          for the test fails all the same (fewer than that, it is C(inconclusive)). Default 4.0.
        type: float
      outlier_rooms:
        description: Tolerances beyond which a baseline host's value is left out of a check (two
          hosts that far apart decide only what both agree on). Default 2.0.
        type: float
      http_5xx_ratio_relative:
        description: Relative tolerance of the share of 5xx answers of the inference handlers.
          Default 0.5.
        type: float
      http_5xx_ratio_absolute:
        description: Absolute tolerance of the share of 5xx answers. Default 0.01.
        type: float
      abort_ratio_relative:
        description: Relative tolerance of the aborted requests per finished request. Default 0.5.
        type: float
      abort_ratio_absolute:
        description: Absolute tolerance of the aborted requests per finished request. Default 0.05.
        type: float
      requests_waiting_relative:
        description: Relative tolerance of the mean requests waiting over the samples. Default 0.5.
        type: float
      requests_waiting_absolute:
        description: Absolute tolerance of the mean requests waiting. Default 2.0.
        type: float
      http_5xx_ratio_max:
        description: Without a baseline, the highest share of 5xx answers that passes. Default 0.01.
        type: float
      abort_ratio_max:
        description: Without a baseline, the most aborts per finished request that pass. No limit
          by default (clients give up for their own reasons).
        type: float
      requests_waiting_max:
        description: Without a baseline, the most requests waiting on average that pass. No limit
          by default.
        type: float
      error_ratio_relative:
        description: Relative tolerance of the error ratio (errors per finished request). Default 0.5.
        type: float
      error_ratio_absolute:
        description: Absolute tolerance of the error ratio. Default 0.01.
        type: float
      preemptions_per_request_relative:
        description: Relative tolerance of the preemptions per finished request. Default 0.5.
        type: float
      preemptions_per_request_absolute:
        description: Absolute tolerance of the preemptions per finished request. Default 0.05.
        type: float
      kv_usage_relative:
        description: Relative tolerance of the KV cache usage per running sequence (the mean over
          the samples with a running sequence of usage / running). Default 0.5.
        type: float
      kv_usage_absolute:
        description: Absolute tolerance of the KV cache usage per running sequence. Default 0.02.
        type: float
      queue_time_relative:
        description: Relative tolerance of the queue time (p50 and p95). Default 0.5.
        type: float
      queue_time_absolute:
        description: Absolute tolerance of the queue time, in seconds. Default 0.05.
        type: float
      ttft_relative:
        description: Relative tolerance of the time to first token (p50 and p95). Default 0.5.
        type: float
      ttft_absolute:
        description: Absolute tolerance of the time to first token, in seconds. Default 0.05.
        type: float
      itl_relative:
        description: Relative tolerance of the inter-token latency (p50 and p95). Default 0.5.
        type: float
      itl_absolute:
        description: Absolute tolerance of the inter-token latency, in seconds. Default 0.01.
        type: float
      e2e_relative:
        description: Relative tolerance of the end-to-end request latency (p50 and p95). Default 0.5.
        type: float
      e2e_absolute:
        description: Absolute tolerance of the end-to-end request latency, in seconds. Default 0.5.
        type: float
      gen_tokens_per_seq_relative:
        description: Relative tolerance of the generated tokens per second per running sequence
          (lower is worse). Default 0.5.
        type: float
      gen_tokens_per_seq_absolute:
        description: Absolute tolerance of the generated tokens per second per running sequence.
          Default 1.0.
        type: float
      error_ratio_max:
        description: Without a baseline, the highest error ratio that passes. Default 0.01.
        type: float
      preemptions_per_request_max:
        description: Without a baseline, the most preemptions per finished request that pass.
          Default 0.1.
        type: float
      kv_usage_max:
        description: Without a baseline, the highest KV cache usage per running sequence that
          passes. No limit by default (it depends on the model and the sequence lengths).
        type: float
      queue_time_p50_max:
        description: Without a baseline, the highest queue time p50 (seconds) that passes. No
          limit by default.
        type: float
      queue_time_p95_max:
        description: Without a baseline, the highest queue time p95 (seconds) that passes.
          Default 1.0.
        type: float
      ttft_p50_max:
        description: Without a baseline, the highest TTFT p50 (seconds) that passes. No limit by
          default.
        type: float
      ttft_p95_max:
        description: Without a baseline, the highest TTFT p95 (seconds) that passes. Default 2.0.
        type: float
      itl_p50_max:
        description: Without a baseline, the highest ITL p50 (seconds) that passes. No limit by
          default.
        type: float
      itl_p95_max:
        description: Without a baseline, the highest ITL p95 (seconds) that passes. Default 0.2.
        type: float
      e2e_p50_max:
        description: Without a baseline, the highest end-to-end latency p50 (seconds) that
          passes. No limit by default (it depends on the output lengths).
        type: float
      e2e_p95_max:
        description: Without a baseline, the highest end-to-end latency p95 (seconds) that
          passes. No limit by default.
        type: float
      gen_tokens_per_seq_min:
        description: Without a baseline, the fewest generated tokens per second per running
          sequence that pass. No limit by default.
        type: float
  fail_on:
    description: Verdicts that fail the task.
    type: list
    elements: str
    choices: [pass, fail, inconclusive]
    default: [fail]
notes:
  - The module only reads C(/metrics), C(/health) and C(/version); it runs in check mode too.
  - The wall time is about O(warmup) + O(duration) (up to O(max_duration) while the requests are
    too few, plus an extension for a server that looks stalled or down), or less when a canary
    server shows a critical cause, a restart, or a verdict already certain (a C(fail) at
    O(thresholds.early_alpha) in O(thresholds.early_intervals) evaluations in a row).
  - Compare like with like. The canary and the baseline should serve the same model, with the
    same data-parallel layout, behind one load balancer; a canary that gets a different mix of
    requests (longer prompts, other adapters) differs for that reason alone.
seealso:
  - module: kvfleet.vllm.cache_gate
  - module: kvfleet.vllm.metrics_info
"""

EXAMPLES = r"""
- name: Judge the canary against two hosts that keep the old version, for two minutes
  kvfleet.vllm.canary_analysis:
    canary:
      - {name: gpu0, host: gpu-03, url: "http://gpu-03.example.net:8000", max_num_seqs: 128}
    baseline:
      - {name: gpu0, host: gpu-01, url: "http://gpu-01.example.net:8000", max_num_seqs: 128}
      - {name: gpu0-b, host: gpu-02, url: "http://gpu-02.example.net:8000", max_num_seqs: 128}
    duration: 120
    interval: 5
  delegate_to: localhost
  run_once: true
  register: canary

- name: Say why
  ansible.builtin.debug:
    msg: "{{ canary.verdict }}: {{ canary.reason }}"

- name: Stricter on latency, and stop on an inconclusive window too
  kvfleet.vllm.canary_analysis:
    canary: [{name: new, url: "https://10.0.0.3:8000"}]
    baseline: [{name: old, url: "https://10.0.0.2:8000"}]
    ca_path: /etc/pki/vllm/ca.pem
    min_requests: 100
    fail_on: [fail, inconclusive]
    thresholds:
      ttft_relative: 0.2
      itl_relative: 0.2

- name: Before the change, the host against the same baseline (its own handicap, not a verdict)
  kvfleet.vllm.canary_analysis:
    canary: [{name: gpu0, host: gpu-03, url: "http://gpu-03.example.net:8000"}]
    baseline: [{name: gpu0, host: gpu-01, url: "http://gpu-01.example.net:8000"}]
    duration: 60
    fail_on: []
  register: before_change

- name: After the change, judged on what the change added
  kvfleet.vllm.canary_analysis:
    canary: [{name: gpu0, host: gpu-03, url: "http://gpu-03.example.net:8000"}]
    baseline: [{name: gpu0, host: gpu-01, url: "http://gpu-01.example.net:8000"}]
    before: "{{ before_change }}"

- name: No baseline yet; the absolute limits apply
  kvfleet.vllm.canary_analysis:
    canary: [{name: new, url: "http://127.0.0.1:8000"}]
    duration: 30
    thresholds:
      ttft_p95_max: 0.5
"""

RETURN = r"""
verdict:
  description: C(pass), C(fail) or C(inconclusive) (too few canary requests to judge, or no check
    could be made).
  returned: always
  type: str
  sample: fail
reason:
  description: One sentence with the numbers that decided the verdict.
  returned: always
  type: str
  sample: "The canary (52 requests) fails preemptions_per_request: 0.808, above the limit 0.05
    (baseline 0); ... against the baseline (1 target(s) pooled, 61 requests)."
msg:
  description: The same as RV(reason).
  returned: always
  type: str
checks:
  description: One entry per metric, in a fixed order. Empty of results (C(skipped)) where a side
    had no value for it.
  returned: always
  type: list
  elements: dict
  contains:
    metric:
      description: C(traffic_share) (finished requests per second per server), C(error_ratio),
        C(http_5xx_ratio), C(abort_ratio), C(preemptions_per_request), C(kv_usage) (per running
        sequence), C(requests_waiting), C(queue_time_p50), C(queue_time_p95), C(ttft_p50), C(ttft_p95), C(itl_p50),
        C(itl_p95), C(e2e_p50), C(e2e_p95) (seconds) or C(gen_tokens_per_seq) (tokens per
        second per running sequence).
      type: str
    canary:
      description: The canary's value over the window (its servers pooled), or null.
      type: float
    baseline:
      description: The pooled baseline's value, or null (absolute limits, or no value).
      type: float
    limit:
      description: The value the canary may reach (at least, for C(gen_tokens_per_seq)), or null.
      type: float
    result:
      description: C(pass), C(fail), C(inconclusive) (beyond the tolerance without enough values
        for the test, or between two baseline hosts that disagree) or C(skipped).
      type: str
    effect:
      description: For a check beyond its tolerance, how much worse (C(difference), C(ratio) and,
        with the test, C(probability) that a canary interval is worse than a baseline one), or
        null.
      type: dict
    level:
      description: The level the p-value was held to under Holm's correction, or null.
      type: float
    baseline_hosts:
      description: The baseline hosts this check compared with.
      type: list
      elements: str
    left_out:
      description: Baseline hosts left out of this check as outliers, each with its C(host) and
        C(value); absent when none.
      type: list
      elements: dict
    why:
      description: The numbers of the check in words.
      type: str
    test:
      description: C(mann_whitney_u) (C(poisson) for C(traffic_share)) when the test was run
        (only for a canary beyond the tolerance with enough values), C(per_request) in a verdict
        that ended the window early, else null.
      type: str
    p_value:
      description: The test's one-sided p-value, or null.
      type: float
    before:
      description: With O(before), the host's and the baseline's values of this check before the
        change (C(canary), C(baseline)) and the C(handicap) taken off (0 when the host was not worse).
      type: dict
    judged_value:
      description: The canary's value less its handicap, where one was taken off.
      type: float
decision:
  description: What a rollout does with the verdict (O(inconclusive), O(canary_batch)).
  returned: always
  type: dict
  contains:
    keep:
      description: Keep the changed host (C(pass); C(inconclusive) as O(inconclusive) says).
      type: bool
    stop:
      description: Start no later batch (C(fail) and C(inconclusive)).
      type: bool
    judged:
      description: The verdict judged the host (false for C(inconclusive)).
      type: bool
    why:
      description: The decision in words, with the reason.
      type: str
decided_early:
  description: The reason of the verdict that ended the window early (overwhelming evidence), or
    null.
  returned: always
  type: str
baseline_hosts:
  description: The baseline hosts compared (matched, healthy, with a window).
  returned: always
  type: list
  elements: str
before:
  description: With O(before), whether it was used (C(used)), why not (C(why)), and by check the
    pre-change difference taken off the canary's values (C(handicaps)). A check's own entry has
    C(before) (C(canary), C(baseline), C(handicap)) and, where something was taken off,
    C(judged_value).
  returned: when O(before) is given
  type: dict
  sample: {used: true, why: null, handicaps: {ttft_p95: 0.061}}
  contains:
    used:
      description: The window before the change was used.
      type: bool
    why:
      description: Why it was not used, or null.
      type: str
    handicaps:
      description: By check, what was taken off the canary's values (only the checks with something taken off).
      type: dict
rates:
  description: Finished requests per second per server over the window, C(canary) (its servers')
    and C(baseline) (the median baseline host's); 0.0 for a side without a window. A rollout reads
    an idle fleet from them.
  returned: always
  type: dict
  sample: {canary: 0.42, baseline: 0.45}
warmup_seconds:
  description: O(warmup), as applied.
  returned: always
  type: float
requests:
  description: Requests finished in the window (vLLM's C(request_success) counter, every finish
    reason), per side; the baseline's counts every baseline server with a window, pooled or not.
  returned: always
  type: dict
  sample: {"canary": 52, "baseline": 61}
causes:
  description: The canary servers' causes in the window, from the same diagnosis as
    M(kvfleet.vllm.cache_gate) (C(id), C(severity), C(evidence), C(advice)), each with its
    C(target) (the server's name).
  returned: always
  type: list
  elements: dict
mode:
  description: C(baseline) (compared with the pooled baseline) or C(absolute) (against the
    absolute limits, the reason says why).
  returned: always
  type: str
targets:
  description: Every server with its C(side), C(verdict) (its diagnosis), C(requests) (finished in
    its window, null without a window), C(pooled) (whether its window counted) and C(why) (why
    not).
  returned: always
  type: list
  elements: dict
samples:
  description: The normalised snapshots of each server (as M(kvfleet.vllm.cache_gate) returns
    them, without the raw histogram counts), by side and server name.
  returned: always
  type: dict
  sample: {"canary": {"gpu0": []}, "baseline": {"gpu0": []}}
thresholds:
  description: The thresholds in force (the defaults with O(thresholds) over them).
  returned: always
  type: dict
window_seconds:
  description: Seconds between the first and the last sample of the longest server window.
  returned: always
  type: float
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kvfleet.vllm.plugins.module_utils._analysis_run import (
    SIDES, run_analysis, samples_in)
from ansible_collections.kvfleet.vllm.plugins.module_utils._canary import (
    DEFAULT_MIN_REQUESTS, DEFAULT_THRESHOLDS, INCONCLUSIVE_POLICIES, VERDICTS, WHOLE_THRESHOLDS,
    check_thresholds, decide)
from ansible_collections.kvfleet.vllm.plugins.module_utils._fetch import (
    CONNECTION_ARGS, check_connection_params, make_fetcher)
from ansible_collections.kvfleet.vllm.plugins.module_utils._fleet import (
    check_target_limits, target_options)
from ansible_collections.kvfleet.vllm.plugins.module_utils._probe import (
    MAX_WINDOW_SECONDS, check_range)


def _check(module):
    """Fail, naming the option, before any request is sent."""
    p = module.params
    if not p["canary"]:
        module.fail_json(msg="canary must list at least one server")
    error = check_range("interval", p["interval"], (0, False, MAX_WINDOW_SECONDS, "more than 0 seconds"))
    if not error and not (isinstance(p["duration"], (int, float)) and p["interval"] <= p["duration"]
                          <= MAX_WINDOW_SECONDS):
        error = ("duration must be at least interval (%s) and at most %d seconds, got %r"
                 % (p["interval"], MAX_WINDOW_SECONDS, p["duration"]))
    if not error and _samples(p) > 1000:
        error = ("duration / interval gives %d samples per server, more than 1000: raise interval"
                 % _samples(p))
    if not error and not (isinstance(p["warmup"], (int, float)) and 0 <= p["warmup"] <= MAX_WINDOW_SECONDS):
        error = "warmup must be 0 or more seconds, at most %d, got %r" % (MAX_WINDOW_SECONDS, p["warmup"])
    if not error and p["max_duration"] is not None and not p["duration"] <= p["max_duration"] <= MAX_WINDOW_SECONDS:
        error = ("max_duration must be at least duration (%s) and at most %d seconds, got %r"
                 % (p["duration"], MAX_WINDOW_SECONDS, p["max_duration"]))
    before = p["before"]
    if not error and before is not None and not (isinstance(before.get("checks"), list) and before.get("mode")):
        error = ("before must be a result of kvfleet.vllm.canary_analysis for the same canary (with its checks "
                 "and mode), got one with the keys: %s" % (", ".join(sorted(str(k) for k in before)) or "none"))
    if not error and p["min_requests"] < 0:
        error = "min_requests must be 0 or more, got %s" % p["min_requests"]
    error = error or check_thresholds(_thresholds(p))
    for side in SIDES:
        error = error or check_target_limits(p[side], side)
    names = [t["name"] for side in SIDES for t in p[side]]
    twice = sorted(set(n for n in names if names.count(n) > 1))
    if not error and twice:
        error = ("every server needs its own name in canary and baseline; used more than once: %s"
                 % ", ".join(twice))
    if error:
        module.fail_json(msg=error)


def _samples(p):
    return samples_in(p["duration"], p["interval"])


def _thresholds(p):
    return dict((k, v) for k, v in (p["thresholds"] or {}).items() if v is not None)


def _analysis(module):
    p = module.params
    result = run_analysis(p["canary"], p["baseline"], lambda t: make_fetcher(module, t), p["duration"],
                          p["interval"], min_requests=p["min_requests"], thresholds=_thresholds(p),
                          warmup=p["warmup"], max_duration=p["max_duration"], before=p["before"])
    result.update(changed=False, msg=result["reason"],
                  decision=decide(result, inconclusive=p["inconclusive"], canary_batch=p["canary_batch"]))
    result.pop("min_requests", None)
    return result


def main():
    transport = dict((k, v) for k, v in CONNECTION_ARGS.items() if k not in ("url", "api_key"))
    module = AnsibleModule(
        argument_spec=dict(
            transport,
            canary=dict(type="list", elements="dict", required=True, options=target_options()),
            baseline=dict(type="list", elements="dict", default=[], options=target_options()),
            duration=dict(type="float", default=60.0),
            interval=dict(type="float", default=5.0),
            min_requests=dict(type="int", default=DEFAULT_MIN_REQUESTS),
            # no defaults here: _canary fills what is left out from DEFAULT_THRESHOLDS
            # numbers, not secrets ("tokens" in a name reads as one to the sanity test)
            thresholds=dict(type="dict", default={}, options=dict(
                (name, dict(type="int" if name in WHOLE_THRESHOLDS else "float", no_log=False))
                for name in DEFAULT_THRESHOLDS)),
            warmup=dict(type="float", default=0.0),
            max_duration=dict(type="float"),
            before=dict(type="dict"),
            inconclusive=dict(type="str", choices=list(INCONCLUSIVE_POLICIES), default="fail_canary"),
            canary_batch=dict(type="bool", default=True),
            fail_on=dict(type="list", elements="str", choices=list(VERDICTS), default=["fail"]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    check_connection_params(module, [("%s[%d].url" % (side, i), t["url"])
                                     for side in SIDES for i, t in enumerate(p[side] or [])])
    _check(module)
    out = _analysis(module)
    if out["verdict"] in p["fail_on"]:
        module.fail_json(**out)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
