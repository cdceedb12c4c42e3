"""The restart guard's safety rules (roles/hosttools/files/kvfleet_vllm.py, restart_one): it never
starts a unit that was stopped, and never restarts one still within its health timeout."""

from __future__ import annotations

import os
import time

import pytest

from ansible_collections.kvfleet.vllm.tests.unit.plugins import hostprog

INST = {"name": "main", "unit": "vllm-main.service", "url": "http://127.0.0.1:9", "graceful": True}


prog = hostprog.load("kvfleet_vllm_guard")


@pytest.fixture
def host(monkeypatch):
    """A unit in a given state; records the commands the guard would run."""
    calls = []

    class Host(object):
        state = {"ActiveState": "active", "Result": "success", "NRestarts": 0}

    def run(argv, **_kwargs):
        calls.append(argv)
        raise AssertionError("the guard ran %r" % (argv,))

    monkeypatch.setattr(prog, "unit_state", lambda unit: dict(Host.state))
    monkeypatch.setattr(prog.subprocess, "run", run)
    monkeypatch.setattr(prog, "run_gate", lambda *a, **k: {
        "verdict": "unhealthy", "causes": [{"id": "engine_down"}]})
    monkeypatch.setattr(prog, "take", lambda *a, **k: dict(Host.snapshot))
    Host.snapshot = {"healthy": True, "engines_sleeping": 0}
    Host.calls = calls
    return Host


@pytest.mark.parametrize("mode", ["always", "when_degraded"])
@pytest.mark.parametrize("active", ["inactive", "deactivating"])
def test_a_stopped_unit_is_never_started(host, capsys, mode, active):
    host.state = {"ActiveState": active, "Result": "success", "NRestarts": 0}
    assert prog.restart_one({"mode": mode, "causes": ["engine_down"]}, INST) == "skipped"
    assert host.calls == []
    assert "never starts a stopped unit" in capsys.readouterr().out


@pytest.mark.parametrize("mode", ["always", "when_degraded"])
def test_a_unit_still_within_its_health_timeout_is_left_to_load(host, capsys, mode):
    started = time.monotonic() - 120   # two minutes ago
    host.state = {"ActiveState": "active", "Result": "success", "NRestarts": 0,
                  "ActiveEnterTimestampMonotonic": str(int(started * 1e6))}
    cfg = {"mode": mode, "causes": ["engine_down"], "health_timeout": 900}
    assert prog.restart_one(cfg, INST) == "skipped"
    assert host.calls == []
    assert "started 120s ago, within its health timeout (900s)" in capsys.readouterr().out


@pytest.mark.parametrize("mode", ["always", "when_degraded"])
def test_a_sleeping_engine_is_never_restarted(host, capsys, mode):
    host.snapshot = {"healthy": True, "engines_sleeping": 1}
    assert prog.restart_one({"mode": mode, "causes": ["engine_down"]}, INST) == "skipped"
    assert host.calls == []
    assert "never restarts a sleeping engine" in capsys.readouterr().out


def test_a_failed_or_long_running_sick_unit_is_restarted(host, monkeypatch):
    """Past the health timeout (or failed, not stopped), the guard goes on to restart."""
    monkeypatch.setattr(prog, "_wait_idle", lambda inst, timeout: {})
    for state in ({"ActiveState": "failed", "Result": "exit-code"},
                  {"ActiveState": "active", "Result": "success",
                   "ActiveEnterTimestampMonotonic": str(int((time.monotonic() - 3600) * 1e6))}):
        host.state = dict(state, NRestarts=0)
        with pytest.raises(AssertionError, match="systemctl', 'restart'"):
            prog.restart_one({"mode": "when_degraded", "causes": ["engine_down"], "health_timeout": 900}, INST)


@pytest.mark.parametrize("value, expected", [("0", None), ("", None), ("junk", None), ("5000000", 5.0)])
def test_seconds_since_start(value, expected):
    assert prog.seconds_since_start({"ActiveEnterTimestampMonotonic": value}, now=10.0) == (
        None if expected is None else 10.0 - expected)


def _leaking_history(path, pid=4242, hours=8, start=2 * 1024 ** 3, per_hour=128 * 1024 ** 2):
    """A monitor history of one process whose memory grows steadily (one sample every 30 min)."""
    import json
    t0 = time.time() - hours * 3600
    with open(path, "w") as f:
        for i in range(2 * hours + 1):
            line = {"instance": "main", "time": t0 + i * 1800, "verdict": "healthy",
                    "unit_memory": {"rss_bytes": int(start + per_hour * i / 2), "processes": 2,
                                    "main_pid": pid}}
            f.write(json.dumps(line) + "\n")


def _monitor_config(tmp_path, history):
    import json
    path = tmp_path / "monitor.json"
    path.write_text(json.dumps({"history": str(history), "memory": {"ratio": 0.2}}))
    return str(path)


def test_when_degraded_restarts_for_memory_growth_on_roots_own_readings(host, monkeypatch, capsys, tmp_path):
    """A healthy gate, but root's own memory record (the watchdog's) shows a leak: the guard
    restarts (and says why); the thresholds are the monitor's."""
    monkeypatch.setattr(prog, "_wait_idle", lambda inst, timeout: {})
    monkeypatch.setattr(prog, "run_gate", lambda *a, **k: {"verdict": "healthy", "causes": []})
    monkeypatch.setattr(prog, "own_memory_point", lambda inst: None)
    _leaking_history(tmp_path / "memory.jsonl")
    if os.geteuid() != 0:
        pytest.fail("the guard's unit tests run as root (the record must be root's)")
    cfg = {"mode": "when_degraded", "causes": ["engine_down", "memory_growth"], "memory_record": str(tmp_path / "memory.jsonl"),
           "monitor_config": _monitor_config(tmp_path, tmp_path / "absent-history.jsonl")}
    with pytest.raises(AssertionError, match="systemctl', 'restart'"):
        prog.restart_one(cfg, INST)
    out = capsys.readouterr().out
    assert "restarting: memory_growth found, which a restart cures" in out
    assert '"growth_ratio": 0.5' in out


def test_a_forged_monitor_history_never_makes_the_guard_restart(host, monkeypatch, capsys, tmp_path):
    """Forty lines of growth written into the monitor user's history: root's own record has
    none of it, so there is nothing to restart for; a record another user may write is not
    root's own either."""
    monkeypatch.setattr(prog, "run_gate", lambda *a, **k: {"verdict": "healthy", "causes": []})
    monkeypatch.setattr(prog, "own_memory_point", lambda inst: None)
    _leaking_history(tmp_path / "history.jsonl", hours=20)
    cfg = {"mode": "when_degraded", "causes": ["memory_growth"], "memory_record": str(tmp_path / "memory.jsonl"),
           "monitor_config": _monitor_config(tmp_path, tmp_path / "history.jsonl")}
    assert prog.restart_one(cfg, INST) == "skipped"
    assert host.calls == []
    assert "judged on root's own memory readings" in capsys.readouterr().out
    _leaking_history(tmp_path / "memory.jsonl")
    os.chmod(tmp_path / "memory.jsonl", 0o666)
    assert prog.restart_one(cfg, INST) == "skipped" and host.calls == []


def test_memory_growth_restarts_only_when_it_is_among_the_causes(host, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(prog, "run_gate", lambda *a, **k: {"verdict": "healthy", "causes": []})
    monkeypatch.setattr(prog, "own_memory_point", lambda inst: None)
    _leaking_history(tmp_path / "memory.jsonl")
    cfg = {"mode": "when_degraded", "causes": ["engine_down"], "memory_record": str(tmp_path / "memory.jsonl"),
           "monitor_config": _monitor_config(tmp_path, tmp_path / "history.jsonl")}
    assert prog.restart_one(cfg, INST) == "skipped"
    assert "causes ['memory_growth']; a restart cures only engine_down" in capsys.readouterr().out
    assert host.calls == []


def test_no_monitor_no_memory_growth(host, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(prog, "run_gate", lambda *a, **k: {"verdict": "healthy", "causes": []})
    cfg = {"mode": "when_degraded", "causes": ["memory_growth"],
           "monitor_config": str(tmp_path / "absent.json")}
    assert prog.restart_one(cfg, INST) == "skipped"
    assert host.calls == []


def test_unit_memory_sums_the_main_process_and_its_descendants(tmp_path):
    procs = {   # pid: (ppid, VmRSS kB or None for an exited process)
        100: (1, 1000), 101: (100, 2500), 102: (101, 300), 103: (100, None), 200: (1, 9999)}
    for pid, (ppid, kb) in procs.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text("%d (VLLM::Engine) Core) S %d 1 1 0\n" % (pid, ppid))
        if kb is not None:
            (tmp_path / str(pid) / "status").write_text(
                "Name:\tpython\nVmPeak:\t 9 kB\nVmRSS:\t %d kB\nThreads:\t4\n" % kb)
    (tmp_path / "self").mkdir()
    (tmp_path / "300").mkdir()   # no stat: exited between the listing and the read
    assert prog.unit_memory({"MainPID": "100"}, proc=str(tmp_path)) == {
        "rss_bytes": 3800 * 1024, "processes": 3, "main_pid": 100}
    assert prog.unit_memory({"MainPID": "0"}, proc=str(tmp_path)) is None
    assert prog.unit_memory({"MainPID": "junk"}, proc=str(tmp_path)) is None
    assert prog.unit_memory({"MainPID": "999"}, proc=str(tmp_path)) is None


def test_unit_memory_adds_the_gpu_memory_nvml_lists_for_those_processes(tmp_path):
    from ansible_collections.kvfleet.vllm.tests.unit.plugins.fake_nvml import FakeNvml, Memory, Proc, Util
    for pid, ppid in ((100, 1), (101, 100)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text("%d (python) S %d 1 1 0\n" % (pid, ppid))
        (tmp_path / str(pid) / "status").write_text("VmRSS:\t 1000 kB\n")
    gpu = dict(name="g", uuid="GPU-x", mem=Memory(10, 5, 5), util=Util(1, 1), cc=(9, 0), pm=1, graphics=[])
    nvml = FakeNvml(gpus=[dict(gpu, compute=[Proc(101, 70 * 1024 ** 3), Proc(555, 1)])])
    assert prog.unit_memory({"MainPID": "100"}, proc=str(tmp_path), nvml=nvml) == {
        "rss_bytes": 2000 * 1024, "processes": 2, "main_pid": 100, "gpu_bytes": 70 * 1024 ** 3}
    # NVML without a driver (a CPU host): null, not 0
    from ansible_collections.kvfleet.vllm.tests.unit.plugins.fake_nvml import NVMLError_DriverNotLoaded
    out = prog.unit_memory({"MainPID": "100"}, proc=str(tmp_path), nvml=FakeNvml(init_error=NVMLError_DriverNotLoaded()))
    assert out["gpu_bytes"] is None

    class Odd(FakeNvml):   # a pynvml copy that breaks in a way NVML's own errors do not cover
        def nvmlDeviceGetCount(self):
            raise OSError("odd")
    out = prog.unit_memory({"MainPID": "100"}, proc=str(tmp_path), nvml=Odd())
    assert out["gpu_bytes"] is None and out["rss_bytes"] == 2000 * 1024


def test_load_nvml_finds_the_copy_in_the_vllm_venv(tmp_path, monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_system_pynvml(name, *args, **kwargs):
        if name == "pynvml":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_system_pynvml)
    third = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "vllm" / "third_party"
    third.mkdir(parents=True)
    # as nvidia-ml-py's pynvml does while it loads: it looks itself up in sys.modules
    (third / "pynvml.py").write_text("import sys\nclass NVMLError(Exception):\n    pass\n"
                                     "WHERE = sys.modules[__name__] and 'venv'\n")
    monkeypatch.setattr(prog, "_NVML", {})
    assert prog.load_nvml(str(tmp_path / "venv")).WHERE == "venv"
    assert prog.load_nvml(None).WHERE == "venv"          # once per run
    monkeypatch.setattr(prog, "_NVML", {})
    assert prog.load_nvml(str(tmp_path / "absent")) is None
    monkeypatch.setattr(prog, "_NVML", {})
    (third / "pynvml.py").write_text("raise RuntimeError('broken copy')\n")
    assert prog.load_nvml(str(tmp_path / "venv")) is None
    # the server role's NVML venv beside the vLLM venv (what gpu_info reads with)
    nvml = tmp_path / "kvfleet-nvml-13.615.71" / "lib" / "python3.11" / "site-packages"
    nvml.mkdir(parents=True)
    (nvml / "pynvml.py").write_text("WHERE = 'nvml venv'\n")
    monkeypatch.setattr(prog, "_NVML", {})
    assert prog.load_nvml(str(tmp_path / "venv")).WHERE == "nvml venv"


def test_unit_memory_of_this_process():
    """The real /proc: this test process alone (no children), a plausible size."""
    import os
    found = prog.unit_memory({"MainPID": str(os.getpid())})
    assert found["main_pid"] == os.getpid() and found["processes"] >= 1
    assert 10 * 1024 ** 2 < found["rss_bytes"] < 64 * 1024 ** 3


def _group_record(tmp_path, head_local, workers):
    """A deployment record as the server role writes it for a serving group's members."""
    import json
    key = "127.0.0.1:13345"
    size = head_local + sum(workers)
    record = {"current": {
        "venv": "/opt/vllm/venv",
        "instances": [{"name": "g0", "unit": "vllm-g0.service", "url": "http://127.0.0.1:8100",
                       "drain_seconds": 20,
                       "group": {"key": key, "role": "head", "size": size + 1 if not workers else size,
                                 "size_local": head_local}}],
        "workers": [{"name": "g%d" % i, "unit": "vllm-g%d.service" % i, "url": None,
                     "group": {"key": key, "role": "worker", "size": size, "size_local": n}}
                    for i, n in enumerate(workers, 1)]
        # a worker of another group on the same host is not this head's
        + [{"name": "x1", "unit": "vllm-x1.service", "url": None,
            "group": {"key": "10.0.0.9:1", "role": "worker", "size": 2, "size_local": 1}}]}}
    path = tmp_path / "record.json"
    path.write_text(json.dumps(record))
    return {"record": str(path)}


def test_a_heads_workers_on_the_host_are_read_with_it(tmp_path):
    head = prog.load_instances(_group_record(tmp_path, 1, [1, 2]))[0]
    assert head["group_workers"] == ["vllm-g1.service", "vllm-g2.service"]
    assert head["group_spans_hosts"] is False
    # engines elsewhere: the group spans hosts
    alone = prog.load_instances(_group_record(tmp_path, 1, []))[0]
    assert (alone["group_workers"], alone["group_spans_hosts"]) == ([], True)


def test_a_group_on_one_host_restarts_as_one_unit_head_stopped_first(tmp_path, host, monkeypatch, capsys):
    head = prog.load_instances(_group_record(tmp_path, 1, [1]))[0]
    monkeypatch.setattr(prog, "_wait_idle", lambda inst, timeout: {})
    monkeypatch.setattr(prog, "wait_healthy", lambda waiter: 0)
    done = []
    monkeypatch.setattr(prog.subprocess, "run", lambda argv, **_k: done.append(argv) or
                        prog.subprocess.CompletedProcess(argv, 0, "", ""))
    assert prog.restart_one({"mode": "always"}, head) == "restarted"
    assert done == [["systemctl", "stop", "vllm-g0.service"], ["systemctl", "stop", "vllm-g1.service"],
                    ["systemctl", "start", "vllm-g1.service"], ["systemctl", "start", "vllm-g0.service"]]
    assert "restarted with its serving group's workers vllm-g1.service" in capsys.readouterr().out


@pytest.mark.parametrize("mode", ["always", "when_degraded", "watchdog"])
def test_a_head_whose_workers_run_elsewhere_is_never_restarted_alone(tmp_path, host, capsys, mode):
    head = prog.load_instances(_group_record(tmp_path, 1, []))[0]
    assert prog.restart_one({"mode": mode, "causes": ["engine_down"]}, head) == "skipped"
    assert host.calls == []
    assert "restart the group as one unit with kvfleet.vllm.rolling_restart" in capsys.readouterr().out


def test_when_degraded_reads_a_group_heads_links_and_restarts_the_group_on_the_host(tmp_path, host, monkeypatch, capsys):
    """A head whose worker on the same host died: the gate's samples carry the head's links
    (head_links, read for the head's unit and port), group_member_lost is among the causes, and
    the guard restarts head and worker as one unit."""
    head = prog.load_instances(_group_record(tmp_path, 1, [1]))[0]
    read = []

    def links(show, unit, port, group, local):
        read.append((unit, port, group["role"], local))
        return {"group_links": {"links": 0, "remote_engines": 1, "by_address": {}}}

    def gate(url, *args, **kwargs):
        snap = kwargs["observe"]()
        return {"verdict": "unhealthy", "causes": [{"id": "group_member_lost"}] if snap["group_links"]["links"] < 4 else []}

    monkeypatch.setattr(prog, "head_links", links)
    monkeypatch.setattr(prog, "run_gate", gate)
    monkeypatch.setattr(prog, "_wait_idle", lambda inst, timeout: {})
    monkeypatch.setattr(prog, "wait_healthy", lambda waiter: 0)
    done = []
    monkeypatch.setattr(prog.subprocess, "run", lambda argv, **_k: done.append(argv) or
                        prog.subprocess.CompletedProcess(argv, 0, "", ""))
    cfg = {"mode": "when_degraded", "causes": ["group_member_lost"], "monitor_config": str(tmp_path / "absent.json")}
    assert prog.restart_one(cfg, head) == "restarted"
    # the head's engine and its worker's on this host are the group's local ones
    assert read == [("vllm-g0.service", None, "head", 2)]
    assert done[0] == ["systemctl", "stop", "vllm-g0.service"] and done[-1] == ["systemctl", "start", "vllm-g0.service"]
    assert "restarting: group_member_lost found" in capsys.readouterr().out


@pytest.mark.parametrize("kind", ["symlink", "fifo", "device", "too_big"])
def test_root_reads_only_a_regular_file_and_never_more_than_the_cap(tmp_path, kind):
    """_read_history runs as root on a path the monitor's user controls: a link is not followed,
    a FIFO is not opened for reading (it would hang), a device is refused (/dev/zero raised
    MemoryError), and a big file is read only up to the cap."""
    import json
    path = tmp_path / "history.jsonl"
    line = json.dumps({"instance": "main", "time": 1.0}) + "\n"
    if kind == "symlink":
        (tmp_path / "real.jsonl").write_text(line)
        os.symlink(tmp_path / "real.jsonl", path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        os.symlink("/dev/zero", tmp_path / "zero")
        path = "/dev/zero"
    else:
        path.write_text(line * 1000)
    t0 = time.time()
    got = prog._read_history(str(path), limit_bytes=len(line) * 10)
    assert time.time() - t0 < 5
    if kind == "too_big":
        assert 9 <= len(got) <= 10   # the cap's lines, the first one cut
    else:
        assert got == []


def test_the_guard_and_the_watchdog_share_roots_memory_record():
    """The guard reads LAYOUT['watchdog_memory']; the watchdog writes memory.jsonl beside its
    state (the monitor role's __monitor_watchdog_state)."""
    import yaml
    from ansible_collections.kvfleet.vllm.plugins.module_utils._layout import LAYOUT
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "monitor", "vars", "main.yml")) as f:
        state = yaml.safe_load(f)["__monitor_watchdog_state"]
    assert os.path.join(os.path.dirname(state), "memory.jsonl") == LAYOUT["watchdog_memory"]
