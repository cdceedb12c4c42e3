"""Live tests: real vLLM CPU servers on loopback, modules run through the real ansible CLI.

Needs what tests/setup.sh prepares (vLLM venv, tiny model, collection copy on
ANSIBLE_COLLECTIONS_PATH). These tests never skip: missing prerequisites are failures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from vllm_server import Load, VllmServer  # noqa: E402

MIB = 1024 * 1024


def run_module(module, args, check=False, timed=False):
    """Run one kvfleet.vllm module on localhost via `ansible`: (failed, result[, seconds])."""
    env = dict(os.environ, ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    cmd = ["ansible", "localhost", "-c", "local", "-e", "ansible_python_interpreter=%s" % sys.executable,
           "-m", "kvfleet.vllm.%s" % module, "-a", json.dumps(args)]
    if check:
        cmd.append("--check")
    t0 = time.time()
    # the exit code is read from the JSON result (a failed module exits 2)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    elapsed = time.time() - t0
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("ansible printed no JSON (rc %s):\n%s\n%s"
                             % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))
    result = out["plays"][0]["tasks"][0]["hosts"]["localhost"]
    if timed:
        return bool(result.get("failed")), result, elapsed
    return bool(result.get("failed")), result


# One idle server for the whole session: every start costs ~25 s of the live stage, and no test
# leaves it in another state (a warm-up completion ends; the cache is free again after it).
@pytest.fixture(scope="session")
def idle_server():
    with VllmServer(kv_bytes=8 * MIB, max_num_seqs=16) as srv:
        yield srv


# One capped server (--max-num-seqs 2) for the diagnose and gate tests that load it: each test
# waits until the previous load has left it (see under_load). 127.0.0.2, a bind other than the
# probes' default, is part of what the diagnose test proves.
@pytest.fixture(scope="session")
def capped_server():
    with VllmServer(kv_bytes=8 * MIB, max_num_seqs=2, host="127.0.0.2") as srv:
        yield srv


@pytest.fixture
def server_factory():
    started = []

    def make(**kwargs):
        srv = VllmServer(**kwargs).start()
        started.append(srv)
        return srv
    yield make
    for srv in started:
        srv.cleanup()


def requests_in(srv, state):
    text = srv.get("/metrics")
    for line in text.splitlines():
        if line.startswith("vllm:num_requests_%s{" % state):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def waiting_requests(srv):
    return requests_in(srv, "waiting")


def under_load(srv, n, concurrency, prompt_words, max_tokens, timeout=60):
    """Start a bounded load and wait until the server reports queued requests.

    Loads are sized to outlast the gate: on 2 busy cores the ansible CLI alone needs up to
    ~20 s to start a module. The caller cancels the load once it has what it needs.
    """
    # a shared server: an earlier test's cancelled load is aborted by vLLM when its clients go
    deadline = time.time() + timeout
    while requests_in(srv, "running") + waiting_requests(srv) > 0:
        if time.time() > deadline:
            raise AssertionError("the server was still busy %ss before this test's load" % timeout)
        time.sleep(0.5)
    load = Load(srv.url, n, concurrency, prompt_words, max_tokens)
    deadline = time.time() + timeout
    while waiting_requests(srv) < 1:
        if time.time() > deadline:
            load.cancel()
            raise AssertionError("no request queued %ss after the load started" % timeout)
        time.sleep(0.5)
    return load
