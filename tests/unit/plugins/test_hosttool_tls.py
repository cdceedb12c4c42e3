"""The host program over https: the server's certificate checked against the record's CA, a
client certificate presented when the server requires one, and bad TLS files reported as the
instance's error, never a traceback or a healthy reading."""

from __future__ import annotations

import argparse
import json
import os

from ansible_collections.kvfleet.vllm.tests.unit.plugins import hostprog, local_servers as ls

prog = hostprog.load("kvfleet_vllm_tls")
CA = {"ca_file": ls.tls_file("ca.crt")}
CLIENT = dict(CA, client_cert=ls.tls_file("client.crt"), client_key=ls.tls_file("client.key"))


def test_https_with_the_records_ca_reads_the_server():
    with ls.LocalServer(ls.vllm(), tls="server") as srv:
        snap = prog.take(srv.url, timeout=5, tls=CA)
    assert srv.url.startswith("https://")
    assert snap.get("error") is None and snap["healthy"] and snap["kv_cache_usage"] is not None


def test_an_untrusted_certificate_is_an_error_not_a_reading():
    with ls.LocalServer(ls.vllm(), tls="server") as srv:
        wrong = prog.take(srv.url, timeout=5, tls={"ca_file": ls.tls_file("other-ca.crt")})
        system = prog.take(srv.url, timeout=5)   # the system's trust store has no test CA
    for snap in (wrong, system):
        assert not snap["healthy"] and "CERTIFICATE_VERIFY_FAILED" in snap["error"]


def test_the_name_is_checked_too():
    # the certificate names 127.0.0.1 and localhost; 127.0.0.2 is the same server, another name
    with ls.LocalServer(ls.vllm(), tls="server") as srv:
        snap = prog.take(srv.url.replace("127.0.0.1", "127.0.0.2"), timeout=5, tls=CA)
    assert not snap["healthy"] and "127.0.0.2" in snap["error"]


def test_a_server_requiring_a_client_certificate_gets_the_probes():
    with ls.LocalServer(ls.vllm(), tls="client") as srv:
        without = prog.take(srv.url, timeout=5, tls=CA)
        with_cert = prog.take(srv.url, timeout=5, tls=CLIENT)
    assert not without["healthy"] and without["error"]
    assert with_cert["healthy"] and with_cert.get("error") is None


def test_unreadable_tls_files_are_the_instances_error(tmp_path):
    missing = str(tmp_path / "nope.crt")
    garbage = tmp_path / "garbage.crt"
    garbage.write_text("not a certificate\n")
    with ls.LocalServer(ls.vllm(), tls="server") as srv:
        for tls in ({"ca_file": missing}, {"ca_file": str(garbage)},
                    dict(CA, client_cert=missing, client_key=missing)):
            snap = prog.take(srv.url, timeout=5, tls=tls)
            assert not snap["healthy"] and snap["error"], tls
    # a plain-http server ignores the TLS settings (nothing to check)
    with ls.LocalServer(ls.vllm()) as srv:
        assert prog.take(srv.url, timeout=5, tls={"ca_file": missing})["healthy"]


def test_gate_wait_healthy_and_warmup_take_the_ca_on_the_command_line(monkeypatch, capsys):
    # the server runs in this process: the "unit's" main PID is this one (wait-healthy checks it)
    monkeypatch.setattr(prog, "unit_state", lambda unit: {"ActiveState": "active", "NRestarts": 0,
                                                          "MainPID": str(os.getpid())})
    with ls.LocalServer(ls.vllm(), tls="server") as srv:
        tls = ["--ca-file", ls.tls_file("ca.crt")]
        assert prog.main(["gate", "--url", srv.url, "--samples", "2", "--interval", "0"] + tls) == 0
        assert json.loads(capsys.readouterr().out)["verdict"] == "healthy"
        assert prog.main(["wait-healthy", "--unit", "vllm-a.service", "--url", srv.url,
                          "--timeout", "0"] + tls) == 0
        capsys.readouterr()
        assert prog.main(["warmup", "--url", srv.url, "--timeout", "5"] + tls) == 0
        assert json.loads(capsys.readouterr().out)["completion_tokens"] == 4
        # without the CA: not healthy, a clear error, exit codes that fail the task
        assert prog.main(["gate", "--url", srv.url, "--samples", "2", "--interval", "0"]) == 2
        assert prog.main(["warmup", "--url", srv.url, "--timeout", "5"]) == 1
        out = capsys.readouterr()
        assert "CERTIFICATE_VERIFY_FAILED" in json.loads((out.out + out.err).splitlines()[-1])["error"]


def test_unreadable_ca_on_the_command_line_fails_cleanly(capsys, monkeypatch):
    monkeypatch.setattr(prog, "unit_state", lambda unit: {"ActiveState": "active", "NRestarts": 0})
    args = ["--url", "https://127.0.0.1:9", "--ca-file", "/nonexistent/ca.crt"]
    assert prog.main(["gate"] + args) == 2
    assert prog.main(["wait-healthy", "--unit", "vllm-a.service", "--timeout", "0"] + args) == 1
    assert prog.main(["warmup"] + args) == 1
    err = capsys.readouterr()
    assert "Traceback" not in err.err + err.out and "No such file" in err.err + err.out


def test_the_restart_guard_probes_with_the_records_tls(monkeypatch):
    seen = []
    real = prog.make_fetcher

    def spy(url, timeout, api_key=None, max_body_bytes=prog.MAX_BODY_BYTES, tls=None):
        seen.append(tls)
        return real(url, timeout, api_key, max_body_bytes, tls)
    monkeypatch.setattr(prog, "make_fetcher", spy)
    monkeypatch.setattr(prog, "unit_state", lambda unit: {"ActiveState": "active", "NRestarts": 0,
                                                          "ActiveEnterTimestampMonotonic": "1"})
    with ls.LocalServer(ls.vllm(), tls="server") as srv:
        inst = {"name": "a", "unit": "vllm-a.service", "url": srv.url, "tls": CA}
        cfg = {"mode": "when_degraded", "causes": ["kv_cache_exhausted"], "gate_samples": 2,
               "gate_interval": 0, "health_timeout": 0}
        assert prog.restart_one(cfg, inst) == "skipped"   # healthy: nothing to cure
    assert seen and all(t == CA for t in seen)


def test_the_monitor_round_reads_an_https_instance(tmp_path, monkeypatch):
    monkeypatch.setattr(prog, "unit_state", lambda unit: {"ActiveState": "active", "NRestarts": 0})
    with ls.LocalServer(ls.vllm(), tls="server") as srv:
        record = tmp_path / "record.json"
        record.write_text(json.dumps({"current": {"instances": [
            {"name": "a", "unit": "vllm-a.service", "url": srv.url, "tls": CA},
            {"name": "b", "unit": "vllm-b.service", "url": srv.url, "tls": None}]}}))
        config = tmp_path / "monitor.json"
        config.write_text(json.dumps({"record": str(record), "history": str(tmp_path / "h.jsonl")}))
        assert prog.sample(argparse.Namespace(config=str(config))) == 0
    lines = [json.loads(x) for x in (tmp_path / "h.jsonl").read_text().splitlines()]
    by_name = dict((x["instance"], x) for x in lines)
    assert by_name["a"]["healthy"] and by_name["a"]["verdict"] == "healthy"
    # b's record has no CA: the certificate is not trusted, the round says so for b alone
    assert not by_name["b"]["healthy"] and "CERTIFICATE_VERIFY_FAILED" in by_name["b"]["error"]


def test_an_unreadable_ca_or_client_key_is_named():
    with ls.LocalServer(ls.vllm(), tls="client") as srv:
        no_ca = prog.take(srv.url, timeout=5, tls={"ca_file": "/nonexistent/ca.crt"})
        no_key = prog.take(srv.url, timeout=5, tls=dict(CA, client_cert=ls.tls_file("client.crt"),
                                                        client_key="/nonexistent/probe.key"))
    assert not no_ca["healthy"] and "cannot read the CA file /nonexistent/ca.crt" in no_ca["error"]
    assert not no_key["healthy"] and "/nonexistent/probe.key" in no_key["error"]


def test_the_api_key_goes_only_to_the_units_own_server(monkeypatch, capsys, tmp_path):
    # a listener that is not the unit's (its main process runs as another user, nobody, and
    # listens on nothing): neither healthy nor sent the key; the unit's own (this process) gets it
    import subprocess
    env = tmp_path / "main.env"
    env.write_text("VLLM_API_KEY=kvfleet-canary-key\n")
    other = subprocess.Popen(["sleep", "60"], preexec_fn=lambda: os.setuid(65534))
    with ls.LocalServer(ls.vllm()) as srv:
        monkeypatch.setattr(prog, "unit_state", lambda unit: {"ActiveState": "active", "NRestarts": 0,
                                                              "MainPID": str(other.pid)})
        assert prog.main(["wait-healthy", "--unit", "vllm-a.service", "--url", srv.url, "--timeout", "0"]) == 1
        assert "not the unit's own server" in capsys.readouterr().err
        assert prog.main(["warmup", "--url", srv.url, "--unit", "vllm-a.service", "--env-file", str(env),
                          "--timeout", "5"]) == 1
        assert "not sending the API key" in capsys.readouterr().out
        assert not srv.saw_header("Authorization")
        monkeypatch.setattr(prog, "unit_state", lambda unit: {"ActiveState": "active", "NRestarts": 0,
                                                              "MainPID": str(os.getpid())})
        assert prog.main(["warmup", "--url", srv.url, "--unit", "vllm-a.service", "--env-file", str(env),
                          "--timeout", "5"]) == 0
        assert srv.saw_header("Authorization")
    other.kill()
    other.wait()
