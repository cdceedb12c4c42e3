"""Product files speak of the product: no run diary in the README, docs, roles, playbooks,
plugins, Molecule scenarios, benchmarks, meta or the test scripts. History belongs in
changelogs/ (antsibull-changelog fragments), which is not read here.

What counts as a diary is the DIARY list below, each pattern with its words: numbered work
periods, tracker tickets by number, and dated run narratives. Facts a reader needs stay:
versions, sources (an upstream project's ticket is a source), measured figures with their date,
and Ray's own temp-folder names."""

from __future__ import annotations

import codecs
import os
import re

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
# what a reader of the collection reads; changelogs/ is history by design
FOLDERS = ("docs", "roles", "playbooks", "plugins", "molecule", "benchmarks", "meta")
FILES = ("README.md",)
TEST_SCRIPTS = "tests"          # its *.sh only (the scripts users and CI run)
SKIP_DIRS = {"__pycache__", ".pytest_cache"}

DIARY = [
    # a work session by number or as such; Ray's "session files" (its temp folder) are a term
    (re.compile(r"\b[Ss]essions?\b(?! files| folder| dir)"), "a work session"),
    (re.compile(r"\b[Ss]top \d+\b"), "a numbered stop"),
    # a tracker issue by number; an upstream project's issue is a source
    (re.compile(r"(?<!upstream )(?<!vLLM )(?<!vllm )(?<!GitHub )(?<!Ray )\b[Ii]ssue #?\d+"),
     "an issue by number"),
    (re.compile(r"\([Ii]ssue\b"), "an issue in parentheses"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2})?)?(?: UTC)? runs?\b"), "a dated run narrative"),
    (re.compile(r"\b(?:[Ss]ince|[Uu]ntil) \d{4}-\d{2}-\d{2}\b"), "a dated change narrative"),
    (re.compile(r"\b[Bb]efore the fix\b"), "a fix narrative"),
]


def product_files():
    """Every text file of the product, relative to the collection root."""
    out = [f for f in FILES if os.path.isfile(os.path.join(ROOT, f))]
    for folder in FOLDERS:
        for base, dirs, names in os.walk(os.path.join(ROOT, folder)):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            out.extend(os.path.relpath(os.path.join(base, n), ROOT) for n in sorted(names))
    tests = os.path.join(ROOT, TEST_SCRIPTS)
    out.extend(os.path.join(TEST_SCRIPTS, n) for n in sorted(os.listdir(tests)) if n.endswith(".sh"))
    return out


def diary_lines(text):
    """[(line number, what, line)] for every diary phrase in `text`."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, what in DIARY:
            if pattern.search(line):
                found.append((number, what, line.strip()))
    return found


def read_text(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        data = f.read()
    if b"\0" in data:
        return None     # an image or an archive
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def test_the_product_files_are_all_there():
    # a copy of the collection without a folder must not pass by reading nothing
    for name in FOLDERS + FILES:
        assert os.path.exists(os.path.join(ROOT, name)), name
    files = product_files()
    assert len(files) > 200 and "roles/server/tasks/install.yml" in files and "tests/run.sh" in files


@pytest.mark.parametrize("path", product_files())
def test_no_run_diary_in_product_files(path):
    text = read_text(path)
    if text is None:
        return
    found = diary_lines(text)
    assert not found, "%s: run diary in a product file (history goes in changelogs/fragments):\n%s" % (
        path, "\n".join("  line %d (%s): %s" % (n, what, line[:160]) for n, what, line in found))


# The detector's own positive cases are stored ROT13-encoded: the detector must be shown real
# diary phrases, and a plain copy of them here would put work-log text in the repository.
def _rot13(text):
    return codecs.decode(text, "rot13")


@pytest.mark.parametrize("text", [_rot13(t) for t in [
    'Frffvba 14 nqqrq n freivat tebhc',
    'gur fnzr fgntrf gbbx 2674 f va frffvba 10',
    "sbe fgbc 28'f PV",
    "# ---- n freivat tebhc ba bar ubfg (vffhr 17): iYYZ'f",
    'erfgnegrq be tngrq (vffhr: n ab-punatr qrcybl pbfg ~59 f n ubfg)',
    'Vffhr 12 fnlf fb',
    '(2026-12-03 ehaf bs rnpu fgntr sebz pyrna pybarf)',
    'Fvapr 2026-12-03 vg erfgnegf bar ubfg',
    'ab TCH znpuvar jnf yrag gb gur frffvbaf gung',
    'Orsber gur svk gung guvf eha yrq gb',
]])
def test_the_check_finds_a_diary(text):
    assert diary_lines(text), text


@pytest.mark.parametrize("text", [
    "vLLM 0.27.x had an admission deadlock (upstream issue 53130)", "vLLM issue 53130",
    "its session files under --temp-dir", "## 1. Scrape cost (run 2026-12-01 20:49 UTC)",
    "measured on vLLM CPU 0.32.0 (2026-12-03)", "revision: 2024-06-01", "stop the workers first",
    "systemd stops it after 30 s", "ClientSession()",
])
def test_facts_are_not_a_diary(text):
    assert not diary_lines(text), text
