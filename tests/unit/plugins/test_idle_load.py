"""The deploy's load on an idle fleet (roles/rollout/vars/main.yml, _rollout_load_spec), evaluated
by ansible-playbook as the analysis step reads it: the built-in load when a host of the batch and
its baseline both finished fewer requests per second before the change than the analysis needs,
the operator's own load when set, none otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import yaml

from ansible_collections.kvfleet.vllm.plugins.module_utils import _nvml

COLLECTION = os.path.abspath(os.path.join(os.path.dirname(_nvml.__file__), "..", ".."))
COLLECTIONS_PATH = os.path.abspath(os.path.join(COLLECTION, "..", "..", ".."))
ROLE = os.path.join(COLLECTION, "roles", "rollout")

PLAYBOOK = textwrap.dedent("""
    - hosts: all
      gather_facts: false
      vars_files: ["%s/defaults/main.yml", "%s/vars/main.yml"]
      tasks:
        - name: What the window before the change found
          ansible.builtin.set_fact:
            _rollout_before: "{{ before[inventory_hostname] }}"
          when: before[inventory_hostname] is defined
        - name: Show the load the analysis step sends
          ansible.builtin.debug:
            msg: "LOAD {{ inventory_hostname }} {{ _rollout_load_spec | to_json }}"
""" % (ROLE, ROLE))

# the defaults: 20 requests in 300 s, so 0.0667 requests per second per server are needed
IDLE = {"rates": {"canary": 0.0, "baseline": 0.01}}
BUSY = {"rates": {"canary": 2.0, "baseline": 1.9}}
QUIET_CANARY = {"rates": {"canary": 0.0, "baseline": 1.9}}   # a forgotten host, not an idle fleet
BUILT_IN = yaml.safe_load(open(os.path.join(ROLE, "vars", "main.yml")))["_rollout_idle_load"]


@pytest.fixture
def play(tmp_path):
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "inventory.yml").write_text("all:\n  hosts:\n    node1: {ansible_connection: local}\n"
                                            "    node2: {ansible_connection: local}\n")

    def run(extra):
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS_PATH, ANSIBLE_LOCALHOST_WARNING="0",
                   ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", ANSIBLE_NOCOLOR="1")
        argv = [sys.executable, "-m", "ansible.cli.playbook", "-i", str(tmp_path / "inventory.yml"),
                "-e", "ansible_python_interpreter=%s" % sys.executable, "-e", json.dumps(extra),
                str(tmp_path / "play.yml")]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        out = {}
        for line in proc.stdout.splitlines():
            if '"msg": "LOAD ' in line:
                host, spec = line.split('"msg": "LOAD ', 1)[1].rstrip('"').split(" ", 1)
                out[host] = json.loads(spec.encode().decode("unicode_escape"))
        assert set(out) == {"node1", "node2"}, proc.stdout
        return out
    return run


@pytest.mark.parametrize("before, extra, expected", [
    # one host of the batch found the fleet idle: the whole batch's analysis gets the load
    ({"node1": IDLE, "node2": BUSY}, {}, BUILT_IN),
    ({"node1": BUSY, "node2": BUSY}, {}, {}),
    # the canary got nothing while the baseline served: not idle, the analysis must see it fail
    ({"node1": QUIET_CANARY}, {}, {}),
    # the window before the change turned off: nothing to tell an idle fleet by
    ({}, {}, {}),
    ({"node1": IDLE}, {"vllm_deploy_analysis_idle_load": False}, {}),
    ({"node1": IDLE}, {"vllm_deploy_analysis_seconds": 0}, {}),
    # a longer window needs a lower rate: 20 requests in 3000 s is 0.0067 per second
    ({"node1": {"rates": {"canary": 0.02, "baseline": 0.03}}}, {"vllm_deploy_analysis_seconds": 3000}, {}),
])
def test_the_built_in_load_goes_only_to_an_idle_fleet(play, before, extra, expected):
    got = play(dict(extra, before=before))
    assert got == {"node1": expected, "node2": expected}


def test_the_operators_load_wins(play):
    mine = {"prompts": ["mine"], "rate": 2}
    got = play({"before": {"node1": IDLE}, "vllm_deploy_analysis_load": mine})
    assert got["node1"] == got["node2"] == mine


def test_the_built_in_load_is_what_the_docs_say():
    assert len(BUILT_IN["prompts"]) == 4 and all(BUILT_IN["prompts"])
    assert (BUILT_IN["rate"], BUILT_IN["concurrency"], BUILT_IN["max_tokens"], BUILT_IN["request_timeout"]) == (
        0.25, 2, 32, 120)
    spec = yaml.safe_load(open(os.path.join(ROLE, "meta", "argument_specs.yml")))
    text = " ".join(spec["argument_specs"]["main"]["options"]["vllm_deploy_analysis_idle_load"]["description"])
    assert ("four short prompts in turn, 0.25 requests per second to each instance of the batch and of the "
            "baseline, at most 2 in flight each, 32 tokens each, 120 s per request at most") in " ".join(text.split())
