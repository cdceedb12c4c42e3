"""prometheus_targets: the file_sd targets the kvfleet.vllm.prometheus role writes."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.filter.prometheus_targets import _prometheus_targets

HEAD = {"name": "main", "unit": "vllm-main.service", "url": "http://10.0.0.1:8000", "port": 8000,
        "max_num_seqs": 4, "group": {"key": "10.0.0.1:13345", "role": "head"}}
WORKER = {"name": "main", "unit": "vllm-main.service", "url": None, "port": 8000, "max_num_seqs": 4,
          "group": {"key": "10.0.0.1:13345", "role": "worker"}}


def _record(instances, workers=(), version="0.32.0", device="cuda"):
    return {"ansible_local": {"kvfleet_vllm_server": {"current": {
        "version": version, "device": device, "instances": list(instances), "workers": list(workers)}}}}


def test_serving_group_workers_are_no_vllm_target_and_a_host_without_instances_is_missing():
    """A headless worker serves no API (its engines are in the head's /metrics): never a vLLM
    target, whether the host has a deployment record or only the instance model; a host that
    runs only workers still has its node_exporter target and is not reported as unknown."""
    hostvars = {
        "gpu-01": dict(_record([HEAD]), vllm_prometheus_address="10.0.0.1"),
        "gpu-02": dict(_record([], [WORKER]), vllm_prometheus_address="10.0.0.2"),
        # no record yet: the instance model of this run
        "gpu-03": {"vllm_prometheus_address": "10.0.0.3", "vllm_server_version": "0.32.0",
                   "server_result": {"instances": [{"name": "main", "headless": True, "argv": [], "record": WORKER}]}},
        "gpu-04": {"vllm_prometheus_address": "10.0.0.4", "vllm_server_version": "0.32.0",
                   "server_result": {"instances": [{"name": "main", "headless": False, "argv": [], "record": HEAD}]}},
        "gpu-05": {"vllm_prometheus_address": "10.0.0.5"},
    }
    found = _prometheus_targets(sorted(hostvars), hostvars, 9100)
    assert [t["targets"] for t in found["vllm"]] == [["10.0.0.1:8000"], ["10.0.0.4:8000"]]
    assert found["node"] == [{"targets": ["10.0.0.%d:9100" % i], "labels": {"host": "gpu-0%d" % i}} for i in range(1, 6)]
    assert found["missing"] == ["gpu-05"]


def test_labels_from_the_record_the_served_name_from_the_instance_argv_and_https():
    tls = dict(HEAD, name="tls", port=8443, url="https://10.0.0.1:8443", max_num_seqs=None)
    keyed = dict(HEAD, name="keyed", port=8001, url="http://10.0.0.1:8001", tls={"cert": "/etc/vllm/c.pem"})
    hv = dict(_record([HEAD, tls, keyed]), ansible_host="gpu-01.example.net",
              vllm_server_model_source={"name": "llama-3-8b", "revision": "r1"},
              server_result={"instances": [{"name": "tls", "argv": ["--port", "8443", "--served-model-name", "chat"]}]})
    found = _prometheus_targets(["gpu-01"], {"gpu-01": hv}, 9100)
    assert found["vllm"] == [
        {"targets": ["gpu-01.example.net:8000"],
         "labels": {"host": "gpu-01", "vllm_instance": "main", "model": "llama-3-8b", "vllm_version": "0.32.0",
                    "device": "cuda", "max_num_seqs": "4"}},
        # no max_num_seqs: the label is left out, not empty
        {"targets": ["gpu-01.example.net:8443"],
         "labels": {"host": "gpu-01", "vllm_instance": "tls", "model": "chat", "vllm_version": "0.32.0",
                    "device": "cuda", "__scheme__": "https"}},
        {"targets": ["gpu-01.example.net:8001"],
         "labels": {"host": "gpu-01", "vllm_instance": "keyed", "model": "llama-3-8b", "vllm_version": "0.32.0",
                    "device": "cuda", "max_num_seqs": "4", "__scheme__": "https"}},
    ]
    assert found["missing"] == []


@pytest.mark.parametrize("host_vars, model", [
    ({"vllm_server_served_model_name": "served", "vllm_server_model": "/m"}, "served"),
    ({"vllm_server_model": "/models/tiny"}, "/models/tiny"),
    ({}, None),
])
def test_the_model_label_falls_back_to_the_host_settings(host_vars, model):
    hv = dict(_record([HEAD]), **host_vars)
    labels = _prometheus_targets(["h"], {"h": hv}, 9100)["vllm"][0]["labels"]
    assert labels.get("model") == model and labels["host"] == "h"


def test_the_address_is_the_host_name_without_ansible_host_and_the_model_versions_without_a_record():
    hv = {"vllm_server_version": "0.11.0", "vllm_server_device": "cpu",
          "server_result": {"instances": [{"name": "main", "headless": False, "argv": [], "record": dict(HEAD, port=8010)}]}}
    found = _prometheus_targets(["node-7"], {"node-7": hv}, 9101)
    assert found["vllm"][0]["targets"] == ["node-7:8010"]
    assert found["vllm"][0]["labels"]["vllm_version"] == "0.11.0" and found["vllm"][0]["labels"]["device"] == "cpu"
    assert found["node"] == [{"targets": ["node-7:9101"], "labels": {"host": "node-7"}}]


@pytest.mark.parametrize("args, words", [
    (("gpu-01", {"gpu-01": {}}, 9100), "list of host names"),
    ((["gpu-01"], None, 9100), "needs hostvars"),
    ((["gpu-01"], {"gpu-01": _record([{"name": "main"}])}, 9100), "gpu-01 has an instance without a name or port"),
])
def test_bad_input_is_named(args, words):
    with pytest.raises(AnsibleFilterError, match=words):
        _prometheus_targets(*args)
