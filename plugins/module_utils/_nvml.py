# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU facts through NVML. The pynvml module is passed in, so tests use a fake."""

from __future__ import annotations

__all__ = ["NvmlUnavailable", "collect", "headroom", "process_memory"]


class NvmlUnavailable(Exception):
    """NVML could not be initialised (no driver, no library); the message says which."""


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _optional(nvml, func, *args):
    """Fields some GPUs or drivers do not support become None rather than failing."""
    try:
        return func(*args)
    except nvml.NVMLError:
        return None


def _cuda_version(nvml):
    getter = getattr(nvml, "nvmlSystemGetCudaDriverVersion_v2", None) or \
        nvml.nvmlSystemGetCudaDriverVersion
    raw = _optional(nvml, getter)
    if not raw:
        return None
    return "%d.%d" % (raw // 1000, (raw % 1000) // 10)


def _processes(nvml, handle):
    seen = {}
    for kind, getter in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                         ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
        func = getattr(nvml, getter, None)
        for proc in (_optional(nvml, func, handle) if func else None) or []:
            used = getattr(proc, "usedGpuMemory", None)
            entry = seen.setdefault(proc.pid, {"pid": proc.pid, "used_memory": used, "types": []})
            entry["types"].append(kind)
    return sorted(seen.values(), key=lambda p: p["pid"])


def _gpu(nvml, index):
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    mem = nvml.nvmlDeviceGetMemoryInfo(handle)
    util = _optional(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
    cc = _optional(nvml, nvml.nvmlDeviceGetCudaComputeCapability, handle)
    persistence = _optional(nvml, nvml.nvmlDeviceGetPersistenceMode, handle)
    return {
        "index": index,
        "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
        "name": _text(nvml.nvmlDeviceGetName(handle)),
        "memory_total": int(mem.total),
        "memory_used": int(mem.used),
        "memory_free": int(mem.free),
        "utilization_gpu": util.gpu if util is not None else None,
        "utilization_memory": util.memory if util is not None else None,
        "compute_capability": "%d.%d" % tuple(cc) if cc else None,
        "persistence_mode": (persistence == nvml.NVML_FEATURE_ENABLED
                             if persistence is not None else None),
        "processes": _processes(nvml, handle),
    }


def collect(nvml):
    """-> {'driver_version', 'cuda_driver_version', 'nvml_version', 'gpus': [...]}."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NvmlUnavailable("NVML could not be initialised (%s): is the NVIDIA driver "
                              "installed and loaded on this host?" % _text(str(exc)))
    try:
        count = nvml.nvmlDeviceGetCount()
        return {
            "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
            "cuda_driver_version": _cuda_version(nvml),
            "nvml_version": _text(_optional(nvml, nvml.nvmlSystemGetNVMLVersion)),
            "gpus": [_gpu(nvml, i) for i in range(count)],
        }
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


def process_memory(nvml, pids):
    """GPU memory held by these processes (a vLLM unit's main process and its engine cores),
    summed over every GPU: {'gpu_bytes', 'gpus' (how many GPUs they are on)}, or None when NVML
    cannot say: no driver, or none of the processes listed with a size (NVML inside a container
    lists processes of its own PID namespace only)."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return None
    try:
        wanted, total, gpus, sized = set(int(p) for p in pids), 0, 0, False
        for index in range(nvml.nvmlDeviceGetCount()):
            mine = [p for p in _processes(nvml, nvml.nvmlDeviceGetHandleByIndex(index)) if p["pid"] in wanted]
            gpus += 1 if mine else 0
            for proc in mine:
                if isinstance(proc["used_memory"], int):
                    total += proc["used_memory"]
                    sized = True
        return {"gpu_bytes": total, "gpus": gpus} if sized else None
    except nvml.NVMLError:
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


def _gpu_indexes(visible, gpus):
    """CUDA_VISIBLE_DEVICES ('0,1', UUIDs, or empty for all) -> NVML indexes; unknown ids raise."""
    if visible is None or str(visible).strip() == "":
        return [g["index"] for g in gpus]
    by_uuid = {g["uuid"]: g["index"] for g in gpus}
    known = {g["index"] for g in gpus}
    out = []
    for part in str(visible).split(","):
        part = part.strip()
        if part.isdigit() and int(part) in known:
            out.append(int(part))
        elif part in by_uuid:
            out.append(by_uuid[part])
        else:
            raise ValueError("cuda_visible_devices %r names GPU %r, which is not on this host "
                             "(GPUs: %s)" % (visible, part, ", ".join(
                                 str(i) for i in sorted(known)) or "none"))
    return out


def headroom(facts, instances, own_pids=()):
    """Problems that would stop vLLM from starting, as sentences; [] when every GPU has room.

    vLLM takes gpu_memory_utilization of a GPU's *total* memory and refuses to start when less
    is free. Memory held by this host's own vLLM units (own_pids) is counted as free, because
    a deploy restarts them; memory held by anything else is not. Instances sharing a GPU add up.
    instances: [{'name', 'cuda_visible_devices', 'gpu_memory_utilization', 'gpus_needed'}];
    gpus_needed: {'count', 'why'} (kvfleet.vllm.vllm_instances), one GPU when absent.
    """
    gpus = facts.get("gpus") or []
    own = {int(p) for p in own_pids}
    demand = {}
    problems = []
    for inst in instances:
        try:
            indexes = _gpu_indexes(inst.get("cuda_visible_devices"), gpus)
        except ValueError as exc:
            problems.append("instance %s: %s." % (inst["name"], exc))
            continue
        # each engine takes tensor x pipeline parallel GPUs, from the visible ones in order;
        # vLLM fails at start-up (after the old server stopped) when fewer are visible
        need = inst.get("gpus_needed") or {}
        if isinstance(need, dict) and isinstance(need.get("count"), int) and need["count"] > len(indexes):
            problems.append("instance %s needs %d GPUs (%s) but sees %d (cuda_visible_devices %s)."
                            % (inst["name"], need["count"], need.get("why", "?"), len(indexes),
                               repr(inst.get("cuda_visible_devices")) if inst.get("cuda_visible_devices")
                               else "empty: every GPU of the host"))
            continue
        share = float(inst.get("gpu_memory_utilization") or 0)
        for index in indexes:
            demand.setdefault(index, []).append((inst["name"], share))
    for gpu in gpus:
        wanted = demand.get(gpu["index"])
        if not wanted:
            continue
        share = sum(w[1] for w in wanted)
        names = ", ".join("%s (%.2f)" % w for w in wanted)
        if share > 1.0 + 1e-9:
            problems.append("GPU %d (%s): instances %s ask for %.2f of its memory in all; the "
                            "shares of instances on one GPU must add up to 1.0 or less."
                            % (gpu["index"], gpu["name"], names, share))
            continue
        if own and not gpu["processes"] and gpu["memory_used"]:
            # NVML lists no processes (pid namespaces, some VMs): what is used may be our own
            # running vLLM, so free memory proves nothing; only the sum above is checked.
            continue
        held_by_us = sum(p["used_memory"] or 0 for p in gpu["processes"] if p["pid"] in own)
        available = gpu["memory_free"] + held_by_us
        needed = int(share * gpu["memory_total"])
        if available < needed:
            others = ["pid %d (%.1f GiB)" % (p["pid"], (p["used_memory"] or 0) / 2.0 ** 30)
                      for p in gpu["processes"] if p["pid"] not in own]
            problems.append(
                "GPU %d (%s): %s need %.1f GiB (gpu_memory_utilization %.2f of %.1f GiB) but "
                "only %.1f GiB is free%s. Stop what holds it or lower gpu_memory_utilization."
                % (gpu["index"], gpu["name"], names, needed / 2.0 ** 30, share,
                   gpu["memory_total"] / 2.0 ** 30, available / 2.0 ** 30,
                   "; held by other processes: " + ", ".join(others) if others else ""))
    return problems
