# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The URLs a router (or the deploy's analysis) reaches a host's vLLM instances at (docs/router.md).

One definition for the router role (its --worker-urls) and for the deploy's drain and undrain
(the URLs it removes from and adds to a running router): vllm-router answers 200 to the removal
of a URL it does not have, so the two must build the very same string. Stdlib only.
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.kvfleet.vllm.plugins.module_utils._canary import _median, binomial_sf
from ansible_collections.kvfleet.vllm.plugins.module_utils._prom import PromParseError, parse

__all__ = ["RouterError", "backend_urls", "address_ok", "reach", "backend_outcomes", "edge_errors"]

# vllm-router 0.1.17's one per-backend count of failed attempts (docs/router.md): its retries hide
# a backend's 5xx and refused connections from clients, and no other series names the backend
EDGE_SERIES = "vllm_router_cb_outcomes_total"
EDGE_MIN_FAILURES = 3      # fewer failed attempts than this never fail a host
EDGE_MARGIN = 0.01         # the share of failed attempts allowed above the other backends' median
EDGE_ALPHA = 0.01          # and only when so many failures are unlikely at the others' share

_ANY = ("", "0.0.0.0", "::", None)
# The records come from other hosts (their deployment records, written there): untrusted. What
# reaches the router's unit (--worker-urls) is an IP literal or a DNS name (letters, digits,
# '-', '_' for inventory names; labels of 1-63, 253 in all), a port number and an instance name,
# each matched whole (re.fullmatch): no space, quote, '%', '$' or line break gets into the unit.
_DNS = re.compile(r"(?=[A-Za-z0-9_.-]{1,253}\Z)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
                  r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?")
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")   # the server role's instance names (_instances.py)


class RouterError(ValueError):
    """Bad backend input; the message names the host, the instance and the field."""


def _ip(text):
    """An IP literal (IPv6 bracketed or not, no zone id) as an ipaddress object, else None."""
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if "%" in text:
        return None
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def address_ok(value):
    """True for an IP literal or a DNS name, matched whole."""
    return isinstance(value, str) and (_ip(value) is not None or _DNS.fullmatch(value) is not None)


def _loopback(bind):
    ip = _ip(bind)
    if ip is not None and ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return bind == "localhost" or (ip is not None and ip.is_loopback)


_NUMERIC = re.compile(r"(0[xX][0-9a-fA-F]+|[0-9]+)(\.(0[xX][0-9a-fA-F]+|[0-9]+)){0,3}")


def _refused_bind(bind):
    """Why a record's bind cannot be where a client is sent, or None. The record is the host's own
    word: an address in a short or numeric form (127.1, 2130706433, 0x7f000001: what inet_aton
    reads, a loopback in disguise), a link-local one (cloud metadata, 169.254.169.254), a multicast
    or an unspecified one, plain or IPv4-mapped, would aim the router (and the analysis) at the
    client host's own services."""
    if _ip(bind) is None and _NUMERIC.fullmatch(bind):
        return "an IPv4 address in a short or numeric form"
    ip = _ip(bind)
    if ip is None:
        return None
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for test, words in (("is_link_local", "a link-local address"), ("is_multicast", "a multicast address"),
                        ("is_unspecified", "the unspecified address")):
        if getattr(ip, test):
            return words
    return None


def _host_part(address):
    return "[%s]" % address if ":" in address and not address.startswith("[") else address


def reach(rec, address, host="", same_host=False, who="a router on another host"):
    """The host part of the URL a client reaches one instance record (the server role's deployment
    record: name, port, bind) at: `address`, the host's address as the inventory gives it, for an
    instance bound to every address or to that very address; a record that binds any other
    address is refused. A loopback-bound instance is reachable only from the same host
    (`same_host`); `who` names the client in the error."""
    if not isinstance(rec, dict) or not isinstance(rec.get("name"), str):
        raise RouterError("%s: an instance record is not a dict with a name: %r" % (host, rec))
    name = rec["name"]
    if not _NAME.fullmatch(name):
        raise RouterError("%s: an instance record's name is not an instance name (lower-case letters, "
                          "digits, '-', '_'; got %r)" % (host, name))
    port = rec.get("port")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise RouterError("%s: instance %s has no valid port (got %r)" % (host, name, port))
    bind = rec.get("bind")
    if bind in _ANY:
        if not isinstance(address, str) or not address.strip():
            raise RouterError("%s: no address to reach instance %s at (vllm_router_backend_address, "
                              "ansible_host or the inventory name)" % (host, name))
        where = address.strip()
        if not address_ok(where):
            raise RouterError("%s: the address to reach instance %s at (vllm_router_backend_address, "
                              "ansible_host or the inventory name) is not an IP address or a DNS name: %r"
                              % (host, name, address))
    elif not address_ok(bind):
        raise RouterError("%s: instance %s: its record's bind is not an IP address or a DNS name: %r"
                          % (host, name, bind))
    elif _refused_bind(bind):
        raise RouterError("%s: instance %s: its record's bind %r is %s, which no client is sent to (bind the "
                          "instance to the host's address, or to every address with vllm_router_backend_address)"
                          % (host, name, bind, _refused_bind(bind)))
    elif _loopback(bind):
        if not same_host:
            raise RouterError("%s: instance %s listens on %s only: %s cannot reach it (bind it to the "
                              "host's address, with an API key)" % (host, name, bind, who))
        where = "127.0.0.1" if bind == "localhost" else str(bind).strip("[]")
    elif not _same_address(bind, address):
        # the record is the host's own word: a bind elsewhere (another host, a service on the
        # client's network) would send the clients, and their API keys, there
        raise RouterError("%s: instance %s: its record's bind %r is not the address the inventory gives for the host "
                          "(%r: vllm_router_backend_address, ansible_host or the inventory name), and a host's record "
                          "cannot aim a client elsewhere: set vllm_router_backend_address to the address it binds"
                          % (host, name, bind, address))
    else:
        where = str(bind)
    return _host_part(where)


def _same_address(bind, address):
    """Whether a record's bind is the inventory's address for its host: the same IP, or the same
    DNS name (case and a final dot aside)."""
    if not isinstance(address, str) or not address.strip():
        return False
    a, b = _ip(str(bind)), _ip(address.strip())
    if a is not None or b is not None:
        return a is not None and a == b
    return str(bind).lower().rstrip(".") == address.strip().lower().rstrip(".")


def backend_urls(records, address, host="", same_host=False):
    """One URL per instance record (the server role's deployment record: name, port, bind, url,
    tls), reached as reach() says. TLS instances are refused: vllm-router 0.1.17 has no option for
    a CA or a client certificate."""
    if not isinstance(records, list) or not records:
        raise RouterError("%s: no vLLM instances (its deployment record or the server role's "
                          "instance model lists none)" % host)
    urls = []
    for rec in records:
        where = reach(rec, address, host=host, same_host=same_host)
        if rec.get("tls") or str(rec.get("url", "")).startswith("https:"):
            raise RouterError(
                "%s: instance %s serves TLS; vllm-router 0.1.17 cannot verify a backend's certificate "
                "authority or present a client certificate, so it cannot route to it" % (host, rec["name"]))
        urls.append("http://%s:%d" % (where, rec["port"]))
    return urls


def wrong_listings(listings, urls, hook):
    """The routers whose list of backends is not what the hook should have left: after a drain,
    one that still lists any of urls; after an undrain, one that lacks any. listings: each
    router's {router, urls} (urls None where it did not answer); returns [{router, lists}]."""
    if hook not in ("drain", "undrain"):
        raise RouterError("the hook is drain or undrain, got %r" % (hook,))
    wrong = []
    for item in listings:
        listed = list(item.get("urls") or [])
        bad = [u for u in urls if u in listed] if hook == "drain" else [u for u in urls if u not in listed]
        if bad:
            wrong.append({"router": item.get("router"), "lists": listed})
    return wrong


def backend_outcomes(text):
    """{worker URL: {'success': n, 'failure': n}} from one router's /metrics text; {} when the
    router has counted no outcome yet (the series appear with a backend's first answer)."""
    try:
        samples, unused = parse(text or "")
    except PromParseError as exc:
        raise RouterError("the router's /metrics is not Prometheus text: %s" % exc)
    out = {}
    for s in samples:
        if s.name != EDGE_SERIES or s.labels.get("outcome") not in ("success", "failure"):
            continue
        counts = out.setdefault(s.labels.get("worker", ""), {"success": 0.0, "failure": 0.0})
        counts[s.labels["outcome"]] += s.value
    return out


def _window(before, after):
    """Each worker's outcomes between two reads of one router; a counter that went down (the
    router restarted) counts from zero."""
    out = {}
    for worker, counts in after.items():
        first = before.get(worker) or {}
        out[worker] = dict((k, v - first.get(k, 0.0) if v >= first.get(k, 0.0) else v) for k, v in counts.items())
    return out


def edge_errors(before, after, urls, min_failures=EDGE_MIN_FAILURES, margin=EDGE_MARGIN, alpha=EDGE_ALPHA):
    """The routers' verdict on one host's instances over the analysis window, as a check of the
    canary analysis's shape (metric router_errors).

    before, after: each router's /metrics text at the window's start and end, in the same order;
    urls: the URLs the routers reach this host's instances at (backend_urls); a router whose text is
    empty or not Prometheus text at either end is left out. The host's share of
    failed attempts is compared with the median share of every other backend the routers sent
    attempts to (one broken backend does not move it); the check fails when the host's share is
    more than `margin` above it, with at least `min_failures` failed attempts, and so many
    failures at the others' share would happen by chance with probability below `alpha` (a
    binomial tail). None when no router was read or none sent this host an attempt."""
    if not before or not after or len(before) != len(after):
        return None
    mine = {"success": 0.0, "failure": 0.0}
    others = {}
    for first, last in zip(before, after):
        try:
            window = _window(backend_outcomes(first), backend_outcomes(last)) if first and last else {}
        except RouterError:
            window = {}   # a router not read at either end is left out, as one not listed
        for worker, counts in window.items():
            side = mine if worker in urls else others.setdefault(worker, {"success": 0.0, "failure": 0.0})
            for k in side:
                side[k] += counts.get(k, 0.0)
    attempts = mine["success"] + mine["failure"]
    if not attempts:
        return None
    shares = [c["failure"] / (c["success"] + c["failure"]) for c in others.values() if c["success"] + c["failure"]]
    base = _median(shares) if shares else 0.0
    share = mine["failure"] / attempts
    p_value = binomial_sf(mine["failure"], attempts, base)
    failed = mine["failure"] >= min_failures and share > base + margin and p_value < alpha
    why = ("%d of %d attempts the routers sent it failed (share %.3f; the other %d backends' median %.3f, "
           "limit %.3f, at least %d failed, binomial p=%.2g against %g)"
           % (mine["failure"], attempts, share, len(shares), base, base + margin, min_failures, p_value, alpha))
    return {"metric": "router_errors", "canary": round(share, 4), "baseline": round(base, 4),
            "limit": round(base + margin, 4), "result": "fail" if failed else "pass", "why": why,
            "test": "binomial", "p_value": float("%.4g" % p_value), "effect": {"difference": round(share - base, 4)},
            "level": None, "requests": {"canary": int(attempts), "failed": int(mine["failure"])}}
