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
    type: str
    required: true
  api_key:
    description:
      - API key, sent in an C(Authorization) header as a bearer token. vLLM only checks it on C(/v1) routes, but a
        proxy in front of the server may check it everywhere.
    type: str
  timeout:
    description:
      - Seconds to wait for each HTTP request. vLLM binds its socket before the model is loaded,
        so during start-up requests hang rather than fail; keep this short.
    type: float
    default: 10
  validate_certs:
    description:
      - Verify the server's TLS certificate for C(https://) URLs.
    type: bool
    default: true
  ca_path:
    description:
      - PEM file of the CA that signed the server's certificate.
    type: path
"""
