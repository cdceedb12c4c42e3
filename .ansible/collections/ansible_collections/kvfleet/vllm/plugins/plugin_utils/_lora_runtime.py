# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether a unit change is only the LoRA adapters it lists, so that the running server can take
it through vLLM's runtime load/unload endpoints instead of a restart (roles/server/tasks/lora_runtime.yml).

The written unit and the one the role would write are compared whole, with the words of
--lora-modules taken out: any other difference (a flag, the version's venv, a unit setting) means
a restart, as before."""

from __future__ import annotations

import shlex

_FLAG = "--lora-modules"


class LoraRuntimeError(ValueError):
    pass


def split_unit(text):
    """A unit's text -> (the text with its --lora-modules words taken out, the other ExecStart=
    words, {name: path} or None when an item is not name=path). (None, None, None) for a text
    without a readable ExecStart=."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("ExecStart="):
            try:
                words = shlex.split(line[len("ExecStart="):])
            except ValueError:
                return None, None, None
            break
    else:
        return None, None, None
    modules, base = {}, []
    j = 0
    while j < len(words):
        if words[j] == _FLAG:
            j += 1
            while j < len(words) and not words[j].startswith("--"):
                name, eq, path = words[j].partition("=")
                if not eq or name.startswith("{"):
                    modules = None      # vLLM's JSON form: not something this role writes
                elif modules is not None:
                    modules[name] = path
                j += 1
            continue
        base.append(words[j])
        j += 1
    lines[i] = "ExecStart=" + " ".join(shlex.quote(w) for w in base)
    return "\n".join(lines), base, modules


def plan(current, wanted):
    """The unit on the host (`current`, its text; '' or None when there is none) and the one the
    role would write (`wanted`) -> {runtime, load: [{name, path}], unload: [name], actions, why}.

    runtime is true when the two differ in the adapters alone and both enable LoRA: `load` are the
    adapters that are new or come from another folder now, `unload` those no longer listed;
    `actions` is both in the order to run them (unloads first: they free vLLM's adapter slots),
    each {name, state: absent} or {name, path, state: present}."""
    if not isinstance(wanted, str) or (current is not None and not isinstance(current, str)):
        raise LoraRuntimeError("lora_runtime compares two unit texts (strings), got %s and %s"
                               % (type(current).__name__, type(wanted).__name__))
    out = {"runtime": False, "load": [], "unload": [], "actions": [], "why": None}
    if not current:
        out["why"] = "no unit yet"
        return out
    (old_base, _words, old), (new_base, new_words, new) = split_unit(current), split_unit(wanted)
    if old_base is None or new_base is None:
        out["why"] = "a unit without a readable ExecStart="
    elif old is None or new is None:
        out["why"] = "an adapter not written as name=path"
    elif old == new:
        out["why"] = "the same adapters"
    elif old_base != new_base:
        out["why"] = "other settings change too"
    elif "--enable-lora" not in new_words:
        out["why"] = "LoRA is not enabled"
    else:
        load = [{"name": n, "path": p} for n, p in new.items() if old.get(n) != p]
        unload = [n for n in old if n not in new]
        out.update(runtime=True, load=load, unload=unload, why="only the adapters change",
                   actions=[{"name": n, "state": "absent"} for n in unload]
                   + [dict(a, state="present") for a in load])
    return out
