"""No Jinja programs in the roles' and playbooks' YAML: a statement that builds a value (`{% set %}`,
`.append(`, `.extend(`, `.update(`) is a filter under plugins/ with unit tests instead. A loop or a
condition that only words a message may stay. Templates (`templates/*.j2`) render files: they may name
a value (`{% set %}`) but build none by hand (a template looked up to compute data was such a program)."""

from __future__ import annotations

import os
import re

from ansible_collections.kvfleet.vllm.tests.unit.plugins.test_playbook_includes import ROOT, _yaml_files

STATEMENT = re.compile(r"\{%-?\s*(set|macro)\b|\.(append|extend|update)\(")
BUILT = re.compile(r"\.(append|extend|update)\(")


def programs(text):
    """The lines of a YAML file that hold a Jinja statement or a list built by hand."""
    return [line.strip() for line in text.splitlines() if STATEMENT.search(line)]


def test_no_yaml_of_the_roles_or_playbooks_holds_a_jinja_program():
    found = {}
    for path in _yaml_files():
        with open(path, encoding="utf-8") as f:
            lines = programs(f.read())
        if lines:
            found[os.path.relpath(path, ROOT)] = lines
    assert found == {}


def test_the_check_finds_each_kind():
    assert programs("x: >-\n  {%- set out = [] -%}\n  {%- for h in hosts -%}\n  {%- set _ = out.append(h) -%}\n") == [
        "{%- set out = [] -%}", "{%- set _ = out.append(h) -%}"]
    assert programs("x: \"{{ d.update({'a': 1}) }}\"\ny: \"{% if a %}1{% endif %}\"") == ["x: \"{{ d.update({'a': 1}) }}\""]
    assert programs("x: \"{{ hosts | map('extract', hostvars) | list }}\"") == []


def test_no_template_builds_a_value_by_hand():
    found = {}
    for dirpath, _dirs, files in os.walk(os.path.join(ROOT, "roles")):
        if os.path.basename(dirpath) != "templates":
            continue
        for name in files:
            with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                lines = [line.strip() for line in f if BUILT.search(line)]
            if lines:
                found[os.path.relpath(os.path.join(dirpath, name), ROOT)] = lines
    assert found == {}
    assert BUILT.search("{%- set _ = vllm.append({'targets': []}) -%}")
