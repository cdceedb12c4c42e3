# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Latency quantiles (p50, p90, p99) from vLLM's histograms. Standard library only.

Four histograms, each a family of cumulative ``_bucket`` series with an ``le`` label, per engine:

- ``ttft``: ``vllm:time_to_first_token_seconds``;
- ``itl``: ``vllm:inter_token_latency_seconds`` (older releases: ``vllm:time_per_output_token_seconds``;
  when a server exposes both, the new name is read and the old one never added to it);
- ``queue``: ``vllm:request_queue_time_seconds``;
- ``e2e``: ``vllm:e2e_request_latency_seconds``.

``histograms(samples)`` keeps the cumulative counts of one reading (JSON-safe, stored in snapshots
and in the monitor's history). ``latency(last, first)`` turns them into quantiles: over a window
from the difference of the bucket counts between its first and last reading (Prometheus'
``histogram_quantile(q, rate(..._bucket[window]))``), or, with one reading, over everything the
server observed since it started (``basis: since_start``).

The quantile follows Prometheus' ``bucketQuantile`` (promql/quantile.go):

- rank = q x (count of the +Inf bucket); the quantile lies in the first bucket whose cumulative
  count reaches the rank;
- within that bucket it is interpolated linearly between the bucket's lower bound (the previous
  bucket's ``le``; 0 for the first bucket) and its upper bound (its ``le``):
  lower + (upper - lower) x (rank - count below) / (count in the bucket);
- when that bucket is the +Inf bucket, the result is the upper bound of the highest finite bucket
  (nothing is known above it);
- when it is the first bucket and that bucket's ``le`` is 0 or less, the result is that ``le``.

Unlike Prometheus, which papers over some of them, no quantile is computed from buckets that
cannot be true: a count that is NaN, infinite, negative or larger than 2^53; an ``le`` that is not
a number; two buckets with one ``le``; no +Inf bucket; no finite bucket; cumulative counts that
fall as ``le`` grows; bounds that differ between the two readings or between engines that are
added up; or counts that went down from one reading of the window to the next (the server
restarted in the window: its counters began again; Prometheus' rate() would guess across it). Such a quantile is ``None`` with a ``reason``, as is one of a
histogram the server does not expose or a window in which nothing was observed (no request
finished). Nothing here raises on bad input.
"""

from __future__ import annotations

import math

__all__ = ["METRICS", "QUANTILES", "bucket_quantile", "counts_between", "histograms", "latency", "window"]

# short name -> the histogram family (newest name first)
METRICS = (
    ("ttft", ("vllm:time_to_first_token_seconds",)),
    ("itl", ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")),
    ("queue", ("vllm:request_queue_time_seconds",)),
    ("e2e", ("vllm:e2e_request_latency_seconds",)),
)
QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
# what an empty histogram means
_NOTHING = {"ttft": "no first token", "itl": "no token generated",
            "queue": "no request scheduled", "e2e": "no request finished"}
# counts above this are not counts (and lose integer precision as floats); as _vllm_metrics
_MAX_COUNT = 2 ** 53
_DIGITS = 6  # microseconds: finer than any bucket bound vLLM uses
_RESTARTED = ("the bucket counts went down in the window: the server restarted (its counters "
              "began again)")
_EXCERPT = 80


def _short(text):
    text = "".join(ch if ch.isprintable() else "?" for ch in str(text))
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "..."


def _is_count(value):
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and not math.isnan(value) and not math.isinf(value) and 0 <= value <= _MAX_COUNT)


def _is_bound(value):
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and not math.isnan(value) and not math.isinf(value))


def _engine_key(engine):
    return (0, int(engine), "") if engine.isascii() and engine.isdigit() else (1, 0, engine)


def _series(samples, family):
    """{labels other than le: [(le text, value)]}: one family's _bucket series, one entry per
    series (histograms() adds those of one engine up)."""
    name = family + "_bucket"
    by_series = {}
    for s in samples:
        if s.name != name:
            continue
        others = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
        by_series.setdefault(others, []).append((s.labels.get("le"), s.value))
    return by_series


def _one_series(buckets):
    """Cumulative buckets of one series -> (bounds, counts) or (None, reason).

    bounds: the finite ``le`` values, ascending; counts: one per bound, then the +Inf count.
    """
    parsed = {}
    inf = None
    for le, value in buckets:
        if le is None:
            return None, "a bucket has no le label"
        try:
            bound = float(le)
        except ValueError:
            return None, "le=%r is not a number" % _short(le)
        if math.isnan(bound):
            return None, "le=%r is not a number" % _short(le)
        if not _is_count(value):
            return None, "the count of le=%s is %s, not a count" % (_short(le), _short(repr(value)))
        if bound == float("inf"):
            if inf is not None:
                return None, "two +Inf buckets"
            inf = value
            continue
        if bound == float("-inf"):
            return None, "le=-Inf cannot be a bucket bound"
        if bound in parsed:
            return None, "two buckets with le=%s" % _short(le)
        parsed[bound] = value
    if inf is None:
        return None, "no +Inf bucket"
    if not parsed:
        return None, "only the +Inf bucket"
    bounds = sorted(parsed)
    return _checked(bounds, [parsed[b] for b in bounds] + [inf])


def _checked(bounds, counts):
    """(bounds, counts) when they can be a cumulative histogram, else (None, reason)."""
    for i in range(1, len(counts)):
        if counts[i] < counts[i - 1]:
            upper = "+Inf" if i == len(bounds) else repr(bounds[i])
            return None, ("cumulative counts fall from %s (le=%r) to %s (le=%s)"
                          % (_num(counts[i - 1]), bounds[i - 1], _num(counts[i]), upper))
    return list(bounds), [_num(c) for c in counts]


def _num(value):
    return int(value) if float(value).is_integer() else value


def _sum(parts):
    """Add histograms with the same bounds (engines, model names): (bounds, counts) or reason."""
    bounds = parts[0][0]
    if any(p[0] != bounds for p in parts[1:]):
        return None, "the series have different bucket bounds and cannot be added"
    return bounds, [_num(sum(c)) for c in zip(*[p[1] for p in parts])]


def histograms(samples):
    """The latency histograms of one reading (samples from _prom.parse), JSON-safe.

    {metric: {engine: {"le": [finite bounds], "counts": [cumulative counts, +Inf last]}
    or {"error": why these buckets cannot be used}}}; a metric the server does not expose is
    left out. Series of one engine with several model names are added up.
    """
    out = {}
    for metric, families in METRICS:
        for family in families:
            by_series = _series(samples, family)
            if not by_series:
                continue
            per_engine = {}
            for others, buckets in by_series.items():
                # V0 has no engine label: its one engine is "0", as in the normalised view
                engine = dict(others).get("engine", "0")
                per_engine.setdefault(engine, []).append(_one_series(buckets))
            hist = {}
            for engine, parts in per_engine.items():
                bad = [reason for bounds, reason in parts if bounds is None]
                if bad:
                    hist[engine] = {"error": bad[0]}
                    continue
                bounds, counts = _sum(parts)
                hist[engine] = {"error": counts} if bounds is None else {"le": bounds, "counts": counts}
            out[metric] = hist
            break  # the newest name that is there; never both
    return out


def bucket_quantile(q, bounds, counts):
    """The q-quantile (0 < q < 1) of cumulative buckets, by Prometheus' rule (see the module's
    docstring). bounds: finite upper bounds, ascending; counts: cumulative, one per bound, then
    the +Inf count. None when nothing was observed."""
    total = counts[-1]
    if total <= 0:
        return None
    rank = q * total
    b = 0
    while counts[b] < rank:  # the +Inf count is the total: the loop ends there at the latest
        b += 1
    if b == len(bounds):
        return float(bounds[-1])  # the +Inf bucket: its lower bound is all that is known
    if b == 0 and bounds[0] <= 0:
        return float(bounds[0])
    start, below = (bounds[b - 1], counts[b - 1]) if b > 0 else (0.0, 0)
    return start + (bounds[b] - start) * (rank - below) / (counts[b] - below)


def _stored(entry):
    """A stored histogram (from a snapshot or a history line, which may be damaged) ->
    (bounds, counts) or (None, reason)."""
    if not isinstance(entry, dict):
        return None, "the stored histogram is not a mapping"
    if "error" in entry:
        return None, _short(entry["error"])
    bounds, counts = entry.get("le"), entry.get("counts")
    if (not isinstance(bounds, list) or not isinstance(counts, list) or not bounds
            or len(counts) != len(bounds) + 1 or not all(_is_bound(b) for b in bounds)
            or not all(_is_count(c) for c in counts)
            or any(bounds[i] >= bounds[i + 1] for i in range(len(bounds) - 1))):
        return None, "the stored histogram is malformed"
    return _checked(bounds, counts)


def _empty(reason):
    out = dict((name, None) for name, _q in QUANTILES)
    out.update(count=None, reason=reason)
    return out


def _quantiles(metric, last, first, where):
    """One metric of one engine (or the sum of the engines): its entry of the result."""
    bounds, counts = last
    if bounds is None:
        return _empty(counts)
    if first is not None:
        first_bounds, first_counts = first
        if first_bounds is None:
            return _empty(first_counts)
        if first_bounds != bounds:
            return _empty("the bucket bounds changed in the window (another server version?)")
        if any(a > b for a, b in zip(first_counts, counts)):
            return _empty(_RESTARTED)
        counts = [_num(b - a) for a, b in zip(first_counts, counts)]
        bounds, counts = _checked(bounds, counts)
        if bounds is None:
            return _empty("the window's bucket counts are not cumulative: %s" % counts)
    if counts[-1] == 0:
        out = _empty("nothing observed %s (%s)" % (where, _NOTHING[metric]))
        out["count"] = 0
        return out
    out = dict((name, bucket_quantile(q, bounds, counts)) for name, q in QUANTILES)
    if not all(_is_bound(v) for v in out.values()):
        # bounds near the float limits overflow the interpolation
        return _empty("the bucket bounds are too large to interpolate")
    out = dict((name, round(v, _DIGITS)) for name, v in out.items())
    out.update(count=_num(counts[-1]), reason=None)
    return out


def _engines(hists, metric):
    """{engine: (bounds, counts) or (None, reason)} of one metric in one reading."""
    per_engine = (hists or {}).get(metric)
    if not isinstance(per_engine, dict):
        return {}
    return dict((str(e), _stored(h)) for e, h in per_engine.items())


def _total(engines):
    """The engines added up (Prometheus' sum by (le)), or (None, reason)."""
    if not engines:
        return None, "not exposed by this server"
    ordered = sorted(engines, key=_engine_key)
    for e in ordered:
        if engines[e][0] is None:
            return None, engines[e][1] if len(engines) == 1 else "engine %s: %s" % (
                _short(e), engines[e][1])
    return _sum([engines[e] for e in ordered])


def _went_down(readings):
    """Whether counts fell between two consecutive readings [(bounds, counts)] of one series."""
    for (b1, c1), (b2, c2) in zip(readings, readings[1:]):
        if b1 is not None and b1 == b2 and any(a > b for a, b in zip(c1, c2)):
            return True
    return False


def latency(last, first=None, seconds=None, between=()):
    """Quantiles from the histograms of one reading (since the server started) or of a window's
    last and first readings (their difference). last/first: what histograms() returned; between:
    those of the readings in between, only checked for counts that went down (a restart between
    the first and the last reading, whose difference alone would hide it).

    {"basis": "since_start" or "window", "seconds": the window's length or None,
     metric: {"p50", "p90", "p99": seconds or None, "count": observations or None,
              "reason": None or why the quantiles are None},
     "engines": {engine: {metric: ...}} (only with several engines)}.
    """
    if not isinstance(last, dict):
        last = {}
    if first is not None and not isinstance(first, dict):
        first = {}  # damaged: read as a reading without histograms
    where = "since the server started" if first is None else "in the window"
    out = {"basis": "since_start" if first is None else "window",
           "seconds": None if first is None else seconds}
    per_engine = {}
    series = [first] + [h for h in between if isinstance(h, dict)] + [last]
    for metric, _families in METRICS:
        now = _engines(last, metric)
        before = _engines(first, metric) if first is not None else None
        readings = [_engines(h, metric) for h in series] if first is not None else []
        start = None
        if before is not None:
            start = _total(before)
            if start[0] is None:
                start = (None, "the first reading of the window: %s" % start[1])
            elif now and set(now) != set(before):
                # sums over different engines are not one counter
                start = (None, "the engines differ between the first and the last reading of "
                               "the window")
            elif _went_down([_total(r) for r in readings]):
                start = (None, _RESTARTED)
        out[metric] = _quantiles(metric, _total(now), start, where)
        for engine in now:
            start = None
            if before is not None:
                start = before.get(engine, (None, "engine %s is not in the first reading of the "
                                                  "window" % _short(engine)))
                if start[0] is not None and _went_down([r.get(engine, (None, None))
                                                        for r in readings]):
                    start = (None, _RESTARTED)
            per_engine.setdefault(engine, {})[metric] = _quantiles(metric, now[engine], start,
                                                                   where)
    if len(per_engine) > 1:
        for engine, metrics in per_engine.items():
            for metric, _families in METRICS:
                metrics.setdefault(metric, _empty("not exposed by this engine"))
        out["engines"] = dict((e, per_engine[e]) for e in sorted(per_engine, key=_engine_key))
    return out


def counts_between(metric, first, last):
    """The bucket counts one metric gained from one reading to a later one (what histograms()
    returned for each), the engines added up: (bounds, counts with the +Inf count last), or
    (None, reason) when they cannot be subtracted (as latency() decides). For callers that add
    several servers' windows up before taking a quantile, or take one per interval."""
    first = first if isinstance(first, dict) else {}
    last = last if isinstance(last, dict) else {}
    before, now = _engines(first, metric), _engines(last, metric)
    end = _total(now)
    if end[0] is None:
        return end
    start = _total(before)
    if start[0] is None:
        return None, "the first reading: %s" % start[1]
    if set(now) != set(before):
        return None, "the engines differ between the two readings"
    if start[0] != end[0]:
        return None, "the bucket bounds changed between the two readings"
    if any(a > b for a, b in zip(start[1], end[1])):
        return None, _RESTARTED
    return _checked(end[0], [_num(b - a) for a, b in zip(start[1], end[1])])


def window(snapshots):
    """The latency of a window of snapshots (as _probe.sample returns them, oldest first): from
    its first and last readable ones that hold histograms; since start when there is only one."""
    readable = [s for s in snapshots if isinstance(s, dict) and not s.get("error")
                and isinstance(s.get("histograms"), dict)]
    if not readable:
        out = latency({}, None)
        for metric, _families in METRICS:
            out[metric] = _empty("no readable sample")
        return out
    last = readable[-1]
    if len(readable) == 1:
        return latency(last["histograms"])
    first = readable[0]
    seconds = None
    if _is_bound(last.get("time")) and _is_bound(first.get("time")):
        seconds = round(last["time"] - first["time"], 3)
    return latency(last["histograms"], first["histograms"], seconds,
                   [s["histograms"] for s in readable[1:-1]])
