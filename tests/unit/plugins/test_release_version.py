# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One version: galaxy.yml's is released in the changelog (or is the next release, with fragments
waiting for it), and no option or plugin says it was added in a version after it."""

from __future__ import annotations

import glob
import os
import re

import yaml
from packaging.version import Version

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")


def _galaxy_version():
    with open(os.path.join(ROOT, "galaxy.yml")) as f:
        return Version(yaml.safe_load(f)["version"])


def _released():
    with open(os.path.join(ROOT, "changelogs", "changelog.yaml")) as f:
        return sorted(Version(v) for v in (yaml.safe_load(f).get("releases") or {}))


def _fragments():
    return glob.glob(os.path.join(ROOT, "changelogs", "fragments", "*.yml"))


def test_the_collections_version_is_released_or_is_the_next_release():
    version, released = _galaxy_version(), _released()
    assert released, "changelogs/changelog.yaml has no release"
    if version in released:
        assert version == released[-1], "galaxy.yml's %s is not the latest release %s" % (version, released[-1])
    else:
        # a release under way: newer than the last, and its fragments wait in changelogs/fragments
        assert version > released[-1] and _fragments(), (
            "galaxy.yml's %s is neither released nor the next release (last: %s)" % (version, released[-1]))


def test_no_option_or_plugin_is_added_after_the_collections_version():
    version = _galaxy_version()
    later = []
    for path in glob.glob(os.path.join(ROOT, "plugins", "**", "*.py"), recursive=True) + \
            glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml")):
        with open(path) as f:
            for n, line in enumerate(f, 1):
                found = re.search(r"version_added:\s*['\"]?([0-9][0-9a-z.]*)", line)
                if found and Version(found.group(1)) > version:
                    later.append("%s:%d %s" % (os.path.relpath(path, ROOT), n, found.group(1)))
    assert not later, "added after galaxy.yml's %s: %s" % (version, later)


def test_the_changelog_is_generated_for_every_release():
    with open(os.path.join(ROOT, "CHANGELOG.rst")) as f:
        text = f.read()
    for version in _released():
        assert "\nv%s\n" % version in text, "CHANGELOG.rst has no section for %s (antsibull-changelog generate)" % version
