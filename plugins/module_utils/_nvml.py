# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU facts through NVML. The pynvml module is passed in, so tests use a fake."""

from __future__ import annotations

__all__ = ["NvmlUnavailable", "collect"]


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
