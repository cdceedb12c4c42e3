"""Where the collection's fixed things live on a host is written once (plugins/module_utils/_layout.py):
the unit of an instance, the deployment record, the drain marker, the router's record, the host
program and systemd's folder. The modules, filters and host program import it, the roles and
playbooks read it through the kvfleet.vllm.layout lookup, the scripts get it as arguments. Any
other spelling of these in the product's code fails here; documentation (DOCUMENTATION, docstrings,
comments, argument specs, READMEs) may name them."""

from __future__ import annotations

import ast
import os
import re

import pytest

from ansible.errors import AnsibleFilterError, AnsibleLookupError

from ansible_collections.kvfleet.vllm.plugins.filter.unit_name import _unit_name
from ansible_collections.kvfleet.vllm.plugins.lookup.layout import LookupModule
from ansible_collections.kvfleet.vllm.plugins.module_utils._layout import LAYOUT, unit_instance, unit_name

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
HOME = os.path.join("plugins", "module_utils", "_layout.py")

# the values themselves, and the ways a unit name was built by hand
COPIES = [re.escape(v) for _k, v in sorted(LAYOUT.items())] + [
    re.escape("/etc/ansible/facts.d"),
    r"vllm-%s\.service",
    r"""['"]vllm-['"]\s*(~|\+)""",
    r"""len\(['"]vllm-['"]\)""",
    r"vllm-\{\{[^}]*\}\}\.service",
    r"\^vllm-",
]
COPY = re.compile("|".join(COPIES))


def _python_strings(path):
    """(line, text) of each string in a Python file that is not documentation."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") in ("DOCUMENTATION", "EXAMPLES", "RETURN")
                                                for t in node.targets):
            docs.add(id(node.value))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def _text_lines(path):
    """(line, text) of each line of a YAML, template or shell file that is not a comment."""
    with open(path, encoding="utf-8") as f:
        return [(i, line) for i, line in enumerate(f, 1) if not line.lstrip().startswith(("#", "{#"))]


def copies():
    found = []
    for top in ("plugins", "roles", "playbooks"):
        for dirpath, _dirs, files in os.walk(os.path.join(ROOT, top)):
            for name in sorted(files):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, ROOT)
                if rel == HOME or name in ("argument_specs.yml", "README.md") or "__pycache__" in rel:
                    continue
                if name.endswith(".py"):
                    items = _python_strings(path)
                elif name.endswith((".yml", ".yaml", ".j2", ".sh")):
                    items = _text_lines(path)
                else:
                    continue
                found.extend("%s:%d: %s" % (rel, n, text.strip()[:120]) for n, text in items if COPY.search(text))
    return found


def test_nothing_else_spells_out_the_layout():
    assert copies() == []


@pytest.mark.parametrize("text", [
    'unit = "vllm-%s.service" % name', "default('vllm-' ~ item.name ~ '.service')", "patterns: [\"vllm-*.service\"]",
    "dest: /etc/systemd/system/{{ item.unit }}", "_m: /etc/ansible/facts.d/kvfleet_vllm_drained.fact",
    'name[len("vllm-"):-len(".service")]', "path: /etc/systemd/system/vllm-{{ name }}.service",
    'if not re.match(r"^vllm-[a-z0-9]+", name)', "argv: [/usr/local/bin/kvfleet-vllm, gate]",
])
def test_the_check_finds_each_kind_of_copy(text):
    assert COPY.search(text)


def test_the_check_leaves_other_names_alone():
    assert not COPY.search("path: \"{{ __server_cli_alias }}/vllm-{{ vllm_server_version }}+cpu.dist-info\"")
    assert not COPY.search("vllm_server_state_dir: /var/lib/vllm")


def test_unit_names_both_ways():
    assert unit_name("main") == "vllm-main.service" == _unit_name("main")
    assert unit_instance("vllm-main.service") == "main" and unit_instance(unit_name("ray-0")) == "ray-0"
    for other in ("sshd.service", "vllm-.service", "vllm-Main.service", "vllm-x.service.d", "", None):
        assert unit_instance(other) is None
    with pytest.raises(ValueError, match="non-empty string"):
        unit_name("")
    with pytest.raises(AnsibleFilterError, match="unit_name: an instance name"):
        _unit_name(None)


def test_the_lookup_gives_the_values_in_order_and_names_an_unknown_one():
    lookup = LookupModule()
    assert lookup.run(["record", "drain_marker"], variables={}) == [LAYOUT["record"], LAYOUT["drain_marker"]]
    with pytest.raises(AnsibleLookupError, match="unknown name 'recrod'; one of command, converged_state, drain_marker"):
        lookup.run(["recrod"], variables={})


def test_the_record_and_the_marker_are_local_facts_under_their_names():
    """ansible_local.kvfleet_vllm_server and ansible_local.kvfleet_vllm_drained: the fact's name is
    the file's, less .fact, in setup's default fact_path."""
    for key, fact in (("record", "kvfleet_vllm_server"), ("drain_marker", "kvfleet_vllm_drained"),
                      ("router_record", "kvfleet_vllm_router")):
        assert LAYOUT[key] == "/etc/ansible/facts.d/%s.fact" % fact
