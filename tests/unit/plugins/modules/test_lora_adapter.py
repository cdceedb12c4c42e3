"""lora_adapter against answers recorded from a real vLLM CPU 0.32.0 (tests/fixtures/lora/)."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils import _fetch
from ansible_collections.kvfleet.vllm.plugins.module_utils._lora import (
    answer_text, completion_text, loaded_adapters)
from ansible_collections.kvfleet.vllm.plugins.modules import lora_adapter
from ansible_collections.kvfleet.vllm.tests.unit import fixtures
from ansible_collections.kvfleet.vllm.tests.unit.plugins.modules.conftest import FakeResponse

LORA = os.path.join(fixtures.ROOT, "lora")
BASE = "/var/tmp/kvfleet/tiny-llama"


def _capture(name):
    """The capture's body lines (the first line says which vLLM and condition made it)."""
    text = fixtures.read(os.path.join(LORA, name))
    assert text.startswith("# vLLM 0.32.0")
    return text.split("\n", 1)[1]


STATIC_MODELS = _capture("static_models.txt").strip().rsplit("\nHTTP ", 1)[0]
COMPLETION = [line for line in _capture("runtime_endpoints_1.txt").splitlines()
              if line.startswith('{"id":"cmpl-')][0]
NOT_FOUND = '{"detail":"Not Found"}'
ALREADY = ('{"error":{"message":"The lora adapter \'lora-a\' has already been loaded. If you want to load '
           'the adapter in place, set \'load_inplace\' to True.","type":"InvalidUserInput","param":null,"code":400}}')


def models(adapters):
    data = [{"id": BASE, "object": "model", "root": BASE, "parent": None}]
    data += [{"id": n, "object": "model", "root": p, "parent": BASE} for n, p in adapters.items()]
    return json.dumps({"object": "list", "data": data})


class Server(object):
    """A vLLM with runtime LoRA updates, as far as the module sees it."""

    def __init__(self, adapters=None, routes=True, completion=COMPLETION, load_status=200):
        self.adapters = dict(adapters or {})
        self.routes, self.completion, self.load_status = routes, completion, load_status
        self.calls = []

    def _answer(self, status, body):
        if status == 200:
            return FakeResponse(body.encode())
        from urllib.error import HTTPError
        import io
        return HTTPError("http://x", status, "error", {}, io.BytesIO(body.encode()))

    def get(self, url, **kwargs):
        self.calls.append(("GET", url.split("/", 3)[3]))
        return FakeResponse(models(self.adapters).encode())

    def post(self, url, data=None, **kwargs):
        path = "/" + url.split("/", 3)[3]
        body = json.loads(data)
        self.calls.append(("POST", path, body))
        if path.endswith("_lora_adapter") and not self.routes:
            raise self._answer(404, NOT_FOUND)
        if path == "/v1/load_lora_adapter":
            if body["lora_name"] in self.adapters:
                raise self._answer(400, ALREADY)
            if self.load_status != 200:
                raise self._answer(self.load_status, '{"error":{"message":"Call to add_lora method failed: Worker failed '
                                                     'with error \'LoRA rank 16 is greater than max_lora_rank 8.\'","code":500}}')
            self.adapters[body["lora_name"]] = body["lora_path"]
            return FakeResponse(b"Success: LoRA adapter added successfully.")
        if path == "/v1/unload_lora_adapter":
            if self.adapters.pop(body["lora_name"], None) is None:
                raise self._answer(404, '{"error":{"message":"cannot be found","code":404}}')
            return FakeResponse(b"Success: removed")
        if path == "/v1/completions":
            if isinstance(self.completion, int):
                raise self._answer(self.completion, '{"error":{"message":"boom","code":500}}')
            return FakeResponse(self.completion.encode())
        raise AssertionError(path)


@pytest.fixture
def server(monkeypatch):
    def make(**kwargs):
        srv = Server(**kwargs)
        monkeypatch.setattr(_fetch, "_get", srv.get)
        monkeypatch.setattr(_fetch, "_post", srv.post)
        return srv
    return make


ARGS = {"url": "http://127.0.0.1:8000", "name": "lora-a", "path": "/var/lib/vllm/models/loras/lora-a/r1"}


def test_parsers_on_real_answers():
    assert loaded_adapters(STATIC_MODELS) == {"lora-a": "/tmp/lora-helper/adapters/lora-a",
                                              "lora-b": "/tmp/lora-helper/adapters/lora-b"}
    assert completion_text(COMPLETION).startswith(' ""')
    assert answer_text(404, NOT_FOUND.encode()) == "HTTP 404: Not Found"
    assert "already been loaded" in answer_text(400, ALREADY.encode())
    with pytest.raises(ValueError):
        loaded_adapters(b"<html>")


def test_load_then_idempotent(run_module, server):
    srv = server()
    failed, result = run_module(lora_adapter, ARGS)
    assert not failed and result["changed"] and result["loaded"] and result["completion"]
    assert [a["action"] for a in result["actions"]] == ["load", "check"]
    assert srv.calls[-1] == ("POST", "/v1/completions", {"model": "lora-a", "prompt": "Hello", "max_tokens": 4,
                                                         "temperature": 0})
    failed, result = run_module(lora_adapter, ARGS)
    assert not failed and not result["changed"] and result["actions"] == []


def test_another_folder_is_replaced(run_module, server):
    srv = server(adapters={"lora-a": "/old/r0"})
    failed, result = run_module(lora_adapter, ARGS)
    assert not failed and result["changed"] and result["previous_path"] == "/old/r0"
    assert [a["action"] for a in result["actions"]] == ["unload", "load", "check"]
    assert srv.adapters == {"lora-a": ARGS["path"]}


def test_a_failing_completion_unloads_it_again(run_module, server):
    srv = server(completion=500)
    failed, result = run_module(lora_adapter, ARGS)
    assert failed and "a completion with it failed (HTTP 500: boom); unloaded again" in result["msg"]
    assert srv.adapters == {} and not result["loaded"]


def test_load_refused_names_vllms_reason(run_module, server):
    server(load_status=500)
    failed, result = run_module(lora_adapter, ARGS)
    assert failed and "LoRA rank 16 is greater than max_lora_rank 8" in result["msg"]


def test_without_runtime_updates_says_which_setting(run_module, server):
    server(routes=False)
    failed, result = run_module(lora_adapter, ARGS)
    assert failed and "vllm_server_lora_runtime_updates: true" in result["msg"]


def test_absent_and_check_mode(run_module, server):
    srv = server(adapters={"lora-a": ARGS["path"]})
    failed, result = run_module(lora_adapter, dict(ARGS, state="absent", _ansible_check_mode=True))
    assert not failed and result["changed"] and srv.adapters
    failed, result = run_module(lora_adapter, dict(ARGS, state="absent"))
    assert not failed and result["changed"] and srv.adapters == {}
    failed, result = run_module(lora_adapter, dict(ARGS, state="absent"))
    assert not failed and not result["changed"]


def test_bad_input(run_module, server):
    server()
    failed, result = run_module(lora_adapter, {"url": "http://127.0.0.1:8000", "name": "x"})
    assert failed and "path" in result["msg"]
    failed, result = run_module(lora_adapter, dict(ARGS, check_max_tokens=0))
    assert failed and "check_max_tokens: must be from 1 to 64" in result["msg"]
