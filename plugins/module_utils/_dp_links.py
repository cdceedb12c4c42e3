# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether every remote engine of a serving group's head is still connected, read from /proc.

vLLM shows nothing of a lost data parallel member over HTTP: the head keeps answering /health,
its /metrics keep the dead engine's series (frozen), and requests routed to it hang
(docs/serving-groups.md). The TCP links do show it. Once the group serves, each remote engine
holds two established connections into the head's API server process, input (DEALER to its
ROUTER) and output (PUSH to its PULL), and, from 0.9.1 on, two more into its DP coordinator
(vLLM 0.32.0: vllm/v1/engine/core.py:1848, 1858, 1952, 1958 connect to the sockets that
vllm/v1/engine/core_client.py:659-668 and vllm/v1/engine/coordinator.py:98-100 bind, on ports
chosen at each start; the same two into the API server in every release from 0.9.0 to 0.33.0,
read in their wheels). The head's unit runs one API server (the api_server module), which is
what makes it two. There is no heartbeat or keepalive on them, and a dead engine's links close
within seconds (measured on vLLM CPU 0.32.0).

So on the head's host: the ESTABLISHED sockets of the API server process (the unit's main
process) whose local port is one it listens on, other than the HTTP port, and whose other end is
not one of the head's own processes (its local engines connect the same way) are links from
remote engines; fewer than LINKS_PER_ENGINE x (size - size_local) means an engine is gone. The
engines' own processes are not counted: torch.distributed links between engines (dense models
before 0.14, MoE models) would inflate the count. A member that lost its power or network may
leave its links standing (nothing times them out): the per-engine warm-up (kvfleet-vllm warmup
--engines) catches that one.

Pure reading of /proc (the `proc` argument is a folder laid out as /proc, for the tests);
standard library only: modules and the host program (kvfleet-vllm) run the same code.
"""

from __future__ import annotations

import os
import socket
import struct

__all__ = ["LINKS_PER_ENGINE", "engine_links", "expected_links", "head_links", "process_tree", "unit_pids"]

# TCP connections a remote engine holds into the head's API server process while the group
# serves (see above)
LINKS_PER_ENGINE = 2
_ESTABLISHED, _LISTEN = "01", "0A"
MAX_PIDS = 4096


def process_tree(main_pid, proc="/proc"):
    """main_pid and its descendants (by each /proc/<pid>/stat's parent), at most MAX_PIDS."""
    children = {}
    try:
        names = os.listdir(proc)
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc, name, "stat")) as f:
                # "pid (comm) state ppid ...": comm may hold spaces and parentheses
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue   # exited while we read
        children.setdefault(ppid, []).append(int(name))
    pids, todo = [], [main_pid]
    while todo and len(pids) < MAX_PIDS:
        pid = todo.pop()
        pids.append(pid)
        todo.extend(children.get(pid, []))
    return pids


def unit_pids(main_pid, control_group=None, proc="/proc", cgroup_root="/sys/fs/cgroup"):
    """The unit's processes: its cgroup's (systemd's ControlGroup, on the unified or the named
    systemd hierarchy), else main_pid's tree. The cgroup also holds a process whose parent died
    and that was handed to PID 1, which the tree walk loses."""
    if control_group and control_group.startswith("/") and ".." not in control_group:
        for base in (cgroup_root, os.path.join(cgroup_root, "unified"), os.path.join(cgroup_root, "systemd")):
            try:
                with open(os.path.join(base + control_group, "cgroup.procs")) as f:
                    pids = [int(line) for line in f.read().split() if line.isdigit()]
            except (OSError, ValueError):
                continue
            if pids:
                return pids[:MAX_PIDS]
    return process_tree(main_pid, proc) if main_pid and main_pid > 0 else []


def _endpoint(text):
    """/proc/net/tcp's "0100007F:1F90" (or tcp6's 32 hex digits) -> ("127.0.0.1", 8080)."""
    address, port = text.split(":")
    if len(address) == 8:
        ip = socket.inet_ntop(socket.AF_INET, struct.pack("<I", int(address, 16)))
    elif len(address) == 32:
        ip = socket.inet_ntop(socket.AF_INET6, b"".join(
            struct.pack("<I", int(address[i:i + 8], 16)) for i in range(0, 32, 8)))
        if ip.startswith("::ffff:") and "." in ip:
            ip = ip[7:]   # an IPv4 peer on a dual-stack socket
    else:
        raise ValueError("not an address: %r" % text)
    return ip, int(port, 16)


def _tcp_table(proc):
    """{socket inode: (local, remote, state)} of this network namespace's TCP sockets."""
    table = {}
    for name in ("tcp", "tcp6"):
        try:
            with open(os.path.join(proc, "net", name)) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            try:
                table[parts[9]] = (_endpoint(parts[1]), _endpoint(parts[2]), parts[3].upper())
            except (IndexError, ValueError):
                continue
    return table


def _socket_inodes(pid, proc):
    found = set()
    folder = os.path.join(proc, str(pid), "fd")
    try:
        names = os.listdir(folder)
    except OSError:
        return found
    for name in names:
        try:
            link = os.readlink(os.path.join(folder, name))
        except OSError:
            continue
        if link.startswith("socket:[") and link.endswith("]"):
            found.add(link[8:-1])
    return found


def engine_links(pids, api_port, rpc_port=None, proc="/proc", counted=None):
    """{'links': remote engine links in all, 'by_address': {peer address: links},
    'rpc_listening': whether the counted process still listens on the RPC port (before 0.9.1
    it always does; later, only until the group has formed), 'listening': the ports it listens
    on}. pids: the head's processes, whose endpoints are its own; counted: the ones whose links
    count (the API server; default all of pids). The API port's connections are HTTP clients (a
    scrape, a request, a router), never engines."""
    table = _tcp_table(proc)
    own, mine = set(), []
    counted = set(pids if counted is None else counted)
    for pid in pids:
        for inode in _socket_inodes(pid, proc):
            if inode in table:
                own.add(table[inode][0])
                if pid in counted:
                    mine.append(table[inode])
    listening = set(local[1] for local, unused, state in mine if state == _LISTEN)
    by_address = {}
    for local, remote, state in mine:
        if state == _ESTABLISHED and local[1] in listening and local[1] != api_port and remote not in own:
            by_address[remote[0]] = by_address.get(remote[0], 0) + 1
    return {"links": sum(by_address.values()), "by_address": by_address,
            "rpc_listening": rpc_port in listening if rpc_port else None,
            "listening": sorted(listening)}


def expected_links(size, size_local):
    """Links a head whose group has `size` engines, `size_local` of them its own, must hold."""
    return LINKS_PER_ENGINE * max(0, int(size) - int(size_local))


def _rpc_port(group):
    port = str(group.get("key") or "").rpartition(":")[2]
    return int(port) if port.isdigit() else None


def head_links(show, unit, api_port, group, proc="/proc", cgroup_root="/sys/fs/cgroup"):
    """{'group_links': engine_links plus 'expected' and 'links_per_engine'} for a serving group's
    head (group: its deployment record's {key, role, size, size_local}) whose engines are not
    all its own; {} for any other instance, or a head that does not run (its outage is what the
    gate reads then). show(unit) -> systemd's MainPID and ControlGroup of the unit."""
    # a Ray group's head (backend ray) has no data parallel engines to link
    if not isinstance(group, dict) or group.get("role") != "head" or group.get("backend", "dp") != "dp":
        return {}
    size, local = group.get("size"), group.get("size_local")
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in (size, local)) or size <= local:
        return {}
    state = show(unit) or {}
    try:
        pid = int(state.get("MainPID") or 0)
    except ValueError:
        pid = 0
    if pid <= 0:
        return {}
    links = engine_links(unit_pids(pid, state.get("ControlGroup"), proc, cgroup_root), api_port,
                         _rpc_port(group), proc, counted=[pid])
    links.update(expected=expected_links(size, local), links_per_engine=LINKS_PER_ENGINE)
    return {"group_links": links}
