"""The collection's digest (plugin_utils/_digest.py), part of each host's converged fingerprint:
any change to a file of roles/ or plugins/ changes it; bytecode and other folders do not."""

from __future__ import annotations

import pytest

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._digest import collection_digest, collection_root, tree_digest


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "roles" / "server" / "templates").mkdir(parents=True)
    (tmp_path / "roles" / "server" / "templates" / "vllm.service.j2").write_text("[Service]\n")
    (tmp_path / "plugins" / "filter").mkdir(parents=True)
    (tmp_path / "plugins" / "filter" / "f.py").write_text("x = 1\n")
    return tmp_path


@pytest.mark.parametrize("change", [
    lambda t: (t / "roles" / "server" / "templates" / "vllm.service.j2").write_text("[Service]\nUser=x\n"),
    lambda t: (t / "plugins" / "filter" / "g.py").write_text(""),
    lambda t: (t / "plugins" / "filter" / "f.py").rename(t / "plugins" / "filter" / "h.py"),
])
def test_a_change_to_the_code_changes_the_digest(tree, change):
    before = tree_digest(str(tree))
    change(tree)
    assert tree_digest(str(tree)) != before


def test_bytecode_and_other_folders_do_not(tree):
    before = tree_digest(str(tree))
    (tree / "plugins" / "filter" / "__pycache__").mkdir()
    (tree / "plugins" / "filter" / "__pycache__" / "f.cpython-311.pyc").write_bytes(b"\0")
    (tree / "docs").mkdir()
    (tree / "docs" / "x.md").write_text("words")
    assert tree_digest(str(tree)) == before


def test_the_collection_digest_is_this_collections():
    assert collection_digest() == tree_digest(collection_root())
    assert len(collection_digest()) == 64
