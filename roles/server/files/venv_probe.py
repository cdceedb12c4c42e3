# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Say whether a version's venv is complete, and how much disk is free, before anything changes.

    python3 venv_probe.py VENV PACKAGE VERSION [PATH ...]

Prints one JSON object: `state` (see venv_state), `why`, `installing` (the marker of an install
under way is there), and under `disk` one entry per PATH
({path, at, dev, free}): `at` is PATH or, when PATH does not exist yet (a fresh host), its
nearest existing parent, whose filesystem PATH will be created on; `free` is the bytes an
unprivileged writer may use there (df's "Available"); and `units`, the collection's vLLM units
on the host (UNIT_GLOB in UNIT_DIR), which the plan (tasks/plan.yml) compares with
the instances the host should have. Changes nothing; standard library only.

    python3 venv_probe.py VENV PACKAGE VERSION UNIT_DIR UNIT_GLOB [PATH ...]

UNIT_DIR and UNIT_GLOB: systemd's folder and the pattern of the collection's vLLM units
(plugins/module_utils/_layout.py); a unit counts when the part the pattern's * stands for is an
instance name.

A venv is complete when its stamp (STAMP, written by the role after pip, the removal of the
packages that break it and the version check all succeeded) names VERSION. A venv without the
stamp is either an install made before the stamp existed (adopted when its package is at
VERSION and no install was under way) or what a failed install left (broken: removed and
installed again, never used as it is).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

STAMP = ".kvfleet-complete"
# Beside the venv, written before pip starts and removed after the stamp: a venv next to it is
# what an interrupted or failed install left, whatever its package version says.
INSTALLING = ".installing"
_READ_VERSION = "from importlib.metadata import version; import sys; print(version(sys.argv[1]))"
# an instance name, as the server role accepts it (plugin_utils/_instances.py)
_INSTANCE = "[a-z0-9][a-z0-9_-]*"


def units(unit_dir, unit_glob):
    """The collection's vLLM unit files (the instances' and serving groups' nodes)."""
    prefix, _star, suffix = unit_glob.partition("*")
    pattern = re.compile("^" + re.escape(prefix) + _INSTANCE + re.escape(suffix) + "$")
    try:
        return sorted(n for n in os.listdir(unit_dir) if pattern.match(n))
    except OSError:
        return []


def venv_state(exists, stamp, installing, version, pinned):
    """(state, why) from what is on disk; state is one of:

    complete  the stamp names the pinned version
    adopt     no stamp, no install under way, and the package is at the pinned version (an
              install made before the stamp existed): write the stamp, install nothing
    broken    anything else that exists: remove it and install again
    absent    no venv: install
    """
    if not exists:
        return "absent", "no venv"
    if stamp is not None:
        if stamp == pinned:
            return "complete", "stamp names %s" % pinned
        return "broken", "its stamp names %r, not %s" % (stamp, pinned)
    if installing:
        return "broken", "an earlier install did not finish (%s is there)" % INSTALLING
    if version is None:
        return "broken", "no stamp and its package version cannot be read"
    if version != pinned:
        return "broken", "no stamp and its package is at %s, not %s" % (version, pinned)
    return "adopt", "installed before the stamp existed, at %s" % pinned


def _read_stamp(venv):
    try:
        with open(os.path.join(venv, STAMP), encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return None


def _read_version(venv, package):
    """The package version as the venv's own python sees it; None when that fails."""
    try:
        out = subprocess.run([os.path.join(venv, "bin", "python"), "-c", _READ_VERSION, package],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=120,
                             check=True, universal_newlines=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def disk(path):
    """Free bytes on the filesystem PATH is, or will be created, on."""
    at = os.path.abspath(path)
    while not os.path.exists(at) and at != os.path.dirname(at):
        at = os.path.dirname(at)
    st = os.statvfs(at)
    return {"path": path, "at": at, "dev": os.stat(at).st_dev, "free": st.f_bavail * st.f_frsize}


def probe(venv, package, pinned, paths, unit_dir, unit_glob):
    exists = os.path.isdir(venv)
    stamp = _read_stamp(venv) if exists else None
    installing = os.path.exists(venv + INSTALLING)
    # the venv's python only runs for a venv without a stamp (once, before the stamp exists)
    version = _read_version(venv, package) if exists and stamp is None and not installing else None
    state, why = venv_state(exists, stamp, installing, version, pinned)
    return {"state": state, "why": why, "venv": venv, "installing": installing,
            "disk": [disk(p) for p in paths], "units": units(unit_dir, unit_glob)}


def main(argv):
    if len(argv) < 5 or "*" not in argv[4]:
        sys.stderr.write("usage: venv_probe.py VENV PACKAGE VERSION UNIT_DIR UNIT_GLOB [PATH ...]\n")
        return 2
    print(json.dumps(probe(argv[0], argv[1], argv[2], argv[5:], argv[3], argv[4]), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
