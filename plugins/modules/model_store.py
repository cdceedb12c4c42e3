#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: model_store
short_description: Check a model folder against its sha256 manifest, promote a staged revision, prune old ones
version_added: 0.4.0
description:
  - A model (or LoRA adapter) is a pinned artefact, a folder whose every file is listed with its
    sha256 in a manifest (the output of C(sha256sum)).
  - O(operation=check) checks a folder against the manifest and changes nothing (the controller's
    source before it is pushed, or a revision already on a host). It also reports the free space
    where the folder is or would be.
  - O(operation=promote) reads every byte of a staging folder, and only when all files match renames
    it to O(path) and stamps it as verified. A staging folder that does not match is removed and
    the module fails naming the files; O(path) is left as it was.
  - O(operation=prune) removes revisions of a model folder beyond the O(keep) most recently verified,
    never one listed in O(protect).
  - The store is inside a folder the service user can write to, and the module runs as root. So
    O(operation=prune) and O(operation=promote) refuse a O(path) (or O(src)) of which any part is a
    symbolic link, and O(operation=prune) never follows a link. A revision that is a link is
    skipped and reported in RV(not_followed), and folders are removed from a descriptor of their
    parent (C(O_NOFOLLOW)), so a link put in place meanwhile stops the removal instead of
    reaching outside the store.
  - The C(kvfleet.vllm.server) role uses it to stage models before a deploy drains a host
    (docs/models.md).
author:
  - kvfleet maintainers (@kvfleet)
attributes:
  check_mode:
    support: full
    description: In check mode O(operation=promote) and O(operation=prune) report what they would do.
  diff_mode:
    support: none
    description: Folders of model files are not diffed.
options:
  path:
    description:
      - O(operation=check) the folder to check; O(operation=promote) the revision folder to create;
        O(operation=prune) the model's folder, which holds one folder per revision.
    type: path
    required: true
  operation:
    description: What to do.
    type: str
    choices: [check, promote, prune]
    default: check
  manifest:
    description:
      - The manifest's text, C(sha256sum) lines (C(<sha256>  <relative path>)). Required unless
        O(operation=prune).
      - Paths must stay inside the folder; files the manifest does not list are reported as
        RV(extra) and are not copied into a promoted revision.
    type: str
  verify:
    description:
      - How O(operation=check) checks the files. V(full) reads every byte. V(stamp) trusts the stamp
        a promotion wrote (same manifest, every file the size it had), and says RV(verified=false)
        for a folder without one.
    type: str
    choices: [full, stamp]
    default: full
  src:
    description: O(operation=promote) the staging folder, on the same filesystem as O(path).
    type: path
  keep:
    description: O(operation=prune) how many verified revisions to keep (at least 1).
    type: int
    default: 2
  protect:
    description: O(operation=prune) revision names never removed (those the units point at).
    type: list
    elements: str
    default: []
  free_path:
    description: Where to measure the free space for RV(free_bytes); defaults to O(path).
    type: path
"""

EXAMPLES = r"""
- name: Check the controller's copy against the manifest before pushing it
  kvfleet.vllm.model_store:
    path: /srv/models/llama-3-8b/2024-06-01
    manifest: "{{ lookup('ansible.builtin.file', '/srv/models/llama-3-8b/2024-06-01.sha256') }}"
  delegate_to: localhost
  register: source

- name: Promote the copied revision once every byte matches
  kvfleet.vllm.model_store:
    operation: promote
    src: /var/lib/vllm/models/llama-3-8b/.staging-2024-06-01
    path: /var/lib/vllm/models/llama-3-8b/2024-06-01
    manifest: "{{ lookup('ansible.builtin.file', '/srv/models/llama-3-8b/2024-06-01.sha256') }}"

- name: Keep the two most recent revisions, and whatever a unit still uses
  kvfleet.vllm.model_store:
    operation: prune
    path: /var/lib/vllm/models/llama-3-8b
    keep: 2
    protect: [2024-06-01]
"""

RETURN = r"""
verified:
  description: Every file of the manifest is present, a regular file, and matches (or, with O(verify=stamp), the stamp says so).
  returned: operation is check or promote
  type: bool
exists:
  description: Whether the folder exists.
  returned: operation is check or promote
  type: bool
files:
  description: How many files the manifest lists.
  returned: operation is check or promote
  type: int
bytes:
  description: Total size of the manifest's files found in the folder.
  returned: operation is check or promote
  type: int
missing:
  description: Files of the manifest not found.
  returned: operation is check or promote
  type: list
  elements: str
mismatched:
  description: Files whose sha256 differs from the manifest's.
  returned: operation is check or promote
  type: list
  elements: str
not_regular:
  description: Files of the manifest that are symbolic links, folders or outside the folder.
  returned: operation is check or promote
  type: list
  elements: str
extra:
  description: Files in the folder that the manifest does not list.
  returned: operation is check or promote
  type: list
  elements: str
free_bytes:
  description: Free bytes on the filesystem of O(free_path) (or the nearest folder above it that exists).
  returned: operation is check
  type: int
free_path:
  description: The existing folder whose filesystem was measured.
  returned: operation is check
  type: str
removed:
  description: Revision folders removed (or that would be, in check mode).
  returned: operation is prune
  type: list
  elements: str
kept:
  description: Revision folders kept.
  returned: operation is prune
  type: list
  elements: str
not_followed:
  description: Entries of the model's folder left alone because they are (or became) symbolic links, each with the reason.
  returned: operation is prune
  type: list
  elements: dict
  contains:
    name:
      description: The entry's name in the model's folder.
      type: str
    reason:
      description: Why it was left alone, naming the path and where the link points.
      type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kvfleet.vllm.plugins.module_utils._model_store import (
    ManifestError, UnsafePath, free_bytes, link_in_path, parse_manifest, promote, prune, scan, stamp_ok)


def _problems(result):
    parts = []
    for key, words in (("mismatched", "sha256 differs"), ("missing", "missing"),
                       ("not_regular", "not a regular file inside the folder")):
        if result[key]:
            names = result[key]
            parts.append("%s: %s%s" % (words, ", ".join(names[:5]), " and %d more" % (len(names) - 5)
                                       if len(names) > 5 else ""))
    return "; ".join(parts)


def _info(module, manifest):
    path = module.params["path"]
    if module.params["verify"] == "stamp":
        result = scan(path, manifest, hash_files=False)
        result["verified"] = stamp_ok(path, manifest)
    else:
        result = scan(path, manifest, hash_files=True)
    result["free_bytes"], result["free_path"] = free_bytes(module.params["free_path"] or path)
    module.exit_json(changed=False, **result)


def _promoted(module, manifest):
    path, src = module.params["path"], module.params["src"]
    if not src:
        module.fail_json(msg="src: operation=promote needs the staging folder")
    if stamp_ok(path, manifest):
        result = scan(path, manifest, hash_files=False)
        result["verified"] = True
        module.exit_json(changed=False, **result)
    if module.check_mode:
        result = scan(src, manifest, hash_files=False)
        module.exit_json(changed=True, **result)
    # root renames and removes here: never through a link the service user may have put in place
    for key in ("path", "src"):
        link = link_in_path(module.params[key])
        if link is not None:
            module.fail_json(msg="%s: %s is a symbolic link (to %s); promote refuses to follow it"
                             % (key, link, os.path.realpath(link)))
    if os.path.dirname(os.path.abspath(src)) != os.path.dirname(os.path.abspath(path)):
        module.fail_json(msg="src: the staging folder must be beside path (one rename promotes it), got %s for %s"
                         % (src, path))
    result = promote(src, path, manifest)
    if not result["verified"]:
        module.fail_json(msg="%s does not match its manifest (%s); removed, %s left as it was"
                         % (src, _problems(result), path), **result)
    module.exit_json(changed=True, **result)


def _pruned(module):
    try:
        result = prune(module.params["path"], module.params["keep"], module.params["protect"],
                       dry_run=module.check_mode)
    except UnsafePath as exc:
        module.fail_json(msg="path: %s" % exc, removed=[], kept=[], not_followed=[])
    for item in result["not_followed"]:
        module.warn("prune skipped %s" % item["reason"])
    module.exit_json(changed=bool(result["removed"]), **result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            operation=dict(type="str", default="check", choices=["check", "promote", "prune"]),
            manifest=dict(type="str"),
            verify=dict(type="str", default="full", choices=["full", "stamp"]),
            src=dict(type="path"),
            keep=dict(type="int", default=2),
            protect=dict(type="list", elements="str", default=[]),
            free_path=dict(type="path"),
        ),
        required_if=[("operation", "check", ["manifest"]), ("operation", "promote", ["manifest", "src"])],
        supports_check_mode=True,
    )
    if module.params["operation"] == "prune":
        if module.params["keep"] < 1:
            module.fail_json(msg="keep: must be at least 1 (the revision in use), got %d" % module.params["keep"])
        _pruned(module)
    try:
        manifest = parse_manifest(module.params["manifest"])
    except ManifestError as exc:
        module.fail_json(msg="manifest: %s" % exc)
    if module.params["operation"] == "promote":
        _promoted(module, manifest)
    _info(module, manifest)


if __name__ == "__main__":
    main()
