from __future__ import annotations

from ansible_collections.kvfleet.vllm.plugins.modules import gpu_info
from ansible_collections.kvfleet.vllm.tests.unit.plugins.fake_nvml import (
    FakeNvml, NVMLError_DriverNotLoaded)


def test_reports_gpus(run_module, monkeypatch):
    monkeypatch.setattr(gpu_info, "pynvml", FakeNvml())
    failed, result = run_module(gpu_info, {})
    assert not failed and len(result["gpus"]) == 2
    assert result["gpus"][0]["compute_capability"] == "9.0"


def test_no_driver_fails_or_reports(run_module, monkeypatch):
    monkeypatch.setattr(gpu_info, "pynvml", FakeNvml(init_error=NVMLError_DriverNotLoaded()))
    failed, result = run_module(gpu_info, {})
    assert failed and "NVIDIA driver" in result["msg"]
    failed, result = run_module(gpu_info, {"gpus_required": False})
    assert not failed and result["gpus"] == [] and "Driver Not Loaded" in result["nvml_error"]


def test_no_gpu(run_module, monkeypatch):
    monkeypatch.setattr(gpu_info, "pynvml", FakeNvml(gpus=[]))
    failed, result = run_module(gpu_info, {})
    assert failed and "finds no GPU" in result["msg"]


def test_library_missing(run_module, monkeypatch):
    monkeypatch.setattr(gpu_info, "pynvml", None)
    failed, result = run_module(gpu_info, {})
    assert failed and "nvidia-ml-py" in result["msg"]
    failed, result = run_module(gpu_info, {"gpus_required": False})
    assert not failed and "nvidia-ml-py" in result["nvml_error"]
