#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: model_fetch
short_description: Download a pinned model revision from a Hugging Face hub, file by file, checked against its sha256 manifest
version_added: 0.4.0
description:
  - Downloads the files a manifest (the output of C(sha256sum)) lists from O(url), a revision's
    C(resolve) URL (C(<endpoint>/<repo>/resolve/<commit>/)), into a folder beside O(path), checks
    each file's sha256 while it arrives, and renames the folder to O(path) with a stamp only when
    every file matches (as M(kvfleet.vllm.model_store) promotes a revision).
  - A file whose bytes differ from the manifest stops the download, named, and nothing is kept.
  - Only the manifest's files are fetched; a folder already stamped for this manifest downloads
    nothing.
  - The C(kvfleet.vllm.server) role runs it on the controller for C(from=hub) sources, once per
    revision, then pushes the folder to the hosts like C(from=controller) (docs/models.md).
author:
  - kvfleet maintainers (@kvfleet)
attributes:
  check_mode:
    support: full
    description: In check mode it asks the hub for each missing file's size (HEAD) and reports what it would download.
  diff_mode:
    support: none
    description: Model files are not diffed.
options:
  path:
    description: The revision's folder to create (on the machine the module runs on, usually the controller).
    type: path
    required: true
  url:
    description:
      - The revision's base URL; each file is fetched from C(<url><file>). For the Hugging Face hub,
        C(https://huggingface.co/<org>/<model>/resolve/<40-hex commit>/).
    type: str
    required: true
  manifest:
    description: The manifest's text, C(sha256sum) lines (C(<sha256>  <relative path>)).
    type: str
    required: true
  token:
    description:
      - A hub token, sent as C(Authorization Bearer) to O(url) only, never to the host a download is
        redirected to. Needed for gated and private repositories.
      - Refused over plain C(http://) to a host other than loopback (anyone on the path would read
        it), unless O(allow_insecure_token).
    type: str
  allow_insecure_token:
    description:
      - Send O(token), or credentials written in O(url) (C(user:password@), or a token alone as
        C(token@)), over plain C(http://) to a host other than loopback (a mirror on a network you
        trust).
    type: bool
    default: false
  max_file_bytes:
    description:
      - The most bytes one file may bring; a hub that sends more (an endless body) fails the task,
        and nothing is kept. At least 1.
    type: int
    default: 137438953472
  timeout:
    description: Seconds each request may wait for the server (a connection, or a pause in the data).
    type: int
    default: 60
  validate_certs:
    description: Whether to check the server's TLS certificate.
    type: bool
    default: true
  ca_path:
    description: A CA bundle to check the server's certificate with (a mirror with its own CA).
    type: path
notes:
  - HTTP goes through C(ansible.module_utils.urls); a proxy set in C(https_proxy) is used.
  - Credentials in O(url) (C(user:password@)) never show in messages or results.
"""

EXAMPLES = r"""
- name: Download a pinned revision on the controller
  kvfleet.vllm.model_fetch:
    path: /srv/kvfleet/hub/qwen2.5-0.5b/a8b602d9dafd3a75d382e62757d83d89fca3be54
    url: https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct/resolve/a8b602d9dafd3a75d382e62757d83d89fca3be54/
    manifest: "{{ lookup('ansible.builtin.file', 'manifests/qwen2.5-0.5b.sha256') }}"
    token: "{{ vllm_server_hf_token | default(omit, true) }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
verified:
  description: Whether O(path) now holds every file of the manifest, checked.
  returned: always
  type: bool
files:
  description: How many files the manifest lists.
  returned: always
  type: int
downloaded:
  description: Files downloaded by this run (in check mode, that would be).
  returned: always
  type: list
  elements: str
bytes:
  description: Bytes downloaded by this run (in check mode, the sizes the hub announced; null when it announced none).
  returned: always
  type: int
seconds:
  description: How long the downloads took.
  returned: always
  type: float
"""

import ipaddress
import os
import shutil
import time

from urllib.error import HTTPError, URLError
from urllib.parse import quote, urlsplit

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils.urls import open_url

from ansible_collections.kvfleet.vllm.plugins.module_utils._model_store import (
    ManifestError, TooLarge, copy_hashed, parse_manifest, promote, stamp_ok)
from ansible_collections.kvfleet.vllm.plugins.module_utils._probe import redact_url, scrub

_REDIRECTS = (301, 302, 303, 307, 308)


def _loopback(host):
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False


def _why(exc, url, token):
    """An HTTP or network error in words, with the advice an operator needs (no credentials:
    the URL without user:password@, the error's text scrubbed)."""
    url = redact_url(url)
    code = getattr(exc, "code", None)
    if code in (401, 403):
        return "%s: %d %s (a gated or private repository: %s)" % (
            url, code, getattr(exc, "reason", ""),
            "the token was refused" if token else "set vllm_server_hf_token")
    if code == 404:
        return "%s: 404 Not Found (check the repository, the revision (a commit) and the file names in the manifest)" % url
    if code is not None:
        return "%s: %d %s" % (url, code, getattr(exc, "reason", ""))
    return "%s: %s" % (url, scrub(to_native(getattr(exc, "reason", exc))))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            url=dict(type="str", required=True),
            manifest=dict(type="str", required=True),
            token=dict(type="str", no_log=True),
            allow_insecure_token=dict(type="bool", default=False),
            max_file_bytes=dict(type="int", default=128 * 1024 ** 3),
            timeout=dict(type="int", default=60),
            validate_certs=dict(type="bool", default=True),
            ca_path=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        parts = urlsplit(p["url"])
        userinfo, password, host = parts.netloc.rpartition("@")[0], parts.password, parts.hostname
    except ValueError:
        userinfo, password, host = "", None, None
    # Ansible echoes the arguments (invocation) and masks what no_log_values holds; a user name
    # alone is masked only when it looks like a token (a short one would garble every message)
    for secret in (password, userinfo if password or len(userinfo) >= 8 else None):
        if secret:
            module.no_log_values.add(secret)
    shown = redact_url(p["url"])
    if not p["url"].startswith(("https://", "http://")) or not p["url"].endswith("/"):
        module.fail_json(msg="url: must be an http(s) URL ending in / (the revision's resolve URL), got %s" % shown)
    # any credential: a token, a password, or a user part alone (http://<token>@mirror/)
    if (p["token"] or password or userinfo) and parts.scheme == "http" and not _loopback(host) \
            and not p["allow_insecure_token"]:
        module.fail_json(msg="%s: plain http:// to %s would send the %s in clear; use https://, or set "
                             "allow_insecure_token: true for a mirror on a network you trust"
                             % ("token" if p["token"] else "url", host, "token" if p["token"] else "credentials in url"))
    if p["max_file_bytes"] < 1:
        module.fail_json(msg="max_file_bytes: must be 1 or more, got %d" % p["max_file_bytes"])
    if p["timeout"] < 1:
        module.fail_json(msg="timeout: must be 1 second or more, got %d" % p["timeout"])
    try:
        manifest = parse_manifest(p["manifest"])
    except ManifestError as exc:
        module.fail_json(msg="manifest: %s" % exc)
    path = p["path"].rstrip("/")
    result = dict(files=len(manifest), downloaded=[], bytes=0, seconds=0.0)
    if stamp_ok(path, manifest):
        module.exit_json(changed=False, verified=True, **result)

    # the token goes to the hub only: a redirect (the CDN of large files) does not carry it
    headers = {"Authorization": "Bearer %s" % p["token"]} if p["token"] else {}
    request = dict(headers=headers, timeout=p["timeout"], validate_certs=p["validate_certs"],
                   ca_path=p["ca_path"], unredirected_headers=["Authorization"], http_agent="kvfleet-vllm")
    started = time.time()
    if module.check_mode:
        sizes = []
        for rel in sorted(manifest):
            url = p["url"] + quote(rel, safe="/")
            try:
                resp = open_url(url, method="HEAD", follow_redirects="none", **request)
                head = resp.headers
            except HTTPError as exc:
                if exc.code not in _REDIRECTS:
                    module.fail_json(msg=_why(exc, url, p["token"]), verified=False, **result)
                head = exc.headers
            except (URLError, OSError) as exc:
                module.fail_json(msg=_why(exc, url, p["token"]), verified=False, **result)
            size = head.get("X-Linked-Size") or head.get("Content-Length")
            sizes.append(int(size) if size and size.isdigit() else None)
            result["downloaded"].append(rel)
        result["bytes"] = None if None in sizes else sum(sizes)
        result["seconds"] = round(time.time() - started, 1)
        module.exit_json(changed=True, verified=False, **result)

    parent, name = os.path.split(path)
    staging = os.path.join(parent, ".fetching-" + name)
    if os.path.isdir(staging):
        shutil.rmtree(staging)   # an earlier run stopped half-way: only a whole download counts
    os.makedirs(staging, mode=0o755)
    for rel in sorted(manifest):
        url = p["url"] + quote(rel, safe="/")
        target = os.path.join(staging, rel)
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        try:
            resp = open_url(url, **request)
            with open(target, "wb") as out:
                digest, size = copy_hashed(resp, out, limit=p["max_file_bytes"])
        except TooLarge:
            shutil.rmtree(staging, ignore_errors=True)
            module.fail_json(msg="downloading %s: %s sent more than max_file_bytes (%d); nothing was kept"
                             % (rel, redact_url(url), p["max_file_bytes"]), verified=False, **result)
        except (HTTPError, URLError, OSError) as exc:
            shutil.rmtree(staging, ignore_errors=True)
            module.fail_json(msg="downloading %s failed: %s; nothing was kept" % (rel, _why(exc, url, p["token"])),
                             verified=False, **result)
        if digest != manifest[rel]:
            shutil.rmtree(staging, ignore_errors=True)
            module.fail_json(msg="%s from %s: sha256 %s, the manifest says %s (%d bytes received); "
                             "nothing was kept" % (rel, redact_url(url), digest, manifest[rel], size),
                             verified=False, **result)
        result["downloaded"].append(rel)
        result["bytes"] += size
    # each file's bytes were checked as they arrived: promote checks the folder, not the bytes again
    checked = promote(staging, path, manifest, hashed=True)
    result["seconds"] = round(time.time() - started, 1)
    if not checked["verified"]:
        module.fail_json(msg="%s does not match its manifest after the download; nothing was kept" % path,
                         verified=False, **result)
    module.exit_json(changed=True, verified=True, **result)


if __name__ == "__main__":
    main()
