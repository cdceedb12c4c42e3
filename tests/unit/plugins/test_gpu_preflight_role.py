"""The server role's GPU preflight through ansible-playbook (check mode, as a deploy's first look
at a host), on a stand-in NVML: tests/support/fake_pynvml, driven by a JSON file. gpu_info runs
with vllm_server_nvml_python, here a wrapper that puts the fake on its path: nothing else sees it,
so this also shows that gpu_info runs with the NVML Python and not the host's.

Healthy passes; an unhealthy GPU, a driver too old for the wheel's CUDA, and NVML that cannot be
loaded on a host with /dev/nvidia0 are refused with the reason; warn lets them through with a
warning, ignore does not look; check mode on a host without the NVML venv says so."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap

import pytest
import yaml

from ansible_collections.kvfleet.vllm.plugins.module_utils import _nvml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
FAKE_DIR = os.path.join(ROOT, "tests", "support", "fake_pynvml")
COLLECTION = os.path.abspath(os.path.join(os.path.dirname(_nvml.__file__), "..", ".."))
COLLECTIONS_PATH = os.path.abspath(os.path.join(COLLECTION, "..", "..", ".."))

PLAYBOOK = textwrap.dedent("""
    - hosts: gpu
      gather_facts: false
      tasks:
        - name: The server role's GPU checks
          ansible.builtin.include_role:
            name: kvfleet.vllm.server
            tasks_from: preflight_gpu
          vars:
            _server_instances: [{name: main, cuda_visible_devices: "0", gpu_memory_utilization: 0.5}]
        - name: Reached only when the checks let the host through
          ansible.builtin.debug:
            msg: PREFLIGHT_PASSED
""")

HEALTHY = {"driver_version": "580.65.06", "cuda_driver_version": 13000, "gpus": [{"preset": "h100"}]}


def _python(path, line):
    """An executable /bin/sh wrapper at path that runs a Python as `line` says."""
    path.write_text("#!/bin/sh\n%s\n" % line)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture(scope="module")
def play(tmp_path_factory):
    if not os.path.isdir(os.path.join(COLLECTIONS_PATH, "ansible_collections", "kvfleet", "vllm")):
        pytest.fail("the collection is not at ansible_collections/kvfleet/vllm above %s" % COLLECTION)
    work = tmp_path_factory.mktemp("gpu-preflight")
    (work / "play.yml").write_text(PLAYBOOK)
    # the NVML Python: this Python with the fake first on its path
    wrapper = _python(work / "nvml-python", "PYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH} exec %s \"$@\"" % (FAKE_DIR, sys.executable))
    # the host's Python (everything else the play runs) does not see the fake
    (work / "hosts").write_text("[gpu]\nlocalhost ansible_connection=local ansible_python_interpreter=%s\n" % sys.executable)
    devs = {"with_node": work / "dev-with-node", "empty": work / "dev-empty"}
    for path in devs.values():
        path.mkdir()
    (devs["with_node"] / "nvidia0").write_text("")
    (devs["with_node"] / "nvidiactl").write_text("")

    def run(nvml, policy="refuse", check=True, dev="empty", **extra):
        config = work / ("nvml-%d.json" % len(list(work.glob("nvml-*.json"))))
        config.write_text(json.dumps(nvml))
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS_PATH, KVFLEET_FAKE_NVML=str(config),
                   ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
                   ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", ANSIBLE_NOCOLOR="1")
        variables = dict({"vllm_server_gpu_health": policy, "vllm_server_nvml_python": str(wrapper),
                          "__server_nvidia_dev_dir": str(devs[dev])}, **extra)
        argv = [sys.executable, "-m", "ansible.cli.playbook", "-i", str(work / "hosts"),
                "-e", json.dumps(variables), str(work / "play.yml")] + (["--check"] if check else [])
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
        return proc.returncode, proc.stdout + proc.stderr
    run.work = work
    return run


def _passed(rc, out):
    return rc == 0 and "PREFLIGHT_PASSED" in out


def test_a_healthy_gpu_with_a_new_enough_driver_passes(play):
    rc, out = play(HEALTHY)
    assert _passed(rc, out), out[-3000:]
    assert "WARNING" not in out, out[-3000:]


def test_an_unhealthy_gpu_is_refused_naming_it_and_the_reason(play):
    rc, out = play(dict(HEALTHY, gpus=[{"preset": "h100", "uuid": "GPU-sick", "remapped_rows": [0, 1, 1, 0]}]))
    assert rc != 0 and "PREFLIGHT_PASSED" not in out, out[-3000:]
    assert "GPU 0 (NVIDIA H100 80GB HBM3, GPU-sick) is unhealthy: row_remap_pending" in out, out[-3000:]


def test_a_driver_too_old_for_the_wheels_cuda_is_refused_and_warn_lets_it_through(play):
    old = dict(HEALTHY, driver_version="550.54.15", cuda_driver_version=12040)
    rc, out = play(old)
    assert rc != 0 and "PREFLIGHT_PASSED" not in out, out[-3000:]
    for text in ("vllm_server_gpu_health is refuse", "driver 550.54.15 supports CUDA 12.4",
                 "CUDA 13.0", "the PyPI wheel of vLLM 0.32.0", "driver 580.65.06 or newer"):
        assert text in out, (text, out[-3000:])
    rc, out = play(old, policy="warn")
    assert _passed(rc, out) and "WARNING: localhost: the driver 550.54.15 supports CUDA 12.4" in out, out[-3000:]
    # a wheel built for the driver's CUDA (vllm_server_cuda_version) passes
    rc, out = play(old, vllm_server_cuda_version="12.4")
    assert _passed(rc, out), out[-3000:]


def test_nvml_that_cannot_be_loaded_is_refused_though_dev_nvidia0_is_there(play):
    rc, out = play({"nvml": "library_not_found"}, dev="with_node")
    assert rc != 0 and "PREFLIGHT_PASSED" not in out, out[-3000:]
    for text in ("cannot be read", "NVML Shared Library Not Found", "/dev-with-node/nvidia0",
                 "Install and load the NVIDIA driver", "vllm_server_gpu_health: warn"):
        assert text in out, (text, out[-3000:])
    rc, out = play({"nvml": "driver_not_loaded"})
    assert rc != 0 and "Driver Not Loaded" in out and "No NVIDIA device node" in out, out[-3000:]


def test_warn_lets_unreadable_nvml_through_saying_so_and_ignore_does_not_read(play):
    rc, out = play({"nvml": "no_permission"}, policy="warn")
    assert _passed(rc, out), out[-3000:]
    assert "WARNING: localhost: no GPU check ran" in out and "Insufficient Permissions" in out, out[-3000:]
    rc, out = play({"nvml": "no_permission"}, policy="ignore")
    assert _passed(rc, out) and "Insufficient Permissions" not in out, out[-3000:]
    assert "Read GPUs through NVML" in out and "skipping: [localhost]" in out


def test_a_python_without_nvidia_ml_py_is_refused_naming_it(play):
    # this Python without its site-packages: the test environment may well have nvidia-ml-py
    # (ansible-test units installs it to compare the stand-in with it)
    bare = _python(play.work / "bare-python", "exec %s -S \"$@\"" % sys.executable)
    probe = subprocess.run([str(bare), "-c", "import pynvml"], capture_output=True, check=False)
    assert probe.returncode != 0, "pynvml is importable without site-packages: %s" % sys.executable
    rc, out = play(HEALTHY, vllm_server_nvml_python=str(bare))
    assert rc != 0 and "the pynvml module is not installed in %s" % sys.executable in out, out[-3000:]


def test_check_mode_without_the_nvml_venv_says_the_gpu_checks_did_not_run(play):
    # the role's own venv (vllm_server_nvml_python empty) under a folder that does not exist:
    # in check mode pip creates nothing, so nothing can read NVML
    base = play.work / "opt-vllm"
    rc, out = play(HEALTHY, vllm_server_nvml_python="", vllm_server_base_dir=str(base))
    assert _passed(rc, out), out[-3000:]
    assert "check mode: the GPU checks" in out and "kvfleet-nvml-" in out, out[-3000:]
    assert not base.exists()


def test_cpu_hosts_never_reach_the_gpu_checks():
    with open(os.path.join(ROOT, "roles", "server", "tasks", "preflight.yml"), encoding="utf-8") as f:
        tasks = yaml.safe_load(f)
    gpu = [t for t in tasks if t.get("ansible.builtin.include_tasks") == "preflight_gpu.yml"]
    assert len(gpu) == 1 and gpu[0]["when"] == "vllm_server_device == 'cuda'"
    with open(os.path.join(ROOT, "roles", "server", "tasks", "install.yml"), encoding="utf-8") as f:
        tasks = yaml.safe_load(f)
    cuda = [t for t in tasks if t.get("ansible.builtin.include_tasks") == "cuda_driver.yml"]
    assert len(cuda) == 1 and cuda[0]["when"].startswith("vllm_server_device == 'cuda' and")
