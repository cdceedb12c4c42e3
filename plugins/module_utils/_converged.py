# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a verified deploy left on a host, and whether the host still holds exactly that.

After the deploy verified a host, the server role records (`kvfleet-vllm converged --record`)
the fingerprint of what it applied (its settings and the collection, computed on the
controller) and a snapshot of what that left on the host: the digest of each file the role
wrote or reads back (units, environment, key and TLS files, the deployment record, the venv's
stamp), the host tools' files, the listing of the collection's units, the size and time of each
staged model file, and files that must not be there (an install under way). The next deploy
asks (`kvfleet-vllm converged`): the same fingerprint and the same snapshot, and every unit
running no older than its files, is a converged host, known in one round trip instead of the
server role's preflight and plan. Any difference is a reason, and the deploy takes its full path.

Standard library only: the host program imports it (the hosttools role ships module_utils).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os

__all__ = ["STATE_VERSION", "check_spec", "snapshot", "state", "differences", "load"]

STATE_VERSION = 1
# what a spec holds: lists of absolute paths (globs: a folder and a pattern, "DIR/PATTERN")
SPEC_KEYS = ("files", "trees", "stat_trees", "globs", "absent")


def check_spec(spec):
    """The spec, checked: {files, trees, stat_trees, globs, absent: [absolute path]} and
    units: [{unit, files: [path]}]. Raises ValueError naming the field."""
    if not isinstance(spec, dict):
        raise ValueError("the spec must be a JSON object")
    for key in SPEC_KEYS:
        paths = spec.get(key, [])
        if not isinstance(paths, list) or not all(isinstance(p, str) and p.startswith("/") for p in paths):
            raise ValueError("spec.%s must be a list of absolute paths" % key)
    units = spec.get("units", [])
    if not isinstance(units, list) or not all(
            isinstance(u, dict) and isinstance(u.get("unit"), str) and isinstance(u.get("files", []), list)
            for u in units):
        raise ValueError("spec.units must be a list of {unit, files}")
    out = dict((key, sorted(set(spec.get(key, [])))) for key in SPEC_KEYS)
    out["units"] = units
    return out


def _digest(path):
    """sha256 of a regular file's bytes; None when it is missing or not a regular file."""
    try:
        if not os.path.isfile(path) or os.path.islink(path):
            return None
        sha = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                sha.update(block)
        return sha.hexdigest()
    except OSError:
        return None


def _walk(top):
    # bytecode is written beside the host program's library when it first runs: not a change
    for folder, dirs, names in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith(".pyc"):
                continue
            path = os.path.join(folder, name)
            yield os.path.relpath(path, top), path


def _tree(top):
    """{relative path: sha256} of every file under `top` ({} when it is missing)."""
    return dict((rel, _digest(path)) for rel, path in _walk(top))


def _stat_tree(top):
    """{relative path: [size, mtime_ns]} of every file under `top`: a model's weights are not
    read again; what changes them changes their size or time."""
    out = {}
    for rel, path in _walk(top):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        out[rel] = [st.st_size, st.st_mtime_ns]
    return out


def _listing(pattern):
    folder, _sep, glob = pattern.rpartition("/")
    try:
        names = os.listdir(folder or "/")
    except OSError:
        return []
    return sorted(n for n in names if fnmatch.fnmatchcase(n, glob))


def snapshot(spec):
    """What the spec's paths hold now."""
    spec = check_spec(spec)
    return {
        "files": dict((p, _digest(p)) for p in spec["files"]),
        "trees": dict((p, _tree(p)) for p in spec["trees"]),
        "stat_trees": dict((p, _stat_tree(p)) for p in spec["stat_trees"]),
        "globs": dict((p, _listing(p)) for p in spec["globs"]),
        "absent": dict((p, os.path.lexists(p)) for p in spec["absent"]),
    }


def state(spec, fingerprint):
    """The record written after a verified deploy."""
    if not isinstance(fingerprint, str) or not fingerprint:
        raise ValueError("the fingerprint must be a non-empty string")
    spec = check_spec(spec)
    return {"version": STATE_VERSION, "fingerprint": fingerprint, "spec": spec, "snapshot": snapshot(spec)}


def _changed(kind, path, was, now):
    if kind == "files":
        if now is None:
            return "%s is gone" % path
        return "%s changed" % path
    if kind == "globs":
        added = sorted(set(now) - set(was))
        gone = sorted(set(was) - set(now))
        words = ["%s appeared" % n for n in added] + ["%s is gone" % n for n in gone]
        return "; ".join(words) + " (%s)" % path
    if kind == "absent":
        return "%s exists (an install under way or interrupted)" % path
    return "the files under %s changed" % path


def differences(recorded, fingerprint, now=None):
    """Why the host is not what `recorded` (state()) says, as sentences; [] when it is.
    `now`: snapshot(recorded's spec), taken here when not given."""
    if not isinstance(recorded, dict) or recorded.get("version") != STATE_VERSION:
        return ["no verified state recorded (a first deploy, or one by an older collection)"]
    if recorded.get("fingerprint") != fingerprint:
        return ["the settings or the collection changed since the host was last verified"]
    try:
        spec = check_spec(recorded.get("spec"))
    except ValueError as exc:
        return ["the recorded state is unreadable: %s" % exc]
    now = snapshot(spec) if now is None else now
    was = recorded.get("snapshot") or {}
    reasons = []
    for kind in SPEC_KEYS:
        before, after = was.get(kind) or {}, now.get(kind) or {}
        for path in spec[kind]:
            if kind == "absent":
                if after.get(path):
                    reasons.append(_changed(kind, path, None, None))
            elif before.get(path) != after.get(path):
                reasons.append(_changed(kind, path, before.get(path), after.get(path)))
    return reasons


def load(path):
    """The JSON object at `path` (the recorded state, or a local fact file), or None (missing,
    unreadable, not JSON, not an object)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
