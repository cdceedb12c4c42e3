# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Take one snapshot of a vLLM server: /metrics parsed and normalised, /health, /version.

The HTTP transport is injected (``fetch(path) -> Response``) so that modules use
``ansible.module_utils.urls`` and host-side tools use urllib, with one probing logic.
Standard library only.
"""

from __future__ import annotations

import json
import time

from ansible_collections.kvfleet.vllm.plugins.module_utils._prom import PromParseError, parse
from ansible_collections.kvfleet.vllm.plugins.module_utils._vllm_metrics import (
    NotVllmMetrics, normalize)

__all__ = ["ProbeError", "Response", "sample", "sample_window", "snapshot", "unreachable_snapshot"]


class ProbeError(Exception):
    """The server could not be read; the message names the URL and the cause."""


class Response(object):
    """What a fetcher returns. status None means no HTTP answer (error says why)."""
    __slots__ = ("status", "body", "error")

    def __init__(self, status=None, body=b"", error=None):
        self.status = status
        self.body = body
        self.error = error


def _join(base_url, path):
    return base_url.rstrip("/") + path


def _version(fetch):
    resp = fetch("/version")
    if resp.status != 200:
        return None
    try:
        data = json.loads(resp.body.decode("utf-8", "replace"))
    except ValueError:
        return None
    version = data.get("version") if isinstance(data, dict) else None
    return str(version) if version else None


def snapshot(fetch, base_url, clock=time.time):
    """Read the server once. Raises ProbeError when /metrics cannot be read or is not vLLM's."""
    taken = clock()
    resp = fetch("/metrics")
    url = _join(base_url, "/metrics")
    if resp.status is None:
        raise ProbeError("cannot read %s: %s" % (url, resp.error or "no answer"))
    if resp.status != 200:
        raise ProbeError("cannot read %s: HTTP %s%s" % (
            url, resp.status, (" (%s)" % resp.error) if resp.error else ""))
    try:
        samples, _types = parse(resp.body)
        view = normalize(samples)
    except (PromParseError, NotVllmMetrics) as exc:
        raise ProbeError("%s did not return vLLM metrics: %s" % (url, exc))
    health = fetch("/health")
    view["healthy"] = health.status == 200
    view["health_status"] = health.status
    if health.status != 200:
        view["health_error"] = health.error or ("HTTP %s" % health.status)
    view["version"] = _version(fetch)
    view["url"] = base_url
    view["time"] = round(taken, 3)
    return view


def unreachable_snapshot(base_url, error, clock=time.time):
    """The snapshot recorded for a server that could not be read (for the gate's history)."""
    return {"url": base_url, "time": round(clock(), 3), "healthy": False, "error": str(error)}


def sample(fetch, base_url, clock=time.time):
    """A snapshot for a diagnosis window: without the per-engine and per-model views, and the
    record of an unreadable server (engine_down) instead of an exception."""
    try:
        snap = snapshot(fetch, base_url, clock)
    except ProbeError as exc:
        return unreachable_snapshot(base_url, exc, clock)
    snap.pop("engines", None)
    snap.pop("models", None)
    return snap


def sample_window(fetch, base_url, samples, interval, sleep=time.sleep, clock=time.time):
    """`samples` samples at a steady cadence: each one `interval` s after the previous was due."""
    snaps, start = [], clock()
    for i in range(samples):
        if i:
            sleep(max(0.0, start + i * interval - clock()))
        snaps.append(sample(fetch, base_url, clock))
    return snaps
