# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Models as pinned artefacts: a sha256 manifest, a folder checked against it, a store of
revisions on the host (<store>/<name>/<revision>/).

The model_store module runs this on the controller (is the source what was tested?) and on the
host (is the staged copy complete and intact? promote it; prune old revisions). Standard library
only: it runs on any managed host.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time

__all__ = ["ManifestError", "parse_manifest", "scan", "stamp_ok", "write_stamp", "promote",
           "prune_plan", "free_bytes", "STAMP", "manifest_id"]

# Written into a revision's folder once every file matched the manifest. A later run trusts it
# (with every file's size) instead of reading the whole model again.
STAMP = ".kvfleet-verified.json"
_HEX = re.compile(r"^[0-9a-fA-F]{64}$")
_CHUNK = 1 << 20


class ManifestError(ValueError):
    """A manifest that cannot be used; the message names the line and what is wrong."""


def _safe_relpath(path):
    """A manifest path must stay inside the model folder: relative, no '..', no empty part."""
    if path.startswith("./"):
        path = path[2:]
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in path:
        return None
    return path


def parse_manifest(text):
    """sha256sum's output (``<64 hex>  <path>`` or ``<64 hex> *<path>``; blank lines and lines
    starting with # ignored) -> {relative path: lower-case sha256}."""
    if not isinstance(text, str) or not text.strip():
        raise ManifestError("the manifest is empty: expected sha256sum lines (<sha256>  <path>)")
    out = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        digest, sep, path = line.partition(" ")
        if not sep or not _HEX.match(digest):
            raise ManifestError("manifest line %d: expected <sha256 (64 hex digits)>  <path>, got %r"
                                % (number, line[:120]))
        # "  path" (text mode) or " *path" (binary mode)
        path = path[1:] if path[:1] in (" ", "*") else path
        rel = _safe_relpath(path)
        if rel is None:
            raise ManifestError("manifest line %d: %r must be a relative path inside the model folder "
                                "(no '..', no leading '/')" % (number, path))
        if rel == STAMP:
            raise ManifestError("manifest line %d: %s is the collection's own file" % (number, STAMP))
        if rel in out:
            raise ManifestError("manifest line %d: %s is listed twice" % (number, rel))
        out[rel] = digest.lower()
    if not out:
        raise ManifestError("the manifest lists no file")
    return out


def manifest_id(manifest):
    """A short fingerprint of a parsed manifest (which files, which contents)."""
    blob = json.dumps(sorted(manifest.items())).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]


def copy_hashed(src, out=None):
    """Read file object `src` to its end in 1 MiB blocks, writing each to `out` when given:
    (sha256 hex digest, bytes read). A download is checked as it arrives (module model_fetch)."""
    digest, size = hashlib.sha256(), 0
    while True:
        block = src.read(_CHUNK)
        if not block:
            break
        digest.update(block)
        size += len(block)
        if out is not None:
            out.write(block)
    return digest.hexdigest(), size


def _sha256(path):
    with open(path, "rb") as handle:
        return copy_hashed(handle)[0]


def _files_under(root):
    found = []
    for base, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            rel = os.path.relpath(os.path.join(base, name), root).replace(os.sep, "/")
            if rel != STAMP:
                found.append(rel)
    return found


def scan(root, manifest, hash_files=True):
    """Check folder `root` against `manifest`.

    Returns {exists, verified, files, bytes (of the manifest's files present), missing,
    mismatched, extra, not_regular}. `hash_files` false compares sizes with the stamp only
    (see stamp_ok); true reads every byte."""
    out = {"exists": os.path.isdir(root), "verified": False, "files": len(manifest), "bytes": 0,
           "missing": [], "mismatched": [], "extra": [], "not_regular": []}
    if not out["exists"]:
        out["missing"] = sorted(manifest)
        return out
    real_root = os.path.realpath(root)
    for rel in sorted(manifest):
        path = os.path.join(root, rel)
        # a symbolic link could point anywhere (outside the folder, at a file that changes)
        if os.path.islink(path) or not os.path.realpath(path).startswith(real_root + os.sep):
            out["not_regular"].append(rel)
            continue
        if not os.path.exists(path):
            out["missing"].append(rel)
            continue
        if not os.path.isfile(path):
            out["not_regular"].append(rel)
            continue
        out["bytes"] += os.path.getsize(path)
        if hash_files and _sha256(path) != manifest[rel]:
            out["mismatched"].append(rel)
    out["extra"] = [rel for rel in _files_under(root) if rel not in manifest]
    out["verified"] = bool(hash_files and not (out["missing"] or out["mismatched"] or out["not_regular"]))
    return out


def stamp_ok(root, manifest):
    """True when `root` holds the stamp of this very manifest and every file still has the
    size it had when verified (a cheap check; a re-verification reads every byte)."""
    try:
        with open(os.path.join(root, STAMP)) as handle:
            stamp = json.load(handle)
    except (OSError, ValueError):
        return False
    if not isinstance(stamp, dict) or stamp.get("manifest") != manifest_id(manifest):
        return False
    sizes = stamp.get("sizes") or {}
    for rel in manifest:
        path = os.path.join(root, rel)
        if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) != sizes.get(rel):
            return False
    return True


def write_stamp(root, manifest, extra=None):
    stamp = {"manifest": manifest_id(manifest), "verified": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             "sizes": dict((rel, os.path.getsize(os.path.join(root, rel))) for rel in manifest)}
    stamp.update(extra or {})
    tmp = os.path.join(root, STAMP + ".tmp")
    with open(tmp, "w") as handle:
        json.dump(stamp, handle, sort_keys=True)
    os.chmod(tmp, 0o644)
    os.rename(tmp, os.path.join(root, STAMP))
    return stamp


def promote(staging, target, manifest, keep_failed=False, hashed=False):
    """Verify every byte of `staging`, then rename it to `target` and stamp it.

    hashed: the caller checked each file's sha256 as it wrote it (copy_hashed); then only the
    folder's shape is checked here (every file present, regular), not every byte again.
    Returns the scan. A staging folder that does not match is removed (unless keep_failed) and
    `target` is not touched; the caller fails with the scan's lists."""
    result = scan(staging, manifest, hash_files=not hashed)
    if hashed:
        result["verified"] = not (result["missing"] or result["not_regular"])
    if not result["verified"]:
        if not keep_failed and os.path.isdir(staging):
            shutil.rmtree(staging)
        return result
    # files the manifest does not list are not part of the artefact: they do not travel
    for rel in result["extra"]:
        os.unlink(os.path.join(staging, rel))
    if os.path.isdir(target):
        shutil.rmtree(target)  # a revision folder without a valid stamp (the caller checked)
    write_stamp(staging, manifest)
    os.rename(staging, target)
    return result


def prune_plan(revisions, keep, protect):
    """Which revisions to remove: `keep` are kept, those in `protect` (the revision in use)
    first, then the most recently verified. `revisions` is [(name, verified_time)]."""
    keep = max(int(keep), 1)
    names = set(item[0] for item in revisions)
    kept = set(protect) & names
    newest = sorted(revisions, key=lambda item: (item[1], item[0]), reverse=True)
    for name, _when in newest:
        if len(kept) >= keep:
            break
        kept.add(name)
    return sorted(names - kept)


def free_bytes(path):
    """Free bytes for an unprivileged writer on the filesystem holding `path` (or the nearest
    folder above it that exists), and that folder."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    stat = os.statvfs(probe)
    return stat.f_bavail * stat.f_frsize, probe
