from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.filter.vllm_args import FilterModule, vllm_args
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._vllm_flags import (
    VllmArgsError, parse_version, render)

GUIDE = dict(model="meta-llama/Meta-Llama-3.1-8B-Instruct", gpu_memory_utilization=0.92,
             max_model_len=4096, max_num_seqs=128, block_size=16, preemption_mode="recompute",
             enable_prefix_caching=True)


@pytest.mark.parametrize("version", ["0.8.0", "0.9.2", "0.10.1.1", "0.10.2"])
def test_preemption_mode_on_vllm_08_to_010_would_force_v0_so_it_is_left_out(version):
    # any explicit value makes EngineArgs._is_v1_supported_oracle fall back to V0 (0.8.0-0.10.2)
    argv, warnings = render(GUIDE, version, var_prefix="vllm_server_")
    assert "--preemption-mode" not in argv
    assert len(warnings) == 1
    assert "V0" in warnings[0] and "vllm_server_allow_v0_engine" in warnings[0]
    argv, warnings = render(GUIDE, version, allow_v0_engine=True)
    assert argv == ["--model", "meta-llama/Meta-Llama-3.1-8B-Instruct",
                    "--gpu-memory-utilization", "0.92", "--max-model-len", "4096",
                    "--max-num-seqs", "128", "--block-size", "16",
                    "--preemption-mode", "recompute", "--enable-prefix-caching"]
    assert warnings == []


@pytest.mark.parametrize("version", ["0.11.0", "0.12.0", "0.32.0", "0.33.0"])
def test_preemption_mode_left_out_from_011_with_the_reason(version):
    argv, warnings = render(GUIDE, version, var_prefix="vllm_server_")
    assert "--preemption-mode" not in argv
    assert len(warnings) == 1
    assert "vllm_server_preemption_mode" in warnings[0] and "always recomputes" in warnings[0]


@pytest.mark.parametrize("version, present", [("0.17.1", True), ("0.18.0", False)])
def test_swap_space_until_018(version, present):
    argv, warnings = render(dict(model="m", swap_space=4), version)
    assert ("--swap-space" in argv) is present
    assert bool(warnings) is not present


@pytest.mark.parametrize("version, present", [("0.17.0", False), ("0.18.0", True), ("0.32.0+cpu", True)])
def test_shutdown_timeout_from_018(version, present):
    argv, warnings = render(dict(model="m", shutdown_timeout=30), version)
    assert (argv[-2:] == ["--shutdown-timeout", "30"]) is present
    assert bool(warnings) is not present


@pytest.mark.parametrize("device, version, size, ok", [
    ("cpu", "0.32.0", 32, True), ("cpu", "0.32.0", 64, True), ("cpu", "0.32.0", 96, True),
    ("cpu", "0.32.0", 16, False), ("cpu", "0.32.0", 8, False),
    ("cuda", "0.11.0", 16, True), ("cuda", "0.11.0", 128, True), ("cuda", "0.11.0", 256, False),
    ("cuda", "0.12.0", 256, True), ("cuda", "0.17.0", 24, False), ("cuda", "0.8.0", 1, False),
    ("cuda", "0.8.5", 1, True), ("cuda", "0.11.2", 256, True),
    # from 0.18 the parser takes any positive integer; the attention backend decides
    ("cuda", "0.18.0", 24, True), ("cuda", "0.32.0", 512, True), ("cuda", "0.32.0", 0, False),
    # vllm/platforms/cpu.py 0.8.5-0.11: 16 only without intel_extension_for_pytorch
    ("cpu", "0.8.5", 16, True), ("cpu", "0.11.0", 32, False), ("cpu", "0.26.0", 16, True),
    # the CPU backend's kernel sizes: MultipleOf(16) in 0.27-0.28, MultipleOf(32) from 0.29
    ("cpu", "0.28.0", 16, True), ("cpu", "0.28.0", 8, False), ("cpu", "0.29.0", 16, False),
])
def test_block_size_per_device_and_version(device, version, size, ok):
    config = dict(model="m", block_size=size)
    if ok:
        assert render(config, version, device)[0][-2:] == ["--block-size", str(size)]
    else:
        with pytest.raises(VllmArgsError) as err:
            render(config, version, device, var_prefix="vllm_server_")
        assert "vllm_server_block_size" in str(err.value) and repr(size) in str(err.value)


@pytest.mark.parametrize("key, value, allowed", [
    ("gpu_memory_utilization", 0, "(0, 1]"), ("gpu_memory_utilization", 1.5, "(0, 1]"),
    ("gpu_memory_utilization", "lots", "(0, 1]"),
    ("port", 70000, "65535 or less"), ("port", "http", "integer"), ("port", True, "integer"),
    ("max_num_seqs", 0, "1 or more"), ("preemption_mode", "sometimes", "recompute, swap"),
    ("enable_prefix_caching", "yes", "true or false"), ("kv_cache_memory_bytes", "lots", "2G"),
    ("dtype", "int4", "bfloat16"),
])
def test_bad_values_name_variable_value_and_allowed(key, value, allowed):
    with pytest.raises(VllmArgsError) as err:
        render(dict(model="m", **{key: value}), "0.32.0", var_prefix="vllm_server_", context="b")
    text = str(err.value)
    assert text.startswith("vllm_server_%s (b): " % key)
    assert repr(value) in text and allowed in text


def test_unknown_option_points_to_extra_args():
    with pytest.raises(VllmArgsError) as err:
        render(dict(model="m", max_num_sequences=4), "0.32.0", var_prefix="vllm_server_")
    assert "vllm_server_max_num_sequences" in str(err.value)
    assert "vllm_server_extra_args" in str(err.value)


@pytest.mark.parametrize("config", [dict(model="m", api_key="s3cret"),
                                    dict(model="m", extra_args=["--api-key", "s3cret"]),
                                    dict(model="m", extra_args=["--api-key=s3cret"])])
def test_secrets_are_refused_and_not_echoed(config):
    with pytest.raises(VllmArgsError) as err:
        render(config, "0.32.0")
    assert "s3cret" not in str(err.value)


def test_booleans_none_and_extra_args():
    argv = render(dict(model="m", enable_prefix_caching=False, enforce_eager=False,
                       max_num_seqs=None, extra_args=["--max-num-batched-tokens=8192"]), "0.32.0")[0]
    assert argv == ["--model", "m", "--no-enable-prefix-caching", "--max-num-batched-tokens=8192"]
    # V1 caches prefixes by default from 0.8, and 0.8.0's BooleanOptionalAction has the --no- form
    argv = render(dict(model="m", enable_prefix_caching=False), "0.8.0")[0]
    assert argv == ["--model", "m", "--no-enable-prefix-caching"]


def test_bad_version_device_and_missing_model():
    for kwargs, name in ((dict(version="latest"), "vllm_server_version"),
                         (dict(version="0.32.0", device="rocm"), "vllm_server_device")):
        with pytest.raises(VllmArgsError) as err:
            render(dict(model="m"), var_prefix="vllm_server_", **kwargs)
        assert name in str(err.value)
    with pytest.raises(VllmArgsError) as err:
        render({}, "0.32.0", var_prefix="vllm_server_")
    assert "vllm_server_model" in str(err.value)


def test_parse_version():
    assert parse_version("0.32.0+cpu") == (0, 32, 0)
    assert parse_version("0.10.1.1") == (0, 10, 1, 1)
    assert parse_version("v0.9") == (0, 9)


def test_filter_plugin_wraps_errors_and_is_registered():
    assert FilterModule().filters()["vllm_args"] is vllm_args
    assert vllm_args(dict(model="m"), "0.32.0", "cpu") == ["--model", "m"]
    with pytest.raises(AnsibleFilterError):
        vllm_args(dict(model="m", block_size=16), "0.32.0", "cpu")


def test_lora_flags_render_as_vllm_parses_them():
    from ansible_collections.kvfleet.vllm.plugins.plugin_utils._vllm_flags import render as _render
    argv, warnings = _render({"model": "m", "enable_lora": True, "max_loras": 2, "max_lora_rank": "16",
                              "lora_modules": [{"name": "sql-lora", "path": "/s/a"}, "b=/s/b"]}, "0.32.0", "cpu")
    assert argv[2:] == ["--enable-lora", "--max-loras", "2", "--max-lora-rank", "16",
                        "--lora-modules", "sql-lora=/s/a", "b=/s/b"] and not warnings


@pytest.mark.parametrize("modules, words", [
    ([], "non-empty list"),
    ("a=/x", "non-empty list"),
    ([{"name": "a", "path": "/x,y"}], "without spaces or commas"),   # vLLM would read it as JSON
    ([{"name": "a b", "path": "/x"}], "adapter name must be"),
    ([{"name": "a", "path": "relative"}], "absolute path"),
    ([{"name": "a", "path": "/x", "base_model_name": "m"}], "each item must be"),
    ([42], "each item must be"),
])
def test_lora_modules_refusals_name_the_variable(modules, words):
    from ansible_collections.kvfleet.vllm.plugins.plugin_utils._vllm_flags import VllmArgsError
    from ansible_collections.kvfleet.vllm.plugins.plugin_utils._vllm_flags import render as _render
    with pytest.raises(VllmArgsError) as info:
        _render({"model": "m", "lora_modules": modules}, "0.32.0", "cpu", var_prefix="vllm_server_")
    assert str(info.value).startswith("vllm_server_lora_modules: ") and words in str(info.value)
