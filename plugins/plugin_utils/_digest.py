# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One digest of the collection's code on the controller: its roles and plugins, every file's
path and bytes. Part of a host's converged fingerprint (module_utils/_converged.py): a
collection that renders, ships or decides anything differently is a different collection, and
every host takes the deploy's full path once."""

from __future__ import annotations

import hashlib
import os

__all__ = ["tree_digest", "collection_root", "collection_digest"]

FOLDERS = ("roles", "plugins")
SKIP_DIRS = {"__pycache__"}


def tree_digest(root, folders=FOLDERS):
    """sha256 over (relative path, bytes) of every regular file under root/FOLDER, in path order."""
    sha = hashlib.sha256()
    for top in folders:
        for folder, dirs, names in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            for name in sorted(names):
                if name.endswith((".pyc", ".pyo")):
                    continue
                path = os.path.join(folder, name)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                with open(path, "rb") as f:
                    body = f.read()
                sha.update(("%s\0%d\0" % (rel, len(body))).encode("utf-8"))
                sha.update(body)
    return sha.hexdigest()


def collection_root():
    """This collection's root (plugins/plugin_utils/ is two folders down)."""
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def collection_digest():
    return tree_digest(collection_root())
