"""The cuda_compat filter (plugins/filter/cuda_compat.py) from gpu_info's result on a fake NVML: the
wheel's CUDA from the installed torch, the setting or the table, and the verdict on the driver.
(The pure reading and the table: tests/unit/plugins/module_utils/test_cuda_compat.py.)"""

from __future__ import annotations

import os

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.filter.cuda_compat import cuda_compat
from ansible_collections.kvfleet.vllm.plugins.module_utils._nvml import collect
from ansible_collections.kvfleet.vllm.tests.unit.plugins.fake_nvml import FakeNvml, healthy_gpu

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..")
WHEELS = os.path.join(ROOT, "tests", "fixtures", "wheel_metadata")


def _meta(name):
    with open(os.path.join(WHEELS, name), encoding="utf-8") as f:
        return f.read()


# ---- the filter, from gpu_info's result (fake NVML)
def _facts(cuda):
    return collect(FakeNvml(gpus=[healthy_gpu()], cuda=cuda))


def test_filter_before_install_uses_the_table_then_the_setting():
    v = cuda_compat(_facts(12040), vllm_version="0.32.0")
    assert v["verdict"] == "refuse" and v["source"] == "the PyPI wheel of vLLM 0.32.0"
    assert "550.54.15" in v["message"] and "13.0" in v["message"]
    v = cuda_compat(_facts(12040), cuda="12.4", vllm_version="0.32.0")
    assert v["verdict"] == "ok" and v["source"] == "vllm_server_cuda_version"


def test_filter_once_installed_reads_the_venvs_torch():
    v = cuda_compat(_facts(12040), metadata=_meta("torch-2.8.0-pypi.METADATA"), cuda="13.0", vllm_version="0.32.0")
    assert v["verdict"] == "warn" and v["wheel_cuda"] == "12.8"
    assert "the installed torch 2.8.0" in v["source"]


def test_filter_refuses_a_cpu_torch_on_a_cuda_host():
    v = cuda_compat(_facts(13000), metadata=_meta("torch-2.13.0+cpu.METADATA"))
    assert v["verdict"] == "refuse" and "CPU build" in v["message"] and "vllm_server_device: cpu" in v["message"]


def test_filter_a_version_not_in_the_table_is_unknown_and_names_the_setting():
    v = cuda_compat(_facts(13000), vllm_version="0.7.3")
    assert v["verdict"] == "unknown" and "vllm_server_cuda_version" in v["message"]


def test_filter_bad_input_names_the_setting():
    with pytest.raises(AnsibleFilterError, match="vllm_server_cuda_version"):
        cuda_compat(_facts(13000), cuda="twelve")
    with pytest.raises(AnsibleFilterError, match="gpu_info"):
        cuda_compat(None)
