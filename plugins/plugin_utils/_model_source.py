# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""vllm_server_model_source -> where the model comes from and where it lives on the host.

The unit's --model, the staging tasks, the plan and the prune read the paths from here.
"""

from __future__ import annotations

import re

__all__ = ["ModelSourceError", "model_source", "lora_sources"]

# a store folder name: it is a path component and goes in argv and in the unit
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_PATH = re.compile(r"^/[A-Za-z0-9._/+@:-]*$")
_KINDS = ("controller", "host")


class ModelSourceError(ValueError):
    """Bad model source settings; the message names the field and what is allowed."""


def model_source(source, store, var="vllm_server_model_source"):
    """{name, revision, from, path, manifest} -> the same plus dir (what --model points at),
    staging (the copy's folder beside it), model_dir (the model's folder of revisions), staged
    (whether the collection copies it into the store)."""
    if not isinstance(source, dict):
        raise ModelSourceError("%s must be a dictionary (name, revision, from, path, manifest), got %r"
                               % (var, source))
    allowed = {"name", "revision", "from", "path", "manifest"}
    unknown = sorted(set(source) - allowed)
    if unknown:
        raise ModelSourceError("%s: unknown key(s) %s; allowed: %s"
                               % (var, ", ".join(unknown), ", ".join(sorted(allowed))))
    kind = source.get("from", "controller")
    if kind not in _KINDS:
        raise ModelSourceError("%s.from must be one of %s, got %r (a hub model: download it on the "
                               "controller with its pinned revision, then from: controller; docs/models.md)"
                               % (var, ", ".join(_KINDS), kind))
    for key in ("name", "revision"):
        value = source.get(key)
        if not isinstance(value, str) or not _NAME.match(value):
            raise ModelSourceError("%s.%s must be 1-100 letters, digits, '.', '_' or '-' starting with a "
                                   "letter or digit (it names a folder); got %r" % (var, key, value))
    for key in ("path", "manifest"):
        value = source.get(key)
        if not isinstance(value, str) or not _PATH.match(value) or "/../" in value + "/":
            raise ModelSourceError("%s.%s must be an absolute path without spaces or '..' (%s), got %r"
                                   % (var, key, "on the controller" if key == "manifest" or kind == "controller"
                                      else "on the host", value))
    if not isinstance(store, str) or not _PATH.match(store):
        raise ModelSourceError("vllm_server_model_store must be an absolute path without spaces, got %r" % (store,))
    out = dict(source)
    out["from"] = kind
    out["staged"] = kind == "controller"
    out["model_dir"] = "%s/%s" % (store.rstrip("/"), source["name"])
    if kind == "controller":
        out["dir"] = "%s/%s" % (out["model_dir"], source["revision"])
        out["staging"] = "%s/.staging-%s" % (out["model_dir"], source["revision"])
    else:
        out["dir"] = source["path"].rstrip("/") or "/"
        out["staging"] = None
    out["label"] = "%s@%s" % (source["name"], source["revision"])
    out["var"] = var
    return out


def lora_sources(adapters, store, var="vllm_server_lora_adapters"):
    """A list of adapter sources (each like a model source; `name` is the name clients ask
    for) -> the same as model_source per adapter, under <store>/loras."""
    if not isinstance(adapters, list):
        raise ModelSourceError("%s must be a list of {name, revision, from, path, manifest}, got %r"
                               % (var, adapters))
    out, seen = [], set()
    for index, adapter in enumerate(adapters):
        item = model_source(adapter, store.rstrip("/") + "/loras" if isinstance(store, str) else store,
                            var="%s[%d]" % (var, index))
        if item["name"] in seen:
            raise ModelSourceError("%s: the adapter name %r is used twice" % (var, item["name"]))
        seen.add(item["name"])
        out.append(item)
    return out
