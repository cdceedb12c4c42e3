"""metrics_info and cache_gate over https against a real TLS server on 127.0.0.1: the CA that
the server role installs (ca_path), a client certificate where the server requires one."""

from __future__ import annotations

from ansible_collections.kvfleet.vllm.plugins.modules import cache_gate, metrics_info
from ansible_collections.kvfleet.vllm.tests.unit.plugins import local_servers as ls


def test_metrics_info_checks_the_certificate_against_ca_path(run_module):
    with ls.LocalServer(ls.vllm(), tls="server") as srv:
        failed, ok = run_module(metrics_info, {"url": srv.url, "ca_path": ls.tls_file("ca.crt")})
        bad_failed, bad = run_module(metrics_info, {"url": srv.url, "ca_path": ls.tls_file("other-ca.crt")})
    assert not failed and ok["metrics"]["healthy"] and ok["metrics"]["url"].startswith("https://")
    assert bad_failed and "certificate verify failed" in bad["msg"].lower()


def test_cache_gate_over_https_with_a_client_certificate(run_module):
    args = {"samples": 2, "interval": 0, "ca_path": ls.tls_file("ca.crt")}
    with ls.LocalServer(ls.vllm(), tls="client") as srv:
        refused_failed, refused = run_module(cache_gate, dict(args, url=srv.url))
        failed, ok = run_module(cache_gate, dict(args, url=srv.url, client_cert=ls.tls_file("client.crt"),
                                                 client_key=ls.tls_file("client.key")))
    assert refused_failed and refused["verdict"] == "unhealthy"
    assert not failed and ok["verdict"] == "healthy"
