"""disk_headroom: the preflight's free-space sentences, before anything changes."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.filter.disk_headroom import disk_headroom

GIB = 1024 ** 3


def _disk(path, free_gib, dev=1, at=None):
    return {"path": path, "at": at or path, "dev": dev, "free": int(free_gib * GIB)}


def _venv(gib, path="/opt/vllm"):
    return {"path": path, "gib": gib, "var": "vllm_server_min_free_gb", "what": "the vllm 0.32.0 venv"}


def _state(gib, path="/var/lib/vllm"):
    return {"path": path, "gib": gib, "var": "vllm_server_state_min_free_gb", "what": "vLLM's caches"}


def test_enough_space_says_nothing():
    assert disk_headroom([_disk("/opt/vllm", 20, dev=1), _disk("/var/lib/vllm", 2, dev=2)],
                         [_venv(12), _state(1)]) == []


def test_too_little_names_path_need_var_and_free_with_one_decimal():
    problems = disk_headroom([_disk("/opt/vllm", 3.25, dev=1), _disk("/var/lib/vllm", 2, dev=2)],
                             [_venv(12), _state(1)])
    assert problems == ["/opt/vllm needs 12.0 GiB free (vllm_server_min_free_gb 12.0 GiB for the vllm "
                        "0.32.0 venv), has 3.2 GiB."]


def test_a_folder_not_there_yet_is_measured_at_its_nearest_parent():
    problems = disk_headroom([_disk("/srv/new/vllm", 1, at="/srv"), _disk("/var/lib/vllm", 5, dev=2)],
                             [_venv(4, "/srv/new/vllm"), _state(1)])
    assert problems == ["/srv/new/vllm (not there yet, measured at /srv) needs 4.0 GiB free "
                        "(vllm_server_min_free_gb 4.0 GiB for the vllm 0.32.0 venv), has 1.0 GiB."]


def test_needs_on_one_filesystem_add_up():
    probes = [_disk("/opt/vllm", 12.5, dev=7), _disk("/var/lib/vllm", 12.5, dev=7)]
    assert disk_headroom(probes, [_venv(12), _state(0)]) == []
    problems = disk_headroom(probes, [_venv(12), _state(1)])
    assert problems == ["/opt/vllm and /var/lib/vllm (one filesystem) need 13.0 GiB free "
                        "(vllm_server_min_free_gb 12.0 GiB for the vllm 0.32.0 venv, "
                        "vllm_server_state_min_free_gb 1.0 GiB for vLLM's caches), has 12.5 GiB."]


def test_the_same_folder_twice_is_named_once():
    probes = [_disk("/srv/vllm", 3)]
    problems = disk_headroom(probes, [_venv(4, "/srv/vllm"), _state(1, "/srv/vllm")])
    assert problems[0].startswith("/srv/vllm needs 5.0 GiB free (")


def test_exactly_enough_is_enough():
    assert disk_headroom([_disk("/opt/vllm", 12)], [_venv(12)]) == []
    assert disk_headroom([{"path": "/opt/vllm", "at": "/opt/vllm", "dev": 1, "free": 12 * GIB - 1}],
                         [_venv(12)]) != []


@pytest.mark.parametrize("gib", [0, "0", 0.0])
def test_zero_turns_a_check_off(gib):
    assert disk_headroom([_disk("/opt/vllm", 0)], [_venv(gib)]) == []


def test_strings_from_extra_vars_count_as_numbers():
    assert disk_headroom([_disk("/opt/vllm", 3)], [_venv("100000")])[0].startswith(
        "/opt/vllm needs 100000.0 GiB free (vllm_server_min_free_gb 100000.0 GiB")


@pytest.mark.parametrize("bad", ["lots", -1, None, [4]])
def test_bad_need_names_the_variable(bad):
    with pytest.raises(AnsibleFilterError, match=r"vllm_server_min_free_gb must be a number of GiB, 0 or more"):
        disk_headroom([_disk("/opt/vllm", 3)], [_venv(bad)])


def test_unprobed_path_and_bad_probe_are_errors():
    with pytest.raises(AnsibleFilterError, match="was not probed"):
        disk_headroom([_disk("/opt/vllm", 3)], [_state(1)])
    with pytest.raises(AnsibleFilterError, match="expects the probe's disk entries"):
        disk_headroom([{"path": "/x"}], [])
    with pytest.raises(AnsibleFilterError, match="each need has path, gib, var and what"):
        disk_headroom([_disk("/opt/vllm", 3)], [{"path": "/opt/vllm"}])
