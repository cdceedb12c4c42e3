from __future__ import annotations

import pytest

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._model_source import (
    ModelSourceError, model_source)

SRC = {"name": "tiny-llama", "revision": "r1", "path": "/srv/models/tiny/r1", "manifest": "/srv/models/tiny/r1.sha256"}


def test_controller_source_paths():
    out = model_source(SRC, "/var/lib/vllm/models/")
    assert out["dir"] == "/var/lib/vllm/models/tiny-llama/r1"
    assert out["staging"] == "/var/lib/vllm/models/tiny-llama/.staging-r1"
    assert out["model_dir"] == "/var/lib/vllm/models/tiny-llama"
    assert out["staged"] and out["from"] == "controller" and out["label"] == "tiny-llama@r1"


def test_host_source_uses_the_path():
    out = model_source(dict(SRC, **{"from": "host", "path": "/data/tiny/"}), "/var/lib/vllm/models")
    assert out["dir"] == "/data/tiny" and not out["staged"] and out["staging"] is None


@pytest.mark.parametrize("change, words", [
    ({"from": "s3"}, "from must be one of controller, host, hub, got 's3'"),
    ({"repo": "org/x"}, "unknown key(s) repo; allowed with from: controller"),
    ({"revision": "../x"}, "revision must be 1-100 letters"),
    ({"name": ""}, "name must be 1-100 letters"),
    ({"path": "relative/dir"}, "path must be an absolute path"),
    ({"path": "/a/../b"}, "path must be an absolute path"),
    ({"manifest": "/a b"}, "manifest must be an absolute path"),
    ({"sha": "x"}, "unknown key(s) sha"),
])
def test_refusals_name_the_field(change, words):
    with pytest.raises(ModelSourceError) as info:
        model_source(dict(SRC, **change), "/var/lib/vllm/models")
    assert "vllm_server_model_source" in str(info.value) and words in str(info.value)


def test_not_a_dict():
    with pytest.raises(ModelSourceError, match="must be a dictionary"):
        model_source("tiny", "/x")


def test_lora_sources_under_loras_and_unique():
    from ansible_collections.kvfleet.vllm.plugins.plugin_utils._model_source import lora_sources
    adapters = [dict(SRC, name="sql-lora"), dict(SRC, name="chat-lora", revision="r2")]
    out = lora_sources(adapters, "/var/lib/vllm/models")
    assert [a["dir"] for a in out] == ["/var/lib/vllm/models/loras/sql-lora/r1",
                                       "/var/lib/vllm/models/loras/chat-lora/r2"]
    assert out[1]["var"] == "vllm_server_lora_adapters[1]"
    with pytest.raises(ModelSourceError, match=r"vllm_server_lora_adapters\[1\].name must be"):
        lora_sources([SRC, dict(SRC, name="a b")], "/s")
    with pytest.raises(ModelSourceError, match="the adapter name 'tiny-llama' is used twice"):
        lora_sources([SRC, SRC], "/s")
    with pytest.raises(ModelSourceError, match="must be a list"):
        lora_sources({"name": "x"}, "/s")


COMMIT = "0123456789abcdef0123456789abcdef01234567"
HUB = {"name": "qwen", "revision": COMMIT, "from": "hub", "repo": "Qwen/Qwen2.5-0.5B", "manifest": "/srv/m/qwen.sha256"}
HUB_ARGS = {"hub_cache": "/home/ops/.cache/kvfleet/hub/", "hub_endpoint": "https://huggingface.co/"}


def test_hub_source_downloads_into_the_controller_cache_then_stages_like_controller():
    out = model_source(HUB, "/var/lib/vllm/models", **HUB_ARGS)
    assert out["path"] == "/home/ops/.cache/kvfleet/hub/qwen/" + COMMIT
    assert out["hub_url"] == "https://huggingface.co/Qwen/Qwen2.5-0.5B/resolve/%s/" % COMMIT
    assert out["dir"] == "/var/lib/vllm/models/qwen/" + COMMIT and out["staged"] and out["from"] == "hub"
    assert out["label"] == "qwen@0123456789ab"
    # a path of one's own on the controller, and a mirror
    out = model_source(dict(HUB, path="/srv/hub/qwen"), "/s", hub_cache=None, hub_endpoint="http://mirror:8080/hf")
    assert out["path"] == "/srv/hub/qwen" and out["hub_url"].startswith("http://mirror:8080/hf/Qwen/")


def test_lora_hub_sources_go_under_loras_in_the_cache():
    from ansible_collections.kvfleet.vllm.plugins.plugin_utils._model_source import lora_sources
    out = lora_sources([dict(HUB, name="sql", repo="org/sql-lora")], "/var/lib/vllm/models", **HUB_ARGS)
    assert out[0]["path"] == "/home/ops/.cache/kvfleet/hub/loras/sql/" + COMMIT
    assert out[0]["dir"] == "/var/lib/vllm/models/loras/sql/" + COMMIT


@pytest.mark.parametrize("change, kwargs, words", [
    ({"revision": "main"}, {}, "revision must be the repository's commit (40 lower-case hex digits)"),
    ({"revision": COMMIT.upper()}, {}, "revision must be the repository's commit"),
    ({"repo": None}, {}, "repo must be the hub's repository id"),
    ({"repo": "a/b/c"}, {}, "repo must be the hub's repository id"),
    ({"repo": "org/x y"}, {}, "repo must be the hub's repository id"),
    ({}, {"hub_endpoint": "huggingface.co"}, "vllm_server_model_hub_endpoint must be an http(s) URL"),
    ({}, {"hub_endpoint": "https://h.co/?q=1"}, "vllm_server_model_hub_endpoint must be an http(s) URL"),
    ({}, {"hub_cache": "cache"}, "vllm_server_model_hub_cache must be an absolute path"),
    ({"path": "rel"}, {}, "path must be an absolute path without spaces or '..' (on the controller)"),
])
def test_hub_refusals_name_the_field(change, kwargs, words):
    source = dict(HUB, **change)
    if source["repo"] is None:
        del source["repo"]
    with pytest.raises(ModelSourceError) as info:
        model_source(source, "/var/lib/vllm/models", **dict(HUB_ARGS, **kwargs))
    assert words in str(info.value)
