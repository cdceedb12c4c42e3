from __future__ import annotations

from ansible_collections.kvfleet.vllm.plugins.modules import gpu_info
from ansible_collections.kvfleet.vllm.tests.unit.plugins.fake_nvml import (
    FakeNvml, NVMLError_DriverNotLoaded, NVMLError_NotSupported, healthy_gpu)


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


# ---- health


def test_existing_return_values_are_unchanged_and_health_is_added(run_module, monkeypatch):
    monkeypatch.setattr(gpu_info, "pynvml", FakeNvml())
    failed, result = run_module(gpu_info, {})
    assert not failed
    assert set(result) >= {"changed", "driver_version", "cuda_driver_version", "nvml_version", "gpus"}
    h100 = result["gpus"][0]
    assert dict((k, v) for k, v in h100.items() if k != "health") == {
        "index": 0, "uuid": "GPU-aaaa", "name": "NVIDIA H100 80GB HBM3",
        "memory_total": 85899345920, "memory_used": 5899345920, "memory_free": 80000000000,
        "utilization_gpu": 37, "utilization_memory": 12, "compute_capability": "9.0",
        "persistence_mode": True,
        "processes": [{"pid": 7, "used_memory": None, "types": ["graphics"]},
                      {"pid": 4242, "used_memory": 5000000000, "types": ["compute", "graphics"]}]}
    # this fake supports no health call: verdict null, not a failure
    assert h100["health"]["verdict"] is None and h100["health"]["reasons"] == []


def test_health_of_a_healthy_and_an_unhealthy_gpu(run_module, monkeypatch):
    nvml = FakeNvml(gpus=[healthy_gpu(), healthy_gpu(uuid="GPU-sick", remapped=(0, 1, 1, 0), events=[94])])
    monkeypatch.setattr(gpu_info, "pynvml", nvml)
    failed, result = run_module(gpu_info, {"xid_wait_ms": 30})
    assert not failed and not result["changed"]
    ok, sick = result["gpus"]
    assert ok["health"]["verdict"] == "healthy" and ok["health"]["xid"]["waited_ms"] == 30
    assert sick["health"]["verdict"] == "unhealthy"
    assert [r["id"] for r in sick["health"]["reasons"]] == ["row_remap_pending", "xid_critical"]
    assert all(set(r) == {"id", "severity", "evidence", "remedy"} for r in sick["health"]["reasons"])
    # waited on one event set for both GPUs, within the bound, and freed it
    assert nvml.event_sets == [{"handles": [0, 1], "freed": True}]
    assert all(w <= 30 for w in nvml.waits)


def test_an_unsupported_field_is_null(run_module, monkeypatch):
    monkeypatch.setattr(gpu_info, "pynvml", FakeNvml(gpus=[healthy_gpu(temp=NVMLError_NotSupported(),
                                                                       thresholds={})]))
    failed, result = run_module(gpu_info, {"xid_wait_ms": 0})
    health = result["gpus"][0]["health"]
    assert not failed and health["temperature"] is None and health["xid"] is None
    assert health["verdict"] == "healthy" and health["ecc"]["enabled"] is True


def test_xid_wait_ms_is_bounded(run_module, monkeypatch):
    monkeypatch.setattr(gpu_info, "pynvml", FakeNvml())
    for bad in (-1, 10001):
        failed, result = run_module(gpu_info, {"xid_wait_ms": bad})
        assert failed and "xid_wait_ms must be 0 (no wait) to 10000 milliseconds" in result["msg"]
