"""The playbooks and the rollout role read the server role through its documented result
(server_result) and its entry points' documented variables only: a private _server_* fact read or
written by either, or an internal __server_* variable passed in, fails here."""

from __future__ import annotations

import glob
import os
import re

import pytest

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._hostvars import server_result

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
# _server_x, not vllm_server_x or __server_x
PRIVATE = re.compile(r"(?<![A-Za-z0-9_])_server_[a-z]")
INTERNAL = re.compile(r"(?<![A-Za-z0-9_])__server_[a-z]")


def _playbook_files():
    files = sorted(glob.glob(os.path.join(ROOT, "playbooks", "**", "*.yml"), recursive=True)
                   + glob.glob(os.path.join(ROOT, "roles", "rollout", "**", "*.yml"), recursive=True))
    assert len(files) > 20
    return files


def _code_lines(path):
    """(number, line) of each line that is not a comment."""
    with open(path, encoding="utf-8") as f:
        return [(n, line) for n, line in enumerate(f, 1) if not line.lstrip().startswith("#")]


def test_no_playbook_reads_or_writes_a_private_fact_of_the_server_role():
    found = ["%s:%d: %s" % (os.path.relpath(path, ROOT), n, line.strip())
             for path in _playbook_files() for n, line in _code_lines(path) if PRIVATE.search(line)]
    assert found == []


def test_no_playbook_passes_an_internal_variable_of_the_server_role():
    found = ["%s:%d: %s" % (os.path.relpath(path, ROOT), n, line.strip())
             for path in _playbook_files() for n, line in _code_lines(path) if INTERNAL.search(line)]
    assert found == []


@pytest.mark.parametrize("line, internal", [
    ("    __server_models_staged: true", True),
    ("    vllm_server_models_staged: true", False),
    ("    __hosttools_caller: server", False),
])
def test_the_check_tells_internal_variables_from_options(line, internal):
    assert bool(INTERNAL.search(line)) is internal


@pytest.mark.parametrize("line, private", [
    ("x: '{{ _server_records }}'", True),
    ("x: '{{ hostvars[h]._server_plan.converged }}'", True),
    ("x: '{{ server_result.records }}'", False),
    ("__server_backup_drained: {}", False),
    ("x: '{{ vllm_server_instances }}'", False),
])
def test_the_check_tells_private_facts_from_variables(line, private):
    assert bool(PRIVATE.search(line)) is private


def test_every_key_the_playbooks_read_is_one_the_role_sets():
    """Each server_result.KEY the playbooks read is set by a task of the server role."""
    role = "".join(open(p, encoding="utf-8").read()
                   for p in glob.glob(os.path.join(ROOT, "roles", "server", "tasks", "*.yml")))
    set_keys = set()
    for mapping in re.findall(r"server_result \| default\(\{\}\) \| combine\(\{(.*?)\}\)", role, re.S):
        set_keys |= set(re.findall(r"'([a-z_]+)':", mapping))
    read = set()
    for path in _playbook_files():
        read |= set(re.findall(r"server_result\)?\.([a-z_]+)", open(path, encoding="utf-8").read()))
        read |= set(re.findall(r"\['server_result', '([a-z_]+)'\]", open(path, encoding="utf-8").read()))
    assert read, "the playbooks read no key of server_result"
    assert read <= set_keys, sorted(read - set_keys)


@pytest.mark.parametrize("hv, key, want", [
    ({"server_result": {"records": [1]}}, "records", [1]),
    ({"server_result": {"records": None}}, "records", []),
    ({"server_result": {}}, "records", []),
    ({}, "records", []),
    ({"server_result": "not a dict"}, "records", []),
])
def test_server_result_reads_one_key_or_the_default(hv, key, want):
    assert server_result(hv, key, []) == want


def test_every_option_a_caller_sets_for_one_call_stays_out_of_the_fingerprint():
    """The converged fingerprint (roles/server/vars/main.yml) is computed when the deploy checks a
    host and again when it records it, under other include vars: a vllm_server_* variable that a
    playbook or role passes to one call of the server role must be in __server_call_options, or
    no host would ever be found converged again."""
    import yaml
    passed = set()

    def walk(tasks):
        for task in tasks or []:
            if not isinstance(task, dict):
                continue
            for key in ("block", "rescue", "always"):
                walk(task.get(key))
            for key in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
                if key in task and task[key].get("name") == "kvfleet.vllm.server":
                    passed.update(k for k in (task.get("vars") or {}) if k.startswith("vllm_server_"))
    for path in _playbook_files() + glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml")):
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
        if isinstance(doc, list) and doc and isinstance(doc[0], dict) and "hosts" in doc[0]:
            for play in doc:
                walk(play.get("tasks"))
        else:
            walk(doc)
    with open(os.path.join(ROOT, "roles", "server", "vars", "main.yml"), encoding="utf-8") as f:
        call_options = set(yaml.safe_load(f)["__server_call_options"])
    assert "vllm_server_verify_instances" in passed and "vllm_server_drain_marker" in passed
    assert passed <= call_options, sorted(passed - call_options)
