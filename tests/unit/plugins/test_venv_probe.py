"""roles/server/files/venv_probe.py: when a venv counts as installed, and where free space is read.

A failed install must never be used as if complete; an install made before the stamp existed
must not be installed again."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils._layout import LAYOUT

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
SCRIPT = os.path.join(ROOT, "roles", "server", "files", "venv_probe.py")

_spec = importlib.util.spec_from_file_location("venv_probe", SCRIPT)
vp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vp)

UNIT_GLOB = LAYOUT["unit_glob"]
NO_UNITS = "/nonexistent/systemd"


@pytest.mark.parametrize("exists, stamp, installing, version, state", [
    (False, None, False, None, "absent"),
    (False, None, True, None, "absent"),            # marker alone: pip had not created the venv yet
    (True, "0.32.0", False, None, "complete"),
    (True, "0.32.0", True, None, "complete"),       # stopped between the stamp and the marker's removal
    (True, "0.31.0", False, "0.32.0", "broken"),    # a stamp for another version
    (True, None, True, "0.32.0", "broken"),         # pip done, the removals or the check failed
    (True, None, False, None, "broken"),            # no python or no package: pip failed half-way
    (True, None, False, "0.31.1", "broken"),
    (True, None, False, "0.32.0", "adopt"),         # installed before the stamp existed
])
def test_venv_state(exists, stamp, installing, version, state):
    got, why = vp.venv_state(exists, stamp, installing, version, "0.32.0")
    assert got == state and why


def _fake_venv(tmp_path, version=None, stamp=None, python=True):
    """A venv whose bin/python prints `version` for the package (or fails)."""
    venv = tmp_path / "venvs" / "vllm-0.32.0"
    (venv / "bin").mkdir(parents=True)
    if python:
        body = "print(%r)" % version if version else "raise SystemExit(1)"
        py = venv / "bin" / "python"
        py.write_text("#!%s\n%s\n" % (sys.executable, body))
        py.chmod(0o755)
    if stamp:
        (venv / vp.STAMP).write_text(stamp + "\n")
    return str(venv)


def test_probe_adopts_an_install_from_before_the_stamp(tmp_path):
    venv = _fake_venv(tmp_path, version="0.32.0")
    assert vp.probe(venv, "vllm", "0.32.0", [], NO_UNITS, UNIT_GLOB)["state"] == "adopt"


def test_probe_trusts_the_stamp_without_running_python(tmp_path):
    venv = _fake_venv(tmp_path, stamp="0.32.0", python=False)
    got = vp.probe(venv, "vllm", "0.32.0", [], NO_UNITS, UNIT_GLOB)
    assert (got["state"], got["installing"]) == ("complete", False)


def test_probe_never_adopts_what_an_unfinished_install_left(tmp_path):
    venv = _fake_venv(tmp_path, version="0.32.0")
    open(venv + vp.INSTALLING, "w").close()
    got = vp.probe(venv, "vllm", "0.32.0", [], NO_UNITS, UNIT_GLOB)
    assert (got["state"], got["installing"]) == ("broken", True)


@pytest.mark.parametrize("python", [True, False])
def test_probe_a_venv_whose_version_cannot_be_read_is_broken(tmp_path, python):
    venv = _fake_venv(tmp_path, python=python)
    assert vp.probe(venv, "vllm", "0.32.0", [], NO_UNITS, UNIT_GLOB)["state"] == "broken"


def test_probe_no_venv(tmp_path):
    assert vp.probe(str(tmp_path / "nothing"), "vllm", "0.32.0", [], NO_UNITS, UNIT_GLOB)["state"] == "absent"


def test_disk_of_a_folder_not_there_yet_is_its_nearest_parent(tmp_path):
    got = vp.disk(str(tmp_path / "a" / "b" / "c"))
    st = os.statvfs(str(tmp_path))
    assert got["at"] == str(tmp_path) and got["path"] == str(tmp_path / "a" / "b" / "c")
    assert got["dev"] == os.stat(str(tmp_path)).st_dev
    assert got["free"] > 0 and abs(got["free"] - st.f_bavail * st.f_frsize) < 1024 ** 3


def test_disk_under_a_file_is_measured_at_the_file(tmp_path):
    (tmp_path / "f").write_text("x")
    assert vp.disk(str(tmp_path / "f" / "sub"))["at"] == str(tmp_path / "f")


def test_the_script_prints_one_json_object_and_changes_nothing(tmp_path):
    venv = _fake_venv(tmp_path, stamp="0.32.0", python=False)
    before = sorted(os.listdir(os.path.dirname(venv)))
    out = subprocess.run([sys.executable, SCRIPT, venv, "vllm", "0.32.0", str(tmp_path / "units"), UNIT_GLOB,
                          str(tmp_path), str(tmp_path / "new")],
                         check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout
    got = json.loads(out)
    assert got["state"] == "complete" and [d["path"] for d in got["disk"]] == [str(tmp_path), str(tmp_path / "new")]
    assert sorted(os.listdir(os.path.dirname(venv))) == before and not os.path.exists(str(tmp_path / "new"))


@pytest.mark.parametrize("args", [["/x"], ["/x", "vllm", "0.32.0"], ["/x", "vllm", "0.32.0", "/units", "vllm.service"]])
def test_the_script_needs_its_arguments(args):
    assert subprocess.run([sys.executable, SCRIPT] + args, stderr=subprocess.PIPE, check=False).returncode == 2


def test_the_collections_vllm_units_are_listed_for_the_plan(tmp_path):
    """The plan compares them with the instances the host should have: a unit left from an
    instance the host no longer has (a serving group's Ray head node) makes it not converged."""
    units = tmp_path / "systemd"
    units.mkdir()
    for name in ("vllm-main.service", "vllm-ray.service", "sshd.service", "vllm-x.service.d", "vllm-.service",
                 "vllm-Main.service"):
        (units / name).mkdir() if name.endswith(".d") else (units / name).write_text("")
    assert vp.units(str(units), UNIT_GLOB) == ["vllm-main.service", "vllm-ray.service"]
    assert vp.units(str(tmp_path / "none"), UNIT_GLOB) == []
