"""The deploy_report callback: a deploy that ends early still leaves a summary and a report."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from ansible_collections.kvfleet.vllm.plugins.callback import deploy_report
from ansible_collections.kvfleet.vllm.plugins.filter.deploy_rows import deploy_rows
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import end_rows

A = {"version": "0.32.0", "config": "aaaa"}


def _row(host, batch=None, outcome="untouched", **extra):
    return dict(host=host, batch=batch, before=A, outcome=outcome, phases={}, **extra)


class _Display:
    def __init__(self):
        self.lines = []

    def banner(self, msg):
        self.lines.append("** " + msg)

    def display(self, msg):
        self.lines.append(msg)

    def warning(self, msg):
        self.lines.append("WARNING " + msg)


def _result(host, facts=None, task="t", msg=None, public=True):
    """A callback's task result: with the public names of ansible-core 2.19+, or only the
    underscored ones of 2.17 and 2.18."""
    parts = (SimpleNamespace(get_name=lambda: host),
             SimpleNamespace(get_name=lambda: task, delegate_to=None, delegate_facts=None),
             {"ansible_facts": facts or {}, "msg": msg})
    if public:
        return SimpleNamespace(host=parts[0], task=parts[1], result=parts[2])
    return SimpleNamespace(_host=parts[0], _task=parts[1], _result=parts[2])


@pytest.fixture
def callback(monkeypatch):
    monkeypatch.setattr(deploy_report.atexit, "register", lambda f: None)
    cb = deploy_report.CallbackModule()
    cb._display = _Display()
    return cb


def test_end_rows_names_what_each_lost_host_was_doing():
    rows = [_row("h1", 1, "upgraded", after=A), _row("h2", 2), _row("h3", 2), _row("h4"), _row("h5")]
    out = end_rows(rows, stages={"h2": "restart", "h3": None}, unreachable={"h3": "gone"},
                   failures={"h5": "Assert the model: missing"}, interrupted=True)
    assert [r["outcome"] for r in out] == ["upgraded", "interrupted", "unreachable", "untouched", "refused"]
    # h2 was restarting when the run stopped: named as drained, with its step
    assert out[1]["drained"] is True and out[1]["failed_stage"] == "restart"
    assert out[1]["detail"] == "stopped during restart: the run was interrupted"
    # h3 dropped before its drain began: not drained
    assert "drained" not in out[2] and out[2]["detail"] == "gone"
    assert out[4]["detail"] == "Assert the model: missing" and "drained" not in out[4]
    # the input rows are not changed
    assert rows[1]["outcome"] == "untouched"


def test_end_rows_without_interrupt_leaves_a_waiting_batch_host_untouched():
    out = end_rows([_row("h1", 1)], stages={}, interrupted=False)
    assert out[0]["outcome"] == "untouched"


def test_filter_takes_a_list_of_unreachable_hosts():
    out = deploy_rows([_row("h1", 3)], stages={"h1": "verify"}, unreachable=["h1"])
    assert out[0]["outcome"] == "unreachable" and out[0]["drained"] is True
    assert out[0]["detail"] == "stopped during verify: unreachable"


def test_interrupt_writes_summary_and_report(callback, tmp_path):
    cb = callback
    for h in ("n1", "n2", "n3"):
        cb.v2_runner_on_ok(_result(h, {"_rollout_row": _row(h), "_rollout_report_dir": str(tmp_path)}))
    cb.v2_runner_on_ok(_result("n1", {"_rollout_row": _row("n1", 1, "upgraded", after=A, seconds=80.0)}))
    cb.v2_runner_on_ok(_result("n2", {"_rollout_row": _row("n2", 2)}))
    cb.v2_runner_on_ok(_result("n2", {"_rollout_stage": "drain"}))
    cb.v2_runner_on_ok(_result("n2", {"_rollout_stage": "restart"}))
    cb._at_exit()
    report = json.loads((tmp_path / "kvfleet-vllm-deploy.json").read_text())
    assert report["ended"] == "interrupted"
    assert [(h["host"], h["outcome"], h.get("drained")) for h in report["hosts"]] == [
        ("n1", "upgraded", None), ("n2", "interrupted", True), ("n3", "untouched", None)]
    text = "\n".join(cb._display.lines)
    assert "the run was interrupted" in text
    assert "1 upgraded, 1 interrupted, 1 untouched" in text
    assert "left out of the load balancer: n2" in text
    # written once: the stats that may follow do not write it again
    (tmp_path / "kvfleet-vllm-deploy.json").unlink()
    cb.v2_playbook_on_stats(None)
    assert not (tmp_path / "kvfleet-vllm-deploy.json").exists()


def test_refusal_in_the_checks_is_reported(callback, tmp_path):
    cb = callback
    for h in ("n1", "n2"):
        cb.v2_runner_on_ok(_result(h, {"_rollout_row": _row(h), "_rollout_report_dir": str(tmp_path)}))
    cb.v2_runner_on_failed(_result("n2", task="Assert the model", msg="no model at /srv/m", public=False))
    cb.v2_playbook_on_stats(None)
    report = json.loads((tmp_path / "kvfleet-vllm-deploy.json").read_text())
    assert report["ended"] == "stopped early"
    assert [h["outcome"] for h in report["hosts"]] == ["untouched", "refused"]
    assert report["hosts"][1]["detail"] == "Assert the model: no model at /srv/m"


def test_unreachable_canary_is_named(callback, tmp_path):
    cb = callback
    cb.v2_runner_on_ok(_result("n1", {"_rollout_row": _row("n1", 1), "_rollout_report_dir": str(tmp_path)}))
    cb.v2_runner_on_ok(_result("n1", {"_rollout_stage": "change"}, public=False))
    cb.v2_runner_on_unreachable(_result("n1", task="Install vLLM", msg="ssh: timed out"))
    cb.v2_playbook_on_stats(None)
    host = json.loads((tmp_path / "kvfleet-vllm-deploy.json").read_text())["hosts"][0]
    assert host["outcome"] == "unreachable" and host["drained"] is True
    assert host["detail"] == "stopped during change: unreachable at Install vLLM: ssh: timed out"


def test_a_run_that_wrote_its_own_report_is_left_alone(callback, tmp_path):
    cb = callback
    cb.v2_runner_on_ok(_result("n1", {"_rollout_row": _row("n1", 1, "upgraded"), "_rollout_report_dir": str(tmp_path)}))
    cb.v2_runner_on_ok(_result("n1", {"_rollout_reported": True}))
    cb.v2_playbook_on_stats(None)
    cb._at_exit()
    assert not (tmp_path / "kvfleet-vllm-deploy.json").exists() and cb._display.lines == []


def test_other_playbooks_are_left_alone(callback, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    callback.v2_runner_on_ok(_result("n1", {"x": 1}))
    callback.v2_runner_on_failed(_result("n1", msg="boom"))
    callback._at_exit()
    assert list(tmp_path.iterdir()) == [] and callback._display.lines == []


def test_rows_follow_the_inventory_order(callback, tmp_path):
    hosts = [SimpleNamespace(get_name=lambda n=n: n) for n in ("n1", "n2", "n3")]
    inventory = SimpleNamespace(get_hosts=lambda pattern: hosts)
    callback.v2_playbook_on_play_start(SimpleNamespace(
        hosts="all", get_variable_manager=lambda: SimpleNamespace(_inventory=inventory)))
    for h in ("n3", "n1", "n2"):   # as forks return them
        callback.v2_runner_on_ok(_result(h, {"_rollout_row": _row(h), "_rollout_report_dir": str(tmp_path)}))
    callback._at_exit()
    report = json.loads((tmp_path / "kvfleet-vllm-deploy.json").read_text())
    assert [h["host"] for h in report["hosts"]] == ["n1", "n2", "n3"]
