"""tests/support/fake_pynvml/pynvml.py against the real nvidia-ml-py: every public name the fake
defines exists in the real pynvml with the same kind (constants: ints of the same value;
functions: the same parameters; error classes: NVMLError subclasses with the same code and
text), and the real one is the release the server role pins (vllm_server_nvml_version). Then
the fake behind _nvml.collect, as gpu_info reads it."""

from __future__ import annotations

import glob
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from ansible_collections.kvfleet.vllm.plugins.module_utils._nvml import NvmlUnavailable, collect

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
FAKE = os.path.join(ROOT, "tests", "support", "fake_pynvml", "pynvml.py")


def _pin():
    with open(os.path.join(ROOT, "roles", "server", "defaults", "main.yml"), encoding="utf-8") as f:
        return yaml.safe_load(f)["vllm_server_nvml_version"]


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module   # the real one looks itself up in sys.modules while it loads
    spec.loader.exec_module(module)
    return module


def _real_path(tmp_dir):
    """pynvml.py of nvidia-ml-py: this Python's (tests/unit/requirements.txt), the tool venv's
    (tests/requirements-dev.txt), or else pip-installed here from the index."""
    spec = importlib.util.find_spec("pynvml")
    if spec and spec.origin and os.path.abspath(spec.origin) != os.path.abspath(FAKE):
        return spec.origin
    tools = os.environ.get("KVFLEET_TOOLS") or os.path.join(os.environ.get("KVFLEET_CACHE", "/var/tmp/kvfleet"), "tools")
    found = sorted(glob.glob(os.path.join(tools, "lib", "python3*", "site-packages", "pynvml.py")))
    if found:
        return found[0]
    target = os.path.join(tmp_dir, "site")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", target,
                           "nvidia-ml-py==%s" % _pin()], capture_output=True, text=True, check=False, timeout=300)
    if proc.returncode != 0:
        pytest.fail("the real nvidia-ml-py %s is needed (tests/unit/requirements.txt) and pip could not "
                    "install it: %s" % (_pin(), proc.stderr[-1000:]))
    return os.path.join(target, "pynvml.py")


@pytest.fixture(scope="module")
def real_and_fake(tmp_path_factory):
    path = _real_path(str(tmp_path_factory.mktemp("nvml")))
    version = [re.match(r"nvidia_ml_py-(.+)\.dist-info$", os.path.basename(d)).group(1)
               for d in glob.glob(os.path.join(os.path.dirname(path), "nvidia_ml_py-*.dist-info"))]
    return _load("kvfleet_real_pynvml", path), _load("kvfleet_fake_pynvml", FAKE), version


def test_the_real_one_is_the_pinned_release(real_and_fake):
    _real, _fake, version = real_and_fake
    assert version == [_pin()], "nvidia-ml-py %s found, the role pins %s" % (version, _pin())


def test_every_public_name_of_the_fake_is_the_real_ones_kind(real_and_fake):
    real, fake, _version = real_and_fake
    names = [n for n in vars(fake) if not n.startswith("_") and n != "annotations"]
    assert len(names) > 80
    for name in names:
        mine, theirs = getattr(fake, name), getattr(real, name, None)
        assert theirs is not None, "%s is not in the real pynvml" % name
        if isinstance(mine, int):
            assert isinstance(theirs, int) and not isinstance(theirs, bool) and theirs == mine, \
                "%s: %r here, %r in pynvml" % (name, mine, theirs)
        elif inspect.isclass(mine):
            assert inspect.isclass(theirs) and issubclass(theirs, Exception), name
            if name != "NVMLError":
                assert issubclass(theirs, real.NVMLError) and issubclass(mine, fake.NVMLError), name
                err_mine, err_theirs = mine(), theirs()
                assert err_mine.value == err_theirs.value, name
                assert str(err_mine) == str(err_theirs), name
        elif inspect.isfunction(mine):
            assert callable(theirs), name
            assert list(inspect.signature(mine).parameters) == list(inspect.signature(theirs).parameters), name
        else:
            pytest.fail("%s: %s is neither a constant, a class nor a function" % (name, type(mine).__name__))


def test_nvmlerror_of_a_code_becomes_its_subclass_as_in_the_real_one(real_and_fake):
    real, fake, _version = real_and_fake
    for code in (fake.NVML_ERROR_LIBRARY_NOT_FOUND, fake.NVML_ERROR_DRIVER_NOT_LOADED, fake.NVML_ERROR_NO_PERMISSION):
        mine, theirs = fake.NVMLError(code), real.NVMLError(code)
        assert mine.__class__.__name__ == theirs.__class__.__name__
        assert str(fake.NVMLError(code)) == str(real.NVMLError(code))


def _fake_with(tmp_path, monkeypatch, config):
    path = tmp_path / "nvml.json"
    path.write_text(json.dumps(config))
    monkeypatch.setenv("KVFLEET_FAKE_NVML", str(path))
    return _load("kvfleet_fake_pynvml_%d" % id(config), FAKE)


def test_collect_reads_the_fake_like_a_healthy_h100(tmp_path, monkeypatch):
    nvml = _fake_with(tmp_path, monkeypatch, {"driver_version": "580.65.06", "cuda_driver_version": 13000,
                                              "gpus": [{"preset": "h100", "processes": [{"pid": 7, "used_memory": 2 ** 30}]}]})
    facts = collect(nvml, xid_wait_ms=20)
    assert (facts["driver_version"], facts["cuda_driver_version"]) == ("580.65.06", "13.0")
    gpu = facts["gpus"][0]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu["compute_capability"] == "9.0"
    assert gpu["processes"] == [{"pid": 7, "used_memory": 2 ** 30, "types": ["compute"]}]
    assert gpu["health"]["verdict"] == "healthy" and len(gpu["health"]["nvlink"]) == 18
    assert gpu["health"]["xid"] == {"waited_ms": 20, "events": [], "unattributed": []}


def test_collect_reads_the_fakes_faults(tmp_path, monkeypatch):
    nvml = _fake_with(tmp_path, monkeypatch, {"gpus": [
        {"preset": "h100", "remapped_rows": [0, 1, 1, 0]},
        {"preset": "h100", "xids": [79]},
        {"name": "bare", "uuid": "GPU-x", "memory": {"total": 1, "free": 1, "used": 0}}]})
    facts = collect(nvml, xid_wait_ms=50)
    remap, xid, bare = facts["gpus"]
    assert [r["id"] for r in remap["health"]["reasons"]] == ["row_remap_pending"]
    assert xid["health"]["xid"]["events"] == [79] and xid["health"]["verdict"] == "unhealthy"
    assert bare["health"]["verdict"] is None and bare["utilization_gpu"] is None


@pytest.mark.parametrize("failure, text", [("library_not_found", "NVML Shared Library Not Found"),
                                           ("driver_not_loaded", "Driver Not Loaded"),
                                           ("no_permission", "Insufficient Permissions")])
def test_nvml_that_cannot_start_fails_as_the_real_one(tmp_path, monkeypatch, failure, text):
    nvml = _fake_with(tmp_path, monkeypatch, {"nvml": failure})
    with pytest.raises(NvmlUnavailable, match=text):
        collect(nvml)


def test_the_pin_is_one_release_everywhere():
    pins = {}
    for path in ("tests/requirements-dev.txt", "tests/unit/requirements.txt"):
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            pins[path] = re.search(r"^nvidia-ml-py==(\S+)$", f.read(), re.M).group(1)
    assert set(pins.values()) == {_pin()}, pins
