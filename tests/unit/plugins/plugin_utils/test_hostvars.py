"""_hostvars: one way for the filters that look across hosts to read a host's variables."""

from __future__ import annotations

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._hostvars import current_record, var


class Rendering(dict):
    """A host's variables as hostvars give them: a value is rendered when read, and may fail."""

    def __getitem__(self, key):
        if key == "broken":
            raise ValueError("'nope' is undefined")
        return dict.__getitem__(self, key)


def test_a_missing_null_or_unrenderable_value_is_the_default():
    hv = Rendering(a=1, empty="", null=None, broken="{{ nope }}")
    assert var(hv, "a") == 1 and var(hv, "empty", "x") == ""
    assert var(hv, "null", "x") == "x" and var(hv, "missing", []) == [] and var(hv, "broken", "d") == "d"


def test_the_record_as_last_read_or_nothing():
    assert current_record({"ansible_local": {"kvfleet_vllm_server": {"current": {"instances": [1]}}}}) == {"instances": [1]}
    assert current_record({"ansible_local": {"other": {}}}) == {}
    assert current_record({}) == {}
    assert current_record({"ansible_local": "not a dict"}) == {}
