"""The public filters are the ones docs/release.md names; every other filter's summary says it is
internal, so that ansible-doc tells a playbook author which ones to build on."""

from __future__ import annotations

import glob
import os
import re

import yaml

from ansible_collections.kvfleet.vllm.plugins.module_utils import _nvml

COLLECTION = os.path.abspath(os.path.join(os.path.dirname(_nvml.__file__), "..", ".."))


def _public():
    with open(os.path.join(COLLECTION, "docs", "release.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("## Public and internal filters", 1)[1].split("Every other filter is internal", 1)[0]
    return set(re.findall(r"`([a-z_]+)`", section))


def test_every_filter_is_public_or_says_it_is_internal():
    public = _public()
    assert "vllm_args" in public and "deploy_outcome" not in public
    seen = set()
    for path in glob.glob(os.path.join(COLLECTION, "plugins", "filter", "*.py")):
        with open(path, encoding="utf-8") as f:
            source = f.read()
        doc = yaml.safe_load(source.split('DOCUMENTATION = r"""', 1)[1].split('"""', 1)[0])
        seen.add(doc["name"])
        internal = doc["short_description"].startswith("(internal) ")
        assert internal != (doc["name"] in public), (doc["name"], doc["short_description"])
    assert public <= seen, public - seen
