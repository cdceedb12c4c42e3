"""kvfleet.vllm.diagnose against real vLLM servers on loopback (two local dummy hosts)."""

from __future__ import annotations

import html.parser
import json
import os
import subprocess
import sys
import time

from conftest import MIB, under_load
from test_hosttools_live import falling_history, install


class Rows(html.parser.HTMLParser):
    """The report table's body rows: [(class, text)]."""

    def __init__(self):
        super().__init__()
        self.rows, self._in_body, self._cls, self._text = [], False, None, []

    def handle_starttag(self, tag, attrs):
        if tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._in_body:
            self._cls, self._text = dict(attrs).get("class"), []

    def handle_endtag(self, tag):
        if tag == "tr" and self._in_body:
            self.rows.append((self._cls, " ".join(self._text)))
        elif tag == "tbody":
            self._in_body = False

    def handle_data(self, data):
        if self._in_body:
            self._text.append(data.strip())


# The deploy inventory's settings, as every playbook reads them (kvfleet.vllm.vllm_instances).
SERVER_VARS = {"vllm_server_device": "cpu", "vllm_server_model": "/models/tiny-llama",
               "vllm_server_block_size": 32, "vllm_server_kv_cache_memory_bytes": 8 * MIB}

RECORDS = """
- name: Write the deployment record the server role would write
  hosts: localhost
  gather_facts: false
  tasks:
    - name: The one instance model
      ansible.builtin.include_role:
        name: kvfleet.vllm.server
        tasks_from: instances
    - name: The record's instances
      ansible.builtin.copy:
        dest: "{{ record_path }}"
        content: "{{ {'current': {'instances': server_result.records}} | to_json }}"
        mode: "0644"
"""


def write_record(tmp_path, path, host_vars):
    """The record the server role writes for these inventory variables (same filter, same map)."""
    playbook = tmp_path / "record.yml"
    playbook.write_text(RECORDS)
    extra = dict(SERVER_VARS, record_path=str(path), ansible_python_interpreter=sys.executable,
                 **host_vars)
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", str(playbook),
                           "-e", json.dumps(extra)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return json.loads(path.read_text())["current"]["instances"]


def test_diagnose_names_the_capped_host_in_table_and_reports(tmp_path, idle_server, capped_server):
    # gpu-b's server listens on 127.0.0.2 only: 127.0.0.1 does not reach it (a bind other than
    # the probe's default), and its cap comes from the instance's options.
    capped = capped_server
    assert capped.host == "127.0.0.2"
    gpu_b = {"vllm_server_host": "127.0.0.2", "vllm_server_instances": [
        {"name": "main", "port": capped.port, "options": {"max_num_seqs": 2}},
        {"name": "spare", "port": 9}]}   # nothing listens there
    # gpu-a has a monitor history (the kvfleet-vllm program as the hosttools role lays it out)
    tool = tmp_path / "kvfleet-vllm"
    tool.write_text('#!/bin/sh\nexec /usr/bin/python3 -I %s "$@"\n' % install(tmp_path / "tools"))
    tool.chmod(0o755)
    falling_history(tmp_path / "mon" / "history.jsonl")
    write_record(tmp_path, tmp_path / "gpu-a.fact", {"vllm_server_instances": [
        {"name": "main", "port": idle_server.port}]})
    (tmp_path / "monitor.json").write_text(json.dumps({
        "history": str(tmp_path / "mon" / "history.jsonl"), "record": str(tmp_path / "gpu-a.fact")}))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {
        "gpu-a": {"vllm_server_instances": [{"name": "main", "port": idle_server.port}],
                  "vllm_diagnose_hosttool": str(tool), "kvfleet_hosttools_config_dir": str(tmp_path)},
        "gpu-b": gpu_b,
    }, "vars": dict(SERVER_VARS, ansible_connection="local", ansible_python_interpreter=os.environ.get(
        "KVFLEET_TOOLS", "") + "/bin/python")}}))
    report = tmp_path / "report"
    # more requests than the test can finish at the cap (cancelled below): the rounds after the
    # playbook, however long it took on a busy machine, still see the queue
    load = under_load(capped, 2000, 40, 20, 900)
    try:
        proc = subprocess.run(
            ["ansible-playbook", "-i", str(inventory), "kvfleet.vllm.diagnose",
             "-e", "vllm_diagnose_report_dir=%s" % report],
            capture_output=True, text=True, timeout=600, check=False)
        # The monitor's sampler on gpu-b reads the same record: the bound address and the cap.
        records = write_record(tmp_path, tmp_path / "gpu-b.fact", gpu_b)
        assert [(r["url"], r["max_num_seqs"]) for r in records] == [
            ("http://127.0.0.2:%d" % capped.port, 2), ("http://127.0.0.2:9", 128)]
        mon = tmp_path / "mon-b"
        (tmp_path / "monitor-b.json").write_text(json.dumps({
            "history": str(mon / "history.jsonl"), "record": str(tmp_path / "gpu-b.fact"),
            "textfile": str(mon / "kvfleet_vllm.prom")}))
        for _round in range(3):
            sampled = subprocess.run([str(tool), "monitor", "--config", str(tmp_path / "monitor-b.json")],
                                     capture_output=True, text=True, timeout=120, check=False)
            assert sampled.returncode == 0, sampled.stderr
            time.sleep(2)
    finally:
        load.cancel()
    rounds = [json.loads(line) for line in (mon / "history.jsonl").read_text().splitlines()
              if json.loads(line)["instance"] == "main"]
    # each round is one moment: between two engine steps vLLM may show one request running and
    # the rest queued, so the cap (2, from the instance's options, at its own bind) is asserted
    # where a round saw it full, and no round may see more
    assert rounds and all(r.get("error") is None and 1 <= r["requests_running"] <= 2 for r in rounds), rounds
    full = [r for r in rounds if r["requests_running"] == 2]
    assert full and all(r["cause_ids"] == ["concurrency_cap"] for r in full), rounds
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "Report: %s/kvfleet-vllm-diagnosis.html" % report in proc.stdout

    rows = dict(((r["host"], r["instance"]), r) for r in json.loads(
        (report / "kvfleet-vllm-diagnosis.json").read_text())["instances"])
    assert set(rows) == {("gpu-a", "main"), ("gpu-b", "main"), ("gpu-b", "spare")}
    assert rows[("gpu-a", "main")]["verdict"] == "healthy"
    assert rows[("gpu-a", "main")]["version"] == "0.32.0"
    assert [c["id"] for c in rows[("gpu-b", "main")]["causes"]] == ["concurrency_cap"]
    assert [c["id"] for c in rows[("gpu-b", "spare")]["causes"]] == ["engine_down"]
    assert rows[("gpu-b", "main")]["block_size"] == 32
    # the monitor's history on gpu-a: the guide's "usage falling while the rate holds"
    assert rows[("gpu-a", "main")]["trends"] == ["usage_falling_rate_steady"]
    assert rows[("gpu-a", "main")]["sustained"] == ["concurrency_cap"]
    assert rows[("gpu-b", "main")]["trends"] == []   # no monitor there

    # the fleet table names the host and the cause
    table = [line for line in proc.stdout.splitlines() if "gpu-b" in line and "concurrency_cap" in line]
    assert table, proc.stdout[-3000:]

    parser = Rows()
    parser.feed((report / "kvfleet-vllm-diagnosis.html").read_text())
    by_text = dict((text.split()[0] + "/" + text.split()[1], (cls, text)) for cls, text in parser.rows)
    assert by_text["gpu-b/main"][0] == "degraded"
    assert "concurrency_cap" in by_text["gpu-b/main"][1] and "--max-num-seqs" in by_text["gpu-b/main"][1]
    assert by_text["gpu-b/spare"][0] == "unhealthy"
    assert by_text["gpu-a/main"][0] == "healthy"
    assert "usage_falling_rate_steady" in by_text["gpu-a/main"][1]
