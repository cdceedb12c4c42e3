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
    ({"from": "hub"}, "from must be one of controller, host, got 'hub'"),
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
