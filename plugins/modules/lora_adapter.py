#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: lora_adapter
short_description: Load or unload a LoRA adapter on a running vLLM server, without a restart, gated by a completion
version_added: 0.4.0
description:
  - Adds an adapter through vLLM's C(/v1/load_lora_adapter), then sends one completion with it
    (the adapter's name as the model); when that completion fails the adapter is unloaded again
    and the module fails. Removes one through C(/v1/unload_lora_adapter).
  - Idempotent. C(/v1/models) says what is loaded and from which folder (its C(root)); an
    adapter already loaded from O(path) is left alone, one loaded from another folder is
    unloaded and loaded from O(path).
  - The server must run with C(--enable-lora) and C(VLLM_ALLOW_RUNTIME_LORA_UPDATING) set
    (the server role's C(vllm_server_lora_runtime_updates)); without it vLLM does not serve the
    endpoints (404) and the module says so.
  - An adapter loaded at runtime is gone after a restart; list it in the server role's
    C(vllm_server_lora_adapters) too so that the next start loads it (docs/models.md).
author:
  - kvfleet maintainers (@kvfleet)
extends_documentation_fragment:
  - kvfleet.vllm.connection
  - kvfleet.vllm.connection.transport
  - kvfleet.vllm.attributes.action_group
attributes:
  check_mode:
    support: full
    description: In check mode it reads C(/v1/models) and reports what it would load or unload.
  diff_mode:
    support: none
    description: Nothing to diff.
options:
  name:
    description: The adapter's name, the model name clients ask for.
    type: str
    required: true
  path:
    description: The adapter's folder on the server's host (staged by the server role). Required when O(state=present).
    type: path
  state:
    description: Whether the adapter is loaded.
    type: str
    choices: [present, absent]
    default: present
  check_prompt:
    description: The prompt of the completion that proves a loaded adapter serves.
    type: str
    default: "Hello"
  check_max_tokens:
    description: Tokens that completion asks for (1 to 64).
    type: int
    default: 4
notes:
  - O(timeout) bounds each request; loading reads the adapter from disk and the completion waits
    for a batch slot, so give it some seconds on a busy server.
"""

EXAMPLES = r"""
- name: Serve the new adapter without restarting vLLM
  kvfleet.vllm.lora_adapter:
    url: http://127.0.0.1:8000
    api_key: "{{ vllm_server_api_key }}"
    name: sql-lora
    path: /var/lib/vllm/models/loras/sql-lora/2024-06-01
    timeout: 60
  no_log: false

- name: Take it away again
  kvfleet.vllm.lora_adapter:
    url: http://127.0.0.1:8000
    api_key: "{{ vllm_server_api_key }}"
    name: sql-lora
    state: absent
"""

RETURN = r"""
loaded:
  description: Whether the adapter is loaded when the module ends.
  returned: always
  type: bool
previous_path:
  description: The folder it was loaded from before (null when it was not loaded).
  returned: always
  type: str
completion:
  description: The text the check completion returned (the adapter serves).
  returned: when an adapter was loaded
  type: str
actions:
  description: What was done, in order (load, unload, check), with the HTTP status of each.
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kvfleet.vllm.plugins.module_utils._fetch import (
    CONNECTION_ARGS, check_connection_params, make_fetcher, make_poster, shown_url)
from ansible_collections.kvfleet.vllm.plugins.module_utils._lora import (
    answer_text, completion_text, loaded_adapters)


def _why(resp):
    return answer_text(resp.status, resp.body, resp.error)


def main():
    argument_spec = dict(CONNECTION_ARGS)
    argument_spec.update(
        name=dict(type="str", required=True),
        path=dict(type="path"),
        state=dict(type="str", default="present", choices=["present", "absent"]),
        check_prompt=dict(type="str", default="Hello"),
        check_max_tokens=dict(type="int", default=4, no_log=False),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True,
                           required_if=[("state", "present", ["path"])])
    check_connection_params(module)
    params = module.params
    if not 1 <= params["check_max_tokens"] <= 64:
        module.fail_json(msg="check_max_tokens: must be from 1 to 64, got %d" % params["check_max_tokens"])
    name, path, url = params["name"], params["path"], shown_url(module)
    fetch, post = make_fetcher(module), make_poster(module)
    actions = []

    resp = fetch("/v1/models")
    if resp.status != 200:
        module.fail_json(msg="%s/v1/models: %s" % (url, _why(resp)), loaded=False, previous_path=None,
                         actions=actions)
    try:
        loaded = loaded_adapters(resp.body)
    except ValueError as exc:
        module.fail_json(msg="%s/v1/models: %s" % (url, exc), loaded=False, previous_path=None,
                         actions=actions)
    previous = loaded.get(name)
    result = dict(previous_path=previous, actions=actions)

    def call(action, route, body):
        answer = post(route, body)
        actions.append(dict(action=action, status=answer.status))
        if answer.status == 404 and answer.body[:30].lstrip().startswith(b'{"detail"'):
            module.fail_json(msg="%s%s answered 404 Not Found: this server does not take runtime LoRA "
                             "updates (set vllm_server_lora_runtime_updates: true, which sets "
                             "VLLM_ALLOW_RUNTIME_LORA_UPDATING and --enable-lora)" % (url, route),
                             loaded=name in loaded, **result)
        return answer

    if params["state"] == "absent":
        if previous is None:
            module.exit_json(changed=False, loaded=False, **result)
        if module.check_mode:
            module.exit_json(changed=True, loaded=False, **result)
        answer = call("unload", "/v1/unload_lora_adapter", {"lora_name": name})
        if answer.status != 200:
            module.fail_json(msg="unloading %s from %s failed: %s" % (name, url, _why(answer)), loaded=True, **result)
        module.exit_json(changed=True, loaded=False, **result)

    if previous == path:
        module.exit_json(changed=False, loaded=True, **result)
    if module.check_mode:
        module.exit_json(changed=True, loaded=True, **result)
    if previous is not None:
        # another folder under this name: vLLM refuses a second load of a name (400)
        answer = call("unload", "/v1/unload_lora_adapter", {"lora_name": name})
        if answer.status != 200:
            module.fail_json(msg="replacing %s on %s: unloading the one from %s failed: %s"
                             % (name, url, previous, _why(answer)), loaded=True, **result)
    answer = call("load", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})
    if answer.status != 200:
        module.fail_json(msg="loading %s from %s on %s failed: %s" % (name, path, url, _why(answer)),
                         loaded=False, **result)
    check = post("/v1/completions", {"model": name, "prompt": params["check_prompt"],
                                     "max_tokens": params["check_max_tokens"], "temperature": 0})
    actions.append(dict(action="check", status=check.status))
    text = completion_text(check.body) if check.status == 200 else None
    if text is None:
        # it does not serve: take it away again, so that no client is sent to it
        undo = post("/v1/unload_lora_adapter", {"lora_name": name})
        actions.append(dict(action="unload", status=undo.status))
        module.fail_json(msg="%s loaded on %s but a completion with it failed (%s); %s" % (
            name, url, _why(check) if check.status != 200 else "no text in the answer",
            "unloaded again" if undo.status == 200 else "unloading it failed too: %s" % _why(undo)),
            loaded=undo.status != 200, **result)
    module.exit_json(changed=True, loaded=True, completion=text, **result)


if __name__ == "__main__":
    main()
