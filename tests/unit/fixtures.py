"""Paths and loaders for the recorded fixtures (see tests/fixtures/metrics/MANIFEST.json)."""

from __future__ import annotations

import glob
import json
import os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")
METRICS = os.path.join(ROOT, "metrics")
GARBAGE = os.path.join(ROOT, "garbage")
HOSTILE = os.path.join(ROOT, "hostile")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def real_captures():
    """Every capture recorded from a real vLLM server, by file name."""
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(METRICS, "vllm-*.txt")))


def synthetic():
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(METRICS, "synthetic", "*.txt")))


def manifest():
    with open(os.path.join(METRICS, "MANIFEST.json"), encoding="utf-8") as f:
        return json.load(f)


def sequence(version, condition):
    """The timed captures of one condition, oldest first: [(seconds_after_first, text)]."""
    entries = [(name, e) for name, e in manifest().items()
               if e["version"] == version and e["condition"] == condition
               and e["sequence_index"] is not None]
    entries.sort(key=lambda item: item[1]["sequence_index"])
    return [(e["seconds_after_first"], read(os.path.join(METRICS, name))) for name, e in entries]


def hostile_manifest():
    """The hostile-input corpus (tests/fixtures/hostile/MANIFEST.json): {case id: entry}."""
    with open(os.path.join(HOSTILE, "MANIFEST.json"), encoding="utf-8") as f:
        return json.load(f)["cases"]


def hostile_bodies():
    """The corpus cases that are a /metrics body: [(case id, entry)]."""
    return sorted((cid, e) for cid, e in hostile_manifest().items() if e.get("file"))


def hostile_body(entry):
    return read(os.path.join(HOSTILE, entry["file"]))


def replay(condition, version="0.32.0"):
    """What the gate's sampler would have returned from a recorded server, oldest first.

    Each manifest entry of the condition is one sample: its text normalised as the probe does
    it, its /health status, its time (1000 + seconds after the first sample); an entry whose
    'metrics' is null was refused (the server was gone). Captures without the 'metrics' key
    (the first ones) are the numbered files of the sequence.
    """
    # imported here: fixtures.py itself is read by tests that need no collection code
    from ansible_collections.kvfleet.vllm.plugins.module_utils._probe import (
        Response, sample)
    out = []
    entries = [(name, e) for name, e in manifest().items()
               if e["version"] == version and e["condition"] == condition
               and ("metrics" in e or e["sequence_index"] is not None)]
    entries.sort(key=lambda item: item[1]["seconds_after_first"])
    for name, e in entries:
        when = 1000.0 + e["seconds_after_first"]
        text = None if e.get("metrics", name) is None else read(os.path.join(METRICS, e.get("metrics", name)))

        def fetch(path, text=text, health=e.get("health_status", 200)):
            if text is None:
                return Response(None, b"", "[Errno 111] Connection refused")
            if path == "/metrics":
                return Response(200, text.encode())
            if path == "/health":
                return Response(health, b"")
            return Response(200, json.dumps({"version": version}).encode())
        out.append(sample(fetch, "http://127.0.0.1:8000", clock=lambda when=when: when))
    return out
