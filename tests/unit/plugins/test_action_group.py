"""The modules that talk to vLLM servers form the action group kvfleet.vllm.vllm (meta/runtime.yml):
a play's module_defaults for group/kvfleet.vllm.vllm reach each of them, the group lists exactly
the modules whose documentation says they belong to it, and ansible-doc shows it."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap

import yaml

from ansible_collections.kvfleet.vllm.plugins.module_utils import _nvml
from ansible_collections.kvfleet.vllm.tests.unit.plugins.local_servers import LocalServer, vllm

COLLECTION = os.path.abspath(os.path.join(os.path.dirname(_nvml.__file__), "..", ".."))
COLLECTIONS_PATH = os.path.abspath(os.path.join(COLLECTION, "..", "..", ".."))
ENV = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS_PATH, ANSIBLE_LOCALHOST_WARNING="0",
           ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", ANSIBLE_NOCOLOR="1")


def _group():
    with open(os.path.join(COLLECTION, "meta", "runtime.yml"), encoding="utf-8") as f:
        return yaml.safe_load(f)["action_groups"]["vllm"]


def test_the_group_is_every_module_that_says_it_belongs_to_it():
    members = []
    for path in sorted(glob.glob(os.path.join(COLLECTION, "plugins", "modules", "*.py"))):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if "kvfleet.vllm.attributes.action_group" in text:
            members.append(os.path.basename(path)[:-3])
            assert "kvfleet.vllm.connection.transport" in text, path   # the options the group sets
    assert sorted(_group()) == members == ["analysis_load", "cache_gate", "canary_analysis", "lora_adapter",
                                           "metrics_info"]


def _play(tmp_path, defaults):
    with LocalServer(vllm()) as server:
        (tmp_path / "play.yml").write_text(textwrap.dedent("""
            - hosts: localhost
              gather_facts: false
              module_defaults:
                group/kvfleet.vllm.vllm: %s
              tasks:
                - name: Read the server
                  kvfleet.vllm.metrics_info:
                    url: %s
        """ % (json.dumps(defaults), server.url)))
        argv = [sys.executable, "-m", "ansible.cli.playbook", "-i", "localhost,", "-c", "local",
                "-e", "ansible_python_interpreter=%s" % sys.executable, str(tmp_path / "play.yml")]
        proc = subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_module_defaults_for_the_group_reach_its_modules(tmp_path):
    rc, out = _play(tmp_path, {"timeout": 5})
    assert rc == 0, out
    # the idle capture is larger than 1024 bytes: the group's cap is the one the module applied
    rc, out = _play(tmp_path, {"max_body_bytes": 1024})
    assert rc != 0 and "more than max_body_bytes (1024)" in out, out


def test_ansible_doc_shows_the_group():
    proc = subprocess.run([sys.executable, "-m", "ansible.cli.doc", "--json", "kvfleet.vllm.cache_gate"], env=ENV,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)["kvfleet.vllm.cache_gate"]["doc"]
    assert doc["attributes"]["action_group"]["membership"] == ["kvfleet.vllm.vllm"]
