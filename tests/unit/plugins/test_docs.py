"""Every command shown to users in the README and docs/ is run by a named test, or says it needs
a GPU fleet: `<!-- tested: PATH ... -->` or `<!-- needs: ... -->` right after the block."""

from __future__ import annotations

import glob
import os
import re

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
DOCS = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
BLOCK = re.compile(r"```console\n(.*?)```\n(<!--.*?-->)?", re.S)


def blocks(doc):
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
        return BLOCK.findall(f.read())


@pytest.mark.parametrize("doc", DOCS)
def test_every_command_block_is_tested_or_marked(doc):
    for body, marker in blocks(doc):
        assert marker, "%s: this block has no <!-- tested: ... --> or <!-- needs: ... -->:\n%s" % (doc, body)
        m = re.match(r"<!-- (tested|needs): (\S+)", marker)
        assert m, "%s: marker %r" % (doc, marker)
        if m.group(1) == "tested":
            assert os.path.exists(os.path.join(ROOT, m.group(2))), "%s names %s, which does not exist" % (doc, m.group(2))


def test_the_readme_shows_commands():
    assert len(blocks("README.md")) >= 5


def test_the_roles_minimum_ansible_is_the_collections_and_the_license_is_shipped():
    import yaml
    root = os.path.join(os.path.dirname(__file__), "..", "..", "..")
    with open(os.path.join(root, "meta", "runtime.yml"), encoding="utf-8") as f:
        required = re.match(r">=\s*([0-9]+\.[0-9]+)", yaml.safe_load(f)["requires_ansible"]).group(1)
    for path in glob.glob(os.path.join(root, "roles", "*", "meta", "main.yml")):
        with open(path, encoding="utf-8") as f:
            assert yaml.safe_load(f)["galaxy_info"]["min_ansible_version"] == required, path
    with open(os.path.join(root, "LICENSE"), encoding="utf-8") as f:
        assert "GNU GENERAL PUBLIC LICENSE" in f.read(200)


def test_the_host_programs_subcommands_named_in_the_reference_are_its_own():
    # docs/reference.md lists the kvfleet-vllm subcommands: every one it names exists, and every
    # one that exists is named
    root = os.path.join(os.path.dirname(__file__), "..", "..", "..")
    with open(os.path.join(root, "roles", "hosttools", "files", "kvfleet_vllm.py"), encoding="utf-8") as f:
        real = set(re.findall(r'add_parser\("([a-z-]+)"', f.read()))
    with open(os.path.join(root, "docs", "reference.md"), encoding="utf-8") as f:
        line = [x for x in f if "as the `kvfleet-vllm` command (" in x][0]
    named = set(re.findall(r"`([a-z-]+)`", line.split("command (", 1)[1]))
    assert named == real, (sorted(named - real), sorted(real - named))
