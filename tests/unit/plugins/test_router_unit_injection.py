"""The router's unit lists backends read from other hosts' deployment records, which this host
does not trust: the filter refuses a backend that is not an address and a port, and the unit
template quotes every argument, so even a value that got through adds no line or directive."""
from __future__ import annotations

import os
import re

import pytest

from ansible.errors import AnsibleFilterError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.kvfleet.vllm.plugins.filter.router_backends import FilterModule
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._router import RouterError, address_ok, backend_urls
from ansible_collections.kvfleet.vllm.tests.unit.plugins.test_unit_security import ROLES, _role_vars

F = FilterModule().filters()["router_backends"]
HOSTILE = "10.0.0.5\nExecStartPre=+/bin/sh -c id"


def _rec(name="main", port=8000, bind="0.0.0.0"):
    return {"name": name, "port": port, "bind": bind, "url": "http://127.0.0.1:%s" % port}


def test_a_bind_with_a_unit_directive_is_refused_naming_the_host_and_field():
    with pytest.raises(AnsibleFilterError) as info:
        F([_rec(bind=HOSTILE)], address="10.0.0.5", host="gpu-07")
    assert "gpu-07: instance main: its record's bind is not an IP address or a DNS name" in str(info.value)
    assert repr(HOSTILE) in str(info.value)   # shown escaped, not as a second line


@pytest.mark.parametrize("bind", [
    "127.0.0.1\n", "10.0.0.5 --policy random", "10.0.0.5\"", "host%n", "a$b", "-h", "fe80::1%eth0",
    "gpu 1", "x" * 64 + ".example.net", 8000, ["10.0.0.5"]])
def test_binds_that_are_not_an_address_are_refused(bind):
    with pytest.raises(RouterError, match=r"h: instance main: its record's bind is not an IP address or a DNS name"):
        backend_urls([_rec(bind=bind)], "10.0.0.5", host="h")


@pytest.mark.parametrize("address", ["10.0.0.5\nExecStartPre=/bin/true", "node 1", "node;id", "[::1"])
def test_the_hosts_address_is_checked_too(address):
    with pytest.raises(RouterError, match=r"h: the address to reach instance main at .* is not an IP address or a DNS name"):
        backend_urls([_rec()], address, host="h")


@pytest.mark.parametrize("name", ["main\nExecStartPre=/bin/true", "Main", "a b", "-x"])
def test_a_record_name_that_is_not_an_instance_name_is_refused(name):
    with pytest.raises(RouterError, match=r"h: an instance record's name is not an instance name"):
        backend_urls([_rec(name=name)], "10.0.0.5", host="h")


@pytest.mark.parametrize("value", ["10.0.0.5", "fd00::5", "[fd00::5]", "gpu-01", "gpu-01.example.com.", "node_1",
                                   "127.0.0.1.example.net"])
def test_addresses_and_dns_names_pass(value):
    assert address_ok(value)


def test_a_lookalike_of_loopback_is_a_dns_name_not_loopback():
    # 127.0.0.1.example.net resolves wherever its zone says: a router elsewhere may reach it
    assert backend_urls([_rec(bind="127.0.0.1.example.net")], "127.0.0.1.example.net", host="h") == [
        "http://127.0.0.1.example.net:8000"]
    with pytest.raises(RouterError, match="listens on 127.0.0.2 only"):
        backend_urls([_rec(bind="127.0.0.2")], "x", host="h")
    with pytest.raises(RouterError, match=r"listens on \[::1\] only"):
        backend_urls([_rec(bind="[::1]")], "x", host="h")


def _render(backends, extra_args=()):
    variables = _role_vars("cpu")
    variables.update(_router_backends=list(backends), vllm_router_extra_args=list(extra_args))
    with open(os.path.join(ROLES, "router", "templates", "router.service.j2"), encoding="utf-8") as f:
        # as the template action renders a role's template file (ansible-core 2.19
        # plugins/action/template.py): Jinja's own escapes in string constants ('\n')
        return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(f.read()),
                                                                          escape_backslashes=False)


def _directives(text):
    """(key) of each line of the unit that is a directive, continuation lines joined first."""
    joined = re.sub(r"\\\n", " ", text)
    return [line.split("=", 1)[0] for line in joined.splitlines() if re.match(r"[A-Za-z]+=", line)]


def _exec_start_argv(text):
    """ExecStart's words as systemd splits them (systemd.service(5): double quotes, C escapes,
    %% and $$ for a literal % and $)."""
    joined = re.sub(r"\\\n", " ", text)
    value = [line for line in joined.splitlines() if line.startswith("ExecStart=")][0][len("ExecStart="):]
    words = re.findall(r'"((?:[^"\\]|\\.)*)"|(\S+)', value)
    escapes = {"n": "\n", "r": "\r", "\\": "\\", '"': '"'}
    out = []
    for quoted, bare in words:
        word = re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(1)), quoted) if quoted else bare
        out.append(word.replace("%%", "%").replace("$$", "$"))
    return out


def test_the_unit_quotes_every_argument_so_a_hostile_value_adds_no_directive():
    benign = _render(["http://10.0.0.5:8000"])
    hostile_url = "http://" + HOSTILE + ":8000"
    extra = ["--log-level\nExecStartPre=+/bin/sh -c id", 'x" "--host" "0.0.0.0', "%h$HOME"]
    hostile = _render([hostile_url, "http://10.0.0.6:8000"], extra)
    assert _directives(hostile) == _directives(benign)
    assert not any(line.startswith("ExecStartPre") for line in hostile.splitlines())
    argv = _exec_start_argv(hostile)
    start = argv.index("--worker-urls")
    assert argv[start + 1:start + 3] == [hostile_url, "http://10.0.0.6:8000"]
    assert argv[-3:] == extra and argv.count("--host") == 1
    assert argv[argv.index("--host") + 1] == "127.0.0.1"


def test_the_unit_still_says_what_it_said():
    argv = _exec_start_argv(_render(["http://10.0.0.5:8000", "http://[fd00::5]:8001"], ["--log-level", "debug"]))
    assert argv[:4] == ["/opt/vllm-router/bin/vllm-router", "--host", "127.0.0.1", "--port"]
    assert argv[argv.index("--worker-urls") + 1:argv.index("--worker-urls") + 3] == [
        "http://10.0.0.5:8000", "http://[fd00::5]:8001"]
    assert argv[-2:] == ["--log-level", "debug"] and "--health-check-endpoint" in argv
