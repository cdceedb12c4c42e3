# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Can this host's instances bind their ports, and reach their serving group's head? Changes nothing.

    python3 net_probe.py [--bind ADDRESS PORT]... [--reach HOST PORT]...

Prints one JSON object:
  bind   one entry per --bind: `state` free, in_use (with `owners`, the users whose sockets
         listen there, and `holders`: pid, command and systemd unit of each such process this
         probe may read) or not_local (ADDRESS is not this host's);
  reach  one entry per --reach: `state` connected, refused (the host answered: nothing listens
         there yet, as before a serving group's head starts), timeout, unreachable or unresolved.
The preflight (tasks/preflight.yml) refuses a port a process outside the collection's vLLM units
holds, an address vLLM cannot bind, and a head the worker cannot reach, before anything changes:
vLLM would otherwise fail only after the drain and the restart. Standard library only.
"""

from __future__ import annotations

import errno
import json
import os
import pwd
import re
import socket
import sys

CONNECT_TIMEOUT = 3.0
_TCP_LISTEN = "0A"


def _listening(port, proc="/proc"):
    """{socket inode: owner uid} of the sockets listening on TCP port (IPv4 and IPv6)."""
    inodes = {}
    for table in ("net/tcp", "net/tcp6"):
        try:
            with open(os.path.join(proc, table), encoding="ascii") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _TCP_LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes[fields[9]] = int(fields[7])
    return inodes


def _unit_of(pid, proc="/proc"):
    """The systemd unit whose cgroup holds pid (e.g. vllm-main.service), or None."""
    try:
        with open(os.path.join(proc, str(pid), "cgroup"), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    units = re.findall(r"/([^/\n]+\.(?:service|scope))(?:/|$)", text, re.M)
    return units[-1] if units else None


def owners(port, proc="/proc"):
    """The user names owning the sockets listening on port: known even where another user's
    processes cannot be read (root without CAP_SYS_PTRACE, as in a container)."""
    out = set()
    for uid in _listening(port, proc).values():
        try:
            out.add(pwd.getpwuid(uid).pw_name)
        except KeyError:
            out.add(str(uid))
    return sorted(out)


def holders(port, proc="/proc"):
    """[{pid, command, unit}] of the processes that hold a socket listening on port, as far as
    this process may read them."""
    inodes = _listening(port, proc)
    out = []
    if not inodes:
        return out
    for pid in sorted((p for p in os.listdir(proc) if p.isdigit()), key=int):
        fd_dir = os.path.join(proc, pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue   # gone, or not ours to read
        links = []
        for fd in fds:
            try:
                links.append(os.readlink(os.path.join(fd_dir, fd)))
            except OSError:
                pass   # closed meanwhile (the listing's own descriptor, for one)
        if any(link.startswith("socket:[") and link[8:-1] in inodes for link in links):
            try:
                with open(os.path.join(proc, pid, "comm"), encoding="utf-8") as f:
                    command = f.read().strip()
            except OSError:
                command = "?"
            out.append({"pid": int(pid), "command": command, "unit": _unit_of(pid, proc)})
    return out


def bind_state(address, port):
    """{address, port, state, holders}: can a server bind address:port now?"""
    entry = {"address": address, "port": port, "state": "free", "holders": []}
    try:
        infos = socket.getaddrinfo(address or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        entry.update(state="not_local", detail=str(exc))
        return entry
    family, kind, proto, _name, sockaddr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        # as a server binds: a port in TIME_WAIT only is free
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            entry.update(state="in_use", holders=holders(port), owners=owners(port))
        elif exc.errno == errno.EADDRNOTAVAIL:
            entry.update(state="not_local", detail=os.strerror(exc.errno))
        else:
            entry.update(state="error", detail=str(exc))
    finally:
        sock.close()
    return entry


def reach_state(host, port, timeout=CONNECT_TIMEOUT):
    """{host, port, state}: refused counts as reached (the host answered; nothing listens yet)."""
    entry = {"host": host, "port": port}
    try:
        conn = socket.create_connection((host, port), timeout=timeout)
    except ConnectionRefusedError:
        entry["state"] = "refused"
    except socket.timeout:
        entry.update(state="timeout", detail="no answer in %.0f s" % timeout)
    except socket.gaierror as exc:
        entry.update(state="unresolved", detail=str(exc))
    except OSError as exc:
        entry.update(state="unreachable", detail=os.strerror(exc.errno) if exc.errno else str(exc))
    else:
        conn.close()
        entry["state"] = "connected"
    return entry


def main(argv):
    out, args = {"bind": [], "reach": []}, list(argv)
    while args:
        what = args.pop(0)
        if what not in ("--bind", "--reach") or len(args) < 2 or not args[1].isdigit():
            sys.stderr.write(__doc__)
            return 2
        name, port = args.pop(0), int(args.pop(0))
        if what == "--bind":
            out["bind"].append(bind_state(name, port))
        else:
            out["reach"].append(reach_state(name, port))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
