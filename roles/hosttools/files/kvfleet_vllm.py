# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kvfleet-vllm: the collection's probe and diagnosis, as a command on managed hosts.

The roles ship this file with the collection's own module_utils (_prom, _vllm_metrics, _probe,
_diagnosis) next to it, so systemd units (restart guard, monitor, health wait) use the same parser
and rules as the modules. Standard library only.

  kvfleet-vllm wait-healthy --unit vllm-main.service --url http://127.0.0.1:8000 [--timeout 900]
  kvfleet-vllm gate --url URL [--samples 3] [--interval 2] [--max-num-seqs N]   (JSON on stdout)
  kvfleet-vllm restart-guard --config /etc/kvfleet/restart.json   (scheduled restart, drain-aware)
  kvfleet-vllm monitor --config /etc/kvfleet/monitor.json         (one monitor round: history + textfile)
  kvfleet-vllm trends --config /etc/kvfleet/monitor.json          (trends from the history, JSON)
The restart guard, the monitor and trends read the instances from the deployment record that the
configuration names (the server role writes it; one model of an instance, no copies).
  kvfleet-vllm warmup --url URL [--env-file /etc/vllm/main.env]    (one short completion, JSON)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "lib"))

from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import (  # noqa: E402
    add_rates, diagnose, since_last_down)
from ansible_collections.kvfleet.vllm.plugins.module_utils._probe import (  # noqa: E402
    Response, sample as probe_sample, sample_window)
from ansible_collections.kvfleet.vllm.plugins.module_utils._textfile import render  # noqa: E402
from ansible_collections.kvfleet.vllm.plugins.module_utils._trends import (  # noqa: E402
    sustained_causes, trends)

# journald reads a "<N>" prefix as the syslog priority of the line
ERR, WARNING, INFO = "<3>", "<4>", "<6>"


def log(level, text):
    stream = sys.stderr if level == ERR else sys.stdout
    stream.write(level + text + "\n")
    stream.flush()


def make_fetcher(base_url, timeout, api_key=None):
    headers = {"Authorization": "Bearer %s" % api_key} if api_key else {}

    def fetch(path):
        req = urllib.request.Request(base_url.rstrip("/") + path, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return Response(resp.status, resp.read())
        except urllib.error.HTTPError as exc:
            return Response(exc.code, b"", str(exc.reason))
        except urllib.error.URLError as exc:
            return Response(None, b"", str(exc.reason))
        except OSError as exc:  # timeouts, resets
            return Response(None, b"", "%s: %s" % (type(exc).__name__, exc))
    return fetch


def unit_state(unit):
    out = subprocess.run(["systemctl", "show", "-p", "ActiveState,SubState,NRestarts,Result", unit],
                         capture_output=True, text=True, check=False).stdout
    state = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    state["NRestarts"] = int(state.get("NRestarts") or 0)
    return state


def journal_tail(unit, since=None, lines=15, scan=400):
    """The unit's error lines since `since` (epoch) first (a Python traceback ends with its least
    useful line), then its last lines."""
    window = ["--since", "@%d" % (since - 1)] if since else []
    out = subprocess.run(["journalctl", "-u", unit, "-n", str(scan), "--no-pager", "-o", "cat"] + window,
                         capture_output=True, text=True, check=False).stdout.splitlines()
    errors = [line for line in out if re.search(r"\b\w*(Error|Exception)\b:|\bERROR\b", line)]
    text = "\n".join(out[-lines:])
    if errors:
        text = "error lines:\n%s\nlast lines:\n%s" % ("\n".join(errors[-8:]), text)
    return text


def wait_healthy(args):
    """Exit 0 once /health answers 200; exit 1 at once if the unit fails or restarts."""
    start = time.time()
    restarts = unit_state(args.unit)["NRestarts"]
    fetch = make_fetcher(args.url, args.probe_timeout)
    while True:
        state = unit_state(args.unit)
        if state.get("ActiveState") == "failed" or state["NRestarts"] > restarts:
            print("%s %s (result %s, %d restart(s)) before it answered /health; its log:\n%s"
                  % (args.unit, "failed" if state.get("ActiveState") == "failed" else "restarted",
                     state.get("Result"), state["NRestarts"] - restarts, journal_tail(args.unit, start)),
                  file=sys.stderr)
            return 1
        if fetch("/health").status == 200:
            print("%s healthy after %.1fs" % (args.unit, time.time() - start))
            return 0
        if time.time() - start > args.timeout:
            print("%s did not answer /health within %ss; its log:\n%s"
                  % (args.unit, args.timeout, journal_tail(args.unit, start)), file=sys.stderr)
            return 1
        time.sleep(args.delay)


def take(url, api_key=None, timeout=10):
    """One sample, or the record of a server that could not be read."""
    return probe_sample(make_fetcher(url, timeout, api_key), url)


def run_gate(url, samples=3, interval=2.0, max_num_seqs=None, api_key=None, timeout=10):
    snaps = sample_window(make_fetcher(url, timeout, api_key), url, samples, interval)
    add_rates(snaps)
    result = diagnose(snaps, max_num_seqs=max_num_seqs)
    result["samples"] = snaps
    return result


def gate(args):
    """Print the gate result as JSON; exit 0 healthy, 1 degraded, 2 unhealthy."""
    result = run_gate(args.url, args.samples, args.interval, args.max_num_seqs,
                      os.environ.get("VLLM_API_KEY"), args.probe_timeout)
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

    The API key comes from the instance's environment file (or VLLM_API_KEY), never from the
    command line, where ps and Ansible's -vvv output would show it.
    """
    key = os.environ.get("VLLM_API_KEY")
    if args.env_file:
        key = read_env_file(args.env_file).get("VLLM_API_KEY", key)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer %s" % key
    base = args.url.rstrip("/")
    start = time.time()
    result = {"url": base}
    try:
        req = urllib.request.Request(base + "/v1/models", headers=headers)
        with urllib.request.urlopen(req, timeout=args.timeout) as resp:
            result["model"] = json.load(resp)["data"][0]["id"]
        body = json.dumps({"model": result["model"], "prompt": args.prompt,
                           "max_tokens": args.max_tokens, "temperature": 0}).encode()
        req = urllib.request.Request(base + "/v1/completions", data=body, headers=headers)
        with urllib.request.urlopen(req, timeout=args.timeout) as resp:
            answer = json.load(resp)
        choice = answer["choices"][0]
        result.update(finish_reason=choice.get("finish_reason"),
                      completion_tokens=(answer.get("usage") or {}).get("completion_tokens"))
    except urllib.error.HTTPError as exc:
        result["error"] = "HTTP %s %s: %s" % (exc.code, exc.reason, exc.read()[:300].decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError) as exc:
        result["error"] = "%s: %s" % (type(exc).__name__, exc)
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
    out = []
    for inst in (record.get("current") or {}).get("instances") or []:
        name = inst["name"]
        out.append(dict(inst, unit=inst.get("unit") or "vllm-%s.service" % name,  # records before 0.3.0
                        graceful=(inst.get("drain_seconds") or 0) > 0))
    if not out:
        raise SystemExit("the deployment record %s lists no instances" % path)
    return out


def _hooks(commands, inst, what):
    """Run operator commands (load balancer drain/undrain); the first failure stops."""
    env = dict(os.environ, KVFLEET_INSTANCE=inst["name"], KVFLEET_UNIT=inst["unit"],
               KVFLEET_URL=inst["url"])
    # Commands are logged by their number, never their text: they may hold credentials.
    for number, cmd in enumerate(commands, 1):
        proc = subprocess.run(cmd, shell=True, env=env, capture_output=True, text=True,
                              check=False, timeout=600)
        if proc.returncode:
            log(ERR, "%s: %s command %d of %d failed (exit %d); its last output:\n%s" % (
                inst["unit"], what, number, len(commands), proc.returncode,
                (proc.stderr or proc.stdout)[-2000:]))
            return False
        log(INFO, "%s: %s command %d of %d done" % (inst["unit"], what, number, len(commands)))
    return True


def _wait_idle(inst, timeout):
    """Wait, bounded, until nothing runs or waits. Returns the last snapshot."""
    deadline = time.time() + timeout
    while True:
        snap = take(inst["url"])
        busy = (snap.get("requests_running") or 0) + (snap.get("requests_waiting") or 0)
        if snap.get("error") or busy == 0 or time.time() >= deadline:
            return snap
        time.sleep(2)


def restart_one(cfg, inst):
    """Restart one instance the drain-aware way. Returns 'skipped', 'restarted' or 'failed'."""
    unit = inst["unit"]
    if cfg.get("mode") == "when_degraded":
        result = run_gate(inst["url"], cfg.get("gate_samples", 3), cfg.get("gate_interval", 2),
                          inst.get("max_num_seqs"), os.environ.get("VLLM_API_KEY"))
        found = [c["id"] for c in result["causes"]]
        curing = [c for c in found if c in cfg.get("causes", [])]
        if not curing:
            log(INFO, "%s: not restarting: verdict %s, causes %s; a restart cures only %s"
                % (unit, result["verdict"], found or "none", ", ".join(cfg.get("causes", []))))
            return "skipped"
        log(WARNING, "%s: restarting: %s found, which a restart cures" % (unit, ", ".join(curing)))
    else:
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
    proc = subprocess.run(["systemctl", "restart", unit], capture_output=True, text=True,
                          check=False)
    if proc.returncode:
        log(ERR, "%s: systemctl restart failed: %s" % (unit, proc.stderr.strip()))
        return "failed"
    waiter = argparse.Namespace(unit=unit, url=inst["url"], timeout=cfg.get("health_timeout", 900),
                                delay=2, probe_timeout=3)
    if wait_healthy(waiter) != 0:
        log(ERR, "%s: did not come back healthy after the restart; left out of the load "
            "balancer (post-restart commands not run)" % unit)
        return "failed"
    log(INFO, "%s: restarted and healthy in %.1fs (drain wait %.1fs)" % (unit, time.time() - t1, t1 - t0))
    if not _hooks(cfg.get("post_commands", []), inst, "post-restart"):
        return "failed"
    return "restarted"


def restart_guard(args):
    """Restart the host's instances one after the other; exit 1 if any failed."""
    cfg = load_config(args.config)
    outcomes = {}
    for inst in load_instances(cfg):
        outcomes[inst["unit"]] = restart_one(cfg, inst)
        if outcomes[inst["unit"]] == "failed":
            break  # never take a second instance down after one failed to come back
    log(INFO, "restart guard: %s" % ", ".join("%s %s" % kv for kv in sorted(outcomes.items())))
    return 1 if "failed" in outcomes.values() else 0


def _read_history(path, limit_bytes=4 * 1024 * 1024):
    """The newest lines of the history (the tail of the file is enough for trends)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit_bytes))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    lines = data.splitlines()
    if size > limit_bytes:
        lines = lines[1:]  # the first one is cut
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
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


def _atomic_write(path, text):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
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
        found, sustained = history_findings(cfg, past)
        out[inst["name"]] = {"points": len(past), "sustained": sustained,
                             "trends": sorted(t for t, v in found.items() if v),
                             "trend_evidence": dict((t, v) for t, v in found.items() if v)}
    json.dump(out, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


def sample(args):
    """One monitor round: sample each instance, diagnose with its recent history, write the
    history line, the textfile, and one readable line per instance."""
    cfg = load_config(args.config)
    history_path = cfg["history"]
    history = _read_history(history_path)
    window = max(2, int(cfg.get("window", 3)))
    results, new_lines = [], []
    for inst in load_instances(cfg):
        past = [h for h in history if h.get("instance") == inst["name"]]
        now = take(inst["url"], os.environ.get("VLLM_API_KEY"))
        add_rates(([dict(past[-1])] if past else []) + [now])
        recent = since_last_down([dict(h) for h in past[-(window - 1):]] + [now])
        diagnosis = diagnose(recent, max_num_seqs=inst.get("max_num_seqs"))
        found_trends, sustained = history_findings(cfg, past, now, diagnosis)
        line = dict(now, instance=inst["name"], verdict=diagnosis["verdict"],
                    state=diagnosis["state"], cause_ids=[c["id"] for c in diagnosis["causes"]],
                    trend_ids=sorted(t for t, v in found_trends.items() if v))
        new_lines.append(line)
        results.append({"instance": inst["name"], "snapshot": None if now.get("error") else now,
                        "diagnosis": diagnosis, "trends": found_trends, "sustained": sustained,
                        "time": now["time"]})
        usage = now.get("kv_cache_usage")
        rate = (now.get("rates") or {}).get("requests_finished_per_s")
        log(WARNING if diagnosis["verdict"] != "healthy" else INFO,
            "%s: %s %s kv_cache=%s running=%s waiting=%s requests/s=%s causes=%s%s" % (
                inst["name"], diagnosis["verdict"], diagnosis["state"] or "-",
                "%.1f%%" % (usage * 100) if usage is not None else "n/a",
                now.get("requests_running"), now.get("requests_waiting"),
                "%.2f" % rate if rate is not None else "n/a",
                ",".join(line["cause_ids"]) or "none",
                (" trends=" + ",".join(line["trend_ids"])) if line["trend_ids"] else ""))
    os.makedirs(os.path.dirname(history_path), exist_ok=True)
    _rotate(history_path, int(cfg.get("history_max_bytes", 10 * 1024 * 1024)),
            int(cfg.get("history_keep", 3)))
    with open(history_path, "a") as f:
        for line in new_lines:
            f.write(json.dumps(line, sort_keys=True) + "\n")
    if cfg.get("textfile"):
        os.makedirs(os.path.dirname(cfg["textfile"]), exist_ok=True)
        _atomic_write(cfg["textfile"], render(results))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="kvfleet-vllm", description=__doc__.split("\n\n", maxsplit=1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("wait-healthy", help="wait until a vLLM unit answers /health")
    p.add_argument("--unit", required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--delay", type=float, default=2)
    p.add_argument("--probe-timeout", type=float, default=3)
    p.set_defaults(func=wait_healthy)
    p = sub.add_parser("gate", help="sample a server and diagnose its KV cache (JSON)")
    p.add_argument("--url", required=True)
    p.add_argument("--samples", type=int, default=3)
    p.add_argument("--interval", type=float, default=2)
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--probe-timeout", type=float, default=10)
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
    p = sub.add_parser("warmup", help="one short completion; fails unless tokens come back (JSON)")
    p.add_argument("--url", required=True)
    p.add_argument("--env-file", help="read VLLM_API_KEY from this file (the instance's 0600 env file)")
    p.add_argument("--prompt", default="Hello")
    p.add_argument("--max-tokens", type=int, default=4)
    p.add_argument("--timeout", type=float, default=120)
    p.set_defaults(func=warmup)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
