"""The server role's GPU preflight through ansible-playbook: gpu_info reads a fake NVML (the pynvml
module replaced by tests/unit/plugins/fake_nvml.py's FakeNvml on the module's PYTHONPATH), and
vllm_server_gpu_health refuses, warns or ignores an unhealthy GPU before anything changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils import _nvml

HERE = os.path.dirname(os.path.abspath(__file__))
# where Python imports the collection from (ansible_collections/kvfleet/vllm, perhaps through a
# link): ansible-playbook must load the same copy
COLLECTION = os.path.abspath(os.path.join(os.path.dirname(_nvml.__file__), "..", ".."))
COLLECTIONS_PATH = os.path.abspath(os.path.join(COLLECTION, "..", "..", ".."))

FAKE_PYNVML = textwrap.dedent("""
    import importlib.util
    import sys
    spec = importlib.util.spec_from_file_location("kvfleet_fake_nvml", {fake!r})
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    # GPU 0 healthy, GPU 1 a pending row remap (unhealthy): the module replaces itself
    sys.modules[__name__] = fake.FakeNvml(gpus=[fake.healthy_gpu(uuid="GPU-a"),
                                               fake.healthy_gpu(uuid="GPU-b", remapped=(0, 1, 1, 0))])
""")

PLAYBOOK = textwrap.dedent("""
    - hosts: localhost
      gather_facts: false
      tasks:
        - name: The server role's GPU checks
          ansible.builtin.include_role:
            name: kvfleet.vllm.server
            tasks_from: preflight_gpu
          vars:
            _server_instances: [{name: main, cuda_visible_devices: "1", gpu_memory_utilization: 0.5}]
        - name: Reached only when the checks let the host through
          ansible.builtin.debug:
            msg: PREFLIGHT_PASSED
""")


@pytest.fixture(scope="module")
def play(tmp_path_factory):
    if not os.path.isdir(os.path.join(COLLECTIONS_PATH, "ansible_collections", "kvfleet", "vllm")):
        pytest.fail("the collection is not at ansible_collections/kvfleet/vllm above %s" % COLLECTION)
    work = tmp_path_factory.mktemp("gpu-role")
    fake_dir = work / "fake"
    fake_dir.mkdir()
    (fake_dir / "pynvml.py").write_text(FAKE_PYNVML.format(fake=os.path.join(HERE, "fake_nvml.py")))
    (work / "play.yml").write_text(PLAYBOOK)

    def run(policy):
        # the fake first; what the test runner put on the path (ansible-test's ansible) after it
        path = os.pathsep.join([str(fake_dir)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS_PATH, PYTHONPATH=path,
                   ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
                   ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", ANSIBLE_NOCOLOR="1")
        # the CLI of the ansible this test imports (ansible-test units has no ansible-playbook script)
        argv = [sys.executable, "-m", "ansible.cli.playbook", "-i", "localhost,", "-c", "local",
                "-e", "ansible_python_interpreter=%s" % sys.executable,
                # gpu_info with this Python (the fake on its path), not the role's NVML venv; the
                # fake's driver supports CUDA 12.4 (test_gpu_preflight_role.py checks the CUDA)
                "-e", json.dumps({"vllm_server_gpu_health": policy, "vllm_server_nvml_python": sys.executable,
                                  "vllm_server_cuda_version": "12.4"}), str(work / "play.yml")]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
        return proc.returncode, proc.stdout + proc.stderr
    return run


def test_refuse_names_the_gpu_and_the_reason_and_stops(play):
    rc, out = play("refuse")
    assert rc != 0 and "PREFLIGHT_PASSED" not in out, out[-3000:]
    assert "vllm_server_gpu_health is refuse and localhost has an unhealthy GPU" in out, out[-3000:]
    assert "GPU 1 (NVIDIA H100 80GB HBM3, GPU-b) is unhealthy: row_remap_pending" in out


def test_warn_goes_on_saying_why_and_ignore_does_not_look(play):
    rc, out = play("warn")
    assert rc == 0 and "PREFLIGHT_PASSED" in out, out[-3000:]
    assert "WARNING: localhost: GPU 1 (NVIDIA H100 80GB HBM3, GPU-b) is unhealthy: row_remap_pending" in out
    rc, out = play("ignore")
    assert rc == 0 and "PREFLIGHT_PASSED" in out and "row_remap_pending" not in out, out[-3000:]
