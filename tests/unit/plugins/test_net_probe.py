"""roles/server/files/net_probe.py and the net_problems filter: the preflight's ports and the
serving group head's reachability, with real sockets on loopback.

A port another program holds, or an address vLLM cannot bind, fails vLLM's start only after a
deploy has drained the host; a port the instance's own unit holds (a re-deploy) must pass."""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import socket
import subprocess
import sys

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.filter.net_problems import FilterModule

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
SCRIPT = os.path.join(ROOT, "roles", "server", "files", "net_probe.py")

_spec = importlib.util.spec_from_file_location("net_probe", SCRIPT)
npb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(npb)

net_problems = FilterModule().filters()["net_problems"]


@pytest.fixture
def listener():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield sock.getsockname()[1]
    sock.close()


def _closed_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def test_a_free_port_is_free():
    assert npb.bind_state("127.0.0.1", _closed_port())["state"] == "free"


def test_a_held_port_names_the_process_that_holds_it(listener):
    entry = npb.bind_state("127.0.0.1", listener)
    assert entry["state"] == "in_use"
    assert os.getpid() in [h["pid"] for h in entry["holders"]]
    assert entry["owners"] == [pwd.getpwuid(os.getuid()).pw_name]


def test_an_address_of_another_host_cannot_be_bound():
    # TEST-NET-1 is on no interface here; nothing is sent, bind alone refuses it
    assert npb.bind_state("192.0.2.7", _closed_port())["state"] == "not_local"


def test_reach_tells_a_head_not_started_yet_from_one_that_serves(listener):
    assert npb.reach_state("127.0.0.1", listener)["state"] == "connected"
    assert npb.reach_state("127.0.0.1", _closed_port())["state"] == "refused"   # answered: reached


def test_reach_timeout_unreachable_unresolved(monkeypatch):
    # stand-ins for the network: a test sends nothing beyond this machine
    def timeout(*_a, **_k):
        raise socket.timeout("timed out")
    monkeypatch.setattr(npb.socket, "create_connection", timeout)
    assert npb.reach_state("10.9.9.9", 13345, timeout=0.1)["state"] == "timeout"

    def unreachable(*_a, **_k):
        raise OSError(113, "No route to host")
    monkeypatch.setattr(npb.socket, "create_connection", unreachable)
    assert npb.reach_state("10.9.9.9", 13345)["state"] == "unreachable"

    def unresolved(*_a, **_k):   # no name is looked up for real: that would leave this machine
        raise socket.gaierror(-2, "Name or service not known")
    monkeypatch.setattr(npb.socket, "create_connection", unresolved)
    assert npb.reach_state("head.example", 13345)["state"] == "unresolved"


def test_a_process_is_mapped_to_its_systemd_unit(tmp_path):
    proc = tmp_path / "proc"
    (proc / "42").mkdir(parents=True)
    (proc / "42" / "cgroup").write_text("0::/system.slice/vllm-main.service\n")
    (proc / "43").mkdir()
    (proc / "43" / "cgroup").write_text("0::/user.slice/user-0.slice/session-3.scope\n")
    assert npb._unit_of(42, str(proc)) == "vllm-main.service"
    assert npb._unit_of(43, str(proc)) == "session-3.scope"
    assert npb._unit_of(44, str(proc)) is None


def test_the_command_line(listener):
    free = _closed_port()
    proc = subprocess.run([sys.executable, SCRIPT, "--bind", "127.0.0.1", str(listener), "--bind", "127.0.0.1",
                           str(free), "--reach", "127.0.0.1", str(free)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [b["state"] for b in out["bind"]] == ["in_use", "free"]
    assert [r["state"] for r in out["reach"]] == ["refused"]
    bad = subprocess.run([sys.executable, SCRIPT, "--bind", "127.0.0.1"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2


def _probe(bind=(), reach=()):
    return {"bind": list(bind), "reach": list(reach)}


def test_a_port_held_by_a_vllm_unit_of_the_collection_is_no_problem():
    ours = {"address": "10.0.0.1", "port": 8000, "state": "in_use",
            "holders": [{"pid": 10, "command": "python3", "unit": "vllm-main.service"}]}
    assert net_problems(_probe([ours, {"address": "10.0.0.1", "port": 13345, "state": "free", "holders": []}])) == []


def test_a_port_held_by_another_program_is_refused_naming_it_and_the_variables():
    other = {"address": "0.0.0.0", "port": 8000, "state": "in_use",
             "holders": [{"pid": 10, "command": "python3", "unit": "vllm-main.service"},
                         {"pid": 77, "command": "nginx", "unit": "nginx.service"}]}
    out = net_problems(_probe([other]))
    assert len(out) == 1
    assert "port 8000 on 0.0.0.0 is held by nginx (pid 77, nginx.service)" in out[0]
    assert "python3" not in out[0] and "vllm_server_instances[].port" in out[0]
    unseen = dict(other, holders=[], owners=["www-data"])
    assert "held by a process of user www-data" in net_problems(_probe([unseen]))[0]


def test_a_port_whose_holders_cannot_be_read_counts_by_its_owner():
    """Root in a container lacks CAP_SYS_PTRACE: the vLLM unit's process (user vllm) is not
    readable, the socket's owner is (seen on the demo fleet's Podman hosts)."""
    unseen = {"address": "10.0.0.1", "port": 8000, "state": "in_use", "holders": [], "owners": ["vllm"]}
    assert net_problems(_probe([unseen])) == []
    assert net_problems(_probe([unseen]), service_user="inference") != []
    assert net_problems(_probe([dict(unseen, owners=["vllm", "root"])])) != []
    assert net_problems(_probe([dict(unseen, owners=[])])) != []


def test_an_address_not_on_the_host_and_an_unreachable_head_are_refused():
    out = net_problems(_probe(
        [{"address": "10.1.2.3", "port": 8000, "state": "not_local", "holders": []}],
        [{"host": "10.0.0.1", "port": 13345, "state": "refused"},
         {"host": "10.0.0.9", "port": 13345, "state": "timeout", "detail": "no answer in 3 s"}]))
    assert len(out) == 2
    assert out[0].startswith("10.1.2.3 is not an address of this host") and "vllm_server_host" in out[0]
    assert "10.0.0.9:13345 is timeout from here (no answer in 3 s)" in out[1]
    assert "vllm_server_serving_group_address" in out[1]


def test_bad_input_names_what_was_expected():
    with pytest.raises(AnsibleFilterError, match="net probe's result"):
        net_problems("nonsense")
