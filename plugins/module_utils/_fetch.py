# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""HTTP for modules through ansible.module_utils.urls, as a fetcher for _probe.snapshot."""

from __future__ import annotations

import socket

from urllib.error import HTTPError, URLError

from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils.urls import open_url

from ansible_collections.kvfleet.vllm.plugins.module_utils._probe import Response

# Options shared by every module that talks to a vLLM server (documented in the
# kvfleet.vllm.connection doc fragment).
CONNECTION_ARGS = dict(
    url=dict(type="str", required=True),
    api_key=dict(type="str", no_log=True),
    timeout=dict(type="float", default=10.0),
    validate_certs=dict(type="bool", default=True),
    ca_path=dict(type="path"),
)


def check_connection_params(module):
    """Fail, naming the option, before any request is sent."""
    url = module.params["url"]
    if not url.startswith(("http://", "https://")):
        module.fail_json(msg="url must start with http:// or https://, got %r" % url)
    if module.params["timeout"] <= 0:
        module.fail_json(msg="timeout must be a positive number of seconds, got %s"
                         % module.params["timeout"])


def make_fetcher(module):
    params = module.params
    headers = {"Accept": "text/plain, application/json"}
    if params.get("api_key"):
        headers["Authorization"] = "Bearer %s" % params["api_key"]
    base = params["url"].rstrip("/")

    def fetch(path):
        try:
            resp = open_url(base + path, headers=headers, timeout=params["timeout"],
                            validate_certs=params["validate_certs"], ca_path=params.get("ca_path"),
                            follow_redirects="safe", http_agent="kvfleet.vllm")
            return Response(resp.getcode(), resp.read())
        except HTTPError as exc:
            return Response(exc.code, b"", to_native(exc.reason))
        except URLError as exc:
            return Response(None, b"", to_native(exc.reason))
        except (socket.timeout, TimeoutError):
            return Response(None, b"", "timed out after %ss" % params["timeout"])
        except Exception as exc:  # connection reset, bad status line: report, never crash
            return Response(None, b"", "%s: %s" % (type(exc).__name__, to_native(exc)))

    return fetch
