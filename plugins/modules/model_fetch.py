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
  - A file whose bytes differ from the manifest stops the download, named, and that file is
    removed.
  - A download that fails half-way (the connection dropped, a timeout, a 5xx or 429 answer) is
    tried again O(retries) times, each going on from the bytes already received (an HTTP
    C(Range) request; a server that ignores it sends the file again). What is received stays in
    the staging folder beside O(path) (C(.fetching-<name>)) for the next run, which resumes it;
    only the files the manifest lists count there, each checked against it first.
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
  retries:
    description: How many more times a file whose download failed half-way is asked for, going on
      from what was received. 0 or more.
    type: int
    default: 3
  retry_delay:
    description: Seconds between two tries of a file, 0 or more.
    type: float
    default: 5
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
resumed:
  description: Files this run went on with from bytes an earlier try (of this run or an earlier
    one) had received, or took whole from the staging folder where an earlier run had finished them.
  returned: always
  type: list
  elements: str
retried:
  description: How many tries failed half-way and were tried again.
  returned: always
  type: int
"""

import errno
import hashlib
import http.client
import ipaddress
import os
import shutil
import stat
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


class _Failed(Exception):
    """A file that cannot be fetched now, in words."""


class _CutOff(OSError):
    """The answer ended before the length it announced (a dropped connection)."""


def _announced(resp):
    """The whole file's length an answer announces (Content-Range of a 206, else Content-Length),
    or None."""
    headers = getattr(resp, "headers", None) or {}
    ranged = headers.get("Content-Range") or ""
    total = ranged.rpartition("/")[2] if ranged else headers.get("Content-Length") or ""
    return int(total) if total.isdigit() else None


def _retryable(exc):
    """A try that may succeed again: the connection or the data broke off, or the server was
    busy (5xx, 429). A 4xx says the request itself is wrong."""
    code = getattr(exc, "code", None)
    if code is not None:
        return code >= 500 or code == 429
    return isinstance(exc, (URLError, OSError, http.client.HTTPException))


def _open_nofollow(path, flags):
    """A staging file, never through a link someone put there."""
    return os.fdopen(os.open(path, flags | os.O_NOFOLLOW, 0o644), "ab" if flags & os.O_APPEND else "rb")


def _received(part):
    """(sha256 object, bytes) of what a partial file holds; (fresh, 0) when there is none."""
    digest = hashlib.sha256()
    try:
        st = os.lstat(part)
    except OSError:
        return digest, 0
    if not stat.S_ISREG(st.st_mode):
        os.unlink(part)   # not a file this module wrote
        return digest, 0
    with _open_nofollow(part, os.O_RDONLY) as handle:
        unused, size = copy_hashed(handle, digest=digest)
    return digest, size


def _fetch_one(module, url, target, want, request, limit, out):
    """One file into target (through target.part), tried again from what it holds; returns the
    bytes it received now. Raises _Failed."""
    p = module.params
    part = target + ".part"
    tries = 0
    while True:
        digest, have = _received(part)
        if have:
            out["resumed"].append(os.path.relpath(target, out["_staging"]))
        headers = dict(request["headers"])
        if have:
            headers["Range"] = "bytes=%d-" % have
        try:
            resp = open_url(url, **dict(request, headers=headers))
            if have and getattr(resp, "status", None) != 206:
                # the server sent the whole file: start it over
                os.unlink(part)
                digest, have = hashlib.sha256(), 0
            with _open_nofollow(part, os.O_WRONLY | os.O_CREAT | os.O_APPEND) as handle:
                hexdigest, size = copy_hashed(resp, handle, limit=limit - have, digest=digest)
            whole = _announced(resp)
            if whole is not None and have + size < whole:
                raise _CutOff("the connection dropped after %d of %d bytes" % (have + size, whole))
        except TooLarge:
            os.unlink(part)
            raise _Failed("%s sent more than max_file_bytes (%d); the file was removed" % (redact_url(url), limit))
        except (HTTPError, URLError, OSError, http.client.HTTPException) as exc:
            if getattr(exc, "code", None) == 416 and have:
                os.unlink(part)   # what was kept is longer than the file now: start it over
                continue
            if not _retryable(exc) or tries >= p["retries"]:
                raise _Failed(_why(exc, url, p["token"]))
            tries += 1
            out["retried"] += 1
            time.sleep(p["retry_delay"])
            continue
        if hexdigest != want:
            os.unlink(part)
            raise _Failed("%s: sha256 %s, the manifest says %s (%d bytes); the file was removed" % (
                redact_url(url), hexdigest, want, have + size))
        os.rename(part, target)
        return size


def _staging(parent, name):
    """The staging folder beside the revision, made or taken as it is: a real folder of this
    user's (never a link someone put there)."""
    staging = os.path.join(parent, ".fetching-" + name)
    os.makedirs(parent, mode=0o755, exist_ok=True)
    try:
        os.mkdir(staging, 0o755)
    except OSError as exc:
        if exc.errno != errno.EEXIST:
            raise
        st = os.lstat(staging)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise _Failed("%s is not a folder of this user's; remove it" % staging)
    return staging


def _kept(staging, manifest, drop_empty=True):
    """Remove from the staging folder what the manifest does not list (a stray, a link); say
    whether anything is left for the next run, and remove the folder when nothing is."""
    listed = set(manifest) | set(rel + ".part" for rel in manifest)
    left = False
    for base, dirs, files in os.walk(staging, topdown=False):
        for name in files:
            path = os.path.join(base, name)
            if os.path.relpath(path, staging).replace(os.sep, "/") in listed and stat.S_ISREG(os.lstat(path).st_mode):
                left = True
            else:
                os.unlink(path)
        for name in dirs:
            try:
                os.rmdir(os.path.join(base, name))
            except OSError:
                pass
    if not left and drop_empty:
        shutil.rmtree(staging, ignore_errors=True)
    return left


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
            retries=dict(type="int", default=3),
            retry_delay=dict(type="float", default=5.0),
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
    if p["retries"] < 0 or not 0 <= p["retry_delay"] <= 3600:
        module.fail_json(msg="retries: must be 0 or more, and retry_delay 0 to 3600 seconds; got %d and %s"
                         % (p["retries"], p["retry_delay"]))
    try:
        manifest = parse_manifest(p["manifest"])
    except ManifestError as exc:
        module.fail_json(msg="manifest: %s" % exc)
    path = p["path"].rstrip("/")
    result = dict(files=len(manifest), downloaded=[], bytes=0, seconds=0.0, resumed=[], retried=0)
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
    try:
        staging = _staging(parent, name)
    except _Failed as exc:
        module.fail_json(msg=str(exc), verified=False, **result)
    result["_staging"] = staging
    _kept(staging, manifest, drop_empty=False)   # only the manifest's files count, never a link
    for rel in sorted(manifest):
        url = p["url"] + quote(rel, safe="/")
        target = os.path.join(staging, rel)
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        if os.path.lexists(target):
            # finished by an earlier run: it counts only if its bytes are the manifest's
            ok = stat.S_ISREG(os.lstat(target).st_mode) and _received(target)[0].hexdigest() == manifest[rel]
            if ok:
                result["resumed"].append(rel)
                continue
            os.unlink(target)
        try:
            size = _fetch_one(module, url, target, manifest[rel], request, p["max_file_bytes"], result)
        except _Failed as exc:
            result.pop("_staging")
            result["resumed"] = sorted(set(result["resumed"]))
            keep = _kept(staging, manifest)
            module.fail_json(msg="downloading %s failed: %s; %s" % (
                rel, exc, "what was received is kept in %s, and the next run goes on from it" % staging
                if keep else "nothing was kept"), verified=False, **result)
        result["downloaded"].append(rel)
        result["bytes"] += size
    result.pop("_staging")
    result["resumed"] = sorted(set(result["resumed"]))
    # each file's bytes were checked as they arrived: promote checks the folder, not the bytes again
    checked = promote(staging, path, manifest, hashed=True)
    result["seconds"] = round(time.time() - started, 1)
    if not checked["verified"]:
        module.fail_json(msg="%s does not match its manifest after the download; nothing was kept" % path,
                         verified=False, **result)
    module.exit_json(changed=True, verified=True, **result)


if __name__ == "__main__":
    main()
