"""Record /metrics captures from real vLLM CPU servers as unit-test fixtures.

usage: python tests/support/capture_fixtures.py [--port-range LO-HI] [--workdir DIR] [CONDITION ...]

Writes tests/fixtures/metrics/vllm-<version>-cpu-<condition>-<i>.txt and updates MANIFEST.json
with the vLLM version, the server's command line, the load and the seconds between captures.
Loads are bounded and go to loopback only. One server at a time; every server is stopped
(SIGTERM, then SIGKILL) before the next condition starts, whatever happened.

Conditions (run `capture_fixtures.py --list`):
  idle, busy, kv-exhausted, cap2     the original three-sample captures (every 2 s)
  long-prefill        a deeper model (make_tiny_model.py --layers 8 --hidden 1024 --kv-heads 1,
                      made under --workdir if absent): one ~3,900-token prompt prefilled in ONE
                      engine step (--max-num-batched-tokens 4096) with short requests queued
                      behind it; sampled every 1 s through the step and until tokens flow
  client-disconnect   8 streaming requests, 6 of whose clients close the connection mid-stream
                      (2.5 s in); vLLM 0.32 CPU did NOT count them in
                      request_success{finished_reason="abort"}
  small-batched-tokens  --max-num-batched-tokens 64 (chunked prefill) under long prompts with a
                      large cache and a high --max-num-seqs
  queued-rejections   --max-num-queued-reqs 4 under a burst: HTTP 503 and
                      vllm:admission_rejections_total{reason="max_num_queued_reqs"}
  queued-token-rejections  --max-num-queued-tokens 1000 under a burst of ~300-token prompts:
                      reason="max_num_queued_tokens"
  engine-core-killed  SIGKILL of the VLLM::EngineCore child during in-flight requests
  dp2-one-overloaded  --data-parallel-size 2, every request sent to rank 0 (X-data-parallel-rank)
  sleep-mode          --enable-sleep-mode, VLLM_SERVER_DEV_MODE=1, POST /sleep?level=1
  lora-deferred       --enable-lora --max-loras 1, two adapters requested at once
A condition the CPU build refuses (a server that does not start, an endpoint that errors) writes
no fixture; its real error text goes to --workdir/<condition>-error.txt.

Manifest entries of the windowed conditions (all but the original four) also carry:
  window_index     the sample's position in its window (0, 1, ...), for every sample
  health_status    the HTTP status of GET /health taken right after the /metrics scrape, or
                   null when /health gave no HTTP answer (health_error says why: "refused",
                   "timeout", ...)
  metrics          the fixture file name, or null when GET /metrics gave no HTTP 200 answer
                   (metrics_error says why). Such a sample has NO .txt file: its manifest key is
                   "vllm-<ver>-cpu-<condition>-<i>.nometrics" and its sequence_index is null, so
                   that tests/unit/fixtures.sequence() (which reads a file per sequence_index)
                   skips it; use window_index to see the whole window.
  what_happened    what the server really did during the window (HTTP statuses, finish reasons,
                   request timings), the same text for every sample of the window
  events           [(seconds_after_first, event)] of the window: loads started, kills, ...
"""

from __future__ import annotations

import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from vllm_server import PYTHON, Load, VllmServer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "fixtures", "metrics")
MIB = 1024 * 1024
PORTS = (18100, 18199)
WORKDIR = os.environ.get("KVFLEET_CAPTURE_WORKDIR", "/work/captures-11")
VOCAB = "def class return import self value list dict for while if else None".split()

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


# ---------------------------------------------------------------------------------------------
# ports, servers


def port():
    """A free loopback port in PORTS (other jobs share this machine)."""
    for p in range(PORTS[0], PORTS[1] + 1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                continue
            return p
    raise RuntimeError("no free port in %d-%d" % PORTS)


class Server(VllmServer):
    """VllmServer with a chosen model folder and extra environment."""

    def __init__(self, model=None, env_extra=None, **kwargs):
        kwargs.setdefault("port", port())
        VllmServer.__init__(self, **kwargs)
        if model:
            self.argv[4] = model
        self.model = model
        self.env_extra = env_extra or {}

    def env(self):
        env = VllmServer.env(self)
        env.update(self.env_extra)
        return env

    def stop(self, sig=signal.SIGTERM, timeout=30):
        # also reap a server whose API process died but left children in its session
        proc = self.proc
        VllmServer.stop(self, sig, timeout)
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass

    def argv_text(self):
        argv = list(self.argv[1:])
        argv[3] = "MODEL"
        return " ".join(argv)


def probe(url, path, timeout=10, method="GET"):
    """(status or None, body text or None, error or None) of one HTTP call."""
    req = urllib.request.Request(url + path, method=method,
                                 data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace"), None
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace"), None
    except urllib.error.URLError as e:
        reason = e.reason
        if isinstance(reason, ConnectionRefusedError):
            return None, None, "refused"
        if isinstance(reason, socket.timeout):
            return None, None, "timeout"
        return None, None, repr(reason)[:200]
    except socket.timeout:
        return None, None, "timeout"
    except ConnectionError as e:
        return None, None, type(e).__name__
    except Exception as e:  # noqa: BLE001 - recorded, not raised
        return None, None, repr(e)[:200]


def descendants(pid):
    """[(pid, cmdline)] of every process below pid."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open("/proc/%s/cmdline" % d, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append((int(d), cmd))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child[0])
    return out


def words(n, seed=0, unique=False):
    """n words (about n tokens); unique: a seeded random sequence, so that prompts of
    different seeds share no cached prefix block (the cyclic default shares most of them)."""
    if unique:
        rnd = random.Random(seed)
        return " ".join(rnd.choice(VOCAB) for _word in range(n))
    return " ".join(VOCAB[(seed * 7 + i * 3) % len(VOCAB)] for i in range(n))


# ---------------------------------------------------------------------------------------------
# a client process: requests on a schedule, streaming or not, closing early or not


class Client(object):
    """Requests from a separate process (keeps the load off this process's GIL).

    spec: [{"at": s after start, "path": "/v1/completions", "body": {...}, "headers": {...},
            "close_after_chunks": n or None, "close_at_s": s or None}]; body["stream"] decides
           streaming; a stream is closed by the client after n chunks or at s after start.
    results(): per request {status, finish_reason, usage, t_sent, t_first, t_end, chunks,
    closed_early, error, body} with times in seconds after the client started (t0 given back).
    """

    def __init__(self, url, spec):
        fd, self.spec_path = tempfile.mkstemp(prefix="kvfleet-client-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump({"url": url, "spec": spec}, f)
        self.out = self.spec_path + ".out"
        self.started = time.time()
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "_client",
                                      self.spec_path, self.out])

    def done(self):
        return self.proc.poll() is not None

    def results(self, timeout=600):
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        try:
            with open(self.out) as f:
                data = json.load(f)
        except (OSError, ValueError):
            data = {"t0": self.started, "results": []}
        for p in (self.spec_path, self.out):
            if os.path.exists(p):
                os.unlink(p)
        return data

    def cancel(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for p in (self.spec_path, self.out):
            if os.path.exists(p):
                os.unlink(p)


def _one_request(url, item, t0):
    r = {"status": None, "finish_reason": None, "usage": None, "t_sent": None, "t_first": None,
         "t_end": None, "chunks": 0, "closed_early": False, "error": None, "body": None}
    delay = t0 + item.get("at", 0) - time.time()
    if delay > 0:
        time.sleep(delay)
    host, p = url.split("//", 1)[1].split(":")
    conn = http.client.HTTPConnection(host, int(p), timeout=item.get("timeout", 600))
    body = item.get("body")
    headers = {"Content-Type": "application/json"}
    headers.update(item.get("headers") or {})
    r["t_sent"] = round(time.time() - t0, 3)
    try:
        conn.request(item.get("method", "POST"), item.get("path", "/v1/completions"),
                     body=json.dumps(body).encode() if body is not None else b"",
                     headers=headers)
        resp = conn.getresponse()
        r["status"] = resp.status
        stream = bool(body and body.get("stream"))
        if resp.status != 200 or not stream:
            data = resp.read()
            r["t_first"] = r["t_end"] = round(time.time() - t0, 3)
            try:
                doc = json.loads(data)
                choice = (doc.get("choices") or [{}])[0]
                r["finish_reason"] = choice.get("finish_reason")
                r["usage"] = doc.get("usage")
                if resp.status != 200:
                    r["body"] = data[:300].decode(errors="replace")
            except ValueError:
                r["body"] = data[:300].decode(errors="replace")
        else:
            close_after = item.get("close_after_chunks")
            while True:
                line = resp.fp.readline()
                if not line:
                    break
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    break
                if r["t_first"] is None:
                    r["t_first"] = round(time.time() - t0, 3)
                r["chunks"] += 1
                try:
                    doc = json.loads(payload)
                    fr = (doc.get("choices") or [{}])[0].get("finish_reason")
                    if fr:
                        r["finish_reason"] = fr
                    if doc.get("usage"):
                        r["usage"] = doc["usage"]
                except ValueError:
                    pass
                close_at = item.get("close_at_s")
                if (close_after and r["chunks"] >= close_after) or (
                        close_at is not None and time.time() - t0 >= close_at):
                    r["closed_early"] = True
                    # close the socket itself: the server sees the client go away
                    try:
                        conn.sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    break
            r["t_end"] = round(time.time() - t0, 3)
    except Exception as e:  # noqa: BLE001 - recorded
        r["error"] = repr(e)[:300]
        r["t_end"] = round(time.time() - t0, 3)
    finally:
        conn.close()
    return r


def _run_client(spec_path, out):
    with open(spec_path) as f:
        doc = json.load(f)
    t0 = time.time()
    results = [None] * len(doc["spec"])

    def run(i):
        results[i] = _one_request(doc["url"], doc["spec"][i], t0)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(doc["spec"]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(out, "w") as f:
        json.dump({"t0": t0, "results": results}, f)


def completion_body(prompt_words, max_tokens, seed=0, stream=False, model="tiny-llama",
                    unique=False, **kw):
    body = {"model": model, "prompt": words(prompt_words, seed, unique),
            "max_tokens": max_tokens,
            "temperature": 1.0, "ignore_eos": True}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(kw)
    return body


def summarize(results):
    """Counts of statuses / finish reasons of a client's results."""
    statuses, reasons = {}, {}
    for r in results:
        statuses[str(r["status"])] = statuses.get(str(r["status"]), 0) + 1
        reasons[str(r["finish_reason"])] = reasons.get(str(r["finish_reason"]), 0) + 1
    return "HTTP statuses %s; finish reasons %s" % (
        json.dumps(statuses, sort_keys=True), json.dumps(reasons, sort_keys=True))


# ---------------------------------------------------------------------------------------------
# windows of samples


class Window(object):
    """Samples of /metrics + /health of one server, written as one condition's fixtures."""

    def __init__(self, srv, condition, description, load=None):
        self.srv, self.condition, self.description, self.load = srv, condition, description, load
        self.samples, self.events = [], []
        self.t0 = None
        self.version = json.loads(probe(srv.url, "/version")[1])["version"]

    def now(self):
        return round(time.time() - self.t0, 3) if self.t0 else 0.0

    def event(self, text):
        self.events.append((self.now(), text))

    def start(self):
        self.t0 = time.time()

    def sample(self):
        if self.t0 is None:
            self.start()
        taken = time.time()
        status, text, err = probe(self.srv.url, "/metrics", timeout=10)
        h_status, _body, h_err = probe(self.srv.url, "/health", timeout=5)
        self.samples.append({"taken": taken, "status": status, "text": text, "error": err,
                             "health_status": h_status, "health_error": h_err,
                             "health_after": round(time.time() - taken, 3)})
        return self.samples[-1]

    def sample_every(self, interval, count=None, until=None, max_count=40):
        """Samples `interval` s apart (from the window's t0 grid) while count / until allow."""
        while True:
            if count is not None and len(self.samples) >= count:
                return
            if len(self.samples) >= max_count:
                return
            if until is not None and self.samples and until():
                return
            i = len(self.samples)
            if self.t0 is not None:
                time.sleep(max(0.0, self.t0 + i * interval - time.time()))
            self.sample()

    def entries(self, what_happened, extra=None):
        out = {}
        for i, s in enumerate(self.samples):
            has_text = s["status"] == 200 and s["text"] is not None
            base = "vllm-%s-cpu-%s-%d" % (self.version, self.condition, i)
            name = base + (".txt" if has_text else ".nometrics")
            if has_text:
                with open(os.path.join(OUT, name), "w") as f:
                    f.write(s["text"])
            e = {
                "version": self.version, "device": "cpu", "condition": self.condition,
                "description": self.description,
                "sequence_index": i if has_text else None, "window_index": i,
                "seconds_after_first": round(s["taken"] - self.t0, 3),
                "server_argv": self.srv.argv_text(),
                "load": self.load,
                "captured": time.strftime("%Y-%m-%d", time.gmtime(s["taken"])),
                "health_status": s["health_status"],
                "metrics": name if has_text else None,
                "what_happened": what_happened,
                "events": self.events,
            }
            if s["health_status"] is None:
                e["health_error"] = s["health_error"]
            if not has_text:
                e["metrics_error"] = s["error"] or "HTTP %s" % s["status"]
            e.update(extra or {})
            out[name] = e
        return out


def record_error(condition, text):
    os.makedirs(WORKDIR, exist_ok=True)
    path = os.path.join(WORKDIR, "%s-error.txt" % condition)
    with open(path, "w") as f:
        f.write(text.rstrip() + "\n")
    print("%s: refused, see %s" % (condition, path), flush=True)


def start_or_record(condition, srv):
    """srv started, or None with the real error recorded."""
    try:
        srv.start()
        return srv
    except RuntimeError as e:
        text = "argv: %s\n\n%s\n\n--- full server log ---\n" % (" ".join(srv.argv), e)
        try:
            with open(srv.log_path, errors="replace") as f:
                text += f.read()[-20000:]
        except OSError:
            pass
        srv.cleanup()
        record_error(condition, text)
        return None


def finished(results, i):
    r = results[i]
    return "status %s finish %s prompt_tokens %s sent %.1fs first %.1fs end %.1fs" % (
        r["status"], r["finish_reason"], (r["usage"] or {}).get("prompt_tokens"),
        r["t_sent"] or 0, r["t_first"] or -1, r["t_end"] or -1)


# ---------------------------------------------------------------------------------------------
# the new conditions


def deep_model():
    path = os.path.join(WORKDIR, "deep-llama")
    if not os.path.exists(os.path.join(path, "config.json")):
        subprocess.check_call([PYTHON, os.path.join(HERE, "make_tiny_model.py"), path,
                               "--layers", "8", "--hidden", "1024", "--intermediate", "4096",
                               "--kv-heads", "1", "--max-positions", "4096"],
                              env=dict(os.environ, HF_HUB_OFFLINE="1"))
    return path


def cond_long_prefill():
    cond = "long-prefill"
    long_words, shorts = 1400, 3   # 3,800 tokens took 50 s in one step here: too long a window
    srv = Server(model=deep_model(), kv_bytes=32 * MIB, max_num_seqs=16, max_model_len=4096,
                 extra=["--max-num-batched-tokens", "4096"], start_timeout=400)
    if not start_or_record(cond, srv):
        return {}
    try:
        spec = [{"at": 0, "body": completion_body(long_words, 8, seed=1, stream=True)}]
        spec += [{"at": 1.5 + 0.2 * k, "body": completion_body(8, 16, seed=10 + k, stream=True)}
                 for k in range(shorts)]
        load = {"requests": 1 + shorts, "stream": True, "long_prompt_words": long_words, "long_max_tokens": 8,
                "short_requests": shorts, "short_prompt_words": 8, "short_max_tokens": 16,
                "short_sent_at_s": [1.5 + 0.2 * k for k in range(shorts)]}
        w = Window(srv, cond, "deep model (8 layers, hidden 1024): one long prompt prefilled "
                   "in a single engine step (--max-num-batched-tokens 4096), 3 short requests "
                   "sent 1.5 s later queue behind it", load)
        w.sample()          # baseline, just before the long prompt
        client = Client(srv.url, spec)
        w.event("long prompt sent")
        w.sample_every(1.0, until=client.done, max_count=40)
        w.sample_every(1.0, count=len(w.samples) + 2)   # tokens flowed, all finished
        data = client.results()
        res = data["results"]
        off = data["t0"] - w.t0
        lp = res[0]
        step = (lp["t_first"] or 0) - (lp["t_sent"] or 0)
        what = ("long request: %s (streaming: %.1f s from send to its first token, the "
                "prefill step). Short requests: %s. Times count from the client's start, %.2f s "
                "after the window's first sample. %s" % (
                    finished(res, 0), step, "; ".join(finished(res, k) for k in range(1, len(res))),
                    off, summarize(res)))
        return w.entries(what, {"client_t0_after_first": round(off, 3),
                                "model": "make_tiny_model.py --layers 8 --hidden 1024 "
                                         "--intermediate 4096 --kv-heads 1 --max-positions 4096"})
    finally:
        srv.cleanup()


def cond_long_prefill_queued():
    """Long prefill steps with requests visibly waiting: the old rules' false admission_stall.

    Without chunked prefill a prompt is prefilled in one step, and two 1200-token prompts do not
    fit one step's budget of 2048 tokens: while one is prefilled (all gauges frozen), the gauges
    still show the one left waiting at the end of the step before.
    """
    cond = "long-prefill-queued"
    n, words_each = 3, 1200
    srv = Server(model=deep_model(), kv_bytes=32 * MIB, max_num_seqs=16, max_model_len=2048,
                 extra=["--max-num-batched-tokens", "2048", "--no-enable-chunked-prefill"],
                 start_timeout=400)
    if not start_or_record(cond, srv):
        return {}
    try:
        spec = [{"at": 0.05 * k, "body": completion_body(words_each, 4, seed=20 + k, stream=True)}
                for k in range(n)]
        load = {"requests": n, "stream": True, "prompt_words": words_each, "max_tokens": 4,
                "sent_at_s": [0.05 * k for k in range(n)]}
        w = Window(srv, cond, "deep model, --no-enable-chunked-prefill, --max-num-batched-tokens "
                   "2048: 3 prompts of ~1200 tokens sent at once; each is prefilled in a step of "
                   "its own while the others wait", load)
        w.sample()
        client = Client(srv.url, spec)
        w.event("3 long prompts sent")
        w.sample_every(1.0, until=client.done, max_count=90)
        w.sample_every(1.0, count=len(w.samples) + 2)
        data = client.results()
        res = data["results"]
        off = data["t0"] - w.t0
        what = ("%s. Times count from the client's start, %.2f s after the window's first "
                "sample. %s" % ("; ".join(finished(res, k) for k in range(len(res))), off,
                                summarize(res)))
        return w.entries(what, {"client_t0_after_first": round(off, 3),
                                "model": "make_tiny_model.py --layers 8 --hidden 1024 "
                                         "--intermediate 4096 --kv-heads 1 --max-positions 4096"})
    finally:
        srv.cleanup()


def cond_client_disconnect():
    cond = "client-disconnect"
    srv = Server(kv_bytes=8 * MIB, max_num_seqs=16)
    if not start_or_record(cond, srv):
        return {}
    try:
        spec = [{"at": 0, "body": completion_body(40, 400, seed=k, stream=True),
                 "close_after_chunks": 3 if k < 6 else None, "timeout": 300}
                for k in range(8)]
        # the 6 early closers wait a little so that sample 0 sees 8 running
        for k in range(6):
            spec[k]["close_after_chunks"] = None
            spec[k]["close_at_s"] = 2.5
        load = {"requests": 8, "stream": True, "prompt_words": 40, "max_tokens": 400,
                "closed_by_client": 6, "close_after_s": 2.5}
        w = Window(srv, cond, "8 streaming requests; the clients of 6 close their connections "
                   "mid-stream about 2.5 s in", load)
        client = Client(srv.url, spec)
        time.sleep(1.0)
        w.start()
        w.event("8 streams started 1 s before")
        w.sample_every(1.0, count=6)
        w.sample_every(1.0, until=client.done, max_count=60)
        w.sample()
        res = client.results()["results"]
        what = "%s. Per request: %s" % (summarize(res), "; ".join(
            "#%d %s chunks=%d closed_early=%s end=%.1fs" % (
                k, r["finish_reason"], r["chunks"], r["closed_early"], r["t_end"] or -1)
            for k, r in enumerate(res)))
        return w.entries(what)
    finally:
        srv.cleanup()


def cond_small_batched_tokens():
    cond = "small-batched-tokens"
    srv = Server(kv_bytes=64 * MIB, max_num_seqs=64,
                 extra=["--max-num-batched-tokens", "64", "--enable-chunked-prefill"])
    if not start_or_record(cond, srv):
        return {}
    try:
        n, prompt, max_tokens = 48, 900, 100
        spec = [{"at": 0, "body": completion_body(prompt, max_tokens, seed=k, unique=True)}
                for k in range(n)]
        load = {"requests": n, "concurrency": n, "prompt_words": prompt, "max_tokens": max_tokens,
                "prompts": "distinct random word sequences (no shared prefix blocks)"}
        w = Window(srv, cond, "--max-num-batched-tokens 64 (chunked prefill), 64 MiB cache "
                   "(2048 blocks), --max-num-seqs 64, 48 concurrent ~900-token distinct "
                   "prompts: requests wait for the token budget while the cache has room and "
                   "running < max-num-seqs", load)
        client = Client(srv.url, spec)
        time.sleep(1)
        w.start()
        w.event("48 requests sent 1 s before")
        w.sample_every(1.0, count=5)
        w.sample_every(1.0, until=client.done, max_count=40)
        w.sample()
        res = client.results()["results"]
        ends = sorted(r["t_end"] or 0 for r in res)
        what = "%s; prompt tokens per request %s; requests ended between %.1f and %.1f s " \
               "after they were sent" % (summarize(res), sorted(set(
                   (r["usage"] or {}).get("prompt_tokens") for r in res)), ends[0], ends[-1])
        return w.entries(what)
    finally:
        srv.cleanup()


def _rejection_window(cond, flag, value, spec, load, description, parts):
    """A burst against a queue limit: samples until every request answered, then what each
    part of the load got (parts: [(label, first index, end index)]) and one rejected body."""
    srv = Server(kv_bytes=8 * MIB, max_num_seqs=16, extra=[flag, value])
    if not start_or_record(cond, srv):
        return {}
    try:
        w = Window(srv, cond, description, load)
        w.sample()
        client = Client(srv.url, spec)
        w.event("burst of 16 sent")
        w.sample_every(1.0, count=5)
        w.sample_every(1.0, until=client.done, max_count=40)
        w.sample()
        res = client.results()["results"]
        bodies = sorted(set(r["body"][:200] for r in res if r["status"] != 200 and r["body"]))
        what = "; ".join("%s: %s" % (label, summarize(res[lo:hi])) for label, lo, hi in parts)
        return w.entries("%s; a rejected request's body: %s" % (what, bodies[:1]))
    finally:
        srv.cleanup()


def cond_queued_rejections():
    spec = [{"at": 0, "body": completion_body(20, 300, seed=k)} for k in range(16)]
    spec += [{"at": 2.0, "body": completion_body(20, 50, seed=20 + k)} for k in range(8)]
    load = {"burst": {"requests": 16, "prompt_words": 20, "max_tokens": 300},
            "second_burst_at_s": 2.0,
            "second_burst": {"requests": 8, "prompt_words": 20, "max_tokens": 50}}
    return _rejection_window(
        "queued-rejections", "--max-num-queued-reqs", "4", spec, load,
        "--max-num-queued-reqs 4 under a burst of 16 requests and another of 8 two seconds later",
        [("first burst", 0, 16), ("second burst", 16, 24)])


def cond_queued_token_rejections():
    spec = [{"at": 0, "body": completion_body(300, 200, seed=k, unique=True)} for k in range(16)]
    spec += [{"at": 2.0 + 0.5 * k, "body": completion_body(300, 50, seed=40 + k, unique=True)}
             for k in range(4)]
    load = {"burst": {"requests": 16, "prompt_words": 300, "max_tokens": 200},
            "then": {"requests": 4, "sent_at_s": [2.0, 2.5, 3.0, 3.5], "prompt_words": 300,
                     "max_tokens": 50}}
    return _rejection_window(
        "queued-token-rejections", "--max-num-queued-tokens", "1000", spec, load,
        "--max-num-queued-tokens 1000 under a burst of 16 ~300-token prompts, then 4 single "
        "requests 0.5 s apart", [("burst", 0, 16), ("the 4 later single requests", 16, 20)])


def cond_engine_core_killed():
    cond = "engine-core-killed"
    srv = Server(kv_bytes=8 * MIB, max_num_seqs=16)
    if not start_or_record(cond, srv):
        return {}
    try:
        spec = [{"at": 0, "body": completion_body(40, 900, seed=k), "timeout": 120}
                for k in range(8)]
        load = {"requests": 8, "concurrency": 8, "prompt_words": 40, "max_tokens": 900}
        w = Window(srv, cond, "SIGKILL of the VLLM::EngineCore process of a server with 8 "
                   "requests in flight; sampled every 0.25 s until the API server exits, then every "
                   "1 s to about 12 s", load)
        client = Client(srv.url, spec)
        time.sleep(2)
        w.start()
        w.event("8 requests in flight since 2 s before")
        w.sample()
        tree = descendants(srv.proc.pid)
        core = [(p, c) for p, c in tree if "EngineCore" in c]
        killed = None
        if core:
            killed = core[0]
            os.kill(killed[0], signal.SIGKILL)
            w.event("SIGKILL to pid %d (%s)" % killed)
        else:
            w.event("no EngineCore child found in %s" % tree)
        exit_code, exit_at = None, None
        # every 0.25 s while the API server lives (it went down within 2 s here), then 1 s
        while exit_code is None and w.now() < 5:
            time.sleep(max(0.0, w.t0 + 0.1 + 0.25 * len(w.samples) - time.time()))
            w.sample()
            if srv.proc.poll() is not None:
                exit_code, exit_at = srv.proc.returncode, w.now()
                w.event("API server exited with %s (seen at)" % exit_code)
        t_next = w.now()
        for k in range(12 - int(t_next)):
            time.sleep(max(0.0, w.t0 + int(t_next) + 1 + k - time.time()))
            w.sample()
            if exit_code is None and srv.proc.poll() is not None:
                exit_code, exit_at = srv.proc.returncode, w.now()
                w.event("API server exited with %s (seen at)" % exit_code)
        if exit_code is None:
            try:
                exit_code = srv.proc.wait(20)
                exit_at = w.now()
            except subprocess.TimeoutExpired:
                exit_code = "still running 20 s after the last sample"
        res = client.results(timeout=60)["results"]
        what = ("process tree before the kill: %s. Killed: %s. API server (pid %d) exit code: "
                "%s at %s s. In-flight requests: %s; per request %s. Server log tail: %s" % (
                    [c[:60] for _pid, c in tree], killed and killed[1][:60], srv.proc.pid,
                    exit_code, exit_at, summarize(res),
                    ["%s/%s/%s" % (r["status"], r["finish_reason"], (r["error"] or r["body"] or "")[:80])
                     for r in res][:3], srv.log_tail(8)[-1500:]))
        return w.entries(what, {"api_server_exit_code": exit_code})
    finally:
        srv.cleanup()


def cond_dp2_one_overloaded():
    cond = "dp2-one-overloaded"
    srv = Server(kv_bytes=2 * MIB, max_num_seqs=16, extra=["--data-parallel-size", "2"],
                 start_timeout=400)
    if not start_or_record(cond, srv):
        return {}
    try:
        spec = [{"at": 0, "body": completion_body(200, 800, seed=k),
                 "headers": {"X-data-parallel-rank": "0"}, "timeout": 600} for k in range(24)]
        load = {"requests": 24, "concurrency": 24, "prompt_words": 200, "max_tokens": 800,
                "header": "X-data-parallel-rank: 0"}
        w = Window(srv, cond, "--data-parallel-size 2, 2 MiB KV cache per engine; 24 long "
                   "requests all sent to rank 0 with X-data-parallel-rank: 0, rank 1 idle", load)
        client = Client(srv.url, spec)
        time.sleep(3)
        w.start()
        w.event("24 requests to rank 0 since 3 s before")
        w.sample_every(1.0, count=10)
        client.cancel()
        w.event("client stopped after the window")
        return w.entries("24 requests to rank 0 in flight during the whole window (client "
                         "killed after the window); see the engine=\"0\"/\"1\" series")
    finally:
        srv.cleanup()


def cond_sleep_mode():
    cond = "sleep-mode"
    srv = Server(kv_bytes=8 * MIB, max_num_seqs=16, extra=["--enable-sleep-mode"],
                 env_extra={"VLLM_SERVER_DEV_MODE": "1"})
    if not start_or_record(cond, srv):
        return {}
    try:
        w = Window(srv, cond, "--enable-sleep-mode, VLLM_SERVER_DEV_MODE=1: one sample awake, "
                   "then POST /sleep?level=1 and samples while asleep", None)
        w.sample()
        st, body, err = probe(srv.url, "/sleep?level=1", timeout=60, method="POST")
        w.event("POST /sleep?level=1 -> %s %s" % (st, (body or err or "")[:200]))
        sl = probe(srv.url, "/is_sleeping", timeout=10)
        w.event("GET /is_sleeping -> %s %s" % (sl[0], (sl[1] or sl[2] or "")[:100]))
        if st != 200:
            record_error(cond, "POST /sleep?level=1 -> %s %s %s\n\nserver log tail:\n%s" % (
                st, body, err, srv.log_tail(40)))
        w.sample_every(1.0, count=5)
        req = completion(srv.url)
        w.event("a completion while asleep -> %s" % (req,))
        wk = probe(srv.url, "/wake_up", timeout=60, method="POST")
        w.event("POST /wake_up -> %s %s" % (wk[0], (wk[1] or wk[2] or "")[:100]))
        w.sample()
        return w.entries("POST /sleep?level=1 answered %s %s; /is_sleeping %s; the last sample "
                         "is after POST /wake_up (%s)" % (st, (body or err or "")[:100],
                                                          (sl[1] or "").strip()[:60], wk[0]))
    finally:
        srv.cleanup()


def completion(url, timeout=30):
    st, body, err = None, None, None
    data = json.dumps(completion_body(8, 4)).encode()
    req = urllib.request.Request(url + "/v1/completions", data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            st, body = r.status, r.read()[:100].decode(errors="replace")
    except urllib.error.HTTPError as e:
        st, body = e.code, e.read()[:200].decode(errors="replace")
    except Exception as e:  # noqa: BLE001
        err = repr(e)[:200]
    return st, body or err


def make_adapters(base):
    """Two rank-8 LoRA adapters (q_proj, v_proj) for the tiny model, without peft."""
    import torch  # noqa: F401 - only in the venv python, see main()
    from safetensors.torch import save_file
    with open(os.path.join(base, "config.json")) as f:
        cfg = json.load(f)
    h, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    q_out = cfg["num_attention_heads"] * cfg.get("head_dim", h // cfg["num_attention_heads"])
    v_out = cfg["num_key_value_heads"] * cfg.get("head_dim", h // cfg["num_attention_heads"])
    paths = []
    for k, name in enumerate(("lora-a", "lora-b")):
        d = os.path.join(WORKDIR, name)
        os.makedirs(d, exist_ok=True)
        g = torch.Generator().manual_seed(k)
        tensors = {}
        for i in range(layers):
            for proj, out in (("q_proj", q_out), ("v_proj", v_out)):
                pre = "base_model.model.model.layers.%d.self_attn.%s" % (i, proj)
                tensors[pre + ".lora_A.weight"] = (torch.randn(8, h, generator=g) * 0.01).half()
                tensors[pre + ".lora_B.weight"] = (torch.randn(out, 8, generator=g) * 0.01).half()
        save_file(tensors, os.path.join(d, "adapter_model.safetensors"))
        with open(os.path.join(d, "adapter_config.json"), "w") as f:
            json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 8, "lora_alpha": 16,
                       "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False,
                       "target_modules": ["q_proj", "v_proj"], "base_model_name_or_path": base,
                       "modules_to_save": None}, f, indent=1)
        paths.append(d)
    return paths


def cond_lora_deferred():
    cond = "lora-deferred"
    from vllm_server import MODEL
    if not os.path.exists(os.path.join(WORKDIR, "lora-b", "adapter_config.json")):
        subprocess.check_call([PYTHON, os.path.abspath(__file__), "_adapters", MODEL])
    a, b = os.path.join(WORKDIR, "lora-a"), os.path.join(WORKDIR, "lora-b")
    srv = Server(kv_bytes=8 * MIB, max_num_seqs=16,
                 extra=["--enable-lora", "--max-loras", "1", "--max-lora-rank", "8",
                        "--lora-modules", "lora-a=" + a, "lora-b=" + b])
    if not start_or_record(cond, srv):
        return {}
    try:
        spec = [{"at": 0, "body": completion_body(20, 900, seed=k,
                                                  model="lora-a" if k % 2 == 0 else "lora-b"),
                 "timeout": 600} for k in range(12)]
        load = {"requests": 12, "concurrency": 12, "models": "6 x lora-a, 6 x lora-b",
                "prompt_words": 20, "max_tokens": 900}
        w = Window(srv, cond, "--enable-lora --max-loras 1 with two adapters, 6 requests for "
                   "each at once: one adapter's requests run, the other's wait", load)
        client = Client(srv.url, spec)
        time.sleep(2)
        w.start()
        w.event("12 requests (6 per adapter) since 2 s before")
        w.sample_every(1.0, until=client.done, max_count=30)
        res = client.results()["results"]
        w.event("all requests finished")
        w.sample()
        what = "%s; per adapter end times: lora-a %s, lora-b %s" % (
            summarize(res), [r["t_end"] for r in res[0::2]], [r["t_end"] for r in res[1::2]])
        return w.entries(what)
    finally:
        srv.cleanup()


# canary analysis: two servers under the same load, sampled side by side (canary, baseline)
CANARY_LOAD = (600, 12, 150, 100)   # per server: requests, at a time, prompt words, max tokens
CANARY_PAIRS = (
    # pair, canary server, description
    ("canary-same", dict(kv_bytes=8 * MIB, max_num_seqs=16),
     "canary and baseline with the same flags (8 MiB KV, --max-num-seqs 16) under the same load"),
    ("canary-idle", None,
     "the same two servers; the load goes to the baseline only (a canary not in the load balancer)"),
    ("canary-small-kv", dict(kv_bytes=2 * MIB, max_num_seqs=16),
     "canary with a 2 MiB KV cache (64 blocks) beside the 8 MiB baseline, the same load on each"),
    ("canary-low-seqs", dict(kv_bytes=8 * MIB, max_num_seqs=4),
     "canary with --max-num-seqs 4 beside the --max-num-seqs 16 baseline, the same load on each"),
)


def _canary_window(pair, canary, baseline, description, loaded, samples=20, interval=1.0):
    """One pair's window: the same load on each server in `loaded`, both sampled every
    `interval` s on one clock, canary first. Returns the manifest entries of both sides."""
    load = dict(zip(("requests", "concurrency", "prompt_words", "max_tokens"), CANARY_LOAD))
    load["servers"] = "canary and baseline, one load process each" if len(loaded) == 2 \
        else "baseline only"
    sides = {"canary": Window(canary, pair + "-canary", description, load),
             "baseline": Window(baseline, pair + "-baseline", description, load)}
    loads = [Load(srv.url, *CANARY_LOAD) for srv in loaded]
    try:
        # until every loaded server runs requests, then 2 s more for the queues to settle
        deadline = time.time() + 60
        while time.time() < deadline and not all(
                _gauge(probe(s.url, "/metrics")[1], "vllm:num_requests_running") > 0 for s in loaded):
            time.sleep(0.5)
        time.sleep(2)
        t0 = time.time()
        for w in sides.values():
            w.t0 = t0
        for i in range(samples):
            time.sleep(max(0.0, t0 + i * interval - time.time()))
            sides["canary"].sample()
            sides["baseline"].sample()
    finally:
        for running in loads:
            running.cancel()
    what = ("%d requests per loaded server (%s), %d at a time, %d prompt words, %d max tokens, "
            "ignore_eos; the load processes were cancelled after the last sample"
            % (CANARY_LOAD[0], load["servers"], CANARY_LOAD[1], CANARY_LOAD[2], CANARY_LOAD[3]))
    out = {}
    for side, w in sides.items():
        peer = "baseline" if side == "canary" else "canary"
        out.update(w.entries(what, {"pair": pair, "side": side, "peer": pair + "-" + peer}))
    return out


def _gauge(text, name):
    """The sum of a gauge's series in a /metrics text (0 when absent)."""
    total = 0.0
    for line in (text or "").splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _healthy(srv, timeout=240):
    """Whether a launched server answers /health within `timeout` s (it started beside another)."""
    deadline = time.time() + timeout
    while time.time() < deadline and srv.proc.poll() is None:
        if srv.health() == 200:
            return True
        time.sleep(1)
    return False


def _port_except(taken):
    for p in range(PORTS[0], PORTS[1] + 1):
        if p == taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                continue
            return p
    raise RuntimeError("no free port in %d-%d" % PORTS)


def _wait_idle(srv, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        text = probe(srv.url, "/metrics")[1]
        if _gauge(text, "vllm:num_requests_running") + _gauge(text, "vllm:num_requests_waiting") == 0:
            return
        time.sleep(0.5)


def cond_canary_pairs():
    """Every canary pair, with at most two servers at a time: the baseline stays up, each
    canary is started after the previous one was stopped."""
    entries = {}
    baseline = Server(kv_bytes=8 * MIB, max_num_seqs=16)
    canary = None
    try:
        baseline.launch()
        for pair, flags, description in CANARY_PAIRS:
            if flags is not None:
                if canary is not None:
                    canary.cleanup()
                # the baseline has not bound its port yet: never hand the canary the same one
                canary = Server(port=_port_except(baseline.port), **flags)
                if not start_or_record(pair, canary):
                    canary = None
                    continue
                if not _healthy(baseline):
                    record_error("canary-baseline", "the baseline did not start:\n%s" % baseline.log_tail(40))
                    return entries
            if canary is None:
                continue
            _wait_idle(canary)
            _wait_idle(baseline)
            loaded = [canary, baseline] if pair != "canary-idle" else [baseline]
            entries.update(_canary_window(pair, canary, baseline, description, loaded))
            print("%s: %d samples" % (pair, len(entries)), flush=True)
        return entries
    finally:
        if canary is not None:
            canary.cleanup()
        baseline.cleanup()


NEW_CONDITIONS = {
    "long-prefill": cond_long_prefill,
    "long-prefill-queued": cond_long_prefill_queued,
    "client-disconnect": cond_client_disconnect,
    "small-batched-tokens": cond_small_batched_tokens,
    "queued-rejections": cond_queued_rejections,
    "queued-token-rejections": cond_queued_token_rejections,
    "engine-core-killed": cond_engine_core_killed,
    "dp2-one-overloaded": cond_dp2_one_overloaded,
    "sleep-mode": cond_sleep_mode,
    "lora-deferred": cond_lora_deferred,
    "canary-pairs": cond_canary_pairs,
}


# ---------------------------------------------------------------------------------------------
# the original conditions


def capture(condition, samples=3, interval=2.0):
    kwargs, load, settle, desc = CONDITIONS[condition]
    entries = {}
    with Server(**kwargs) as srv:
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
                "server_argv": srv.argv_text(),
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


def run_condition(cond):
    if cond in CONDITIONS:
        return capture(cond)
    entries = NEW_CONDITIONS[cond]()
    if entries:
        version = next(iter(entries.values()))["version"]
        # stale files of an earlier, longer window
        keep = set(entries)
        prefix = "vllm-%s-cpu-%s-" % (version, cond)
        for n in os.listdir(OUT):
            if n.startswith(prefix) and n not in keep and n[len(prefix):].split(".")[0].isdigit():
                os.unlink(os.path.join(OUT, n))
    return entries


def main(argv):
    global WORKDIR, PORTS
    conditions = []
    it = iter(argv)
    for a in it:
        if a == "--port-range":
            lo, hi = next(it).split("-")
            PORTS = (int(lo), int(hi))
        elif a == "--workdir":
            WORKDIR = next(it)
        elif a == "--list":
            print("\n".join(sorted(CONDITIONS) + list(NEW_CONDITIONS)))
            return
        else:
            conditions.append(a)
    os.makedirs(OUT, exist_ok=True)
    os.makedirs(WORKDIR, exist_ok=True)
    manifest_path = os.path.join(OUT, "MANIFEST.json")
    for cond in conditions or sorted(CONDITIONS) + list(NEW_CONDITIONS):
        t = time.time()
        entries = run_condition(cond)
        manifest = {}
        if os.path.exists(manifest_path):
            with open(manifest_path) as f:
                manifest = json.load(f)
        for name in [n for n, e in manifest.items() if e.get("condition") == cond
                     and e.get("window_index") is not None and n not in entries]:
            del manifest[name]
        manifest.update(entries)
        print("%s: %.0fs, %d samples" % (cond, time.time() - t, len(entries)), flush=True)
        with open(manifest_path, "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
            f.write("\n")


if __name__ == "__main__" and sys.argv[1:2] == ["_client"]:
    _run_client(sys.argv[2], sys.argv[3])
elif __name__ == "__main__" and sys.argv[1:2] == ["_adapters"]:
    make_adapters(sys.argv[2])
elif __name__ == "__main__":
    main(sys.argv[1:])
