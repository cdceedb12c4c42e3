# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet tables of kvfleet.vllm.diagnose and kvfleet.vllm.deploy, as plain text lines, and the
diagnose report's charts, as inline SVG. Stdlib only."""

from __future__ import annotations

import html

from ansible_collections.kvfleet.vllm.plugins.module_utils._trends import finite, history_series
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._outcome import OUTCOMES, SERVING
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._rollout import failed_checks

__all__ = ["COLOURS", "COLUMNS", "DEPLOY_COLUMNS", "OUTCOMES", "analysis_charts_html", "charts_html", "deploy_lines", "diagnosis_rows",
           "end_rows", "kv_sizing", "svg_chart", "table_lines"]

COLUMNS = (("HOST", 20), ("INSTANCE", 10), ("VERSION", 9), ("VERDICT", 10), ("CAUSES", 36),
           ("KV%", 6), ("RUN", 5), ("WAIT", 5), ("PREEMPT/s", 9), ("BLOCK", 5), ("TRENDS", 30))


def _cell(value, fmt="%s"):
    return "-" if value is None or value == "" else fmt % value


def _line(columns, cells):
    return " ".join(str(c).ljust(w) for c, (_n, w) in zip(cells, columns)).rstrip()


def _field(view, name):
    return (view or {}).get(name)


# worst first in the report: the rank the HTML report sorts rows by
_VERDICT_RANK = {"unhealthy": 2, "degraded": 1, "healthy": 0}


def diagnosis_rows(gates, host=None, infos=None, gpus=None, monitor=None):
    """The diagnose playbook's per-instance rows: the one copy of their shape, for both modes.

    gates: cache_gate results, either a host's loop over its instances (each with `item`, the
    instance record) or the `results` of one cache_gate run over `targets` (each with `name`
    and `host`). infos: the matching metrics_info results (per-host mode); without them the
    version and the read error come from the gate's own samples, which are the same readings.
    gpus: the host's GPU count (None: not read). monitor: the monitor's findings per instance.
    """
    rows = []
    for index, gate in enumerate(gates or []):
        gate = gate or {}
        samples = gate.get("samples") or [{}]
        last = samples[-1] or {}
        if infos is not None:
            info = infos[index] if index < len(infos) else {}
            version = _field(info.get("metrics"), "version")
            # the playbook registers metrics_info with failed_when: false, which clears `failed`:
            # a result without metrics is the failed read
            error = info.get("msg") if info.get("failed") or "metrics" not in info else None
        else:
            version = next((s.get("version") for s in reversed(samples) if s and s.get("version")),
                           None)
            error = last.get("error")
        name = _field(gate.get("item"), "name") or gate.get("name")
        found = (monitor or {}).get(name) or {}
        rows.append({
            "host": host if host is not None else gate.get("host"),
            "instance": name,
            "version": version,
            "verdict": gate.get("verdict"),
            "state": gate.get("state"),
            "causes": gate.get("causes"),
            "kv_cache_usage": last.get("kv_cache_usage"),
            "requests_running": last.get("requests_running"),
            "requests_waiting": last.get("requests_waiting"),
            "preemptions_per_s": _field(last.get("rates"), "preemptions_per_s"),
            "block_size": last.get("block_size"),
            "num_gpu_blocks": last.get("num_gpu_blocks"),
            "error": error,
            "gpus": gpus,
            "trends": found.get("trends") or [],
            "sustained": found.get("sustained") or [],
            "trend_evidence": found.get("trend_evidence") or {},
            "verdict_rank": _VERDICT_RANK.get(gate.get("verdict"), 3),
            # what the report's charts draw: the gate's window and the monitor's history
            "window": history_series(samples, limit=len(samples)),
            "history": [p for p in found.get("series") or [] if isinstance(p, dict)],
        })
    return rows


def _is_number(value):
    return finite(value) is not None


def _esc(text):
    # quotes of both kinds too: text may end up in an attribute
    return html.escape(str(text), quote=True)


# Grafana's classic palette: the report draws up to 3 series a chart, the dashboard rendering more
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")
_W, _H, _PAD = 240, 64, 4


def svg_chart(title, points, series, scale=1.0, unit="", y_max=None, size=(_W, _H), legend=True):
    """One line chart as inline SVG (no script, no external asset): points are dicts with
    't' and the keys of `series` ([(key, label)], coloured by COLOURS in turn); a None value breaks
    its line, a point with 'error' gets a red tick at the bottom. The y axis runs from 0 to y_max
    (or the largest value). `legend` False leaves the labels to the caller (only the title and
    the top of the axis are written under the chart)."""
    width, height = size
    pts = [p for p in points if _is_number(p.get("t"))]
    values = [p[k] * scale for p in pts for k, _l in series if _is_number(p.get(k))]
    top = y_max if y_max is not None else max(values + [0])
    top = top if top > 0 else 1
    t0 = min([p["t"] for p in pts] or [0])
    span = max([p["t"] for p in pts] or [0]) - t0 or 1
    colours = [COLOURS[i % len(COLOURS)] for i in range(len(series))]

    def x(t):
        return _PAD + (t - t0) / span * (width - 2 * _PAD)

    def y(v):
        return height - _PAD - min(v, top) / top * (height - 2 * _PAD)

    parts = ['<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="%d" height="%d" '
             'viewBox="0 0 %d %d" role="img" aria-label="%s">'
             % (width, height + 16, width, height + 16, _esc(title)),
             '<rect x="0" y="0" width="%d" height="%d" fill="#fafafa" stroke="#ddd"/>' % (width, height)]
    for colour, (key, _label) in zip(colours, series):
        run = []
        for p in pts + [{"t": None}]:
            if _is_number(p.get("t")) and _is_number(p.get(key)):
                run.append("%.1f,%.1f" % (x(p["t"]), y(p[key] * scale)))
                continue
            if len(run) > 1:
                parts.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>'
                             % (colour, " ".join(run)))
            elif run:
                cx, cy = run[0].split(",")
                parts.append('<circle cx="%s" cy="%s" r="2" fill="%s"/>' % (cx, cy, colour))
            run = []
    for p in pts:
        if p.get("error"):
            parts.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#d62728" stroke-width="2"/>'
                         % (x(p["t"]), height - 1, x(p["t"]), height - 7))
    labels = " ".join('<tspan fill="%s">&#9632; %s</tspan>' % (c, _esc(label))
                      for c, (_k, label) in zip(colours, series)) if legend else ""
    parts.append('<text x="2" y="%d" font-size="10">%s %s (max %s%s)</text>'
                 % (height + 12, _esc(title), labels, _esc("%g" % round(top, 2)), _esc(unit)))
    parts.append("</svg>")
    return "".join(parts)


def charts_html(row):
    """The report's charts of one instance: the monitor's history when it has two samples or
    more, else the gate's window; KV usage, running vs waiting, tokens/s, TTFT p90."""
    history = row.get("history") or []
    points = history if len(history) >= 2 else row.get("window") or []
    if not points:
        return ""
    span = (points[-1]["t"] - points[0]["t"]) if len(points) > 1 else 0
    caption = ("monitor history: %d samples over %.0f min" % (len(points), span / 60.0)
               if points is history else "gate window: %d samples over %.0f s" % (len(points), span))
    charts = [svg_chart("KV usage", points, [("kv", "used")], 100, "%", 100),
              svg_chart("requests", points, [("running", "running"), ("waiting", "waiting")]),
              svg_chart("tokens/s", points, [("tokens_per_s", "generated")])]
    if any(_is_number(p.get("ttft_p90")) for p in points):
        charts.append(svg_chart("TTFT p90", points, [("ttft_p90", "p90")], 1, " s"))
    return '<div class="charts"><div class="caption">%s</div>%s</div>' % (_esc(caption), "".join(charts))


def analysis_charts_html(analysis):
    """The deploy report's charts of one host's analysis under traffic: the canary against the
    baseline (each side's mean over its servers) over the window: KV usage, running and waiting
    requests, preemptions since the window began. '' without a series."""
    points = (analysis or {}).get("series") or [] if isinstance(analysis, dict) else []
    if not points:
        return ""
    sides = [("canary", "canary"), ("baseline", "baseline")]
    span = points[-1]["t"] - points[0]["t"] if len(points) > 1 else 0
    charts = [svg_chart("KV usage", points, [("kv_" + k, label) for k, label in sides], 100, "%", 100),
              svg_chart("running", points, [("running_" + k, label) for k, label in sides]),
              svg_chart("waiting", points, [("waiting_" + k, label) for k, label in sides]),
              svg_chart("preemptions", points, [("preempt_" + k, label) for k, label in sides])]
    return '<div class="charts"><div class="caption">%s</div>%s</div>' % (
        _esc("analysis window: %d samples over %.0f s, canary against baseline" % (len(points), span)),
        "".join(charts))


def table_lines(rows):
    """rows: the diagnose playbook's per-instance dicts -> header + one line per instance."""
    def line(cells):
        return _line(COLUMNS, cells)

    out = [line([name for name, _w in COLUMNS])]
    for r in rows:
        usage = r.get("kv_cache_usage")
        out.append(line([
            r.get("host"), r.get("instance"), _cell(r.get("version")), r.get("verdict"),
            ",".join(c["id"] for c in r.get("causes") or []) or "-",
            _cell(usage * 100 if usage is not None else None, "%.1f"),
            _cell(r.get("requests_running")), _cell(r.get("requests_waiting")),
            _cell(r.get("preemptions_per_s"), "%.2f"), _cell(r.get("block_size")),
            ",".join(list(r.get("trends") or []) + ["sustained:" + c for c in r.get("sustained") or []])
            or "-"]))
    return out


DEPLOY_COLUMNS = (("HOST", 20), ("BATCH", 5), ("BEFORE", 22), ("AFTER", 22), ("OUTCOME", 16),
                  ("SECONDS", 7), ("DETAIL", 60))
# OUTCOMES and SERVING are plugin_utils/_outcome.py's, where a host's outcome is decided


def _version(rec):
    if not rec or not rec.get("version"):
        return "-"
    return "%s (%s)" % (rec["version"], rec["config"]) if rec.get("config") else rec["version"]


def _staged(staged):
    """The staging step's words for a host's line (the server role's server_result.staged)."""
    if not isinstance(staged, dict) or not staged.get("copied"):
        return ""
    try:
        size = "%.1f MiB" % (float(staged.get("bytes") or 0) / 1048576)
        took = " in %.1f s" % float(staged["seconds"]) if staged.get("seconds") not in (None, "") else ""
    except (TypeError, ValueError):
        size, took = "? MiB", ""
    verb = "would stage" if str(staged.get("check_mode")).lower() == "true" else "staged"
    try:
        downloaded = int(staged.get("downloaded") or 0)
    except (TypeError, ValueError):
        downloaded = 0
    how = "would be downloaded" if verb == "would stage" else "downloaded"
    hub = "; %d of them %s from the hub" % (downloaded, how) if downloaded else ""
    return "%s %s (%s files, %s%s%s)" % (verb, staged.get("label") or "the model", staged.get("files", "?"), size,
                                         took, hub)


def _runtime(runtime):
    """Adapters changed on running instances (the server role's server_result.lora_runtime:
    instance -> {load: [{name}], unload: [name]}) in words; '' when none."""
    if not isinstance(runtime, dict) or not runtime:
        return ""
    parts = []
    for inst, change in sorted(runtime.items()):
        change = change if isinstance(change, dict) else {}
        words = ["+%s" % a.get("name") for a in change.get("load") or [] if isinstance(a, dict)]
        words += ["-%s" % n for n in change.get("unload") or []]
        parts.append("%s %s" % (inst, " ".join(words) or "?"))
    return "adapters changed without a restart: %s" % ", ".join(parts)


def _analysis(analysis):
    """A host's analysis under traffic in words: its verdict, the baseline's hosts, the requests of
    each side and the failed checks ('' without one)."""
    if not isinstance(analysis, dict) or not analysis.get("verdict"):
        return ""
    requests = analysis.get("requests") or {}
    against = ", ".join(str(h) for h in analysis.get("baseline_hosts") or []) or "absolute limits"
    verdict = analysis["verdict"]
    if analysis.get("judged") is False:
        # never kept silently: the summary says the host was not judged, and what became of it
        verdict += " (not judged, %s)" % ("kept" if analysis.get("kept") else "rolled back")
    words = "analysis %s against %s (%s and %s requests)" % (
        verdict, against, _cell(requests.get("canary")), _cell(requests.get("baseline")))
    failed = failed_checks(analysis)
    if failed:
        words += ": " + "; ".join(failed)
    elif analysis["verdict"] != "pass":
        words += ": " + str(analysis.get("reason") or "")
    return words


def deploy_lines(rows):
    """rows: {'host', 'batch', 'before', 'after', 'outcome', 'seconds', 'detail', 'drained'} per
    host, where before/after are deployment records ({'version', 'config'}) -> header, lines,
    totals, and a last line naming the hosts left out of the load balancer."""
    out = [_line(DEPLOY_COLUMNS, [name for name, _w in DEPLOY_COLUMNS])]
    counts = {}
    for r in rows:
        outcome = r.get("outcome") or "untouched"
        counts[outcome] = counts.get(outcome, 0) + 1
        detail = " ".join(str(r.get("detail") or "-").split())
        warned = [z["warning"] for z in r.get("sizing") or [] if z.get("warning")]
        if warned and outcome in SERVING:
            detail = "; ".join(warned)

        runtime = _runtime(r.get("runtime")) if outcome in SERVING else ""
        if runtime:
            detail = runtime if detail == "-" else "%s; %s" % (runtime, detail)
        staged = _staged(r.get("staged"))
        if staged:
            detail = staged if detail == "-" else "%s; %s" % (staged, detail)
        if r.get("drained"):
            detail = "LEFT DRAINED. " + detail
        out.append(_line(DEPLOY_COLUMNS, [
            r.get("host"), _cell(r.get("batch")), _version(r.get("before")),
            _version(r.get("after")) if outcome in SERVING else "-",
            outcome, _cell(r.get("seconds"), "%.0f"),
            detail if len(detail) <= 120 else detail[:117] + "..."]))
        # on a line of its own, whole: the failed checks' numbers are the point
        analysis = _analysis(r.get("analysis"))
        if analysis:
            out.append("  %s %s" % (r.get("host"), analysis))
    out.append(", ".join("%d %s" % (counts[o], o) for o in OUTCOMES if o in counts)
               + "".join(", %d %s" % (n, o) for o, n in counts.items() if o not in OUTCOMES)
               or "no hosts")
    drained = [r.get("host") for r in rows if r.get("drained")]
    if drained:
        out.append("left out of the load balancer: %s (the next deploy finishes them first)"
                   % ", ".join(str(h) for h in drained))
    return out


def end_rows(rows, stages=None, unreachable=None, failures=None, interrupted=False):
    """The summary rows of a deploy that ended before its own summary (Ctrl-C, an unreachable
    host, a refusal in the checks), or of a batch that lost a host.

    rows: each host's line as the playbook keeps it (_rollout_row); stages: host -> the step it
    had started (_rollout_stage: drain, change, restart, verify, undrain); unreachable and
    failures: host -> why (a task that was not rescued); interrupted: the run was stopped by a
    signal. A host whose line was never finished becomes 'unreachable', 'interrupted' (its batch
    was under way) or 'refused' (it failed the checks); one stopped after its drain started is
    named as left drained (its drain marker says so on the host; the next deploy finishes it).
    -> new rows; finished lines are kept as they are."""
    stages, unreachable, failures = stages or {}, unreachable or {}, failures or {}
    out = []
    for row in rows:
        r = dict(row)
        host = r.get("host")
        stage = stages.get(host)
        if (r.get("outcome") or "untouched") == "untouched":
            if host in unreachable:
                r["outcome"] = "unreachable"
                r["detail"] = unreachable[host]
            elif r.get("batch") is not None and (interrupted or host in failures):
                r["outcome"] = "interrupted"
                r["detail"] = failures.get(host) or "the run was interrupted"
            elif host in failures:
                r["outcome"] = "refused"
                r["detail"] = failures[host]
            if stage and r["outcome"] in ("unreachable", "interrupted"):
                r["failed_stage"] = stage
                r["drained"] = True
                r["detail"] = "stopped during %s: %s" % (stage, r["detail"])
        out.append(r)
    return out


# a cache that holds this many times max_num_seqs typical requests is sized for more: warn
_UNUSED_CACHE_FACTOR = 2


def kv_sizing(gate_results, typical_tokens=2048):
    """What each instance's KV cache holds, from its first gate after a change.

    gate_results: the gate's loop results (item: the instance record with 'limits'; samples:
    the normalised snapshots). -> [{'instance', 'cache_tokens', 'cache_blocks', 'block_size',
    'max_model_len', 'fits_max_model_len', 'typical_tokens', 'fits_typical', 'max_num_seqs',
    'engines', 'warning'}], per engine (the smallest engine's cache) when there are several, with
    a warning when --max-num-seqs is far below what the cache holds (a queue
    would form with the cache mostly free: the fragmentation guide's 128 on a large GPU), or when
    the cache cannot hold --max-num-seqs typical requests (a full load preempts).
    """
    out = []
    for res in gate_results or []:
        inst = res.get("item") or {}
        limits = inst.get("limits") or {}
        samples = [s for s in res.get("samples") or [] if s.get("num_gpu_blocks")]
        if not samples:
            continue
        last = samples[-1]
        blocks, size = last.get("num_gpu_blocks"), last.get("block_size")
        # data parallel: each engine schedules up to --max-num-seqs against its own cache, so the
        # group's summed blocks would overstate what one cap can use (a serving group's head)
        engines = [e for e in (last.get("engines") or {}).values() if e.get("num_gpu_blocks")]
        if len(engines) > 1:
            blocks = min(e["num_gpu_blocks"] for e in engines)
        if not blocks or not size:
            continue
        tokens = blocks * size
        mml, seqs = limits.get("max_model_len"), limits.get("max_num_seqs") or inst.get("max_num_seqs")
        fits_mml = tokens // mml if mml else None
        fits_typical = tokens // typical_tokens if typical_tokens else None
        warning = None
        if seqs and fits_typical is not None and fits_typical < seqs:
            # one max_model_len sequence fits (vLLM starts, the idle gate passes), the cap's load does not
            warning = ("%s: --max-num-seqs %d, but the KV cache (%d tokens) holds only %d requests of "
                       "%d tokens: under a full load it runs out and preempts; give the cache more "
                       "memory or lower --max-num-seqs"
                       % (inst.get("name"), seqs, tokens, fits_typical, typical_tokens))
        elif seqs and fits_typical and fits_typical >= _UNUSED_CACHE_FACTOR * seqs:
            warning = ("%s: --max-num-seqs %d, but the KV cache (%d tokens) holds %d requests of "
                       "%d tokens: requests would queue with the cache mostly free; raise "
                       "--max-num-seqs" % (inst.get("name"), seqs, tokens, fits_typical,
                                           typical_tokens))
        out.append({"instance": inst.get("name"), "cache_tokens": tokens, "cache_blocks": blocks,
                    "block_size": size, "max_model_len": mml, "fits_max_model_len": fits_mml,
                    "typical_tokens": typical_tokens, "fits_typical": fits_typical,
                    "max_num_seqs": seqs, "engines": max(len(engines), 1), "warning": warning})
    return out
