"""The suite's time budget is written once (tests/budget.tsv), shown in docs/testing.md, and
covers every stage tests/run.sh times."""

from __future__ import annotations

import os
import re

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))


def _read(*parts):
    with open(os.path.join(ROOT, *parts)) as f:
        return f.read()


def budget():
    rows = {}
    for line in _read("tests", "budget.tsv").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        stage, seconds = line.split("\t")
        rows[stage] = int(seconds)
    return rows


def test_docs_show_the_budget_file():
    doc = _read("docs", "testing.md")
    section = doc.split("## Time budget", 1)[1]
    shown = dict((k, int(v)) for k, v in re.findall(r"^\| ([a-z-]+) \| (\d+) \|$", section, re.M))
    assert shown == budget()


def test_every_timed_stage_has_a_budget():
    run = _read("tests", "run.sh")
    stages = set(re.findall(r"^\s*stage (\w+) stage_\w+(?: (\w+))?$", run, re.M))
    keys = {name + ("-" + arg if arg else "") for name, arg in stages}
    assert keys and keys <= set(budget()), sorted(keys - set(budget()))


def test_the_lanes_fit_50_minutes():
    """The suite stays within 50 of CI's 90 minutes (it aims at 45): setup, then the longer of
    the two lanes (tests/run.sh), each stage at its budget. A stage that needs more takes the
    time back elsewhere."""
    b = budget()
    fleet = b["molecule-fleet"]
    # units run inside fresh in the whole run (tests/run.sh's default stages)
    other = sum(b[k] for k in ("lint", "sanity", "latest", "build", "fresh", "bench", "live", "molecule-server"))
    assert b["setup"] + max(fleet, other) <= 50 * 60, (fleet, other)
