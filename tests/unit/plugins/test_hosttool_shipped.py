"""Every collection module_utils the host program imports is in the list the hosttools role ships
beside it (roles/hosttools/vars/main.yml): a missing one breaks kvfleet-vllm on every host at
import, which only the live tests and Molecule would otherwise show."""

from __future__ import annotations

import ast
import os

import yaml

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
PREFIX = "ansible_collections.kvfleet.vllm.plugins.module_utils."


def _shipped():
    with open(os.path.join(ROOT, "roles", "hosttools", "vars", "main.yml"), encoding="utf-8") as f:
        return set(yaml.safe_load(f)["__hosttools_module_utils"])


def _imported(path):
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PREFIX):
            found.add(node.module[len(PREFIX):] + ".py")
    return found


def test_the_host_program_imports_only_what_is_shipped():
    program = _imported(os.path.join(ROOT, "roles", "hosttools", "files", "kvfleet_vllm.py"))
    assert program and program <= _shipped(), sorted(program - _shipped())


def test_the_shipped_module_utils_import_only_each_other():
    shipped = _shipped()
    for name in sorted(shipped):
        needed = _imported(os.path.join(ROOT, "plugins", "module_utils", name))
        assert needed <= shipped, (name, sorted(needed - shipped))
