"""kvfleet.vllm.deploy --check over generated fleets of 100 and 1000 hosts. Used by bench.py
(fleetcheck); needs the demo fleet (bash tests/demo.sh up).

The cheapest real stand-in for a big converged fleet: every generated host is an alias of one of
the demo's three deployed hosts (that host's own variables, `ansible_host` pointing at it), so
each alias is a real converged host that the deploy must read, check and decide about (the
untimed deploy before the check records each demo host as verified, so an alias is known
converged in one round trip, as a fleet the deploy keeps is), over the
same SSH connection with pipelining (aliases of one host share its ControlMaster, as hosts
behind one bastion would not: the connection set-up, three here, is not what is measured).
The hosts' side of the work runs in the three containers on this same machine, so the wall time
is an upper bound for the controller; the controller's CPU is measured apart: the
ansible-playbook process and everything it waited for (os.wait4; the SSH masters and the
containers are not its children).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time

NODES = ("kvfleet-node1", "kvfleet-node2", "kvfleet-node3")


def demo_hostvars(inventory, env):
    """{node: its variables} as the demo's inventory gives them (templates left as they are)."""
    out = subprocess.run(["ansible-inventory", "-i", inventory, "--list", "--export"], env=env, check=True,
                         capture_output=True, text=True).stdout
    data = json.loads(out)
    groups = {}
    for name, group in data.items():
        if name == "_meta":
            continue
        for host in group.get("hosts", []):
            groups.setdefault(host, []).append(name)
    hostvars = data["_meta"]["hostvars"]
    # group variables are where a group's hosts get them: --export keeps them in the groups
    return {node: {"vars": hostvars.get(node, {}), "groups": groups.get(node, [])} for node in NODES}, data


def alias_inventory(path, inventory, env, hosts):
    """An inventory of `hosts` aliases (gpu-0000...) of the demo's hosts, round robin."""
    nodes, data = demo_hostvars(inventory, env)
    out = {"all": {"vars": data.get("all", {}).get("vars", {}), "children": {}}}
    children = out["all"]["children"]
    for name, group in data.items():
        if name in ("_meta", "all", "ungrouped"):
            continue
        children[name] = {"vars": group.get("vars", {}), "hosts": {}}
    for i in range(hosts):
        node = NODES[i % len(NODES)]
        alias = "gpu-%04d" % i
        host = dict(nodes[node]["vars"], ansible_host=nodes[node]["vars"].get("ansible_host", node))
        for group in nodes[node]["groups"]:
            if group in children:
                children[group]["hosts"][alias] = host
    # the serving group of the fleet scenario's last play is two hosts, not aliases of them
    for name in ("serving_pair",):
        children.pop(name, None)
    with open(path, "w") as f:
        json.dump(out, f)


def run_check(inventory, report, env, forks, extra=()):
    """One --check run: wall, CPU of the playbook's process tree, the report's hosts."""
    cmd = ["ansible-playbook", "-i", inventory, "kvfleet.vllm.deploy", "--check", "-f", str(forks),
           "-e", "vllm_deploy_hosts=vllm", "-e", "vllm_deploy_report_dir=%s" % report] + list(extra)
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    out = proc.stdout.read()
    unused, status, usage = os.wait4(proc.pid, 0)
    wall = time.time() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.stderr.write(out.decode(errors="replace")[-4000:])
        raise RuntimeError("ansible-playbook --check failed: %s" % " ".join(cmd))
    try:
        with open(os.path.join(report, "kvfleet-vllm-deploy.json")) as f:
            hosts = json.load(f)["hosts"]
    except FileNotFoundError:
        # a collection from before the report was written in check mode: its summary table
        hosts = [{"host": m.group(1), "outcome": m.group(2), "plan": {"converged": m.group(2) == "unchanged"}}
                 for m in re.finditer(r"^\s*- (gpu-\d+)\s+\S+\s+.*?\s(unchanged|checked)\s+\d+",
                                      out.decode(errors="replace"), re.M)]
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "hosts": hosts}


def bench(sizes, demo_inventory, env, forks=(5,), baselines=(), extra=()):
    """rows: one per (hosts, forks, collection). baselines: [(label, ANSIBLE_COLLECTIONS_PATH)]
    run at the smallest size beside the collection as it is now. extra: -e arguments that make
    the inventory say what the demo hosts run (their converged settings)."""
    work = tempfile.mkdtemp(prefix="kvfleet-fleetcheck-")
    rows = []
    for hosts in sizes:
        inv = os.path.join(work, "hosts-%d.json" % hosts)
        alias_inventory(inv, demo_inventory, env, hosts)
        variants = [("now", env)] + ([(label, dict(env, ANSIBLE_COLLECTIONS_PATH=path)) for label, path in baselines]
                                     if hosts == min(sizes) else [])
        for code, run_env in variants:
            # untimed: the demo hosts converged with this collection (its host tools installed,
            # as on a fleet deployed with it), so that only the check itself is measured
            subprocess.run(["ansible-playbook", "-i", demo_inventory, "kvfleet.vllm.deploy", "-e", "vllm_deploy_hosts=vllm",
                            "-e", "vllm_deploy_report_dir=%s" % os.path.join(work, "settle")] + list(extra),
                           env=run_env, check=True, stdout=subprocess.DEVNULL)
            for f in forks:
                report = os.path.join(work, "report-%d-%d-%s" % (hosts, f, code.replace(" ", "_")))
                print("[bench] fleetcheck: %d hosts, %d forks, collection %s ..." % (hosts, f, code), flush=True)
                res = run_check(inv, report, run_env, f, extra)
                outcomes = sorted(set(h["outcome"] for h in res["hosts"]))
                converged = sum(1 for h in res["hosts"] if (h.get("plan") or {}).get("converged"))
                # known converged in one round trip (what the last verified deploy left, untouched)
                fast = sum(1 for h in res["hosts"] if (h.get("plan") or {}).get("fast"))
                rows.append({"hosts": hosts, "forks": f, "collection": code, "wall_s": res["wall_s"],
                             "cpu_s": res["cpu_s"], "cpu_ms_per_host": res["cpu_s"] / hosts * 1000,
                             "wall_ms_per_host": res["wall_s"] / hosts * 1000, "outcomes": outcomes,
                             "converged": converged, "fast": fast, "reported": len(res["hosts"])})
                print("[bench] fleetcheck: %d hosts, %d forks, %s: %.1f s wall, %.1f s CPU, outcomes %s, %d converged"
                      % (hosts, f, code, res["wall_s"], res["cpu_s"], outcomes, converged), flush=True)
                if res["hosts"] and (len(res["hosts"]) != hosts or converged != hosts):
                    raise RuntimeError("fleetcheck: %d of %d hosts reported, %d converged: the demo fleet "
                                       "is not converged" % (len(res["hosts"]), hosts, converged))
    return {"rows": rows, "nodes": len(NODES)}
