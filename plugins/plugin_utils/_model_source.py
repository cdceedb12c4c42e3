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
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}\Z")
_PATH = re.compile(r"^/[A-Za-z0-9._/+@:-]*\Z")
_KINDS = ("controller", "host", "hub")


class ModelSourceError(ValueError):
    """Bad model source settings; the message names the field and what is allowed."""


_COMMIT = re.compile(r"^[0-9a-f]{40}\Z")
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?\Z")
_ENDPOINT = re.compile(r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?\Z")


def model_source(source, store, var="vllm_server_model_source", hub_cache=None, hub_endpoint=None):
    """{name, revision, from, path, manifest[, repo]} -> the same plus dir (what --model points at),
    staging (the copy's folder beside it), model_dir (the model's folder of revisions), staged
    (whether the collection copies it into the store from the controller).

    from: hub downloads on the controller first (module model_fetch) into `path`, by default
    <hub_cache>/<name>/<revision>, from <hub_endpoint>/<repo>/resolve/<revision>/ (hub_url); the
    revision must be a commit, so that the bytes cannot move under the manifest."""
    if not isinstance(source, dict):
        raise ModelSourceError("%s must be a dictionary (name, revision, from, path, manifest), got %r"
                               % (var, source))
    kind = source.get("from", "controller")
    if kind not in _KINDS:
        raise ModelSourceError("%s.from must be one of %s, got %r" % (var, ", ".join(_KINDS), kind))
    allowed = {"name", "revision", "from", "path", "manifest"} | ({"repo"} if kind == "hub" else set())
    unknown = sorted(set(source) - allowed)
    if unknown:
        raise ModelSourceError("%s: unknown key(s) %s; allowed with from: %s: %s"
                               % (var, ", ".join(unknown), kind, ", ".join(sorted(allowed))))
    for key in ("name", "revision"):
        value = source.get(key)
        if not isinstance(value, str) or not _NAME.match(value):
            raise ModelSourceError("%s.%s must be 1-100 letters, digits, '.', '_' or '-' starting with a "
                                   "letter or digit (it names a folder); got %r" % (var, key, value))
    out = dict(source)
    if kind == "hub":
        if not _COMMIT.match(source["revision"]):
            raise ModelSourceError("%s.revision must be the repository's commit (40 lower-case hex digits) with "
                                   "from: hub: a branch or tag can move under the manifest; got %r"
                                   % (var, source["revision"]))
        repo = source.get("repo")
        if not isinstance(repo, str) or not _REPO.match(repo):
            raise ModelSourceError("%s.repo must be the hub's repository id (org/name, letters, digits, '.', "
                                   "'_', '-'), got %r" % (var, repo))
        if not isinstance(hub_endpoint, str) or not _ENDPOINT.match(hub_endpoint):
            raise ModelSourceError("vllm_server_model_hub_endpoint must be an http(s) URL such as "
                                   "https://huggingface.co, got %r" % (hub_endpoint,))
        if "path" not in source:
            if not isinstance(hub_cache, str) or not _PATH.match(hub_cache):
                raise ModelSourceError("vllm_server_model_hub_cache must be an absolute path on the controller "
                                       "without spaces, got %r" % (hub_cache,))
            out["path"] = "%s/%s/%s" % (hub_cache.rstrip("/"), source["name"], source["revision"])
        out["hub_url"] = "%s/%s/resolve/%s/" % (hub_endpoint.rstrip("/"), repo, source["revision"])
    for key in ("path", "manifest"):
        value = out.get(key)
        if not isinstance(value, str) or not _PATH.match(value) or "/../" in value + "/":
            raise ModelSourceError("%s.%s must be an absolute path without spaces or '..' (%s), got %r"
                                   % (var, key, "on the host" if key == "path" and kind == "host"
                                      else "on the controller", value))
    if not isinstance(store, str) or not _PATH.match(store):
        raise ModelSourceError("vllm_server_model_store must be an absolute path without spaces, got %r" % (store,))
    out["from"] = kind
    out["staged"] = kind != "host"
    out["model_dir"] = "%s/%s" % (store.rstrip("/"), source["name"])
    if out["staged"]:
        out["dir"] = "%s/%s" % (out["model_dir"], source["revision"])
        out["staging"] = "%s/.staging-%s" % (out["model_dir"], source["revision"])
    else:
        out["dir"] = source["path"].rstrip("/") or "/"
        out["staging"] = None
    out["label"] = "%s@%s" % (source["name"], source["revision"] if kind != "hub" else source["revision"][:12])
    out["var"] = var
    return out


def lora_sources(adapters, store, var="vllm_server_lora_adapters", hub_cache=None, hub_endpoint=None):
    """A list of adapter sources (each like a model source; `name` is the name clients ask
    for) -> the same as model_source per adapter, under <store>/loras."""
    if not isinstance(adapters, list):
        raise ModelSourceError("%s must be a list of {name, revision, from, path, manifest}, got %r"
                               % (var, adapters))
    out, seen = [], set()
    for index, adapter in enumerate(adapters):
        item = model_source(adapter, store.rstrip("/") + "/loras" if isinstance(store, str) else store,
                            var="%s[%d]" % (var, index), hub_cache=hub_cache.rstrip("/") + "/loras"
                            if isinstance(hub_cache, str) else hub_cache, hub_endpoint=hub_endpoint)
        if item["name"] in seen:
            raise ModelSourceError("%s: the adapter name %r is used twice" % (var, item["name"]))
        seen.add(item["name"])
        out.append(item)
    return out
