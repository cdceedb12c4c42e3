# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kvfleet-vllm: the collection's probe and diagnosis, as a command on managed hosts.

The roles ship this file with the collection's own module_utils (_prom, _vllm_metrics, _latency,
_probe, _diagnosis, _trends, _textfile, _nvml) next to it, so systemd units (restart guard, monitor,
health wait) use the same parser and rules as the modules. Standard library only.

  kvfleet-vllm wait-healthy --unit vllm-main.service --url http://127.0.0.1:8000 [--timeout 900]
  kvfleet-vllm gate --url URL [--samples 3] [--interval 2] [--max-num-seqs N]   (JSON on stdout)
                   [--gpus 0,1 [--venv DIR]]     (with those GPUs' NVML health)
  kvfleet-vllm restart-guard --config /etc/kvfleet/restart.json   (scheduled restart, drain-aware)
  kvfleet-vllm monitor --config /etc/kvfleet/monitor.json         (one monitor round: history + textfile)
  kvfleet-vllm trends --config /etc/kvfleet/monitor.json          (trends from the history, JSON)
  kvfleet-vllm watchdog --config /etc/kvfleet/watchdog.json       (after a monitor round: restart
                                                                  an instance whose cure persists)
The restart guard, the monitor and trends read the instances from the deployment record that the
configuration names (the server role writes it; one model of an instance, no copies).
  kvfleet-vllm warmup --url URL [--env-file /etc/vllm/main.env] [--engines N]
                                                                   (one short completion, JSON)
  kvfleet-vllm stale --unit vllm-main.service --file F ...          (process older than its files?)
  kvfleet-vllm start --spec '[{"unit": U, "files": [F, ...]}, ...]' [--enabled yes|no] [--reload]
                     [--remove-others CONFIG_DIR] [--check]
                                     (the server role's run step: remove the units of instances the
                                      host no longer has, clear a failed unit's start limit, enable
                                      and start each, and the stale check, in one call; JSON)
  kvfleet-vllm applied --unit vllm-main.service --file F            (its process serves F already: a
                                                                  LoRA adapter loaded at runtime)
  kvfleet-vllm converged [--record --spec JSON] < FINGERPRINT       (does the host hold what its last
                                                                  verified deploy left? JSON; the
                                                                  deploy's one round trip per host)
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import http.client
import json
import math
import os
import re
import shlex
import socket
import ssl
import stat
import subprocess
import sys
import time
from urllib.parse import unquote, urlsplit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "lib"))

from ansible_collections.kvfleet.vllm.plugins.module_utils._analysis_run import run_analysis  # noqa: E402
from ansible_collections.kvfleet.vllm.plugins.module_utils._converged import (  # noqa: E402
    differences as converged_differences, load as converged_load, state as converged_state)
from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import (  # noqa: E402
    add_rates, diagnose, memory_growth, since_last_down)
from ansible_collections.kvfleet.vllm.plugins.module_utils._dp_links import (  # noqa: E402
    head_links, local_engines, port_owner, process_tree)
from ansible_collections.kvfleet.vllm.plugins.module_utils._fleet import record_limits  # noqa: E402
from ansible_collections.kvfleet.vllm.plugins.module_utils._group_order import (  # noqa: E402
    restart_order, systemctl_steps)
from ansible_collections.kvfleet.vllm.plugins.module_utils._latency import (  # noqa: E402
    window as latency_window)
from ansible_collections.kvfleet.vllm.plugins.module_utils._layout import LAYOUT, unit_instance, unit_name  # noqa: E402
from ansible_collections.kvfleet.vllm.plugins.module_utils._nvml import (  # noqa: E402
    HEALTH_VERDICTS, NvmlUnavailable, collect as nvml_collect, gpus_visible, health_findings, judge as gpu_judge,
    process_memory)
from ansible_collections.kvfleet.vllm.plugins.module_utils._probe import (  # noqa: E402
    LIMITS, MAX_BODY_BYTES, DeadlineExceeded, FetchError, Response, check_encoding, check_range,
    check_url, check_window, read_body, redact_url, redirect_refused, sample as probe_sample,
    sample_until_decided, scrub, unreachable_snapshot, with_deadline)
from ansible_collections.kvfleet.vllm.plugins.module_utils._textfile import render  # noqa: E402
from ansible_collections.kvfleet.vllm.plugins.module_utils._trends import (  # noqa: E402
    history_series, persisting_causes, sustained_causes, trends)

# journald reads a "<N>" prefix as the syslog priority of the line
ERR, WARNING, INFO = "<3>", "<4>", "<6>"


def log(level, text):
    stream = sys.stderr if level == ERR else sys.stdout
    stream.write(level + text + "\n")
    stream.flush()


def tls_context(tls=None):
    """The TLS settings of an https server ({ca_file, client_cert, client_key}, from the
    deployment record or the command line) as an SSL context: the certificate is always checked
    (against ca_file, else the system's trust store) and its name matched to the URL's host."""
    tls = tls if isinstance(tls, dict) else {}
    ca_file = tls.get("ca_file") or None
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except OSError as exc:  # ssl names no file: say which one
        raise OSError(exc.errno, "cannot read the CA file %s: %s" % (ca_file, exc.strerror or exc))
    if tls.get("client_cert"):
        cert, key = tls["client_cert"], tls.get("client_key") or None
        try:
            context.load_cert_chain(cert, key)
        except OSError as exc:
            raise OSError(exc.errno, "cannot read the client certificate %s or its key %s: %s"
                          % (cert, key, exc.strerror or exc))
    return context


def http_request(url, timeout, headers=None, data=None, max_body_bytes=MAX_BODY_BYTES, context=None):
    """One HTTP request by http.client: (status, reason, Location header, body).

    Never follows a redirect (the caller sees the 3xx), ends within `timeout` seconds in all
    (a server that trickles bytes is cut off: its socket is shut down), reads at most
    `max_body_bytes` of the body. user:password@ in the URL becomes a basic auth header unless
    the caller gives its own Authorization. Raises FetchError (DeadlineExceeded, BodyTooLarge),
    OSError, http.client.HTTPException.
    """
    parts = urlsplit(url)
    headers = dict(headers or {})
    if parts.username is not None and "Authorization" not in headers:
        pair = "%s:%s" % (unquote(parts.username), unquote(parts.password or ""))
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")
    target = parts.path or "/"
    deadline = time.monotonic() + timeout
    held = {}

    def work():
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout,
                                               context=context or tls_context())
        else:
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
        held["conn"] = conn
        try:
            conn.request("GET" if data is None else "POST", target, body=data, headers=headers)
            resp = conn.getresponse()
            if 300 <= resp.status < 400:
                return resp.status, resp.reason, resp.getheader("Location"), b""
            if resp.status < 300:
                check_encoding(resp)
            return resp.status, resp.reason, None, read_body(resp, max_body_bytes, deadline)
        finally:
            conn.close()

    def abort():
        sock = getattr(held.get("conn"), "sock", None)
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)

    return with_deadline(work, timeout, abort)


def make_fetcher(base_url, timeout, api_key=None, max_body_bytes=MAX_BODY_BYTES, tls=None):
    """fetch(path) -> Response for _probe; raises ValueError at once for an unusable URL, and
    OSError/ssl.SSLError for unreadable TLS files (`tls`: see tls_context)."""
    error = check_url(base_url)
    if error:
        raise ValueError(error)
    context = tls_context(tls) if base_url.startswith("https:") else None
    headers = {"Accept": "text/plain, application/json"}
    if api_key:
        headers["Authorization"] = "Bearer %s" % api_key
    base = base_url.rstrip("/")

    def fetch(path):
        try:
            status, reason, location, body = http_request(base + path, timeout, headers,
                                                          max_body_bytes=max_body_bytes, context=context)
        except DeadlineExceeded:
            return Response(None, b"", "timed out after %ss (one deadline for the whole request)"
                            % timeout)
        except FetchError as exc:
            return Response(None, b"", str(exc))
        except (OSError, http.client.HTTPException, ValueError) as exc:  # refused, reset, garbage
            return Response(None, b"", scrub("%s: %s" % (type(exc).__name__, exc)))
        if 300 <= status < 400:
            return Response(status, b"", redirect_refused(location))
        if status >= 400:
            return Response(status, b"", scrub(reason))
        return Response(status, body)
    return fetch


def unit_state(unit):
    out = subprocess.run(["systemctl", "show", "-p",
                          "ActiveState,SubState,NRestarts,Result,ActiveEnterTimestampMonotonic,"
                          "MainPID", unit],
                         capture_output=True, text=True, check=False).stdout
    state = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    state["NRestarts"] = int(state.get("NRestarts") or 0)
    return state


def unit_memory(state, proc="/proc", nvml=None):
    """Resident memory of a unit's server: its main process and every descendant (the API server
    and its engine cores), summed from each /proc/<pid>/status VmRSS: {'rss_bytes',
    'processes', 'main_pid'}, or None when the unit runs no process. With `nvml` (a pynvml
    module), 'gpu_bytes' too: the GPU memory those processes hold (None where NVML cannot say). The process tree, not the
    cgroup: it reads the same on cgroup v1, hybrid and v2 hosts. /proc/<pid>/status is
    world-readable, so the unprivileged monitor reads it (its unit keeps ProtectProc=default)."""
    try:
        main = int(state.get("MainPID") or 0)
    except ValueError:
        main = 0
    if main <= 0:
        return None
    pids = process_tree(main, proc)
    rss, counted = 0, 0
    for pid in pids:
        try:
            with open(os.path.join(proc, str(pid), "status")) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss += int(line.split()[1]) * 1024
                        counted += 1
                        break
        except (OSError, ValueError, IndexError):
            continue
    if not counted:
        return None
    out = {"rss_bytes": rss, "processes": counted, "main_pid": main}
    if nvml is not None:
        # None where NVML cannot say (no driver: a CPU host); a reading never fails the round
        try:
            out["gpu_bytes"] = (process_memory(nvml, pids) or {}).get("gpu_bytes")
        except Exception:   # pylint: disable=broad-except
            out["gpu_bytes"] = None
    return out


_NVML = {}


def load_nvml(venv=None):
    """The pynvml module (nvidia-ml-py, one file of ctypes calls) for the GPU memory reading, or
    None: the system's if it has one, else the copy in the vLLM venv the record names (the
    package's, or the one vLLM ships as vllm/third_party/pynvml.py), else the server role's NVML
    venv beside it. Loaded by path, so the venv's Python version does not matter. Once per run."""
    if "module" in _NVML:
        return _NVML["module"]
    module = None
    try:
        import pynvml as module   # noqa: F811  pylint: disable=import-outside-toplevel
    except ImportError:
        import glob
        import importlib.util
        found = []
        if isinstance(venv, str) and venv.startswith("/"):
            for rel in ("pynvml.py", "vllm/third_party/pynvml.py"):
                found += sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", rel)))
            # the server role's NVML venv beside it (kvfleet-nvml-<version>: the pinned nvidia-ml-py
            # that gpu_info reads with), the newest version first
            found += sorted(glob.glob(os.path.join(os.path.dirname(venv.rstrip("/")), "kvfleet-nvml-*", "lib",
                                                   "python3*", "site-packages", "pynvml.py")), reverse=True)
        for path in found:
            try:
                spec = importlib.util.spec_from_file_location("kvfleet_pynvml", path)
                module = importlib.util.module_from_spec(spec)
                # pynvml looks itself up in sys.modules while it loads (its error classes)
                sys.modules[spec.name] = module
                spec.loader.exec_module(module)
                break
            except Exception:   # a broken copy: try the next, else no GPU memory
                sys.modules.pop("kvfleet_pynvml", None)
                module = None
    _NVML["module"] = module
    return module


# GPU health (docs/gpu-health.md). NVML delivers the critical Xid events raised while a reading
# waits for them; the monitor's gpu_xid_wait_ms sets the wait, bounded so that a round stays short.
GPU_XID_WAIT_MS = 100
GPU_XID_WAIT_MAX_MS = 5000
# The monitor's last GPU reading, beside its history (0644): the next round compares NVLink
# error counters with it, and the restart guard and the watchdog read it where NVML is closed
# to them (their units have PrivateDevices=true).
GPU_STATE = "gpu_health.json"
# a monitor reading older than this says nothing about the GPUs now
GPU_READING_MAX_AGE = 900


def xid_wait_ms(cfg):
    """The Xid wait of a configuration (the monitor's gpu_xid_wait_ms), within 0..GPU_XID_WAIT_MAX_MS."""
    value = (cfg or {}).get("gpu_xid_wait_ms", GPU_XID_WAIT_MS)
    # a NaN is no number of milliseconds either
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
        value = GPU_XID_WAIT_MS
    return int(min(max(value, 0), GPU_XID_WAIT_MAX_MS))


def _gpu_key(gpu):
    return gpu.get("uuid") or "index:%s" % gpu.get("index")


def read_gpus(venv, wait_ms, previous=None):
    """The host's GPUs with their health (_nvml.collect's 'gpus'), read through NVML now, or None
    where NVML cannot be used: no pynvml, no driver (a CPU host), or a unit without the NVIDIA
    devices. previous: an earlier reading, {uuid: entry}; each GPU is judged again against its
    entry there, so that NVLink errors count when they grew, not for as long as the driver runs.
    Never raises: a reading that fails is logged and is None."""
    nvml = load_nvml(venv)
    if nvml is None:
        return None
    try:
        gpus = nvml_collect(nvml, xid_wait_ms=wait_ms)["gpus"]
        for gpu in gpus:
            old = (previous or {}).get(_gpu_key(gpu))
            if old:
                gpu["health"].update(gpu_judge(gpu["health"], previous=old.get("health")))
        return gpus
    except NvmlUnavailable:
        return None
    except Exception as exc:   # pylint: disable=broad-except  # a reading never fails its caller
        log(WARNING, "GPU health not read: %s" % scrub("%s: %s" % (type(exc).__name__, exc)))
        return None


def _clean_reason(reason):
    if not isinstance(reason, dict) or not isinstance(reason.get("id"), str):
        return None
    evidence = reason.get("evidence")
    return {"id": reason["id"], "severity": reason.get("severity") if isinstance(reason.get("severity"), str) else None,
            "evidence": evidence if isinstance(evidence, dict) else {},
            "remedy": reason.get("remedy") if isinstance(reason.get("remedy"), str) else ""}


def _clean_gpu(gpu):
    """An entry of a saved reading in the shape health_findings and judge read, or None."""
    if not isinstance(gpu, dict) or not isinstance(gpu.get("index"), int) or isinstance(gpu.get("index"), bool) \
            or not isinstance(gpu.get("health"), dict):
        return None
    health = gpu["health"]
    reasons = [r for r in map(_clean_reason, health.get("reasons") if isinstance(health.get("reasons"), list) else [])
               if r]
    nvlink = health.get("nvlink")
    return {"index": gpu["index"], "uuid": gpu.get("uuid") if isinstance(gpu.get("uuid"), str) else None,
            "name": gpu.get("name") if isinstance(gpu.get("name"), str) else None,
            "health": {"verdict": health.get("verdict") if health.get("verdict") in HEALTH_VERDICTS else None,
                       "reasons": reasons,
                       "nvlink": [e for e in nvlink if isinstance(e, dict)] if isinstance(nvlink, list) else None}}


def gpu_state_path(monitor):
    """Where the monitor keeps its last GPU reading (beside its history), or None."""
    history = (monitor or {}).get("history")
    return os.path.join(os.path.dirname(history), GPU_STATE) if isinstance(history, str) and history else None


def load_gpu_state(path, now=None, max_age=None):
    """The monitor's last GPU reading, {'time', 'gpus'}, or None: none, unreadable, or (with
    max_age) older than max_age seconds or stamped in the future."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError, TypeError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list):
        return None
    stamp = data.get("time")
    if not isinstance(stamp, (int, float)) or isinstance(stamp, bool):
        return None
    if max_age is not None and not 0 <= (time.time() if now is None else now) - stamp <= max_age:
        return None
    return {"time": stamp, "gpus": [g for g in map(_clean_gpu, data["gpus"]) if g]}


def save_gpu_state(path, gpus, now):
    """The reading the next round (NVLink growth), the guard and the watchdog read: each GPU's
    index, uuid, name and health (its processes and memory are no part of it)."""
    kept = [dict((k, g.get(k)) for k in ("index", "uuid", "name", "health")) for g in gpus]
    _atomic_write(path, json.dumps({"time": round(now, 3), "gpus": kept}, sort_keys=True) + "\n")


def visible_devices(inst):
    """An instance's CUDA_VISIBLE_DEVICES: the record's cuda_visible_devices where it has one,
    else the Environment= of its unit (the server role's unit sets it there), else None: every
    GPU of the host, as CUDA sees them without the variable."""
    value = inst.get("cuda_visible_devices")
    if isinstance(value, str):
        return value
    try:
        out = subprocess.run(["systemctl", "show", "-p", "Environment", inst["unit"]],
                             capture_output=True, text=True, check=False).stdout
    except OSError:
        return None
    for line in out.splitlines():
        if not line.startswith("Environment="):
            continue
        try:
            words = shlex.split(line[len("Environment="):])
        except ValueError:
            words = line[len("Environment="):].split()
        for word in words:
            if word.startswith("CUDA_VISIBLE_DEVICES="):
                return word.split("=", 1)[1]
    return None


def instance_gpus(gpus, inst):
    """The entries of `gpus` that the instance runs on (visible_devices)."""
    indexes = gpus_visible(visible_devices(inst), gpus)
    return [g for g in gpus if g["index"] in indexes]


def gpu_summary(gpus):
    """What a history or action line keeps of each GPU: index, uuid, verdict, reason ids."""
    return [{"index": g["index"], "uuid": g.get("uuid"), "verdict": (g.get("health") or {}).get("verdict"),
             "reason_ids": [r["id"] for r in (g.get("health") or {}).get("reasons") or []]} for g in gpus]


def decision_gpus(cfg, inst):
    """The GPUs an instance runs on, with their health, for a restart decision: (gpus, source).
    This process's own NVML reading first; where NVML is closed to it, the monitor's last reading
    (cfg's monitor_config) if it is recent. (None, None) where neither says anything."""
    monitor = {}
    path = cfg.get("monitor_config")
    if isinstance(path, str) and os.path.exists(path):
        try:
            monitor = load_config(path)
        except (OSError, ValueError):
            monitor = {}
    gpus, source = read_gpus(inst.get("venv"), xid_wait_ms(monitor)), "read through NVML now"
    if gpus is None:
        state = gpu_state_path(monitor)
        now = time.time()
        saved = load_gpu_state(state, now, GPU_READING_MAX_AGE) if state else None
        if saved is None:
            return None, None
        gpus, source = saved["gpus"], "as the monitor read it %.0fs ago" % (now - saved["time"])
    return instance_gpus(gpus, inst), source


# the GPUs restart_one held each instance for in this run: the watchdog records them
_GPU_HOLDS = {}


def _unique(items):
    out = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def hold_for_gpu(cfg, inst, sick, source):
    """A restart of vLLM does not cure a GPU: instead of restarting, run the drain commands (the
    pre-restart ones: the load balancer takes the instance out) and say why, in one line. The
    instance stays drained until a person deals with the GPU. Returns 'gpu-unhealthy', or
    'drain-failed' when a drain command failed."""
    unit = inst["unit"]
    why = "; ".join("GPU %s %s %s (%s)" % (
        g["index"], g.get("uuid") or "(uuid unknown)", ", ".join(r["id"] for r in g["reasons"]),
        "; ".join(_unique(r["remedy"] for r in g["reasons"] if r.get("remedy")))) for g in sick)
    drains = cfg.get("pre_commands", [])
    log(ERR, "%s: not restarting %s: %s; %s. A restart of vLLM does not cure the GPU: %s" % (
        unit, inst["name"], why, source,
        "running the drain (pre-restart) commands, and leaving it drained" if drains else
        "no drain (pre-restart) commands are configured, so it stays in the load balancer"))
    _GPU_HOLDS[inst["name"]] = {"gpus": [{"index": g["index"], "uuid": g.get("uuid"), "verdict": g["verdict"],
                                          "reason_ids": [r["id"] for r in g["reasons"]]} for g in sick],
                                "source": source}
    if not _hooks(drains, inst, "drain (pre-restart)"):
        log(ERR, "%s: the drain commands failed: %s is neither restarted nor drained" % (unit, inst["name"]))
        return "drain-failed"
    return "gpu-unhealthy"


def seconds_since_start(state, now=None):
    """How long ago the unit became active (systemd's CLOCK_MONOTONIC stamp), None if unknown."""
    try:
        entered = int(state.get("ActiveEnterTimestampMonotonic") or 0)
    except ValueError:
        return None
    if entered <= 0:
        return None
    return (time.monotonic() if now is None else now) - entered / 1e6


def _unit_state(unit):
    out = subprocess.run(["systemctl", "show", "-p", "ActiveState,MainPID,ExecMainStartTimestampMonotonic", unit],
                         capture_output=True, text=True, check=False).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _sha256(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


# `applied` stamps, one per unit: read by `stale` without being named, so that the stale check
# the roles already run (whatever version of this program a host has) needs no new option
APPLIED_DIR = "/var/lib/kvfleet/applied"


def _stamp_path(unit):
    return os.path.join(APPLIED_DIR, os.path.basename(unit) + ".json")


def _applied(stamp, pid):
    """{path: sha256} of the files a running process (`pid`) already serves by other means (a LoRA
    adapter loaded at runtime: its unit lists it, the process has it); {} for another process."""
    try:
        with open(stamp) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or str(data.get("pid")) != str(pid) or not isinstance(data.get("files"), dict):
        return {}
    return data["files"]


def stale(unit, files, now=None, now_mono=None, applied=None):
    """Whether a unit's running process is older than its configuration: an earlier run wrote
    the unit or its files and stopped (an interrupt, a lost host) before it restarted the server.
    A newer file whose content the unit's stamp (`kvfleet-vllm applied`; `applied`: its path, by
    default under APPLIED_DIR) records for this very process is not counted.
    Returns {unit, stale, why}; an inactive unit is never stale."""
    state = _unit_state(unit)
    result = {"unit": unit, "stale": False, "why": None, "active": state.get("ActiveState") == "active"}
    try:
        started_mono = int(state.get("ExecMainStartTimestampMonotonic") or 0) / 1e6
    except ValueError:
        started_mono = 0
    if state.get("ActiveState") != "active" or state.get("MainPID") in (None, "", "0") or started_mono <= 0:
        return result
    # the process's start on the wall clock, which file times use
    started = (time.time() if now is None else now) - ((time.monotonic() if now_mono is None else now_mono) - started_mono)
    newer = []
    served = _applied(applied or _stamp_path(unit), state["MainPID"])
    for path in files:
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            continue  # a file that is gone changes nothing the process reads now
        if mtime > started and not (path in served and served[path] == _sha256(path)):
            newer.append("%s (changed %.0fs after the process started)" % (path, mtime - started))
    if newer:
        result.update(stale=True, why="the running process (PID %s) predates %s" % (state["MainPID"], ", ".join(newer)))
    return result


def _systemctl(*argv):
    proc = subprocess.run(["systemctl"] + list(argv), capture_output=True, text=True, check=False)
    if proc.returncode:
        why = scrub(proc.stderr.strip() or proc.stdout.strip(), 500)
        raise RuntimeError("systemctl %s failed (exit %d): %s" % (" ".join(argv), proc.returncode, why))
    return proc.stdout


def _show(unit, props="ActiveState,Result,UnitFileState,LoadState"):
    out = subprocess.run(["systemctl", "show", "-p", props, unit], capture_output=True, text=True,
                         check=False).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


UNIT_DIR = LAYOUT["unit_dir"]


def remove_other_units(keep, config_dir, check=False, unit_dir=UNIT_DIR):
    """Stop, disable and delete the vllm-*.service units (and their environment and key files)
    that are not in `keep`: an instance the host no longer has (renamed, removed, or a serving
    group's Ray head node once the group is not over Ray). The collection owns vllm-*.service
    (the rollback and the port preflight count on it too). Returns the units removed."""
    removed = []
    try:
        names = sorted(os.listdir(unit_dir))
    except OSError:
        return removed
    for name in names:
        instance = unit_instance(name)
        if instance is None or name in keep:
            continue
        removed.append(name)
        if check:
            continue
        subprocess.run(["systemctl", "disable", "--now", name], capture_output=True, text=True, check=False)
        for path in (os.path.join(unit_dir, name), os.path.join(config_dir, instance + ".env"),
                     os.path.join(config_dir, instance + ".keys.yaml")):
            if os.path.lexists(path):
                os.unlink(path)
    return removed


def start_units(spec, enabled=True, reload=False, check=False, config_dir=None, unit_dir=UNIT_DIR):
    """The server role's run step for a host's units, in one call instead of three tasks a unit
    (tasks/service.yml): a unit that gave up after its start limit (failed) has it cleared (a
    deploy is a deliberate start), the unit files are reloaded when asked, each unit is enabled
    (or disabled) and started if it does not run, and a unit that ran already is asked whether
    its process predates its files (stale()). spec: [{unit, files}]. config_dir: remove the
    vllm-*.service units not in spec first (remove_other_units). check: say what would be done,
    change nothing. Returns {changed, removed, units: [{unit, before, reset, enabled_changed,
    started, active, stale, why}]}."""
    out = {"changed": False, "units": [], "removed": []}
    if config_dir:
        out["removed"] = remove_other_units(set(e["unit"] for e in spec), config_dir, check, unit_dir)
        out["changed"] = bool(out["removed"])
    if (reload or out["removed"]) and not check:
        _systemctl("daemon-reload")
    for entry in spec:
        unit, files = entry["unit"], entry.get("files") or []
        before = _show(unit)
        row = {"unit": unit, "before": before.get("ActiveState"), "reset": False,
               "enabled_changed": False, "started": False, "stale": False, "why": None}
        if before.get("ActiveState") == "failed":
            row["reset"] = True
            if not check:
                _systemctl("reset-failed", unit)
        state = before.get("UnitFileState")
        if enabled and state not in ("enabled", "enabled-runtime", "static", "alias"):
            row["enabled_changed"] = True
            if not check:
                _systemctl("enable", unit)
        elif not enabled and state in ("enabled", "enabled-runtime"):
            row["enabled_changed"] = True
            if not check:
                _systemctl("disable", unit)
        if before.get("ActiveState") != "active":
            row["started"] = True
            if not check:
                _systemctl("start", unit)
        else:
            answer = stale(unit, files)
            row.update(stale=answer["stale"], why=answer["why"])
        row["active"] = True if check and row["started"] else _show(unit, "ActiveState").get("ActiveState") == "active"
        out["changed"] |= row["reset"] or row["enabled_changed"] or row["started"]
        out["units"].append(row)
    return out


def start_command(args):
    """Print start_units()'s answer as JSON; exit 1 (with the reason) when systemctl fails."""
    try:
        spec = json.loads(args.spec)
        if not isinstance(spec, list) or not all(isinstance(e, dict) and isinstance(e.get("unit"), str)
                                                 for e in spec):
            raise ValueError("--spec must be a JSON list of {unit, files}")
        result = start_units(spec, args.enabled == "yes", args.reload, args.check, args.remove_others)
    except (ValueError, RuntimeError) as exc:
        print(scrub(str(exc)), file=sys.stderr)
        return 1
    json.dump(result, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


def stale_command(args):
    """Print stale()'s answer as JSON; exit 0 either way."""
    json.dump(stale(args.unit, args.file or [], applied=args.applied), sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


def health_reasons(instances, timeout=3):
    """One /health read of each recorded instance that has a URL of its own (a Ray node has
    none): why each one that did not answer 200 is not healthy, as sentences."""
    reasons = []
    for inst in instances or []:
        if not isinstance(inst, dict) or not inst.get("url"):
            continue
        try:
            answer = make_fetcher(inst["url"], timeout, tls=cli_tls(inst.get("tls")))("/health")
        except (ValueError, OSError) as exc:   # a URL that cannot be one, unreadable TLS files
            reasons.append("%s cannot be read: %s" % (inst.get("name"), scrub("%s: %s" % (type(exc).__name__, exc))))
            continue
        if answer.status != 200:
            reasons.append("%s does not answer /health (%s)" % (inst.get("name"), answer.error or answer.status))
    return reasons


def converged(state_path, fingerprint, record_path=None, marker_path=None):
    """Whether the host holds what its last verified deploy left (module_utils/_converged.py),
    every recorded unit runs no older than its files and each instance answers /health once;
    with the deployment record's current part and the drain marker, so that the deploy reads
    the host in this one call and leaves a converged one out of its batches.
    Returns {converged, reasons, record, drained}."""
    recorded = converged_load(state_path)
    reasons = converged_differences(recorded, fingerprint)
    drained = converged_load(marker_path or LAYOUT["drain_marker"])
    if drained is not None:
        reasons.append("left drained by an earlier run")
    if not reasons:
        for unit in recorded["spec"]["units"]:
            row = stale(unit["unit"], unit.get("files") or [])
            if not row["active"]:
                reasons.append("%s is not running" % unit["unit"])
            elif row["stale"]:
                reasons.append("%s runs older settings" % unit["unit"])
    record = converged_load(record_path or LAYOUT["record"]) or {}
    if not reasons:
        reasons = health_reasons((record.get("current") or {}).get("instances"))
    return {"converged": not reasons, "reasons": reasons, "record": record.get("current") or {}, "drained": drained}


def converged_command(args):
    """The fingerprint comes on stdin (one line), never on the command line: it is derived from
    settings that hold secrets. Check: print converged()'s answer. --record: write the state
    (root only) and say whether it changed. Exit 1 on a bad spec or fingerprint."""
    fingerprint = sys.stdin.readline().strip()
    try:
        if not args.record:
            result = converged(args.state, fingerprint)
        else:
            spec = json.loads(args.spec or "null")
            if isinstance(spec, dict):
                # this program and its library, wherever the hosttools role put them
                spec = dict(spec, trees=list(spec.get("trees") or []) + [os.path.dirname(os.path.realpath(__file__))],
                            files=list(spec.get("files") or []) + [LAYOUT["command"]])
            new = converged_state(spec, fingerprint)
            changed = converged_load(args.state) != json.loads(json.dumps(new))
            if changed:
                os.makedirs(os.path.dirname(args.state) or ".", mode=0o755, exist_ok=True)
                _atomic_write(args.state, json.dumps(new, sort_keys=True), mode=0o600)
            result = {"recorded": args.state, "changed": changed}
    except ValueError as exc:
        print(scrub(str(exc)), file=sys.stderr)
        return 1
    json.dump(result, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


def applied_command(args):
    """Write the stamp that stale() reads: the running process of --unit already serves what
    these files say now. Exit 1 (nothing written) when the unit does not run."""
    state = _unit_state(args.unit)
    pid = state.get("MainPID")
    if state.get("ActiveState") != "active" or pid in (None, "", "0"):
        sys.stderr.write("%s is not running: nothing to stamp\n" % args.unit)
        return 1
    files = {path: _sha256(path) for path in args.file}
    stamp = args.stamp or _stamp_path(args.unit)
    os.makedirs(os.path.dirname(stamp) or ".", mode=0o755, exist_ok=True)
    tmp = stamp + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"unit": args.unit, "pid": pid, "files": files}, f, sort_keys=True)
    os.chmod(tmp, 0o600)   # root reads it (the stale check); nobody else needs to
    os.replace(tmp, stamp)
    json.dump({"unit": args.unit, "pid": pid, "stamp": stamp}, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


def journal_tail(unit, since=None, lines=15, scan=400):
    """The unit's error lines since `since` (epoch) first (a Python traceback ends with its least
    useful line), then its last lines."""
    window = ["--since", "@%d" % (since - 1)] if since else []
    out = subprocess.run(["journalctl", "-u", unit, "-n", str(scan), "--no-pager", "-o", "cat"] + window,
                         capture_output=True, text=True, check=False).stdout.splitlines()
    errors = [line for line in out if re.search(r"\b\w*(Error|Exception)\b:|\bERROR\b", line)]
    # the exceptions raised (ValueError: ...), first seen first: the root cause comes before the
    # tracebacks of the processes it took down, which would push it out of the last lines
    raised = []
    for line in errors:
        message = re.search(r"\b[A-Z]\w*(Error|Exception): .*", line)
        if message and " WARNING " not in line and message.group(0) not in raised:
            raised.append(message.group(0))
    text = "\n".join(out[-lines:])
    if errors:
        text = "error lines:\n%s\nlast lines:\n%s" % ("\n".join(raised[:3] + errors[-5:]), text)
    return text


def _url_port(url):
    parts = urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


def unit_owns(unit, url, proc="/proc"):
    """(True, None) when the unit's own server is what listens on the URL's port (its user's
    sockets; its main process or a descendant where the descriptors can be read); else
    (False, why). _dp_links.port_owner."""
    try:
        main = int(unit_state(unit).get("MainPID") or 0)
    except ValueError:
        main = 0
    return port_owner(main, _url_port(url), proc)


def wait_healthy(args):
    """Exit 0 once /health answers 200 from the unit's own server (the listener on the port is
    its main process or a descendant: a local user who binds the port between the stop and
    vLLM's own bind is not taken for it, and warmup sends the API key only after this); exit 1
    at once if the unit fails or restarts, or if another process answers."""
    start = time.time()
    restarts = unit_state(args.unit)["NRestarts"]
    try:
        fetch = make_fetcher(args.url, args.probe_timeout, tls=cli_tls(args))
    except OSError as exc:  # an unreadable CA or client certificate: named, no traceback
        why = scrub("%s: %s" % (type(exc).__name__, exc))
        print("%s: cannot probe %s: %s" % (args.unit, redact_url(args.url), why), file=sys.stderr)
        return 1
    while True:
        state = unit_state(args.unit)
        if state.get("ActiveState") == "failed" or state["NRestarts"] > restarts:
            print("%s %s (result %s, %d restart(s)) before it answered /health; its log:\n%s"
                  % (args.unit, "failed" if state.get("ActiveState") == "failed" else "restarted",
                     state.get("Result"), state["NRestarts"] - restarts, journal_tail(args.unit, start)),
                  file=sys.stderr)
            return 1
        if fetch("/health").status == 200:
            ours, why = unit_owns(args.unit, args.url)
            if not ours:
                print("%s: something answers /health on %s, but not the unit's own server: %s; nothing "
                      "is sent to it" % (args.unit, redact_url(args.url), why), file=sys.stderr)
                return 1
            print("%s healthy after %.1fs" % (args.unit, time.time() - start))
            return 0
        if time.time() - start > args.timeout:
            print("%s did not answer /health within %ss; its log:\n%s"
                  % (args.unit, args.timeout, journal_tail(args.unit, start)), file=sys.stderr)
            return 1
        time.sleep(args.delay)


# an https server's settings, as the record's `tls` entry and the --ca-file, --client-cert,
# --client-key options name them
TLS_KEYS = ("ca_file", "client_cert", "client_key")


def cli_tls(source):
    """tls_context's settings from the command line's options (a Namespace) or from a record's
    `tls` entry (a dict; anything else in a hand-edited record counts as none)."""
    if isinstance(source, argparse.Namespace):
        return dict((k, getattr(source, k, None)) for k in TLS_KEYS)
    return dict((k, source.get(k)) for k in TLS_KEYS) if isinstance(source, dict) else dict.fromkeys(TLS_KEYS)


def take(url, api_key=None, timeout=10, tls=None):
    """One sample, or the record of a server that could not be read (a URL that cannot be one,
    or TLS files that cannot be read, included)."""
    try:
        fetch = make_fetcher(url, timeout, api_key, tls=tls)
    except (ValueError, OSError) as exc:
        return unreachable_snapshot(url, scrub("%s: %s" % (type(exc).__name__, exc)))
    return probe_sample(fetch, url)


def run_gate(url, samples=3, interval=2.0, max_num_seqs=None, api_key=None, timeout=10,
             limits=None, tls=None, observe=None, gpu_health=None):
    """The gate as cache_gate runs it: a window, extended while it looks like a stall or an
    outage until decided. observe(): read beside each sample (a serving group head's links).
    gpu_health: the GPUs the server runs on with their health (gpu_unhealthy), None unread."""
    error = (check_range("samples", samples) or check_range("interval", interval)
             or check_window(samples, interval) or check_range("timeout", timeout))
    if error:
        raise ValueError(error)

    def judge(snaps):
        return diagnose(add_rates(snaps), max_num_seqs=max_num_seqs, limits=limits, gpu_health=gpu_health)

    snaps, result, extended = sample_until_decided(
        make_fetcher(url, timeout, api_key, tls=tls), url, samples, interval, judge, observe=observe)
    result["latency"] = latency_window(snaps)
    for snap in snaps:
        snap.pop("histograms", None)  # as cache_gate: the quantiles, not the raw counts
    result["samples"] = snaps
    result["extended_seconds"] = extended
    return result


def gate(args):
    """Print the gate result as JSON; exit 0 healthy, 1 degraded, 2 unhealthy. With --gpus, the
    health of those GPUs (read through NVML where it can be) joins the diagnosis."""
    gpus = None
    if getattr(args, "gpus", None) is not None:
        host_gpus = read_gpus(getattr(args, "venv", None), GPU_XID_WAIT_MS)
        visible = None if args.gpus.strip() in ("", "all") else args.gpus
        gpus = [g for g in host_gpus if g["index"] in gpus_visible(visible, host_gpus)] if host_gpus else None
    try:
        result = run_gate(args.url, args.samples, args.interval, args.max_num_seqs,
                          os.environ.get("VLLM_API_KEY"), args.probe_timeout, tls=cli_tls(args),
                          gpu_health=gpus)
    except OSError as exc:  # unreadable CA or client certificate: say which, no traceback
        print(scrub("%s: %s" % (type(exc).__name__, exc)), file=sys.stderr)
        return 2
    json.dump(result, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return {"healthy": 0, "degraded": 1}.get(result["verdict"], 2)


def read_env_file(path):
    """KEY="value" lines as the server role writes them (systemd EnvironmentFile quoting)."""
    env = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            key, value = line.split("=", 1)
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = re.sub(r'\\(.)', r'\1', value[1:-1])  # the template escapes \ and "
            env[key.strip()] = value
    return env


def warmup(args):
    """One short completion through the OpenAI API; exit 0 when the server generated tokens.
    With --engines N (a serving group head), one completion for each engine, pinned to it with
    the X-data-parallel-rank header (vLLM 0.32.0: vllm/entrypoints/generate/base/serving.py:225):
    a member whose engine is gone, or cut off, times out there while the head stays healthy.

    The API key comes from the instance's environment file (or VLLM_API_KEY), never from the
    command line, where ps and Ansible's -vvv output would show it.
    """
    key = os.environ.get("VLLM_API_KEY")
    if args.env_file:
        key = read_env_file(args.env_file).get("VLLM_API_KEY", key)
    headers = {"Content-Type": "application/json"}
    base = args.url.rstrip("/")
    start = time.time()
    result = {"url": redact_url(base)}
    if key and getattr(args, "unit", None):
        # the key goes to the unit's own server only, never to whatever else answers on its port
        ours, why = unit_owns(args.unit, base)
        if not ours:
            result["error"] = "not sending the API key: %s is not %s's own server (%s)" % (
                redact_url(base), args.unit, why)
            json.dump(result, sys.stdout, sort_keys=True)
            sys.stdout.write("\n")
            return 1
    if key:
        headers["Authorization"] = "Bearer %s" % key
    context = None
    if base.startswith("https:"):
        try:
            context = tls_context(cli_tls(args))
        except OSError as exc:  # an unreadable CA or client certificate, named, no traceback
            result["error"] = scrub("%s: %s" % (type(exc).__name__, exc))
            json.dump(result, sys.stdout, sort_keys=True)
            sys.stdout.write("\n")
            return 1

    def call(path, data=None, extra=None):
        status, reason, location, raw = http_request(base + path, args.timeout, dict(headers, **(extra or {})),
                                                     data, context=context)
        if 300 <= status < 400:
            raise FetchError("HTTP %s from %s: %s" % (status, path, redirect_refused(location)))
        if status >= 300:
            raise FetchError("HTTP %s %s: %s" % (status, scrub(reason, 100),
                                                 scrub(raw[:300].decode("utf-8", "replace"))))
        return json.loads(raw.decode("utf-8", "replace"))

    engine = None
    try:
        result["model"] = scrub(call("/v1/models")["data"][0]["id"], 200)
        body = json.dumps({"model": result["model"], "prompt": args.prompt,
                           "max_tokens": args.max_tokens, "temperature": 0}).encode()
        engines = getattr(args, "engines", 1) or 1
        if engines > 1:
            result["engines"] = []
        for rank in range(engines):
            engine = rank if engines > 1 else None
            t0 = time.time()
            answer = call("/v1/completions", body, {"X-data-parallel-rank": str(rank)} if engine is not None else None)
            choice = answer["choices"][0]
            result.update(finish_reason=choice.get("finish_reason"),
                          completion_tokens=(answer.get("usage") or {}).get("completion_tokens"))
            if engine is not None:
                result["engines"].append({"rank": rank, "finish_reason": result["finish_reason"],
                                          "seconds": round(time.time() - t0, 3)})
                if result["finish_reason"] not in ("length", "stop"):
                    break
    except DeadlineExceeded:
        result["error"] = "timed out after %ss (one deadline for each request)" % args.timeout
        if engine is not None:
            result["error"] += ("; engine %d (X-data-parallel-rank: %d) did not answer: a serving group "
                                "member that is gone or cut off (vLLM keeps routing to it); restart the "
                                "group with kvfleet.vllm.rolling_restart" % (engine, engine))
    except FetchError as exc:
        result["error"] = str(exc)
    except (OSError, http.client.HTTPException, ValueError, RecursionError, KeyError, IndexError,
            TypeError, AttributeError) as exc:
        result["error"] = scrub("%s: %s" % (type(exc).__name__, exc))
    result["seconds"] = round(time.time() - start, 3)
    ok = "error" not in result and result.get("finish_reason") in ("length", "stop")
    if not ok and "error" not in result:
        result["error"] = "finish_reason %r: the completion did not finish" % result.get("finish_reason")
    json.dump(result, sys.stdout if ok else sys.stderr, sort_keys=True)
    (sys.stdout if ok else sys.stderr).write("\n")
    return 0 if ok else 1


def load_config(path):
    with open(path) as f:
        return json.load(f)


def load_instances(cfg):
    """The host's instances as the server role's deployment record lists them (its one model of
    an instance: unit, probe URL, cap, drain time), read at each run so that a deploy that adds
    an instance or changes a flag needs no re-run of the monitor or restart roles."""
    path = cfg.get("record")
    if not path:
        raise SystemExit("the configuration names no deployment record ('record')")
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError) as exc:
        raise SystemExit("cannot read the deployment record %s (%s): apply kvfleet.vllm.server "
                         "first" % (path, exc))
    current = record.get("current") if isinstance(record, dict) else None
    listed = current.get("instances") if isinstance(current, dict) else None
    workers = current.get("workers") if isinstance(current, dict) else None
    workers = [w for w in workers if isinstance(w, dict) and isinstance(w.get("group"), dict)
               and isinstance(w.get("unit"), str)] if isinstance(workers, list) else []
    out = []
    for inst in listed if isinstance(listed, list) else []:
        # an odd entry is kept as it is: the per-instance isolation reports it as that
        # instance's failure, and the others still run
        if isinstance(inst, dict) and isinstance(inst.get("name"), str):
            drain = inst.get("drain_seconds")
            inst = dict(inst, unit=inst.get("unit") or unit_name(inst["name"]),  # records before 0.3.0
                        graceful=isinstance(drain, (int, float)) and drain > 0,
                        venv=current.get("venv"))   # where the GPU memory reading finds pynvml
            group = inst.get("group")
            if isinstance(group, dict):
                # a serving group's head: its workers on this host restart with it; engines
                # elsewhere (or sizes it cannot count) mean the group spans hosts
                mates = [w for w in workers if w["group"].get("key") == group.get("key")]
                local = local_engines(record, group)
                inst["group_workers"] = [w["unit"] for w in mates]
                inst["group_local_engines"] = local
                inst["group_spans_hosts"] = not (isinstance(local, int) and isinstance(group.get("size"), int)
                                                 and local >= group["size"])
        out.append(inst)
    if not out:
        raise SystemExit("the deployment record %s lists no instances" % path)
    return out


_AUTH_LINE = re.compile(r"(?i)(authorization|x-api-key|cookie)\s*[:=]")
_SECRETS = re.compile(r"(?i)\b(bearer|basic|token)(\s+|=)[^\s'\"]+")


def redact_output(text):
    """A hook's output fit for the journal: lines that carry an Authorization, API key or cookie
    header dropped (curl -v prints them), bearer and basic credentials and token=... values
    masked, credentials in URLs removed."""
    kept = [scrub(_SECRETS.sub(lambda m: m.group(1) + m.group(2) + "***", line), 2000)
            for line in text.splitlines() if not _AUTH_LINE.search(line)]
    return "\n".join(kept)[-2000:]


def _hooks(commands, inst, what):
    """Run operator commands (load balancer drain/undrain); the first failure stops."""
    env = dict(os.environ, KVFLEET_INSTANCE=inst["name"], KVFLEET_UNIT=inst["unit"],
               KVFLEET_URL=inst["url"])
    # Commands are logged by their number, never their text: they may hold credentials. The
    # shell reads each from its standard input (`sh -s`), not from its argv, which every local
    # user's process list shows while it runs.
    for number, cmd in enumerate(commands, 1):
        proc = subprocess.run(["/bin/sh", "-s"], input=cmd + "\n", env=env, capture_output=True, text=True,
                              check=False, timeout=600)
        if proc.returncode:
            log(ERR, "%s: %s command %d of %d failed (exit %d); its last output, secrets redacted:\n%s" % (
                inst["unit"], what, number, len(commands), proc.returncode,
                redact_output((proc.stderr or proc.stdout)[-4000:])))
            return False
        log(INFO, "%s: %s command %d of %d done" % (inst["unit"], what, number, len(commands)))
    return True


def _wait_idle(inst, timeout):
    """Wait, bounded, until nothing runs or waits. Returns the last snapshot."""
    deadline = time.time() + timeout
    while True:
        snap = take(inst["url"], tls=inst.get("tls"))
        busy = (snap.get("requests_running") or 0) + (snap.get("requests_waiting") or 0)
        if snap.get("error") or busy == 0 or time.time() >= deadline:
            return snap
        time.sleep(2)


def monitor_memory_growth(cfg, inst):
    """memory_growth for the guard's when_degraded, or None. A leak shows over hours of samples,
    not in the guard's short gate; the monitor's history has them, but its unprivileged user
    writes it, and forged lines must not make root restart anything. So, as the watchdog does,
    the growth is judged on root's own readings (the watchdog's memory record,
    LAYOUT['watchdog_memory'], root-owned and written by no one else) and this run's own
    reading of the unit; the thresholds come from the monitor's configuration. Without such a
    record (no watchdog with memory_growth), memory_growth cannot be confirmed, and says so."""
    path = cfg.get("monitor_config")
    if not path or not os.path.exists(path):
        return None
    monitor = load_config(path)
    record = cfg.get("memory_record") or LAYOUT["watchdog_memory"]
    own = [p for p in _read_history(record, root_only=True) if p.get("instance") == inst["name"]]
    if not own:
        log(INFO, "%s: memory_growth is judged on root's own memory readings (%s, the monitor's "
            "watchdog with memory_growth among its causes), and there are none: not a cause here"
            % (inst["unit"], record))
        return None
    now = own_memory_point(inst)
    return memory_growth(own + ([now] if now else []), monitor.get("memory"))


def restart_one(cfg, inst):
    """Restart one instance the drain-aware way. Returns 'skipped', 'restarted' or 'failed';
    'analysis-failed' when the analysis after the restart (analyse_after_restart) gave a verdict
    of its fail_on; in modes when_degraded and watchdog, 'gpu-unhealthy' or 'drain-failed' for an
    instance on an unhealthy GPU, which it drains instead of restarting (hold_for_gpu)."""
    unit = inst["unit"]
    state = unit_state(unit)
    # systemctl restart would start it: a unit stopped on purpose stays stopped ("failed" is not
    # a stop anyone asked for, so it may be restarted)
    if state.get("ActiveState") in ("inactive", "deactivating") and state.get("Result", "success") == "success":
        log(INFO, "%s: not restarting: the unit is %s (stopped, not failed); the guard never "
            "starts a stopped unit" % (unit, state.get("ActiveState")))
        return "skipped"
    # a server still loading its model reads as down, and one just started needs no restart:
    # give it its health timeout first (in either mode)
    age = seconds_since_start(state)
    if age is not None and age < cfg.get("health_timeout", 900):
        log(INFO, "%s: not restarting: the unit started %.0fs ago, within its health timeout "
            "(%ss)" % (unit, age, cfg.get("health_timeout", 900)))
        return "skipped"
    if inst.get("group_spans_hosts"):
        # the head alone would come back waiting for engines that never rejoin (a worker cannot
        # rejoin a new head, nor serve a restarted one): docs/serving-groups.md
        log(WARNING, "%s: not restarting: it heads serving group %s, whose workers run on other "
            "hosts; restart the group as one unit with kvfleet.vllm.rolling_restart"
            % (unit, inst["group"].get("key")))
        return "skipped"
    # put to sleep on purpose (--enable-sleep-mode): a restart would wake it with a cold cache
    now = take(inst["url"], os.environ.get("VLLM_API_KEY"), tls=inst.get("tls"))
    if (now.get("engines_sleeping") or 0) >= 1:
        log(INFO, "%s: not restarting: the engine is sleeping (vllm:engine_sleep_state); the "
            "guard never restarts a sleeping engine" % unit)
        return "skipped"
    # the GPUs it runs on: a restart does not cure an unhealthy one (hold_for_gpu)
    gpus, gpu_source = decision_gpus(cfg, inst)
    sick = health_findings(gpus, verdicts=("unhealthy",)) if gpus else []
    if cfg.get("mode") == "when_degraded":
        result = run_gate(inst["url"], cfg.get("gate_samples", 3), cfg.get("gate_interval", 2),
                          inst.get("max_num_seqs"), os.environ.get("VLLM_API_KEY"),
                          limits=inst.get("limits"), tls=inst.get("tls"),
                          observe=lambda: head_links(unit_state, unit, inst.get("port"), inst.get("group"),
                                                     inst.get("group_local_engines")),
                          gpu_health=gpus)
        found = [c["id"] for c in result["causes"]]
        leaking = monitor_memory_growth(cfg, inst)
        if leaking:
            found.append(leaking["id"])
            log(WARNING, "%s: %s %s" % (unit, leaking["id"], json.dumps(leaking["evidence"], sort_keys=True)))
        curing = [c for c in found if c in cfg.get("causes", [])]
        if not curing:
            log(INFO, "%s: not restarting: verdict %s, causes %s; a restart cures only %s"
                % (unit, result["verdict"], found or "none", ", ".join(cfg.get("causes", []))))
            return "skipped"
        if sick:
            return hold_for_gpu(cfg, inst, sick, gpu_source)
        log(WARNING, "%s: restarting: %s found, which a restart cures" % (unit, ", ".join(curing)))
    elif cfg.get("mode") == "watchdog":
        if sick:
            return hold_for_gpu(cfg, inst, sick, gpu_source)
        log(WARNING, "%s: watchdog restart: %s" % (unit, cfg.get("reason", "?")))
    else:
        # the operator's schedule, not a cure this program chose: it goes ahead, and says so
        if sick:
            sick_text = "; ".join(
                "GPU %s %s is unhealthy: %s" % (g["index"], g.get("uuid") or "(uuid unknown)", ", ".join(r["id"] for r in g["reasons"]))
                for g in sick)
            log(WARNING, "%s: scheduled restart although %s (%s); a restart does not cure it" % (unit, sick_text, gpu_source))
        log(INFO, "%s: scheduled restart (mode always)" % unit)
    if not _hooks(cfg.get("pre_commands", []), inst, "pre-restart"):
        log(ERR, "%s: not restarted, the pre-restart commands failed" % unit)
        return "failed"
    t0 = time.time()
    snap = _wait_idle(inst, cfg.get("drain_timeout", 120))
    busy = (snap.get("requests_running") or 0) + (snap.get("requests_waiting") or 0)
    if busy and inst.get("graceful"):
        log(INFO, "%s: %d request(s) still in flight after %.0fs; vLLM drains them on stop "
            "(--shutdown-timeout)" % (unit, busy, time.time() - t0))
    elif busy:
        log(WARNING, "%s: %d request(s) still in flight after %.0fs and this vLLM has no "
            "--shutdown-timeout: they will be aborted" % (unit, busy, time.time() - t0))
    t1 = time.time()
    workers = inst.get("group_workers") or []
    # a serving group restarts as one unit, in the order _group_order.py gives every restart
    order = restart_order([{"unit": unit, "group": True if workers else None}], [{"unit": w} for w in workers])
    for argv in (["systemctl", verb, name] for verb, name in systemctl_steps(order)):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode:
            log(ERR, "%s: systemctl %s %s failed: %s" % (unit, argv[1], argv[2], proc.stderr.strip()))
            return "failed"
    if workers:
        log(INFO, "%s: restarted with its serving group's workers %s" % (unit, ", ".join(workers)))
    waiter = argparse.Namespace(unit=unit, url=inst["url"], timeout=cfg.get("health_timeout", 900),
                                delay=2, probe_timeout=3, **cli_tls(inst.get("tls")))
    if wait_healthy(waiter) != 0:
        log(ERR, "%s: did not come back healthy after the restart; left out of the load "
            "balancer (post-restart commands not run)" % unit)
        return "failed"
    log(INFO, "%s: restarted and healthy in %.1fs (drain wait %.1fs)" % (unit, time.time() - t1, t1 - t0))
    if not _hooks(cfg.get("post_commands", []), inst, "post-restart"):
        return "failed"
    if analyse_after_restart(cfg, inst) in (cfg.get("analysis") or {}).get("fail_on", ["fail"]):
        return "analysis-failed"
    return "restarted"


def _canary_target(cfg, inst):
    """The restarted instance as the analysis's canary, with its scheduler limits (as the
    deploy's targets carry them: _fleet.record_limits)."""
    return dict(record_limits(inst), name="%s/%s" % (cfg.get("host") or socket.gethostname(), inst["name"]),
                url=inst["url"])


def analyse_after_restart(cfg, inst):
    """After a restart this guard made, with analysis on (cfg['analysis'], the role's
    vllm_restart_analysis_*): the restarted instance against the other hosts' instances under
    the traffic it gets, the deploy's comparison (_analysis_run, _canary). Logs the verdict with
    its reason and failed checks; returns it (None when off). Nothing is undone: a restart has
    nothing to roll back to, so a verdict in fail_on fails the unit for the operator to see."""
    settings = cfg.get("analysis") or {}
    seconds = settings.get("seconds") or 0
    if not seconds:
        return None
    canary = [_canary_target(cfg, inst)]
    baseline = [t for t in settings.get("baseline") or [] if isinstance(t, dict) and t.get("url")]
    own_key = os.environ.get("VLLM_API_KEY")
    tls = inst.get("tls")

    def connect(target):
        # the guard's own key for its own instance only: the baseline's endpoints need none
        return make_fetcher(target["url"], 10, own_key if target is canary[0] else None, tls=tls)

    log(INFO, "%s: analysing the restarted instance for %ss against %s" % (
        inst["unit"], seconds, "%d instance(s) of the other hosts" % len(baseline) if baseline
        else "the absolute limits (no other host's instance to compare with)"))
    result = run_analysis(canary, baseline, connect, float(seconds), float(settings.get("interval") or 15),
                          min_requests=int(settings.get("min_requests", 20)),
                          thresholds=settings.get("thresholds") or None)
    failed = ["%s: %s" % (c.get("metric"), c.get("why")) for c in result.get("checks") or []
              if c.get("result") == "fail"]
    level = ERR if result["verdict"] in settings.get("fail_on", ["fail"]) else (
        WARNING if result["verdict"] != "pass" else INFO)
    log(level, "%s: analysis after the restart: %s (%s)%s" % (
        inst["unit"], result["verdict"], result.get("reason"), "; failed: " + "; ".join(failed) if failed else ""))
    return result["verdict"]


def restart_guard(args):
    """Restart the host's instances one after the other; exit 1 if any failed."""
    cfg = load_config(args.config)
    outcomes = {}
    for inst in load_instances(cfg):
        unit = str(inst.get("unit", "?")) if isinstance(inst, dict) else "?"
        try:
            outcomes[unit] = restart_one(cfg, inst)
        except Exception as exc:  # reported as this instance's failure, never a traceback
            log(ERR, "%s: restart guard failed: %s" % (unit, scrub("%s: %s" % (type(exc).__name__, exc))))
            outcomes[unit] = "failed"
        if outcomes[unit] in ("failed", "analysis-failed"):
            # never take a second instance down after one failed to come back, or came back
            # worse than the other hosts' instances
            break
    log(INFO, "restart guard: %s" % ", ".join("%s %s" % kv for kv in sorted(outcomes.items())))
    return 1 if set(outcomes.values()) & {"failed", "drain-failed", "analysis-failed"} else 0


def _read_regular(path, limit_bytes, root_only=False):
    """(size, the last limit_bytes) of a regular file, never following a link, never opening a
    FIFO, a device or a socket (the path may be another user's: root reads the monitor's
    history); root_only: the file must be root's and writable by no one else. None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (root_only and (st.st_uid != 0 or st.st_mode & 0o022)):
            return None
        size = st.st_size
        os.lseek(fd, max(0, size - limit_bytes), os.SEEK_SET)
        chunks, total = [], 0
        while total < limit_bytes:   # never more than the cap, whatever the file grows to meanwhile
            chunk = os.read(fd, min(65536, limit_bytes - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return size, b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_history(path, limit_bytes=4 * 1024 * 1024, root_only=False):
    """The newest lines of the history (the tail of the file is enough for trends): a regular
    file only, read up to limit_bytes (_read_regular)."""
    read = _read_regular(path, limit_bytes, root_only=root_only)
    if read is None:
        return []
    size, raw = read
    data = raw.decode("utf-8", "replace")
    lines = data.splitlines()
    if size > limit_bytes:
        lines = lines[1:]  # the first one is cut
    out = []
    for line in lines:
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(entry, dict):  # anything else is not a line this program wrote
            out.append(entry)
    return out


def _rotate(path, max_bytes, keep):
    try:
        if os.path.getsize(path) < max_bytes:
            return
    except OSError:
        return
    # .1 -> .2 ... -> .keep; os.replace drops what was at .keep: never more than `keep` files
    for i in range(keep - 1, 0, -1):
        older = "%s.%d" % (path, i)
        if os.path.exists(older):
            os.replace(older, "%s.%d" % (path, i + 1))
    os.replace(path, path + ".1")


def _atomic_write(path, text, mode=0o644):
    """Write `path` whole or not at all, with `mode` from its first byte (a root-only file is
    never readable by others, not even half-written)."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def history_findings(cfg, past, now=None, diagnosis=None):
    """Trends and sustained causes over an instance's history (plus the sample just taken)."""
    points = past + ([now] if now else [])
    found = trends(points[-int(cfg.get("trend_points", 60)):], cfg.get("trend"))
    recent = [{"causes": [{"id": c} for c in h.get("cause_ids", [])]} for h in past]
    if diagnosis is not None:
        recent.append(diagnosis)
    sustained = sustained_causes(recent[-int(cfg.get("sustained_points", 5)):], cfg.get("trend"))
    return found, sustained


def trends_report(args):
    """Print, per instance, what the monitor's history shows (read by kvfleet.vllm.diagnose)."""
    cfg = load_config(args.config)
    history = _read_history(cfg["history"])
    out = {}
    for inst in load_instances(cfg):
        past = [h for h in history if h.get("instance") == inst["name"]]
        try:
            found, sustained = history_findings(cfg, past)
        except Exception as exc:  # one instance's odd history must not hide the others'
            out[inst["name"]] = {"points": len(past), "sustained": [], "trends": [],
                                 "trend_evidence": {},
                                 "error": scrub("%s: %s" % (type(exc).__name__, exc))}
            continue
        out[inst["name"]] = {"points": len(past), "sustained": sustained,
                             "trends": sorted(t for t, v in found.items() if v),
                             "trend_evidence": dict((t, v) for t, v in found.items() if v),
                             # the diagnose report's charts of the monitor history
                             "series": history_series(past, int(cfg.get("trend_points", 60)))}
    json.dump(out, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


def _sample_one(cfg, inst, history, window, gpus=None):
    """Sample and diagnose one instance: (history line, textfile result, log level, log text).
    gpus: this round's GPU reading of the host (None: no NVML); the instance's own GPUs join its
    diagnosis (gpu_unhealthy) and its history line (gpu_summary)."""
    past = [h for h in history if h.get("instance") == inst["name"]]
    mine = instance_gpus(gpus, inst) if gpus is not None else None
    now = take(inst["url"], os.environ.get("VLLM_API_KEY"), tls=inst.get("tls"))
    # systemd's count of restarts nobody asked for: the monitor's crash_loop evidence
    state = unit_state(inst["unit"]) if inst.get("unit") else {}
    if state.get("ActiveState"):
        now.update(unit_restarts=state["NRestarts"], unit_active_state=state["ActiveState"],
                   unit_result=state.get("Result"),
                   unit_memory=unit_memory(state, nvml=load_nvml(inst.get("venv"))))
        # a serving group head: are its remote engines still linked (group_member_lost)?
        now.update(head_links(lambda unit: state, inst["unit"], inst.get("port"), inst.get("group"),
                              inst.get("group_local_engines")))
    add_rates(([dict(past[-1])] if past else []) + [now])
    recent = since_last_down([dict(h) for h in past[-(window - 1):]] + [now])
    # restarts count over the whole window, the ones before the last outage too (since_last_down
    # keeps only the current process's samples for the metric rules)
    # memory_growth reads the whole history tail this round read (hours of samples), not the window
    diagnosis = diagnose(recent, max_num_seqs=inst.get("max_num_seqs"), limits=inst.get("limits"),
                         unit_points=past[-(window - 1):] + [now], memory_points=past + [now],
                         memory_settings=cfg.get("memory"), gpu_health=mine)
    # quantiles over the same window as the diagnosis, from the histograms' bucket counts that
    # each history line keeps (a restart inside it gives None with the reason)
    now["latency"] = latency_window(recent)
    found_trends, sustained = history_findings(cfg, past, now, diagnosis)
    line = dict(now, instance=inst["name"], verdict=diagnosis["verdict"],
                state=diagnosis["state"], cause_ids=[c["id"] for c in diagnosis["causes"]],
                trend_ids=sorted(t for t, v in found_trends.items() if v))
    if mine is not None:
        line["gpus"] = gpu_summary(mine)
    result = {"instance": inst["name"], "snapshot": None if now.get("error") else now,
              "diagnosis": diagnosis, "trends": found_trends, "sustained": sustained,
              "time": now["time"]}
    usage = now.get("kv_cache_usage")
    rate = (now.get("rates") or {}).get("requests_finished_per_s")
    text = "%s: %s %s kv_cache=%s running=%s waiting=%s requests/s=%s causes=%s%s" % (
        inst["name"], diagnosis["verdict"], diagnosis["state"] or "-",
        "%.1f%%" % (usage * 100) if usage is not None else "n/a",
        now.get("requests_running"), now.get("requests_waiting"),
        "%.2f" % rate if rate is not None else "n/a",
        ",".join(line["cause_ids"]) or "none",
        (" trends=" + ",".join(line["trend_ids"])) if line["trend_ids"] else "")
    return line, result, WARNING if diagnosis["verdict"] != "healthy" else INFO, text


def _sample_failed(inst, exc):
    """What is recorded for an instance whose round raised: an error for it alone, never
    healthy (the monitor cannot vouch for it); the other instances are sampled as usual."""
    name = str(inst.get("name", "?")) if isinstance(inst, dict) else "?"
    error = scrub("sampling failed: %s: %s" % (type(exc).__name__, exc))
    url = inst.get("url") if isinstance(inst, dict) else None
    now = {"url": redact_url(url) if isinstance(url, str) else None,
           "time": round(time.time(), 3), "healthy": False, "error": error}
    line = dict(now, instance=name, verdict="unhealthy", state=None, cause_ids=[], trend_ids=[])
    result = {"instance": name, "snapshot": None, "time": now["time"], "trends": {},
              "sustained": [], "diagnosis": {"verdict": "unhealthy", "state": None, "causes": [],
                                             "window_seconds": 0.0}}
    return line, result, ERR, "%s: %s (recorded as an error for this instance)" % (name, error)


def sample(args):
    """One monitor round: sample each instance, diagnose with its recent history, write the
    history line, the textfile, and one readable line per instance. One instance failing
    (whatever it raised) is logged and recorded for that instance; the others still are."""
    cfg = load_config(args.config)
    history_path = cfg["history"]
    history = _read_history(history_path)
    window = max(2, int(cfg.get("window", 3)))
    results, new_lines = [], []
    instances = load_instances(cfg)
    gpus = sample_gpus(cfg, instances)
    for inst in instances:
        try:
            line, result, level, text = _sample_one(cfg, inst, history, window, gpus)
        except Exception as exc:  # one instance must never stop the round for the others
            line, result, level, text = _sample_failed(inst, exc)
        new_lines.append(line)
        results.append(result)
        log(level, text)
    os.makedirs(os.path.dirname(history_path), exist_ok=True)
    _rotate(history_path, int(cfg.get("history_max_bytes", 10 * 1024 * 1024)),
            int(cfg.get("history_keep", 3)))
    with open(history_path, "a") as f:
        for line in new_lines:
            f.write(json.dumps(line, sort_keys=True) + "\n")
    # readable like the textfile (metrics and causes, no secret): the watchdog and the restart
    # guard read it as root without capabilities, which the monitor's UMask=0077 would lock out
    os.chmod(history_path, 0o644)
    if cfg.get("textfile"):
        os.makedirs(os.path.dirname(cfg["textfile"]), exist_ok=True)
        _atomic_write(cfg["textfile"], render(results, gpus=gpus))
    return 0


def sample_gpus(cfg, instances):
    """The monitor round's GPU reading, or None without NVML (a CPU host: nothing is recorded).
    Judged against the last round's reading (NVLink error growth), which it then replaces; each
    degraded or unhealthy GPU gets a journal line. Never fails the round."""
    venv = next((i.get("venv") for i in instances if isinstance(i, dict)), None)
    path = gpu_state_path(cfg)
    previous = load_gpu_state(path) if path else None
    gpus = read_gpus(venv, xid_wait_ms(cfg), dict((_gpu_key(g), g) for g in previous["gpus"]) if previous else None)
    if gpus is None:
        return None
    for finding in health_findings(gpus):
        log(ERR if finding["verdict"] == "unhealthy" else WARNING, finding["text"])
    if path:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            save_gpu_state(path, gpus, time.time())
        except OSError as exc:
            log(WARNING, "cannot keep the GPU reading in %s: %s" % (path, exc))
    return gpus


DAY = 24 * 3600


def own_memory_point(inst):
    """This run's own reading of an instance's memory (root reads /proc and NVML), as a line of
    the watchdog's own record: {'instance', 'time', 'unit_memory'}; None for a unit not loaded."""
    state = unit_state(inst["unit"]) if inst.get("unit") else {}
    if not state.get("ActiveState"):
        return None
    return {"instance": inst["name"], "time": round(time.time(), 3),
            "unit_memory": unit_memory(state, nvml=load_nvml(inst.get("venv")))}


def fresh_causes(cfg, monitor, inst, wanted, memory_points):
    """The causes among `wanted` that this process finds itself, now: a gate window of its own
    (as the guard's when_degraded takes it) for the causes a sample shows, and memory_growth
    over the watchdog's own memory record (`memory_points`, root's readings). The monitor's
    history is written by its unprivileged user: it says where to look, never what to do."""
    found = set()
    if any(c != "memory_growth" for c in wanted):
        unit = inst.get("unit")
        result = run_gate(inst["url"], cfg.get("gate_samples", 3), cfg.get("gate_interval", 2),
                          inst.get("max_num_seqs"), os.environ.get("VLLM_API_KEY"),
                          limits=inst.get("limits"), tls=inst.get("tls"),
                          observe=lambda: head_links(unit_state, unit, inst.get("port"), inst.get("group"),
                                                     inst.get("group_local_engines")),
                          gpu_health=decision_gpus(cfg, inst)[0])
        found.update(c["id"] for c in result["causes"])
    if "memory_growth" in wanted and memory_growth(memory_points, monitor.get("memory")):
        found.add("memory_growth")
    return found & set(wanted)


def watchdog(args):
    """After a monitor round (its unit's OnSuccess=): restart, through the drain-aware guard, an
    instance whose monitor samples have all named a cause a restart cures for `for_seconds`; at
    most `max_per_day` restarts on this host in 24 h, one instance a run, one decision per
    instance per `for_seconds`. restart_one leaves a stopped, sleeping or just-started unit
    alone. Each decision goes to the journal and, as a line {'instance', 'time', 'outcome',
    'causes'}, to the watchdog's own history beside its state (the monitor's history belongs to
    the monitor's unprivileged user; this runs as root without capabilities, so it only reads it).

    That history is the unprivileged user's word: it never restarts anything alone. Before a
    restart this process samples the instance itself (fresh_causes) and acts on the causes it
    confirms; memory_growth is judged on the watchdog's own memory record, read each run.

    An instance on an unhealthy GPU is never restarted (a restart does not cure the GPU):
    restart_one runs the drain commands instead and the line records outcome 'gpu-unhealthy'
    (or 'drain-failed') with the GPUs and their reason ids."""
    cfg = load_config(args.config)
    monitor = load_config(cfg["monitor_config"])
    history = _read_history(monitor["history"])
    state_path = cfg["state"]
    actions_path = os.path.join(os.path.dirname(state_path), "actions.jsonl")
    memory_path = os.path.join(os.path.dirname(state_path), "memory.jsonl")
    acted = _read_history(actions_path)
    own_memory, new_memory = [], []
    if "memory_growth" in cfg.get("causes", []):
        own_memory = _read_history(memory_path)
    now = time.time()
    try:
        with open(state_path) as f:
            done = [t for t in json.load(f).get("restarts", []) if isinstance(t, (int, float)) and now - t < DAY]
    except (OSError, ValueError, AttributeError):
        done = []
    for_seconds = float(cfg.get("for_seconds", 600))
    actions = []
    for inst in load_instances(cfg):
        if not isinstance(inst, dict) or "url" not in inst:
            continue
        if "memory_growth" in cfg.get("causes", []):
            point = own_memory_point(inst)
            if point:
                new_memory.append(point)
        samples = [h for h in history if h.get("instance") == inst["name"]]
        found = persisting_causes(samples, now, cfg.get("causes", []), for_seconds)
        if not found:
            continue
        # one decision per instance per for_seconds: a cause that outlives a restart (or a unit
        # left alone: stopped, sleeping, loading) is looked at again after as long, not each round
        last = [a["time"] for a in acted if a.get("instance") == inst["name"] and isinstance(a.get("time"), (int, float))]
        if last and now - last[-1] < for_seconds:
            continue
        what = ", ".join("%s for %.0fs" % kv for kv in sorted(found.items()))
        if len(done) >= int(cfg.get("max_per_day", 2)):
            log(WARNING, "%s: watchdog: not restarting (%s): %d watchdog restart(s) on this host in "
                "24 h, the most allowed (vllm_monitor_watchdog_max_per_day)" % (inst["unit"], what, len(done)))
            outcome = "rate-limited"
        else:
            try:
                mine = [p for p in own_memory + new_memory if p.get("instance") == inst["name"]]
                confirmed = fresh_causes(cfg, monitor, inst, sorted(found), mine)
                if not confirmed:
                    log(INFO, "%s: watchdog: not restarting: the monitor's history names %s, but this "
                        "run's own sample does not confirm it" % (inst["unit"], what))
                    outcome = "unconfirmed"
                else:
                    what = ", ".join("%s for %.0fs" % kv for kv in sorted(found.items()) if kv[0] in confirmed)
                    outcome = restart_one(dict(cfg, mode="watchdog", reason=what + " (a restart cures it)"), inst)
            except Exception as exc:  # reported as this instance's failure, never a traceback
                log(ERR, "%s: watchdog failed: %s" % (inst["unit"], scrub("%s: %s" % (type(exc).__name__, exc))))
                outcome = "failed"
            if outcome in ("restarted", "failed"):
                done.append(now)
        action = {"instance": inst["name"], "time": round(time.time(), 3), "outcome": outcome, "causes": found}
        if outcome in ("gpu-unhealthy", "drain-failed") and inst["name"] in _GPU_HOLDS:
            # not restarted, drained: which GPU and why (the journal line says what to do)
            action.update(_GPU_HOLDS[inst["name"]])
        actions.append(action)
        if outcome in ("restarted", "failed"):
            break  # one restart a run: the next round sees what it did
    if new_memory:
        os.makedirs(os.path.dirname(state_path), exist_ok=True)
        _rotate(memory_path, 4 * 1024 * 1024, 1)
        with open(memory_path, "a") as f:
            for line in new_memory:
                f.write(json.dumps(line, sort_keys=True) + "\n")
    if actions:
        os.makedirs(os.path.dirname(state_path), exist_ok=True)
        _atomic_write(state_path, json.dumps({"restarts": done}) + "\n")
        _rotate(actions_path, 1024 * 1024, 2)
        with open(actions_path, "a") as f:
            for line in actions:
                f.write(json.dumps(line, sort_keys=True) + "\n")
    return 1 if any(a["outcome"] in ("failed", "drain-failed") for a in actions) else 0


def _number(name, rule, kind=float):
    """argparse type: a finite number within `rule` (see _probe.LIMITS), the flag named."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError("%s must be a number, got %r" % (name, text))
        error = check_range(name, value, rule)
        if error:
            raise argparse.ArgumentTypeError(error)
        return value
    return parse


def _base_url(text):
    error = check_url(text, "--url")
    if error:
        raise argparse.ArgumentTypeError(error)
    return text


# wait-healthy's whole wait (a model load can take many minutes; 0: one probe), warm-up's
# requests, the pause between health probes (0: probe again at once)
_WAIT = (0, True, 86400, "0 or more seconds")
_LONG_TIMEOUT = (0, False, 86400, "a positive number of seconds")
_DELAY = (0, True, 3600, "0 or more seconds")
_MAX_TOKENS = (1, True, 100000, "1 or more")
_ENGINES = (1, True, 4096, "1 or more")


def _add_tls_options(p):
    p.add_argument("--ca-file", help="https: the CA bundle that signed the server's certificate "
                   "(default: the system's trust store)")
    p.add_argument("--client-cert", help="https: a client certificate to present (PEM)")
    p.add_argument("--client-key", help="https: the client certificate's key (PEM)")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="kvfleet-vllm", description=__doc__.split("\n\n", maxsplit=1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("wait-healthy", help="wait until a vLLM unit answers /health")
    p.add_argument("--unit", required=True)
    p.add_argument("--url", required=True, type=_base_url)
    p.add_argument("--timeout", type=_number("--timeout", _WAIT), default=900)
    p.add_argument("--delay", type=_number("--delay", _DELAY), default=2)
    p.add_argument("--probe-timeout", type=_number("--probe-timeout", LIMITS["timeout"]), default=3)
    _add_tls_options(p)
    p.set_defaults(func=wait_healthy)
    p = sub.add_parser("stale", help="is a unit's running process older than its files? (JSON)")
    p.add_argument("--unit", required=True)
    p.add_argument("--file", action="append", help="a file the process read at start (repeat)")
    p.add_argument("--applied", help="the stamp of `applied` (default: %s/UNIT.json)" % APPLIED_DIR)
    p.set_defaults(func=stale_command)
    p = sub.add_parser("start", help="clear, enable and start units, and ask whether each running one is stale (JSON)")
    p.add_argument("--spec", required=True, help='JSON: [{"unit": U, "files": [F, ...]}, ...]')
    p.add_argument("--enabled", choices=("yes", "no"), default="yes")
    p.add_argument("--reload", action="store_true", help="systemctl daemon-reload first")
    p.add_argument("--check", action="store_true", help="say what would be done; change nothing")
    p.add_argument("--remove-others", metavar="CONFIG_DIR",
                   help="first stop and delete the %s units not in --spec (their files in CONFIG_DIR too)" % LAYOUT["unit_glob"])
    p.set_defaults(func=start_command)
    p = sub.add_parser("converged", help="does the host hold what its last verified deploy left? (JSON; fingerprint on stdin)")
    p.add_argument("--state", default=LAYOUT["converged_state"])
    p.add_argument("--record", action="store_true", help="write the state instead (after a verified deploy)")
    p.add_argument("--spec", help='with --record, JSON: {"files": [...], "trees": [...], "stat_trees": [...], '
                   '"globs": ["DIR/PATTERN"], "absent": [...], "units": [{"unit": U, "files": [...]}]}')
    p.set_defaults(func=converged_command)
    p = sub.add_parser("applied", help="stamp files the running process already serves (a runtime change)")
    p.add_argument("--unit", required=True)
    p.add_argument("--file", action="append", required=True, help="a file whose content it serves (repeat)")
    p.add_argument("--stamp", help="where the stamp goes (default: %s/UNIT.json)" % APPLIED_DIR)
    p.set_defaults(func=applied_command)
    p = sub.add_parser("gate", help="sample a server and diagnose its KV cache (JSON)")
    p.add_argument("--url", required=True, type=_base_url)
    p.add_argument("--samples", type=_number("--samples", LIMITS["samples"], int), default=3)
    p.add_argument("--interval", type=_number("--interval", LIMITS["interval"]), default=2)
    p.add_argument("--max-num-seqs", type=_number("--max-num-seqs", (1, True, 2 ** 31, "1 or more"), int))
    p.add_argument("--probe-timeout", type=_number("--probe-timeout", LIMITS["timeout"]), default=10)
    p.add_argument("--gpus", metavar="DEVICES",
                   help="the server's GPUs as CUDA_VISIBLE_DEVICES names them ('all' for every GPU): "
                   "their NVML health joins the diagnosis (gpu_unhealthy)")
    p.add_argument("--venv", help="--gpus: the vLLM venv whose pynvml to use where the system has none")
    _add_tls_options(p)
    p.set_defaults(func=gate)
    p = sub.add_parser("restart-guard", help="drain-aware restart of this host's instances")
    p.add_argument("--config", required=True)
    p.set_defaults(func=restart_guard)
    p = sub.add_parser("monitor", help="one monitor round: history line and textfile")
    p.add_argument("--config", required=True)
    p.set_defaults(func=sample)
    p = sub.add_parser("trends", help="trends and sustained causes from the monitor history (JSON)")
    p.add_argument("--config", required=True)
    p.set_defaults(func=trends_report)
    p = sub.add_parser("watchdog", help="restart an instance whose monitor samples all name a cause a restart cures")
    p.add_argument("--config", required=True)
    p.set_defaults(func=watchdog)
    p = sub.add_parser("warmup", help="one short completion; fails unless tokens come back (JSON)")
    p.add_argument("--url", required=True, type=_base_url)
    p.add_argument("--unit", help="the instance's unit: the API key goes only to a listener that is its own server")
    p.add_argument("--env-file", help="read VLLM_API_KEY from this file (the instance's 0600 env file)")
    p.add_argument("--prompt", default="Hello")
    p.add_argument("--max-tokens", type=_number("--max-tokens", _MAX_TOKENS, int), default=4)
    p.add_argument("--timeout", type=_number("--timeout", _LONG_TIMEOUT), default=120)
    p.add_argument("--engines", type=_number("--engines", _ENGINES, int), default=1,
                   help="a serving group head's engines: one completion pinned to each (X-data-parallel-rank)")
    _add_tls_options(p)
    p.set_defaults(func=warmup)
    args = parser.parse_args(argv)
    if args.command == "gate":
        error = check_window(args.samples, args.interval, ("--samples", "--interval"))
        if error:
            parser.error(error)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
