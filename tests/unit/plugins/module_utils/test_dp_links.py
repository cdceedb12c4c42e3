"""_dp_links: a serving group head's links from its remote engines, read from a /proc laid out
as the one measured on vLLM CPU 0.32.0 across two Podman hosts and on one host's loopback: the
API server and its DP coordinator each hold two links from a remote engine, the head's own engine
four more inside the host, an HTTP client on the API port, other users' sockets (sshd, a
scrape of node_exporter), a torch.distributed link between the engines. Nothing but
/proc/net/tcp and /proc/<pid>/status is read: no privilege needed (root in a container cannot
read another user's /proc/<pid>/fd)."""

from __future__ import annotations

import os
import socket
import struct

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils._dp_links import (
    engine_links, head_links, links_per_engine, local_engines, process_tree)

HEAD, WORKER, CLIENT = "10.88.0.62", "10.88.0.63", "10.88.0.1"
API, RPC, VLLM, ROOT = 8000, 13345, 999, 0


def _hex4(ip, port):
    return "%08X:%04X" % (struct.unpack("<I", socket.inet_aton(ip))[0], port)


def _hex6(ip, port):
    packed = socket.inet_pton(socket.AF_INET6, ip)
    return "".join("%08X" % struct.unpack("<I", packed[i:i + 4])[0] for i in range(0, 16, 4)) + ":%04X" % port


class FakeProc(object):
    """A /proc folder: processes (pid, ppid, uid) and the TCP tables with each socket's owner."""

    def __init__(self, root):
        self.root = str(root)
        self.tcp, self.tcp6 = [], []
        os.makedirs(os.path.join(self.root, "net"))

    def process(self, pid, ppid, uid=VLLM):
        folder = os.path.join(self.root, str(pid))
        os.makedirs(folder)
        with open(os.path.join(folder, "stat"), "w") as f:
            f.write("%d (python3) S %d 1 1 0 -1\n" % (pid, ppid))
        with open(os.path.join(folder, "status"), "w") as f:
            f.write("Name:\tpython3\nUid:\t%d\t%d\t%d\t%d\n" % (uid, uid, uid, uid))
        return pid

    def sock(self, local, remote, state, uid=VLLM, v6=False):
        row = _hex6 if v6 else _hex4
        table = self.tcp6 if v6 else self.tcp
        table.append("%4d: %s %s %s 00000000:00000000 00:00000000 00000000 %5d 0 %d 1"
                     % (len(table), row(*local), row(*remote), state, uid, 1000 + len(self.tcp) + len(self.tcp6)))

    def write(self):
        header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        for name, rows in (("tcp", self.tcp), ("tcp6", self.tcp6)):
            with open(os.path.join(self.root, "net", name), "w") as f:
                f.write(header + "".join(r + "\n" for r in rows))


PORTS = {"input": 41001, "output": 41002, "coord_pull": 41003, "coord_pub": 41004}


def _head(tmp_path, worker_alive=True, rpc_listening=False, worker_v6=False, local_worker=False):
    p = FakeProc(tmp_path / "proc")
    api = p.process(500, 1)
    p.process(510, api)
    p.process(520, api)
    p.process(900, 1, uid=ROOT)
    p.sock(("0.0.0.0", API), ("0.0.0.0", 0), "0A")
    p.sock((HEAD, API), (CLIENT, 40000), "01")          # an HTTP client: never an engine
    for port in PORTS.values():
        p.sock((HEAD, port), ("0.0.0.0", 0), "0A")
    if rpc_listening:
        p.sock((HEAD, RPC), ("0.0.0.0", 0), "0A")
    # the head's own engine: four links from this host, both ends listed
    for i, port in enumerate(sorted(PORTS.values())):
        p.sock((HEAD, 50000 + i), (HEAD, port), "01")
        p.sock((HEAD, port), (HEAD, 50000 + i), "01")
    if local_worker:   # a headless worker on the same host connects from its address too
        for i, port in enumerate(sorted(PORTS.values())):
            p.sock((HEAD, 52000 + i), (HEAD, port), "01")
            p.sock((HEAD, port), (HEAD, 52000 + i), "01")
    if worker_alive:
        for i, port in enumerate(sorted(PORTS.values())):
            if worker_v6:
                p.sock(("::ffff:" + HEAD, port), ("::ffff:" + WORKER, 60000 + i), "01", v6=True)
            else:
                p.sock((HEAD, port), (WORKER, 60000 + i), "01")
    # other users' sockets: sshd's listener with the controller connected, node_exporter scraped
    p.sock(("0.0.0.0", 22), ("0.0.0.0", 0), "0A", uid=ROOT)
    p.sock((HEAD, 22), (CLIENT, 41001), "01", uid=ROOT)
    p.sock(("0.0.0.0", 9100), ("0.0.0.0", 0), "0A", uid=65534)
    p.sock((HEAD, 9100), (CLIENT, 45000), "01", uid=65534)
    p.write()
    return p


GROUP = {"key": "%s:%d" % (HEAD, RPC), "role": "head", "size": 2, "size_local": 1}


def _show(pid="500"):
    return lambda unit: {"MainPID": pid}


def test_a_serving_group_head_holds_four_links_per_remote_engine(tmp_path):
    p = _head(tmp_path)
    links = engine_links(VLLM, API, RPC, p.root)
    assert (links["links"], links["by_address"], links["rpc_listening"]) == (4, {WORKER: 4}, False)
    assert links["listening"] == sorted(PORTS.values())   # the HTTP port left out
    out = head_links(_show(), "vllm-main.service", API, GROUP, proc=p.root)["group_links"]
    assert (out["links"], out["remote_engines"]) == (4, 1)
    assert links_per_engine("0.32.0+cpu") * out["remote_engines"] == 4


def test_a_dead_member_leaves_no_link(tmp_path):
    p = _head(tmp_path, worker_alive=False)
    out = head_links(_show(), "vllm-main.service", API, GROUP, proc=p.root)["group_links"]
    assert (out["links"], out["by_address"]) == (0, {})


def test_a_head_waiting_for_its_engines_still_listens_on_the_rpc_port(tmp_path):
    p = _head(tmp_path, worker_alive=False, rpc_listening=True)
    assert engine_links(VLLM, API, RPC, p.root)["rpc_listening"] is True


def test_ipv4_peers_of_a_dual_stack_socket_read_as_ipv4(tmp_path):
    p = _head(tmp_path, worker_v6=True)
    assert engine_links(VLLM, API, RPC, p.root)["by_address"] == {WORKER: 4}


def test_a_local_worker_is_no_remote_engine(tmp_path):
    """A group with its worker on the head's host (the server scenario's): its engines connect
    from this host, and the record's worker makes them local: nothing remote to expect."""
    p = _head(tmp_path, worker_alive=False, local_worker=True)
    record = {"current": {"workers": [{"name": "g1", "group": dict(GROUP, role="worker", size_local=1)},
                                      {"name": "x", "group": {"key": "10.0.0.9:1", "size_local": 5}}]}}
    local = local_engines(record, GROUP)
    assert local == 2
    assert head_links(_show(), "vllm-main.service", API, GROUP, local, p.root) == {}
    assert local_engines({"current": {"workers": [{"group": dict(GROUP, size_local="1")}]}}, GROUP) is None
    assert local_engines({}, GROUP) == 1 and local_engines("garbage", GROUP) == 1


@pytest.mark.parametrize("version, per_engine", [
    ("0.9.0", 2), ("0.9.1", 4), ("0.32.0+cpu", 4), ("0.33.0", 4), (None, 4), ("garbage", 4), ("1", 4)])
def test_links_per_engine_follows_the_release(version, per_engine):
    # 0.9.0 has no DP coordinator: input and output only (read in its wheel)
    assert links_per_engine(version) == per_engine


def test_nothing_to_read_for_other_instances_or_a_head_that_does_not_run(tmp_path):
    p = _head(tmp_path)
    for other in ({"role": "worker", "size": 2, "size_local": 1}, {"role": "head", "size": 2, "size_local": 2},
                  {"role": "head", "size": "2", "size_local": 1}, dict(GROUP, backend="ray"), None, "x"):
        assert head_links(_show(), "u", API, other, proc=p.root) == {}, other
    for show in (_show("0"), _show("4242"), lambda unit: {}, lambda unit: {"MainPID": "x"}):
        assert head_links(show, "u", API, GROUP, proc=p.root) == {}


def test_garbage_in_proc_is_skipped_not_fatal(tmp_path):
    p = _head(tmp_path)
    with open(os.path.join(p.root, "net", "tcp"), "a") as f:
        f.write("garbage line\n  9: ZZZZ:1 0100007F:1 01 0 0 0 0 999 0 1234\n  9: 0100007F:1 0100007F:1 01\n")
    os.makedirs(os.path.join(p.root, "4242"))   # a process that exited while we read: no stat
    assert engine_links(VLLM, API, RPC, p.root)["links"] == 4
    assert sorted(process_tree(500, p.root)) == [500, 510, 520]
    assert process_tree(500, str(tmp_path / "no-proc")) == []


# --- who listens on a port (the API key goes to the unit's own server only) -----------------------

def test_the_port_is_owned_by_the_units_user_and_process_tree():
    import os
    import socket
    import subprocess
    from ansible_collections.kvfleet.vllm.plugins.module_utils._dp_links import port_owner
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    sleep = ["sleep", "30"]
    try:
        # this process holds it: its own tree owns the port
        assert port_owner(os.getpid(), port) == (True, None)
        # a unit running as another user (nobody): the socket is not its user's
        other = subprocess.Popen(sleep, preexec_fn=lambda: os.setuid(65534))
        # a unit of the same user whose tree does not hold the socket (root reads its descriptors)
        same = subprocess.Popen(sleep)
        try:
            ours, why = port_owner(other.pid, port)
            assert not ours and why == "a socket of uid %d listens on port %d, not the unit's user (uid 65534)" % (
                os.getuid(), port)
            ours, why = port_owner(same.pid, port)
            assert not ours and ("process(es) %d outside the unit" % os.getpid()) in why
        finally:
            for child in (other, same):
                child.kill()
                child.wait()
        ours, why = port_owner(0, port)
        assert not ours and why == "the unit runs no process (no main PID)"
    finally:
        listener.close()
    ours, why = port_owner(os.getpid(), port)
    assert not ours and why == "nothing listens on port %d" % port
