from __future__ import annotations

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils._nvml import NvmlUnavailable, collect
from ansible_collections.kvfleet.vllm.tests.unit.plugins.fake_nvml import (
    FakeNvml, NVMLError_DriverNotLoaded)


def test_collect_two_gpus():
    nvml = FakeNvml()
    facts = collect(nvml)
    assert facts["driver_version"] == "550.54.15"
    assert facts["cuda_driver_version"] == "12.4"
    assert facts["nvml_version"] == "12.550.54.15"
    h100, l4 = facts["gpus"]
    assert h100 == {
        "index": 0, "uuid": "GPU-aaaa", "name": "NVIDIA H100 80GB HBM3",
        "memory_total": 85899345920, "memory_used": 5899345920, "memory_free": 80000000000,
        "utilization_gpu": 37, "utilization_memory": 12, "compute_capability": "9.0",
        "persistence_mode": True,
        "processes": [{"pid": 7, "used_memory": None, "types": ["graphics"]},
                      {"pid": 4242, "used_memory": 5000000000, "types": ["compute", "graphics"]}],
    }
    # unsupported fields are null, not a failure
    assert (l4["utilization_gpu"], l4["persistence_mode"], l4["compute_capability"]) == (None, None, "8.9")
    assert nvml.shutdown_called


def test_no_driver_is_a_clear_error():
    with pytest.raises(NvmlUnavailable) as err:
        collect(FakeNvml(init_error=NVMLError_DriverNotLoaded()))
    assert "Driver Not Loaded" in str(err.value) and "NVIDIA driver" in str(err.value)


def test_no_gpu_and_no_cuda_version():
    facts = collect(FakeNvml(gpus=[], cuda=0))
    assert facts["gpus"] == [] and facts["cuda_driver_version"] is None


# ---- process_memory: what the monitor records of a unit's GPU memory
def test_process_memory_sums_the_units_processes_over_every_gpu():
    from ansible_collections.kvfleet.vllm.plugins.module_utils._nvml import process_memory
    from ansible_collections.kvfleet.vllm.tests.unit.plugins.fake_nvml import FakeNvml, Memory, Proc, Util
    gpu = dict(name="g", uuid="GPU-x", mem=Memory(10, 5, 5), util=Util(1, 1), cc=(9, 0), pm=1, graphics=[])
    nvml = FakeNvml(gpus=[dict(gpu, compute=[Proc(10, 7_000), Proc(99, 1_000)]),
                          dict(gpu, compute=[Proc(11, 3_000)]),
                          dict(gpu, compute=[Proc(99, 5_000)])])
    assert process_memory(nvml, [10, 11, 12]) == {"gpu_bytes": 10_000, "gpus": 2}
    assert nvml.shutdown_called
    # none of them on a GPU, or listed without a size: NVML cannot say
    assert process_memory(nvml, [12]) is None
    assert process_memory(FakeNvml(gpus=[dict(gpu, compute=[Proc(10, None)])]), [10]) is None


def test_process_memory_without_a_driver_is_none():
    from ansible_collections.kvfleet.vllm.plugins.module_utils._nvml import process_memory
    from ansible_collections.kvfleet.vllm.tests.unit.plugins.fake_nvml import FakeNvml, NVMLError_DriverNotLoaded
    assert process_memory(FakeNvml(init_error=NVMLError_DriverNotLoaded()), [1]) is None
