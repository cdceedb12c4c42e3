# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.filter.fleet_router_backends import FilterModule as FleetFilters
from ansible_collections.kvfleet.vllm.plugins.filter.router_backends import FilterModule
from ansible_collections.kvfleet.vllm.plugins.filter.router_wrong_listings import FilterModule as WrongFilters

F = FilterModule().filters()["router_backends"]


def test_the_filter_builds_the_urls_the_router_role_lists():
    records = [{"name": "main", "port": 8000, "bind": "10.88.0.61", "url": "http://10.88.0.61:8000"},
               {"name": "b", "port": 8001, "bind": "0.0.0.0", "url": "http://127.0.0.1:8001"}]
    assert F(records, address="10.88.0.61", host="gpu-01") == ["http://10.88.0.61:8000", "http://10.88.0.61:8001"]
    # a record that binds an address the inventory does not give for the host aims nowhere
    with pytest.raises(AnsibleFilterError, match="gpu-01: instance main: its record's bind '10.88.0.61' is not the "
                                                 "address the inventory gives for the host .'gpu-01.example.com'"):
        F(records, address="gpu-01.example.com", host="gpu-01")


def test_bad_records_are_an_ansible_error_naming_the_host():
    with pytest.raises(AnsibleFilterError, match="gpu-02: instance main serves TLS"):
        F([{"name": "main", "port": 8443, "bind": "0.0.0.0", "url": "https://127.0.0.1:8443"}], "a", host="gpu-02")


FLEET = FleetFilters().filters()["fleet_router_backends"]
ANY = {"name": "main", "port": 8000, "bind": "0.0.0.0", "url": "http://127.0.0.1:8000"}
LOOP = {"name": "local", "port": 8001, "bind": "127.0.0.1", "url": "http://127.0.0.1:8001"}


def test_every_host_from_its_record_else_the_derived_model_at_its_router_address():
    hostvars = {
        "a": {"ansible_local": {"kvfleet_vllm_server": {"current": {"instances": [ANY]}}},
              "server_result": {"records": [LOOP]}, "vllm_router_backend_address": "10.0.0.1", "ansible_host": "ignored"},
        "b": {"server_result": {"records": [ANY]}, "ansible_host": "b.example.net"},
        "c": {"ansible_local": {}, "server_result": {"records": [ANY]}},
    }
    assert FLEET(["a", "b", "c"], hostvars) == ["http://10.0.0.1:8000", "http://b.example.net:8000", "http://c:8000"]


def test_loopback_instances_only_on_the_router_host_itself():
    hostvars = {"r": {"server_result": {"records": [LOOP]}}, "s": {"server_result": {"records": [LOOP]}}}
    assert FLEET(["r"], hostvars, router_host="r") == ["http://127.0.0.1:8001"]
    with pytest.raises(AnsibleFilterError, match="s: instance local"):
        FLEET(["s"], hostvars, router_host="r")


def test_a_host_without_record_or_model_is_named_and_hostvars_are_required():
    with pytest.raises(AnsibleFilterError, match="new: no vLLM instances"):
        FLEET(["new"], {"new": {}})
    with pytest.raises(AnsibleFilterError, match="needs hostvars"):
        FLEET(["a"])


WRONG = WrongFilters().filters()["router_wrong_listings"]
URLS = ["http://10.0.0.1:8000", "http://10.0.0.1:8001"]


def _read(router, urls):
    return {"item": router, "json": {"urls": urls}} if urls is not None else {"item": router, "failed": True}


def test_after_a_drain_a_router_that_still_lists_one_url_is_named_with_its_list():
    results = [_read("r1", ["http://10.0.0.2:8000"]), _read("r2", ["http://10.0.0.1:8001", "http://10.0.0.2:8000"])]
    assert WRONG(results, URLS, "drain") == [{"router": "r2", "lists": ["http://10.0.0.1:8001", "http://10.0.0.2:8000"]}]


def test_after_an_undrain_a_router_that_lacks_one_url_or_did_not_answer_is_named():
    results = [_read("r1", URLS + ["http://10.0.0.2:8000"]), _read("r2", URLS[:1]), _read("r3", None)]
    assert WRONG(results, URLS, "undrain") == [{"router": "r2", "lists": URLS[:1]}, {"router": "r3", "lists": []}]
    assert WRONG([_read("r1", [])], URLS, "drain") == []


def test_the_hook_is_drain_or_undrain():
    with pytest.raises(AnsibleFilterError, match="drain or undrain, got 'restart'"):
        WRONG([], URLS, "restart")
