# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
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
    type: str
    required: true
  api_key:
    description:
      - API key, sent in an C(Authorization) header as a bearer token. vLLM only checks it on C(/v1) routes, but a
        proxy in front of the server may check it everywhere.
    type: str
"""

    # The transport options alone, for a module that reads several servers, each with its own url
    # and api_key (canary_analysis); modules with one server use both fragments.
    TRANSPORT = r"""
options:
  timeout:
    description:
      - Seconds each HTTP request may take in all (connecting, headers and body together), more
        than 0 and at most 600. vLLM binds its socket before the model is loaded, so during
        start-up requests hang rather than fail; keep this short.
    type: float
    default: 10
  max_body_bytes:
    description:
      - Largest answer body read, in bytes (1024 to 1073741824). A larger one is refused with an
        error that says so. A vLLM C(/metrics) is some tens of KiB per engine and model.
    type: int
    default: 16777216
  validate_certs:
    description:
      - Verify the server's TLS certificate for C(https://) URLs.
    type: bool
    default: true
  ca_path:
    description:
      - PEM file of the CA that signed the server's certificate (the server role's
        C(vllm_server_tls_ca), which the deployment record names as C(tls.ca_file)). Without it
        the system's trust store decides.
    type: path
  client_cert:
    description:
      - PEM client certificate to present, for a server that requires one
        (C(vllm_server_tls_client_auth=required)).
    type: path
  client_key:
    description:
      - PEM private key of O(client_cert).
    type: path
"""
