from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.filter.restart_plan import FilterModule


def test_restart_plan_filter():
    restart_plan = FilterModule().filters()["restart_plan"]
    assert restart_plan(["a", "b"], "50%", "04:00", 60, 10)["b"]["time"] == "04:30"
    with pytest.raises(AnsibleFilterError) as err:
        restart_plan(["a", "b"], "lots")
    assert "vllm_restart_max_concurrent" in str(err.value)
