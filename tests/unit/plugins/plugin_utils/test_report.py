from __future__ import annotations

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import table_lines


def test_table_lines():
    rows = [{"host": "gpu-01", "instance": "main", "version": "0.32.0", "verdict": "degraded",
             "causes": [{"id": "concurrency_cap"}], "kv_cache_usage": 0.184, "requests_running": 2,
             "requests_waiting": 30, "preemptions_per_s": 0.0, "block_size": 32,
             "trends": ["usage_falling_rate_steady"], "sustained": ["concurrency_cap"]},
            {"host": "gpu-02", "instance": "main", "version": None, "verdict": "unhealthy",
             "causes": [{"id": "engine_down"}], "kv_cache_usage": None, "requests_running": None,
             "requests_waiting": None, "preemptions_per_s": None, "block_size": None}]
    lines = table_lines(rows)
    assert lines[0].split()[:4] == ["HOST", "INSTANCE", "VERSION", "VERDICT"]
    assert lines[1].split() == ["gpu-01", "main", "0.32.0", "degraded", "concurrency_cap",
                                "18.4", "2", "30", "0.00", "32",
                                "usage_falling_rate_steady,sustained:concurrency_cap"]
    assert lines[2].split() == ["gpu-02", "main", "-", "unhealthy", "engine_down",
                                "-", "-", "-", "-", "-", "-"]


def test_deploy_lines():
    from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import deploy_lines
    a = {"version": "0.32.0", "config": "aaaa"}
    b = {"version": "0.33.1", "config": "bbbb"}
    rows = [{"host": "h1", "batch": 1, "before": a, "after": b, "outcome": "upgraded", "seconds": 61.2},
            {"host": "h2", "batch": 2, "before": a, "after": b, "outcome": "rolled back", "seconds": 90,
             "detail": "Wait until each instance answers /health:\n vllm-main.service failed " + "x" * 200},
            {"host": "h3", "before": a, "outcome": None}]
    lines = deploy_lines(rows)
    assert lines[0].split() == ["HOST", "BATCH", "BEFORE", "AFTER", "OUTCOME", "SECONDS", "DETAIL"]
    assert lines[1].split() == ["h1", "1", "0.32.0", "(aaaa)", "0.33.1", "(bbbb)", "upgraded", "61", "-"]
    # a rolled-back host shows no "after": it runs what it ran before
    assert lines[2].split()[:7] == ["h2", "2", "0.32.0", "(aaaa)", "-", "rolled", "back"]
    assert "failed" in lines[2] and lines[2].endswith("...") and "\n" not in lines[2]
    assert lines[3].split() == ["h3", "-", "0.32.0", "(aaaa)", "-", "untouched", "-", "-"]
    assert lines[4] == "1 upgraded, 1 rolled back, 1 untouched"
    assert deploy_lines([])[-1] == "no hosts"
    assert deploy_lines([{"host": "h", "outcome": "checked"}])[-1] == "1 checked"


def test_deploy_lines_name_hosts_left_drained_and_count_every_outcome():
    from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import deploy_lines
    a = {"version": "0.32.0", "config": "aaaa"}
    rows = [{"host": "h1", "batch": 1, "before": a, "after": a, "outcome": "resumed"},
            {"host": "h2", "batch": 2, "before": a, "after": a, "outcome": "restarted"},
            {"host": "h3", "batch": 3, "before": {}, "after": None, "outcome": "first install failed",
             "drained": True, "detail": "vLLM 0.32.0 installed; not serving"},
            {"host": "h4", "batch": 3, "before": a, "outcome": "interrupted", "drained": True},
            {"host": "h5", "before": a, "outcome": "someday"}]
    lines = deploy_lines(rows)
    # the hosts that serve what the run left show it
    assert lines[1].split()[:7] == ["h1", "1", "0.32.0", "(aaaa)", "0.32.0", "(aaaa)", "resumed"]
    assert lines[2].split()[:7] == ["h2", "2", "0.32.0", "(aaaa)", "0.32.0", "(aaaa)", "restarted"]
    assert lines[3].split()[:8] == ["h3", "3", "-", "-", "first", "install", "failed", "-"]
    assert "LEFT DRAINED. vLLM 0.32.0 installed" in lines[3]
    assert "LEFT DRAINED." in lines[4]
    # every outcome is counted, an unknown one too
    assert lines[6] == "1 restarted, 1 resumed, 1 first install failed, 1 interrupted, 1 someday"
    assert lines[7] == "left out of the load balancer: h3, h4 (the next deploy finishes them first)"


def test_deploy_lines_say_which_adapters_changed_without_a_restart_and_what_was_staged():
    from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import deploy_lines
    a, b = {"version": "0.32.0", "config": "aaaa"}, {"version": "0.32.0", "config": "bbbb"}
    runtime = {"b": {"load": [{"name": "sql", "path": "/x"}], "unload": ["old"]},
               "a": {"load": [{"name": "sql", "path": "/x"}], "unload": []}}
    staged = {"copied": True, "label": "sql@r2", "files": 3, "bytes": 3 * 1048576, "seconds": 1.25,
              "check_mode": False}
    lines = deploy_lines([
        {"host": "h1", "before": a, "after": b, "outcome": "upgraded", "runtime": runtime, "staged": staged},
        {"host": "h2", "before": a, "outcome": "rolled back", "runtime": runtime, "detail": "gate: unhealthy"},
        {"host": "h3", "before": a, "after": a, "outcome": "unchanged", "runtime": {}},
        {"host": "h4", "before": a, "outcome": "checked", "staged": dict(staged, check_mode="True")}])
    assert lines[1].endswith("staged sql@r2 (3 files, 3.0 MiB in 1.2 s); "
                             "adapters changed without a restart: a +sql, b +sql -old")
    # a host rolled back does not serve the change: its line keeps why
    assert lines[2].endswith("gate: unhealthy") and "adapters" not in lines[2]
    assert lines[3].split()[-3:] == ["unchanged", "-", "-"]
    assert "would stage sql@r2" in lines[4]
    lines = deploy_lines([{"host": "h1", "outcome": "upgraded", "staged": dict(staged, downloaded=2)},
                          {"host": "h2", "outcome": "checked", "staged": dict(staged, downloaded="3", check_mode=True)}])
    assert lines[1].endswith("staged sql@r2 (3 files, 3.0 MiB in 1.2 s; 2 of them downloaded from the hub)")
    assert lines[2].endswith("would stage sql@r2 (3 files, 3.0 MiB in 1.2 s; 3 of them would be downloaded from the hub)")


def _gate(verdict="healthy", samples=None, **extra):
    return dict(verdict=verdict, state="idle", causes=[], samples=samples or [
        {"version": "0.32.0", "kv_cache_usage": 0.1, "requests_running": 0, "requests_waiting": 0,
         "block_size": 32, "num_gpu_blocks": 100, "rates": {"preemptions_per_s": 0.0}}], **extra)


def test_rows_are_the_same_from_a_host_loop_and_from_targets():
    from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import diagnosis_rows
    dead = [{"url": "http://h:1", "healthy": False, "error": "cannot read http://h:1/metrics: refused"}]
    per_host = diagnosis_rows(
        [_gate(item={"name": "a"}), _gate("unhealthy", dead, item={"name": "b"})], "h1",
        [{"metrics": {"version": "0.32.0"}},
         {"failed": False, "msg": "cannot read http://h:1/metrics: refused"}], 0)
    fleet = diagnosis_rows([_gate(name="a", host="h1"), _gate("unhealthy", dead, name="b", host="h1")])
    assert [dict(r, gpus=None) for r in per_host] == fleet
    assert fleet[0]["version"] == "0.32.0" and fleet[0]["preemptions_per_s"] == 0.0
    assert fleet[1]["error"].startswith("cannot read") and fleet[1]["version"] is None
    assert per_host[0]["gpus"] == 0 and fleet[0]["gpus"] is None


def test_svg_chart_is_well_formed_and_breaks_lines_at_gaps():
    import xml.etree.ElementTree as ET
    from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import svg_chart
    pts = [{"t": 0, "kv": 0.1, "w": 1}, {"t": 10, "kv": 0.5, "w": None}, {"t": 20, "kv": None, "w": 3},
           {"t": 30, "kv": 0.9, "w": 4, "error": True}, {"t": "x", "kv": 1}]
    svg = svg_chart("KV <usage>", pts, [("kv", "used"), ("w", "waiting")], 100, "%", 100)
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    lines = root.findall(ns + "polyline")
    # kv: 0-10 is a line, 30 a lone point; w: 20-30 is a line, 0 a lone point
    assert [ln.get("stroke") for ln in lines] == ["#1f77b4", "#d62728"]
    assert len(lines[0].get("points").split()) == 2 and len(root.findall(ns + "circle")) == 2
    # the sample with an error gets a red tick; the title is escaped
    assert len(root.findall(ns + "line")) == 1
    assert root.get("aria-label") == "KV <usage>" and "max 100%" in "".join(root.itertext())
    # y runs 0..y_max: 0.9 x 100 of 100 is near the top, 0.1 near the bottom
    ys = [float(p.split(",")[1]) for p in lines[0].get("points").split()]
    assert ys[0] > ys[1]


def test_svg_chart_without_values():
    import xml.etree.ElementTree as ET
    from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import svg_chart
    root = ET.fromstring(svg_chart("tokens/s", [{"t": 1, "tok": None}], [("tok", "generated")]))
    assert root.findall("{http://www.w3.org/2000/svg}polyline") == []


def test_svg_chart_sized_with_many_series_and_the_legend_left_out():
    # the dashboard rendering (tests/support/render_dashboard.py) draws wide charts of up to a
    # dozen series and writes their legend itself
    import xml.etree.ElementTree as ET
    from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import COLOURS, svg_chart
    series = [("s%d" % i, "series %d" % i) for i in range(12)]
    pts = [dict({"t": t}, **{k: t * i for i, (k, _l) in enumerate(series)}) for t in (0, 1)]
    root = ET.fromstring(svg_chart("wide", pts, series, size=(600, 100), legend=False))
    ns = "{http://www.w3.org/2000/svg}"
    assert (root.get("width"), root.get("height")) == ("600", "116")
    assert root.find(ns + "rect").get("width") == "600"
    # every series is drawn, colours repeating after the palette's ten
    assert [ln.get("stroke") for ln in root.findall(ns + "polyline")] == list(COLOURS) + list(COLOURS[:2])
    assert max(float(p.split(",")[0]) for ln in root.findall(ns + "polyline") for p in ln.get("points").split()) > 590
    text = "".join(root.itertext())
    assert "series" not in text and text.startswith("wide")


def test_charts_prefer_the_monitor_history_and_rank_rows_worst_first():
    from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import charts_html, diagnosis_rows
    samples = [{"time": 100.0 + 2 * i, "kv_cache_usage": 0.2, "requests_running": 2, "requests_waiting": 5,
                "rates": {"generation_tokens_per_s": 40.0}} for i in range(3)]
    series = [{"t": 60.0 * i, "kv": 0.1 * i, "running": 1, "waiting": 0, "tokens_per_s": 10.0,
               "ttft_p90": 0.05, "error": False} for i in range(5)]
    rows = diagnosis_rows([{"item": {"name": "main"}, "verdict": "degraded", "samples": samples},
                           {"item": {"name": "b"}, "verdict": "healthy", "samples": samples},
                           {"item": {"name": "c"}, "verdict": "unhealthy", "samples": [{"time": 1.0, "error": "refused"}]}],
                          host="h", monitor={"main": {"series": series}})
    assert [r["verdict_rank"] for r in rows] == [1, 0, 2]
    assert len(rows[0]["history"]) == 5 and len(rows[1]["window"]) == 3 and rows[1]["history"] == []
    with_history, with_window, down = (charts_html(r) for r in rows)
    assert "monitor history: 5 samples over 4 min" in with_history and with_history.count("<svg") == 4
    assert "gate window: 3 samples over 4 s" in with_window and with_window.count("<svg") == 3
    assert "gate window: 1 samples" in down and "stroke=\"#d62728\" stroke-width=\"2\"" in down
    assert charts_html({"window": [], "history": []}) == ""


def test_history_series_from_monitor_lines():
    from ansible_collections.kvfleet.vllm.plugins.module_utils._trends import history_series
    lines = [{"time": 1.0, "kv_cache_usage": 0.5, "requests_running": 2, "requests_waiting": 0,
              "rates": {"generation_tokens_per_s": 12.5}, "latency": {"ttft": {"p90": 0.2}}},
             {"time": 2.0, "error": "refused", "rates": None, "latency": "x"},
             {"time": float("nan")}, "junk", {"time": 3.0, "kv_cache_usage": float("inf"), "requests_running": True}]
    assert history_series(lines) == [
        {"t": 1.0, "kv": 0.5, "running": 2, "waiting": 0, "tokens_per_s": 12.5, "ttft_p90": 0.2, "error": False},
        {"t": 2.0, "kv": None, "running": None, "waiting": None, "tokens_per_s": None, "ttft_p90": None, "error": True},
        {"t": 3.0, "kv": None, "running": None, "waiting": None, "tokens_per_s": None, "ttft_p90": None, "error": False}]
    assert len(history_series([{"time": float(i)} for i in range(100)], limit=60)) == 60
