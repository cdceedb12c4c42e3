"""systemctl_show, start_spec and check_mode_starts: three of the server role's steps as filters, not Jinja loops."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.filter.check_mode_starts import check_mode_starts
from ansible_collections.kvfleet.vllm.plugins.filter.start_spec import start_spec
from ansible_collections.kvfleet.vllm.plugins.filter.systemctl_show import systemctl_show

# `systemctl show --property=Id,ActiveState,SubState,NRestarts vllm-a.service vllm-b.service`
# (systemd 252, Debian 12): a block per unit, an empty line between them
SHOW = ("Id=vllm-a.service\nActiveState=failed\nSubState=failed\nNRestarts=5\n\n"
        "Id=vllm-b.service\nActiveState=inactive\nSubState=dead\nNRestarts=0\n")


def test_one_dict_per_unit_in_order():
    assert systemctl_show(SHOW) == [
        {"Id": "vllm-a.service", "ActiveState": "failed", "SubState": "failed", "NRestarts": "5"},
        {"Id": "vllm-b.service", "ActiveState": "inactive", "SubState": "dead", "NRestarts": "0"}]


def test_a_value_keeps_its_equals_signs_and_nothing_read_is_no_unit():
    assert systemctl_show("Id=x.service\nEnvironment=A=1 B=2\n") == [{"Id": "x.service", "Environment": "A=1 B=2"}]
    assert systemctl_show("") == []
    with pytest.raises(AnsibleFilterError, match="a string, got NoneType"):
        systemctl_show(None)


def test_each_unit_with_the_files_its_process_reads_at_start():
    instances = [{"name": "a", "unit": "vllm-a.service", "env_file": "/etc/vllm/a.env", "keys_file": "/etc/vllm/a.keys.yaml"},
                 {"name": "b", "unit": "vllm-b.service", "env_file": "/etc/vllm/b.env", "keys_file": None}]
    tls = ["/etc/vllm/tls/server.crt", "/etc/vllm/tls/server.key", "/etc/vllm/tls/ca.crt"]
    assert start_spec(instances, tls_dir="/etc/vllm/tls") == [
        {"unit": "vllm-a.service", "files": ["/etc/systemd/system/vllm-a.service", "/etc/vllm/a.env", "/etc/vllm/a.keys.yaml"] + tls},
        {"unit": "vllm-b.service", "files": ["/etc/systemd/system/vllm-b.service", "/etc/vllm/b.env"] + tls}]
    assert start_spec([], tls_dir="/t") == []


@pytest.mark.parametrize("instances, tls_dir, words", [
    ([], "", "needs tls_dir"),
    ([{"name": "a", "unit": "vllm-a.service"}], "/t", "without unit or env_file: 'a'"),
])
def test_bad_input_is_named(instances, tls_dir, words):
    with pytest.raises(AnsibleFilterError, match=words):
        start_spec(instances, tls_dir=tls_dir)


def test_in_check_mode_a_changed_result_for_a_unit_not_active_would_start():
    results = [{"item": {"unit": "vllm-a.service"}, "changed": True, "status": {"ActiveState": "inactive"}},
               {"item": {"unit": "vllm-b.service"}, "changed": True, "status": {"ActiveState": "active"}},
               {"item": {"unit": "vllm-c.service"}, "changed": False, "status": {"ActiveState": "failed"}},
               {"item": {"unit": "vllm-d.service"}, "skipped": True, "changed": False},
               {"item": {"unit": "vllm-e.service"}, "changed": True}]
    assert check_mode_starts(results) == [
        {"unit": "vllm-a.service", "started": True, "stale": False, "why": None},
        {"unit": "vllm-e.service", "started": True, "stale": False, "why": None}]
    assert check_mode_starts(None) == []
