"""The host program (roles/hosttools/files/kvfleet_vllm.py) against hostile input: its stdlib
HTTP against hostile servers on 127.0.0.1, the corpus through its gate and monitor, hostile
options and configurations."""

from __future__ import annotations

import argparse
import json
import threading
import time

import pytest

from ansible_collections.kvfleet.vllm.tests.unit import fixtures
from ansible_collections.kvfleet.vllm.tests.unit.plugins import hostprog, local_servers as ls

KEY = "k3y-never-elsewhere"
SLACK = 6.0  # seconds past the timeout: the units run at nice 19 beside vLLM (tests/run.sh);
# the hostile servers hold a client for local_servers.STOP_AFTER (20 s), far above, so a missing deadline still fails
BODIES = fixtures.hostile_bodies()


prog = hostprog.load("kvfleet_vllm_hostile")


# --- HTTP ------------------------------------------------------------------------------------

def test_redirect_to_another_port_never_gets_the_key():
    with ls.LocalServer(ls.vllm()) as other, ls.LocalServer(ls.redirect_to(other.url)) as first:
        snap = prog.take(first.url, api_key=KEY, timeout=3)
        assert other.requests == []
    assert first.requests[0]["headers"].get("Authorization") == "Bearer " + KEY
    assert "HTTP 302" in snap["error"] and "redirects are not followed" in snap["error"]


def test_warmup_redirect_never_gets_the_key(monkeypatch, capsys):
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    with ls.LocalServer(ls.vllm()) as other, ls.LocalServer(ls.redirect_to(other.url, 307)) as first:
        code = prog.warmup(argparse.Namespace(url=first.url, env_file=None, prompt="Hi",
                                              max_tokens=2, timeout=5))
        assert other.requests == []
    assert code == 1
    result = json.loads(capsys.readouterr().err)
    assert "HTTP 307" in result["error"] and "redirects are not followed" in result["error"]


@pytest.mark.parametrize("behaviour", [ls.trickle_body, ls.trickle_headers], ids=["body", "headers"])
def test_trickling_server_is_cut_off_at_the_timeout(behaviour):
    with ls.LocalServer(behaviour(every=1.0)) as srv:
        start = time.monotonic()
        snap = prog.take(srv.url, timeout=2.5)
        elapsed = time.monotonic() - start
    assert elapsed < 2.5 + SLACK, "took %.1fs" % elapsed
    assert "timed out after 2.5s" in snap["error"]


@pytest.mark.parametrize("declare_length", [True, False], ids=["with-length", "without-length"])
def test_50_mb_body_is_refused(declare_length):
    with ls.LocalServer(ls.huge_body(50 * ls.MB, declare_length)) as srv:
        start = time.monotonic()
        snap = prog.take(srv.url, timeout=10)
        elapsed = time.monotonic() - start
    assert "max_body_bytes" in snap["error"] and snap["healthy"] is False
    assert elapsed < 5


def test_unasked_gzip_is_refused():
    with ls.LocalServer(ls.gzip_bomb(64 * ls.MB)) as srv:
        snap = prog.take(srv.url, timeout=5)
    assert "gzip-encoded, which was not asked for" in snap["error"]


def test_credentials_in_the_url_become_basic_auth_and_are_never_shown():
    with ls.LocalServer(ls.vllm()) as srv:
        url = srv.url.replace("http://", "http://operator:pa55word-zz@")
        result = prog.run_gate(url, samples=1, interval=0, timeout=3)
        assert srv.requests[0]["headers"]["Authorization"].startswith("Basic ")
    assert result["verdict"] == "healthy" and result["samples"][0]["url"] == srv.url
    assert "pa55word-zz" not in json.dumps(result) and "operator" not in json.dumps(result)
    dead = prog.take("http://operator:pa55word-zz@127.0.0.1:9", timeout=2)
    assert "pa55word-zz" not in json.dumps(dead) and dead["url"] == "http://127.0.0.1:9"


# --- the corpus through the gate and the monitor -------------------------------------------

def _corpus_server():
    """One server for the whole corpus: /case/<id>/metrics is that case's body."""
    bodies = dict((cid, fixtures.hostile_body(e).encode("utf-8")) for cid, e in BODIES)

    def behaviour(h):
        parts = h.path.split("/")
        if len(parts) == 4 and parts[1] == "case" and parts[2] in bodies:
            if parts[3] == "metrics":
                return h.answer(200, bodies[parts[2]])
            return ls.vllm()(h)
        return h.answer(404)
    return ls.LocalServer(behaviour)


@pytest.fixture(scope="module")
def corpus_server():
    with _corpus_server() as srv:
        yield srv


@pytest.mark.parametrize("case, entry", BODIES, ids=[c for c, _e in BODIES])
def test_gate_is_never_healthy_on_a_hostile_body(corpus_server, case, entry):
    result = prog.run_gate("%s/case/%s" % (corpus_server.url, case), samples=2, interval=0, timeout=3)
    assert result["verdict"] == "degraded"
    assert "invalid_metrics" in [c["id"] for c in result["causes"]]
    json.dumps(result, allow_nan=False)


def _record(tmp_path, instances):
    """The deployment record the host program reads its instances from."""
    path = tmp_path / "kvfleet_vllm_server.fact"
    path.write_text(json.dumps({"current": {"instances": instances}}))
    return str(path)


def _monitor(tmp_path, instances):
    cfg = {"record": _record(tmp_path, instances), "history": str(tmp_path / "mon" / "history.jsonl"),
           "textfile": str(tmp_path / "textfile" / "kvfleet_vllm.prom")}
    path = tmp_path / "monitor.json"
    path.write_text(json.dumps(cfg))
    return argparse.Namespace(config=str(path)), tmp_path / "mon" / "history.jsonl"


def _lines(history):
    return dict((line["instance"], line) for line in map(json.loads, history.read_text().splitlines()))


def test_monitor_samples_the_whole_corpus_in_one_round(tmp_path, corpus_server, capsys):
    instances = [{"name": cid, "unit": "vllm-%s.service" % cid,
                  "url": "%s/case/%s" % (corpus_server.url, cid)} for cid, _e in BODIES]
    args, history = _monitor(tmp_path, instances)
    assert prog.sample(args) == 0
    lines = _lines(history)
    assert sorted(lines) == sorted(cid for cid, _e in BODIES)
    for cid, line in lines.items():
        assert line["verdict"] == "degraded" and "invalid_metrics" in line["cause_ids"], cid
    text = (tmp_path / "textfile" / "kvfleet_vllm.prom").read_text()
    assert text.count('cause="invalid_metrics"') == 2 * len(BODIES)  # named now and sustained


def test_one_failing_instance_never_stops_the_others(tmp_path, monkeypatch, capsys):
    real_diagnose = prog.diagnose

    def diagnose(snaps, **kwargs):
        if snaps[-1].get("url", "").endswith(":9"):
            raise ZeroDivisionError("float division by zero")
        return real_diagnose(snaps, **kwargs)

    monkeypatch.setattr(prog, "diagnose", diagnose)
    with ls.LocalServer(ls.vllm()) as good:
        args, history = _monitor(tmp_path, [
            {"name": "a", "unit": "vllm-a.service", "url": good.url},
            {"name": "b", "unit": "vllm-b.service", "url": "http://127.0.0.1:9"},
            {"name": "c", "unit": "vllm-c.service"},  # no url at all
            {"name": "d", "unit": "vllm-d.service", "url": good.url + "/?x=1"},
            {"name": "e", "unit": "vllm-e.service", "url": good.url}])
        assert prog.sample(args) == 0
    lines = _lines(history)
    assert sorted(lines) == ["a", "b", "c", "d", "e"]
    assert lines["a"]["verdict"] == lines["e"]["verdict"] == "healthy"
    assert lines["b"]["verdict"] == "unhealthy" and "ZeroDivisionError" in lines["b"]["error"]
    assert lines["c"]["verdict"] == "unhealthy" and "KeyError" in lines["c"]["error"]
    assert lines["d"]["verdict"] == "unhealthy" and "without a query" in lines["d"]["error"]
    out = capsys.readouterr()
    assert "<3>b: sampling failed: ZeroDivisionError" in out.err
    assert "<6>a: healthy" in out.out and "<6>e: healthy" in out.out
    text = (tmp_path / "textfile" / "kvfleet_vllm.prom").read_text()
    assert 'kvfleet_vllm_up{instance="a"} 1' in text and 'kvfleet_vllm_up{instance="b"} 0' in text


def test_history_lines_that_are_not_records_are_skipped(tmp_path, capsys):
    args, history = _monitor(tmp_path, [{"name": "a", "unit": "vllm-a.service",
                                         "url": "http://127.0.0.1:9"}])
    history.parent.mkdir(parents=True)
    history.write_text('[1, 2]\n"text"\n42\nnull\n' + "[" * 100000 + "\n"
                       + json.dumps({"instance": "a", "time": 1.0, "healthy": True}) + "\n")
    assert prog.sample(args) == 0
    last = json.loads(history.read_text().splitlines()[-1])
    assert (last["instance"], last["cause_ids"]) == ("a", ["engine_down"])
    assert prog.trends_report(args) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["a"]["points"] == 2


def test_restart_guard_records_a_failing_instance_as_failed(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(prog.subprocess, "run", lambda *a, **k: calls.append(a) or pytest.fail(
        "no command may run: %r" % (a,)))
    # a running unit (the guard reads its state first; a stopped one would be left alone)
    monkeypatch.setattr(prog, "unit_state", lambda unit: {"ActiveState": "active", "NRestarts": 0})
    cfg = tmp_path / "restart.json"
    cfg.write_text(json.dumps({"mode": "always", "record": _record(tmp_path, [{"name": "x", "unit": "vllm-x.service"}])}))
    assert prog.restart_guard(argparse.Namespace(config=str(cfg))) == 1
    assert "<3>vllm-x.service: restart guard failed: KeyError" in capsys.readouterr().err
    assert calls == []


# --- hostile options -----------------------------------------------------------------------

@pytest.mark.parametrize("argv, text", [
    (["gate", "--url", "http://127.0.0.1:9", "--interval", "inf", "--samples", "2"],
     "--interval must be 0 or more seconds, at most 3600, got inf"),
    (["gate", "--url", "http://127.0.0.1:9", "--interval", "1e6", "--samples", "2"],
     "--interval must be 0 or more seconds, at most 3600"),
    (["gate", "--url", "http://127.0.0.1:9", "--samples", "0"], "--samples must be 1 or more"),
    (["gate", "--url", "http://127.0.0.1:9", "--samples", "1000", "--interval", "3600"],
     "--samples x --interval must stay within 3600 s"),
    (["gate", "--url", "http://127.0.0.1:9", "--probe-timeout", "nan", "--samples", "1"],
     "--probe-timeout must be a positive number of seconds, at most 600, got nan"),
    (["gate", "--url", "http://127.0.0.1:9/?x=1", "--samples", "1"], "--url must be the server's base URL"),
    (["wait-healthy", "--unit", "vllm-none.service", "--url", "http://127.0.0.1:9", "--delay", "inf"],
     "--delay must be 0 or more seconds, at most 3600, got inf"),
    (["warmup", "--url", "http://127.0.0.1:9", "--timeout", "-1"],
     "--timeout must be a positive number of seconds"),
], ids=["interval-inf", "interval-1e6", "samples-0", "window-too-long", "probe-timeout-nan",
        "url-query", "delay-inf", "warmup-timeout-negative"])
def test_cli_refuses_unbounded_numbers_naming_the_flag(argv, text, capsys, monkeypatch):
    monkeypatch.setattr(prog.subprocess, "run", lambda *a, **k: pytest.fail("ran %r" % (a,)))
    box = {}

    def run():
        try:
            box["code"] = prog.main(argv)
        except SystemExit as exc:
            box["code"] = exc.code
        except BaseException as exc:  # the traceback a user would see
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "%s still runs after 10 s: it hangs" % argv
    assert "error" not in box, "%s raised %r" % (argv, box.get("error"))
    assert box["code"] == 2
    assert text in capsys.readouterr().err


def _group_head(dead_rank):
    """A serving group head whose engine `dead_rank` is gone: vLLM keeps routing requests pinned
    to it (X-data-parallel-rank), and they hang (measured on vLLM CPU 0.32.0)."""
    sane = ls.vllm()

    def behaviour(h):
        if h.path.endswith("/v1/completions") and h.headers.get("X-data-parallel-rank") == str(dead_rank):
            time.sleep(ls.STOP_AFTER)
            return
        sane(h)
    return behaviour


def test_warmup_of_a_group_head_pins_one_completion_to_each_engine(capsys):
    with ls.LocalServer(_group_head(dead_rank=9)) as srv:
        code = prog.warmup(argparse.Namespace(url=srv.url, env_file=None, prompt="Hi", max_tokens=2,
                                              timeout=5, engines=3))
    assert code == 0, capsys.readouterr().err
    result = json.loads(capsys.readouterr().out)
    assert [e["rank"] for e in result["engines"]] == [0, 1, 2]
    pinned = [r["headers"].get("X-data-parallel-rank") for r in srv.requests if r["path"].endswith("/v1/completions")]
    assert pinned == ["0", "1", "2"]


def test_warmup_names_the_engine_of_a_lost_member(capsys):
    with ls.LocalServer(_group_head(dead_rank=1)) as srv:
        start = time.monotonic()
        code = prog.warmup(argparse.Namespace(url=srv.url, env_file=None, prompt="Hi", max_tokens=2,
                                              timeout=2, engines=2))
        elapsed = time.monotonic() - start
    assert code == 1 and elapsed < 2 + SLACK
    result = json.loads(capsys.readouterr().err)
    assert "engine 1 (X-data-parallel-rank: 1) did not answer" in result["error"]
    assert "kvfleet.vllm.rolling_restart" in result["error"]
    assert [e["rank"] for e in result["engines"]] == [0]


def test_warmup_of_a_single_engine_sends_no_rank(capsys):
    with ls.LocalServer(ls.vllm()) as srv:
        code = prog.warmup(argparse.Namespace(url=srv.url, env_file=None, prompt="Hi", max_tokens=2,
                                              timeout=5, engines=1))
    assert code == 0 and "engines" not in json.loads(capsys.readouterr().out)
    assert all("X-data-parallel-rank" not in r["headers"] for r in srv.requests)


def test_hook_commands_are_not_in_argv_and_their_output_is_redacted(capsys, tmp_path):
    """A drain hook's command reaches the shell on its standard input (the process list shows
    `/bin/sh -s`, not the command with its inline token); a failing hook's output goes to the
    journal without its Authorization lines, bearer tokens or URL credentials."""
    seen = tmp_path / "argv"
    cmd = ("cat /proc/$$/cmdline > %s; echo 'lb-token=kvfleet-hook-secret'; "
           "echo '> Authorization: Bearer kvfleet-hook-secret' >&2; "
           "echo 'curl: (22) https://ops:kvfleet-pass@lb.internal/drain failed, Bearer kvfleet-hook-secret' >&2; exit 3"
           % seen)
    inst = {"name": "main", "unit": "vllm-main.service", "url": "http://127.0.0.1:8000"}
    assert prog._hooks([cmd], inst, "pre") is False
    assert seen.read_bytes().rstrip(b"\0").split(b"\0") == [b"/bin/sh", b"-s"]
    out = capsys.readouterr()
    logged = out.out + out.err
    assert "kvfleet-hook-secret" not in logged and "kvfleet-pass" not in logged
    assert "pre command 1 of 1 failed (exit 3)" in logged and "curl: (22)" in logged
