"""A /metrics body that repeats a series (one name and label set) with another value is not one
consistent reading: the normaliser names it (invalid_metrics), also for series no field of the
view reads (histogram buckets, other exporters' series), which the parser alone would accept.
Real vLLM 0.32.0 CPU captures (tests/fixtures/metrics/MANIFEST.json), one line injected."""

from __future__ import annotations

import os

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import add_rates, diagnose
from ansible_collections.kvfleet.vllm.plugins.module_utils._prom import parse, repeated_series
from ansible_collections.kvfleet.vllm.plugins.module_utils._vllm_metrics import normalize
from ansible_collections.kvfleet.vllm.tests.unit import fixtures

# (line prefix of the series repeated, what it is)
TARGETS = [
    ('vllm:time_to_first_token_seconds_bucket{', "a latency histogram bucket"),
    ('vllm:iteration_tokens_total_bucket{', "a vLLM histogram bucket no field reads"),
    ('process_resident_memory_bytes ', "another exporter's series (prometheus_client's)"),
    ('python_gc_objects_collected_total{', "another exporter's series with labels"),
]


def repeat(text, prefix, value="12345.0", labels_reversed=False):
    """The text with the first line starting with `prefix` repeated right after it at `value`."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith(prefix):
            head = line.rsplit(" ", 1)[0]
            if labels_reversed and "{" in head:
                name, rest = head.split("{", 1)
                head = "%s{%s}" % (name, ",".join(reversed(rest.rstrip("}").split(","))))
            lines.insert(i + 1, "%s %s" % (head, value))
            return "\n".join(lines), line
    raise AssertionError("no line starts with %r" % prefix)


def view(text, fast=True):
    return normalize(parse(text, fast=fast)[0])


def busy_window(prefix=None, value="12345.0"):
    """The busy captures as the gate's window, `prefix`'s series repeated in every sample."""
    snaps = []
    for seconds, text in fixtures.sequence("0.32.0", "busy"):
        if prefix:
            text, _line = repeat(text, prefix, value)
        snap = view(text)
        snap.pop("engines")
        snap.pop("models")
        snap.update(time=1000.0 + seconds, healthy=True)
        snaps.append(snap)
    return add_rates(snaps)


def test_real_captures_repeat_no_series():
    for name in fixtures.real_captures():
        samples, _types = parse(fixtures.read(os.path.join(fixtures.METRICS, name)))
        assert repeated_series(samples) == [], name


def test_the_busy_window_is_healthy_as_captured():
    assert diagnose(busy_window())["verdict"] == "healthy"


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("prefix", [t[0] for t in TARGETS], ids=[t[1] for t in TARGETS])
def test_a_series_repeated_with_another_value_is_refused_by_name(prefix, fast):
    text, line = repeat(fixtures.read(os.path.join(fixtures.METRICS, "vllm-0.32.0-cpu-busy-1.txt")),
                        prefix)
    name = line.split("{", 1)[0].split(" ", 1)[0]
    (entry,) = [e for e in view(text, fast)["invalid"] if e["field"] == name]
    assert entry["reason"] == "duplicate series with different values (2 copies)"
    assert entry["series"].startswith(name)
    assert entry["value"] == "%r vs 12345.0" % float(line.rsplit(" ", 1)[1])


@pytest.mark.parametrize("prefix", [t[0] for t in TARGETS], ids=[t[1] for t in TARGETS])
def test_the_gate_says_invalid_metrics_not_healthy(prefix):
    result = diagnose(busy_window(prefix))
    assert result["verdict"] == "degraded"
    (cause,) = [c for c in result["causes"] if c["id"] == "invalid_metrics"]
    assert cause["evidence"]["samples_with_invalid"] == 3
    assert prefix.rstrip("{ ") in cause["evidence"]["fields"]


def test_label_order_does_not_make_another_series():
    text, _line = repeat(fixtures.read(os.path.join(fixtures.METRICS, "vllm-0.32.0-cpu-busy-1.txt")),
                         'vllm:time_to_first_token_seconds_bucket{', labels_reversed=True)
    assert [e["field"] for e in view(text)["invalid"]] == ["vllm:time_to_first_token_seconds_bucket"]


def test_a_repeat_at_the_same_value_is_left_alone_where_no_field_reads_it():
    # one reading either way; Prometheus itself accepts a repeat at the same value
    path = os.path.join(fixtures.METRICS, "vllm-0.32.0-cpu-busy-1.txt")
    text = fixtures.read(path)
    line = [x for x in text.split("\n") if x.startswith("process_resident_memory_bytes ")][0]
    same, _line = repeat(text, "process_resident_memory_bytes ", line.rsplit(" ", 1)[1])
    assert view(same)["invalid"] == []


def test_a_field_series_repeated_is_reported_once_as_before():
    # the fields' own rule (every copy discarded) names it; no second entry for the same series
    text, _line = repeat(fixtures.read(os.path.join(fixtures.METRICS, "vllm-0.32.0-cpu-busy-1.txt")),
                         'vllm:num_requests_running{', "7.0")
    v = view(text)
    assert [(e["field"], e["reason"]) for e in v["invalid"]] == [
        ("requests_running", "duplicate series (2 copies, all discarded)")]
    assert v["requests_running"] is None


def test_repeated_series_lists_each_series_once_with_every_value_in_file_order():
    samples, _types = parse('a{x="1",y="2"} 1\nb 5\na{y="2",x="1"} 2\nb 5\nc 1\na{x="1",y="2"} 3\n')
    assert repeated_series(samples) == [("a", {"x": "1", "y": "2"}, [1.0, 2.0, 3.0]),
                                        ("b", {}, [5.0, 5.0])]


@pytest.mark.parametrize("prefix, field", [("process_start_time_seconds ", "process_start_time"),
                                           ('http_requests_total{', "http_requests_total")])
def test_the_edge_counters_of_a_repeated_series_are_not_read(prefix, field):
    # what the canary analysis reads beside the engine (a restart, 5xx answers): a repeated
    # series gives no value (None), and the normaliser names it as for any other series
    from ansible_collections.kvfleet.vllm.plugins.module_utils._vllm_metrics import edge_counters
    text = fixtures.read(os.path.join(fixtures.METRICS, "vllm-0.32.0-cpu-busy-1.txt"))
    samples = parse(text)[0]
    assert edge_counters(samples)[field] is not None
    repeated, _line = repeat(text, prefix)
    samples = parse(repeated)[0]
    assert edge_counters(samples)[field] is None
    assert prefix.rstrip("{ ") in [e["field"] for e in normalize(samples)["invalid"]]
