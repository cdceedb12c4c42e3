# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Take one snapshot of a vLLM server: /metrics parsed and normalised, /health, /version.

The HTTP transport is injected (``fetch(path) -> Response``) so that modules use
``ansible.module_utils.urls`` and host-side tools use http.client, with one probing logic.
The rules both transports follow are here too, so that neither can be turned against us:

- redirects are never followed (the API key goes to the configured server only);
- one deadline per request, for connecting, the headers and the body together
  (``with_deadline``), not per socket read: a server that trickles bytes cannot hold us;
- the body is read up to a cap (``read_body``), and an encoding we did not ask for is refused;
- base URLs are http(s) with a host and neither query nor fragment (``check_url``);
- ``user:password@`` never appears in a result, an error or a log (``redact_url``, ``scrub``).

Standard library only.
"""

from __future__ import annotations

import json
import math
import re
import socket
import threading
import time

from urllib.parse import urlsplit

from ansible_collections.kvfleet.vllm.plugins.module_utils._latency import histograms
from ansible_collections.kvfleet.vllm.plugins.module_utils._prom import PromParseError, parse
from ansible_collections.kvfleet.vllm.plugins.module_utils._vllm_metrics import (
    NotVllmMetrics, edge_counters, normalize)

__all__ = ["BodyTooLarge", "DeadlineExceeded", "FetchError", "LIMITS", "MAX_BODY_BYTES",
           "MAX_WINDOW_SECONDS", "ProbeError", "Response", "check_encoding", "check_range",
           "check_url", "check_window", "extension_delay", "read_body", "redact_url", "redirect_refused", "sample",
           "sample_until_decided", "sample_window", "scrub", "snapshot", "unreachable_snapshot",
           "with_deadline"]

MAX_BODY_BYTES = 16 * 1024 * 1024
# option -> (lowest, lowest allowed itself, highest, how the lower bound reads)
LIMITS = {
    "timeout": (0, False, 600, "a positive number of seconds"),
    "interval": (0, True, 3600, "0 or more seconds"),
    "samples": (1, True, 1000, "1 or more"),
    "max_body_bytes": (1024, True, 1024 ** 3, "1024 or more bytes"),
}
# (samples - 1) x interval: the longest window one gate may sample
MAX_WINDOW_SECONDS = 3600
_CHUNK = 64 * 1024
_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s]*@")
_TEXT_LIMIT = 300


class ProbeError(Exception):
    """The server could not be read; the message names the URL and the cause."""


class FetchError(Exception):
    """A request refused on our side (body too large, unasked encoding); the text says why."""


class BodyTooLarge(FetchError):
    pass


class DeadlineExceeded(FetchError):
    pass


def check_range(name, value, rule=None):
    """None when value is a finite number within the option's limits, else a message naming
    the option and its range."""
    low, low_ok, high, reads = rule or LIMITS[name]
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
          and not math.isnan(value) and not math.isinf(value)
          and (value >= low if low_ok else value > low) and value <= high)
    return None if ok else "%s must be %s, at most %s, got %r" % (name, reads, high, value)


def check_window(samples, interval, names=("samples", "interval")):
    """None, or why (samples - 1) x interval is longer than one gate may take."""
    if (samples - 1) * interval > MAX_WINDOW_SECONDS:
        return ("%s x %s must stay within %d s: (%s - 1) x %s is %g s"
                % (names[0], names[1], MAX_WINDOW_SECONDS, samples, interval,
                   (samples - 1) * interval))
    return None


def redact_url(url):
    """The URL without user:password@ (for results, errors and logs)."""
    return _CREDENTIALS.sub(r"\1", url, count=1) if isinstance(url, str) else url


def scrub(text, limit=_TEXT_LIMIT):
    """Text from a server or an exception, fit for a result: credentials in URLs removed,
    unprintable characters replaced, at most `limit` characters."""
    text = _CREDENTIALS.sub(r"\1", str(text))
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text if len(text) <= limit else text[:limit] + "..."


def check_url(url, option="url"):
    """None, or why `url` cannot be a vLLM server's base URL (the message names the option)."""
    if not isinstance(url, str) or not url:
        return "%s must be the server's base URL, such as http://127.0.0.1:8000" % option
    shown = scrub(redact_url(url), 120)
    if any(not ch.isprintable() or ch.isspace() for ch in url):
        return "%s must not contain spaces or control characters, got %r" % (option, shown)
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError for a port that is not a number in 0..65535
    except ValueError as exc:
        return "%s is not a valid URL (%s), got %r" % (option, exc, shown)
    if port == 0:
        return "%s has port 0, got %r" % (option, shown)
    if parts.scheme not in ("http", "https"):
        return "%s must start with http:// or https://, got %r" % (option, shown)
    if not parts.hostname:
        return "%s has no host name, got %r" % (option, shown)
    if "?" in url or "#" in url:
        return ("%s must be the server's base URL, without a query (?...) or a fragment (#...), "
                "got %r" % (option, shown))
    return None


def redirect_refused(location):
    return ("redirected to %s; redirects are not followed, so that the API key never leaves the "
            "configured server: set the url to the address that answers itself"
            % scrub(redact_url(location or "(no Location)"), 200))


def _header(resp, name):
    headers = getattr(resp, "headers", None)
    if headers is not None:
        return headers.get(name)
    getheader = getattr(resp, "getheader", None)
    return getheader(name) if getheader else None


def check_encoding(resp):
    """We never ask for a compressed body; one sent anyway could be a decompression bomb."""
    encoding = (_header(resp, "Content-Encoding") or "").strip().lower()
    if encoding not in ("", "identity"):
        raise FetchError("the answer is %s-encoded, which was not asked for; refused"
                         % scrub(encoding, 40))


def read_body(resp, max_bytes, deadline, clock=time.monotonic):
    """The body, read in chunks: at most `max_bytes`, and only until `deadline` (clock time).

    One chunk is one socket read (read1), so a trickling server is noticed at its next byte.
    """
    declared = _header(resp, "Content-Length")
    try:
        declared = int(declared) if declared is not None else None
    except ValueError:
        declared = None
    if declared is not None and declared > max_bytes:
        raise BodyTooLarge("the answer announces %d bytes, more than max_body_bytes (%d); raise "
                           "max_body_bytes if this server really sends that much"
                           % (declared, max_bytes))
    read = getattr(resp, "read1", None) or resp.read
    chunks, total = [], 0
    while True:
        if clock() >= deadline:
            raise DeadlineExceeded("the body did not arrive in time")
        chunk = read(min(_CHUNK, max_bytes + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise BodyTooLarge("the answer is larger than max_body_bytes (%d bytes); raise "
                               "max_body_bytes if this server really sends that much" % max_bytes)


def with_deadline(work, seconds, abort=None):
    """work() in a daemon thread; its result or exception, or DeadlineExceeded after `seconds`.

    Socket timeouts apply to each read, so a server sending one byte now and then never trips
    them; this is the one deadline for the whole request. abort() (optional) is called on
    expiry to stop the worker (such as shutting its socket down); a worker that cannot be
    stopped ends with the process.
    """
    box = {}

    def run():
        try:
            box["value"] = work()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=run, name="kvfleet-http")
    thread.daemon = True
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        if abort is not None:
            try:
                abort()
            except Exception:  # best effort
                pass
        raise DeadlineExceeded("no complete answer within %ss" % seconds)
    if "error" in box:
        # the socket's own timeout is the same length and may fire first: the same outcome,
        # so that callers name it the same (a serving group's lost engine, for one)
        if isinstance(box["error"], socket.timeout):
            raise DeadlineExceeded("no complete answer within %ss" % seconds)
        raise box["error"]
    return box["value"]


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
    except (ValueError, RecursionError):  # a deeply nested document exhausts the stack
        return None
    version = data.get("version") if isinstance(data, dict) else None
    if not isinstance(version, (str, int, float)) or isinstance(version, bool) or not version:
        return None
    return scrub(version, 64)


def snapshot(fetch, base_url, clock=time.time):
    """Read the server once. Raises ProbeError when /metrics cannot be read or is not vLLM's.

    The view has the latency histograms' cumulative counts in 'histograms' (see _latency)."""
    taken = clock()
    base_url = redact_url(base_url)  # the caller's fetch holds the credentials; results never
    resp = fetch("/metrics")
    url = _join(base_url, "/metrics")
    if resp.status is None:
        raise ProbeError("cannot read %s: %s" % (url, scrub(resp.error or "no answer")))
    if resp.status != 200:
        raise ProbeError("cannot read %s: HTTP %s%s" % (
            url, resp.status, (" (%s)" % scrub(resp.error)) if resp.error else ""))
    try:
        samples, _types = parse(resp.body)
        view = normalize(samples)
    except (PromParseError, NotVllmMetrics) as exc:
        raise ProbeError("%s did not return vLLM metrics: %s" % (url, scrub(exc)))
    # the cumulative bucket counts, for latency quantiles over a window (_latency)
    view["histograms"] = histograms(samples)
    # the process's start and the HTTP layer's answers: a restart, and errors the engine never saw
    view.update(edge_counters(samples))
    health = fetch("/health")
    view["healthy"] = health.status == 200
    view["health_status"] = health.status
    if health.status != 200:
        view["health_error"] = scrub(health.error or ("HTTP %s" % health.status))
    view["version"] = _version(fetch)
    view["url"] = base_url
    view["time"] = round(taken, 3)
    return view


def unreachable_snapshot(base_url, error, clock=time.time):
    """The snapshot recorded for a server that could not be read (for the gate's history)."""
    return {"url": redact_url(base_url), "time": round(clock(), 3), "healthy": False,
            "error": scrub(error)}


def sample(fetch, base_url, clock=time.time, observe=None):
    """A snapshot for a diagnosis window: the per-engine views only when there are several
    engines (one engine's view is the snapshot itself), no per-model views, and the record of an
    unreadable server (engine_down) instead of an exception. observe(): what the caller reads
    beside the server at the same moment (a serving group head's links, on its host), added."""
    try:
        snap = snapshot(fetch, base_url, clock)
    except ProbeError as exc:
        snap = unreachable_snapshot(base_url, exc, clock)
    else:
        engines = snap.pop("engines", None) or {}
        if len(engines) > 1:
            snap["engines"] = engines
        snap.pop("models", None)
    if observe is not None:
        snap.update(observe())
    return snap


def sample_window(fetch, base_url, samples, interval, sleep=time.sleep, clock=time.time, observe=None):
    """`samples` samples at a steady cadence: each one `interval` s after the previous was due."""
    snaps, start = [], clock()
    for i in range(samples):
        if i:
            sleep(max(0.0, start + i * interval - clock()))
        snaps.append(sample(fetch, base_url, clock, observe))
    return snaps


def sample_until_decided(fetch, base_url, samples, interval, judge, sleep=time.sleep,
                         clock=time.time, observe=None):
    """A window of `samples`, then more samples while judge(snaps) says something is pending.

    judge(snaps) -> a diagnosis with 'pending' (entries with 'seconds_left'). A window that
    looks fine costs no more than sample_window; one that looks like a stall or an outage is
    extended (every `interval` s, at least 1 s) until the diagnosis decides, never beyond
    MAX_WINDOW_SECONDS. Returns (snaps, diagnosis, seconds added).
    """
    snaps = sample_window(fetch, base_url, samples, interval, sleep, clock, observe)
    result = judge(snaps)
    begun = clock()
    while True:
        delay = extension_delay(result, snaps, interval, clock(), begun)
        if delay is None:
            break
        sleep(delay)
        snaps.append(sample(fetch, base_url, clock, observe))
        result = judge(snaps)
    return snaps, result, round(clock() - begun, 2)


def extension_delay(result, snaps, interval, now, begun):
    """How long to wait before the next sample of a window being extended, or None when the
    diagnosis is decided or one more sample would take the window past MAX_WINDOW_SECONDS
    (measured from the first sample, or from `begun` when that has no time)."""
    if not result.get("pending"):
        return None
    step = max(float(interval), 1.0)
    if now + step - snaps[0].get("time", begun) > MAX_WINDOW_SECONDS:
        return None
    left = max(p.get("seconds_left") or 0.0 for p in result["pending"])
    return min(step, max(left, 0.0)) if left > 0 else step
