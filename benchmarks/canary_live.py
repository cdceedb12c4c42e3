"""The canary analysis's false-fail rate on a live pair of vLLM CPU servers with identical settings.

What it measures: how often plugins/module_utils/_canary.py analyse() fails (or cannot decide)
a canary that differs from its baseline in nothing, on real /metrics of two real vLLM CPU
servers (the capture pair canary-same's flags: 8 MiB KV cache, --max-num-seqs 16) under one
steady load each, and how often it fails a harmless change on a host that is slower than its
peer (a busy loop on the canary's core), with and without the window before the change.

How: `record` starts the two servers, the "canary" pinned to CPU 0 and the "baseline" to CPU 1,
runs the same never-ending load on each and saves the raw /metrics text and /health status of
both every 5 s on one clock (DIR/index.json says when and in which phase). Phase "same": the
pair as it is; phase "slow": the same with a niced busy loop pinned to CPU 0. `judge` turns each
recorded text into a sample exactly as the gate's sampler does (_probe.sample with a fetch that
serves the recording, as tests/unit/fixtures.replay) and replays windows through analyse() as
_analysis_run.run_analysis drives it: the deploy's defaults (roles/rollout/defaults/main.yml:
300 s at 15 s, warm-up 15 s, min_requests 20, the 60 s before the change as `before`) and the
canary_analysis module's (60 s at 5 s, min_requests 20), with the early verdict and the
extension while either side has too few requests. Sliding windows overlap: they are not
independent trials.

usage (after `. tests/env.sh` and `bash tests/setup.sh tools vllm model copy`; results: CANARY-LIVE.md):
  PYTHONPATH=$KVFLEET_COLLECTIONS:tests/support $KVFLEET_TOOLS/bin/python benchmarks/canary_live.py \
      record --out DIR --same-minutes 27 --slow-minutes 23
  PYTHONPATH=$KVFLEET_COLLECTIONS:tests/support $KVFLEET_TOOLS/bin/python benchmarks/canary_live.py \
      judge --capture DIR [--md FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

from ansible_collections.kvfleet.vllm.plugins.module_utils._analysis_run import _Verdicts, samples_in
# what _Verdicts reads of a sampling window, as the unit tests feed it
from ansible_collections.kvfleet.vllm.tests.unit.plugins.module_utils.test_analysis_early import Replayed
from ansible_collections.kvfleet.vllm.plugins.module_utils._canary import (
    DEFAULT_MIN_REQUESTS, analyse)
from ansible_collections.kvfleet.vllm.plugins.module_utils._probe import Response, sample

TICK_S = 5.0                      # the recording's spacing: the module's default interval
LOAD = (4, 150, 64)               # per server: requests at a time, prompt words, max tokens
LOAD_REQUESTS = 100000            # more than a phase finishes: the load never runs out
WARM_S = 30.0                     # after the loads start, before phase "same" (queues settle)
SKIP_S = 30.0                     # of each phase, left out by the judge (the change of phase settles)
LIMITS = {"max_num_seqs": 16}
CPUS = {"canary": 0, "baseline": 1}
MIB = 1024 * 1024


# ---------------------------------------------------------------------------------------------
# record


def _servers():
    """Two servers with identical flags on distinct ports, each pinned to its own core."""
    import capture_fixtures as cf   # tests/support: the harness of the fixture captures

    class Pinned(cf.Server):
        def __init__(self, cpu, **kwargs):
            self.cpu = cpu
            cf.Server.__init__(self, **kwargs)

        def launch(self):
            # as VllmServer.launch, but on the chosen core (it pins every server to CPU 1)
            log = open(self.log_path, "wb")
            self.proc = subprocess.Popen(["taskset", "-c", str(self.cpu), "nice", "-n", "10"] + self.argv,
                                         stdout=log, stderr=subprocess.STDOUT, env=self.env(),
                                         start_new_session=True)
            return self

    first = cf.port()
    out = {"canary": Pinned(CPUS["canary"], port=first, kv_bytes=8 * MIB, max_num_seqs=16),
           "baseline": Pinned(CPUS["baseline"], port=cf._port_except(first), kv_bytes=8 * MIB, max_num_seqs=16)}
    return cf, out


def _hog(cpu):
    """A busy loop on `cpu`, niced as the servers are (nice 10): it takes about half the core
    from the server there, a host slower than its peer rather than one starved."""
    return subprocess.Popen(["taskset", "-c", str(cpu), "nice", "-n", "10", sys.executable, "-c",
                             "while True:\n    pass\n"], start_new_session=True)


def _stop(proc):
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(10)


def record(out, same_minutes, slow_minutes):
    """The capture: every TICK_S s, /metrics and /health of both servers, raw, with the time."""
    os.makedirs(out, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))   # a killed run still cleans up
    cf, servers = _servers()
    loads, hog, ticks, events = {}, None, [], []
    t_start = time.time()

    def event(text):
        events.append((round(time.time() - t_start, 1), text))
        print("%7.1f s  %s" % (time.time() - t_start, text), flush=True)

    def save():
        index = {"tick_s": TICK_S, "load": dict(zip(("concurrency", "prompt_words", "max_tokens"), LOAD)),
                 "servers": dict((side, {"url": s.url, "cpu": s.cpu, "argv": s.argv_text()}) for side, s in servers.items()),
                 "phases": {"same_minutes": same_minutes, "slow_minutes": slow_minutes},
                 "events": events, "ticks": ticks}
        with open(os.path.join(out, "index.json.tmp"), "w") as f:
            json.dump(index, f, indent=1)
        os.replace(os.path.join(out, "index.json.tmp"), os.path.join(out, "index.json"))

    try:
        for side, srv in servers.items():
            srv.launch()
            event("%s launched on CPU %d, %s" % (side, srv.cpu, srv.url))
        for side, srv in servers.items():
            if not cf._healthy(srv, timeout=300):
                raise RuntimeError("%s did not start:\n%s" % (side, srv.log_tail(40)))
            event("%s healthy" % side)
        for side, srv in servers.items():
            status, text, err = cf.probe(srv.url, "/version")
            with open(os.path.join(out, "version-%s.json" % side), "w") as f:
                f.write(text or "{}")
        for side, srv in servers.items():
            loads[side] = cf.Load(srv.url, LOAD_REQUESTS, *LOAD)
        event("loads started: %d at a time, %d prompt words, %d max tokens each" % LOAD)
        t0 = time.time()
        same_end = t0 + WARM_S + same_minutes * 60
        slow_end = same_end + slow_minutes * 60
        i = 0
        while True:
            due = t0 + i * TICK_S
            if due >= slow_end:
                break
            time.sleep(max(0.0, due - time.time()))
            phase = "warm" if due < t0 + WARM_S else "same" if due < same_end else "slow"
            if phase == "slow" and hog is None:
                hog = _hog(CPUS["canary"])
                event("phase slow: busy loop (pid %d) on CPU %d" % (hog.pid, CPUS["canary"]))
            elif phase == "same" and not any(t["phase"] == "same" for t in ticks):
                event("phase same")
            for side, srv in servers.items():
                when = time.time()
                status, text, err = cf.probe(srv.url, "/metrics", timeout=4)
                health = cf.probe(srv.url, "/health", timeout=4)
                name = None
                if status == 200 and text:
                    name = "%05d-%s.txt" % (i, side)
                    with open(os.path.join(out, name), "w") as f:
                        f.write(text)
                ticks.append({"i": i, "phase": phase, "side": side, "time": when, "metrics": name,
                              "metrics_status": status, "metrics_error": err,
                              "health_status": health[0], "health_error": health[2]})
                # a load that ended (or died) is started again: the load never stops
                if loads[side].proc.poll() is not None:
                    event("%s load exited (rc %s); restarted" % (side, loads[side].proc.returncode))
                    loads[side].cancel()
                    loads[side] = cf.Load(srv.url, LOAD_REQUESTS, *LOAD)
                if servers[side].proc.poll() is not None:
                    event("%s server exited (rc %s)" % (side, servers[side].proc.returncode))
            if i % 12 == 0:
                save()
            i += 1
        event("done: %d ticks" % i)
    finally:
        for load in loads.values():
            load.cancel()
        _stop(hog)
        for srv in servers.values():
            srv.cleanup()
        event("stopped loads, busy loop and servers")
        save()


# ---------------------------------------------------------------------------------------------
# judge


def _samples(capture, index, side):
    """{tick: (phase, sample)} of one server, each made by _probe.sample from the recording."""
    try:
        with open(os.path.join(capture, "version-%s.json" % side)) as f:
            version = f.read().encode()
    except OSError:
        version = b"{}"
    out = {}
    for t in index["ticks"]:
        if t["side"] != side:
            continue
        text = None
        if t["metrics"]:
            with open(os.path.join(capture, t["metrics"])) as f:
                text = f.read()

        def fetch(path, text=text, t=t):
            if path == "/metrics":
                return Response(200, text.encode()) if text is not None else \
                    Response(t["metrics_status"], b"", t["metrics_error"] or "no answer")
            if path == "/health":
                return Response(t["health_status"], b"", t["health_error"])
            return Response(200, version)
        out[t["i"]] = (t["phase"], sample(fetch, "http://127.0.0.1:8000", clock=lambda when=t["time"]: when))
    return out


def _phase(canary, baseline, phase):
    """The aligned samples (canary, baseline) of a phase, its first SKIP_S s left out."""
    ticks = sorted(i for i in canary if canary[i][0] == phase and i in baseline)
    ticks = ticks[int(SKIP_S / TICK_S):]
    return [canary[i][1] for i in ticks], [baseline[i][1] for i in ticks]


def _targets(name, snaps):
    # shallow copies: the analysis adds rates to its samples (as _analysis_run's watch copies)
    return [{"name": name, "samples": [dict(s) for s in snaps], "limits": dict(LIMITS)}]


def run_like_module(c_all, b_all, start, step, duration, warmup=0, max_duration=None, before=None):
    """What _analysis_run.run_analysis decides from samples already recorded: `step` recorded
    samples per interval from `start`, fed to the module's own _Verdicts (the early verdict, and
    the extension while either side has fewer than min_requests, up to max_duration). Returns
    (result, early reason or None, samples per server, whether the recording ran out first)."""
    interval = TICK_S * step
    first = samples_in(warmup + duration, interval)
    most = samples_in(warmup + max(duration, max_duration or duration), interval)
    stop = threading.Event()
    canary, baseline = Replayed(), Replayed()
    plan = _Verdicts([("canary", {"name": "canary"}, dict(LIMITS), canary),
                      ("baseline", {"name": "baseline"}, dict(LIMITS), baseline)],
                     DEFAULT_MIN_REQUESTS, None, warmup, duration, stop, before)
    short = False
    for k in range(most):
        idx = start + k * step
        if idx >= len(c_all):
            short = True
            break
        # copies: the analysis adds rates to its samples, and the windows overlap
        baseline.snaps.append(dict(b_all[idx]))
        canary.snaps.append(dict(c_all[idx]))
        plan.watch(canary)
        if stop.is_set() or (len(canary.snaps) >= first and not plan.more()):
            break
    final, early = plan.final(None)
    result = analyse(_targets("canary", canary.snaps), _targets("baseline", baseline.snaps),
                     min_requests=DEFAULT_MIN_REQUESTS, thresholds=final, warmup=warmup, before=before, early=early)
    return result, plan.early, len(canary.snaps), short


def _stride(span, room, choices=(15, 12, 9, 6, 3)):
    """The widest slide (in samples, 75 s down to 15 s) that gives at least 20 windows."""
    for s in choices:
        if room >= span and (room - span) // s + 1 >= 20:
            return s
    return choices[-1]


class Tally(object):
    """Verdict counts and the reason of every fail or inconclusive."""

    def __init__(self):
        self.counts = {"pass": 0, "inconclusive": 0, "fail": 0}
        self.notes = []
        self.values = {}        # check -> [(canary, baseline)], to say how far apart the sides were
        self.unused = []        # why a `before` given was not used

    def add(self, label, result, early, short):
        self.counts[result["verdict"]] = self.counts.get(result["verdict"], 0) + 1
        for c in result["checks"]:
            if isinstance(c.get("canary"), (int, float)) and isinstance(c.get("baseline"), (int, float)):
                self.values.setdefault(c["metric"], []).append((c["canary"], c["baseline"]))
        if result.get("before") and not result["before"]["used"]:
            self.unused.append("%s: %s" % (label, result["before"]["why"]))
        if result["verdict"] != "pass":
            self.notes.append("%s: **%s**%s%s %s" % (label, result["verdict"], " (early verdict)" if early else "",
                                                     " (recording ran out)" if short else "", result["reason"]))

    def row(self, what):
        n = sum(self.counts.values())
        c = self.counts
        return "| %s | %d | %d | %d | %d | %.1f %% |" % (
            what, n, c["pass"], c["inconclusive"], c["fail"], 100.0 * c["fail"] / max(n, 1))

    def medians(self, names=("ttft_p50", "itl_p50", "e2e_p50", "e2e_p95", "requests_waiting", "kv_usage")):
        """The median over the windows of a few checks' values, canary / baseline."""
        out = []
        for name in names:
            pairs = self.values.get(name) or []
            if pairs:
                c = sorted(p[0] for p in pairs)[len(pairs) // 2]
                b = sorted(p[1] for p in pairs)[len(pairs) // 2]
                out.append("%s %.4g / %.4g" % (name, c, b))
        return "Median over the windows, canary / baseline: " + "; ".join(out) + "."


def _rate(snaps):
    """Finished requests and their rate over a list of samples."""
    done = [s for s in snaps if isinstance(s.get("requests_finished_total"), (int, float))]
    if len(done) < 2:
        return 0, 0.0
    n = done[-1]["requests_finished_total"] - done[0]["requests_finished_total"]
    return n, n / (done[-1]["time"] - done[0]["time"])


def judge(capture, md):
    with open(os.path.join(capture, "index.json")) as f:
        index = json.load(f)
    raw = {"canary": _samples(capture, index, "canary"), "baseline": _samples(capture, index, "baseline")}
    lines = ["## Live canary false-fail benchmark (two vLLM CPU servers, identical settings)", ""]
    same_c, same_b = _phase(raw["canary"], raw["baseline"], "same")
    slow_c, slow_b = _phase(raw["canary"], raw["baseline"], "slow")
    lines += ["Capture: %s; one tick every %.0f s; load per server: %s; first %.0f s of each phase left out." % (
        capture, TICK_S, index["load"], SKIP_S), ""]
    lines += ["| phase | samples/server | canary (CPU 0) finished, req/s | baseline (CPU 1) finished, req/s |",
              "|---|---|---|---|"]
    for phase, c, b in (("same", same_c, same_b), ("slow (busy loop on CPU 0)", slow_c, slow_b)):
        lines.append("| %s | %d | %d, %.2f | %d, %.2f |" % ((phase, len(c)) + _rate(c) + _rate(b)))
    lines += ["", "Events: " + "; ".join("%s s %s" % tuple(e) for e in index["events"]), ""]
    head = ["| windows | judged | pass | inconclusive | fail | false-fail rate |", "|---|---|---|---|---|---|"]
    notes = []

    # 1. the deploy's defaults on phase "same", each way round, the 60 s before as `before`
    step, span = 3, 3 * (samples_in(315, 15) - 1) + 1
    stride = _stride(span, len(same_c))
    t1, with_before = Tally(), 0
    for first, second, who in ((same_c, same_b, "CPU0 as canary"), (same_b, same_c, "CPU1 as canary")):
        for start in range(0, len(first) - span + 1, stride):
            before = None
            if start >= 15:   # the 60 s ending 15 s before the window: 5 samples at 15 s
                before = run_like_module(first, second, start - 15, step, 60)[0]
                with_before += 1
            res, early, n, short = run_like_module(first, second, start, step, 300, warmup=15, max_duration=600,
                                                   before=before)
            t1.add("deploy, same, %s, window at %d s" % (who, start * TICK_S), res, early, short)
    lines += ["### 1. Deploy defaults (300 s at 15 s, warm-up 15 s, min_requests 20), phase same, both ways round",
              "", "Windows slide by %.0f s (they overlap); %d of them had the 60 s before as `before`." % (
                  stride * TICK_S, with_before), ""] + head + [t1.row("300 s, deploy defaults")] + [""]
    lines += [t1.medians(), ""]
    notes += t1.notes + ["`before` not used: " + u for u in t1.unused]

    # 2. the module's defaults: 60 s at 5 s, no warm-up, non-overlapping windows
    span2 = samples_in(60, TICK_S)
    t2 = Tally()
    for first, second, who in ((same_c, same_b, "CPU0 as canary"), (same_b, same_c, "CPU1 as canary")):
        for start in range(0, len(first) - span2 + 1, span2):
            res, early, n, short = run_like_module(first, second, start, 1, 60)
            t2.add("module, same, %s, window at %d s" % (who, start * TICK_S), res, early, short)
    lines += ["### 2. Module defaults (60 s at 5 s, min_requests 20, no warm-up), phase same, both ways round",
              "", "Windows do not overlap.", ""] + head + [t2.row("60 s, module defaults")] + [""]
    lines += [t2.medians(), ""]
    notes += t2.notes

    # 3. phase slow, canary = the slowed server: 60 s before, then the deploy's window
    span3 = 15 + span
    stride3 = _stride(span3, len(slow_c))
    t3c, t3h = Tally(), Tally()
    for start in range(0, len(slow_c) - span3 + 1, stride3):
        before = run_like_module(slow_c, slow_b, start, step, 60)[0]
        res, early, n, short = run_like_module(slow_c, slow_b, start + 15, step, 300, warmup=15, max_duration=600,
                                               before=before)
        t3c.add("slow, change judged (before), window at %d s" % ((start + 15) * TICK_S), res, early, short)
        res, early, n, short = run_like_module(slow_c, slow_b, start + 15, step, 300, warmup=15, max_duration=600)
        t3h.add("slow, host judged (no before), window at %d s" % ((start + 15) * TICK_S), res, early, short)
    lines += ["### 3. Phase slow (busy loop on the canary's core), canary = the slowed server, deploy defaults",
              "", "A 60 s before-window, then the 300 s window; windows slide by %.0f s (they overlap)." % (
                  stride3 * TICK_S), ""] + head + [t3c.row("with `before` (the change judged)"),
                                                   t3h.row("without `before` (the host judged)")] + [""]
    lines += ["With `before`: " + t3c.medians(), "", "Without: " + t3h.medians(), ""]
    notes += t3c.notes + t3h.notes + ["`before` not used: " + u for u in t3c.unused]
    lines += ["### Every fail and inconclusive", ""] + (["- " + n for n in notes] or ["none"]) + [""]
    text = "\n".join(lines)
    print(text)
    if md:
        with open(md, "w") as f:
            f.write(text)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    sub = p.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("record")
    r.add_argument("--out", required=True)
    r.add_argument("--same-minutes", type=float, default=27)
    r.add_argument("--slow-minutes", type=float, default=23)
    j = sub.add_parser("judge")
    j.add_argument("--capture", required=True)
    j.add_argument("--md")
    args = p.parse_args(argv)
    if args.mode == "record":
        record(args.out, args.same_minutes, args.slow_minutes)
    else:
        judge(args.capture, args.md)


if __name__ == "__main__":
    main(sys.argv[1:])
