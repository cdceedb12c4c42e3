from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.filter.gpu_headroom import gpu_headroom
from ansible_collections.kvfleet.vllm.plugins.module_utils._nvml import collect
from ansible_collections.kvfleet.vllm.tests.unit.plugins.fake_nvml import FakeNvml, Memory, Proc

GIB = 2 ** 30


def _facts(free_gib, procs=(), total_gib=80):
    used = total_gib - free_gib
    nvml = FakeNvml(gpus=[dict(name="NVIDIA H100", uuid="GPU-aaaa",
                               mem=Memory(total_gib * GIB, free_gib * GIB, used * GIB),
                               util=None, cc=(9, 0), pm=1,
                               compute=[Proc(pid, gib * GIB) for pid, gib in procs], graphics=[])])
    return collect(nvml)


def test_fits_when_free():
    assert gpu_headroom(_facts(79), [{"name": "main", "gpu_memory_utilization": 0.92}]) == []


def test_other_process_holding_memory_is_named():
    problems = gpu_headroom(_facts(40, [(999, 40)]), [{"name": "main", "gpu_memory_utilization": 0.92}])
    assert len(problems) == 1
    msg = problems[0]
    assert "GPU 0 (NVIDIA H100)" in msg and "main (0.92)" in msg
    assert "need 73.6 GiB" in msg and "only 40.0 GiB is free" in msg and "pid 999 (40.0 GiB)" in msg


def test_own_vllm_memory_counts_as_free():
    facts = _facts(6, [(4242, 74)])
    inst = [{"name": "main", "gpu_memory_utilization": 0.92}]
    assert gpu_headroom(facts, inst, own_pids=[4242]) == []
    assert gpu_headroom(facts, inst) != []


def test_shares_on_one_gpu_add_up():
    insts = [{"name": "a", "gpu_memory_utilization": 0.6, "cuda_visible_devices": "0"},
             {"name": "b", "gpu_memory_utilization": 0.6, "cuda_visible_devices": "GPU-aaaa"}]
    problems = gpu_headroom(_facts(80), insts)
    assert problems and "a (0.60), b (0.60)" in problems[0] and "1.20" in problems[0]
    insts[1]["gpu_memory_utilization"] = 0.4
    assert gpu_headroom(_facts(80), insts) == []


def test_unknown_gpu_is_named():
    problems = gpu_headroom(_facts(80), [{"name": "x", "gpu_memory_utilization": 0.5,
                                          "cuda_visible_devices": "3"}])
    assert problems == ["instance x: cuda_visible_devices '3' names GPU '3', which is not on this "
                        "host (GPUs: 0)."]


@pytest.mark.parametrize("bad", [0, 1.5, "lots", None])
def test_bad_share_names_the_field(bad):
    with pytest.raises(AnsibleFilterError, match="gpu_memory_utilization .* allowed: a number in"):
        gpu_headroom(_facts(80), [{"name": "x", "gpu_memory_utilization": bad}])


def test_needs_gpu_info_result():
    with pytest.raises(AnsibleFilterError, match="kvfleet.vllm.gpu_info"):
        gpu_headroom({"changed": False}, [])


def test_unattributed_memory_with_own_units_running_is_not_a_failure():
    # NVML in a pid namespace lists no processes; the used memory may be our own vLLM
    facts = _facts(6)
    inst = [{"name": "main", "gpu_memory_utilization": 0.92}]
    assert gpu_headroom(facts, inst, own_pids=[4242]) == []
    assert gpu_headroom(facts, inst) != []


def _gpus(n):
    nvml = FakeNvml(gpus=[dict(name="NVIDIA H100", uuid="GPU-%d" % i, mem=Memory(80 * GIB, 80 * GIB, 0),
                               util=None, cc=(9, 0), pm=1, compute=[], graphics=[]) for i in range(n)])
    return collect(nvml)


@pytest.mark.parametrize("options, visible, gpus, want", [
    # a serving group member with 2 local engines of tensor parallel 2: 4 GPUs
    ({"data_parallel": {"size": 4, "size_local": 2, "start_rank": 0, "address": "10.0.0.1", "rpc_port": 13345},
      "options": {"tensor_parallel_size": 2}}, "", 2,
     "instance main needs 4 GPUs (--data-parallel-size-local 2 x --tensor-parallel-size 2) but sees 2 "
     "(cuda_visible_devices empty: every GPU of the host)."),
    ({"options": {"tensor_parallel_size": 2}}, "0", 4,
     "instance main needs 2 GPUs (--tensor-parallel-size 2) but sees 1 (cuda_visible_devices '0')."),
    ({"data_parallel": {"size": 2, "size_local": 2}}, "0", 2,
     "instance main needs 2 GPUs (--data-parallel-size-local 2) but sees 1 (cuda_visible_devices '0')."),
    ({"options": {"tensor_parallel_size": 2}}, "0,1", 2, None),
    ({}, "", 1, None),
])
def test_the_gpus_an_instances_engines_take_must_be_visible(options, visible, gpus, want):
    """From the instance model's argv (the GPU preflight's input), not a second parser."""
    from ansible_collections.kvfleet.vllm.plugins.plugin_utils._instances import build
    from ansible_collections.kvfleet.vllm.tests.unit.plugins.plugin_utils.test_instances import settings
    inst = dict({"name": "main", "port": 8000, "cuda_visible_devices": visible}, **options)
    built, _warnings = build([inst], settings(device="cuda"))
    problems = gpu_headroom(_gpus(gpus), [dict(built[0], gpu_memory_utilization=0.5)])
    assert problems == ([want] if want else [])
