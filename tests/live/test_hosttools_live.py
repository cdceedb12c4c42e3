"""The kvfleet-vllm host program, laid out as the hosttools role lays it out, with no Ansible."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SHIPPED = ("_prom.py", "_vllm_metrics.py", "_probe.py", "_diagnosis.py", "_trends.py", "_textfile.py")


def install(tmp_path):
    """What roles/hosttools/tasks/main.yml does, into tmp_path."""
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


def test_wait_healthy_returns_when_health_answers(tmp_path, idle_server):
    prog = install(tmp_path)
    # no such unit here: systemctl reports nothing, so only /health decides
    proc = run(prog, "wait-healthy", "--unit", "kvfleet-test-none.service", "--url", idle_server.url,
               "--timeout", "30")
    assert proc.returncode == 0, proc.stderr
    assert "healthy after" in proc.stdout
