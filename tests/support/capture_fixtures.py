"""Record /metrics captures from real vLLM CPU servers as unit-test fixtures.

usage: python tests/support/capture_fixtures.py [CONDITION ...]
Writes tests/fixtures/metrics/<version>-<condition>-<i>.txt and updates MANIFEST.json with the
vLLM version, the server's command line, the load and the seconds between captures. Loads are
bounded and go to loopback only.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from vllm_server import Load, VllmServer  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "fixtures", "metrics")
MIB = 1024 * 1024

# condition -> (server kwargs, load (n, concurrency, prompt_words, max_tokens) or None,
#               seconds to wait after the load starts, description)
CONDITIONS = {
    "idle": (dict(kv_bytes=8 * MIB, max_num_seqs=16), None, 0,
             "fresh server, no request yet"),
    "busy": (dict(kv_bytes=8 * MIB, max_num_seqs=16), (32, 4, 40, 900), 2,
             "4 concurrent requests, cache and seq cap far from full"),
    "kv-exhausted": (dict(kv_bytes=2 * MIB, max_num_seqs=16), (32, 32, 200, 800), 2,
                     "2 MiB KV cache (64 blocks) under 32 concurrent long requests"),
    "cap2": (dict(kv_bytes=8 * MIB, max_num_seqs=2), (40, 40, 20, 900), 2,
             "--max-num-seqs 2 under 40 concurrent requests, large cache"),
}


def capture(condition, samples=3, interval=2.0):
    kwargs, load, settle, desc = CONDITIONS[condition]
    entries = {}
    with VllmServer(**kwargs) as srv:
        version = json.loads(srv.get("/version"))["version"]
        running = Load(srv.url, *load) if load else None
        time.sleep(settle)
        t0 = time.time()
        for i in range(samples):
            if i:
                time.sleep(max(0.0, t0 + i * interval - time.time()))
            taken = time.time()
            text = srv.get("/metrics")
            name = "vllm-%s-cpu-%s-%d.txt" % (version, condition, i)
            with open(os.path.join(OUT, name), "w") as f:
                f.write(text)
            entries[name] = {
                "version": version, "device": "cpu", "condition": condition,
                "description": desc, "sequence_index": i,
                "seconds_after_first": round(taken - t0, 3),
                "server_argv": " ".join(a for a in srv.argv[1:]).replace(srv.argv[4], "MODEL"),
                "load": None if not load else dict(zip(
                    ("requests", "concurrency", "prompt_words", "max_tokens"), load)),
                "captured": time.strftime("%Y-%m-%d", time.gmtime(taken)),
            }
        if running:
            results = running.results()
            ok = sum(1 for r in results if r[0] == 200)
            for e in entries.values():
                e["load_result"] = "%d/%d requests HTTP 200" % (ok, len(results))
            if condition == "busy" or condition == "cap2":
                # after the load: counters keep their history while gauges return to 0
                text = srv.get("/metrics")
                name = "vllm-%s-cpu-%s-after.txt" % (version, condition)
                with open(os.path.join(OUT, name), "w") as f:
                    f.write(text)
                entries[name] = dict(entries["vllm-%s-cpu-%s-0.txt" % (version, condition)],
                                     sequence_index=None, seconds_after_first=None,
                                     description=desc + "; captured after the load finished")
    return entries


def main(conditions):
    os.makedirs(OUT, exist_ok=True)
    manifest_path = os.path.join(OUT, "MANIFEST.json")
    manifest = {}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
    for cond in conditions or sorted(CONDITIONS):
        t = time.time()
        manifest.update(capture(cond))
        print("%s: %.0fs" % (cond, time.time() - t), flush=True)
        with open(manifest_path, "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
