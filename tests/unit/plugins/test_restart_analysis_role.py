"""The scheduled_restart role's plan entry point through ansible-playbook, on two hosts whose
deployment records are local fact files: the analysis after a restart (vllm_restart_analysis_*)
takes the other host's instance as its baseline, reached at its address, and bad settings or a
loopback-bound peer are refused naming the variable or the instance, before anything changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils import _nvml

COLLECTION = os.path.abspath(os.path.join(os.path.dirname(_nvml.__file__), "..", ".."))
COLLECTIONS_PATH = os.path.abspath(os.path.join(COLLECTION, "..", "..", ".."))

PLAYBOOK = textwrap.dedent("""
    - hosts: all
      gather_facts: false
      # each host's deployment record from its own folder (both hosts are this machine)
      module_defaults:
        ansible.builtin.setup:
          fact_path: "{{ playbook_dir }}/facts/{{ inventory_hostname }}"
      tasks:
        - name: The restart plan and its preflight
          ansible.builtin.include_role:
            name: kvfleet.vllm.scheduled_restart
            tasks_from: plan
        - name: Show the baseline
          ansible.builtin.debug:
            msg: >-
              BASELINE {{ inventory_hostname }}
              {{ _b | map(attribute='name') | join(',') if _b is not none else 'none' }}
              {{ _b | map(attribute='url') | join(',') if _b is not none else '' }}
              seqs={{ _b | map(attribute='max_num_seqs') | join(',') if _b is not none else '' }}
              keys={{ _b | selectattr('api_key', 'defined') | list | length if _b is not none else '' }}
          vars:
            _b: "{{ _scheduled_restart_baseline | default(none) }}"
""")


def record(bind):
    return {"current": {"version": "0.32.0", "instances": [
        {"name": "main", "port": 8000, "bind": bind, "url": "http://%s:8000" % bind, "max_num_seqs": 8,
         "unit": "vllm-main.service"}]}}


@pytest.fixture
def play(tmp_path):
    if not os.path.isdir(os.path.join(COLLECTIONS_PATH, "ansible_collections", "kvfleet", "vllm")):
        pytest.fail("the collection is not at ansible_collections/kvfleet/vllm above %s" % COLLECTION)
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "inventory.yml").write_text(textwrap.dedent("""
        all:
          hosts:
            gpu-01: {ansible_connection: local, vllm_router_backend_address: 10.0.0.1}
            gpu-02: {ansible_connection: local, ansible_host: 10.0.0.2}
    """))

    def run(peer_bind, extra):
        for host, bind in (("gpu-01", "10.0.0.1"), ("gpu-02", peer_bind)):
            folder = tmp_path / "facts" / host
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "kvfleet_vllm_server.fact").write_text(json.dumps(record(bind)))
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS_PATH, ANSIBLE_LOCALHOST_WARNING="0",
                   ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", ANSIBLE_NOCOLOR="1")
        argv = [sys.executable, "-m", "ansible.cli.playbook", "-i", str(tmp_path / "inventory.yml"),
                "-e", "ansible_python_interpreter=%s" % sys.executable, "-e", json.dumps(extra),
                str(tmp_path / "play.yml")]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
        return proc.returncode, proc.stdout + proc.stderr
    return run


def test_the_baseline_is_the_other_hosts_instance_at_its_address(play):
    rc, out = play("0.0.0.0", {"vllm_restart_analysis_seconds": 60})
    assert rc == 0, out[-3000:]
    assert "BASELINE gpu-01 gpu-02/main http://10.0.0.2:8000 seqs=8 keys=0" in out, out[-3000:]
    assert "BASELINE gpu-02 gpu-01/main http://10.0.0.1:8000 seqs=8 keys=0" in out


def test_a_peer_whose_record_binds_another_address_is_refused_naming_it(play):
    # gpu-02's record says 10.0.0.9; the inventory says 10.0.0.2: no record aims the guard elsewhere
    rc, out = play("10.0.0.9", {"vllm_restart_analysis_seconds": 60})
    flat = " ".join(out.split())
    assert rc != 0 and "BASELINE gpu-01" not in out, out[-3000:]
    assert "gpu-02: instance main: its record's bind '10.0.0.9' is not the address the inventory gives for the host ('10.0.0.2'" in flat


def test_off_computes_no_baseline(play):
    rc, out = play("127.0.0.1", {})
    assert rc == 0 and "BASELINE gpu-01 none" in out, out[-3000:]


def test_a_peer_bound_to_loopback_is_refused_naming_it(play):
    rc, out = play("127.0.0.1", {"vllm_restart_analysis_seconds": 60})
    assert rc != 0 and "BASELINE gpu-01" not in out, out[-3000:]
    assert "gpu-02: instance main listens on 127.0.0.1 only: the restart guard on gpu-01" in " ".join(out.split())


@pytest.mark.parametrize("extra", [
    {"vllm_restart_analysis_seconds": -5},
    {"vllm_restart_analysis_seconds": 30, "vllm_restart_analysis_interval": 60},
    {"vllm_restart_analysis_fail_on": ["pass"]},
    {"vllm_restart_analysis_baseline": [{"url": "http://10.0.0.9:8000"}]},
])
def test_bad_settings_are_refused_naming_them(play, extra):
    rc, out = play("10.0.0.2", extra)
    flat = " ".join(out.split())
    assert rc != 0 and "BASELINE" not in out, out[-3000:]
    assert "vllm_restart preflight failed on gpu-01: vllm_restart_analysis_seconds must be 0 (off) to 3600" in flat, flat[-3000:]
