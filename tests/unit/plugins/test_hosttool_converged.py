"""`kvfleet-vllm converged`: the deploy's one round trip per host. After --record, the same
fingerprint and untouched files, with every unit running no older than them, answer converged
with the deployment record and the drain marker; a unit that stopped, a stale process, a drain
marker or another fingerprint does not. The fingerprint comes on stdin, never in argv."""

from __future__ import annotations

import argparse
import io
import json
import os
import stat

import pytest

from ansible_collections.kvfleet.vllm.tests.unit.plugins import hostprog

prog = hostprog.load("kvfleet_vllm_converged")
FP = "ab" * 32


@pytest.fixture
def host(tmp_path, monkeypatch):
    unit = tmp_path / "vllm-main.service"
    unit.write_text("[Service]\n")
    record = tmp_path / "record.fact"
    record.write_text(json.dumps({"current": {"version": "0.32.0", "instances": [{"name": "main"}]}}))
    spec = {"files": [str(unit), str(record)], "units": [{"unit": "vllm-main.service", "files": [str(unit)]}]}
    runs = {"active": True, "stale": False}
    monkeypatch.setattr(prog, "stale", lambda u, files: {"unit": u, "active": runs["active"], "stale": runs["stale"], "why": None})
    monkeypatch.setitem(prog.LAYOUT, "record", str(record))
    monkeypatch.setitem(prog.LAYOUT, "drain_marker", str(tmp_path / "drained.fact"))
    return tmp_path, spec, runs


def run(monkeypatch, state, fingerprint, spec=None):
    monkeypatch.setattr(prog.sys, "stdin", io.StringIO(fingerprint + "\n"))
    out = io.StringIO()
    monkeypatch.setattr(prog.sys, "stdout", out)
    args = argparse.Namespace(state=str(state), record=spec is not None, spec=json.dumps(spec) if spec is not None else None)
    rc = prog.converged_command(args)
    return rc, json.loads(out.getvalue()) if out.getvalue() else None


def test_recorded_then_asked_the_host_is_converged_with_its_record(host, monkeypatch):
    root, spec, _runs = host
    state = root / "lib" / "converged.json"
    rc, out = run(monkeypatch, state, FP, spec)
    assert rc == 0 and out == {"recorded": str(state), "changed": True}
    assert stat.S_IMODE(os.stat(str(state)).st_mode) == 0o600   # it holds the fingerprint of secrets
    rc, out = run(monkeypatch, state, FP, spec)
    assert out["changed"] is False                               # the same state again: not rewritten
    rc, out = run(monkeypatch, state, FP)
    assert rc == 0 and out == {"converged": True, "reasons": [], "drained": None,
                               "record": {"version": "0.32.0", "instances": [{"name": "main"}]}}


@pytest.mark.parametrize("what, reason", [
    ("stopped", "vllm-main.service is not running"),
    ("stale", "vllm-main.service runs older settings"),
    ("drained", "left drained by an earlier run"),
    ("fingerprint", "the settings or the collection changed since the host was last verified"),
    ("edited", "vllm-main.service changed"),
])
def test_what_makes_a_host_not_converged(host, monkeypatch, what, reason):
    root, spec, runs = host
    state = root / "converged.json"
    run(monkeypatch, state, FP, spec)
    fingerprint = FP
    if what == "stopped":
        runs["active"] = False
    elif what == "stale":
        runs["stale"] = True
    elif what == "drained":
        (root / "drained.fact").write_text('{"by": "Deploy batch by batch", "since": "2026-12-06T12:00:00Z"}')
    elif what == "fingerprint":
        fingerprint = "cd" * 32
    else:
        (root / "vllm-main.service").write_text("[Service]\nExecStart=/other\n")
    rc, out = run(monkeypatch, state, fingerprint)
    assert rc == 0 and out["converged"] is False and any(reason in r for r in out["reasons"]), out
    if what == "drained":
        assert out["drained"]["by"] == "Deploy batch by batch"


def test_no_state_yet_is_not_converged_and_still_reads_the_record(host, monkeypatch):
    root, _spec, _runs = host
    rc, out = run(monkeypatch, root / "missing.json", FP)
    assert rc == 0 and out["converged"] is False and out["record"]["version"] == "0.32.0"


def test_a_bad_spec_writes_nothing_and_says_why(host, monkeypatch, capsys):
    root, _spec, _runs = host
    state = root / "converged.json"
    rc, _out = run(monkeypatch, state, FP, {"files": ["relative"]})
    assert rc == 1 and not state.exists()


def test_an_empty_fingerprint_is_refused(host, monkeypatch):
    root, spec, _runs = host
    state = root / "converged.json"
    rc, _out = run(monkeypatch, state, "", spec)
    assert rc == 1 and not state.exists()


def test_the_command_line_takes_no_fingerprint():
    with pytest.raises(SystemExit):
        prog.main(["converged", "--fingerprint", FP])


def test_a_program_without_the_command_exits_2_as_the_role_expects():
    """The server role's converged entry point reads exit 2 as 'cannot answer' (a missing program,
    or an older one without this command: argparse's usage error) and fails on anything else."""
    with pytest.raises(SystemExit) as exc:
        prog.main(["no-such-command"])
    assert exc.value.code == 2
    with open(os.path.join(os.path.dirname(hostprog.PATH), "..", "..", "server", "tasks", "converged.yml")) as f:
        assert "failed_when: _server_converged.rc not in [0, 2]" in f.read()


@pytest.mark.parametrize("status, error, reason", [
    (200, None, None),
    (503, "Service Unavailable", "main does not answer /health (Service Unavailable)"),
    (None, "ConnectionRefusedError: [Errno 111] Connection refused", "main does not answer /health (ConnectionRefusedError"),
])
def test_each_instance_answers_health_once_or_the_host_is_not_converged(host, monkeypatch, status, error, reason):
    """A converged host is left out of the deploy's batches: its one /health read is this one.
    The record's URL and TLS settings are the ones read."""
    root, spec, _runs = host
    (root / "record.fact").write_text(json.dumps({"current": {"instances": [
        {"name": "main", "url": "https://127.0.0.1:8000", "tls": {"ca_file": "/etc/vllm/tls/ca.crt"}},
        {"name": "ray-worker"}]}}))   # no URL of its own: nothing to read
    asked = []

    def fetcher(url, timeout, tls=None):
        def fetch(path):
            asked.append((url, path, tls["ca_file"], timeout))
            return prog.Response(status, b"", error)
        return fetch
    monkeypatch.setattr(prog, "make_fetcher", fetcher)
    state = root / "converged.json"
    run(monkeypatch, state, FP, spec)
    rc, out = run(monkeypatch, state, FP)
    assert asked == [("https://127.0.0.1:8000", "/health", "/etc/vllm/tls/ca.crt", 3)]
    if reason is None:
        assert rc == 0 and out["converged"] is True and out["reasons"] == []
    else:
        assert rc == 0 and out["converged"] is False and out["reasons"][0].startswith(reason), out


def test_health_is_not_read_when_the_files_already_say_no(host, monkeypatch):
    root, spec, runs = host
    monkeypatch.setattr(prog, "make_fetcher", lambda *a, **k: pytest.fail("read /health of a host already not converged"))
    (root / "record.fact").write_text(json.dumps({"current": {"instances": [{"name": "main", "url": "http://127.0.0.1:8000"}]}}))
    state = root / "converged.json"
    run(monkeypatch, state, FP, spec)
    runs["active"] = False
    rc, out = run(monkeypatch, state, FP)
    assert rc == 0 and out["reasons"] == ["vllm-main.service is not running"]
