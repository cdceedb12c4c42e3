"""GPU health beyond gpu_info: the diagnosis' gpu_unhealthy cause (a sick GPU is blamed before
the cache symptoms it causes) and the monitor textfile's kvfleet_vllm_gpu_health gauges."""

from __future__ import annotations

from prometheus_client import parser as prometheus_parser

from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import (
    CAUSE_IDS, add_rates, cause_advice, diagnose, gpu_unhealthy)
from ansible_collections.kvfleet.vllm.plugins.module_utils._nvml import collect
from ansible_collections.kvfleet.vllm.plugins.module_utils._prom import parse
from ansible_collections.kvfleet.vllm.plugins.module_utils._textfile import render
from ansible_collections.kvfleet.vllm.tests.unit.plugins.fake_nvml import (
    FakeNvml, HW_THERMAL, SW_POWER_CAP, healthy_gpu)

FULL_LINK = dict(gen=5, width=16, max_gen=5, max_width=16, gpu_max_gen=5)


def _gpus(*gpus):
    return collect(FakeNvml(gpus=list(gpus)), xid_wait_ms=20)["gpus"]


SICK = _gpus(healthy_gpu(uuid="GPU-sick", remapped=(0, 2, 1, 0)))
HOT = _gpus(healthy_gpu(uuid="GPU-hot", clocks=HW_THERMAL | SW_POWER_CAP, pcie=FULL_LINK))
WELL = _gpus(healthy_gpu(uuid="GPU-well"))


def _exhausted():
    """The kv_cache_exhausted window of the diagnosis tests: full cache, a queue, preemptions."""
    snaps = []
    for i in range(4):
        snaps.append({"time": 2.0 * i, "healthy": True, "version": "0.32.0", "model": "m",
                      "kv_cache_usage": 0.97, "num_gpu_blocks": 100, "block_size": 16,
                      "used_blocks_estimate": 96, "requests_running": 8, "requests_waiting": 12,
                      "waiting_capacity": 12, "preemptions_total": 10 * i, "requests_finished_total": 2 * i,
                      "prompt_tokens_total": 100 * i, "generation_tokens_total": 50 * i,
                      "engine_steps_total": 10 * i})
    return add_rates(snaps)


def _down():
    return [{"time": 2.0 * i, "error": "connection refused"} for i in range(3)]


def test_gpu_unhealthy_is_in_the_cause_table_with_advice():
    assert "gpu_unhealthy" in CAUSE_IDS
    assert "docs/gpu-health.md" in cause_advice("gpu_unhealthy")


def test_without_gpu_health_nothing_changes():
    plain = diagnose(_exhausted())
    assert [c["id"] for c in plain["causes"]] == ["kv_cache_exhausted"]
    assert diagnose(_exhausted(), gpu_health=None) == plain
    assert diagnose(_exhausted(), gpu_health=[]) == plain
    # a healthy GPU, or one whose health NVML cannot read, adds nothing
    assert diagnose(_exhausted(), gpu_health=WELL) == plain
    assert diagnose(_exhausted(), gpu_health=collect(FakeNvml())["gpus"]) == plain


def test_a_cache_symptom_on_a_sick_gpu_is_blamed_on_the_gpu():
    found = diagnose(_exhausted(), gpu_health=SICK)
    assert found["verdict"] == "unhealthy"
    assert [c["id"] for c in found["causes"]] == ["gpu_unhealthy", "kv_cache_exhausted"]
    gpu = found["causes"][0]
    assert gpu["severity"] == "critical"
    assert gpu["evidence"]["may_explain"] == ["kv_cache_exhausted"]
    assert gpu["evidence"]["gpus"][0]["uuid"] == "GPU-sick"
    assert [r["id"] for r in gpu["evidence"]["gpus"][0]["reasons"]] == ["row_remap_pending"]
    assert gpu["advice"].startswith(cause_advice("gpu_unhealthy"))
    assert "GPU 0 (GPU-sick) is unhealthy (row_remap_pending: reset the GPU" in gpu["advice"]


def test_a_dead_engine_on_a_sick_gpu_is_blamed_on_the_gpu():
    found = diagnose(_down(), gpu_health=SICK)
    assert [c["id"] for c in found["causes"]] == ["gpu_unhealthy", "engine_down"]
    assert [c["id"] for c in diagnose(_down())["causes"]] == ["engine_down"]


def test_a_degraded_gpu_is_a_warning_after_the_critical_causes():
    found = diagnose(_exhausted(), gpu_health=HOT)
    ids = [(c["id"], c["severity"]) for c in found["causes"]]
    # the exhaustion here is critical (preemptions): it stays first, the hot GPU leads the warnings
    assert ids[0] == ("kv_cache_exhausted", "critical") and ("gpu_unhealthy", "warning") in ids
    alone = diagnose(add_rates([{"time": 0.0, "healthy": True, "requests_running": 0, "requests_waiting": 0},
                                {"time": 2.0, "healthy": True, "requests_running": 0, "requests_waiting": 0}]),
                     gpu_health=HOT)
    assert alone["verdict"] == "degraded" and [c["id"] for c in alone["causes"]] == ["gpu_unhealthy"]


def test_gpu_unhealthy_lists_the_worst_gpu_first_and_ignores_junk():
    gpus = HOT + [dict(SICK[0], index=1)] + WELL + [None, {"index": 9}]
    cause = gpu_unhealthy(gpus)
    assert cause["severity"] == "critical"
    assert [(g["index"], g["verdict"]) for g in cause["evidence"]["gpus"]] == [(1, "unhealthy"), (0, "degraded")]
    assert gpu_unhealthy(WELL) is None and gpu_unhealthy([]) is None


def _samples(text):
    ours = dict(((s.name, tuple(sorted(s.labels.items()))), s.value) for s in parse(text)[0])
    theirs = {}
    for fam in prometheus_parser.text_string_to_metric_families(text):
        for s in fam.samples:
            theirs[(s.name, tuple(sorted(s.labels.items())))] = s.value
    assert ours == theirs
    return ours


RESULTS = [{"instance": "main", "snapshot": {"healthy": True}, "time": 1.0, "sustained": [],
            "diagnosis": {"verdict": "healthy", "causes": []}, "trends": {}}]


def test_textfile_gpu_health_gauges_and_reasons():
    gpus = _gpus(healthy_gpu(uuid="GPU-a"), healthy_gpu(uuid="GPU-b", remapped=(0, 2, 1, 0), events=[79]),
                 healthy_gpu(uuid="GPU-c", temp=90))
    gpus.append(dict(collect(FakeNvml())["gpus"][0], index=3))   # health unreadable
    ours = _samples(render(RESULTS, gpus=gpus))
    health = dict((dict(k[1])["gpu"], v) for k, v in ours.items() if k[0] == "kvfleet_vllm_gpu_health")
    assert health == {"0": 0, "1": 2, "2": 1}   # absent, not 0, where NVML cannot tell
    assert ours[("kvfleet_vllm_gpu_health", (("gpu", "1"), ("uuid", "GPU-b")))] == 2
    reasons = sorted((dict(k[1])["gpu"], dict(k[1])["reason"], dict(k[1])["severity"])
                     for k in ours if k[0] == "kvfleet_vllm_gpu_health_reason")
    assert reasons == [("1", "row_remap_pending", "unhealthy"), ("1", "xid_critical", "unhealthy"),
                       ("2", "temperature_slowdown", "degraded")]


def test_textfile_without_gpus_is_unchanged():
    text = render(RESULTS)
    assert "kvfleet_vllm_gpu_health" not in text
    assert render(RESULTS, gpus=None) == text
    with_empty = render(RESULTS, gpus=[])
    assert with_empty.startswith(text.rstrip("\n")) and "# TYPE kvfleet_vllm_gpu_health gauge" in with_empty
