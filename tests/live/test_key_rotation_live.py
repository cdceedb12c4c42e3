"""API key rotation on a real vLLM CPU 0.32.0: the keys file the server role writes during a
rotation (roles/server/templates/vllm.keys.yaml.j2), read through vLLM's --config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import jinja2

from conftest import MIB

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
NEW, OLD = "rot-new-7c1d9e", "rot-old-51ab04"


def _status(url, key):
    req = urllib.request.Request(url + "/v1/models")
    if key:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_both_keys_are_accepted_and_neither_shows_in_ps_or_the_log(server_factory, tmp_path):
    env = jinja2.Environment()
    env.filters["to_json"] = json.dumps  # what Ansible's to_json gives for a string
    with open(os.path.join(ROOT, "roles", "server", "templates", "vllm.keys.yaml.j2")) as f:
        text = env.from_string(f.read()).render(
            ansible_managed="test", vllm_server_api_key=NEW, vllm_server_api_keys_previous=[OLD])
    keys = tmp_path / "main.keys.yaml"
    keys.write_text(text)
    srv = server_factory(kv_bytes=8 * MIB, max_num_seqs=4, extra=["--config", str(keys)])
    assert _status(srv.url, NEW) == 200
    assert _status(srv.url, OLD) == 200
    assert _status(srv.url, "wrong-key") == 401
    assert _status(srv.url, None) == 401
    # the keys never left their file: not in any process's command line, not in the log
    cmdlines = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True,
                              check=True).stdout
    with open(srv.log_path, encoding="utf-8", errors="replace") as f:
        log = f.read()
    for key in (NEW, OLD):
        assert key not in cmdlines and key not in log
    assert "'api_key': '***'" in log  # vLLM 0.31+ redacts it in "non-default args"
    sys.stdout.write("rotation: both keys 200, wrong/none 401, keys absent from ps and log\n")
