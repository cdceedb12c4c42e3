"""Serving groups over Ray (vllm_server_serving_group_backend ray): an inventory group -> each
member's Ray node (`ray start`, head or worker) and the head's vLLM with the Ray executor ->
their argv, records and units. vLLM CPU refuses the Ray executor (docs/serving-groups.md); these
pin what the role renders for GPU hosts, and the fleet scenario runs the Ray nodes for real."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.filter.serving_group import serving_group as _serving_group
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._instances import (
    InstanceError, build, environments, flag_value)
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._serving_group import (
    GroupError, ray_node, ray_plan)

from .test_instances import settings


def serving_group(*args, **kwargs):
    """The filter as the role calls it for a group whose network the operator trusts."""
    kwargs.setdefault("trusted_network", True)
    return _serving_group(*args, **kwargs)


MEMBERS = [{"host": "n1", "gpus": 4, "address": "10.0.0.1"},
           {"host": "n2", "gpus": 4, "address": "10.0.0.2"}]
HOSTVARS = {"n1": {"vllm_server_serving_group_backend": "ray", "vllm_server_serving_group_gpus": 4,
                   "ansible_host": "10.0.0.1"},
            "n2": {"vllm_server_serving_group_backend": "ray", "vllm_server_serving_group_gpus": 4,
                   "ansible_host": "10.0.0.2"}}
GROUPS = {"g": ["n1", "n2"]}


def _ray_settings(**over):
    opts = dict({"tensor_parallel_size": 4, "pipeline_parallel_size": 2}, **over.pop("options", {}))
    base = dict(version="0.32.0", device="cuda", ray_temp_dir="/var/lib/vllm/ray", ray_version="2.60.0",
                ray_start_args=[], options=opts)
    base.update(over)
    return settings(**base)


def test_the_plan_makes_the_first_host_the_head_and_counts_every_gpu():
    assert ray_plan("g", MEMBERS, "n1", 6379) == {"role": "head", "address": "10.0.0.1", "port": 6379,
                                                  "node_address": "10.0.0.1", "gpus": 4, "world": 8}
    assert ray_plan("g", MEMBERS, "n2", 6379)["role"] == "worker"
    assert ray_plan("g", MEMBERS, "n2", 6379)["node_address"] == "10.0.0.2"


@pytest.mark.parametrize("members, me, port, words", [
    (MEMBERS[:1], "n1", 6379, ["one host", "tensor or pipeline parallel on one host"]),
    (MEMBERS, "n9", 6379, ["n9", "not in that inventory group"]),
    ([dict(MEMBERS[0], address="127.0.0.1"), MEMBERS[1]], "n2", 6379, ["serving_group_address of n1", "loopback"]),
    ([MEMBERS[0], dict(MEMBERS[1], address="a b")], "n1", 6379, ["serving_group_address of n2", "'a b'"]),
    ([MEMBERS[0], dict(MEMBERS[1], gpus=0)], "n1", 6379, ["vllm_server_serving_group_gpus of n2", "from 1 to 1024"]),
    (MEMBERS, "n1", 0, ["vllm_server_ray_port", "from 1 to 65535"]),
    (MEMBERS + MEMBERS[:1], "n1", 6379, ["lists a host twice"]),
])
def test_bad_ray_groups_name_the_variable(members, me, port, words):
    with pytest.raises(GroupError) as err:
        ray_plan("g", members, me, port)
    for word in words:
        assert word in str(err.value)


def test_the_filter_gives_the_head_its_vllm_and_a_ray_node_and_a_worker_only_a_node():
    head = serving_group([{"name": "main", "port": 8000}], "g", GROUPS, HOSTVARS, "n1", address="10.0.0.1",
                         backend="ray", gpus=4)
    assert [h["name"] for h in head] == ["main", "ray"]
    assert head[0]["ray"]["role"] == "head" and head[1]["ray_node"]["role"] == "head"
    worker = serving_group([{"name": "main", "port": 8000}], "g", GROUPS, HOSTVARS, "n2", address="10.0.0.2",
                           backend="ray", gpus=4)
    # its one instance's unit becomes the Ray node: nothing of the old instance keeps running
    assert worker == [{"name": "main", "ray_node": dict(head[1]["ray_node"], role="worker",
                                                        node_address="10.0.0.2")}]
    mixed = dict(HOSTVARS, n2={"ansible_host": "10.0.0.2"})
    with pytest.raises(AnsibleFilterError, match="n2 names backend 'dp', this host .n1. ray"):
        serving_group([{"name": "main"}], "g", GROUPS, mixed, "n1", backend="ray")
    with pytest.raises(AnsibleFilterError, match="serving_group_backend must be one of dp, ray"):
        serving_group([{"name": "main"}], "g", GROUPS, HOSTVARS, "n1", backend="nccl")


def _members(me, **over):
    insts = serving_group([{"name": "main", "port": 8000}], "g", GROUPS, HOSTVARS, me,
                          address=HOSTVARS[me]["ansible_host"], backend="ray", gpus=4)
    out, _warnings = build(insts, _ray_settings(**over))
    return out


def test_the_heads_vllm_runs_the_ray_executor_on_the_cluster():
    vllm, node = _members("n1")
    argv = vllm["argv"]
    assert argv[-2:] == ["--distributed-executor-backend", "ray"]
    assert (flag_value(argv, "--tensor-parallel-size"), flag_value(argv, "--pipeline-parallel-size")) == ("4", "2")
    # the value in the environment file's mapping; the instance (a loop item) has the name only
    insts = serving_group([{"name": "main", "port": 8000}], "g", GROUPS, HOSTVARS, "n1",
                          address="10.0.0.1", backend="ray", gpus=4)
    assert environments(insts, _ray_settings())["main"]["RAY_ADDRESS"] == "10.0.0.1:6379"
    assert "RAY_ADDRESS" in vllm["environment_keys"] and "environment" not in vllm
    assert (vllm["headless"], vllm["url"], vllm["gpus_needed"]["count"]) == (False, "http://127.0.0.1:8000", 0)
    assert vllm["record"]["group"] == {"key": "10.0.0.1:6379", "role": "head", "backend": "ray", "size": 8,
                                       "size_local": 0}
    assert node["argv"] == ["start", "--head", "--block", "--port", "6379", "--node-ip-address", "10.0.0.1",
                            "--num-gpus", "4", "--include-dashboard=false", "--disable-usage-stats",
                            "--temp-dir", "/var/lib/vllm/ray"]
    assert (node["unit"], node["headless"], node["url"], node["group_role"]) == ("vllm-ray.service", True, None, "worker")
    assert node["gpus_needed"]["count"] == 4
    assert node["record"]["group"] == {"key": "10.0.0.1:6379", "role": "worker", "backend": "ray", "size": 8,
                                       "size_local": 4}
    assert node["record"]["ray_version"] == "2.60.0"


def test_a_worker_host_runs_its_ray_node_in_its_instances_unit():
    (node,) = _members("n2", ray_start_args=["--object-manager-port", "8076"])
    assert node["unit"] == "vllm-main.service" and node["headless"]
    assert node["argv"] == ["start", "--block", "--node-ip-address", "10.0.0.2", "--num-gpus", "4",
                            "--temp-dir", "/var/lib/vllm/ray", "--address", "10.0.0.1:6379",
                            "--object-manager-port", "8076"]


def test_sizes_that_do_not_fill_the_cluster_are_refused_naming_the_variables():
    with pytest.raises(InstanceError) as err:
        _members("n1", options={"tensor_parallel_size": 4, "pipeline_parallel_size": 1})
    text = str(err.value)
    assert "tensor_parallel_size (4) x pipeline_parallel_size (1) in vllm_server_options = 4 GPUs" in text
    assert "members give 8 (vllm_server_serving_group_gpus on each)" in text


def test_a_vllm_without_the_executor_flag_is_refused():
    manifest = {"vllm_version": "0.32.0", "flags": {"--model": {}, "--host": {}, "--port": {},
                                                    "--tensor-parallel-size": {}, "--pipeline-parallel-size": {}}}
    with pytest.raises(InstanceError, match="does not accept --distributed-executor-backend, which a Ray group needs"):
        _members("n1", flag_manifest=manifest)


@pytest.mark.parametrize("bad, words", [
    ({"role": "chief"}, [".ray must be a dictionary with role (head or worker)"]),
    ({"role": "worker", "address": "10.0.0.1", "node_address": "a b", "port": 1, "gpus": 1, "world": 2},
     [".ray.node_address", "'a b'"]),
    ({"role": "worker", "address": "10.0.0.1", "node_address": "10.0.0.2", "port": 1, "gpus": 3, "world": 2},
     [".ray.world", "at least 3"]),
])
def test_hand_written_ray_nodes_are_checked(bad, words):
    with pytest.raises(GroupError) as err:
        ray_node(bad, "vllm_server_instances[main]", "/t")
    for word in words:
        assert word in str(err.value)


def test_ray_node_arguments_cannot_add_a_line_to_the_unit():
    with pytest.raises(InstanceError, match="must not contain a line break"):
        _members("n2", ray_start_args=["--x\nExecStartPre=/bin/evil"])
