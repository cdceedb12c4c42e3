"""Whether a unit change is only its LoRA adapters (loaded at runtime, no restart): decided on the
real unit template, rendered by Ansible from the server role's defaults."""

from __future__ import annotations

import os

import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._instances import build
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._lora_runtime import (
    LoraRuntimeError, plan, split_unit)
from ansible_collections.kvfleet.vllm.tests.unit.plugins.test_unit_security import ROLES, _role_vars


def unit(adapters=None, **settings):
    """vllm.service.j2 for one instance with these adapters ({name: path}) and role settings."""
    variables = _role_vars("cuda")
    options = {"enable_lora": True, "max_loras": 2} if adapters is not None else {}
    if adapters:
        options["lora_modules"] = [{"name": n, "path": p} for n, p in adapters.items()]
    variables.update(vllm_server_options=options, **settings)
    templar = Templar(loader=DataLoader(), variables=variables)
    instances, _warnings = build([{"name": "main", "port": 8000, "cuda_visible_devices": "0"}],
                                 templar.template(trust_as_template("{{ __server_settings }}")))
    variables.update(item=instances[0])
    with open(os.path.join(ROLES, "server", "templates", "vllm.service.j2"), encoding="utf-8") as f:
        return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(f.read()))


def _lora_words(words):
    return [w for w in words if w.startswith(("a=", "b=")) or w == "--lora-modules"]


A, B, B2 = "/var/lib/vllm/models/loras/a/r1", "/var/lib/vllm/models/loras/b/r1", "/var/lib/vllm/models/loras/b/r2"


def test_the_unit_lists_the_adapters_and_they_are_read_back():
    text = unit({"a": A, "b": B})
    assert '"--lora-modules" "a=%s" "b=%s"' % (A, B) in text
    base, words, modules = split_unit(text)
    assert modules == {"a": A, "b": B} and "lora-modules" not in base and "--max-loras" in base
    assert "--max-loras" in words and _lora_words(words) == []


@pytest.mark.parametrize("old, new, load, unload", [
    ({"a": A}, {"a": A, "b": B}, [{"name": "b", "path": B}], []),            # added
    ({"a": A, "b": B}, {"a": A}, [], ["b"]),                                 # removed
    ({"a": A, "b": B}, {"a": A, "b": B2}, [{"name": "b", "path": B2}], []),  # new revision
    ({}, {"a": A}, [{"name": "a", "path": A}], []),                          # the first, LoRA already on
    ({"a": A}, {}, [], ["a"]),                                               # the last one goes
])
def test_only_the_adapters_change_so_the_server_takes_it_at_runtime(old, new, load, unload):
    out = plan(unit(old), unit(new))
    actions = [{"name": n, "state": "absent"} for n in unload] + [dict(a, state="present") for a in load]
    assert out == {"runtime": True, "load": load, "unload": unload, "actions": actions,
                   "why": "only the adapters change"}


@pytest.mark.parametrize("old, new, why", [
    (unit({"a": A}), unit({"a": A}), "the same adapters"),
    (unit({"a": A}), unit({"a": A, "b": B}, vllm_server_max_num_seqs=64), "other settings change too"),
    (unit({"a": A}), unit({"a": A, "b": B}, vllm_server_version="0.31.0"), "other settings change too"),
    (unit({"a": A}), unit({"a": A, "b": B}, vllm_server_restart_sec=30), "other settings change too"),
    (unit(None), unit({"a": A}), "other settings change too"),              # LoRA switched on: a restart
    ("", unit({"a": A}), "no unit yet"),
    (None, unit({"a": A}), "no unit yet"),
    ("[Service]\nType=simple\n", unit({"a": A}), "a unit without a readable ExecStart="),
    ('ExecStart="/p" "--lora-modules" "{\\"name\\": \\"a\\"}"\n', 'ExecStart="/p" "--lora-modules" "a=/x"\n',
     "an adapter not written as name=path"),
    ('ExecStart="/p" "--lora-modules" "a=/x"\n', 'ExecStart="/p" "--lora-modules" "a=/y"\n', "LoRA is not enabled"),
])
def test_anything_else_is_a_restart(old, new, why):
    out = plan(old, new)
    assert out == {"runtime": False, "load": [], "unload": [], "actions": [], "why": why}


def test_unloads_come_first_they_free_adapter_slots():
    out = plan(unit({"a": A, "b": B}), unit({"a": A, "c": B2}))
    assert [(x["name"], x["state"]) for x in out["actions"]] == [("b", "absent"), ("c", "present")]


def test_input_that_is_not_text_is_refused_by_name():
    with pytest.raises(LoraRuntimeError, match="two unit texts"):
        plan("x", {"ExecStart": 1})
    with pytest.raises(LoraRuntimeError, match="int"):
        plan(3, "x")
