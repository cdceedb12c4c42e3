"""The HTML reports (playbooks/templates/diagnosis.html.j2, roles/rollout/templates/deploy.html.j2)
rendered by Ansible's own templating with values a hostile host or server could return: every
value is escaped (| e: Ansible's templating has no autoescape; the charts escape their own text,
quotes included), and nothing of it reaches the page as markup."""

from __future__ import annotations

import os

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import _esc

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..")
EVIL = "<script>alert(1)</script>"
QUOTE = "x' onmouseover='alert(1)"


CHART = '<svg class="chart"></svg>'


def _render(path, variables, chart_expression):
    """The template rendered by Ansible's Templar; its chart filter (kvfleet.vllm's, which a
    plain pytest run cannot resolve) stands in as a fixed piece of SVG."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = f.read()
    assert "{{ %s }}" % chart_expression in text
    text = text.replace(chart_expression, repr(CHART))
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(text))


def test_the_diagnosis_report_escapes_every_value_a_host_returns():
    row = {"host": EVIL, "instance": "main", "version": EVIL, "verdict": "healthy", "verdict_rank": 0,
           "causes": [{"id": EVIL, "severity": "warning", "advice": EVIL, "evidence": {"x": EVIL}}],
           "kv_cache_usage": 0.5, "requests_running": EVIL, "requests_waiting": EVIL,
           "preemptions_per_s": EVIL, "block_size": EVIL, "trends": [], "sustained": [], "trend_evidence": {}}
    page = _render("playbooks/templates/diagnosis.html.j2", {"_rows": [row], "ansible_managed": "x"},
                   "r | kvfleet.vllm.diagnosis_charts")
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<table" in page and "<td>" in page and CHART in page   # the template's own markup stays markup


def test_the_deploy_report_escapes_every_value_the_analysis_host_returns():
    analysis = {"verdict": EVIL, "reason": EVIL, "why": EVIL, "baseline_hosts": [EVIL],
                "requests": {"canary": EVIL, "baseline": EVIL}, "series": [],
                "checks": [{"metric": EVIL, "canary": EVIL, "baseline": EVIL, "limit": EVIL, "result": "fail",
                            "why": EVIL}]}
    row = {"host": "n1", "batch": EVIL, "outcome": "upgraded", "gate": {"main": EVIL},
           "gate_causes": {"main": [{"id": EVIL, "severity": EVIL}]}, "analysis": analysis, "detail": EVIL}
    page = _render("roles/rollout/templates/deploy.html.j2",
                   {"_all": [row], "_finished": EVIL, "ansible_check_mode": False, "ansible_managed": "x"},
                   "r.analysis | kvfleet.vllm.analysis_charts")
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "<table" in page and CHART in page


def test_the_charts_escape_quotes_too():
    assert _esc(QUOTE) == "x&#x27; onmouseover=&#x27;alert(1)"
    assert _esc('"<&>') == "&quot;&lt;&amp;&gt;"


def test_every_expression_of_the_reports_is_escaped_or_the_templates_own():
    # what the page prints is escaped (| e), a count (| length), a literal of the template, or the
    # charts (their filters escape their own text): a new field printed raw fails here
    import re
    own = re.compile(r"^(ansible_managed|.* \| length|'[^']*' if .* else '[^']*'|r(\.analysis)? \| kvfleet\.vllm\.\w+_charts)$")
    for path in ("playbooks/templates/diagnosis.html.j2", "roles/rollout/templates/deploy.html.j2"):
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            for expression in re.findall(r"\{\{\s*(.*?)\s*\}\}", f.read()):
                assert expression.endswith("| e") or own.match(expression), (path, expression)
