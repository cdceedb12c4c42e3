# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""HTTP for modules through ansible.module_utils.urls, as a fetcher for _probe.snapshot.

What a server can do to the request is bounded here (rules in _probe's docstring): no redirect is
followed, one deadline covers the whole request, the body is capped at max_body_bytes.
"""

from __future__ import annotations

import json
import threading
import time

from urllib.error import HTTPError, URLError
from urllib.parse import urlsplit

from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils.urls import Request, make_context

from ansible_collections.kvfleet.vllm.plugins.module_utils._probe import (
    MAX_BODY_BYTES, DeadlineExceeded, FetchError, Response, check_encoding, check_range,
    check_url, read_body, redact_url, redirect_refused, scrub, with_deadline)

# Options shared by every module that talks to a vLLM server (documented in the
# kvfleet.vllm.connection doc fragment).
CONNECTION_ARGS = dict(
    url=dict(type="str", required=True),
    api_key=dict(type="str", no_log=True),
    timeout=dict(type="float", default=10.0),
    validate_certs=dict(type="bool", default=True),
    ca_path=dict(type="path"),
    client_cert=dict(type="path"),
    client_key=dict(type="path", no_log=False),
    max_body_bytes=dict(type="int", default=MAX_BODY_BYTES),
)


def check_connection_params(module, urls=None):
    """Fail, naming the option, before any request is sent. `urls`: (option, url) pairs to check
    instead of the url option (a module that reads several servers)."""
    for option, url in urls if urls is not None else [("url", module.params["url"])]:
        try:
            password = urlsplit(url).password if isinstance(url, str) else None
        except ValueError:
            password = None
        if password:
            # Ansible echoes the module's arguments (invocation): mask the password there too.
            module.no_log_values.add(password)
        error = check_url(url, option)
        if error:
            module.fail_json(msg=error)
    error = (check_range("timeout", module.params["timeout"])
             or check_range("max_body_bytes", module.params["max_body_bytes"]))
    if error:
        module.fail_json(msg=error)


def shown_url(module):
    """The url option as results and messages may show it: without user:password@."""
    return redact_url(module.params["url"])


def _close(exc):
    try:
        exc.close()
    except Exception:  # nothing left to read
        pass


_CONTEXTS = {}
_CONTEXTS_LOCK = threading.Lock()


def _context(params):
    """One SSL context per module run (per set of TLS options): making one loads the CA bundle,
    about 40 ms of CPU, which open_url spends on every request, plain http included. A fleet
    gate sends thousands. Not cached when it fails: that request reports why, as before."""
    key = (params["validate_certs"], params.get("ca_path"), params.get("client_cert"),
           params.get("client_key"))
    with _CONTEXTS_LOCK:
        if key not in _CONTEXTS:
            _CONTEXTS[key] = make_context(validate_certs=key[0], cafile=key[1], client_cert=key[2],
                                          client_key=key[3])
        return _CONTEXTS[key]


def _get(url, **kwargs):
    """A GET as ansible.module_utils.urls' open_url sends it, with the run's SSL context
    (open_url takes none)."""
    return Request().open("GET", url, **kwargs)


def make_fetcher(module, target=None):
    """fetch(path) -> Response for the module's url, or for `target` ({url, api_key}: one of
    several servers a module reads; the other connection options are the module's)."""
    params = module.params
    headers = {"Accept": "text/plain, application/json"}
    api_key = (target or params).get("api_key")
    if api_key:
        headers["Authorization"] = "Bearer %s" % api_key
    base = (target or params)["url"].rstrip("/")
    timeout, limit = params["timeout"], params["max_body_bytes"]

    def fetch(path):
        deadline = time.monotonic() + timeout

        def work():
            resp = _get(base + path, headers=headers, timeout=timeout,
                        validate_certs=params["validate_certs"], ca_path=params.get("ca_path"),
                        client_cert=params.get("client_cert"), client_key=params.get("client_key"),
                        follow_redirects="none", decompress=False, http_agent="kvfleet.vllm",
                        context=_context(params))
            try:
                check_encoding(resp)
                return Response(resp.getcode(), read_body(resp, limit, deadline))
            finally:
                resp.close()

        return _answer(work, timeout)

    return fetch


def _answer(work, timeout, error_body=None):
    """Run `work` within `timeout`; every failure becomes a Response that says why.
    `error_body(exc)`: the body kept from an HTTP error answer (none by default)."""
    try:
        return with_deadline(work, timeout)
    except HTTPError as exc:
        body = error_body(exc) if error_body and not 300 <= exc.code < 400 else b""
        _close(exc)
        if 300 <= exc.code < 400:
            return Response(exc.code, b"", redirect_refused((exc.headers or {}).get("Location")))
        return Response(exc.code, body, scrub(to_native(exc.reason)))
    except URLError as exc:
        return Response(None, b"", scrub(to_native(exc.reason)))
    except DeadlineExceeded:   # with_deadline's, the socket's own timeout included
        return Response(None, b"", "timed out after %ss (one deadline for the whole request)"
                        % timeout)
    except FetchError as exc:
        return Response(None, b"", str(exc))
    except Exception as exc:  # reset, bad status line: report, never crash
        return Response(None, b"", scrub("%s: %s" % (type(exc).__name__, to_native(exc))))


def _post(url, **kwargs):
    return Request().open("POST", url, **kwargs)


def make_poster(module, target=None):
    """post(path, body dict) -> Response: a JSON POST to the module's url (or to `target`'s, as
    make_fetcher) with its connection options, bounded like fetch (one deadline, capped body, no
    redirect followed)."""
    params = module.params
    headers = {"Accept": "application/json, text/plain", "Content-Type": "application/json"}
    api_key = (target or params).get("api_key")
    if api_key:
        headers["Authorization"] = "Bearer %s" % api_key
    base = (target or params)["url"].rstrip("/")
    timeout, limit = params["timeout"], params["max_body_bytes"]

    def post(path, body):
        deadline = time.monotonic() + timeout
        data = json.dumps(body).encode("utf-8")

        def work():
            resp = _post(base + path, data=data, headers=headers, timeout=timeout,
                         validate_certs=params["validate_certs"], ca_path=params.get("ca_path"),
                         client_cert=params.get("client_cert"), client_key=params.get("client_key"),
                         follow_redirects="none", decompress=False, http_agent="kvfleet.vllm",
                         context=_context(params))
            try:
                return Response(resp.getcode(), read_body(resp, limit, deadline))
            finally:
                resp.close()

        def error_body(exc):
            # vLLM answers errors with a JSON body ({"error": {"message": ...}}): keep it
            try:
                return read_body(exc, limit, deadline)
            except Exception:  # an unreadable error body: the reason alone
                return b""

        return _answer(work, timeout, error_body)

    return post
