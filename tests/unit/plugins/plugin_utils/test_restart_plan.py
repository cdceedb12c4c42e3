from __future__ import annotations

from collections import Counter

import pytest

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._restart_plan import (
    PlanError, max_per_slot, plan)


@pytest.mark.parametrize("n", [1, 7, 10, 99, 100, 1000])
def test_ten_percent_never_more_than_ten_percent_per_slot(n):
    hosts = ["gpu%04d" % i for i in range(n)]
    result = plan(hosts, "10%", "03:00", window_minutes=24 * 60, slot_minutes=10)
    per_slot = Counter(p["slot"] for p in result.values())
    assert max(per_slot.values()) <= max(1, n // 10)
    assert set(result) == set(hosts)


def test_hundred_hosts_ten_percent_in_the_default_window():
    hosts = ["h%d" % i for i in range(100)]
    result = plan(hosts, "10%")  # 04:00, 120 minutes, 10-minute slots
    per_slot = Counter(p["time"] for p in result.values())
    assert len(per_slot) == 10 and set(per_slot.values()) == {10}
    assert result["h0"]["time"] == "04:00" and result["h99"]["time"] == "05:30"


def test_deterministic_in_inventory_order_and_spread_over_the_window():
    hosts = ["a", "b", "c"]
    first = plan(hosts, 1, "23:30", 60, 10)
    assert first == plan(list(hosts), 1, "23:30", 60, 10)
    assert [first[h]["time"] for h in hosts] == ["23:30", "23:50", "00:10"]
    assert first["c"]["day_offset"] == 1


def test_window_too_short_names_the_variable():
    with pytest.raises(PlanError) as err:
        plan(["h%d" % i for i in range(50)], 2, "04:00", 60, 10)
    assert "vllm_restart_window_minutes" in str(err.value) and "need 25 slots" in str(err.value)


@pytest.mark.parametrize("value, size, expected", [
    ("10%", 100, 10), ("10%", 5, 1), ("50 %", 9, 4), (3, 100, 3), ("3", 100, 3)])
def test_max_per_slot(value, size, expected):
    assert max_per_slot(value, size) == expected


@pytest.mark.parametrize("value", ["0", "0%", "150%", "many", -1, "1.5"])
def test_bad_max_concurrent(value):
    with pytest.raises(PlanError) as err:
        max_per_slot(value, 10)
    assert "vllm_restart_max_concurrent" in str(err.value)


@pytest.mark.parametrize("kwargs, var", [
    (dict(window_start="25:00"), "vllm_restart_window_start"),
    (dict(window_minutes=0), "vllm_restart_window_minutes"),
    (dict(slot_minutes=500), "vllm_restart_slot_minutes"),
])
def test_bad_window(kwargs, var):
    with pytest.raises(PlanError) as err:
        plan(["a"], 1, **kwargs)
    assert var in str(err.value)
