from __future__ import annotations

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils._nvml import (
    HEALTH_FIELDS, NvmlUnavailable, collect, gpus_visible, health_findings, judge)
from ansible_collections.kvfleet.vllm.tests.unit.plugins.fake_nvml import (
    GPU_IDLE, HW_SLOWDOWN, HW_THERMAL, SW_POWER_CAP, FakeNvml, Histogram, NVMLError_DriverNotLoaded,
    NVMLError_NotSupported, NVMLError_ResetRequired, OldDriverFakeNvml, OldFakeNvml, healthy_gpu)


def test_collect_two_gpus():
    nvml = FakeNvml()
    facts = collect(nvml)
    assert facts["driver_version"] == "550.54.15"
    assert facts["cuda_driver_version"] == "12.4"
    assert facts["nvml_version"] == "12.550.54.15"
    h100, l4 = facts["gpus"]
    # every field gpu_info had before health keeps its value (health is added beside them)
    assert dict((k, v) for k, v in h100.items() if k != "health") == {
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
    # these fake GPUs support no health call: every field null, no verdict
    assert set(h100) == {"index", "uuid", "name", "memory_total", "memory_used", "memory_free",
                         "utilization_gpu", "utilization_memory", "compute_capability",
                         "persistence_mode", "processes", "health"}
    assert h100["health"] == dict([(k, None) for k in HEALTH_FIELDS], verdict=None, reasons=[],
                                  gpu_lost=False, reset_required=False)


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


# ---- health: each reason on its own, on an otherwise healthy H100

BUSY = SW_POWER_CAP   # a GPU at work: clocks held by the power cap, not idle
FULL_LINK = dict(gen=5, width=16, max_gen=5, max_width=16, gpu_max_gen=5)   # a busy GPU's link


def _health(gpu=None, wait=50, nvml_class=FakeNvml, **overrides):
    nvml = nvml_class(gpus=[gpu or healthy_gpu(**overrides)])
    return collect(nvml, xid_wait_ms=wait)["gpus"][0]["health"]


def _ids(health):
    return [r["id"] for r in health["reasons"]]


def _links(counters):
    """18 active links, link 3 with these counters (replay 0, recovery 1, crc_flit 2, crc_data 3,
    ecc_data 4)."""
    links = dict((link, {"state": 1, "counters": {0: 0, 1: 0, 2: 0, 3: 0, 4: 0}}) for link in range(18))
    links[3]["counters"].update(counters)
    return links


def test_a_healthy_gpu_reads_every_field_and_is_healthy():
    h = _health()
    assert h["verdict"] == "healthy" and h["reasons"] == []
    assert h["ecc"] == {"enabled": True, "volatile": {"corrected": 3, "uncorrected": 0},
                        "aggregate": {"corrected": 12, "uncorrected": 0}}
    assert h["retired_pages"] == {"multiple_single_bit_ecc": 0, "double_bit_ecc": 0, "pending": False}
    assert h["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failed": False,
                                  "histogram": {"max": 64, "high": 0, "partial": 0, "low": 0, "none": 0}}
    assert h["clock_event_reasons"] == ["gpu_idle"]
    # idle at gen 1 of 5: power saving, not a fault
    assert h["pcie"] == {"gen": 1, "width": 16, "max_gen": 5, "max_width": 16, "gpu_max_gen": 5}
    assert len(h["nvlink"]) == 18 and h["nvlink"][0] == {"link": 0, "replay": 0, "recovery": 0,
                                                         "crc_flit": 0, "crc_data": 0, "ecc_data": 0}
    assert h["xid"] == {"waited_ms": 50, "events": [], "unattributed": []}
    assert h["temperature"] == {"current": 34, "slowdown": 87, "shutdown": 92}
    assert (h["gpu_lost"], h["reset_required"]) == (False, False)


@pytest.mark.parametrize("overrides, reason", [
    (dict(ecc={(0, 0): 0, (1, 0): 2, (0, 1): 0, (1, 1): 2}), "ecc_uncorrected_volatile"),
    (dict(retired={0: [0x1000], 1: [0x2000]}, retired_pending=1), "retired_pages_pending"),
    (dict(remapped=(0, 8, 0, 1)), "row_remap_failed"),
    (dict(remapped=(1, 1, 1, 0)), "row_remap_pending"),
    (dict(events=[79]), "xid_critical"),
])
def test_each_unhealthy_reason(overrides, reason):
    h = _health(**overrides)
    assert h["verdict"] == "unhealthy"
    assert _ids(h)[0] == reason
    first = h["reasons"][0]
    assert first["severity"] == "unhealthy" and first["evidence"] and first["remedy"]


@pytest.mark.parametrize("xid, verdict", [(48, "unhealthy"), (63, "unhealthy"), (64, "unhealthy"),
                                          (79, "unhealthy"), (94, "unhealthy"), (95, "unhealthy"),
                                          (92, "degraded"), (13, "healthy"), (43, "healthy")])
def test_xids_seen_during_the_wait(xid, verdict):
    h = _health(events=[xid])
    assert h["xid"]["events"] == [xid]
    assert h["verdict"] == verdict
    if verdict != "healthy":
        assert h["reasons"][0]["evidence"]["xid"] == xid
    else:   # an application's Xid (13 graphics exception, 43 stopped processing) is listed, not judged
        assert h["reasons"] == []


def test_remedies_name_the_action():
    assert "reset the GPU" in _health(remapped=(0, 1, 1, 0))["reasons"][0]["remedy"]
    assert "replace the GPU" in _health(remapped=(0, 8, 0, 1))["reasons"][0]["remedy"]
    assert "cooling" in _health(clocks=HW_THERMAL, pcie=FULL_LINK)["reasons"][0]["remedy"]


def test_a_lost_gpu_is_unhealthy_and_keeps_the_fields_other_code_reads():
    nvml = FakeNvml(gpus=[healthy_gpu(), healthy_gpu(uuid="GPU-gone")])
    nvml.lost.add(1)
    facts = collect(nvml, xid_wait_ms=20)
    ok, lost = facts["gpus"]
    assert ok["health"]["verdict"] == "healthy"
    assert lost["index"] == 1 and lost["memory_free"] == 0 and lost["processes"] == []
    assert lost["health"]["verdict"] == "unhealthy" and _ids(lost["health"]) == ["gpu_lost"]
    assert all(lost["health"][k] is None for k in HEALTH_FIELDS)


def test_a_gpu_lost_between_calls_and_one_that_needs_a_reset():
    class LostLater(FakeNvml):
        def nvmlDeviceGetRemappedRows(self, h):
            from ansible_collections.kvfleet.vllm.tests.unit.plugins.fake_nvml import NVMLError_GpuIsLost
            raise NVMLError_GpuIsLost()
    h = _health(nvml_class=LostLater)
    assert h["gpu_lost"] is True and h["verdict"] == "unhealthy" and "gpu_lost" in _ids(h)
    h = _health(retired_pending=NVMLError_ResetRequired())
    assert h["reset_required"] is True and _ids(h) == ["reset_required"]


@pytest.mark.parametrize("overrides, reason", [
    (dict(events=[92]), "xid_degraded"),
    (dict(ecc={(0, 0): 0, (1, 0): 0, (0, 1): 40, (1, 1): 1}), "ecc_uncorrected_aggregate"),
    (dict(retired={0: list(range(50)), 1: list(range(10))}), "retired_pages_high"),
    (dict(histogram=Histogram(max=60, low=3, none=1)), "row_remap_banks_exhausted"),
    (dict(pcie=FULL_LINK, clocks=HW_SLOWDOWN | SW_POWER_CAP), "clock_slowdown"),
    (dict(pcie=FULL_LINK, clocks=HW_THERMAL), "clock_slowdown"),
    (dict(pcie=FULL_LINK, clocks=0x80), "clock_slowdown"),   # hw_power_brake_slowdown
    (dict(pcie=FULL_LINK, clocks=0x20), "clock_slowdown"),   # sw_thermal_slowdown
    (dict(temp=87), "temperature_slowdown"),
    (dict(pcie=dict(gen=5, width=8, max_gen=5, max_width=16, gpu_max_gen=5)), "pcie_width_reduced"),
    (dict(clocks=BUSY, pcie=dict(gen=3, width=16, max_gen=5, max_width=16, gpu_max_gen=5)), "pcie_gen_reduced"),
    (dict(nvlink=_links({2: 5})), "nvlink_errors"),
    (dict(nvlink=_links({0: 1})), "nvlink_errors"),
])
def test_each_degraded_reason(overrides, reason):
    h = _health(**overrides)
    assert h["verdict"] == "degraded", h["reasons"]
    assert _ids(h) == [reason]
    assert h["reasons"][0]["severity"] == "degraded" and h["reasons"][0]["remedy"]


@pytest.mark.parametrize("overrides", [
    dict(clocks=SW_POWER_CAP, pcie=FULL_LINK),                        # a busy GPU at its power cap
    dict(temp=86),                                                    # one degree below slowdown
    dict(clocks=GPU_IDLE, pcie=dict(gen=1, width=16, max_gen=5, max_width=16, gpu_max_gen=5)),
    # a gen 5 GPU in a gen 4 slot: the link's own maximum is 4, and it runs at 4
    dict(clocks=BUSY, pcie=dict(gen=4, width=16, max_gen=4, max_width=16, gpu_max_gen=5)),
    dict(retired={0: list(range(30)), 1: list(range(29))}),          # 59 retired pages
    dict(remapped=(3, 2, 0, 0), histogram=Histogram(max=60, high=4)),  # rows remapped, spares left
    dict(nvlink=_links({4: 7})),                                    # ecc_data is not judged
])
def test_just_below_each_threshold_is_healthy(overrides):
    h = _health(**overrides)
    assert h["verdict"] == "healthy", h["reasons"]


def test_aggregate_ecc_with_a_pending_remap_is_the_remap_only():
    h = _health(ecc={(0, 0): 0, (1, 0): 1, (0, 1): 0, (1, 1): 1}, remapped=(0, 1, 1, 0))
    assert _ids(h) == ["ecc_uncorrected_volatile", "row_remap_pending"]


def test_nvlink_errors_count_only_when_they_grew_since_a_previous_reading():
    before = _health(nvlink=_links({2: 5}))
    same = judge(_health(nvlink=_links({2: 5})), previous=before)
    assert same["verdict"] == "healthy"
    grew = judge(_health(nvlink=_links({2: 9})), previous=before)
    assert grew["verdict"] == "degraded"
    assert grew["reasons"][0]["evidence"]["links"] == [
        {"link": 3, "counter": "crc_flit", "value": 9, "growth": 4}]
    # the counters were reset (lower now): the reading counts from zero
    assert judge(_health(nvlink=_links({2: 2})), previous=before)["verdict"] == "degraded"


def test_a_field_nvml_does_not_support_is_null_and_the_rest_still_judged():
    gpu = healthy_gpu(retired=NVMLError_NotSupported(), clocks=HW_SLOWDOWN | GPU_IDLE)
    del gpu["retired_pending"], gpu["nvlink"], gpu["histogram"]
    gpu["pcie"] = dict(gen=None, width=None, max_gen=None, max_width=None, gpu_max_gen=None)
    h = _health(gpu=gpu)
    assert h["retired_pages"] is None and h["nvlink"] is None and h["pcie"] is None
    assert h["remapped_rows"]["histogram"] is None and h["remapped_rows"]["pending"] is False
    assert h["verdict"] == "degraded" and _ids(h) == ["clock_slowdown"]
    # one counter of a group unsupported: that one null, the group kept
    h = _health(ecc={(0, 0): 1, (1, 0): 0})
    assert h["ecc"]["volatile"] == {"corrected": 1, "uncorrected": 0}
    assert h["ecc"]["aggregate"] == {"corrected": None, "uncorrected": None}


def test_every_field_unsupported_means_no_verdict():
    gpu = dict((k, v) for k, v in healthy_gpu().items()
               if k in ("name", "uuid", "mem", "util", "cc", "pm", "compute", "graphics"))
    h = _health(gpu=gpu)
    assert h["verdict"] is None and h["reasons"] == []
    assert all(h[k] is None for k in HEALTH_FIELDS)


def test_no_wait_no_xid_field_and_no_event_set():
    nvml = FakeNvml(gpus=[healthy_gpu(events=[79])])
    h = collect(nvml, xid_wait_ms=0)["gpus"][0]["health"]
    assert h["xid"] is None and nvml.event_sets == [] and h["verdict"] == "healthy"


def test_the_xid_wait_is_bounded_and_the_event_set_freed():
    import time
    nvml = FakeNvml(gpus=[healthy_gpu(), healthy_gpu(uuid="GPU-2", events=[48, 13]),
                          healthy_gpu(uuid="GPU-3", supported_events=0x1)])
    start = time.monotonic()
    gpus = collect(nvml, xid_wait_ms=200)["gpus"]
    assert time.monotonic() - start < 2.0
    assert all(0 < w <= 200 for w in nvml.waits)
    assert nvml.event_sets[0] == {"handles": [0, 1], "freed": True}
    assert [g["health"]["xid"] and g["health"]["xid"]["events"] for g in gpus] == [[], [48, 13], None]
    assert [g["health"]["verdict"] for g in gpus] == ["healthy", "unhealthy", "healthy"]


def test_older_pynvml_and_older_drivers_fall_back_to_the_old_names():
    for cls in (OldFakeNvml, OldDriverFakeNvml):
        h = _health(nvml_class=cls, clocks=HW_SLOWDOWN | GPU_IDLE, temp=90)
        assert h["clock_event_reasons"] == ["gpu_idle", "hw_slowdown"], cls
        assert h["temperature"]["current"] == 90
        assert _ids(h) == ["clock_slowdown", "temperature_slowdown"]


def test_unknown_clock_bits_are_named_not_dropped():
    assert _health(clocks=GPU_IDLE | 0x10000)["clock_event_reasons"] == ["gpu_idle", "unknown_0x10000"]


def test_findings_name_the_gpu_the_reason_and_the_remedy():
    nvml = FakeNvml(gpus=[healthy_gpu(uuid="GPU-a"), healthy_gpu(uuid="GPU-b", remapped=(0, 2, 1, 0)),
                          healthy_gpu(uuid="GPU-c", temp=90)])
    gpus = collect(nvml)["gpus"]
    found = health_findings(gpus)
    assert [(f["index"], f["verdict"]) for f in found] == [(1, "unhealthy"), (2, "degraded")]
    assert found[0]["text"] == (
        "GPU 1 (NVIDIA H100 80GB HBM3, GPU-b) is unhealthy: row_remap_pending (pending true, "
        "uncorrectable 2, correctable 0): reset the GPU so that the pending row remapping takes effect.")
    assert health_findings(gpus, visible="0,2") == [found[1]]
    assert health_findings(gpus, visible="GPU-b")[0]["index"] == 1
    assert health_findings(gpus, verdicts=("unhealthy",)) == [found[0]]
    assert gpus_visible("", gpus) == [0, 1, 2] and gpus_visible("2, GPU-a,7", gpus) == [2, 0]
