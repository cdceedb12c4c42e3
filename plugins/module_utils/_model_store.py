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

import errno
import hashlib
import json
import os
import re
import shutil
import stat
import time

__all__ = ["ManifestError", "TooLarge", "UnsafePath", "copy_hashed", "parse_manifest", "scan", "stamp_ok", "write_stamp", "promote",
           "prune_plan", "prune", "link_in_path", "free_bytes", "STAMP", "manifest_id"]

# Written into a revision's folder once every file matched the manifest. A later run trusts it
# (with every file's size) instead of reading the whole model again.
STAMP = ".kvfleet-verified.json"
_HEX = re.compile(r"^[0-9a-fA-F]{64}\Z")
_CHUNK = 1 << 20


class ManifestError(ValueError):
    """A manifest that cannot be used; the message names the line and what is wrong."""


class UnsafePath(ValueError):
    """A folder root would reach through a symbolic link (or a part that is not a folder); the
    message names the path."""


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


class TooLarge(ValueError):
    """More bytes than the limit of copy_hashed."""


def copy_hashed(src, out=None, limit=None, digest=None):
    """Read file object `src` to its end in 1 MiB blocks, writing each to `out` when given:
    (sha256 hex digest, bytes read). A download is checked as it arrives (module model_fetch).
    limit: the most bytes it may bring; TooLarge past it (an endless body stops there).
    digest: a hashlib sha256 object to go on from (a download resumed after the bytes it hashed)."""
    digest, size = digest if digest is not None else hashlib.sha256(), 0
    while True:
        block = src.read(_CHUNK)
        if not block:
            break
        digest.update(block)
        size += len(block)
        if limit is not None and size > limit:
            raise TooLarge("more than %d bytes" % limit)
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


# The store's folders are beside (or inside) what the service user owns: it can replace a folder
# by a symbolic link at any moment. Root opens each part itself, never following a link
# (O_NOFOLLOW), and works inside the folder it opened (dir_fd), so a link put in place between two
# steps makes the step fail instead of reaching outside.
_DIR_FLAGS = (os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
              | getattr(os, "O_CLOEXEC", 0))


_AT_SUPPORTED = (hasattr(os, "O_NOFOLLOW") and hasattr(os, "O_DIRECTORY") and os.open in os.supports_dir_fd
                 and os.stat in os.supports_dir_fd and os.unlink in os.supports_dir_fd
                 and os.rmdir in os.supports_dir_fd and os.listdir in os.supports_fd)


def link_in_path(path):
    """The first part of `path` (made absolute) that is a symbolic link, or None. The search
    ends at the first part that does not exist."""
    probe = os.sep
    for part in os.path.abspath(path).split(os.sep):
        if not part:
            continue
        probe = os.path.join(probe, part)
        if os.path.islink(probe):
            return probe
        if not os.path.exists(probe):
            return None
    return None


def _unsafe(path, what):
    if os.path.islink(path):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return UnsafePath("%s %s is a symbolic link (to %s); nothing is followed through a link"
                          % (what, path, target))
    return UnsafePath("%s %s is not a folder" % (what, path))


def _open_at(parent_fd, name, shown):
    """os.open of folder `name` in the folder open as parent_fd, not following a link."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise _unsafe(shown, "the folder")
        raise


def _open_dir(path):
    """A descriptor of folder `path`, opened one part at a time from / without following a link;
    None when a part does not exist. UnsafePath when a part is a link or not a folder."""
    path = os.path.abspath(path)
    fd = os.open(os.sep, _DIR_FLAGS)
    walked = os.sep
    try:
        for part in path.split(os.sep):
            if not part:
                continue
            walked = os.path.join(walked, part)
            try:
                nxt = _open_at(fd, part, walked)
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    os.close(fd)
                    return None
                raise
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _remove_tree_at(parent_fd, name, shown):
    """Remove folder `name` of the folder open as parent_fd and all it holds. A link inside is
    removed itself, never what it points at; `name` (or a folder inside) turning out to be a link
    raises UnsafePath and what is left stays."""
    fd = _open_at(parent_fd, name, shown)
    try:
        for entry in os.listdir(fd):
            try:
                mode = os.stat(entry, dir_fd=fd, follow_symlinks=False).st_mode
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(mode):
                _remove_tree_at(fd, entry, os.path.join(shown, entry))
            else:
                os.unlink(entry, dir_fd=fd)  # a link is removed, not followed
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


def _stamp_time(fd, name, shown):
    """When revision `name` was verified (its stamp's mtime); 0.0 without a regular stamp."""
    try:
        rev = _open_at(fd, name, shown)
    except (OSError, UnsafePath):
        return 0.0
    try:
        st = os.stat(STAMP, dir_fd=rev, follow_symlinks=False)
        return st.st_mtime if stat.S_ISREG(st.st_mode) else 0.0
    except OSError:
        return 0.0
    finally:
        os.close(rev)


def prune(path, keep, protect, dry_run=False):
    """Remove the revisions of model folder `path` beyond `keep` (prune_plan), as root in a store
    another user can write to: no part of `path` may be a symbolic link (UnsafePath), a revision
    that is a link is skipped (never followed, never removed), and removing walks each folder
    from a descriptor of its parent without following links.

    Returns {removed, kept, not_followed: [{name, reason}]}; dry_run removes nothing."""
    if not _AT_SUPPORTED:
        raise UnsafePath("%s: this platform cannot remove folders without following links "
                         "(needs O_NOFOLLOW and dir_fd)" % path)
    path = os.path.abspath(path)
    link = link_in_path(path)
    if link is not None:
        raise _unsafe(link, "%s: prune refused," % path)
    fd = _open_dir(path)
    if fd is None:
        return {"removed": [], "kept": [], "not_followed": []}
    try:
        revisions, skipped = [], []
        for name in sorted(os.listdir(fd)):
            if name.startswith("."):
                continue  # staging folders
            shown = os.path.join(path, name)
            try:
                mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(mode):
                skipped.append({"name": name, "reason": str(_unsafe(shown, "the revision"))})
                continue
            if not stat.S_ISDIR(mode):
                continue  # not a revision
            # a revision never verified is the oldest (first to go)
            revisions.append((name, _stamp_time(fd, name, shown)))
        planned = prune_plan(revisions, keep, protect)
        removed = []
        for name in planned:
            if not dry_run:
                try:
                    _remove_tree_at(fd, name, os.path.join(path, name))
                except UnsafePath as exc:
                    skipped.append({"name": name, "reason": str(exc)})
                    continue
            removed.append(name)
    finally:
        os.close(fd)
    kept = sorted(item[0] for item in revisions if item[0] not in planned)
    return {"removed": removed, "kept": kept, "not_followed": skipped}


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
