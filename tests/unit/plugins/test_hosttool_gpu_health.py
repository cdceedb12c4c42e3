"""GPU health in the host program (roles/hosttools/files/kvfleet_vllm.py): the monitor round reads
it through NVML (a fake here) into the history, the textfile and the diagnosis, and keeps the last
reading for NVLink growth; a CPU host records none. The watchdog and the restart guard never
restart an instance on an unhealthy GPU: they run the drain commands, say why and record it."""

from __future__ import annotations

import argparse
import json
import os
import socket
import stat
import subprocess
import time

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils._prom import parse
from ansible_collections.kvfleet.vllm.tests.unit.plugins import hostprog
from ansible_collections.kvfleet.vllm.tests.unit.plugins import local_servers as ls
from ansible_collections.kvfleet.vllm.tests.unit.plugins.fake_nvml import (
    FakeNvml, NVMLError_DriverNotLoaded, healthy_gpu)

prog = hostprog.load("kvfleet_vllm_gpu_health")

# volatile uncorrectable ECC errors: unhealthy (ecc_uncorrected_volatile)
SICK_ECC = {(0, 0): 3, (1, 0): 2, (0, 1): 12, (1, 1): 2}


def _sick(uuid="GPU-sick"):
    return healthy_gpu(uuid=uuid, ecc=dict(SICK_ECC))


def _nvlink(replay):
    """18 active links, link 0 with `replay` data-link replays."""
    links = dict((link, {"state": 1, "counters": {0: 0, 1: 0, 2: 0, 3: 0, 4: 0}}) for link in range(18))
    links[0]["counters"][0] = replay
    return links


def _closed_port_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "http://127.0.0.1:%d" % s.getsockname()[1]


def _nvml(monkeypatch, fake):
    monkeypatch.setattr(prog, "load_nvml", lambda venv=None: fake)
    prog._GPU_HOLDS.clear()


# ---------------------------------------------------------------------------------------------
# the monitor round

@pytest.fixture
def monitor(tmp_path, monkeypatch):
    """A host with two instances: 'a' on GPU 0, 'b' on GPU 1 (the record names them)."""
    monkeypatch.setattr(prog, "unit_state", lambda unit: {"ActiveState": "active", "NRestarts": 0})
    server = ls.LocalServer(ls.vllm())
    server.__enter__()
    record = tmp_path / "record.fact"
    record.write_text(json.dumps({"current": {"instances": [
        {"name": "a", "unit": "vllm-a.service", "url": server.url, "cuda_visible_devices": "0"},
        {"name": "b", "unit": "vllm-b.service", "url": server.url, "cuda_visible_devices": "GPU-bbbb"}]}}))
    cfg = {"record": str(record), "history": str(tmp_path / "mon" / "history.jsonl"),
           "textfile": str(tmp_path / "textfile" / "kvfleet_vllm.prom"), "gpu_xid_wait_ms": 250}
    (tmp_path / "monitor.json").write_text(json.dumps(cfg))

    class Monitor(object):
        args = argparse.Namespace(config=str(tmp_path / "monitor.json"))
        history = tmp_path / "mon" / "history.jsonl"
        textfile = tmp_path / "textfile" / "kvfleet_vllm.prom"
        state = tmp_path / "mon" / "gpu_health.json"

        def lines(self):
            """The last round's line of each instance."""
            return dict((line["instance"], line) for line in map(json.loads, self.history.read_text().splitlines()))

        def gauges(self, name):
            return dict((tuple(sorted(s.labels.items())), s.value) for s in parse(self.textfile.read_text())[0]
                        if s.name == name)

    yield Monitor()
    server.__exit__(None, None, None)


def test_a_round_records_each_instances_gpus_in_history_textfile_and_diagnosis(monitor, monkeypatch, capsys):
    fake = FakeNvml(gpus=[healthy_gpu(uuid="GPU-aaaa"), _sick("GPU-bbbb")])
    _nvml(monkeypatch, fake)
    assert prog.sample(monitor.args) == 0
    lines = monitor.lines()
    assert lines["a"]["gpus"] == [{"index": 0, "uuid": "GPU-aaaa", "verdict": "healthy", "reason_ids": []}]
    assert lines["b"]["gpus"] == [{"index": 1, "uuid": "GPU-bbbb", "verdict": "unhealthy",
                                   "reason_ids": ["ecc_uncorrected_volatile"]}]
    # the diagnosis of the instance on the sick GPU names it; the other's does not
    assert "gpu_unhealthy" in lines["b"]["cause_ids"] and lines["b"]["verdict"] == "unhealthy"
    assert "gpu_unhealthy" not in lines["a"]["cause_ids"] and lines["a"]["verdict"] == "healthy"
    health = monitor.gauges("kvfleet_vllm_gpu_health")
    assert health == {(("gpu", "0"), ("uuid", "GPU-aaaa")): 0, (("gpu", "1"), ("uuid", "GPU-bbbb")): 2}
    reasons = monitor.gauges("kvfleet_vllm_gpu_health_reason")
    assert reasons == {(("gpu", "1"), ("reason", "ecc_uncorrected_volatile"), ("severity", "unhealthy"),
                        ("uuid", "GPU-bbbb")): 1}
    # the Xid wait is the configuration's, bounded
    assert fake.waits and 0 < fake.waits[0] <= 250
    err = capsys.readouterr().err
    assert "<3>GPU 1 (NVIDIA H100 80GB HBM3, GPU-bbbb) is unhealthy: ecc_uncorrected_volatile" in err
    # the reading is kept for the next round, the guard and the watchdog (root reads it)
    saved = json.loads(monitor.state.read_text())
    assert [g["uuid"] for g in saved["gpus"]] == ["GPU-aaaa", "GPU-bbbb"]
    assert "processes" not in saved["gpus"][0] and saved["gpus"][1]["health"]["verdict"] == "unhealthy"
    assert stat.S_IMODE(os.stat(str(monitor.state)).st_mode) == 0o644


def test_nvlink_errors_count_when_they_grew_since_the_last_round(monitor, monkeypatch):
    gpu = healthy_gpu(uuid="GPU-aaaa", nvlink=_nvlink(5))
    _nvml(monkeypatch, FakeNvml(gpus=[gpu, healthy_gpu(uuid="GPU-bbbb")]))
    assert prog.sample(monitor.args) == 0
    # the first reading has nothing to compare with: errors on an active link count
    assert monitor.lines()["a"]["gpus"][0]["reason_ids"] == ["nvlink_errors"]
    assert prog.sample(monitor.args) == 0
    # the same count as the round before: nothing new
    assert monitor.lines()["a"]["gpus"][0] == {"index": 0, "uuid": "GPU-aaaa", "verdict": "healthy", "reason_ids": []}
    gpu["nvlink"] = _nvlink(7)
    assert prog.sample(monitor.args) == 0
    line = monitor.lines()["a"]["gpus"][0]
    assert (line["verdict"], line["reason_ids"]) == ("degraded", ["nvlink_errors"])
    reason = json.loads(monitor.state.read_text())["gpus"][0]["health"]["reasons"][0]
    assert reason["evidence"]["links"] == [{"link": 0, "counter": "replay", "value": 7, "growth": 2}]


@pytest.mark.parametrize("nvml", [None, FakeNvml(init_error=NVMLError_DriverNotLoaded())],
                         ids=["no pynvml", "no driver"])
def test_a_cpu_host_records_no_gpu_and_does_not_fail(monitor, monkeypatch, capsys, nvml):
    _nvml(monkeypatch, nvml)
    assert prog.sample(monitor.args) == 0
    lines = monitor.lines()
    assert sorted(lines) == ["a", "b"] and all("gpus" not in line for line in lines.values())
    assert lines["a"]["verdict"] == "healthy"
    text = monitor.textfile.read_text()
    assert "kvfleet_vllm_up" in text and "kvfleet_vllm_gpu_health" not in text
    assert not monitor.state.exists()
    assert "GPU" not in capsys.readouterr().err


def test_the_xid_wait_is_bounded():
    assert prog.xid_wait_ms({}) == 100
    assert prog.xid_wait_ms({"gpu_xid_wait_ms": 0}) == 0
    assert prog.xid_wait_ms({"gpu_xid_wait_ms": 10 ** 9}) == prog.GPU_XID_WAIT_MAX_MS == 5000
    assert prog.xid_wait_ms({"gpu_xid_wait_ms": -5}) == 0
    assert prog.xid_wait_ms({"gpu_xid_wait_ms": "10"}) == 100


def test_the_instances_gpus_come_from_its_unit_when_the_record_has_none(monkeypatch):
    shown = []

    def run(argv, **_kwargs):
        shown.append(argv)
        return subprocess.CompletedProcess(argv, 0, 'Environment="FOO=a b" CUDA_VISIBLE_DEVICES=1,0\n', "")
    monkeypatch.setattr(prog.subprocess, "run", run)
    assert prog.visible_devices({"name": "a", "unit": "vllm-a.service"}) == "1,0"
    assert shown == [["systemctl", "show", "-p", "Environment", "vllm-a.service"]]
    # the record's own value wins; without either, CUDA sees every GPU
    assert prog.visible_devices({"name": "a", "unit": "u", "cuda_visible_devices": "2"}) == "2"
    monkeypatch.setattr(prog.subprocess, "run", lambda argv, **k: subprocess.CompletedProcess(argv, 0, "Environment=\n", ""))
    assert prog.visible_devices({"name": "a", "unit": "vllm-a.service"}) is None


# ---------------------------------------------------------------------------------------------
# the watchdog and the guard: drain, never restart, on an unhealthy GPU

@pytest.fixture
def host(tmp_path, monkeypatch):
    """A unit that runs for an hour; hooks run for real (they append to a file), systemctl's
    stop/start/restart are recorded and never run."""
    hooks = tmp_path / "hooks.log"
    real_run = subprocess.run
    systemctl = []

    def run(argv, **kwargs):
        if isinstance(argv, list) and argv[:1] == ["systemctl"]:
            systemctl.append(argv)
            return subprocess.CompletedProcess(argv, 0, "", "")
        return real_run(argv, **kwargs)  # pylint: disable=subprocess-run-check  # the caller passes its own check
    monkeypatch.setattr(prog.subprocess, "run", run)
    started = time.monotonic() - 3600
    monkeypatch.setattr(prog, "unit_state", lambda unit: {
        "ActiveState": "active", "Result": "success", "NRestarts": 0,
        "ActiveEnterTimestampMonotonic": str(int(started * 1e6))})
    monkeypatch.setattr(prog, "_wait_idle", lambda inst, timeout: {})
    monkeypatch.setattr(prog, "wait_healthy", lambda waiter: 0)

    class Host(object):
        pass
    Host.systemctl, Host.hooks, Host.tmp = systemctl, hooks, tmp_path
    Host.pre = ["echo drain $KVFLEET_INSTANCE >> %s" % hooks]
    Host.post = ["echo undrain $KVFLEET_INSTANCE >> %s" % hooks]
    Host.restarts = lambda: [a for a in systemctl if a[1] in ("restart", "stop", "start")]
    Host.hooks_run = lambda: hooks.read_text().split("\n")[:-1] if hooks.exists() else []
    return Host


def _watchdog_config(host, url, monitor_extra=None):
    tmp = host.tmp
    record = tmp / "record.json"
    record.write_text(json.dumps({"current": {"instances": [
        {"name": "main", "unit": "vllm-main.service", "url": url, "cuda_visible_devices": "0"}]}}))
    history = tmp / "monitor" / "history.jsonl"
    history.parent.mkdir(parents=True, exist_ok=True)
    now = time.time()
    with open(str(history), "w") as f:
        for t in (now - 700, now - 5):
            f.write(json.dumps({"instance": "main", "time": t, "cause_ids": ["engine_down"],
                                "verdict": "unhealthy"}) + "\n")
    monitor = tmp / "monitor.json"
    monitor.write_text(json.dumps(dict({"history": str(history), "record": str(record)}, **(monitor_extra or {}))))
    cfg = tmp / "watchdog.json"
    cfg.write_text(json.dumps({"record": str(record), "monitor_config": str(monitor),
                               "state": str(tmp / "wd" / "restarts.json"), "causes": ["engine_down"],
                               "for_seconds": 600, "max_per_day": 2, "gate_samples": 2, "gate_interval": 0.2,
                               "pre_commands": host.pre, "post_commands": host.post, "health_timeout": 30}))
    return argparse.Namespace(config=str(cfg))


def _last_action(host):
    return json.loads((host.tmp / "wd" / "actions.jsonl").read_text().splitlines()[-1])


def test_the_watchdog_drains_an_instance_on_an_unhealthy_gpu_and_never_restarts_it(host, monkeypatch, capsys):
    _nvml(monkeypatch, FakeNvml(gpus=[_sick("GPU-0000"), healthy_gpu(uuid="GPU-1111")]))
    # engine_down in the history, confirmed by the watchdog's own sample (nothing listens)
    assert prog.watchdog(_watchdog_config(host, _closed_port_url())) == 0
    assert host.restarts() == []
    assert host.hooks_run() == ["drain main"]            # drained, and left drained
    err = capsys.readouterr().err
    assert ("<3>vllm-main.service: not restarting main: GPU 0 GPU-0000 ecc_uncorrected_volatile (drain the "
            "host and reset the GPU; replace the GPU if uncorrectable errors return); read through NVML now. "
            "A restart of vLLM does not cure the GPU: running the drain (pre-restart) commands") in err
    action = _last_action(host)
    assert action["outcome"] == "gpu-unhealthy" and list(action["causes"]) == ["engine_down"]
    assert action["gpus"] == [{"index": 0, "uuid": "GPU-0000", "verdict": "unhealthy",
                               "reason_ids": ["ecc_uncorrected_volatile"]}]
    # not a restart: the day's budget is untouched
    assert json.loads((host.tmp / "wd" / "restarts.json").read_text())["restarts"] == []


def test_the_watchdog_restarts_as_before_on_a_healthy_gpu(host, monkeypatch):
    # the sick GPU is not the instance's (it sees GPU 0 only)
    _nvml(monkeypatch, FakeNvml(gpus=[healthy_gpu(uuid="GPU-0000"), _sick("GPU-1111")]))
    assert prog.watchdog(_watchdog_config(host, _closed_port_url())) == 0
    assert host.restarts() == [["systemctl", "restart", "vllm-main.service"]]
    assert host.hooks_run() == ["drain main", "undrain main"]
    action = _last_action(host)
    assert action["outcome"] == "restarted" and "gpus" not in action


@pytest.mark.parametrize("age, held", [(30, True), (prog.GPU_READING_MAX_AGE + 60, False)])
def test_without_nvml_of_its_own_the_watchdog_reads_the_monitors_recent_reading(host, monkeypatch, age, held):
    """The watchdog's unit has no GPU devices: the monitor's last reading, if recent, decides."""
    args = _watchdog_config(host, _closed_port_url())
    gpus = prog.nvml_collect(FakeNvml(gpus=[_sick("GPU-0000")]))["gpus"]
    prog.save_gpu_state(str(host.tmp / "monitor" / "gpu_health.json"), gpus, time.time() - age)
    _nvml(monkeypatch, FakeNvml(init_error=NVMLError_DriverNotLoaded()))
    assert prog.watchdog(args) == 0
    if held:
        assert host.restarts() == [] and host.hooks_run() == ["drain main"]
        assert _last_action(host)["outcome"] == "gpu-unhealthy"
        assert _last_action(host)["source"].startswith("as the monitor read it ")
    else:   # stale: says nothing about now
        assert host.restarts() == [["systemctl", "restart", "vllm-main.service"]]


INST = {"name": "main", "unit": "vllm-main.service", "url": "http://127.0.0.1:9", "graceful": True}


@pytest.fixture
def gate(monkeypatch):
    seen = []

    def run_gate(*args, **kwargs):
        seen.append(kwargs.get("gpu_health"))
        return {"verdict": "unhealthy", "causes": [{"id": c} for c in gate.causes]}
    monkeypatch.setattr(prog, "run_gate", run_gate)
    gate.causes, gate.seen = ["engine_down"], seen
    return gate


def _guard_cfg(host, mode="when_degraded", pre=None):
    return {"mode": mode, "causes": ["engine_down"], "health_timeout": 30,
            "pre_commands": host.pre if pre is None else pre, "post_commands": host.post}


def test_when_degraded_drains_instead_of_restarting_on_an_unhealthy_gpu(host, gate, monkeypatch, capsys):
    _nvml(monkeypatch, FakeNvml(gpus=[_sick("GPU-0000")]))
    assert prog.restart_one(_guard_cfg(host), dict(INST, cuda_visible_devices="0")) == "gpu-unhealthy"
    assert host.restarts() == [] and host.hooks_run() == ["drain main"]
    # the gate's diagnosis saw the GPU too
    assert [g["uuid"] for g in gate.seen[0]] == ["GPU-0000"]
    assert "not restarting main: GPU 0 GPU-0000 ecc_uncorrected_volatile (" in capsys.readouterr().err


def test_when_degraded_restarts_as_before_on_a_healthy_gpu(host, gate, monkeypatch):
    _nvml(monkeypatch, FakeNvml(gpus=[healthy_gpu(uuid="GPU-0000")]))
    assert prog.restart_one(_guard_cfg(host), dict(INST, cuda_visible_devices="0")) == "restarted"
    assert host.restarts() == [["systemctl", "restart", "vllm-main.service"]]
    assert host.hooks_run() == ["drain main", "undrain main"]
    assert gate.seen[0][0]["health"]["verdict"] == "healthy"


def test_when_degraded_without_a_cause_a_restart_cures_neither_restarts_nor_drains(host, gate, monkeypatch):
    """The drain replaces a restart; with no restart due, the alert (VllmGpuUnhealthy) tells a person."""
    _nvml(monkeypatch, FakeNvml(gpus=[_sick("GPU-0000")]))
    gate.causes = ["gpu_unhealthy"]
    assert prog.restart_one(_guard_cfg(host), dict(INST, cuda_visible_devices="0")) == "skipped"
    assert host.restarts() == [] and host.hooks_run() == []


def test_the_guard_reports_a_failed_drain(host, gate, monkeypatch, tmp_path, capsys):
    _nvml(monkeypatch, FakeNvml(gpus=[_sick("GPU-0000")]))
    record = tmp_path / "record.json"
    record.write_text(json.dumps({"current": {"instances": [dict(INST, cuda_visible_devices="0")]}}))
    cfg = tmp_path / "restart.json"
    cfg.write_text(json.dumps(dict(_guard_cfg(host, pre=["exit 3"]), record=str(record))))
    assert prog.restart_guard(argparse.Namespace(config=str(cfg))) == 1
    assert host.restarts() == []
    out = capsys.readouterr()
    assert "main is neither restarted nor drained" in out.err and "vllm-main.service drain-failed" in out.out


def test_a_scheduled_restart_in_mode_always_goes_ahead_and_names_the_gpu(host, gate, monkeypatch, capsys):
    _nvml(monkeypatch, FakeNvml(gpus=[_sick("GPU-0000")]))
    assert prog.restart_one(_guard_cfg(host, mode="always"), dict(INST, cuda_visible_devices="0")) == "restarted"
    assert host.restarts() == [["systemctl", "restart", "vllm-main.service"]]
    assert ("<4>vllm-main.service: scheduled restart although GPU 0 GPU-0000 is unhealthy: "
            "ecc_uncorrected_volatile") in capsys.readouterr().out


def test_the_gate_command_judges_the_gpus_it_is_given(monkeypatch, capsys):
    _nvml(monkeypatch, FakeNvml(gpus=[healthy_gpu(uuid="GPU-0000"), _sick("GPU-1111")]))
    with ls.LocalServer(ls.vllm()) as server:
        assert prog.main(["gate", "--url", server.url, "--samples", "2", "--interval", "0.2"]) == 0
        assert prog.main(["gate", "--url", server.url, "--samples", "2", "--interval", "0.2", "--gpus", "1"]) == 2
    last = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert [c["id"] for c in last["causes"]] == ["gpu_unhealthy"]
    assert [g["uuid"] for g in last["causes"][0]["evidence"]["gpus"]] == ["GPU-1111"]
