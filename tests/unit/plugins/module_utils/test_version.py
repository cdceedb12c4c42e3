"""One reading of a vLLM version on each side: packaging on the controller
(plugin_utils/_vllm_flags.parse_version) and the hosts' stdlib one (module_utils/_version.release),
held to one table, pre-, post- and dev-releases and local labels included."""

from __future__ import annotations

import pytest
from packaging.version import InvalidVersion, Version

from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import _minor
from ansible_collections.kvfleet.vllm.plugins.module_utils._dp_links import links_per_engine
from ansible_collections.kvfleet.vllm.plugins.module_utils._version import release
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._vllm_flags import parse_version

TABLE = ["0.32.0", "0.32.0+cpu", "0.12.0rc1", "0.12.0rc1+cu128", "0.11.0.post1", "0.11.0.post1+cu128",
         "0.9.0", "0.9.1", "0.9.0.1", "0.10.2.dev123+g1234abc", "v0.8.5", "1!0.32.0", "0.32", "0.6.3.post1",
         "0.12.0-rc1", "0.12.0_post2", "0.12.0.RC1", " 0.32.0 ", "0.12.0a1", "0.12.0b2.dev3"]
NOT_VERSIONS = ["latest", "", "0.32.0-cpu-build", "0.32.0+", "x.y.z", "0..32", "0.32.0 extra"]


@pytest.mark.parametrize("text", TABLE)
def test_the_hosts_reading_is_packagings(text):
    assert release(text) == Version(text).release
    assert parse_version(text) == Version(text).release[:4]


@pytest.mark.parametrize("text", NOT_VERSIONS)
def test_what_packaging_refuses_neither_side_reads(text):
    with pytest.raises(InvalidVersion):
        Version(text)
    assert release(text) is None
    with pytest.raises(ValueError):
        parse_version(text)


def test_what_each_user_of_it_reads():
    # a release candidate reads as its release, where the old split on "." read nothing
    assert links_per_engine("0.9.0rc1") == 2 and links_per_engine("0.9.1rc1") == 4
    assert links_per_engine("0.9.0.post1+cu128") == 2 and links_per_engine(None) == 4
    assert links_per_engine("nonsense") == 4
    assert _minor("0.12.0rc1") == (0, 12) and _minor("0.32.0+cpu") == (0, 32) and _minor("latest") is None
    assert parse_version("0.12.0rc1") == (0, 12, 0) and parse_version("0.11.0.post1") == (0, 11, 0)
