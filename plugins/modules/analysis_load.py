#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: analysis_load
short_description: Send a bounded load of completions to vLLM servers, for an analysis under traffic
version_added: 0.4.0
description:
  - Sends completions built from O(prompts) to every server of O(targets) for O(duration)
    seconds, O(rate) requests per second to each (open loop, the same rate to every server),
    with at most O(concurrency) in flight per server. A request due while its server is at
    that cap is not sent and is counted as C(skipped), so a slow server shows as slow instead
    of pulling the load down.
  - Made for M(kvfleet.vllm.canary_analysis) when no users are there (a deploy at night). The
    C(kvfleet.vllm.deploy) playbook runs it beside the analysis, only against the canary and
    the baseline, with C(vllm_deploy_analysis_load) (docs/canary-analysis.md).
  - Every request asks for O(max_tokens) tokens with C(ignore_eos), at a temperature of 1; an
    answer other than HTTP 200 with that many tokens counts as C(failed).
author:
  - kvfleet maintainers (@kvfleet)
extends_documentation_fragment:
  - kvfleet.vllm.connection.transport
  - kvfleet.vllm.attributes.action_group
attributes:
  check_mode:
    support: full
    description: In check mode nothing is sent; the result says how many requests would be.
  diff_mode:
    support: none
    description: Nothing to diff.
options:
  targets:
    description: The servers to load. The TLS options apply to all of them.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The server's name, returned as is.
        type: str
        required: true
      url:
        description: The server's base URL (C(http://) or C(https://), no path).
        type: str
        required: true
      api_key:
        description: API key for this server, sent as a bearer token.
        type: str
      host:
        description: The inventory host the server belongs to, returned as is.
        type: str
      max_num_seqs:
        description: Accepted and not used, so that M(kvfleet.vllm.canary_analysis)'s targets serve as they are.
        type: int
      max_num_batched_tokens:
        description: Accepted and not used, as O(targets[].max_num_seqs).
        type: int
      max_num_active_seqs:
        description: Accepted and not used, as O(targets[].max_num_seqs).
        type: int
      max_model_len:
        description: Accepted and not used, as O(targets[].max_num_seqs).
        type: int
  prompts:
    description: The prompts, used in turn. Use prompts of the lengths your users send; the load
      is only as telling as they are.
    type: list
    elements: str
    required: true
  model:
    description: The model name of the requests; by default the first model each server lists on C(/v1/models).
    type: str
  duration:
    description: Seconds during which requests are started, at most 3600.
    type: float
    required: true
  rate:
    description: Requests per second started on each server, at most 100.
    type: float
    default: 1.0
  concurrency:
    description: Requests in flight on each server at most, 1 to 64.
    type: int
    default: 4
  max_tokens:
    description: Tokens each request asks for.
    type: int
    default: 64
  request_timeout:
    description: Seconds one request may take; after O(duration), the module waits this long at
      most for the requests still in flight.
    type: float
    default: 120
  stop_file:
    description: A path on the host the module runs on; once a file is there, no request is
      started any more (as at the end of O(duration)), and the module waits for what is in flight.
      So that a load run with C(async) ends with the analysis it serves, which may end before
      O(duration) (an early verdict, or a window that had enough requests). A file already there
      at the start stops the load at once.
    type: path
    version_added: 0.5.0
notes:
  - The load is real work for the servers and the GPUs; bound it with O(rate) and O(duration).
seealso:
  - module: kvfleet.vllm.canary_analysis
"""

EXAMPLES = r"""
- name: Two requests a second to the canary and to the baseline for five minutes
  kvfleet.vllm.analysis_load:
    targets:
      - {name: new, url: "http://gpu-03.example.net:8000"}
      - {name: old, url: "http://gpu-01.example.net:8000"}
    prompts: "{{ lookup('ansible.builtin.file', 'prompts.json') | from_json }}"
    duration: 300
    rate: 2
    max_tokens: 256
  delegate_to: localhost
  async: 900
  poll: 0
  register: load_job
"""

RETURN = r"""
targets:
  description: Per server, C(name), C(host), C(sent), C(ok), C(failed), C(skipped) (due while at the
    concurrency cap), C(errors) (the first three), C(median_seconds) and C(p95_seconds) of the answered ones.
  returned: always
  type: list
  elements: dict
requests_sent:
  description: Requests sent, all servers together (in check mode, how many would be).
  returned: always
  type: int
requests_failed:
  description: Requests that failed, all servers together (not C(failed), which is Ansible's own result key).
  returned: always
  type: int
seconds:
  description: Seconds from the first request to the end of the last.
  returned: always
  type: float
unfinished:
  description: Requests still in flight when the module stopped waiting.
  returned: always
  type: int
stopped:
  description: Whether O(stop_file) ended the load before O(duration).
  returned: always
  type: bool
  version_added: 0.5.0
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kvfleet.vllm.plugins.module_utils._fetch import (
    CONNECTION_ARGS, check_connection_params, make_fetcher, make_poster)
from ansible_collections.kvfleet.vllm.plugins.module_utils._fleet import target_options
from ansible_collections.kvfleet.vllm.plugins.module_utils._load import check, run
from ansible_collections.kvfleet.vllm.plugins.module_utils._lora import answer_text


def _model(module, target):
    """The first model the server lists, or the error's words."""
    answer = make_fetcher(module, target)("/v1/models")
    if answer.status != 200:
        return None, "%s: /v1/models: %s" % (target["name"], answer.error or "HTTP %s" % answer.status)
    try:
        return json.loads(answer.body.decode("utf-8"))["data"][0]["id"], None
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None, "%s: /v1/models lists no model" % target["name"]


def _sender(module, target, model):
    p = module.params
    post = make_poster(module, target)
    prompts = p["prompts"]

    def send(index):
        body = {"model": model, "prompt": prompts[index % len(prompts)], "max_tokens": p["max_tokens"],
                "ignore_eos": True, "temperature": 1.0}
        answer = post("/v1/completions", body)
        if answer.status != 200:
            return answer_text(answer.status, answer.body, answer.error)
        try:
            tokens = json.loads(answer.body.decode("utf-8"))["usage"]["completion_tokens"]
        except (ValueError, KeyError, TypeError, AttributeError):
            return "an answer without usage.completion_tokens"
        return None if tokens == p["max_tokens"] else "%s of %s tokens" % (tokens, p["max_tokens"])
    return send


def main():
    transport = dict((k, v) for k, v in CONNECTION_ARGS.items() if k not in ("url", "api_key"))
    module = AnsibleModule(
        argument_spec=dict(
            transport,
            # canary_analysis's targets as they are (their scheduler limits are not used here)
            targets=dict(type="list", elements="dict", required=True, options=target_options()),
            prompts=dict(type="list", elements="str", required=True),
            model=dict(type="str"),
            duration=dict(type="float", required=True),
            rate=dict(type="float", default=1.0),
            concurrency=dict(type="int", default=4),
            max_tokens=dict(type="int", default=64, no_log=False),
            request_timeout=dict(type="float", default=120.0),
            stop_file=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    check_connection_params(module, [("targets[%d].url" % i, t["url"]) for i, t in enumerate(p["targets"])])
    error = check(p["targets"], p["prompts"], p["duration"], p["rate"], p["concurrency"], p["max_tokens"])
    if not error and not 0 < p["request_timeout"] <= 3600:
        error = "request_timeout must be more than 0 and at most 3600 seconds, got %r" % p["request_timeout"]
    if error:
        module.fail_json(msg=error)
    due = int(p["duration"] * p["rate"] + 0.999999) * len(p["targets"])
    if module.check_mode:
        module.exit_json(changed=False, targets=[], requests_sent=due, requests_failed=0, seconds=0.0, unfinished=0,
                         stopped=False, msg="would send %d requests" % due)
    models = []
    for target in p["targets"]:
        model, error = (p["model"], None) if p["model"] else _model(module, target)
        if error:
            module.fail_json(msg=error)
        models.append(model)
    # a completion's own deadline: the transport's timeout is for the probe of /v1/models
    module.params["timeout"] = p["request_timeout"]
    senders = [(t["name"], _sender(module, t, m)) for t, m in zip(p["targets"], models)]
    stop = (lambda: os.path.exists(p["stop_file"])) if p["stop_file"] else None
    out = run(senders, p["duration"], p["rate"], p["concurrency"], wait=p["request_timeout"], stop=stop)
    hosts = dict((t["name"], t.get("host")) for t in p["targets"])
    for entry in out["targets"]:
        entry["host"] = hosts.get(entry["name"])
    sent = sum(t["sent"] for t in out["targets"])
    failed = sum(t["failed"] for t in out["targets"])
    module.exit_json(changed=False, requests_sent=sent, requests_failed=failed,
                     msg="%d requests sent to %d servers in %ss, %d failed%s" % (
                         sent, len(out["targets"]), out["seconds"], failed,
                         ", ended by the stop file" if out["stopped"] else ""),
                     **out)


if __name__ == "__main__":
    main()
