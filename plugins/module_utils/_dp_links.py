# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether every remote engine of a serving group's head is still connected, read from /proc.

vLLM shows nothing of a lost data parallel member over HTTP: the head keeps answering /health,
its /metrics keep the dead engine's series (frozen), and requests routed to it hang
(docs/serving-groups.md). The TCP links do show it. Once the group serves, each remote engine
holds four established connections into the head: input and output into the API server, two
into its DP coordinator, on ports the head binds at each start (vLLM 0.32.0:
vllm/v1/engine/core.py:1848, 1858, 1952, 1958 connect to the sockets that
vllm/v1/engine/core_client.py:659-668 and vllm/v1/engine/coordinator.py:98-100 bind). The head's
unit runs one API server (the api_server module), which makes it four in every release from
0.9.1 to 0.33.0 and two in 0.9.0, which had no coordinator (read in their wheels). There is no
heartbeat or keepalive on them, and a dead engine's links close within seconds (measured on vLLM
CPU 0.32.0).

What is counted needs no privilege, so that the unprivileged monitor and root in a container
(without CAP_SYS_PTRACE a process's sockets in /proc/<pid>/fd cannot be read) see the same:
/proc/net/tcp and tcp6 (every socket of the host's network namespace, with its owner's uid) and
/proc/<pid>/status (the head's uid). The ESTABLISHED sockets of the head's user whose local port
is one that user listens on, other than the HTTP port (its clients are no engines), and whose
peer is on another host (the head's own engines and a local worker's connect from this host's
addresses) are links from remote engines. Fewer than links_per_engine(version) x the remote
engines means an engine is gone. A member that lost its power or network may leave its links
standing (nothing times them out): the per-engine warm-up (kvfleet-vllm warmup --engines)
catches that one. The engines' torch.distributed links (dense models before 0.14, MoE models)
can add to the count and hide a partial loss, never make one up.

Pure reading of /proc (the `proc` argument is a folder laid out as /proc, for the tests);
standard library only: modules and the host program (kvfleet-vllm) run the same code.
"""

from __future__ import annotations

import os
import socket
import struct

from ansible_collections.kvfleet.vllm.plugins.module_utils._version import release

__all__ = ["MAX_PIDS", "engine_links", "head_links", "links_per_engine", "local_engines", "port_owner",
           "process_tree"]

_ESTABLISHED, _LISTEN = "01", "0A"
MAX_PIDS = 4096


def links_per_engine(version=None):
    """TCP connections a remote engine holds into the head while the group serves: 2 in vLLM
    0.9.0 (input and output only), 4 from 0.9.1 on, 4 when the version is unknown."""
    parts = release(version)
    return 2 if parts is not None and len(parts) >= 3 and parts[:3] < (0, 9, 1) else 4


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


def _tcp_rows(proc, inodes=False):
    """(local, remote, state, uid) of this network namespace's TCP sockets (world-readable);
    with inodes, each row with the socket's inode last."""
    rows = []
    for name in ("tcp", "tcp6"):
        try:
            with open(os.path.join(proc, "net", name)) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            try:
                row = (_endpoint(parts[1]), _endpoint(parts[2]), parts[3].upper(), int(parts[7]))
                rows.append(row + (parts[9],) if inodes else row)
            except (IndexError, ValueError):
                continue
    return rows


def _listening_inodes(port, proc):
    """The inodes of this network namespace's TCP sockets that listen on `port` (any address)."""
    return set(row[4] for row in _tcp_rows(proc, inodes=True) if row[2] == _LISTEN and row[0][1] == port)


def port_owner(main_pid, port, proc="/proc"):
    """(True, None) when what listens on TCP `port` is the unit's own server; else (False, why).
    Before a secret goes to a port, so that a process that bound it between a stop and the
    server's own bind gets nothing.

    Every socket listening on the port must belong to the user the unit's main process runs as
    (/proc/net/tcp's uid column, world-readable, read the same in a container without
    CAP_SYS_PTRACE); where this process can read the others' descriptors (root with ptrace
    rights), the processes holding those sockets must moreover be main_pid or its descendants."""
    rows = [row for row in _tcp_rows(proc, inodes=True) if row[2] == _LISTEN and row[0][1] == port]
    if not rows:
        return False, "nothing listens on port %d" % port
    if not main_pid or main_pid <= 0:
        return False, "the unit runs no process (no main PID)"
    uid = _uid(main_pid, proc)
    if uid is None:
        return False, "the unit's main process %s is gone" % main_pid
    others = sorted(set(row[3] for row in rows if row[3] != uid))
    if others:
        return False, "a socket of uid %s listens on port %d, not the unit's user (uid %d)" % (
            ", ".join(str(o) for o in others), port, uid)
    wanted = set("socket:[%s]" % row[4] for row in rows)
    ours = set(process_tree(main_pid, proc))
    strangers = []
    try:
        names = os.listdir(proc)
    except OSError:
        names = []
    for name in names:
        if not name.isdigit() or int(name) in ours:
            continue
        folder = os.path.join(proc, name, "fd")
        try:
            fds = os.listdir(folder)
        except OSError:
            continue   # gone, or not ours to read: the uid above decided for it
        for fd in fds:
            try:
                if os.readlink(os.path.join(folder, fd)) in wanted:
                    strangers.append(int(name))
                    break
            except OSError:
                continue
    if strangers:
        return False, "process(es) %s outside the unit (main PID %s) listen on port %d" % (
            ", ".join(str(p) for p in sorted(strangers)[:5]), main_pid, port)
    return True, None


def _uid(pid, proc):
    """The real uid of a process (/proc/<pid>/status is world-readable), None if gone."""
    try:
        with open(os.path.join(proc, str(pid), "status")) as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def engine_links(uid, api_port, rpc_port=None, proc="/proc", own=None, ports=None):
    """{'links': links from engines on other hosts in all, 'by_address': {peer address: links},
    'rpc_listening': whether the user still listens on the RPC port (the group has not formed;
    in 0.9.0 always), 'listening': the ports counted} for the head whose processes run as
    `uid` (see the module's docstring for what counts). own: the addresses whose peers are not
    counted (default: every local address of the namespace's sockets, this host's). ports: the
    listening ports to count, when the caller knows them (default: every one of `uid`)."""
    rows = _tcp_rows(proc)
    if own is None:
        own = set(local[0] for local, unused, unused2, unused3 in rows)
    listening = set(local[1] for local, unused, state, owner in rows if state == _LISTEN and owner == uid)
    counted = (listening if ports is None else listening & set(ports)) - set([api_port])
    by_address = {}
    for local, remote, state, owner in rows:
        if state == _ESTABLISHED and owner == uid and local[1] in counted and remote[0] not in own:
            by_address[remote[0]] = by_address.get(remote[0], 0) + 1
    return {"links": sum(by_address.values()), "by_address": by_address,
            "rpc_listening": rpc_port in listening if rpc_port else None, "listening": sorted(counted)}


def local_engines(record, group):
    """A serving group's engines on this host, from its deployment record: the head's own
    (group's size_local) and those of the headless workers the record lists with the same key.
    None when a count is not an integer (a hand-edited record)."""
    total = group.get("size_local") if isinstance(group, dict) else None
    current = record.get("current") if isinstance(record, dict) else None
    workers = current.get("workers") if isinstance(current, dict) else None
    for worker in workers if isinstance(workers, list) else []:
        mate = worker.get("group") if isinstance(worker, dict) else None
        if isinstance(mate, dict) and mate.get("key") == group.get("key"):
            if not isinstance(mate.get("size_local"), int) or isinstance(mate.get("size_local"), bool):
                return None
            total = (total or 0) + mate["size_local"]
    return total if isinstance(total, int) and not isinstance(total, bool) else None


def _rpc_port(group):
    port = str(group.get("key") or "").rpartition(":")[2]
    return int(port) if port.isdigit() else None


def head_links(show, unit, api_port, group, local_engines=None, proc="/proc"):
    """{'group_links': engine_links plus 'remote_engines'} for a data parallel serving group's
    head (group: its deployment record's {key, role, size, size_local}) with engines on other
    hosts; {} for any other instance, or a head that does not run (its outage is what the gate
    reads then). local_engines: the group's engines on this host (the head's and any local
    worker's; default the head's size_local). show(unit) -> systemd's MainPID of the unit. The
    diagnosis weighs the links against links_per_engine(the server's version)."""
    # a Ray group's head (backend ray) has no data parallel engines to link
    if not isinstance(group, dict) or group.get("role") != "head" or group.get("backend", "dp") != "dp":
        return {}
    size = group.get("size")
    local = group.get("size_local") if local_engines is None else local_engines
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in (size, local)) or size <= local:
        return {}
    state = show(unit) or {}
    try:
        pid = int(state.get("MainPID") or 0)
    except ValueError:
        pid = 0
    uid = _uid(pid, proc) if pid > 0 else None
    if uid is None:
        return {}
    links = engine_links(uid, api_port, _rpc_port(group), proc)
    links["remote_engines"] = size - local
    return {"group_links": links}
