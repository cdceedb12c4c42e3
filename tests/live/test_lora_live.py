"""LoRA adapters on a real vLLM CPU 0.32.0 (issue 16): the flags vllm_args renders start a server
that serves a staged adapter, and lora_adapter adds, replaces and removes one at runtime."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import urllib.request

from conftest import run_module
from vllm_server import PYTHON, VllmServer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
from plugins.plugin_utils._vllm_flags import render  # noqa: E402

MAKE_LORA = os.path.join(HERE, "..", "support", "make_tiny_lora.py")


def make_adapter(folder, seed, rank=8):
    subprocess.run([PYTHON, MAKE_LORA, folder, str(seed), "--rank", str(rank)], check=True,
                   capture_output=True, timeout=120)
    manifest = "".join("%s  %s\n" % (hashlib.sha256(open(os.path.join(folder, n), "rb").read()).hexdigest(), n)
                       for n in sorted(os.listdir(folder)))
    return manifest


def completion(url, model):
    req = urllib.request.Request(url + "/v1/completions", method="POST",
                                 headers={"Content-Type": "application/json"},
                                 data=json.dumps({"model": model, "prompt": "def hello", "max_tokens": 8,
                                                  "temperature": 0}).encode())
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())["choices"][0]["text"]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_static_and_runtime_adapters(tmp_path):
    a, b, big = (str(tmp_path / n) for n in ("lora-a", "lora-b", "lora-r16"))
    manifest_a = make_adapter(a, 1)
    make_adapter(b, 2)
    make_adapter(big, 4, rank=16)
    # the adapter is checked against its manifest the way the role stages it
    failed, result = run_module("model_store", {"path": a, "manifest": manifest_a})
    assert not failed and result["verified"] and result["files"] == 2, result

    argv, warnings = render({"model": "m", "enable_lora": True, "max_loras": 2, "max_lora_rank": 8,
                             "lora_modules": [{"name": "lora-a", "path": a}]}, "0.32.0", "cpu")
    assert not warnings
    lora_args = argv[argv.index("--enable-lora"):]
    assert lora_args == ["--enable-lora", "--max-loras", "2", "--max-lora-rank", "8", "--lora-modules", "lora-a=" + a]
    with VllmServer(extra=lora_args, environment={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true"}) as srv:
        print("vLLM with LoRA healthy in %.1f s" % srv.startup_seconds)
        status_base, text_base = completion(srv.url, "tiny-llama")
        status_a, text_a = completion(srv.url, "lora-a")
        assert (status_base, status_a) == (200, 200)
        assert text_a != text_base   # the adapter changes the output: it is applied

        args = {"url": srv.url, "name": "lora-b", "path": b, "timeout": 60}
        failed, result = run_module("lora_adapter", args, check=True)
        assert not failed and result["changed"] and [x["action"] for x in result["actions"]] == [], result
        failed, result = run_module("lora_adapter", args)
        assert not failed and result["changed"] and result["loaded"], result
        assert [x["action"] for x in result["actions"]] == ["load", "check"]
        status_b, text_b = completion(srv.url, "lora-b")
        assert status_b == 200 and text_b not in (text_a, text_base)
        failed, result = run_module("lora_adapter", args)
        assert not failed and not result["changed"], result

        # a rank the server was not started for: vLLM's reason, and nothing left loaded
        failed, result = run_module("lora_adapter", dict(args, name="lora-big", path=big))
        assert failed and "LoRA rank 16 is greater than max_lora_rank 8" in result["msg"], result
        models = json.loads(srv.get("/v1/models"))["data"]
        assert sorted(m["id"] for m in models if m.get("parent")) == ["lora-a", "lora-b"]

        failed, result = run_module("lora_adapter", dict(args, state="absent"))
        assert not failed and result["changed"] and not result["loaded"], result
        assert completion(srv.url, "lora-b")[0] == 404
        assert completion(srv.url, "lora-a")[0] == 200
