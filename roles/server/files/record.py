# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Write the server role's deployment record in one call (tasks/service.yml, and the deploy's
KV cache sizing in roles/rollout/tasks/deploy_verify.yml).

    python3 record.py RECORD [--current JSON] [--sizing JSON] [--check]

RECORD is the local fact file (/etc/ansible/facts.d/kvfleet_vllm_server.fact) that the host
program, the monitor, the restart guard and the playbooks read. --current: what runs now; the
record keeps the one before as `previous` when the version or the flags (`config`) change, and
the KV cache sizing while they do not. --sizing: the deploy's sizing of the current settings
(only when the record has a `current`; its `config` is added, the one it sizes). The file is rewritten (atomically, 0644) only when its
text changes, in the layout Ansible's to_nice_json gives. --check: say whether it would change;
write nothing. Prints {"changed": ...}. The record holds no secret. Standard library only.

It replaces a facts read and a copy (two round trips, each with its own module run) with one.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile


def merged(old, current=None, sizing=None):
    """The record to write, from the one on disk (old: {} if none) and what runs now."""
    record = dict(old) if isinstance(old, dict) else {}
    if current is not None:
        was = record.get("current") if isinstance(record.get("current"), dict) else {}
        same = [was.get("version", ""), was.get("config", "")] == [current.get("version"), current.get("config")]
        out = {"current": current,
               "previous": record["current"] if "current" in record and not same else record.get("previous", {})}
        if same and "sizing" in record:
            out["sizing"] = record["sizing"]
        record = out
    if sizing is not None and isinstance(record.get("current"), dict):
        record["sizing"] = dict(sizing, config=record["current"].get("config"))
    return record


def text(record):
    return json.dumps(record, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


def write(path, current=None, sizing=None, check=False):
    try:
        with open(path, encoding="utf-8") as f:
            before = f.read()
    except FileNotFoundError:
        before = None
    try:
        old = json.loads(before) if before else {}
    except ValueError:
        old = {}   # a record nobody can read is replaced, as the copy it replaces would have
    after = text(merged(old, current, sizing))
    changed = after != before
    if changed and not check:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".kvfleet-")
        try:
            os.fchmod(fd, 0o644)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(after)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    return {"changed": changed}


def main(argv):
    args, opts = [], {"check": False}
    items = list(argv)
    while items:
        arg = items.pop(0)
        if arg in ("--current", "--sizing") and items:
            try:
                opts[arg[2:]] = json.loads(items.pop(0))
            except ValueError:
                sys.stderr.write("%s must be JSON\n" % arg)
                return 2
        elif arg == "--check":
            opts["check"] = True
        elif arg.startswith("--"):
            sys.stderr.write(__doc__)
            return 2
        else:
            args.append(arg)
    if len(args) != 1 or not any(k in opts for k in ("current", "sizing")):
        sys.stderr.write(__doc__)
        return 2
    if "current" in opts and not isinstance(opts["current"], dict):
        sys.stderr.write("--current must be a JSON object\n")
        return 2
    print(json.dumps(write(args[0], opts.get("current"), opts.get("sizing"), opts["check"])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
