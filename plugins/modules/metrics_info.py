#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: metrics_info
short_description: Read a vLLM server's KV cache and scheduler metrics, on any vLLM version
version_added: 0.1.0
description:
  - Scrapes C(/metrics), C(/health) and C(/version) of one vLLM server and returns a normalised,
    version-independent view of its KV cache and scheduler state.
  - Old (vLLM 0.11 and earlier, C(gpu_cache_usage_perc)) and new (C(kv_cache_usage_perc)) metric
    names, counters with or without C(_total), several engines and several models are handled.
  - A value the server does not expose is returned as C(null), never as 0.
  - A value that cannot be true is returned as C(null) too, and listed in RV(metrics.invalid) with
    the reason; see there for the rules.
  - There is no C(num_gpu_blocks_used) metric in any vLLM version;
    RV(metrics.used_blocks_estimate) is derived from usage and the block pool size.
  - RV(metrics.latency) has time-to-first-token, inter-token, queue and end-to-end latency
    quantiles from vLLM's histograms. One reading can only give them since the server started;
    M(kvfleet.vllm.cache_gate) and the monitor give them over their window.
author:
  - kvfleet maintainers (@kvfleet)
extends_documentation_fragment:
  - kvfleet.vllm.connection
  - kvfleet.vllm.connection.transport
  - kvfleet.vllm.attributes.action_group
  - kvfleet.vllm.attributes.info_module
notes:
  - Fails when C(/metrics) cannot be read (naming the URL and the cause) or does not hold vLLM
    metrics (saying what was found instead). A failing C(/health) does not fail the module; it
    sets RV(metrics.healthy=false).
  - Use M(kvfleet.vllm.cache_gate) to judge the state over several samples.
seealso:
  - module: kvfleet.vllm.cache_gate
"""

EXAMPLES = r"""
- name: Read the KV cache state of the local vLLM server
  kvfleet.vllm.metrics_info:
    url: http://127.0.0.1:8000
  register: vllm

- name: Show usage and queue
  ansible.builtin.debug:
    msg: >-
      KV cache {{ (vllm.metrics.kv_cache_usage * 100) | round(1) }}% of
      {{ vllm.metrics.num_gpu_blocks }} blocks, {{ vllm.metrics.requests_running }} running,
      {{ vllm.metrics.requests_waiting }} waiting

- name: Read a server behind TLS with a private CA
  kvfleet.vllm.metrics_info:
    url: https://vllm-01.example.com:8443
    ca_path: /etc/pki/internal-ca.pem
    api_key: "{{ vault_vllm_api_key }}"
    timeout: 5
"""

RETURN = r"""
metrics:
  description: Normalised view of the server.
  returned: success
  type: dict
  contains:
    schema:
      description: C(v0) for servers with only the 0.11-and-earlier names and no engine label, C(v1) otherwise.
      type: str
      sample: v1
    version:
      description: Server version from C(/version); null if the endpoint is absent.
      type: str
      sample: 0.32.0
    healthy:
      description: Whether C(/health) answered HTTP 200.
      type: bool
      sample: true
    health_status:
      description: HTTP status of C(/health); null when it did not answer (timed out, refused).
      type: int
      sample: 200
    kv_cache_usage:
      description:
        - KV cache usage 0..1, the block-weighted mean over engines. Cached prefix blocks that no
          request holds count as free.
      type: float
      sample: 0.42
    num_gpu_blocks:
      description: Blocks in the KV cache pool, summed over engines (from C(cache_config_info)).
      type: int
      sample: 256
    block_size:
      description: Tokens per block.
      type: int
      sample: 16
    used_blocks_estimate:
      description: Blocks in use, estimated as usage x (num_gpu_blocks - 1) per engine.
      type: int
      sample: 107
    requests_running:
      description: Requests being processed.
      type: int
    requests_waiting:
      description: Requests queued.
      type: int
    waiting_capacity:
      description: Queued requests waiting for capacity (KV blocks or the sequence cap). vLLM 2026 releases and later.
      type: int
    waiting_deferred:
      description: Queued requests deferred (LoRA slots, grammar compilation, async KV loads).
      type: int
    requests_swapped:
      description: Swapped requests (V0 engine only).
      type: int
    preemptions_total:
      description: Preemptions since start.
      type: int
    admission_rejections_total:
      description: Requests rejected with HTTP 503 by the queue limits, since start.
      type: int
    request_errors_total:
      description: Requests finished with reason C(error) or C(abort), since start.
      type: int
    requests_finished_total:
      description: Requests finished for any reason, since start.
      type: int
    prefix_cache_hit_rate:
      description: Prefix cache hits over queries since start; null before the first query.
      type: float
    prefix_cache_queries_total:
      description: Prefix cache token queries since start.
      type: int
    prefix_cache_hits_total:
      description: Prefix cache token hits since start.
      type: int
    prompt_tokens_total:
      description: Prompt tokens processed since start.
      type: int
    generation_tokens_total:
      description: Tokens generated since start.
      type: int
    invalid:
      description:
        - Values refused as impossible, one entry per field and reason; empty for a sane server.
        - Refused are NaN and infinite values, negative counts and counters (and counts above
          2^53), usage or hit rates outside 0..1 (the V0 hit-rate gauge may be -1), block counts
          and block sizes in C(cache_config_info) that are not positive whole numbers, more
          prefix cache hits than queries, and an C(engine) label that is not a data-parallel rank.
        - A series that appears more than once (same name and labels; C(x) and C(x_total) count
          as one name) is refused in all its copies, as are two different C(cache_config_info)
          series for one engine.
        - A refused value makes its field C(null) for the whole server (a sum over the other
          engines would look like a real reading); the other engines' views keep theirs.
        - A body with vLLM series but none of C(kv_cache_usage), C(num_gpu_blocks),
          C(requests_running), C(requests_waiting) gets one entry for the field C(metrics).
        - M(kvfleet.vllm.cache_gate) turns a non-empty list into the cause C(invalid_metrics).
      type: list
      elements: dict
      contains:
        field:
          description: The field of this view (or C(engine), C(metrics)).
          type: str
          sample: kv_cache_usage
        reason:
          description: Why the value was refused.
          type: str
          sample: not a finite number
        series:
          description: The first series refused for this field and reason (shortened).
          type: str
          sample: vllm:kv_cache_usage_perc{engine="0",model_name="m"}
        value:
          description: Its value, as text.
          type: str
          sample: nan
        count:
          description: How many series were refused for this field and reason.
          type: int
          sample: 1
    engines:
      description: The same fields per engine (data-parallel rank), keyed by the C(engine) label.
      type: dict
    models:
      description: The same fields per C(model_name).
      type: dict
    latency:
      version_added: 0.3.0
      description:
        - Latency quantiles (p50, p90, p99, in seconds) computed from vLLM's histograms
          (cumulative C(_bucket) series), since the server started (RV(metrics.latency.basis)).
        - C(ttft) time to first token (C(vllm:time_to_first_token_seconds)); C(itl) inter-token
          latency (C(vllm:inter_token_latency_seconds), before that
          C(vllm:time_per_output_token_seconds)); C(queue) time waiting before the first
          schedule (C(vllm:request_queue_time_seconds)); C(e2e) end-to-end request latency
          (C(vllm:e2e_request_latency_seconds)).
        - "The quantile is Prometheus' C(histogram_quantile): linear within the bucket that holds
          the rank; a rank in the C(+Inf) bucket gives the upper bound of the highest finite
          bucket (so p99 says at least that much, not how much more)."
        - A quantile is null, with C(reason), when the histogram is absent, nothing was
          observed, or its buckets cannot be true (NaN or negative counts, no C(+Inf) bucket,
          cumulative counts that fall as C(le) grows, two buckets with one C(le)). Such buckets
          do not make the reading invalid (RV(metrics.invalid) is about the KV cache and
          scheduler fields).
      type: dict
      contains:
        basis:
          description: C(since_start) here (one reading); C(window) in the gate and the monitor,
            from the difference of the bucket counts between a window's first and last sample.
          type: str
          sample: since_start
        seconds:
          description: The window's length; null for C(since_start).
          type: float
        ttft:
          description: Time to first token. Each of C(ttft), C(itl), C(queue) and C(e2e) has
            these keys.
          type: dict
          contains:
            p50:
              description: Median, in seconds; null with C(reason).
              type: float
              sample: 0.0079
            p90:
              description: 90th percentile, in seconds; null with C(reason).
              type: float
              sample: 0.0163
            p99:
              description: 99th percentile, in seconds; null with C(reason).
              type: float
              sample: 0.0196
            count:
              description: Observations the quantiles are computed from (requests; tokens for
                C(itl)); 0 when nothing was observed, null when the buckets were unusable.
              type: int
              sample: 11
            reason:
              description: Why the quantiles are null; null when they are given.
              type: str
              sample: nothing observed since the server started (no first token)
        itl:
          description: Inter-token latency, with the keys of C(ttft).
          type: dict
        queue:
          description: Queue time, with the keys of C(ttft).
          type: dict
        e2e:
          description: End-to-end request latency, with the keys of C(ttft).
          type: dict
        engines:
          description: With several engines (data-parallel ranks) only, the same four entries
            per engine, keyed by the C(engine) label; the top-level entries add the engines'
            buckets up.
          type: dict
    url:
      description: The server's base URL, without C(user:password@).
      type: str
    time:
      description: Unix time of the scrape.
      type: float
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kvfleet.vllm.plugins.module_utils._fetch import (
    CONNECTION_ARGS, check_connection_params, make_fetcher, shown_url)
from ansible_collections.kvfleet.vllm.plugins.module_utils._latency import latency
from ansible_collections.kvfleet.vllm.plugins.module_utils._probe import ProbeError, snapshot


def main():
    module = AnsibleModule(argument_spec=dict(CONNECTION_ARGS), supports_check_mode=True)
    check_connection_params(module)
    try:
        view = snapshot(make_fetcher(module), shown_url(module))
    except ProbeError as exc:
        module.fail_json(msg=str(exc), url=shown_url(module))
    # one reading: quantiles since start; the raw bucket counts are for windows, not for users
    view["latency"] = latency(view.pop("histograms"))
    module.exit_json(changed=False, metrics=view)


if __name__ == "__main__":
    main()
