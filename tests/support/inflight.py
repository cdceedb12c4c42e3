"""Send N completions at once to a local vLLM and report how each ended (stdlib only).

usage: inflight.py URL N MAX_TOKENS [API_KEY | @ENV_FILE]
@ENV_FILE reads VLLM_API_KEY from the instance's environment file, so that the key is on no
command line (the fleet's canary-secret check searches the hosts' journals).
https: INFLIGHT_CA (the CA file), INFLIGHT_CERT and INFLIGHT_KEY (a client certificate) from
the environment.
Prints one JSON object: counts of complete (HTTP 200, finish_reason length, all tokens),
truncated (HTTP 200 but aborted or short: what a naive client takes for success) and failed.
Bounded: N requests to one server (run it on that server's host), 300 s timeout each.
"""
import json
import os
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request


def read_key(key):
    """KEY, or VLLM_API_KEY from an instance's environment file for @ENV_FILE."""
    if key.startswith("@"):
        with open(key[1:]) as env:
            return dict(line.strip().split("=", 1) for line in env if "=" in line).get("VLLM_API_KEY", "").strip('"')
    return key


def complete(url, i, max_tokens, key="", context=None, words=0):
    """One completion of MAX_TOKENS tokens (ignore_eos), and how it ended: complete (HTTP 200,
    finish_reason length, every token), truncated (HTTP 200 but not that) or failed (anything
    else). The fleet's steady load (steady_load.py) counts with the same function. WORDS more
    prompt words (a token each with the tiny model's tokenizer) make a request hold more cache."""
    prompt = "def class return %d" % i + " def" * words
    body = json.dumps({"model": "tiny-llama", "prompt": prompt,
                       "max_tokens": max_tokens, "ignore_eos": True, "temperature": 1.0}).encode()
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    t0 = time.time()
    try:
        req = urllib.request.Request(url + "/v1/completions", data=body, headers=headers)
        with urllib.request.urlopen(req, timeout=300, context=context) as resp:
            data = json.load(resp)
        choice = data["choices"][0]
        done = (choice["finish_reason"] == "length"
                and data["usage"]["completion_tokens"] == max_tokens)
        return {"outcome": "complete" if done else "truncated",
                "finish_reason": choice["finish_reason"],
                "tokens": data["usage"]["completion_tokens"], "seconds": time.time() - t0}
    except Exception as exc:  # refused, reset, HTTP error, bad JSON: all count as failed
        return {"outcome": "failed", "error": repr(exc)[:200], "seconds": time.time() - t0}


def main():
    url, n, max_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    key = read_key(sys.argv[4] if len(sys.argv) > 4 else "")
    results = [None] * n
    context = None
    if url.startswith("https:"):
        context = ssl.create_default_context(cafile=os.environ.get("INFLIGHT_CA"))
        if os.environ.get("INFLIGHT_CERT"):
            context.load_cert_chain(os.environ["INFLIGHT_CERT"], os.environ.get("INFLIGHT_KEY"))

    def one(i):
        results[i] = complete(url, i, max_tokens, key, context)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    summary = {k: sum(1 for r in results if r["outcome"] == k) for k in ("complete", "truncated", "failed")}
    summary["requests"] = n
    summary["details"] = results
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
