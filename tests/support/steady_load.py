"""A steady client load: CONCURRENCY clients, each sending one completion after the other to URL,
until STOP_FILE exists; then it waits for what is in flight and writes one JSON summary to OUT.
Stdlib only. Used by the fleet scenario to count what a rolling restart behind the router loses.

usage: steady_load.py URL KEY_FILE CONCURRENCY MAX_TOKENS STOP_FILE OUT [--requests N] [--pause S] [--words W]
  KEY_FILE   holds the API key (never on a command line); empty file: no key
  --requests N   instead of running until STOP_FILE: N requests one after the other (latency)
  --pause S      each client waits S seconds between its requests (a load that leaves a 2-core
                 test machine room to start the vLLM being restarted)
  --words W      W more prompt words (a token each): requests that hold more KV cache

Each request asks for MAX_TOKENS tokens with ignore_eos, so "answered in full" is exact:
HTTP 200, finish_reason length and completion_tokens == MAX_TOKENS. "truncated" is an HTTP 200
that is not that (what a naive client takes for success); "failed" is everything else (refused,
reset, HTTP error, timeout, bad JSON). The summary has the counts, the median and p95 seconds of
the complete ones, the first errors, and the time of each failure.
"""
import json
import os
import sys
import threading
import time

from inflight import complete  # the same request and the same outcomes as the graceful-stop tests

args = sys.argv[1:]
requests_n = None
if "--requests" in args:
    i = args.index("--requests")
    requests_n = int(args[i + 1])
    del args[i:i + 2]
words = 0
if "--words" in args:
    i = args.index("--words")
    words = int(args[i + 1])
    del args[i:i + 2]
pause = 0.0
if "--pause" in args:
    i = args.index("--pause")
    pause = float(args[i + 1])
    del args[i:i + 2]
url, key_file, concurrency, max_tokens, stop_file, out = args
concurrency, max_tokens = int(concurrency), int(max_tokens)
with open(key_file) as f:
    key = f.read().strip()
lock = threading.Lock()
results = []


def one(i):
    r = complete(url, i, max_tokens, key, words=words)
    r["start"] = time.time() - r["seconds"]
    with lock:
        results.append(r)


def client(c):
    n = 0
    while not os.path.exists(stop_file):
        one(c * 100000 + n)
        n += 1
        time.sleep(pause)


t_start = time.time()
if requests_n is not None:
    for i in range(requests_n):
        one(i)
else:
    threads = [threading.Thread(target=client, args=(c,)) for c in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
complete = sorted(r["seconds"] for r in results if r["outcome"] == "complete")
summary = {k: sum(1 for r in results if r["outcome"] == k) for k in ("complete", "truncated", "failed")}
summary.update(
    sent=len(results), url=url, concurrency=concurrency, max_tokens=max_tokens,
    seconds=round(time.time() - t_start, 1),
    median_seconds=round(complete[len(complete) // 2], 4) if complete else None,
    p95_seconds=round(complete[int(len(complete) * 0.95)], 4) if complete else None,
    errors=[r.get("error") or r.get("finish_reason") for r in results if r["outcome"] != "complete"][:5],
    failed_at=[round(r["start"] - t_start, 1) for r in results if r["outcome"] != "complete"][:20])
with open(out, "w") as f:
    json.dump(summary, f)
print(json.dumps(summary))
