"""The scheduled_restart role's plan across a generated 100-host inventory (local dummy hosts)."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

PLAYBOOK = """
- name: Plan only (the role's plan entry point); nothing is written to this machine
  hosts: gpu
  gather_facts: false
  tasks:
    - name: Apply the role's planning tasks
      ansible.builtin.include_role:
        name: kvfleet.vllm.scheduled_restart
        tasks_from: plan

- name: Report every host's own view of the plan
  hosts: gpu
  gather_facts: false
  tasks:
    - name: Dump
      ansible.builtin.debug:
        msg: "{{ dict(ansible_play_hosts_all | zip(ansible_play_hosts_all | map('extract', hostvars, '_scheduled_restart_plan'))) | to_json }}"
      run_once: true
"""


def plan_proc(tmp_path, n, max_concurrent, limit=None, group=None):
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[gpu]\n" + "".join(
        "gpu-%03d ansible_connection=local ansible_python_interpreter=%s\n" % (i, sys.executable)
        for i in range(n)))
    playbook = tmp_path / "plan.yml"
    playbook.write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_FORKS="20")
    extra = {"vllm_restart_max_concurrent": max_concurrent}
    if group:
        extra["vllm_restart_group"] = group
    argv = ["ansible-playbook", "-i", str(inventory), str(playbook), "-e", json.dumps(extra)]
    if limit:
        argv += ["--limit", limit]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)


def run_plan(tmp_path, n, max_concurrent, limit=None, group=None):
    proc = plan_proc(tmp_path, n, max_concurrent, limit, group)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    dump = out["plays"][1]["tasks"][0]["hosts"]
    return json.loads(next(iter(dump.values()))["msg"])


def test_a_limited_run_gives_its_hosts_the_slots_of_a_whole_run(tmp_path):
    """With vllm_restart_group the slots come from the inventory group, whatever --limit cuts
    from the play; without it a limited run is refused (it would reuse slots other hosts hold)."""
    whole = run_plan(tmp_path, 40, "10%", group="gpu")
    limited = run_plan(tmp_path, 40, "10%", limit="~gpu-03[0-9]", group="gpu")
    assert sorted(limited) == ["gpu-%03d" % i for i in range(30, 40)]
    assert dict((h, limited[h][h]) for h in limited) == dict((h, whole[h][h]) for h in limited)
    # the last ten of forty hosts keep the window's last slots; planned alone they took the first
    assert "04:00" not in set(limited[h][h]["time"] for h in limited)
    refused = plan_proc(tmp_path, 40, "10%", limit="~gpu-03[0-9]")
    assert refused.returncode != 0
    assert "Set vllm_restart_group" in refused.stdout


def test_hundred_hosts_ten_percent(tmp_path):
    views = run_plan(tmp_path, 100, "10%")
    hosts = sorted(views)
    assert len(hosts) == 100
    # every host computed the same plan on its own
    assert all(views[h] == views[hosts[0]] for h in hosts)
    own = dict((h, views[h][h]) for h in hosts)
    per_time = collections.Counter(p["time"] for p in own.values())
    assert max(per_time.values()) <= 10
    assert sum(per_time.values()) == 100
    # inventory order: the first ten hosts share the first slot
    assert set(own["gpu-%03d" % i]["time"] for i in range(10)) == {"04:00"}


def test_a_serving_group_across_hosts_is_refused_before_anything(tmp_path):
    """A timer restarts its own host only; a serving group's hosts must restart together
    (docs/serving-groups.md), so the plan refuses them and points at rolling_restart."""
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[gpu]\n" + "".join(
        "gpu-%d ansible_connection=local ansible_python_interpreter=%s\n" % (i, sys.executable)
        for i in range(3)) + "[group70b]\ngpu-1\ngpu-2\n[group70b:vars]\nvllm_server_serving_group=group70b\n")
    playbook = tmp_path / "plan.yml"
    playbook.write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    proc = subprocess.run(["ansible-playbook", "-i", str(inventory), str(playbook)], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode != 0
    out = json.loads(proc.stdout)
    refused = next(t["hosts"] for t in out["plays"][0]["tasks"]
                   if t["task"]["name"].endswith("Assert the host is in no serving group across hosts"))
    assert sorted(h for h, r in refused.items() if r.get("failed")) == ["gpu-1", "gpu-2"]
    assert "in serving group group70b (vllm_server_serving_group)" in refused["gpu-1"]["msg"]
    assert "kvfleet.vllm.rolling_restart" in refused["gpu-1"]["msg"]
    assert not refused["gpu-0"].get("failed")
