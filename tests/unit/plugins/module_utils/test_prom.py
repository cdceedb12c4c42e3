from __future__ import annotations

import math
import os

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils._prom import PromParseError, parse
from ansible_collections.kvfleet.vllm.tests.unit import fixtures

from prometheus_client import parser as prometheus_parser


def test_labels_escapes_comments_and_order():
    text = fixtures.read(os.path.join(fixtures.METRICS, "synthetic", "v1-two-engines.txt"))
    samples, types = parse(text)
    first = samples[0]
    assert first.name == "vllm:num_requests_running"
    assert first.labels == {"engine": "0", "model_name": 'org/"big"\\model\nv2'}
    assert types["vllm:num_requests_running"] == "gauge"
    nan = [s for s in samples if s.name.endswith("_seconds_sum")][0]
    assert math.isnan(nan.value)
    inf = [s for s in samples if s.name == "vllm:spec_decode_draft_acceptance_length"][0]
    assert inf.value == float("inf")
    stamped = [s for s in samples if s.name == "vllm:num_requests_waiting"][0]
    assert stamped.value == 0.0


@pytest.mark.parametrize("text, value", [
    ("a -Inf\n", float("-inf")), ("a 1e3\n", 1000.0), ("a{} 2\n", 2.0), ("  a 3\n", 3.0),
    ("a{x=\"1\",} 4\n", 4.0), ("a 5\r\n", 5.0),
])
def test_values(text, value):
    assert parse(text)[0][0].value == value


@pytest.mark.parametrize("name, found", [
    ("html.txt", "HTML page"),
    ("truncated-label.txt", "truncated"),
    ("truncated-no-newline.txt", "truncated"),
    ("json.txt", "JSON document"),
    ("empty.txt", "empty"),
])
def test_garbage_is_refused_with_what_was_found(name, found):
    with pytest.raises(PromParseError) as err:
        parse(fixtures.read(os.path.join(fixtures.GARBAGE, name)))
    assert found in str(err.value)


@pytest.mark.parametrize("text, found", [
    ("a{x=1} 2\n", "no quoted value"),
    ("a{x=\"1\" y=\"2\"} 2\n", "expected ','"),
    ("a{x=\"1\",x=\"2\"} 2\n", "duplicate label"),
    ("a abc\n", "is not a number"),
    ("a 1 2 3\n", "unexpected text"),
    ("a 1 notatime\n", "bad timestamp"),
    ("a\n", "has no value"),
    ("# only a comment\n", "no samples"),
    ("a 1\n{x=\"1\"} 2\n", "bad metric name"),
])
def test_malformed_lines_name_the_line(text, found):
    with pytest.raises(PromParseError) as err:
        parse(text)
    assert found in str(err.value)
    assert "line" in str(err.value) or "samples" in str(err.value)


def _order(sample):
    return (sample[0], sorted(sample[1].items()))


def _reference(text):
    """prometheus_client's reading of the same bytes, as comparable (name, labels, value)."""
    out = []
    for family in prometheus_parser.text_string_to_metric_families(text):
        for s in family.samples:
            out.append((s.name, dict(s.labels), s.value))
    return out


@pytest.mark.parametrize("name", fixtures.real_captures()
                         + ["synthetic/" + n for n in fixtures.synthetic()])
def test_differential_against_prometheus_client(name):
    text = fixtures.read(os.path.join(fixtures.METRICS, name))
    ours = [(s.name, s.labels, s.value) for s in parse(text)[0]]
    theirs = _reference(text)
    # prometheus_client regroups samples by family: compare in one order
    ours.sort(key=_order)
    theirs.sort(key=_order)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a[0] == b[0] and a[1] == b[1]
        assert a[2] == b[2] or (math.isnan(a[2]) and math.isnan(b[2]))


def test_there_are_real_captures_to_compare():
    # The differential test is only meaningful with recordings from real servers present.
    assert len(fixtures.real_captures()) >= 10


def _both_ways(text):
    """(samples, types) or the error message, parsed with and without the regular expression."""
    out = []
    for fast in (True, False):
        try:
            samples, types = parse(text, fast=fast)
            out.append(([(s.name, s.labels, "nan" if math.isnan(s.value) else s.value) for s in samples], types))
        except PromParseError as exc:
            out.append(("error", str(exc)))
    return out


def _every_fixture():
    for folder in (fixtures.METRICS, os.path.join(fixtures.METRICS, "synthetic"), fixtures.GARBAGE,
                   fixtures.HOSTILE):
        for name in sorted(os.listdir(folder)):
            if name.endswith(".txt"):
                yield os.path.join(folder, name)


@pytest.mark.parametrize("path", list(_every_fixture()), ids=os.path.basename)
def test_the_fast_way_reads_every_capture_as_the_careful_way(path):
    fast, careful = _both_ways(fixtures.read(path))
    assert fast == careful


# Lines at the edge of what the regular expression takes: each must come out exactly as the
# character-by-character parser has it (the same samples, or the same error).
@pytest.mark.parametrize("line", [
    'a{x="1",} 4', 'a{} 2', 'a{x="1",y="2"} 3 1700000000000', 'a{x="1"}5', 'a{x="1"}x 1',
    'a {x="1"} 1', 'a{x="1", y="2"} 1', 'a{ x="1"} 1', 'a{x="1" } 1', 'a{x = "1"} 1',
    'a{x="a\\"b"} 1', 'a{x="a\\\\b"} 1', 'a{x="a\\nb"} 1', 'a{x="a\\qb"} 1',
    'a{x="1",x="2"} 1', 'a{x="1"y="2"} 1', 'a{x="1",,} 1', 'a{,} 1', 'a{x="1"', 'a{x=1} 1',
    'a{:x="1"} 1', 'a{x:y="1"} 1', 'a:b_c{x="1"} NaN', 'a{x="1"} +Inf', 'a{x="1"} 1_000',
    'a{x="1"} 1 2 3', 'a{x="1"} 1 x', 'a{x="1"}', 'a-1 2', '1a 2', 'a{x="\u00e9\u2028"} 1',
    'a{x="1"}\t2', 'a{x="1"}\u00a02', 'a{x="1"} 2\r', 'a{x="}"} 1', 'a{x="{"} 1', 'a{x="1"}{y="2"} 1',
])
def test_the_fast_way_agrees_on_edge_lines(line):
    fast, careful = _both_ways("# TYPE a gauge\nok 1\n" + line + "\n")
    assert fast == careful
