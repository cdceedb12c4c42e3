# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Keep what runs now for a rollback, in one call (tasks/backup.yml; tasks/rollback.yml reads it).

    python3 rollback_backup.py ROLLBACK_DIR CONFIG_DIR RECORD UNIT_DIR UNIT_GLOB
        [--mark-drained MARKER BY | --clear-drained MARKER]
    python3 rollback_backup.py --mark-drained MARKER BY | --clear-drained MARKER

ROLLBACK_DIR gets:
  units/   every UNIT_DIR/UNIT_GLOB (the collection's vLLM units: plugins/module_utils/_layout.py)
  env/     every CONFIG_DIR/*.env and *.keys.yaml (they hold the API key: the folders are 0700)
  record.json  the deployment record RECORD (0600), or nothing when there is none
Files are copied only when their bytes or mode differ, kept files of instances that no longer
exist are removed, so that a backup of an unchanged host changes nothing. Prints one JSON object:
`changed`, and the names `kept` and `removed` (never a file's content), `current` (the record's
`current` part: what the host runs, {} before the first deployment; the record holds no secret)
and `drained` (the drain marker's content, null when there is none). Standard library only.

The drain marker (the one place that writes and removes it; the deploy reads it back as a
local fact) rides along, saving a round trip on each side of a host's change window:
--mark-drained writes MARKER ({"by": BY, "since": now}) before the backup, as the drain
needs it before the load balancer is told; --clear-drained removes it once the backup after
the undrain is done. Without the five folders and names, only the marker is written or removed
(tasks/drain_marker.yml, for a restart that changes nothing to back up).

It replaces eleven module calls (each a round trip to the host) with one; the layout is the one
tasks/rollback.yml has always read.
"""

from __future__ import annotations

import fnmatch
import json
import os
import stat
import sys
import tempfile
import time

ENV_PATTERNS = ("*.env", "*.keys.yaml")


def _regular_files(folder, patterns):
    """{basename: path} of the regular files (not links) in folder that match a pattern."""
    out = {}
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return out
    for name in names:
        path = os.path.join(folder, name)
        if any(fnmatch.fnmatchcase(name, p) for p in patterns) and stat.S_ISREG(os.lstat(path).st_mode):
            out[name] = path
    return out


def _ensure_dir(path, mode):
    """A root-owned folder with exactly this mode; True when it was created or changed."""
    changed = False
    if not os.path.isdir(path):
        os.makedirs(path, mode)
        changed = True
    st = os.stat(path)
    if stat.S_IMODE(st.st_mode) != mode:
        os.chmod(path, mode)
        changed = True
    if os.geteuid() == 0 and (st.st_uid, st.st_gid) != (0, 0):
        os.chown(path, 0, 0)
        changed = True
    return changed


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _copy(src, dest, mode=None):
    """Copy src to dest (atomic rename) when its bytes or mode differ; True when it wrote."""
    data = _read(src)
    mode = stat.S_IMODE(os.stat(src).st_mode) if mode is None else mode
    try:
        if _read(dest) == data and stat.S_IMODE(os.stat(dest).st_mode) == mode:
            return False
    except FileNotFoundError:
        pass
    _write_atomic(dest, data, mode)
    return True


def _write_atomic(dest, data, mode):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest), prefix=".kvfleet-")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def backup(rollback_dir, config_dir, record, unit_dir, unit_glob):
    """Make rollback_dir hold what runs now; returns {changed, kept, removed}."""
    changed = False
    # the parent stays readable: the unprivileged monitor keeps its own folder beside the backup
    changed |= _ensure_dir(os.path.dirname(rollback_dir.rstrip("/")), 0o755)
    for sub in ("", "units", "env"):
        changed |= _ensure_dir(os.path.join(rollback_dir, sub), 0o700)
    now = {"units": _regular_files(unit_dir, (unit_glob,)), "env": _regular_files(config_dir, ENV_PATTERNS)}
    kept, removed = [], []
    for kind, files in now.items():
        folder = os.path.join(rollback_dir, kind)
        for name, path in files.items():
            changed |= _copy(path, os.path.join(folder, name))
            kept.append("%s/%s" % (kind, name))
        # files of instances that no longer exist (tasks/rollback.yml would put them back)
        for name in sorted(os.listdir(folder)):
            if name not in files:
                os.unlink(os.path.join(folder, name))
                removed.append("%s/%s" % (kind, name))
                changed = True
    kept_record = os.path.join(rollback_dir, "record.json")
    if os.path.isfile(record):
        changed |= _copy(record, kept_record, mode=0o600)
        kept.append("record.json")
    elif os.path.lexists(kept_record):
        # no record now (before the first deployment): a rollback then removes the new one
        os.unlink(kept_record)
        removed.append("record.json")
        changed = True
    return {"changed": changed, "kept": kept, "removed": removed}


def mark_drained(marker, by, now=None):
    """Write the drain marker (0644 in a 0755 folder, as the local facts it joins)."""
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    os.makedirs(os.path.dirname(marker), mode=0o755, exist_ok=True)
    _write_atomic(marker, (json.dumps({"by": by, "since": since}) + "\n").encode(), 0o644)


def _json_or_none(path):
    """The JSON object in path, or None when it is absent or unreadable as one."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def main(argv):
    positional, marker = [], {}
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--mark-drained" and len(args) >= 2 and not marker:
            marker = {"mark": args.pop(0), "by": args.pop(0)}
        elif arg == "--clear-drained" and args and not marker:
            marker = {"clear": args.pop(0)}
        elif arg.startswith("--"):
            sys.stderr.write(__doc__)
            return 2
        else:
            positional.append(arg)
    if len(positional) not in (0, 5) or not (positional or marker):
        sys.stderr.write(__doc__)
        return 2
    cleared = False
    if "mark" in marker:
        mark_drained(marker["mark"], marker["by"])
    out = backup(*positional) if positional else {}
    if "clear" in marker and os.path.lexists(marker["clear"]):
        os.unlink(marker["clear"])
        cleared = True
    if not positional:
        # the marker alone: changed when it was written or removed
        out["changed"] = "mark" in marker or cleared
    record = (_json_or_none(positional[2]) if positional else None) or {}
    out["current"] = record.get("current") if isinstance(record.get("current"), dict) else {}
    drained = marker.get("mark") or marker.get("clear")
    out["drained"] = _json_or_none(drained) if drained else None
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
