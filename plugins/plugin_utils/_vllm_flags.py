# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which vLLM command-line flags a version and device accept, and their valid values.

Rendering a flag that the installed vLLM rejects kills the server at start-up (exit 2,
"unrecognized arguments"), so every option is checked first: against the installed vLLM's own
parser (the manifest roles/server/files/vllm_flag_manifest.py writes) when the caller has it,
else against this table. Sources: the vLLM sources of 0.8.0 to 0.33.0 and a real 0.32.0 CPU
server (docs/vllm-versions.md lists the releases).
"""

from __future__ import annotations

import re

__all__ = ["DEVICES", "EXTRA_FLAGS", "OPTIONS", "VllmArgsError", "parse_version", "render"]

DEVICES = ("cuda", "cpu")


class VllmArgsError(ValueError):
    """Invalid option or value; the message names the variable, the value and what is allowed."""


def parse_version(version):
    """A vLLM version's release: '0.32.0+cpu' -> (0, 32, 0); a pre-release, a post-release and a
    local label read as their release ('0.12.0rc1', '0.11.0.post1' -> (0, 12, 0), (0, 11, 0)).
    PEP 440 through packaging, an ansible-core dependency on the controller (the hosts' own
    reading, stdlib only, is module_utils/_version.py, tested against this on one table).
    Raises ValueError for anything else."""
    # imported here: ansible-core needs packaging, but ansible-test's import check of the
    # collection runs without it
    from packaging.version import InvalidVersion, Version  # pylint: disable=import-outside-toplevel
    try:
        release = Version(str(version).strip()).release
    except InvalidVersion:
        raise ValueError("not a vLLM version")
    if len(release) < 2:
        raise ValueError("not a vLLM version")
    return tuple(release[:4])


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


# --max-lora-rank: 0.8.0-0.11.0 check 8 ... 512 in LoRAConfig at start-up (vllm/config.py, a
# ValueError); from 0.11.1 they are the parser's choices, with 1 added (vllm/config/lora.py
# MaxLoRARanks; tests/fixtures/vllm_flags/releases.json)
_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
_LORA_RANKS_0111 = (1,) + _LORA_RANKS


def _lora_rank(value, version, _dev):
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    allowed = _LORA_RANKS_0111 if version >= (0, 11, 1) else _LORA_RANKS
    if not _is_int(value) or value not in allowed:
        return None, "must be one of %s" % ", ".join(str(a) for a in allowed)
    return str(value), None


_LORA_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}\Z")


def _lora_modules(value, _ver, _dev):
    """[{name, path}] or ["name=path"] -> ["name=path", ...]: vLLM reads an item with a comma
    as JSON and splits the old form at '=' (vllm/entrypoints/*cli_args.py LoRAParserAction)."""
    if not isinstance(value, list) or not value:
        return None, "must be a non-empty list of {name, path}"
    out = []
    for item in value:
        if isinstance(item, str) and "=" in item:
            name, _eq, path = item.partition("=")
        elif isinstance(item, dict) and set(item) <= {"name", "path"}:
            name, path = item.get("name"), item.get("path")
        else:
            return None, "each item must be {name, path} or name=path, got %r" % (item,)
        if not isinstance(name, str) or not _LORA_NAME.match(name):
            return None, ("an adapter name must be 1-100 letters, digits, '.', '_' or '-', got %r"
                          % (name,))
        if not isinstance(path, str) or not re.match(r"^/[A-Za-z0-9._/+@:-]*\Z", path):
            return None, "the path of adapter %s must be an absolute path without spaces or commas" % name
        out.append("%s=%s" % (name, path))
    return out, None


# The parser's choices (vllm/engine/arg_utils.py, vllm/config*.py BlockSize): 0.8.0 lists
# 8-128; 0.8.5-0.11.0 Literal[1 ... 128]; 0.11.1-0.17 add 256 (vllm/config/cache.py 0.11.1,
# tools/flag_table.py); from 0.18 any positive integer
# (SkipValidation[int], later Field(gt=0)) and the attention backend decides.
_CUDA_BLOCKS_080 = (8, 16, 32, 64, 128)
_CUDA_BLOCKS_011 = (1, 8, 16, 32, 64, 128)
_CUDA_BLOCKS_012 = _CUDA_BLOCKS_011 + (256,)


def _block_size(value, version, device):
    if not _is_int(value) or value < 1:
        return None, "must be a positive integer"
    if device == "cpu":
        # vllm/platforms/cpu.py 0.8.5-0.11.0: without intel_extension_for_pytorch only 16
        # (0.11.1's has no such rule, only a multiple-of-32 preference)
        if version < (0, 11, 1):
            if value != 16:
                return None, ("vLLM CPU before 0.11.1 accepts only 16 without "
                              "intel_extension_for_pytorch (vllm/platforms/cpu.py)")
            return str(value), None
        # the CPU attention backend's kernel sizes (vllm/v1/attention/backends/cpu_attn.py):
        # MultipleOf(16) in 0.27-0.28, MultipleOf(32) from 0.29; none before (only a warning)
        multiple = 32 if version >= (0, 29) else 16 if version >= (0, 27) else 1
        if value % multiple:
            return None, ("the CPU attention backend of vLLM %s needs a multiple of %d; other "
                          "sizes make the engine die at start-up"
                          % (".".join(str(p) for p in version), multiple))
        return str(value), None
    if version >= (0, 18):
        return str(value), None
    if version < (0, 8, 5):
        allowed = _CUDA_BLOCKS_080
    elif version < (0, 11, 1):
        allowed = _CUDA_BLOCKS_011
    else:
        allowed = _CUDA_BLOCKS_012
    if value not in allowed:
        return None, "must be one of %s on CUDA" % ", ".join(str(a) for a in allowed)
    return str(value), None


# --data-parallel-size: first in 0.8.x (vllm/engine/arg_utils.py; tools/flag_table.py)
DATA_PARALLEL_SINCE = (0, 8, 3)
# kv_cache_dtype != "auto" leaves V1 in 0.8.0-0.8.1; 0.8.2 asks the platform first
KV_DTYPE_V0_UNTIL = (0, 8, 2)

# key -> flag, check, first version with it, first version without it, why it is absent.
# Booleans render as the bare flag when true; `negative` is the flag rendered when false.
# `v0_fallback`: on vLLM 0.8-0.10 any explicit value makes vLLM leave the V1 engine for V0
# (EngineArgs._is_v1_supported_oracle; VLLM_USE_V1=1 makes it raise instead); a dict narrows
# it: `since`/`until` (the versions where the value decides) and `unless` (values that stay
# on V1). On 0.11.0, which still runs the oracle but has no V0 engine, such a flag stops the
# server, so it is refused there like a flag the version lacks.
# Rows checked against the vLLM sources, per release, unless said otherwise
# (vllm/engine/arg_utils.py, vllm/config*.py; tools/flag_table.py extracts them).
OPTIONS = (
    ("model", dict(flag="--model", check=_string)),
    ("served_model_name", dict(flag="--served-model-name", check=_string)),
    ("host", dict(flag="--host", check=_string)),
    ("port", dict(flag="--port", check=_int(1, 65535))),
    ("gpu_memory_utilization", dict(flag="--gpu-memory-utilization", check=_float_unit)),
    # CacheConfig.kv_cache_memory_bytes: first in 0.10.2 (vllm/config/cache.py), not in 0.10.1
    ("kv_cache_memory_bytes", dict(flag="--kv-cache-memory-bytes", check=_size, since=(0, 10, 2),
                                   why="--kv-cache-memory-bytes is not in vLLM before 0.10.2")),
    ("max_model_len", dict(flag="--max-model-len", check=_int(1))),
    ("max_num_seqs", dict(flag="--max-num-seqs", check=_int(1))),
    ("max_num_batched_tokens", dict(flag="--max-num-batched-tokens", check=_int(1))),
    # SchedulerConfig.max_num_active_seqs: first in 0.31.0 (vllm/config/scheduler.py)
    ("max_num_active_seqs", dict(flag="--max-num-active-seqs", check=_int(1), since=(0, 31),
                                 why="--max-num-active-seqs is not in vLLM before 0.31")),
    # SchedulerConfig.max_num_queued_reqs/_tokens: first in 0.29.0
    ("max_num_queued_reqs", dict(flag="--max-num-queued-reqs", check=_int(1), since=(0, 29),
                                 why="queue limits are not in vLLM before 0.29")),
    ("max_num_queued_tokens", dict(flag="--max-num-queued-tokens", check=_int(1), since=(0, 29),
                                   why="queue limits are not in vLLM before 0.29")),
    ("block_size", dict(flag="--block-size", check=_block_size)),
    ("preemption_mode", dict(flag="--preemption-mode", check=_choice("recompute", "swap"),
                             until=(0, 11), v0_fallback=True,
                             why="the V1 engine (vLLM 0.11 and later) always recomputes and "
                                 "rejects --preemption-mode")),
    ("swap_space", dict(flag="--swap-space", check=_float_min0, until=(0, 18),
                        why="--swap-space was removed in vLLM 0.18")),
    # BooleanOptionalAction (so --no-...) already in 0.8.0: V1 caches prefixes by default, and
    # `false` must be said or caching stays on
    ("enable_prefix_caching", dict(flag="--enable-prefix-caching", check=_bool,
                                   negative="--no-enable-prefix-caching", negative_since=(0, 8))),
    # 0.8.0-0.8.4: StoreBoolean (`--enable-chunked-prefill false`); BooleanOptionalAction from 0.8.5
    ("enable_chunked_prefill", dict(flag="--enable-chunked-prefill", check=_bool,
                                    negative="--no-enable-chunked-prefill", negative_since=(0, 8, 5),
                                    negative_before=["--enable-chunked-prefill", "false"])),
    ("enforce_eager", dict(flag="--enforce-eager", check=_bool)),
    ("tensor_parallel_size", dict(flag="--tensor-parallel-size", check=_int(1))),
    # 0.8.3-0.8.5.post1 _is_v1_supported_oracle: `pipeline_parallel_size > 1 and
    # distributed_executor_backend != "ray"` -> V0 with the default backend (vllm/engine/arg_utils.py);
    # 0.9 accepts the default and mp backends
    ("pipeline_parallel_size", dict(flag="--pipeline-parallel-size", check=_int(1),
                                    v0_fallback=dict(since=(0, 8, 3), until=(0, 9), unless=("1",)))),
    # not in vllm/engine/arg_utils.py of 0.8.0-0.8.2, in 0.8.3 (DATA_PARALLEL_SINCE)
    ("data_parallel_size", dict(flag="--data-parallel-size", check=_int(1), since=DATA_PARALLEL_SINCE,
                                why="--data-parallel-size is not in vLLM before %s"
                                    % ".".join(str(p) for p in DATA_PARALLEL_SINCE))),
    ("dtype", dict(flag="--dtype",
                   check=_choice("auto", "half", "float16", "bfloat16", "float", "float32"))),
    # 0.8.0-0.8.1 _is_v1_supported_oracle: `self.kv_cache_dtype != "auto"` falls back to V0
    # (vllm/engine/arg_utils.py); from 0.8.2 only where the platform lacks the dtype
    ("kv_cache_dtype", dict(flag="--kv-cache-dtype", check=_string,
                            v0_fallback=dict(until=KV_DTYPE_V0_UNTIL, unless=("auto",)))),
    ("shutdown_timeout", dict(flag="--shutdown-timeout", check=_int(0), since=(0, 18),
                              why="--shutdown-timeout exists from vLLM 0.18; older servers abort "
                                  "in-flight requests on SIGTERM")),
    ("disable_log_stats", dict(flag="--disable-log-stats", check=_bool)),
    ("trust_remote_code", dict(flag="--trust-remote-code", check=_bool)),
    ("seed", dict(flag="--seed", check=_int(0))),
    ("download_dir", dict(flag="--download-dir", check=_string)),
    ("tokenizer", dict(flag="--tokenizer", check=_string)),
    ("chat_template", dict(flag="--chat-template", check=_string)),
    # TLS on the API server (vllm/entrypoints/openai/cli_args.py, 0.8.0 to 0.33.0): the role
    # renders them from its vllm_server_tls_* variables. --ssl-cert-reqs is Python's ssl.CERT_*
    # number: 0 none, 1 optional, 2 required (a client certificate).
    ("ssl_keyfile", dict(flag="--ssl-keyfile", check=_string)),
    ("ssl_certfile", dict(flag="--ssl-certfile", check=_string)),
    ("ssl_ca_certs", dict(flag="--ssl-ca-certs", check=_string)),
    ("ssl_cert_reqs", dict(flag="--ssl-cert-reqs", check=_int(0, 2))),
    # LoRA (docs/models.md): in every release of the table (vllm/engine/arg_utils.py; the
    # --lora-modules action in the entrypoints' cli_args.py); a real 0.32.0 CPU server serves them
    # (tests/live/test_lora_live.py)
    ("enable_lora", dict(flag="--enable-lora", check=_bool)),
    ("max_loras", dict(flag="--max-loras", check=_int(1))),
    ("max_lora_rank", dict(flag="--max-lora-rank", check=_lora_rank)),
    ("max_cpu_loras", dict(flag="--max-cpu-loras", check=_int(1))),
    ("fully_sharded_loras", dict(flag="--fully-sharded-loras", check=_bool)),
    ("lora_modules", dict(flag="--lora-modules", check=_lora_modules)),
    ("uvicorn_log_level", dict(flag="--uvicorn-log-level",
                               check=_choice("critical", "error", "warning", "info", "debug",
                                             "trace"))),
)
_OPTION_MAP = dict(OPTIONS)
_SECRET_KEYS = ("api_key", "hf_token")

# Flags met in extra_args that some releases lack; the table's answer when no manifest of the
# installed vLLM is at hand. `value`: the flag takes a value (dropped with it). Checked in the
# vLLM sources (vllm/engine/arg_utils.py) of each release named.
EXTRA_FLAGS = {
    # multi-step scheduling (V0): in 0.10.0, not in 0.10.1; _is_v1_supported_oracle 0.8.0-0.10.0
    # falls back to V0 for any value but the default (vllm/engine/arg_utils.py)
    "--num-scheduler-steps": dict(value=True, until=(0, 10, 1), v0_fallback=True),
    # a no-op since the V2 block manager became the only one: in 0.9.x, not in 0.10.0
    "--use-v2-block-manager": dict(value=False, until=(0, 10)),
    # deprecated in 0.10.1 for --enable-log-requests; in 0.16.0, not in 0.17.0; back in 0.33.0 as
    # the inverse of --enable-log-requests (EnableDisableAction, vllm/utils/argparse_utils.py)
    "--disable-log-requests": dict(value=False, until=(0, 17), again=(0, 33),
                                   why="requests are not logged by default; "
                                       "--enable-log-requests (0.10.1+) turns logging on"),
    "--enable-log-requests": dict(value=False, since=(0, 10, 1)),
    "--no-enable-log-requests": dict(value=False, since=(0, 10, 1)),
    # V0 chunked-prefill tuning: in 0.26.0, not in 0.27.0; non-default values force V0 on 0.8-0.10
    "--max-num-partial-prefills": dict(value=True, until=(0, 27), v0_fallback=True),
    "--max-long-partial-prefills": dict(value=True, until=(0, 27), v0_fallback=True),
    # V0-only scheduling knobs: in 0.10.2, not in 0.11.0; any use forces V0 on 0.8-0.10
    "--disable-async-output-proc": dict(value=False, until=(0, 11), v0_fallback=True),
    "--scheduler-delay-factor": dict(value=True, until=(0, 11), v0_fallback=True),
    "--no-enable-prefix-caching": dict(value=False, since=(0, 8)),
    "--no-enable-chunked-prefill": dict(value=False, since=(0, 8, 5)),
}
for _key, _spec in OPTIONS:
    if "since" in _spec or "until" in _spec or "v0_fallback" in _spec:
        _row = dict((k, v) for k, v in _spec.items() if k in ("since", "until", "again", "why", "v0_fallback"))
        _row["value"] = _spec["check"] is not _bool
        EXTRA_FLAGS.setdefault(_spec["flag"], _row)
# vLLM 0.8-0.10 run the V1 engine unless an option it lacks is given (then V0, or an error with
# VLLM_USE_V1=1): EngineArgs._is_v1_supported_oracle in vllm/engine/arg_utils.py 0.8.0-0.10.2.
_V0_FALLBACK = ((0, 8), (0, 11))
# 0.11.0 still runs the oracle, but vllm/engine/llm_engine.py only aliases the V1 engine and
# vllm/entrypoints/openai/api_server.py asserts VLLM_USE_V1 after it: a trigger stops the server
_V0_GONE_ORACLE = ((0, 11), (0, 11, 1))

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


def _manifest_flags(manifest, ver, version, warnings):
    """The manifest's flags when it describes `version`, else None (with a warning if one was
    given for another version: the table decides then)."""
    if not manifest:
        return None
    flags = manifest.get("flags") if isinstance(manifest, dict) else None
    try:
        mver = parse_version(manifest.get("vllm_version"))
    except (AttributeError, ValueError):
        mver = None
    if not isinstance(flags, dict) or mver is None:
        warnings.append("the vLLM flag manifest is not readable (no vllm_version or flags); "
                        "flags checked against the collection's table instead")
        return None
    if mver[:3] != ver[:3]:
        warnings.append("the vLLM flag manifest describes %s, not %s; flags checked against the "
                        "collection's table instead" % (manifest.get("vllm_version"), version))
        return None
    return flags


def _lookup(flags, name):
    """The manifest entry argparse would use for a long flag: the flag itself, or the one flag
    it abbreviates (argparse's allow_abbrev); None when the parser would reject it."""
    if name in flags:
        return flags[name]
    matches = [f for f in flags if f.startswith(name)]
    return flags[matches[0]] if len(matches) == 1 else None


def _normalise(arg):
    """'--max_num_seqs=4' -> ('--max-num-seqs', '4'); FlexibleArgumentParser reads underscores
    as dashes, and '--json-arg.key' sets a key of --json-arg."""
    name, eq, value = arg.partition("=")
    name = "--" + name[2:].split(".", 1)[0].replace("_", "-")
    return name, (value if eq else None)


def _in_range(spec, ver):
    if "again" in spec and ver >= spec["again"]:
        return True
    return not ("since" in spec and ver < spec["since"] or "until" in spec and ver >= spec["until"])


def _v0_trigger(spec, ver, value):
    """Whether `value` of this row makes the oracle of `ver` leave the V1 engine."""
    rule = spec.get("v0_fallback")
    if not rule:
        return False
    if isinstance(rule, dict):
        if "since" in rule and ver < rule["since"] or "until" in rule and ver >= rule["until"]:
            return False
        if value is not None and str(value) in rule.get("unless", ()):
            return False
    return True


def _table_reason(spec, version):
    if spec.get("why"):
        return spec["why"]
    if "since" in spec:
        return "not in vLLM before %s" % ".".join(str(p) for p in spec["since"])
    return "removed in vLLM %s" % ".".join(str(p) for p in spec["until"])


def _choice_problem(entry, value):
    choices = (entry or {}).get("choices")
    if choices and str(value) not in [str(c) for c in choices]:
        return "the installed vLLM accepts only %s" % ", ".join(str(c) for c in choices)
    return None


def render(config, version, device="cuda", var_prefix="", context="", manifest=None,
           strict=False, allow_v0_engine=False):
    """Options dict -> (argv list, warnings list). Raises VllmArgsError on bad input.

    None values are left out (so a default can be unset with null). `var_prefix` turns option
    names into the caller's variable names in messages; `context` is appended (an instance name).
    `manifest` (what roles/server/files/vllm_flag_manifest.py wrote from the installed vLLM)
    decides which flags and choices the version accepts; without it, the table above does.
    A flag the version lacks is left out with a warning, or refused when `strict`. On vLLM
    0.8-0.10, options that make vLLM fall back to the V0 engine are left out with a warning
    unless `allow_v0_engine`.
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
    flags = _manifest_flags(manifest, ver, version, warnings)
    source = "the installed vLLM %s" % version if flags is not None else "vLLM %s" % version
    v0_window = _V0_FALLBACK[0] <= ver < _V0_FALLBACK[1]
    v0_gone = _V0_GONE_ORACLE[0] <= ver < _V0_GONE_ORACLE[1]

    def v0_gone_text(name):
        return ("%s makes vLLM %s's engine check ask for the V0 engine, which it no longer has: "
                "the server stops at start-up" % (name, version))

    def v0_hint(name):
        return ("%s makes vLLM %s fall back from the V1 engine to V0 (or fail with "
                "VLLM_USE_V1=1); set %sallow_v0_engine: true to use it anyway"
                % (name, version, var_prefix))

    def rejected(name, text):
        """A flag the version does not accept: refused when strict, else left out."""
        message = "not accepted by %s: %s" % (source, text)
        if strict:
            raise VllmArgsError("%s%s: %s (%sstrict_flags is on; turn it off to leave such "
                                "flags out with a warning)" % (name, where, message, var_prefix))
        warnings.append("%s%s left out: %s" % (name, where, message))

    for key, spec in OPTIONS:
        value = config.get(key)
        if value is None:
            continue
        rendered, problem = spec["check"](value, ver, device)
        if problem:
            fail(key, "%r is not valid for vLLM %s on %s: %s" % (value, version, device, problem))
        label = "%s%s=%r" % (var_prefix, key, value)
        if rendered is False:
            words = []
            if spec.get("negative"):
                if flags is not None:
                    words = [spec["negative"]] if spec["negative"] in flags else (
                        spec.get("negative_before") or [])
                elif ver >= spec.get("negative_since", (0,)):
                    words = [spec["negative"]]
                else:
                    words = spec.get("negative_before") or []
        elif rendered is True:
            words = [spec["flag"]]
        elif isinstance(rendered, list):
            words = [spec["flag"]] + rendered   # nargs='+'
        else:
            words = [spec["flag"], rendered]
        if flags is not None:
            entry = flags.get(spec["flag"])
            if entry is None:
                rejected(label, "the flag manifest has no %s" % spec["flag"])
                continue
            if rendered not in (True, False) and not isinstance(rendered, list):
                choice = _choice_problem(entry, rendered)
                if choice:
                    fail(key, "%r is not valid for vLLM %s: %s" % (value, version, choice))
        elif not _in_range(spec, ver):
            rejected(label, spec["why"])
            continue
        # after the presence checks: a flag the version lacks is reported as such
        if v0_gone and _v0_trigger(spec, ver, rendered):
            rejected(label, v0_gone_text(spec["flag"]))
            continue
        if v0_window and not allow_v0_engine and _v0_trigger(spec, ver, rendered):
            warnings.append("%s%s left out: %s" % (label, where, v0_hint(spec["flag"])))
            continue
        argv.extend(words)
        if key == "disable_log_stats" and value:
            warnings.append("%sdisable_log_stats%s removes the engine metrics: cache_gate and "
                            "the monitor cannot see the KV cache" % (var_prefix, where))

    extra = config.get("extra_args") or []
    if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
        fail("extra_args", "must be a list of strings, each one command-line argument")
    index = 0
    while index < len(extra):
        arg = extra[index]
        index += 1
        secret = _secret_flag(arg)
        if secret:
            fail("extra_args", "%s (%s) must not be on the command line, where ps, the unit file "
                 "and logs show it; use the role's secret variables (%sapi_key, %shf_token), "
                 "which go to the 0600 environment file" % (arg.split("=", 1)[0], secret,
                                                            var_prefix, var_prefix))
        if not arg.startswith("--") or arg == "--":
            argv.append(arg)
            continue
        name, value = _normalise(arg)
        table = EXTRA_FLAGS.get(name, {})
        entry = _lookup(flags, name) if flags is not None else None
        takes_value = entry.get("takes_value") if entry else table.get("value")
        if takes_value is None:
            # a flag nobody knows: its value is the next word unless that is a flag too
            takes_value = index < len(extra) and not extra[index].startswith("-")
        words = [arg]
        if value is None and takes_value and index < len(extra):
            value = extra[index]
            words.append(value)
            index += 1
        label = "%sextra_args %s" % (var_prefix, " ".join(words))
        if flags is not None:
            if entry is None:
                rejected(label, "the flag manifest has no %s" % name)
                continue
            choice = _choice_problem(entry, value) if value is not None else None
            if choice:
                fail("extra_args", "%s %r is not valid for vLLM %s: %s"
                     % (name, value, version, choice))
        elif table and not _in_range(table, ver):
            rejected(label, _table_reason(table, version))
            continue
        if v0_gone and _v0_trigger(table, ver, value):
            rejected(label, v0_gone_text(name))
            continue
        if v0_window and not allow_v0_engine and _v0_trigger(table, ver, value):
            warnings.append("%s%s left out: %s" % (label, where, v0_hint(name)))
            continue
        argv.extend(words)
    return argv, warnings
