"""kvfleet.vllm.diagnose against real vLLM servers on loopback (two local dummy hosts)."""

from __future__ import annotations

import html.parser
import json
import os
import subprocess

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


def test_diagnose_names_the_capped_host_in_table_and_reports(tmp_path, idle_server, server_factory):
    capped = server_factory(kv_bytes=8 * MIB, max_num_seqs=2)
    # gpu-a has a monitor history (the kvfleet-vllm program as the hosttools role lays it out)
    tool = tmp_path / "kvfleet-vllm"
    tool.write_text('#!/bin/sh\nexec /usr/bin/python3 -I %s "$@"\n' % install(tmp_path / "tools"))
    tool.chmod(0o755)
    falling_history(tmp_path / "mon" / "history.jsonl")
    (tmp_path / "monitor.json").write_text(json.dumps({
        "history": str(tmp_path / "mon" / "history.jsonl"),
        "instances": [{"name": "main", "url": idle_server.url}]}))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {
        "gpu-a": {"vllm_server_instances": [{"name": "main", "port": idle_server.port}],
                  "vllm_diagnose_hosttool": str(tool), "vllm_monitor_config_dir": str(tmp_path)},
        "gpu-b": {"vllm_server_instances": [
            {"name": "main", "port": capped.port, "options": {"max_num_seqs": 2}},
            {"name": "spare", "port": 9}]},   # nothing listens there
    }, "vars": {"ansible_connection": "local", "ansible_python_interpreter": os.environ.get(
        "KVFLEET_TOOLS", "") + "/bin/python", "vllm_server_device": "cpu"}}}))
    report = tmp_path / "report"
    load = under_load(capped, 200, 40, 20, 900)
    try:
        proc = subprocess.run(
            ["ansible-playbook", "-i", str(inventory), "kvfleet.vllm.diagnose",
             "-e", "vllm_diagnose_report_dir=%s" % report],
            capture_output=True, text=True, timeout=600, check=False)
    finally:
        load.cancel()
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
