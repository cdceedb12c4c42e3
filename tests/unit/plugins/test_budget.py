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


def test_the_lanes_fit_45_minutes():
    """The suite stays within 45 of CI's 90 minutes: setup, then the longer of the two lanes
    (tests/run.sh), each stage at its budget. A stage that needs more takes the time back
    elsewhere."""
    b = budget()
    fleet = b["molecule-fleet"]
    # units run inside fresh in the whole run (tests/run.sh's default stages)
    other = sum(b[k] for k in ("bench", "live", "molecule-server", "lint", "sanity", "latest", "build", "fresh"))
    assert b["setup"] + max(fleet, other) <= 45 * 60, (fleet, other)


def test_the_lanes_are_the_ones_run_sh_runs():
    """The other lane above is tests/run.sh's: its lane function times those stages."""
    run = _read("tests", "run.sh")
    lanes = {}
    for name, body in re.findall(r"^lane_(\w+)\(\) \{\n(.*?)^\}", run, re.M | re.S):
        lanes[name] = set(re.findall(r"^\s*stage (\w+) stage_\w+(?: (\w+))?$", body, re.M))
    keys = {k: {n + ("-" + a if a else "") for n, a in v} for k, v in lanes.items()}
    assert keys == {"other": {"bench", "live", "molecule-server", "lint", "sanity", "units", "latest", "build",
                              "fresh"}}, keys
