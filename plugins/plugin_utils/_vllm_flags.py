# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which vLLM command-line flags a version and device accept, and their valid values.

Rendering a flag that the installed vLLM rejects kills the server at start-up (exit 2,
"unrecognized arguments"), so every option is checked against this table first. Sources:
the vLLM 0.11.0, 0.12.0 and 0.33.0 sources and a real 0.32.0 CPU server (docs/vllm-versions.md).
"""

from __future__ import annotations

import re

__all__ = ["DEVICES", "OPTIONS", "VllmArgsError", "parse_version", "render"]

DEVICES = ("cuda", "cpu")


class VllmArgsError(ValueError):
    """Invalid option or value; the message names the variable, the value and what is allowed."""


def parse_version(version):
    """'0.32.0+cpu' -> (0, 32, 0). Raises ValueError for anything else."""
    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:[+.-].*)?$", str(version).strip())
    if not match:
        raise ValueError("not a vLLM version")
    return tuple(int(p) for p in match.groups() if p is not None)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _int(minimum=None, maximum=None):
    def check(value, _ver, _dev):
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if not _is_int(value):
            return None, "must be an integer"
        if minimum is not None and value < minimum:
            return None, "must be %s or more" % minimum
        if maximum is not None and value > maximum:
            return None, "must be %s or less" % maximum
        return str(value), None
    return check


def _float_unit(value, _ver, _dev):
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None, "must be a number in (0, 1]"
    if isinstance(value, bool) or not 0 < number <= 1:
        return None, "must be a number in (0, 1]"
    return repr(number) if not float(number).is_integer() else "1.0", None


def _float_min0(value, _ver, _dev):
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None, "must be a number of 0 or more"
    if isinstance(value, bool) or number < 0:
        return None, "must be a number of 0 or more"
    return ("%g" % number), None


def _size(value, _ver, _dev):
    if _is_int(value) and value > 0:
        return str(value), None
    if isinstance(value, str) and re.match(r"^\d+(\.\d+)?[KMGT]i?B?$|^\d+$", value.strip(), re.I):
        return value.strip(), None
    return None, "must be a byte count such as 2147483648 or 2G"


def _choice(*allowed):
    def check(value, _ver, _dev):
        if value not in allowed:
            return None, "must be one of %s" % ", ".join(allowed)
        return value, None
    return check


def _string(value, _ver, _dev):
    if not isinstance(value, str) or not value.strip():
        return None, "must be a non-empty string"
    return value, None


def _bool(value, _ver, _dev):
    if not isinstance(value, bool):
        return None, "must be true or false"
    return value, None


_CUDA_BLOCKS_011 = (1, 8, 16, 32, 64, 128)
_CUDA_BLOCKS_012 = _CUDA_BLOCKS_011 + (256,)


def _block_size(value, version, device):
    if not _is_int(value) or value < 1:
        return None, "must be a positive integer"
    if device == "cpu":
        if value % 32:
            return None, ("the CPU attention backend needs a multiple of 32 (32, 64, 96, ...); "
                          "16 and 8 make the engine die at start-up")
        return str(value), None
    allowed = _CUDA_BLOCKS_011 if version < (0, 12) else _CUDA_BLOCKS_012
    if value not in allowed:
        return None, "must be one of %s on CUDA" % ", ".join(str(a) for a in allowed)
    return str(value), None


# key -> flag, check, first version with it, first version without it, why it is absent.
# Booleans render as the bare flag when true; `negative` is the flag rendered when false.
OPTIONS = (
    ("model", dict(flag="--model", check=_string)),
    ("served_model_name", dict(flag="--served-model-name", check=_string)),
    ("host", dict(flag="--host", check=_string)),
    ("port", dict(flag="--port", check=_int(1, 65535))),
    ("gpu_memory_utilization", dict(flag="--gpu-memory-utilization", check=_float_unit)),
    ("kv_cache_memory_bytes", dict(flag="--kv-cache-memory-bytes", check=_size, since=(0, 11),
                                   why="--kv-cache-memory-bytes is not in vLLM before 0.11")),
    ("max_model_len", dict(flag="--max-model-len", check=_int(1))),
    ("max_num_seqs", dict(flag="--max-num-seqs", check=_int(1))),
    ("max_num_batched_tokens", dict(flag="--max-num-batched-tokens", check=_int(1))),
    ("max_num_active_seqs", dict(flag="--max-num-active-seqs", check=_int(1), since=(0, 32),
                                 why="not checked before vLLM 0.32")),
    ("max_num_queued_reqs", dict(flag="--max-num-queued-reqs", check=_int(1), since=(0, 32),
                                 why="queue limits are not checked before vLLM 0.32")),
    ("max_num_queued_tokens", dict(flag="--max-num-queued-tokens", check=_int(1), since=(0, 32),
                                   why="queue limits are not checked before vLLM 0.32")),
    ("block_size", dict(flag="--block-size", check=_block_size)),
    ("preemption_mode", dict(flag="--preemption-mode", check=_choice("recompute", "swap"),
                             until=(0, 11),
                             why="the V1 engine (vLLM 0.11 and later) always recomputes and "
                                 "rejects --preemption-mode")),
    ("swap_space", dict(flag="--swap-space", check=_float_min0, until=(0, 18),
                        why="--swap-space was removed in vLLM 0.18")),
    ("enable_prefix_caching", dict(flag="--enable-prefix-caching", check=_bool,
                                   negative="--no-enable-prefix-caching", negative_since=(0, 9))),
    ("enable_chunked_prefill", dict(flag="--enable-chunked-prefill", check=_bool,
                                    negative="--no-enable-chunked-prefill", negative_since=(0, 9))),
    ("enforce_eager", dict(flag="--enforce-eager", check=_bool)),
    ("tensor_parallel_size", dict(flag="--tensor-parallel-size", check=_int(1))),
    ("pipeline_parallel_size", dict(flag="--pipeline-parallel-size", check=_int(1))),
    ("data_parallel_size", dict(flag="--data-parallel-size", check=_int(1))),
    ("dtype", dict(flag="--dtype",
                   check=_choice("auto", "half", "float16", "bfloat16", "float", "float32"))),
    ("kv_cache_dtype", dict(flag="--kv-cache-dtype", check=_string)),
    ("shutdown_timeout", dict(flag="--shutdown-timeout", check=_int(0), since=(0, 18),
                              why="--shutdown-timeout exists from vLLM 0.18; older servers abort "
                                  "in-flight requests on SIGTERM")),
    ("disable_log_stats", dict(flag="--disable-log-stats", check=_bool)),
    ("trust_remote_code", dict(flag="--trust-remote-code", check=_bool)),
    ("seed", dict(flag="--seed", check=_int(0))),
    ("download_dir", dict(flag="--download-dir", check=_string)),
    ("tokenizer", dict(flag="--tokenizer", check=_string)),
    ("chat_template", dict(flag="--chat-template", check=_string)),
    ("uvicorn_log_level", dict(flag="--uvicorn-log-level",
                               check=_choice("critical", "error", "warning", "info", "debug",
                                             "trace"))),
)
_OPTION_MAP = dict(OPTIONS)
_SECRET_KEYS = ("api_key", "hf_token")


_SECRET_FLAGS = ("--api-key", "--hf-token")


def _secret_flag(arg):
    """The secret flag an argument sets, as vLLM's parser reads it: underscores for dashes
    (FlexibleArgumentParser) and unique abbreviations (argparse's allow_abbrev is on), e.g.
    --api_key=..., --api-k ...; None for any other argument."""
    if not arg.startswith("--"):
        return None
    name = arg.split("=", 1)[0].replace("_", "-")
    for flag in _SECRET_FLAGS:
        # "--api" alone is ambiguous in vLLM (--api-server-count); "--api-k" is not
        if name == flag or (len(name) > len(flag.split("-")[2]) + 3 and flag.startswith(name)):
            return flag
    return None


def render(config, version, device="cuda", var_prefix="", context=""):
    """Options dict -> (argv list, warnings list). Raises VllmArgsError on bad input.

    None values are left out (so a default can be unset with null). `var_prefix` turns option
    names into the caller's variable names in messages; `context` is appended (an instance name).
    """
    where = (" (%s)" % context) if context else ""

    def fail(key, text):
        raise VllmArgsError("%s%s%s: %s" % (var_prefix, key, where, text))

    if device not in DEVICES:
        fail("device", "%r is not a supported device; allowed: %s" % (device, ", ".join(DEVICES)))
    try:
        ver = parse_version(version)
    except ValueError:
        fail("version", "%r is not a vLLM version (expected a release such as 0.32.0)" % (version,))
    if not isinstance(config, dict):
        raise VllmArgsError("the vLLM options must be a dictionary, got %s" % type(config).__name__)

    for key in config:
        if key in _SECRET_KEYS:
            fail(key, "must not become a command-line flag (it would show in ps, the unit and "
                      "logs); the server role writes it to the 0600 environment file")
        if key not in _OPTION_MAP and key != "extra_args":
            fail(key, "unknown vLLM option %r; known options: %s; pass any other flag in "
                 "%sextra_args" % (key, ", ".join(sorted(_OPTION_MAP)), var_prefix))
    if config.get("model") in (None, ""):
        fail("model", "is required (a local path or a Hugging Face model id)")

    argv, warnings = [], []
    for key, spec in OPTIONS:
        value = config.get(key)
        if value is None:
            continue
        rendered, problem = spec["check"](value, ver, device)
        if problem:
            fail(key, "%r is not valid for vLLM %s on %s: %s" % (value, version, device, problem))
        if "since" in spec and ver < spec["since"] or "until" in spec and ver >= spec["until"]:
            warnings.append("%s%s%s=%r left out for vLLM %s: %s"
                            % (var_prefix, key, where, value, version, spec["why"]))
            continue
        if rendered is True:
            argv.append(spec["flag"])
        elif rendered is False:
            if spec.get("negative") and ver >= spec.get("negative_since", (0,)):
                argv.append(spec["negative"])
        else:
            argv.extend([spec["flag"], rendered])
        if key == "disable_log_stats" and value:
            warnings.append("%sdisable_log_stats%s removes the engine metrics: cache_gate and "
                            "the monitor cannot see the KV cache" % (var_prefix, where))

    extra = config.get("extra_args") or []
    if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
        fail("extra_args", "must be a list of strings, each one command-line argument")
    for arg in extra:
        secret = _secret_flag(arg)
        if secret:
            fail("extra_args", "%s (%s) must not be on the command line, where ps, the unit file "
                 "and logs show it; use the role's secret variables (%sapi_key, %shf_token), "
                 "which go to the 0600 environment file" % (arg.split("=", 1)[0], secret,
                                                            var_prefix, var_prefix))
    argv.extend(extra)
    return argv, warnings
