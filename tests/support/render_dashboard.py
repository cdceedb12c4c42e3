"""Draw the kvfleet.vllm Grafana dashboard's panels from a real Prometheus, as one HTML page.

Grafana cannot be installed here (issue 15, item 3), so this stands in for its rendering: each
panel of the dashboard JSON is laid out on Grafana's 24-column grid at its gridPos, each target's
expr is run through Prometheus's query_range API with the dashboard's variables filled in as
Grafana fills them for "All" ($instance = .*, $__rate_interval = 4 steps, at least 30 s), each
series is named by the target's legendFormat, and the lines are drawn with the diagnose report's
own inline-SVG chart (plugin_utils._report.svg_chart). State-timeline panels are drawn as lines
at 1 while the state holds. It is a rendering of the same queries, not Grafana's look.

    PYTHONPATH=<collections root> python render_dashboard.py --dashboard kvfleet-vllm.json \
        --prometheus http://127.0.0.1:9090 --seconds 600 --step 2 --out page.html

Prints one JSON line: for each panel, its title and how many series and points it drew.
Standard library only (and the collection).
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
import time
import urllib.parse
import urllib.request

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import COLOURS, svg_chart

# Grafana units -> (scale, suffix, fixed top of the axis)
_UNITS = {"percentunit": (100, "%", 100), "bytes": (1 / 2 ** 20, " MiB", None), "s": (1, " s", None),
          "ops": (1, "/s", None)}
_ROW_PX, _COL_PX = 30, 56   # Grafana's grid: 30 px rows; 24 columns over a 1344 px page


def _legend(fmt, labels):
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt or "").strip() \
        or json.dumps(labels, sort_keys=True)


def _expr(expr, step):
    return expr.replace("$__rate_interval", "%ds" % max(30, 4 * step)).replace("$instance", ".*")


def query_range(base, expr, start, end, step):
    url = "%s/api/v1/query_range?%s" % (base.rstrip("/"), urllib.parse.urlencode(
        {"query": expr, "start": start, "end": end, "step": step}))
    with urllib.request.urlopen(url, timeout=30) as resp:   # noqa: S310 (the test's own Prometheus)
        body = json.load(resp)
    if body.get("status") != "success":
        raise RuntimeError("%s: %s" % (expr, body))
    return body["data"]["result"]


def panel_series(panel, base, start, end, step):
    """[(label, {t: value})] of one panel, every target in order."""
    out = []
    for target in panel.get("targets") or []:
        for result in query_range(base, _expr(target["expr"], step), start, end, step):
            values = {float(t): float(v) for t, v in result["values"]}
            out.append((_legend(target.get("legendFormat"), result["metric"]), values))
    return out


def panel_html(panel, series):
    unit = (panel.get("fieldConfig") or {}).get("defaults", {}).get("unit", "short")
    scale, suffix, top = _UNITS.get(unit, (1, "", None))
    grid = panel["gridPos"]
    width = grid["w"] * _COL_PX - 16
    # the panel's height less its title, the axis line under the chart and the two-column legend
    height = max(40, grid["h"] * _ROW_PX - 60 - (len(series) + 1) // 2 * 13)
    times = sorted({t for _label, values in series for t in values})
    points = [dict({"t": t}, **{"s%d" % i: values.get(t) for i, (_l, values) in enumerate(series)})
              for t in times]
    chart = svg_chart(panel["title"], points, [("s%d" % i, label) for i, (label, _v) in enumerate(series)],
                      scale, suffix, top, size=(width, height), legend=False)
    legend = "".join('<li><span style="color:%s">&#9632;</span> %s</li>'
                     % (COLOURS[i % len(COLOURS)], html.escape(label)) for i, (label, _v) in enumerate(series))
    return ('<div class="panel" style="grid-column:%d / span %d;grid-row:%d / span %d" data-series="%d">'
            '<h3>%s</h3>%s<ul>%s</ul>%s</div>'
            % (grid["x"] + 1, grid["w"], grid["y"] + 1, grid["h"], len(series), html.escape(panel["title"]),
               chart, legend, "" if series else '<p class="nodata">No data</p>'))


def page(board, base, start, end, step):
    panels, summary = [], []
    for panel in board["panels"]:
        series = panel_series(panel, base, start, end, step)
        panels.append(panel_html(panel, series))
        summary.append({"title": panel["title"], "type": panel["type"], "series": len(series),
                        "points": sum(len(v) for _l, v in series)})
    head = ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>%s</title><style>"
            "body{font-family:sans-serif;margin:8px;background:#fff}"
            ".grid{display:grid;grid-template-columns:repeat(24,%dpx);grid-auto-rows:%dpx;gap:0}"
            ".panel{border:1px solid #ccc;margin:2px;padding:4px;overflow:hidden}"
            "h3{font-size:13px;margin:0 0 2px}ul{font-size:10px;margin:0;padding:0;list-style:none;"
            "columns:2}.nodata{color:#888}</style></head><body>"
            "<p>%s: %d panels from %s, %s to %s UTC, step %d s (drawn from the dashboard JSON by "
            "tests/support/render_dashboard.py, not by Grafana)</p><div class=\"grid\">"
            % (html.escape(board["title"]), _COL_PX, _ROW_PX, html.escape(board["title"]), len(panels),
               html.escape(base), time.strftime("%H:%M:%S", time.gmtime(start)),
               time.strftime("%H:%M:%S", time.gmtime(end)), step))
    return head + "".join(panels) + "</div></body></html>\n", summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    ap.add_argument("--dashboard", required=True)
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--seconds", type=int, default=600, help="how far back from now")
    ap.add_argument("--step", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with open(args.dashboard, encoding="utf-8") as f:
        board = json.load(f)
    end = time.time()
    text, summary = page(board, args.prometheus, end - args.seconds, end, args.step)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
