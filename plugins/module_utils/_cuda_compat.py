# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The NVIDIA driver against the CUDA a torch (vLLM) wheel is built for. Pure: no torch import,
no NVML; the CUDA comes from a wheel's METADATA text or its version string, the driver's side
from kvfleet.vllm.gpu_info (driver_version, cuda_driver_version)."""

from __future__ import annotations

import re

__all__ = ["MIN_DRIVER", "MINOR_COMPAT_FLOOR", "VLLM_WHEEL_CUDA", "cuda_from_metadata",
           "cuda_from_version", "judge", "min_driver", "parse_cuda"]

# NVIDIA, CUDA Toolkit Release Notes, Table 3 "CUDA Toolkit and Corresponding Driver Versions":
# the "Toolkit Driver Version, Linux x86_64 >=" column, GA row of each release (an Update of the
# same release may name a slightly newer driver). A driver at least this new runs everything
# built with that toolkit, with no minor-version-compatibility limits.
MIN_DRIVER = {
    (11, 8): "520.61.05",
    (12, 0): "525.60.13",
    (12, 1): "530.30.02",
    (12, 2): "535.54.03",
    (12, 3): "545.23.06",
    (12, 4): "550.54.14",
    (12, 5): "555.42.02",
    (12, 6): "560.28.03",
    (12, 8): "570.26",
    (12, 9): "575.51.03",
    (13, 0): "580.65.06",
}
# Same notes, Table 2 "CUDA Toolkit and Minimum Required Driver Version for CUDA Minor Version
# Compatibility": any toolkit of a major release runs on a driver of that major at least this new
# (minor version compatibility: no PTX JIT of newer code, no newer-driver features). Below it the
# CUDA runtime refuses to start ("driver version is insufficient").
MINOR_COMPAT_FLOOR = {11: "450.80.02", 12: "525.60.13", 13: "580"}

# The CUDA of vLLM's PyPI wheel (x86_64), read from the wheel's METADATA: its torch pin, and that
# torch wheel's CUDA runtime requirement (nvidia-cuda-runtime-cu12 or cuda-toolkit). vLLM 0.32.0
# also states it in vllm/envs.py (VLLM_MAIN_CUDA_VERSION "13.0": the PyPI build carries no +cuXXX
# label). Other builds (download.pytorch.org, wheels.vllm.ai, a wheelhouse) say so in their label.
VLLM_WHEEL_CUDA = {
    "0.11.0": "12.8",   # torch==2.8.0, nvidia-cuda-runtime-cu12==12.8.90
    "0.12.0": "12.8",   # torch==2.9.0, nvidia-cuda-runtime-cu12==12.8.90
    "0.31.0": "13.0",   # torch==2.13.0, cuda-toolkit==13.0.3
    "0.32.0": "13.0",   # torch==2.13.0, cuda-toolkit==13.0.3
    "0.33.0": "13.0",   # torch==2.14.0, cuda-toolkit==13.0.3
    "0.34.0": "13.0",   # torch==2.14.0, cuda-toolkit==13.0.3
}

VERDICTS = ("ok", "warn", "refuse", "unknown")


def parse_cuda(value):
    """'12.4', '12.4.1', 12040 (NVML's integer), 'cu124' -> (12, 4); None for None or ''."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError("a CUDA version must be like 12.8, got %r" % (value,))
    if isinstance(value, int):
        if value < 1000:
            raise ValueError("a CUDA version integer is major*1000 + minor*10 (12040), got %d" % value)
        return value // 1000, (value % 1000) // 10
    text = str(value).strip()
    m = re.match(r"^cu(\d+)(\d)\Z", text)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = re.match(r"^(\d+)\.(\d+)(\.\d+)*\Z", text)
    if not m:
        raise ValueError("a CUDA version must be like 12.8, got %r" % (value,))
    return int(m.group(1)), int(m.group(2))


def _text(cuda):
    return "%d.%d" % cuda


def _driver_tuple(version):
    parts = re.findall(r"\d+", str(version or ""))
    return tuple(int(p) for p in parts)


def min_driver(cuda):
    """The minimum Linux driver for a CUDA release ('12.8' or (12, 8)); None if not in the table."""
    key = parse_cuda(cuda) if not isinstance(cuda, tuple) else cuda
    return MIN_DRIVER.get(key)


def cuda_from_version(version):
    """A torch (or vLLM) version's local label: '2.8.0+cu128' -> {'build': 'cuda', 'cuda': '12.8'};
    '+cpu' -> build 'cpu'; '+rocm6.3' -> build 'rocm'; no label or another one -> build None
    (the label says nothing: PyPI's own torch wheels carry none)."""
    label = str(version or "").partition("+")[2].lower()
    for part in label.split("."):
        if re.match(r"^cu\d{2,}\Z", part):
            return {"build": "cuda", "cuda": _text(parse_cuda(part)), "source": "version label +%s" % label}
        if part == "cpu":
            return {"build": "cpu", "cuda": None, "source": "version label +%s" % label}
        if part.startswith("rocm"):
            return {"build": "rocm", "cuda": None, "source": "version label +%s" % label}
    return {"build": None, "cuda": None, "source": None}


# CUDA runtime requirements of torch wheels: nvidia-cuda-runtime-cu12==12.8.90 (CUDA 12 wheels),
# nvidia-cuda-runtime==13.0.96, or cuda-toolkit[cudart,...]==13.0.3 (CUDA 13 wheels on PyPI).
_RUNTIME_REQ = re.compile(
    r"^(?P<name>nvidia-cuda-runtime(?:-cu\d+)?|cuda-toolkit)\s*(?:\[[^\]]*\])?\s*\(?\s*"
    r"(?:===|==|~=|>=)\s*(?P<version>\d+\.\d+)[^;]*(?:;(?P<marker>.*))?\Z", re.I)


def cuda_from_metadata(text):
    """What a wheel's METADATA (dist-info) says: {'name', 'version', 'build', 'cuda', 'source'}.

    The version's local label decides first (+cu128, +cpu, +rocm); without one, a CUDA runtime
    requirement (Requires-Dist, not one of an extra) gives the CUDA. A wheel with neither (a CPU
    build from PyPI on a platform without CUDA, or a custom build) has build None."""
    name = version = None
    runtime = None
    for line in str(text or "").splitlines():
        if not line.strip():
            break   # the headers end at the first empty line; the description follows
        key, unused, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if key == "name" and name is None:
            name = value
        elif key == "version" and version is None:
            version = value
        elif key == "requires-dist" and runtime is None:
            m = _RUNTIME_REQ.match(value)
            if m and "extra" not in (m.group("marker") or ""):
                runtime = (m.group("version"), value.split(";")[0].strip())
    out = cuda_from_version(version)
    out.update(name=name, version=version)
    if out["build"] is None and runtime:
        out.update(build="cuda", cuda=_text(parse_cuda(runtime[0])), source="Requires-Dist %s" % runtime[1])
    return out


def judge(driver_version, driver_cuda, wheel_cuda, wheel="the vLLM wheel"):
    """The driver against the CUDA a wheel is built for.

    driver_version: '550.54.15'; driver_cuda: the highest CUDA the driver supports (NVML
    nvmlSystemGetCudaDriverVersion: 12040 or '12.4'); wheel_cuda: '12.8'. Returns
    {'verdict', 'message', 'driver_cuda', 'wheel_cuda', 'min_driver', 'floor'}:

    - refuse: the driver's CUDA has a lower major than the wheel's, or the driver is below the
      major release's minor-version-compatibility floor (the CUDA runtime will not start);
    - warn: same major, lower minor: it runs under minor version compatibility (no PTX JIT of
      newer code, newer features missing); a driver of at least min_driver lifts that;
    - ok; unknown: a side is not known (the message says which).
    """
    d_cuda = parse_cuda(driver_cuda)
    w_cuda = parse_cuda(wheel_cuda)
    out = {"driver_cuda": _text(d_cuda) if d_cuda else None, "wheel_cuda": _text(w_cuda) if w_cuda else None,
           "driver_version": driver_version or None, "min_driver": None, "floor": None}
    if w_cuda is None:
        out.update(verdict="unknown", message="the CUDA version %s is built for is not known, so the "
                   "driver (%s) was not checked against it" % (wheel, driver_version or "version unknown"))
        return out
    need = MIN_DRIVER.get(w_cuda)
    floor = MINOR_COMPAT_FLOOR.get(w_cuda[0])
    out.update(min_driver=need, floor=floor)
    need_text = ("driver %s or newer" % need) if need else "a driver of CUDA %s or newer" % _text(w_cuda)
    if d_cuda is None:
        out.update(verdict="unknown", message="NVML did not say which CUDA the driver (%s) supports, so it "
                   "was not checked against CUDA %s of %s (which needs %s)"
                   % (driver_version or "version unknown", _text(w_cuda), wheel, need_text))
        return out
    have = "driver %s supports CUDA %s" % (driver_version or "(version unknown)", _text(d_cuda))
    below_floor = bool(floor and driver_version and _driver_tuple(driver_version) < _driver_tuple(floor))
    if d_cuda[0] < w_cuda[0] or below_floor:
        why = ("below %s, the oldest driver that runs CUDA %d.x at all" % (floor, w_cuda[0])
               if d_cuda[0] >= w_cuda[0] else "an older major release")
        out.update(verdict="refuse", message="the %s, but %s is built for CUDA %s (%s): CUDA will not "
                   "start. Install NVIDIA %s, or a vLLM build for CUDA %d.x (docs/gpu.md)"
                   % (have, wheel, _text(w_cuda), why, need_text, d_cuda[0]))
        return out
    if d_cuda < w_cuda:
        out.update(verdict="warn", message="the %s, older than CUDA %s of %s: it runs under CUDA minor "
                   "version compatibility (no PTX JIT of newer kernels, newer features missing). %s lifts "
                   "that" % (have, _text(w_cuda), wheel, need_text[0].upper() + need_text[1:]))
        return out
    out.update(verdict="ok", message="the %s; %s is built for CUDA %s" % (have, wheel, _text(w_cuda)))
    return out
