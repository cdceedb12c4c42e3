# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

import re

import pytest

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._router import RouterError, backend_urls


def _rec(name="main", port=8000, bind="0.0.0.0", **kw):
    return dict({"name": name, "port": port, "bind": bind, "url": "http://127.0.0.1:%s" % port}, **kw)


def test_bound_to_every_address_is_reached_at_the_hosts_address():
    assert backend_urls([_rec(), _rec("b", 8001, "")], "10.0.0.5") == ["http://10.0.0.5:8000", "http://10.0.0.5:8001"]


def test_bound_to_the_inventorys_address_is_reached_there_ipv6_bracketed():
    assert backend_urls([_rec(bind="10.88.0.61", url="http://10.88.0.61:8000")], "10.88.0.61") == ["http://10.88.0.61:8000"]
    assert backend_urls([_rec(bind="fd00::5")], "fd00:0::5") == ["http://[fd00::5]:8000"]
    assert backend_urls([_rec(bind="GPU1.example.com.")], "gpu1.example.com") == ["http://GPU1.example.com.:8000"]
    assert backend_urls([_rec()], "fd00::9") == ["http://[fd00::9]:8000"]


@pytest.mark.parametrize("bind, address", [
    ("10.88.0.62", "10.88.0.61"),            # another host of the fleet
    ("10.0.0.1", "node1"),                   # an address the inventory does not give for it
    ("attacker.example", "node1.example"),   # an external name
    ("node1.example.evil", "node1.example"),
    ("fd00::6", "fd00::5"),
])
def test_a_record_binding_another_address_than_the_inventorys_is_refused(bind, address):
    # the record is the host's own word: it cannot aim the router, or the analysis, elsewhere
    with pytest.raises(RouterError, match=r"node1: instance main: its record's bind '%s' is not the address the "
                                          r"inventory gives for the host \('%s'.*set vllm_router_backend_address"
                                          % (re.escape(bind), re.escape(address))):
        backend_urls([_rec(bind=bind)], address, host="node1")


def test_loopback_only_from_the_same_host():
    with pytest.raises(RouterError, match=r"node1: instance main listens on 127.0.0.1 only"):
        backend_urls([_rec(bind="127.0.0.1")], "10.0.0.5", host="node1")
    assert backend_urls([_rec(bind="127.0.0.1")], "10.0.0.5", same_host=True) == ["http://127.0.0.1:8000"]
    assert backend_urls([_rec(bind="localhost")], "x", same_host=True) == ["http://127.0.0.1:8000"]


@pytest.mark.parametrize("rec", [_rec(tls={"certfile": "/etc/c.pem"}), _rec(url="https://10.0.0.5:8000")])
def test_tls_backends_are_refused_naming_the_instance(rec):
    with pytest.raises(RouterError, match=r"node2: instance main serves TLS; vllm-router 0.1.17 cannot"):
        backend_urls([rec], "10.0.0.5", host="node2")


@pytest.mark.parametrize("records, address, match", [
    ([], "a", "no vLLM instances"),
    (None, "a", "no vLLM instances"),
    ("main", "a", "no vLLM instances"),
    ([["main"]], "a", "not a dict with a name"),
    ([{"port": 1}], "a", "not a dict with a name"),
    ([_rec(port=0)], "a", "instance main has no valid port"),
    ([_rec(port="8000")], "a", "instance main has no valid port"),
    ([_rec(port=True)], "a", "instance main has no valid port"),
    ([_rec(port=70000)], "a", "instance main has no valid port"),
    ([_rec()], "", "no address to reach instance main at"),
    ([_rec()], None, "no address to reach instance main at"),
])
def test_bad_input_names_the_field(records, address, match):
    with pytest.raises(RouterError, match=match):
        backend_urls(records, address, host="h")


@pytest.mark.parametrize("bind, what", [
    ("127.1", "short or numeric form"),            # what inet_aton reads as 127.0.0.1
    ("2130706433", "short or numeric form"),
    ("0x7f000001", "short or numeric form"),
    ("0177.0.0.1", "short or numeric form"),
    ("169.254.169.254", "link-local"),             # cloud metadata
    ("fe80::1", "link-local"),
    ("::ffff:169.254.169.254", "link-local"),
    ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"),
    ("::ffff:0.0.0.0", "unspecified"),
])
def test_a_record_cannot_aim_the_router_at_the_router_hosts_own_services(bind, what):
    with pytest.raises(RouterError, match=r"node1: instance main: its record's bind .* is .*%s" % what):
        backend_urls([_rec(bind=bind)], "10.0.0.5", host="node1")


@pytest.mark.parametrize("bind", ["::ffff:127.0.0.1", "::1", "127.0.0.2"])
def test_loopback_in_any_notation_is_loopback(bind):
    with pytest.raises(RouterError, match=r"listens on .* only"):
        backend_urls([_rec(bind=bind)], "10.0.0.5", host="node1")
