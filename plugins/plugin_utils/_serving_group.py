# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Serving groups: one model replica served by several hosts with vLLM's own data parallel.

vLLM's multi-node data parallel (vllm/entrypoints/cli/serve.py and vllm/engine/arg_utils.py,
vLLM 0.32.0): the head runs the API server and its local engines with --data-parallel-size (all
engines), --data-parallel-size-local (its own), --data-parallel-address and
--data-parallel-rpc-port (where the others reach it); each other host runs `vllm serve --headless`
with the same four and --data-parallel-start-rank (the rank of its first engine). The head waits
for every engine's handshake before it serves.

Two pure steps, both unit-tested: `plan` turns an inventory group into each member's
`data_parallel` settings; `dp_options` validates one instance's settings and gives the vLLM
options for it. The instance model (_instances.build) uses the second for the units.
"""

from __future__ import annotations

import re

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._vllm_flags import DATA_PARALLEL_SINCE

__all__ = ["GroupError", "RAY_NODE_NAME", "SINCE", "dp_argv", "dp_options", "missing_flags", "plan",
           "ray_node", "ray_plan"]

# The first release whose `vllm serve` takes each flag, for a check before vLLM is installed;
# afterwards the installed vLLM's own flag manifest decides. Read in the wheels: 0.8.5 and
# 0.8.5.post1 have only --data-parallel-size (vllm/engine/arg_utils.py:535); 0.9.0 adds the
# three others to vllm/engine/arg_utils.py (606, 611, 616) and --headless and
# --data-parallel-start-rank to `vllm serve` only (vllm/entrypoints/cli/serve.py:61, 67). A member
# cannot run without one of them (left out, as an unknown flag is, it would serve alone).
SINCE = {
    "--data-parallel-size": DATA_PARALLEL_SINCE,
    "--data-parallel-size-local": (0, 9, 0),
    "--data-parallel-address": (0, 9, 0),
    "--data-parallel-rpc-port": (0, 9, 0),
    "--data-parallel-start-rank": (0, 9, 0),
    "--headless": (0, 9, 0),
    # a Ray group's head; in every release the collection supports (the flag came in 2024, with
    # `ray` among its values: vllm/config/parallel.py, DistributedExecutorBackend, 0.32.0)
    "--distributed-executor-backend": (0, 8, 0),
}
_ADDRESS = re.compile(r"^[A-Za-z0-9.:-]+\Z")
_KEYS = ("size", "size_local", "start_rank", "address", "rpc_port")


class GroupError(ValueError):
    """Bad serving-group settings; the message names the variable and what is allowed."""


def _int(value, where, low, high=None):
    try:
        number = None if isinstance(value, bool) else int(value)
    except (TypeError, ValueError):
        number = None
    if number is None or number < low or (high is not None and number > high):
        allowed = ("from %d to %d" % (low, high)) if high is not None else ("of at least %d" % low)
        raise GroupError("%s must be an integer %s, got %r" % (where, allowed, value))
    return number


def dp_options(dp, where, port):
    """An instance's `data_parallel` settings -> (vLLM options, role) after validation.

    dp: {size, size_local, start_rank, address, rpc_port}. role: "head" (start_rank 0: serves
    the API, waits for the others) or "worker" (headless: no API server, no port)."""
    if not isinstance(dp, dict):
        raise GroupError("%s.data_parallel must be a dictionary with %s" % (where, ", ".join(_KEYS)))
    unknown = sorted(set(dp) - set(_KEYS))
    if unknown:
        raise GroupError("%s.data_parallel: unknown key(s) %s; allowed: %s"
                         % (where, ", ".join(unknown), ", ".join(_KEYS)))
    size = _int(dp.get("size"), where + ".data_parallel.size", 1)
    local = _int(dp.get("size_local", 1), where + ".data_parallel.size_local", 1, size)
    start = _int(dp.get("start_rank", 0), where + ".data_parallel.start_rank", 0, size - local)
    options = {"data_parallel_size": size, "data_parallel_size_local": local}
    if local == size:
        # every engine on this host: local data parallel, nobody to reach it
        return options, "head"
    address = dp.get("address")
    if not isinstance(address, str) or not _ADDRESS.match(address):
        raise GroupError("%s.data_parallel.address must be the head's address (host name or IP, "
                         "no spaces), got %r" % (where, address))
    rpc_port = _int(dp.get("rpc_port"), where + ".data_parallel.rpc_port", 1, 65535)
    if start == 0 and rpc_port == port:
        raise GroupError("%s.data_parallel.rpc_port %d is the instance's API port" % (where, rpc_port))
    options.update(data_parallel_address=address, data_parallel_rpc_port=rpc_port)
    if start == 0:
        return options, "head"
    options.update(data_parallel_start_rank=start, headless=True)
    return options, "worker"


def dp_argv(options):
    """dp_options' options -> vLLM arguments, in a fixed order."""
    argv = []
    for key in ("data_parallel_size", "data_parallel_size_local", "data_parallel_address",
                "data_parallel_rpc_port", "data_parallel_start_rank"):
        if key in options:
            argv += ["--" + key.replace("_", "-"), str(options[key])]
    if options.get("headless"):
        argv.append("--headless")
    return argv


def group_record(options, role):
    """What the deployment record keeps of a serving group's member (dp_options' options of a
    head or worker across hosts), for the restart guard and kvfleet.vllm.rolling_restart, which
    restart a group as one unit. key: the group (head address and RPC port); size: its engines;
    size_local: this member's."""
    return {"key": "%s:%d" % (options["data_parallel_address"], options["data_parallel_rpc_port"]),
            "role": role, "size": options["data_parallel_size"],
            "size_local": options["data_parallel_size_local"]}


def missing_flags(argv, version, manifest_flags=None):
    """The data parallel flags in argv that this vLLM does not take: per its manifest when there
    is one (its own parser), else per SINCE. version: a parsed (major, minor, patch) tuple."""
    wanted = [a for a in argv if a in SINCE]
    if manifest_flags is not None:
        return [f for f in wanted if f not in manifest_flags]
    return [f for f in wanted if tuple(version[:3]) < SINCE[f]]


def _loopback(address):
    return address in ("localhost", "::1") or address.startswith("127.")


def _check_members(group, members, me, prefix, one_host):
    """The group's hosts, after the checks every backend makes (one_host: what to do instead of
    a one-host group)."""
    if not members:
        raise GroupError("%sserving_group %r is not an inventory group with hosts" % (prefix, group))
    hosts = [m["host"] for m in members]
    if me not in hosts:
        raise GroupError("%sserving_group %r: this host (%s) is not in that inventory group"
                         % (prefix, group, me))
    if len(set(hosts)) != len(hosts):
        raise GroupError("%sserving_group %r lists a host twice" % (prefix, group))
    if len(members) == 1:
        raise GroupError("%sserving_group %r has one host (%s): a group spans hosts; %s"
                         % (prefix, group, hosts[0], one_host))
    return hosts


def plan(group, members, me, prefix="vllm_server_"):
    """An inventory group -> this member's `data_parallel` settings.

    members: the group's hosts in inventory order, each {host, engines, address, rpc_port};
    the first is the head. Ranks follow that order: a host's start rank is the engines of the
    hosts before it. The head's address and rpc_port are the group's."""
    _check_members(group, members, me, prefix, "for data parallel on one host set data_parallel on the instance")
    head = members[0]
    address = head.get("address")
    if not isinstance(address, str) or not _ADDRESS.match(address):
        raise GroupError("%sserving_group_address of the head %s must be a host name or IP that "
                         "the other members reach, got %r" % (prefix, head["host"], address))
    if _loopback(address):
        raise GroupError("%sserving_group_address of the head %s is %s: the other hosts of %r "
                         "cannot reach a loopback address" % (prefix, head["host"], address, group))
    rpc_port = _int(head.get("rpc_port"), "%sserving_group_rpc_port of %s" % (prefix, head["host"]),
                    1, 65535)
    size, mine = 0, None
    for member in members:
        engines = _int(member.get("engines", 1), "%sserving_group_engines of %s"
                       % (prefix, member["host"]), 1)
        if member["host"] == me:
            mine = (size, engines)
        size += engines
    return {"size": size, "size_local": mine[1], "start_rank": mine[0],
            "address": address, "rpc_port": rpc_port}


# The unit of a host's Ray node (vllm-ray.service) beside the head's vLLM instance; a worker
# host's Ray node takes its one instance's name (its unit replaces what ran there before).
RAY_NODE_NAME = "ray"
_RAY_ROLES = ("head", "worker")


def ray_plan(group, members, me, port, prefix="vllm_server_"):
    """An inventory group served over Ray -> this member's Ray settings.

    members: the group's hosts in inventory order, each {host, gpus, address}; the first is the
    head: it starts the Ray cluster (`ray start --head`, its GCS on `port`) and runs `vllm serve`
    with the Ray executor, whose tensor and pipeline parallel workers Ray places on every node's
    GPUs. Returns {role, address (the head's), port, node_address (this host's), gpus (this
    host's), world (all members' GPUs)}."""
    hosts = _check_members(group, members, me, prefix,
                           "for tensor or pipeline parallel on one host set the sizes alone")
    for member in members:
        address = member.get("address")
        if not isinstance(address, str) or not _ADDRESS.match(address):
            raise GroupError("%sserving_group_address of %s must be a host name or IP that the other "
                             "members reach, got %r" % (prefix, member["host"], address))
        if _loopback(address):
            raise GroupError("%sserving_group_address of %s is %s: the other hosts of %r cannot "
                             "reach a loopback address" % (prefix, member["host"], address, group))
    port = _int(port, "%sray_port" % prefix, 1, 65535)
    gpus = [_int(m.get("gpus", 1), "%sserving_group_gpus of %s" % (prefix, m["host"]), 1, 1024)
            for m in members]
    mine = hosts.index(me)
    return {"role": "head" if mine == 0 else "worker", "address": members[0]["address"], "port": port,
            "node_address": members[mine]["address"], "gpus": gpus[mine], "world": sum(gpus)}


def ray_node(ray, where, temp_dir, extra_args=None):
    """A member's Ray settings (ray_plan's) -> (the `ray start` arguments after the program,
    the deployment record's group). Validates what a hand-written `ray` entry could hold."""
    if not isinstance(ray, dict) or ray.get("role") not in _RAY_ROLES:
        raise GroupError("%s.ray must be a dictionary with role (%s), address, port, node_address, gpus, "
                         "world" % (where, " or ".join(_RAY_ROLES)))
    for key in ("address", "node_address"):
        if not isinstance(ray.get(key), str) or not _ADDRESS.match(ray[key]):
            raise GroupError("%s.ray.%s must be a host name or IP, got %r" % (where, key, ray.get(key)))
    port = _int(ray.get("port"), where + ".ray.port", 1, 65535)
    gpus = _int(ray.get("gpus"), where + ".ray.gpus", 1, 1024)
    world = _int(ray.get("world"), where + ".ray.world", gpus)
    extra = [str(a) for a in (extra_args or [])]
    argv = ["start", "--block", "--node-ip-address", ray["node_address"], "--num-gpus", str(gpus),
            "--temp-dir", temp_dir]
    if ray["role"] == "head":
        # the dashboard would listen on every interface: off; usage reports: off
        argv = ["start", "--head", "--block", "--port", str(port), "--node-ip-address", ray["node_address"],
                "--num-gpus", str(gpus), "--include-dashboard=false", "--disable-usage-stats",
                "--temp-dir", temp_dir]
    else:
        argv += ["--address", "%s:%d" % (ray["address"], port)]
    record = {"key": "%s:%d" % (ray["address"], port), "role": "worker", "backend": "ray",
              "size": world, "size_local": gpus}
    return argv + extra, record


def restarting_groups(hosts):
    """The keys of the serving groups that restart in a batch: a group with one instance that
    restarts (or starts) on any host of the batch. hosts: for each host of the batch that has
    planned its restart, {instances: the server role's instance model, restart: [names],
    started: [names]}."""
    keys = []
    for host in hosts:
        moving = set(host.get("restart") or []) | set(host.get("started") or [])
        for inst in host.get("instances") or []:
            group = (inst.get("record") or {}).get("group")
            if group and inst.get("name") in moving and group["key"] not in keys:
                keys.append(group["key"])
    return keys
