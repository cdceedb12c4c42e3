"""analysis_load: the open-loop schedule (_load.run) on a fake clock and the module against a fake
vLLM (the completion answer recorded from vLLM 0.32.0 CPU, tests/fixtures/lora)."""

from __future__ import annotations

import json
import threading

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils import _fetch
from ansible_collections.kvfleet.vllm.plugins.module_utils._load import run
from ansible_collections.kvfleet.vllm.plugins.modules import analysis_load
from ansible_collections.kvfleet.vllm.tests.unit.plugins.modules.conftest import FakeResponse
from ansible_collections.kvfleet.vllm.tests.unit.plugins.modules.test_lora_adapter import COMPLETION


class Clock(object):
    """A clock that moves only when the schedule sleeps."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_each_target_gets_the_rate_for_the_duration():
    clock, seen = Clock(), []
    out = run([("a", lambda i: seen.append(("a", i))), ("b", lambda i: seen.append(("b", i)))],
              duration=10, rate=2, concurrency=4, wait=5, clock=clock, sleep=clock.sleep)
    # 2 per second for 10 s: indexes 0..19, the same ones on both servers
    assert sorted(i for n, i in seen if n == "a") == list(range(20)) == sorted(i for n, i in seen if n == "b")
    assert [(t["name"], t["sent"], t["ok"], t["failed"], t["skipped"]) for t in out["targets"]] == [
        ("a", 20, 20, 0, 0), ("b", 20, 20, 0, 0)]
    assert out["unfinished"] == 0


def test_the_stop_ends_the_load_before_its_duration():
    # the deploy's load runs for the analysis's longest window; the analysis may end sooner
    clock, seen = Clock(), []
    out = run([("a", seen.append)], duration=600, rate=1, concurrency=4, wait=5, clock=clock, sleep=clock.sleep,
              stop=lambda: clock() >= 30)
    assert seen == list(range(30)) and out["stopped"] is True
    assert out["targets"][0]["sent"] == 30
    out = run([("a", seen.append)], duration=3, rate=1, concurrency=4, wait=5, clock=clock, sleep=clock.sleep,
              stop=lambda: False)
    assert out["stopped"] is False and out["targets"][0]["sent"] == 3


def test_a_server_at_its_cap_is_skipped_not_queued_and_errors_are_counted():
    clock, gate = Clock(), threading.Event()

    def slow(index):
        gate.wait(5)    # held until the schedule is over: every request stays in flight

    def broken(index):
        return "HTTP 500: boom %d" % index

    senders = [("slow", slow), ("broken", broken)]
    finish = threading.Timer(0.5, gate.set)
    finish.start()
    out = run(senders, duration=5, rate=2, concurrency=3, wait=5, clock=clock, sleep=clock.sleep)
    slow_t, broken_t = out["targets"]
    # 10 due: 3 in flight at the cap, the 7 others were not sent
    assert (slow_t["sent"], slow_t["skipped"]) == (3, 7)
    assert slow_t["ok"] == 3 and slow_t["failed"] == 0
    assert broken_t["failed"] == broken_t["sent"] == 10 - broken_t["skipped"]
    assert broken_t["errors"][0].startswith("HTTP 500: boom") and len(broken_t["errors"]) == 3


class Vllm(object):
    """/v1/models and /v1/completions as far as the module sees them."""

    def __init__(self, tokens=None, status=200):
        self.posts, self.lock = [], threading.Lock()
        self.tokens, self.status = tokens, status

    def get(self, url, **kwargs):
        return FakeResponse(json.dumps({"object": "list", "data": [{"id": "tiny-llama"}]}).encode())

    def post(self, url, data=None, headers=None, **kwargs):
        body = json.loads(data)
        with self.lock:
            self.posts.append((url, body, headers, kwargs.get("timeout")))
        if self.status != 200:
            from urllib.error import HTTPError
            raise HTTPError(url, self.status, "status %d" % self.status, {}, None)
        answer = json.loads(COMPLETION)
        answer["usage"]["completion_tokens"] = self.tokens or body["max_tokens"]
        return FakeResponse(json.dumps(answer).encode())


@pytest.fixture
def vllm(monkeypatch):
    def make(**kwargs):
        srv = Vllm(**kwargs)
        monkeypatch.setattr(_fetch, "_get", srv.get)
        monkeypatch.setattr(_fetch, "_post", srv.post)
        return srv
    return make


ARGS = {"targets": [{"name": "new", "url": "http://10.0.0.3:8000", "api_key": "k-new"},
                    {"name": "old", "url": "http://10.0.0.2:8000", "host": "n2"}],
        "prompts": ["one", "two"], "duration": 1, "rate": 4, "max_tokens": 8, "request_timeout": 30}


def test_the_module_loads_every_target_with_the_prompts_in_turn(run_module, vllm):
    srv = vllm()
    failed, result = run_module(analysis_load, ARGS)
    assert not failed and not result["changed"]
    assert result["requests_sent"] == 8 and result["requests_failed"] == 0 and result["unfinished"] == 0
    assert [t["host"] for t in result["targets"]] == [None, "n2"]
    to_new = [p for p in srv.posts if p[0].startswith("http://10.0.0.3")]
    assert sorted(p[1]["prompt"] for p in to_new) == ["one", "one", "two", "two"]
    assert to_new[0][1] == {"model": "tiny-llama", "prompt": to_new[0][1]["prompt"], "max_tokens": 8,
                            "ignore_eos": True, "temperature": 1.0}
    assert to_new[0][2]["Authorization"] == "Bearer k-new" and to_new[0][3] == 30
    assert all("Authorization" not in p[2] for p in srv.posts if p[0].startswith("http://10.0.0.2"))
    assert "k-new" not in json.dumps(result)


def test_a_stop_file_ends_the_module_s_load(run_module, vllm, tmp_path):
    srv = vllm()
    stop = tmp_path / "stop"
    stop.write_text("")
    failed, result = run_module(analysis_load, dict(ARGS, duration=600, stop_file=str(stop)))
    # there at the start: not one request, and the result says why
    assert not failed and result["stopped"] is True and result["requests_sent"] == 0 and srv.posts == []
    assert "ended by the stop file" in result["msg"]
    failed, result = run_module(analysis_load, dict(ARGS, stop_file=str(tmp_path / "absent")))
    assert not failed and result["stopped"] is False and result["requests_sent"] == 8


def test_canary_analysis_targets_serve_as_they_are(run_module, vllm):
    """The deploy sends the load to the analysis's own targets, scheduler limits and all."""
    vllm()
    targets = [dict(t, max_num_seqs=2, max_model_len=1024, max_num_batched_tokens=256, max_num_active_seqs=2)
               for t in ARGS["targets"]]
    failed, result = run_module(analysis_load, dict(ARGS, targets=targets))
    assert not failed, result.get("msg")
    assert result["requests_sent"] == 8 and [t["name"] for t in result["targets"]] == ["new", "old"]


def test_short_or_refused_answers_are_failures(run_module, vllm):
    vllm(tokens=3)
    failed, result = run_module(analysis_load, ARGS)
    assert not failed and result["requests_failed"] == result["requests_sent"] == 8
    assert result["targets"][0]["errors"][0] == "3 of 8 tokens"
    vllm(status=503)
    failed, result = run_module(analysis_load, ARGS)
    assert result["requests_failed"] == 8 and result["targets"][1]["errors"][0].startswith("HTTP 503")


def test_check_mode_sends_nothing(run_module, vllm):
    srv = vllm()
    failed, result = run_module(analysis_load, dict(ARGS, _ansible_check_mode=True))
    assert not failed and result["requests_sent"] == 8 and srv.posts == []


@pytest.mark.parametrize("change, words", [
    ({"rate": 0}, "rate must be more than 0 and at most 100"),
    ({"prompts": []}, "prompts must be a non-empty list"),
    ({"duration": 4000}, "duration must be more than 0 and at most 3600"),
    ({"concurrency": 0}, "concurrency must be 1 to 64"),
    ({"request_timeout": 0}, "request_timeout must be more than 0"),
    ({"targets": [{"name": "x", "url": "ftp://x"}]}, "targets[0].url"),
])
def test_bad_input_is_named_and_nothing_is_sent(run_module, vllm, change, words):
    srv = vllm()
    failed, result = run_module(analysis_load, dict(ARGS, **change))
    assert failed and words in result["msg"] and srv.posts == []
