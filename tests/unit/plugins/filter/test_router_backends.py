# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.filter.router_backends import FilterModule

F = FilterModule().filters()["router_backends"]


def test_the_filter_builds_the_urls_the_router_role_lists():
    records = [{"name": "main", "port": 8000, "bind": "10.88.0.61", "url": "http://10.88.0.61:8000"},
               {"name": "b", "port": 8001, "bind": "0.0.0.0", "url": "http://127.0.0.1:8001"}]
    assert F(records, address="gpu-01.example.com", host="gpu-01") == [
        "http://10.88.0.61:8000", "http://gpu-01.example.com:8001"]


def test_bad_records_are_an_ansible_error_naming_the_host():
    with pytest.raises(AnsibleFilterError, match="gpu-02: instance main serves TLS"):
        F([{"name": "main", "port": 8443, "bind": "0.0.0.0", "url": "https://127.0.0.1:8443"}], "a", host="gpu-02")
