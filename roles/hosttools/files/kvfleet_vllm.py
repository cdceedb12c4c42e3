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
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "lib"))

from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import (  # noqa: E402
    add_rates, diagnose)
from ansible_collections.kvfleet.vllm.plugins.module_utils._probe import (  # noqa: E402
    ProbeError, Response, snapshot, unreachable_snapshot)


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


def journal_tail(unit, lines=25):
    return subprocess.run(["journalctl", "-u", unit, "-n", str(lines), "--no-pager", "-o", "cat"],
                          capture_output=True, text=True, check=False).stdout


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
                     state.get("Result"), state["NRestarts"] - restarts, journal_tail(args.unit)),
                  file=sys.stderr)
            return 1
        if fetch("/health").status == 200:
            print("%s healthy after %.1fs" % (args.unit, time.time() - start))
            return 0
        if time.time() - start > args.timeout:
            print("%s did not answer /health within %ss; its log:\n%s"
                  % (args.unit, args.timeout, journal_tail(args.unit)), file=sys.stderr)
            return 1
        time.sleep(args.delay)


def gate(args):
    """Print the gate result as JSON; exit 0 healthy, 1 degraded, 2 unhealthy."""
    fetch = make_fetcher(args.url, args.probe_timeout, os.environ.get("VLLM_API_KEY"))
    snaps, start = [], time.time()
    for i in range(args.samples):
        if i:
            time.sleep(max(0.0, start + i * args.interval - time.time()))
        try:
            snap = snapshot(fetch, args.url)
            snap.pop("engines", None)
            snap.pop("models", None)
        except ProbeError as exc:
            snap = unreachable_snapshot(args.url, exc)
        snaps.append(snap)
    add_rates(snaps)
    result = diagnose(snaps, max_num_seqs=args.max_num_seqs)
    result["samples"] = snaps
    json.dump(result, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return {"healthy": 0, "degraded": 1}.get(result["verdict"], 2)


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
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
