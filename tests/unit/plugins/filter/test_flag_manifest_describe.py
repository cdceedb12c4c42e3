"""roles/server/files/vllm_flag_manifest.py's describe() on parsers shaped like vLLM's: every
option string the parser accepts is listed, hidden ones included (vLLM 0.33 hides
--no-enable-* from help but accepts them: vllm/utils/argparse_utils.py, _register_action)."""

from __future__ import annotations

import argparse
import importlib.util
import os

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..",
                    "roles", "server", "files", "vllm_flag_manifest.py")
spec = importlib.util.spec_from_file_location("vllm_flag_manifest", PATH)
manifest = importlib.util.module_from_spec(spec)
spec.loader.exec_module(manifest)


def parser_like_033():
    parser = argparse.ArgumentParser(prog="vllm serve")
    parser.add_argument("--max-num-seqs", type=int)
    action = parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
    parser.add_argument("--block-size", type=int, choices=[16, 32])
    # what 0.33's _register_action does: the negative form leaves the visible list only
    action.option_strings = ["--enable-prefix-caching"]
    return parser


def test_hidden_negative_flags_are_in_the_manifest():
    parser = parser_like_033()
    parser.parse_args(["--no-enable-prefix-caching"])   # accepted (an unknown flag exits 2)
    flags = manifest.describe(parser)
    assert flags["--no-enable-prefix-caching"] == flags["--enable-prefix-caching"]
    assert flags["--enable-prefix-caching"]["negatable"] and not flags["--enable-prefix-caching"]["takes_value"]
    assert flags["--block-size"]["choices"] == [16, 32] and flags["--max-num-seqs"]["type"] == "int"
    assert "-h" not in flags and "--help" not in flags


def test_visible_flags_of_an_ordinary_parser_are_unchanged():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int)
    parser.add_argument("--enforce-eager", action="store_true")
    flags = manifest.describe(parser)
    assert set(flags) == {"--port", "--enforce-eager"}
    assert flags["--port"]["takes_value"] and not flags["--enforce-eager"]["takes_value"]
