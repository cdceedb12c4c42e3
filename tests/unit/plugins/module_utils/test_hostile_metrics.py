"""The hostile-input corpus through the parser, the normaliser and the diagnosis: every case ends
in a clear error or in a view that names what it refused and a verdict that is not healthy."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import (
    add_rates, diagnose)
from ansible_collections.kvfleet.vllm.plugins.module_utils._prom import parse
from ansible_collections.kvfleet.vllm.plugins.module_utils._vllm_metrics import (
    FIELDS, normalize)
from ansible_collections.kvfleet.vllm.tests.unit import fixtures

BODIES = fixtures.hostile_bodies()


def view(text):
    return normalize(parse(text)[0])


def window(text, samples=3):
    snaps = []
    for i in range(samples):
        snap = view(text)
        snap.pop("engines")
        snap.pop("models")
        snap.update(time=1000.0 + 2 * i, healthy=True)
        snaps.append(snap)
    return add_rates(snaps)


def test_every_corpus_file_is_listed_and_refused():
    assert len(fixtures.hostile_manifest()) >= 30
    listed = set(e["file"] for _c, e in BODIES)
    on_disk = set(f for f in os.listdir(fixtures.HOSTILE) if f.endswith(".txt"))
    assert listed == on_disk
    for name in sorted(on_disk):
        assert view(fixtures.read(os.path.join(fixtures.HOSTILE, name)))["invalid"], name


@pytest.mark.parametrize("case, entry", BODIES, ids=[c for c, _e in BODIES])
def test_hostile_body_is_refused_by_name_and_never_healthy(case, entry):
    v = view(fixtures.hostile_body(entry))
    # strict JSON: no NaN or infinity can reach a module result or the monitor's history
    json.dumps(v, allow_nan=False)
    refused = [e for e in v["invalid"] if e["field"] == entry["field"]]
    assert refused, "%s: nothing refused for %s: %s" % (case, entry["field"], v["invalid"])
    assert refused[0]["reason"] and refused[0]["series"]
    if entry["field"] in FIELDS:
        assert v[entry["field"]] is None
    result = diagnose(window(fixtures.hostile_body(entry)))
    assert result["verdict"] != "healthy"
    cause = [c for c in result["causes"] if c["id"] == "invalid_metrics"]
    assert cause and entry["field"] in cause[0]["evidence"]["fields"]
    json.dumps(result, allow_nan=False)


@pytest.mark.parametrize("name", fixtures.real_captures() + ["synthetic/" + n for n in fixtures.synthetic()])
def test_real_and_synthetic_captures_refuse_nothing(name):
    # NaN/+Inf in series the collection does not read (histogram sums, spec decode) are not its
    # business; V0's "None" labels and -1 hit-rate gauge are real values.
    v = view(fixtures.read(os.path.join(fixtures.METRICS, name)))
    assert v["invalid"] == []


def test_a_refused_value_makes_the_whole_field_unknown_not_a_partial_sum():
    text = ('vllm:num_requests_running{engine="0",model_name="m"} NaN\n'
            'vllm:num_requests_running{engine="1",model_name="m"} 3\n'
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2\n'
            'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.4\n')
    v = view(text)
    assert v["requests_running"] is None                  # not 3
    assert v["engines"]["1"]["requests_running"] == 3     # the good engine keeps its own view
    assert v["engines"]["0"]["requests_running"] is None
    assert v["kv_cache_usage"] == pytest.approx(0.3)      # other fields are unaffected


def test_duplicates_are_all_discarded_and_counted():
    text = ('vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.99\n'
            'vllm:num_requests_running{engine="0",model_name="m"} 1\n'
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.10\n'
            'vllm:kv_cache_usage_perc{model_name="m",engine="0"} 0.50\n')
    v = view(text)
    assert v["kv_cache_usage"] is None and v["requests_running"] == 1
    (entry,) = v["invalid"]
    assert (entry["field"], entry["count"]) == ("kv_cache_usage", 3)
    assert entry["reason"] == "duplicate series (3 copies, all discarded)"


def test_invalid_list_stays_small_for_a_flood_of_bad_values():
    text = "".join('vllm:num_requests_running{engine="%d",model_name="m"} NaN\n' % i
                   for i in range(5000))
    v = view(text)
    assert len(v["invalid"]) == 1 and v["invalid"][0]["count"] == 5000


def test_invalid_metrics_joins_other_causes_and_never_hides_a_worse_one():
    capped = ('vllm:num_requests_running{engine="0",model_name="m"} 2\n'
              'vllm:num_requests_waiting{engine="0",model_name="m"} 30\n'
              'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.1\n'
              'vllm:num_preemptions_total{engine="0",model_name="m"} -1\n'
              'vllm:generation_tokens_total{engine="0",model_name="m"} 5\n')
    snaps = window(capped)
    for i, snap in enumerate(snaps):
        snap["generation_tokens_total"] = 5 + 100 * i
    add_rates(snaps)
    result = diagnose(snaps, max_num_seqs=2)
    assert [c["id"] for c in result["causes"]] == ["concurrency_cap", "invalid_metrics"]
    assert result["verdict"] == "degraded"
    for i in (-2, -1):  # the latest two samples down: an outage, whatever else was seen
        snaps[i] = {"time": snaps[i]["time"], "healthy": False, "error": "refused"}
    assert diagnose(snaps)["verdict"] == "unhealthy"
