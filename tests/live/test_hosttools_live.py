"""The kvfleet-vllm host program, laid out as the hosttools role lays it out, with no Ansible."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import yaml

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
# what the hosttools role ships beside the program: its own list, not a copy of it
with open(os.path.join(ROOT, "roles", "hosttools", "vars", "main.yml"), encoding="utf-8") as _f:
    SHIPPED = tuple(yaml.safe_load(_f)["__hosttools_module_utils"])


def install(tmp_path):
    """What roles/hosttools/tasks/main.yml does, into tmp_path."""
    if (tmp_path / "kvfleet_vllm.py").exists():
        return tmp_path / "kvfleet_vllm.py"
    lib = tmp_path / "lib" / "ansible_collections" / "kvfleet" / "vllm" / "plugins" / "module_utils"
    lib.mkdir(parents=True)
    for pkg in (lib, lib.parent, lib.parent.parent, lib.parent.parent.parent, lib.parent.parent.parent.parent):
        (pkg / "__init__.py").write_text("")
    for name in SHIPPED:
        shutil.copy(os.path.join(ROOT, "plugins", "module_utils", name), lib / name)
    prog = tmp_path / "kvfleet_vllm.py"
    shutil.copy(os.path.join(ROOT, "roles", "hosttools", "files", "kvfleet_vllm.py"), prog)
    return prog


def run(prog, *args):
    # -I: isolated, so neither the collection copy nor Ansible can be imported by accident
    return subprocess.run(["/usr/bin/python3", "-I", str(prog)] + list(args),
                          capture_output=True, text=True, timeout=120, check=False)


def test_gate_on_a_real_idle_server(tmp_path, idle_server):
    prog = install(tmp_path)
    proc = run(prog, "gate", "--url", idle_server.url, "--samples", "2", "--interval", "1")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["verdict"], result["state"], result["causes"]) == ("healthy", "idle", [])
    assert result["samples"][0]["block_size"] == 32


def test_gate_on_a_dead_server_exits_2_with_engine_down(tmp_path):
    prog = install(tmp_path)
    proc = run(prog, "gate", "--url", "http://127.0.0.1:9", "--samples", "1")
    assert proc.returncode == 2
    assert [c["id"] for c in json.loads(proc.stdout)["causes"]] == ["engine_down"]


def test_wait_healthy_trusts_only_the_units_own_server(tmp_path, idle_server):
    # a real vLLM answers /health on the port, but it is no process of the unit (no such unit
    # here): wait-healthy says so and fails, so that warmup never sends it the API key
    prog = install(tmp_path)
    proc = run(prog, "wait-healthy", "--unit", "kvfleet-test-none.service", "--url", idle_server.url,
               "--timeout", "30")
    assert proc.returncode == 1, proc.stdout
    assert "something answers /health" in proc.stderr and "not the unit's own server" in proc.stderr
    # and warmup, given the unit, sends no key to it
    env = tmp_path / "main.env"
    env.write_text("VLLM_API_KEY=kvfleet-canary-key\n")
    env.chmod(0o600)
    proc = run(prog, "warmup", "--url", idle_server.url, "--unit", "kvfleet-test-none.service",
               "--env-file", str(env), "--timeout", "10")
    assert proc.returncode == 1 and "not sending the API key" in proc.stdout, proc.stdout


def record(tmp_path, instances):
    """A deployment record as the server role writes it (instances from vllm_instances)."""
    path = tmp_path / "kvfleet_vllm_server.fact"
    path.write_text(json.dumps({"current": {"version": "0.32.0", "instances": instances}}))
    return str(path)


def fake_systemd(tmp_path):
    """systemctl/journalctl stand-ins that record calls: the guard's failure path without a host."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.log"
    for name, body in (("systemctl", 'case "$1" in show) printf "ActiveState=active\\nNRestarts=0\\n";; esac'),
                       ("journalctl", 'echo "fake journal line"')):
        script = bin_dir / name
        script.write_text('#!/bin/sh\necho "%s $*" >> %s\n%s\n' % (name, calls, body))
        script.chmod(0o755)
    return bin_dir, calls


def guard(tmp_path, mode, url):
    bin_dir, calls = fake_systemd(tmp_path)
    marker = tmp_path / "post-ran"
    config = tmp_path / "restart.json"
    config.write_text(json.dumps({
        "mode": mode, "causes": ["admission_stall", "engine_down"], "drain_timeout": 1,
        "health_timeout": 4, "gate_samples": 1, "gate_interval": 0,
        "pre_commands": ["true"], "post_commands": ["touch %s" % marker],
        "record": record(tmp_path, [
            {"name": "main", "unit": "vllm-main.service", "url": url, "drain_seconds": 20},
            {"name": "b", "unit": "vllm-b.service", "url": url, "drain_seconds": 20}])}))
    env = dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ["PATH"]))
    proc = subprocess.run(["/usr/bin/python3", "-I", str(install(tmp_path)), "restart-guard",
                           "--config", str(config)],
                          capture_output=True, text=True, timeout=120, env=env, check=False)
    return proc, calls.read_text() if calls.exists() else "", marker.exists()


def test_guard_fails_loudly_when_the_server_does_not_come_back(tmp_path):
    proc, calls, post_ran = guard(tmp_path, "always", "http://127.0.0.1:9")
    assert proc.returncode == 1
    assert "did not come back healthy" in proc.stderr and "fake journal line" in proc.stderr
    assert "systemctl restart vllm-main.service" in calls
    assert "vllm-b.service" not in calls.replace("show", "")  # the second instance is left alone
    assert not post_ran  # a sick instance is not put back behind the load balancer


def test_when_degraded_restarts_a_dead_engine(tmp_path):
    proc, calls = guard(tmp_path, "when_degraded", "http://127.0.0.1:9")[:2]
    assert "restarting: engine_down found" in proc.stdout
    assert "systemctl restart vllm-main.service" in calls


def monitor_config(tmp_path, **extra):
    cfg = dict({"record": record(tmp_path, [{"name": "main", "unit": "vllm-main.service",
                                             "url": "http://127.0.0.1:9", "max_num_seqs": 4}]),
                "history": str(tmp_path / "mon" / "history.jsonl"), "history_max_bytes": 4096,
                "history_keep": 2, "textfile": str(tmp_path / "textfile" / "kvfleet_vllm.prom")},
               **extra)
    path = tmp_path / "monitor.json"
    path.write_text(json.dumps(cfg))
    return path, cfg


def test_sample_rotates_the_history_and_keeps_it_bounded(tmp_path):
    prog = install(tmp_path)
    config, cfg = monitor_config(tmp_path)
    history = tmp_path / "mon" / "history.jsonl"
    history.parent.mkdir()
    filler = json.dumps({"instance": "other", "time": 0, "healthy": True, "pad": "x" * 900}) + "\n"
    for round_ in range(4):
        history.write_text(filler * 5)            # > history_max_bytes
        proc = run(prog, "monitor", "--config", str(config))
        assert proc.returncode == 0, proc.stderr
        lines = history.read_text().splitlines()
        assert len(lines) == 1 and json.loads(lines[0])["cause_ids"] == ["engine_down"]
        rotated = sorted(p.name for p in history.parent.iterdir() if p.name != "history.jsonl")
        assert rotated == ["history.jsonl.1", "history.jsonl.2"][:min(round_ + 1, 2)]
    text = (tmp_path / "textfile" / "kvfleet_vllm.prom").read_text()
    assert 'kvfleet_vllm_up{instance="main"} 0' in text
    assert 'kvfleet_vllm_cause{cause="engine_down",instance="main"} 1' in text
    assert "main: unhealthy" in proc.stdout


def falling_history(path, instance="main"):
    """20 samples a minute apart: usage 0.8 -> 0.42 while ~5 requests/s hold; capped throughout."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for i in range(20):
            f.write(json.dumps({"instance": instance, "time": 1000.0 + 60 * i, "healthy": True,
                                "kv_cache_usage": 0.8 - 0.02 * i, "cause_ids": ["concurrency_cap"],
                                "rates": {"requests_finished_per_s": 5.0 + (i % 2) * 0.2}}) + "\n")


def test_trends_subcommand_reads_the_history(tmp_path):
    prog = install(tmp_path)
    config, cfg = monitor_config(tmp_path)
    falling_history(tmp_path / "mon" / "history.jsonl")
    proc = run(prog, "trends", "--config", str(config))
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)["main"]
    assert found["trends"] == ["usage_falling_rate_steady"]
    assert found["sustained"] == ["concurrency_cap"] and found["points"] == 20
    assert found["trend_evidence"]["usage_falling_rate_steady"]["usage_drop_fitted"] > 0.3


def test_warmup_gets_a_completion_from_a_real_server(tmp_path, idle_server):
    prog = install(tmp_path)
    proc = run(prog, "warmup", "--url", idle_server.url, "--max-tokens", "3")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["finish_reason"] == "length" and result["completion_tokens"] == 3
    assert result["model"]


def test_warmup_on_a_dead_server_fails_naming_the_url(tmp_path):
    prog = install(tmp_path)
    proc = run(prog, "warmup", "--url", "http://127.0.0.1:9", "--timeout", "5")
    assert proc.returncode == 1
    result = json.loads(proc.stderr)
    assert result["url"] == "http://127.0.0.1:9" and "Connection refused" in result["error"]


def test_env_file_quoting_round_trips(tmp_path):
    """The server role's template escapes \\ and \" inside double quotes; the program undoes it."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("kvfleet_vllm_prog", str(install(tmp_path)))
    prog = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prog)
    env = tmp_path / "main.env"
    env.write_text('# comment\nHF_HOME="/var/lib/vllm/hf"\nVLLM_API_KEY="k\\"ey\\\\x"\nPLAIN=1\n')
    assert prog.read_env_file(str(env)) == {"HF_HOME": "/var/lib/vllm/hf", "VLLM_API_KEY": 'k"ey\\x',
                                            "PLAIN": "1"}
