"""gpu_health: the server role's preflight refuses an unhealthy GPU before anything changes, from
gpu_info's result (fake NVML), for the GPUs the instances can see."""

from __future__ import annotations

import os

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.filter.gpu_health import gpu_health
from ansible_collections.kvfleet.vllm.plugins.module_utils._nvml import collect
from ansible_collections.kvfleet.vllm.tests.unit.plugins.fake_nvml import FakeNvml, healthy_gpu

ROLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "roles", "server")


def _facts(*gpus):
    return collect(FakeNvml(gpus=list(gpus)), xid_wait_ms=20)


def _host():
    """GPU 0 healthy, GPU 1 a pending row remap (unhealthy), GPU 2 too hot (degraded)."""
    return _facts(healthy_gpu(uuid="GPU-a"), healthy_gpu(uuid="GPU-b", remapped=(0, 1, 1, 0)),
                  healthy_gpu(uuid="GPU-c", temp=88))


def test_an_instance_on_the_unhealthy_gpu_is_refused_naming_it_and_the_reason():
    out = gpu_health(_host(), [{"name": "main", "cuda_visible_devices": "1"}])
    assert out["gpus"] == [1] and out["degraded"] == []
    assert out["unhealthy"] == [
        "GPU 1 (NVIDIA H100 80GB HBM3, GPU-b) is unhealthy: row_remap_pending (pending true, "
        "uncorrectable 1, correctable 0): reset the GPU so that the pending row remapping takes effect."]


def test_instances_kept_off_the_sick_gpu_pass():
    out = gpu_health(_host(), [{"name": "a", "cuda_visible_devices": "0"},
                               {"name": "b", "cuda_visible_devices": "GPU-c"}])
    assert out["unhealthy"] == [] and out["gpus"] == [0, 2]
    assert len(out["degraded"]) == 1
    assert out["degraded"][0].startswith("GPU 2 (NVIDIA H100 80GB HBM3, GPU-c) is degraded: "
                                         "temperature_slowdown (current 88, slowdown 87")


def test_empty_cuda_visible_devices_sees_every_gpu():
    out = gpu_health(_host(), [{"name": "main", "cuda_visible_devices": ""}])
    assert out["gpus"] == [0, 1, 2] and len(out["unhealthy"]) == 1 and len(out["degraded"]) == 1
    assert gpu_health(_host()) == out


def test_a_healthy_host_and_one_whose_health_nvml_cannot_read_pass():
    assert gpu_health(_facts(healthy_gpu()), [{"name": "main"}]) == {"unhealthy": [], "degraded": [], "gpus": [0]}
    # the fake's default GPUs support no health call: verdict null, neither list
    no_health = collect(FakeNvml())
    assert gpu_health(no_health, [{"name": "main"}]) == {"unhealthy": [], "degraded": [], "gpus": [0, 1]}


def test_unknown_ids_are_left_to_gpu_headroom():
    assert gpu_health(_host(), [{"name": "x", "cuda_visible_devices": "7"}])["gpus"] == []


@pytest.mark.parametrize("facts, instances, word", [
    ({"changed": False}, None, "kvfleet.vllm.gpu_info"),
    ({"gpus": [{"uuid": "x"}]}, None, "needs an index"),
    ({"gpus": []}, [{"cuda_visible_devices": "0"}], "needs a name"),
    ({"gpus": []}, "main", "must be a list"),
])
def test_bad_input_names_what_is_wrong(facts, instances, word):
    with pytest.raises(AnsibleFilterError, match=word):
        gpu_health(facts, instances)


# ---- the role: the preflight task uses the filter as tested above (no Molecule here)
def _tasks(name):
    with open(os.path.join(ROLE, "tasks", name), encoding="utf-8") as f:
        return yaml.safe_load(f)


def test_the_preflight_refuses_an_unhealthy_gpu_before_the_headroom_check():
    tasks = _tasks("preflight_gpu.yml")
    names = [t["name"] for t in tasks]
    refuse = names.index("Refuse to deploy onto an unhealthy GPU")
    assert refuse < names.index("Assert the instances fit in the GPUs' free memory")
    task = tasks[refuse]
    assert task["ansible.builtin.assert"]["that"] == "_server_gpu_health.unhealthy | length == 0"
    assert "kvfleet.vllm.gpu_health(_server_instances)" in task["vars"]["_server_gpu_health"]
    assert "vllm_server_gpu_health == 'refuse'" in task["when"]
    for key in ("inventory_hostname", "_server_gpu_health.unhealthy", "vllm_server_gpu_health: warn"):
        assert key in task["ansible.builtin.assert"]["fail_msg"], key
    warn = tasks[names.index("Warn about GPUs that are not healthy")]
    assert "vllm_server_gpu_health != 'ignore'" in warn["when"]
    # the preflight file runs only on cuda hosts: a CPU host never reads NVML health
    include = [t for t in _tasks("preflight.yml") if t.get("ansible.builtin.include_tasks") == "preflight_gpu.yml"]
    assert include and include[0]["when"] == "vllm_server_device == 'cuda'"


def test_the_variable_is_validated_with_its_choices():
    with open(os.path.join(ROLE, "meta", "argument_specs.yml"), encoding="utf-8") as f:
        spec = yaml.safe_load(f)["argument_specs"]["main"]["options"]["vllm_server_gpu_health"]
    assert spec["choices"] == ["refuse", "warn", "ignore"] and spec["default"] == "refuse"
    with open(os.path.join(ROLE, "defaults", "main.yml"), encoding="utf-8") as f:
        assert yaml.safe_load(f)["vllm_server_gpu_health"] == "refuse"
    checks = _tasks("preflight.yml")[1]["vars"]["__server_checks"]
    mine = [c for c in checks if "vllm_server_gpu_health" in c["msg"]]
    assert mine and "refuse, warn, ignore" in mine[0]["msg"]
