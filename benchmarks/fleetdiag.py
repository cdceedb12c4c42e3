"""kvfleet.vllm.diagnose over generated fleets: per host (one fork per host) against from the
controller (one cache_gate over every instance), in the same run. Used by bench.py (fleetdiag).

Every host has `ansible_connection: local` and one instance whose port is served by ONE replay
process (benchmarks/replay_server.py) with real vLLM 0.32.0 CPU /metrics captures; every 20th
port is left closed (a dead server: engine_down in both modes). Wall time, and CPU of the
ansible-playbook process and everything it ran (os.wait4), per host.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CAPTURES = [os.path.join(ROOT, "tests", "fixtures", "metrics", "vllm-0.32.0-cpu-idle-%d.txt" % i)
            for i in range(3)]
BASE_PORT = 23000
DEAD_EVERY = 20
# the fields of a row that depend on when it was read, not on what was read
_TIMING = ("gpus", "trends", "sustained", "trend_evidence")


def inventory(path, hosts):
    data = {"all": {"hosts": {}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "vllm_server_device": "cpu", "vllm_server_model": "/models/tiny-llama",
        "vllm_server_block_size": 32, "vllm_server_kv_cache_memory_bytes": 8 * 1024 * 1024,
        "vllm_server_max_num_seqs": 64, "vllm_server_host": "127.0.0.1"}}}
    for i in range(hosts):
        data["all"]["hosts"]["gpu-%04d" % i] = {
            "vllm_server_instances": [{"name": "main", "port": BASE_PORT + i}]}
    with open(path, "w") as f:
        json.dump(data, f)


def fact_cache(folder, hosts):
    """The deployment records as a jsonfile fact cache holds them after a gather."""
    os.makedirs(folder, exist_ok=True)
    for i in range(hosts):
        port = BASE_PORT + i
        record = {"name": "main", "unit": "vllm-main.service", "url": "http://127.0.0.1:%d" % port,
                  "port": port, "bind": "127.0.0.1", "max_num_seqs": 64,
                  "limits": {"max_num_seqs": 64, "max_num_batched_tokens": None,
                             "max_num_active_seqs": None, "max_model_len": None},
                  "drain_seconds": 0, "env_file": "/etc/vllm/main.env"}
        facts = {"ansible_local": {"kvfleet_vllm_server": {"current": {"instances": [record]}}}}
        # ansible-core 2.19's jsonfile layout (what a gather with this cache writes)
        with open(os.path.join(folder, "s1_gpu-%04d" % i), "w") as f:
            json.dump({"__payload__": json.dumps(facts)}, f)


def run_playbook(inv, report, extra, env):
    cmd = ["ansible-playbook", "-i", inv, "kvfleet.vllm.diagnose",
           "-e", "vllm_diagnose_report_dir=%s" % report] + sum((["-e", e] for e in extra), [])
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    out = proc.stdout.read()
    unused, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.time() - t0
    if proc.returncode != 0:
        sys.stderr.write(out.decode(errors="replace")[-4000:])
        raise RuntimeError("ansible-playbook failed (%d): %s" % (proc.returncode, " ".join(cmd)))
    with open(os.path.join(report, "kvfleet-vllm-diagnosis.json")) as f:
        rows = json.load(f)["instances"]
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rows": rows}


def comparable(rows):
    return sorted((r["host"], r["instance"], r["verdict"], r["state"], r["version"],
                   tuple(c["id"] for c in r["causes"] or []), r["kv_cache_usage"],
                   r["requests_running"], r["requests_waiting"], r["block_size"],
                   r["num_gpu_blocks"], bool(r["error"])) for r in rows)


def bench(sizes, per_host_sizes, forks=5, concurrency=64, read_records_sizes=(), baselines=()):
    """Returns {'rows': [...]} with one entry per (hosts, mode). baselines: [(label,
    ANSIBLE_COLLECTIONS_PATH)]: the controller mode with records from the fact cache again, with
    that collection, at every size (before and after in the same run)."""
    work = tempfile.mkdtemp(prefix="kvfleet-fleetdiag-")
    biggest = max(sizes)
    server = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "replay_server.py"), "--port", str(BASE_PORT),
         "--count", str(biggest), "--skip", ",".join(str(i) for i in range(0, biggest, DEAD_EVERY))]
        + sum((["--capture", c] for c in CAPTURES), []), stdout=subprocess.PIPE, text=True)
    out = []
    try:
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError("the replay server did not start")
        for hosts in sizes:
            inv = os.path.join(work, "hosts-%d.json" % hosts)
            inventory(inv, hosts)
            cache = os.path.join(work, "facts-%d" % hosts)
            fact_cache(cache, hosts)
            base_env = dict(os.environ, ANSIBLE_FORKS=str(forks), ANSIBLE_LOCALHOST_WARNING="0",
                            ANSIBLE_INVENTORY_UNPARSED_WARNING="0", ANSIBLE_HOST_KEY_CHECKING="0")
            runs = []
            if hosts in per_host_sizes:
                runs.append(("per host", [], base_env))
            if hosts in read_records_sizes:
                runs.append(("controller, records read per host",
                             ["vllm_diagnose_from_controller=true",
                              "vllm_diagnose_concurrency=%d" % concurrency], base_env))
            runs.append(("controller, records from the fact cache",
                         ["vllm_diagnose_from_controller=true", "vllm_diagnose_read_records=false",
                          "vllm_diagnose_concurrency=%d" % concurrency],
                         dict(base_env, ANSIBLE_CACHE_PLUGIN="jsonfile",
                              ANSIBLE_CACHE_PLUGIN_CONNECTION=cache,
                              ANSIBLE_CACHE_PLUGIN_TIMEOUT="0")))
            for label, path in baselines:
                mode, extra, env = runs[-1]
                runs.append(("%s, collection %s" % (mode, label), extra,
                             dict(env, ANSIBLE_COLLECTIONS_PATH=path)))
            results = {}
            for mode, extra, env in runs:
                report = os.path.join(work, "report-%d-%s" % (hosts, mode.replace(" ", "_").replace(",", "")))
                print("[bench] fleetdiag: %d hosts, %s ..." % (hosts, mode), flush=True)
                res = run_playbook(inv, report, extra, env)
                results[mode] = res
                unhealthy = sum(1 for r in res["rows"] if r["verdict"] != "healthy")
                out.append({"hosts": hosts, "mode": mode, "forks": forks,
                            "concurrency": concurrency if mode != "per host" else None,
                            "wall_s": res["wall_s"], "cpu_s": res["cpu_s"],
                            "cpu_ms_per_host": res["cpu_s"] / hosts * 1000,
                            "instances": len(res["rows"]), "not_healthy": unhealthy})
                print("[bench] fleetdiag: %d hosts, %s: %.1f s wall, %.1f s CPU, %d rows, %d not healthy"
                      % (hosts, mode, res["wall_s"], res["cpu_s"], len(res["rows"]), unhealthy), flush=True)
            ref = results.get("per host")
            for mode, res in results.items():
                entry = next(e for e in out if e["hosts"] == hosts and e["mode"] == mode)
                entry["same_rows_as_per_host"] = (comparable(res["rows"]) == comparable(ref["rows"])) if ref else None
                if ref and not entry["same_rows_as_per_host"]:
                    print("[bench] fleetdiag: rows differ: %s" % [
                        (a, b) for a, b in zip(comparable(res["rows"]), comparable(ref["rows"])) if a != b][:3])
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    return {"rows": out, "dead_every": DEAD_EVERY, "base_capture": "vllm-0.32.0-cpu-idle-{0,1,2}.txt",
            "baselines": [label for label, unused in baselines]}


if __name__ == "__main__":
    sizes = [int(x) for x in (sys.argv[1:] or ["5"])]
    res = bench(sizes, sizes, read_records_sizes=sizes)
    print(json.dumps(res, indent=1))
