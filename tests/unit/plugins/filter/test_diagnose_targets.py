"""diagnose_targets: what kvfleet.vllm.diagnose probes from the controller, per instance."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.filter.diagnose_targets import _diagnose_targets

MAIN = {"name": "main", "url": "http://10.0.0.5:8000", "port": 8000, "max_num_seqs": 4,
        "limits": {"max_num_batched_tokens": 2048, "max_model_len": 1024}}
TLS = {"name": "tls", "url": "https://10.0.0.5:8443", "port": 8443, "max_num_seqs": 8}


class Undefined(dict):
    """hostvars raise on a variable whose template cannot be rendered."""

    def __getitem__(self, key):
        if key == "vllm_diagnose_address":
            raise KeyError("undefined")
        return dict.__getitem__(self, key)


def test_the_record_read_now_at_ansible_host_with_the_record_scheme_and_limits():
    hostvars = {"gpu-1": {"_diagnose_instances": [MAIN, TLS], "ansible_host": "gpu-1.example.net"}}
    assert _diagnose_targets(["gpu-1"], hostvars) == [
        {"name": "main", "host": "gpu-1", "url": "http://gpu-1.example.net:8000", "max_num_seqs": 4,
         "max_num_batched_tokens": 2048, "max_num_active_seqs": None, "max_model_len": 1024},
        {"name": "tls", "host": "gpu-1", "url": "https://gpu-1.example.net:8443", "max_num_seqs": 8,
         "max_num_batched_tokens": None, "max_num_active_seqs": None, "max_model_len": None}]


def test_the_cached_record_when_nothing_was_read_and_the_address_overrides_ansible_host():
    hostvars = {"gpu-2": {"ansible_local": {"kvfleet_vllm_server": {"current": {"instances": [MAIN]}}},
                          "ansible_host": "ignored", "vllm_diagnose_address": "192.0.2.7"}}
    assert [t["url"] for t in _diagnose_targets(["gpu-2"], hostvars)] == ["http://192.0.2.7:8000"]


def test_a_url_per_instance_wins_and_a_local_host_keeps_the_record_url():
    hostvars = {"a": {"_diagnose_instances": [MAIN, TLS], "vllm_diagnose_urls": {"tls": "https://lb.example.net/tls"}},
                "b": {"_diagnose_instances": [MAIN], "ansible_connection": "local", "ansible_host": "x"}}
    assert [(t["host"], t["url"]) for t in _diagnose_targets(["a", "b"], hostvars)] == [
        ("a", "http://a:8000"), ("a", "https://lb.example.net/tls"), ("b", "http://10.0.0.5:8000")]


def test_no_record_no_target_and_an_undefined_address_falls_back():
    odd = Undefined(_diagnose_instances=[MAIN], ansible_host="odd.example.net", vllm_diagnose_address="{{ nope }}")
    hostvars = {"new": {}, "odd": odd}
    assert [t["url"] for t in _diagnose_targets(["new", "odd"], hostvars)] == ["http://odd.example.net:8000"]


def test_an_empty_list_read_on_the_host_is_not_replaced_by_the_cache():
    hostvars = {"gpu-3": {"_diagnose_instances": [],
                          "ansible_local": {"kvfleet_vllm_server": {"current": {"instances": [MAIN]}}}}}
    assert _diagnose_targets(["gpu-3"], hostvars) == []


@pytest.mark.parametrize("hosts, hostvars, words", [
    ("gpu-1", {}, "list of host names"),
    (["gpu-1"], None, "needs hostvars"),
    (["gpu-1"], {"gpu-1": {"_diagnose_instances": [{"port": 1}]}}, "gpu-1 has an instance without a name"),
])
def test_bad_input_is_named(hosts, hostvars, words):
    with pytest.raises(AnsibleFilterError, match=words):
        _diagnose_targets(hosts, hostvars)
