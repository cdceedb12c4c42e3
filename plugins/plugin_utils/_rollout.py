# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The deploy's batch order and its analysis under traffic, decided in Python (kvfleet.vllm.deploy).

The batch order: hosts an earlier run left drained first (batch_order), then the inventory's.

Which servers are the canary and which the baseline, whether the analysis host can reach them,
what a verdict makes the deploy do, and what of the module's result the report keeps; and the
baseline of the analysis after a scheduled restart (peer_targets). Pure functions over plain
data; plugins/filter/analysis_sides.py and restart_baseline.py read the play's facts into them.
"""

from __future__ import annotations

from ansible_collections.kvfleet.vllm.plugins.module_utils._canary import INCONCLUSIVE_POLICIES, decide
from ansible_collections.kvfleet.vllm.plugins.module_utils._fleet import record_limits
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._outcome import SERVING
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._router import RouterError, edge_errors, reach

# the module's result, as the report keeps it (no samples: they are the analysis's raw data)
_DIGEST_KEYS = ("verdict", "reason", "mode", "checks", "requests", "causes", "window_seconds", "warmup_seconds",
                "decided_early", "before")


class RolloutError(ValueError):
    """A setting or a host the analysis cannot work with; the message names it."""


def batch_order(hosts, reachable, left_drained, settled=()):
    """The deploy's hosts in batch order: those an earlier run left drained (a marker on the host)
    first, then the others, each part in the inventory's order (hosts). Only a reachable host can
    be finished first; an unreachable one keeps its place. A settled host (found converged by the
    check, its line finished there) is in no batch: the first batch, the canary, is always a host
    that changes."""
    if not isinstance(hosts, (list, tuple)):
        raise RolloutError("hosts must be a list of host names, got %r" % (hosts,))
    reachable = set(reachable or [])
    drained = set(left_drained or [])
    settled = set(settled or []) - drained
    first = [h for h in hosts if h in reachable and h in drained]
    return first + [h for h in hosts if h not in first and h not in settled]


def _analysable(records):
    """The records a canary analysis can sample: a URL of their own (a Ray node has none) and not
    a serving group's member (its head is judged by the gate with the group's links)."""
    return [r for r in records or [] if isinstance(r, dict) and r.get("url") and not r.get("group")]


def _instances(record):
    """A deployment record's instance records (a list of them is taken as is)."""
    if isinstance(record, dict):
        return record.get("instances") or []
    return record if isinstance(record, list) else []


def _target(host, record, api_key, url):
    target = dict(record_limits(record), name="%s/%s" % (host, record.get("name")), host=host, url=url)
    if api_key:
        target["api_key"] = api_key
    return target


def _url(host, record, address, analysis_from, who=None):
    """The URL analysis_from reaches the instance at (as a router does, _router.reach), with the
    record's scheme."""
    scheme = "https" if record.get("tls") or str(record.get("url", "")).startswith("https:") else "http"
    where = reach(record, address or host, host=host, same_host=analysis_from == host,
                  who=who or "the analysis host, %s (vllm_deploy_analysis_from)," % analysis_from)
    return "%s://%s:%d" % (scheme, where, record["port"])


def peer_targets(peers, analysis_from):
    """The baseline of the analysis after a scheduled restart on host analysis_from: every
    instance a canary analysis can sample on the other hosts (peers: one dict each with 'host',
    'record', its deployment record's current state or instance list, and 'address', as the
    deploy's rows have it), reached from analysis_from as a router reaches them. No API keys:
    the analysis reads /metrics, /health and /version, which vLLM leaves unguarded. A peer without
    a record (not in the play, or not deployed) is left out. Raises RolloutError naming every
    instance analysis_from cannot reach."""
    out, problems = [], []
    for peer in peers or []:
        host = peer.get("host") if isinstance(peer, dict) else None
        if host is None or host == analysis_from:
            continue
        for r in _analysable(_instances(peer.get("record"))):
            try:
                url = _url(host, r, peer.get("address"), analysis_from,
                           who="the restart guard on %s (vllm_restart_analysis_seconds)" % analysis_from)
            except RouterError as exc:
                problems.append(str(exc))
                continue
            out.append(_target(host, r, "", url))
    if problems:
        raise RolloutError("the analysis after a scheduled restart samples the other hosts' instances "
                           "from %s: %s; set vllm_restart_analysis_baseline, or "
                           "vllm_restart_analysis_seconds: 0" % (analysis_from, "; ".join(problems)))
    return out


def check_reach(hosts, planned, analysis_from="localhost"):
    """Before anything changes: raise RolloutError naming every instance analysis_from would not
    reach, of the hosts that will change (planned: {host: the instance records it will run}; a
    first install and a serving group's member are not analysed) and of the serving hosts that may
    be a baseline (their 'before'). One pass over the play."""
    by_host = dict((h.get("host"), h) for h in hosts)
    problems = []
    for host, records in sorted((planned or {}).items()):
        if not ((by_host.get(host) or {}).get("before") or {}).get("version"):
            continue   # a first install is not analysed: nothing to roll it back to
        for r in _analysable(records):
            try:
                _url(host, r, (by_host.get(host) or {}).get("address"), analysis_from)
            except RouterError as exc:
                problems.append(str(exc))
    for h in hosts:
        if h.get("left_drained") or h.get("host") in (planned or {}):
            continue
        for r in _analysable(_instances(h.get("before"))):
            try:
                _url(h.get("host"), r, h.get("address"), analysis_from)
            except RouterError as exc:
                problems.append(str(exc))
    if problems:
        raise RolloutError(
            "the analysis samples every instance from %s (vllm_deploy_analysis_from): %s; or set "
            "vllm_deploy_analysis_seconds: 0" % (analysis_from, "; ".join(problems)))


def sides(hosts, canary_host, analysis_from="localhost", batch_records=None):
    """The canary and the baseline of canary_host's analysis.

    hosts: one dict per host of the play, in the inventory's order: 'host', 'outcome' (the row's
    outcome so far), 'batch' (its batch, None before it is reached), 'before' and 'after' (the
    instance records it ran before the deploy, and runs now), 'drained' (left out of the load
    balancer), 'api_key', 'address' (where an instance bound to every address is reached, as a
    router reaches it; the host's name when empty). The canary is canary_host's 'after'. The baseline is every other host
    that has not changed yet and serves (outcome untouched, not drained, not in canary_host's
    batch), with what it ran before; when there is none (the last batch, or every host left to
    change in one batch), the hosts this run already verified or found converged, with what they
    run now.
    batch_records: {host: its instance records now}, the hosts analysed in canary_host's batch.
    -> {'canary': targets, 'batch_canary': targets of batch_records, 'baseline': targets,
    'baseline_hosts': names, 'baseline_kind':
    'unchanged' | 'verified' | 'none'}; raises RolloutError for an instance analysis_from cannot
    reach, or a canary without one it can sample."""
    by_host = dict((h.get("host"), h) for h in hosts)
    me = by_host.get(canary_host)
    if me is None:
        raise RolloutError("%s is not a host of this deploy" % canary_host)
    canary_records = _analysable(_instances(me.get("after")))
    if not canary_records:
        raise RolloutError("%s has no instance the analysis can sample (a serving group member, or a Ray "
                           "node, is judged by its gate alone): set vllm_deploy_analysis_seconds: 0 for it"
                           % canary_host)

    def others(pick, records_key):
        chosen = []
        for h in hosts:
            if h.get("host") == canary_host or h.get("drained") or h.get("left_drained") or not pick(h):
                continue
            recs = _analysable(_instances(h.get(records_key)))
            if recs:
                chosen.append((h, recs))
        return chosen

    batch = me.get("batch")
    kind, chosen = "unchanged", others(
        lambda h: (h.get("outcome") or "untouched") == "untouched" and (h.get("batch") is None or h.get("batch") != batch),
        "before")
    if not chosen:
        # what runs the target now: the hosts this run verified, and the ones it found already
        # there (converged: outcome unchanged, in no batch)
        kind, chosen = "verified", others(
            lambda h: h.get("outcome") in SERVING and h.get("batch") != batch
            and (h.get("batch") is not None or h.get("outcome") == "unchanged")
            and (h.get("analysis") or {}).get("verdict") in (None, "pass"), "after")
    if not chosen:
        kind = "none"
    problems = []

    def targets(host, records):
        out = []
        for r in records:
            try:
                out.append(_target(host, r, (by_host.get(host) or {}).get("api_key"),
                                   _url(host, r, (by_host.get(host) or {}).get("address"), analysis_from)))
            except RouterError as exc:
                problems.append(str(exc))
        return out

    result = {
        "canary": targets(canary_host, canary_records),
        # every host of the batch analysed with it (batch_records), for a load sent to all of them
        "batch_canary": [t for h, recs in sorted((batch_records or {}).items()) for t in targets(h, _analysable(recs))],
        "baseline": [t for h, recs in chosen for t in targets(h["host"], recs)],
        "baseline_hosts": [h["host"] for h, _recs in chosen],
        "baseline_kind": kind,
    }
    if problems:
        raise RolloutError(
            "the analysis samples every instance from %s (vllm_deploy_analysis_from): %s; or set "
            "vllm_deploy_analysis_seconds: 0" % (analysis_from, "; ".join(problems)))
    return result


def _load_failures(load, host):
    """The analysis load's requests to `host`'s servers and to the others: (sent, failed) each."""
    mine, others = [0, 0], [0, 0]
    for t in (load or {}).get("targets") or []:
        if not isinstance(t, dict):
            continue
        side = mine if t.get("host") == host else others
        side[0] += int(t.get("sent") or 0)
        side[1] += int(t.get("failed") or 0)
    return mine, others


def action(result, inconclusive="fail_canary", canary_batch=True, load=None, host=None, routers=None):
    """What the deploy does with an analysis result: {'keep', 'stop', 'judged', 'why', 'edge'}.

    The module's own decision (canary_analysis' 'decision', made with the policy the deploy
    passed it) when the result has one, else _canary.decide. The analysis load's failed
    requests to this host (load: analysis_load's result) fail it too when their share is more
    than 1% above the other servers'; so do the routers' failed attempts on its instances
    (routers: {'before', 'after': each router's /metrics text, 'urls': this host's backend URLs};
    _router.edge_errors), which their retries hide from clients and from vLLM's own counters.
    'edge' is that check (None when no router was read or none sent the host an attempt)."""
    if inconclusive not in INCONCLUSIVE_POLICIES:
        raise RolloutError("vllm_deploy_analysis_inconclusive must be one of %s, got %r"
                           % (", ".join(INCONCLUSIVE_POLICIES), inconclusive))
    result = result if isinstance(result, dict) else {}
    out = result.get("decision")
    if not isinstance(out, dict) or "keep" not in out:
        out = decide(result, inconclusive=inconclusive, canary_batch=canary_batch)
    out = dict(out)
    (sent, failed), (other_sent, other_failed) = _load_failures(load, host)
    if sent and failed / float(sent) > (other_failed / float(other_sent) if other_sent else 0.0) + 0.01:
        out.update(keep=False, stop=True, why="analysis failed: the analysis load's requests to %s failed, %d of "
                   "%d (the other servers: %d of %d)%s" % (host, failed, sent, other_failed, other_sent,
                                                           "; " + out["why"] if out.get("why") else ""))
    routers = routers if isinstance(routers, dict) else {}
    try:
        out["edge"] = edge_errors(routers.get("before"), routers.get("after"), list(routers.get("urls") or []))
    except RouterError as exc:
        raise RolloutError("%s, read after the analysis of %s (vllm_deploy_routers)" % (exc, host))
    if out["edge"] and out["edge"]["result"] == "fail":
        out.update(keep=False, stop=True, judged=True, why="analysis failed: router_errors: %s%s" % (
            out["edge"]["why"], "; " + out["why"] if out.get("why") else ""))
    return out


# the series of the deploy report's charts: (its key, the snapshot's key)
_SERIES = (("kv", "kv_cache_usage"), ("running", "requests_running"), ("waiting", "requests_waiting"))


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def series(samples):
    """The deploy report's charts of one analysis: per sample index, each side's mean KV cache
    usage, running and waiting requests over its servers, and its preemptions since the first
    sample (summed), at seconds from the first canary sample. samples: the module's 'samples'
    ({side: {server: [snapshots]}})."""
    samples = samples if isinstance(samples, dict) else {}
    runs = dict((side, [list(v) for v in (samples.get(side) or {}).values() if isinstance(v, list)])
                for side in ("canary", "baseline"))
    times = [s.get("time") for run in runs["canary"] for s in run[:1] if _number(s.get("time"))]
    t0 = min(times) if times else None
    length = max([len(run) for side in runs.values() for run in side] or [0])
    points = []
    for i in range(length):
        point = {}
        for side, run_list in runs.items():
            snaps = [run[i] for run in run_list if i < len(run) and isinstance(run[i], dict)]
            if side == "canary" and snaps and _number(snaps[0].get("time")) and t0 is not None:
                point["t"] = round(snaps[0]["time"] - t0, 1)
            for key, field in _SERIES:
                values = [s[field] for s in snaps if _number(s.get(field))]
                point["%s_%s" % (key, side)] = round(sum(values) / len(values), 4) if values else None
            total = 0
            for run in run_list:
                if i < len(run) and _number(run[i].get("preemptions_total")) and _number(run[0].get("preemptions_total")):
                    total += max(run[i]["preemptions_total"] - run[0]["preemptions_total"], 0)
            point["preempt_%s" % side] = total
        if "t" in point:
            points.append(point)
    return points


def digest(result, seconds=None):
    """What the report keeps of a canary_analysis result: its verdict, reason, checks, requests
    and causes, the hosts of its canary and baseline, the seconds it took, and the charts'
    series (series(); not the samples themselves)."""
    result = result if isinstance(result, dict) else {}
    out = dict((k, result.get(k)) for k in _DIGEST_KEYS)
    out["series"] = series(result.get("samples"))
    for side in ("canary", "baseline"):
        hosts = []
        for t in result.get("targets") or []:
            if isinstance(t, dict) and t.get("side") == side and t.get("host") not in hosts:
                hosts.append(t.get("host"))
        out["%s_hosts" % side] = hosts
    out["seconds"] = seconds
    return out


def failed_checks(analysis):
    """The failed checks of a digest, each as 'metric: the module's why' (its numbers)."""
    return ["%s: %s" % (c.get("metric"), c.get("why")) for c in (analysis or {}).get("checks") or []
            if isinstance(c, dict) and c.get("result") == "fail"]
