"""hosttools_files and hosttools_stale: what the hosttools role installs, and what it copies again."""

from __future__ import annotations

import hashlib
import os

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.filter.hosttools_files import hosttools_files
from ansible_collections.kvfleet.vllm.plugins.filter.hosttools_stale import hosttools_stale

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
COMMAND = {"content": "#!/bin/sh\nexec python3 /opt/kvfleet/kvfleet_vllm.py \"$@\"\n", "dest": "/usr/local/bin/kvfleet-vllm"}


def _files(module_utils=("_prom.py", "_canary.py")):
    return hosttools_files("/opt/kvfleet", collection=ROOT, module_utils=list(module_utils), command=COMMAND,
                           verify_unit="/opt/kvfleet/verify-unit")


def test_markers_then_the_module_utils_then_the_checker_the_program_and_the_command():
    files = _files()
    lib = "/opt/kvfleet/lib/ansible_collections"
    assert [f["dest"] for f in files] == [
        lib + "/__init__.py", lib + "/kvfleet/__init__.py", lib + "/kvfleet/vllm/__init__.py",
        lib + "/kvfleet/vllm/plugins/__init__.py", lib + "/kvfleet/vllm/plugins/module_utils/__init__.py",
        lib + "/kvfleet/vllm/plugins/module_utils/_prom.py", lib + "/kvfleet/vllm/plugins/module_utils/_canary.py",
        "/opt/kvfleet/verify-unit", "/opt/kvfleet/kvfleet_vllm.py", "/usr/local/bin/kvfleet-vllm"]
    assert [f["mode"] for f in files] == ["0644"] * 7 + ["0755", "0644", "0755"]
    assert all(os.path.isfile(f["src"]) for f in files if "src" in f)
    assert files[-1]["content"] == COMMAND["content"]


def _line(entry, mode=None, owner="root:root", data=None):
    if data is None:
        data = entry["content"].encode() if "content" in entry else open(entry["src"], "rb").read()
    return "%s %s %s" % (mode or entry["mode"][1:], owner, hashlib.sha256(data).hexdigest())


def test_only_what_differs_in_mode_owner_or_content_or_is_missing_is_copied_again():
    files = _files()
    now = [_line(f) for f in files]
    assert hosttools_stale(files, now) == []
    now[5] = _line(files[5], mode="666")
    now[6] = _line(files[6], owner="vllm:vllm")
    now[7] = _line(files[7], data=b"changed")
    now[9] = "missing"
    assert [f["dest"] for f in hosttools_stale(files, now)] == [files[i]["dest"] for i in (5, 6, 7, 9)]
    # fewer lines than files (a read cut short): the rest counts as missing
    assert hosttools_stale(files, [_line(f) for f in files][:3]) == files[3:]


def test_bad_input_is_named(tmp_path):
    with pytest.raises(AnsibleFilterError, match="needs the lines read on the host"):
        hosttools_stale(_files())
    with pytest.raises(AnsibleFilterError, match="cannot read"):
        hosttools_stale([{"src": str(tmp_path / "gone"), "dest": "/x", "mode": "0644"}], [])
    with pytest.raises(AnsibleFilterError, match="needs the tools folder"):
        hosttools_files("", collection=ROOT, module_utils=[], command=COMMAND, verify_unit="/v")
