"""Schema check of the Grafana dashboard the prometheus role provisions (issue 15, item 3).

Grafana itself cannot be installed here, so the dashboard is checked against Grafana's own schema
as grafana-foundation-sdk carries it (Python models generated from Grafana's CUE kinds, installed
in the `latest` tool venv, Python >= 3.12): every panel type must be a registered panel plugin,
every target must decode as a Prometheus query, and decoding then encoding the dashboard with
the SDK must give back every key and value we wrote. A key the schema does not know is dropped by
the SDK's decoder, so a misspelt field, a wrong nesting or an unknown panel type fails here.

The only keys allowed outside the schema are the Prometheus data source's own annotation fields
(Grafana's prometheus AnnotationQueryEditor reads them from AnnotationQuery<PromQuery>; the
dashboard schema leaves an annotation open to its data source).

Run with PYTHONPATH holding the collection's ansible_collections folder. It checks the default
settings and a customised set, then proves itself by mutating a dashboard in ways that must be
reported. Prints GRAFANA_SCHEMA ok ... and exits 0, or prints each problem and exits 1.
"""

from __future__ import annotations

import copy
import json
import sys

from grafana_foundation_sdk.cog import plugins, runtime
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as gdash
from grafana_foundation_sdk.models import prometheus as gprom

from ansible_collections.kvfleet.vllm.plugins.plugin_utils import _grafana

ANNOTATION_DATASOURCE_KEYS = {"titleFormat", "step", "tagKeys", "textFormat", "useValueForTime"}


def _missing(ours, theirs, path, out):
    """Every key and value of `ours` must be in `theirs` (the SDK may add its defaults)."""
    if isinstance(ours, dict):
        if not isinstance(theirs, dict):
            out.append("%s: %r became %r" % (path, ours, theirs))
            return
        for key, value in ours.items():
            if key not in theirs:
                if not (path.startswith(".annotations.list[") and key in ANNOTATION_DATASOURCE_KEYS):
                    out.append("%s.%s: not in Grafana's schema" % (path, key))
                continue
            _missing(value, theirs[key], "%s.%s" % (path, key), out)
    elif isinstance(ours, list):
        if not isinstance(theirs, list) or len(theirs) != len(ours):
            out.append("%s: list %r became %r" % (path, ours, theirs))
            return
        for i, (a, b) in enumerate(zip(ours, theirs)):
            _missing(a, b, "%s[%d]" % (path, i), out)
    elif ours != theirs:
        out.append("%s: %r became %r" % (path, ours, theirs))


def problems(board):
    """What Grafana's schema says against one dashboard, as a list of lines (empty: none)."""
    out = []
    decoded = gdash.Dashboard.from_json(board)
    for i, (panel, model) in enumerate(zip(board.get("panels") or [], decoded.panels or [])):
        where = "panels[%d] (%s)" % (i, panel.get("title"))
        if runtime.panelcfg_config(panel.get("type", "")) is None:
            out.append("%s: panel type %r is not a Grafana panel plugin" % (where, panel.get("type")))
        for j, target in enumerate(model.targets or []):
            if not isinstance(target, gprom.Dataquery):
                out.append("%s.targets[%d]: not decoded as a Prometheus query (%s)"
                           % (where, j, type(target).__name__))
    for i, var in enumerate(decoded.templating.list_val or []):
        if var.type_val not in set(gdash.VariableType):
            out.append("templating.list[%d]: variable type %r unknown" % (i, var.type_val))
    again = json.loads(json.dumps(decoded, cls=JSONEncoder))
    _missing(board, again, "", out)
    return [p.lstrip(".") for p in out]


def _mutants(board):
    """Dashboards that are wrong in ways Grafana would not read; each must be reported."""
    m1 = copy.deepcopy(board)
    m1["panels"][0]["type"] = "time-series"
    m2 = copy.deepcopy(board)
    m2["panels"][2]["targets"][0]["legendFormt"] = m2["panels"][2]["targets"][0].pop("legendFormat")
    m3 = copy.deepcopy(board)
    m3["panels"][1]["gridPosition"] = m3["panels"][1].pop("gridPos")
    m4 = copy.deepcopy(board)
    m4["templating"]["list"][1]["allvalue"] = ".*"
    m5 = copy.deepcopy(board)
    m5["panels"][3]["fieldConfig"]["defaults"]["maximum"] = 1
    return {"unknown panel type": m1, "misspelt target key": m2, "misspelt panel key": m3,
            "misspelt variable key": m4, "misspelt field config key": m5}


def main():
    plugins.register_default_plugins()
    boards = {"default settings": _grafana.dashboard(),
              "custom settings": _grafana.dashboard({"job": "llm", "node_job": "nodes", "window": "10m"})}
    failed = False
    for name, board in boards.items():
        found = problems(board)
        for line in found:
            print("GRAFANA_SCHEMA %s: %s" % (name, line))
        failed |= bool(found)
    for name, board in _mutants(boards["default settings"]).items():
        if not problems(board):
            print("GRAFANA_SCHEMA self-check: a dashboard with a %s passed" % name)
            failed = True
    if failed:
        return 1
    board = boards["default settings"]
    print("GRAFANA_SCHEMA ok: %d panels (%s), %d Prometheus targets, %d variables, %d annotations, "
          "5 wrong dashboards reported (grafana-foundation-sdk models)"
          % (len(board["panels"]), ", ".join(sorted({p["type"] for p in board["panels"]})),
             sum(len(p["targets"]) for p in board["panels"]), len(board["templating"]["list"]),
             len(board["annotations"]["list"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
