"""_dp_links: a serving group head's links from its remote engines, read from a /proc laid out
as the one measured on vLLM CPU 0.32.0 (a head with one engine of its own, a headless worker's
engine on another host): the API server and its DP coordinator each hold two links from the
remote engine (the API server's two count), the head's own engine four inside its tree, an HTTP
client on the API port, a torch.distributed link between the engines."""

from __future__ import annotations

import os
import socket
import struct

from ansible_collections.kvfleet.vllm.plugins.module_utils._dp_links import (
    LINKS_PER_ENGINE, engine_links, expected_links, head_links, process_tree, unit_pids)

HEAD, WORKER, CLIENT = "10.88.0.62", "10.88.0.63", "10.88.0.1"
API, RPC = 8000, 13345


def _hex4(ip, port):
    return "%08X:%04X" % (struct.unpack("<I", socket.inet_aton(ip))[0], port)


def _hex6(ip, port):
    packed = socket.inet_pton(socket.AF_INET6, ip)
    return "".join("%08X" % struct.unpack("<I", packed[i:i + 4])[0] for i in range(0, 16, 4)) + ":%04X" % port


class FakeProc(object):
    """A /proc folder: processes (pid, ppid, socket inodes) and the TCP tables."""

    def __init__(self, root):
        self.root = str(root)
        self.tcp, self.tcp6, self.inode = [], [], 1000
        os.makedirs(os.path.join(self.root, "net"))

    def process(self, pid, ppid, comm="python3"):
        folder = os.path.join(self.root, str(pid))
        os.makedirs(os.path.join(folder, "fd"))
        with open(os.path.join(folder, "stat"), "w") as f:
            f.write("%d (%s) S %d 1 1 0 -1\n" % (pid, comm, ppid))
        return pid

    def sock(self, pid, local, remote, state, v6=False):
        self.inode += 1
        fd = len(os.listdir(os.path.join(self.root, str(pid), "fd"))) + 3
        os.symlink("socket:[%d]" % self.inode, os.path.join(self.root, str(pid), "fd", str(fd)))
        row = (_hex6 if v6 else _hex4)
        (self.tcp6 if v6 else self.tcp).append("%4d: %s %s %s 00000000:00000000 00:00000000 00000000 0 0 %d 1"
                                                % (len(self.tcp), row(*local), row(*remote), state, self.inode))

    def write(self):
        header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        for name, rows in (("tcp", self.tcp), ("tcp6", self.tcp6)):
            with open(os.path.join(self.root, "net", name), "w") as f:
                f.write(header + "".join(r + "\n" for r in rows))


def _head(tmp_path, worker_alive=True, rpc_listening=False, worker_v6=False):
    p = FakeProc(tmp_path / "proc")
    api = p.process(500, 1, "python3")
    coord = p.process(510, api, "VLLM::DPCoordinator")
    engine0 = p.process(520, api, "VLLM::EngineCore_DP0")
    p.process(900, 1, "sshd")
    p.sock(api, ("0.0.0.0", API), ("0.0.0.0", 0), "0A")
    p.sock(api, (HEAD, API), (CLIENT, 40000), "01")          # an HTTP client: never an engine
    ports = {"input": 41001, "output": 41002, "coord_pull": 41003, "coord_pub": 41004}
    p.sock(api, (HEAD, ports["input"]), ("0.0.0.0", 0), "0A")
    p.sock(api, (HEAD, ports["output"]), ("0.0.0.0", 0), "0A")
    p.sock(coord, (HEAD, ports["coord_pull"]), ("0.0.0.0", 0), "0A")
    p.sock(coord, (HEAD, ports["coord_pub"]), ("0.0.0.0", 0), "0A")
    if rpc_listening:
        p.sock(api, (HEAD, RPC), ("0.0.0.0", 0), "0A")
    # the head's own engine: four links inside the tree, both ends its own
    for i, (name, port) in enumerate(sorted(ports.items())):
        p.sock(engine0, (HEAD, 50000 + i), (HEAD, port), "01")
        owner = coord if name.startswith("coord") else api
        p.sock(owner, (HEAD, port), (HEAD, 50000 + i), "01")
    if worker_alive:
        for i, (name, port) in enumerate(sorted(ports.items())):
            owner = coord if name.startswith("coord") else api
            if worker_v6:
                p.sock(owner, ("::ffff:" + HEAD, port), ("::ffff:" + WORKER, 60000 + i), "01", v6=True)
            else:
                p.sock(owner, (HEAD, port), (WORKER, 60000 + i), "01")
    if worker_alive:
        # torch.distributed between the engines: into the head's engine, not its API server
        p.sock(engine0, (HEAD, 29500), ("0.0.0.0", 0), "0A")
        p.sock(engine0, (HEAD, 29500), (WORKER, 61000), "01")
    # a connection of another process on one of those ports' numbers: not the head's
    p.sock(900, (HEAD, 22), (CLIENT, 41001), "01")
    p.write()
    return p


def test_a_serving_group_head_holds_two_links_per_remote_engine_in_its_api_server(tmp_path):
    p = _head(tmp_path)
    pids = process_tree(500, p.root)
    assert sorted(pids) == [500, 510, 520]
    links = engine_links(pids, API, RPC, p.root, counted=[500])
    assert links["links"] == expected_links(2, 1) == LINKS_PER_ENGINE == 2
    assert links["by_address"] == {WORKER: 2}
    assert links["rpc_listening"] is False
    assert API in links["listening"]
    # every process of the tree: the coordinator's two and the engines' torch.distributed link too
    assert engine_links(pids, API, RPC, p.root)["by_address"] == {WORKER: 5}


def test_head_links_reads_the_unit_and_counts_its_main_process(tmp_path):
    p = _head(tmp_path)
    group = {"key": "%s:%d" % (HEAD, RPC), "role": "head", "size": 3, "size_local": 1}
    out = head_links(lambda unit: {"MainPID": "500", "ControlGroup": ""}, "vllm-main.service", API, group,
                     p.root, str(tmp_path / "no-cgroup"))["group_links"]
    # three engines, one its own: two remote ones expected, one linked
    assert (out["links"], out["expected"], out["links_per_engine"], out["rpc_listening"]) == (2, 4, 2, False)
    for other in ({"role": "worker", "size": 2, "size_local": 1}, {"role": "head", "size": 2, "size_local": 2},
                  {"role": "head", "size": "2", "size_local": 1}, None, "x"):
        assert head_links(lambda unit: {"MainPID": "500"}, "u", API, other, p.root) == {}
    assert head_links(lambda unit: {"MainPID": "0"}, "u", API, group, p.root) == {}
    assert head_links(lambda unit: {}, "u", API, group, p.root) == {}


def test_a_dead_member_leaves_no_link(tmp_path):
    p = _head(tmp_path, worker_alive=False)
    links = engine_links(process_tree(500, p.root), API, RPC, p.root, counted=[500])
    assert links["links"] == 0 and links["by_address"] == {}


def test_a_head_waiting_for_its_engines_still_listens_on_the_rpc_port(tmp_path):
    p = _head(tmp_path, worker_alive=False, rpc_listening=True)
    assert engine_links(process_tree(500, p.root), API, RPC, p.root)["rpc_listening"] is True


def test_ipv4_peers_of_a_dual_stack_socket_read_as_ipv4(tmp_path):
    p = _head(tmp_path, worker_v6=True)
    links = engine_links(process_tree(500, p.root), API, RPC, p.root, counted=[500])
    assert links["by_address"] == {WORKER: 2}


def test_the_unit_cgroup_wins_over_the_tree_and_a_bad_one_falls_back(tmp_path):
    p = _head(tmp_path)
    cg = tmp_path / "cgroup" / "systemd" / "system.slice" / "vllm-main.service"
    os.makedirs(str(cg))
    # an engine handed to PID 1 when its parent died is still in the unit's cgroup
    (cg / "cgroup.procs").write_text("500\n510\n520\n777\n")
    root = str(tmp_path / "cgroup")
    assert unit_pids(500, "/system.slice/vllm-main.service", p.root, root) == [500, 510, 520, 777]
    for bad in (None, "", "relative/x", "/system.slice/../../etc", "/system.slice/absent.service"):
        assert sorted(unit_pids(500, bad, p.root, root)) == [500, 510, 520]
    assert unit_pids(0, None, p.root, root) == []


def test_garbage_in_proc_is_skipped_not_fatal(tmp_path):
    p = _head(tmp_path)
    with open(os.path.join(p.root, "net", "tcp"), "a") as f:
        f.write("garbage line\n  9: ZZZZ:1 0100007F:1 01 0 0 0 0 0 0 1234\n")
    os.makedirs(os.path.join(p.root, "4242"))   # a process that exited while we read: no stat
    links = engine_links(process_tree(500, p.root), API, RPC, p.root, counted=[500])
    assert links["links"] == 2
    assert process_tree(500, str(tmp_path / "no-proc")) == []
