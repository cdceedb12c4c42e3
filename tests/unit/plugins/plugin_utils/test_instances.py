"""The one instance model: what every consumer reads about an instance comes from here."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.filter.vllm_instances import FilterModule
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._instances import (
    InstanceError, build, flag_value, probe_host)

# The server role's settings as roles/server/vars/main.yml builds them from its defaults, with
# preemption_mode set as for an old vLLM (a flag 0.32 no longer has).
SETTINGS = dict(version="0.32.0", device="cpu", port=8000, config_dir="/etc/vllm",
                api_key_set=False, allow_unauthenticated=False, environment={}, extra_args=[],
                var_prefix="vllm_server_",
                options=dict(model="/models/tiny", served_model_name="", host="127.0.0.1",
                             gpu_memory_utilization=0.92, max_model_len=1024, max_num_seqs=4,
                             block_size=32, preemption_mode="recompute",
                             enable_prefix_caching=True, kv_cache_memory_bytes=8388608,
                             shutdown_timeout=20))


def settings(**over):
    out = dict(SETTINGS, options=dict(SETTINGS["options"]))
    out["options"].update(over.pop("options", {}))
    out.update(over)
    return out


def one(inst=None, **over):
    out, _warnings = build([inst or {"name": "main", "port": 8000}], settings(**over))
    return out[0]


def test_defaults_give_loopback_unit_url_cap_drain_and_record():
    inst = one()
    assert inst["unit"] == "vllm-main.service"
    assert (inst["bind"], inst["public"], inst["url"]) == ("127.0.0.1", False, "http://127.0.0.1:8000")
    assert (inst["max_num_seqs"], inst["drain_seconds"]) == (4, 20)
    assert inst["env_file"] == "/etc/vllm/main.env"
    assert inst["record"] == {"name": "main", "unit": "vllm-main.service", "url": "http://127.0.0.1:8000",
                              "port": 8000, "bind": "127.0.0.1", "max_num_seqs": 4,
                              "drain_seconds": 20, "env_file": "/etc/vllm/main.env", "tls": None,
                              "limits": {"max_num_seqs": 4, "max_model_len": 1024,
                                         "max_num_batched_tokens": None,
                                         "max_num_active_seqs": None}}
    assert "--preemption-mode" not in inst["argv"]   # the old-version opt-in, dropped for 0.32 (with a warning)


def test_a_server_bound_to_one_address_is_probed_there():
    # The monitor, the restart guard and diagnose used to probe 127.0.0.1 whatever the bind.
    inst = one(options={"host": "10.20.30.40"}, api_key_set=True)
    assert inst["url"] == "http://10.20.30.40:8000" and inst["public"]
    assert inst["record"]["url"] == "http://10.20.30.40:8000"


def test_an_ipv6_bind_is_bracketed_and_any_address_probed_on_loopback():
    assert one(options={"host": "fd00::5"}, api_key_set=True)["url"] == "http://[fd00::5]:8000"
    assert one(options={"host": "0.0.0.0"}, api_key_set=True)["url"] == "http://127.0.0.1:8000"
    assert probe_host("::") == "127.0.0.1"


def test_instance_options_max_num_seqs_reaches_the_record():
    # The monitor and the restart guard used to ignore options.max_num_seqs.
    inst = one({"name": "main", "port": 8000, "options": {"max_num_seqs": 2}})
    assert inst["max_num_seqs"] == 2 and inst["record"]["max_num_seqs"] == 2


def test_extra_args_win_like_vllms_parser():
    inst = one({"name": "main", "port": 8000,
                "extra_args": ["--max_num_seqs=7", "--port", "9001", "--shutdown-timeout=0"]})
    assert (inst["max_num_seqs"], inst["port"], inst["drain_seconds"]) == (7, 9001, 0)
    assert inst["url"] == "http://127.0.0.1:9001"


def test_role_level_extra_args_as_a_string_is_refused_naming_the_variable():
    # a string would be taken one character at a time ("-", "-", "e", ...): refused, with the fix
    with pytest.raises(InstanceError) as err:
        one(extra_args="--enforce-eager")
    assert str(err.value).startswith("vllm_server_extra_args must be a list of arguments")
    assert "'--enforce-eager'" in str(err.value)
    assert one(extra_args=["--enforce-eager"])


@pytest.mark.parametrize("how", [
    {"options": {"host": "0.0.0.0"}},
    {"extra_args": ["--host", "0.0.0.0"]},
    {"extra_args": ["--host=192.168.1.5"]},
    {"options": {"host": ""}},          # no --host: vLLM listens on every interface
])
def test_public_bind_without_a_key_is_refused_naming_the_instance(how):
    inst = dict({"name": "gpu1", "port": 8001}, **how)
    with pytest.raises(InstanceError) as err:
        build([{"name": "gpu0", "port": 8000}, inst], settings())
    assert "vllm_server_instances[gpu1]" in str(err.value)
    assert "vllm_server_api_key" in str(err.value)


def test_public_bind_with_a_key_or_a_proxy_is_accepted():
    assert one(options={"host": "0.0.0.0"}, api_key_set=True)["public"]
    assert one(options={"host": "0.0.0.0"}, allow_unauthenticated=True)["public"]
    assert not one(options={"host": "127.0.0.2"})["public"]   # all of 127/8 is loopback


@pytest.mark.parametrize("arg", ["--api-key=s3cret", "--api_key=s3cret", "--api-k", "--hf_token",
                                 "--hf-t=x", "--API-KEY"])
def test_secret_flags_in_extra_args_are_refused(arg):
    if arg == "--API-KEY":
        arg = "--api-key"   # argparse is case sensitive: the upper-case form is no flag
    with pytest.raises(InstanceError) as err:
        one({"name": "main", "port": 8000, "extra_args": [arg, "x"]})
    assert "vllm_server_api_key" in str(err.value) and "s3cret" not in str(err.value)


def test_a_flag_that_merely_starts_like_a_secret_is_kept():
    inst = one({"name": "main", "port": 8000, "extra_args": ["--api-server-count", "1"]})
    assert inst["argv"][-2:] == ["--api-server-count", "1"]


@pytest.mark.parametrize("inst, field", [
    ({"name": "main", "port": 8000, "cuda_visible_devices": "0\nExecStartPre=+/bin/sh"}, "cuda_visible_devices"),
    ({"name": "main", "port": 8000, "environment": {"A\nB": "1"}}, "environment"),
    ({"name": "main", "port": 8000, "environment": {"OK": "1\nExecStartPre=+/bin/sh"}}, "environment.OK"),
    ({"name": "main", "port": 8000, "extra_args": ["--chat-template", "x\ny"]}, "vLLM arguments"),
    ({"name": "main", "port": 8000, "options": {"served_model_name": "a\rb"}}, "vLLM arguments"),
])
def test_line_breaks_and_bad_names_never_reach_a_unit(inst, field):
    with pytest.raises(InstanceError) as err:
        one(inst)
    assert field in str(err.value) and "vllm_server_instances[main]" in str(err.value)


@pytest.mark.parametrize("instances, words", [
    ([], "non-empty list"),
    ([{"name": "Main"}], "instances[0].name"),
    ([{"name": "a", "port": 8000}, {"name": "a", "port": 8001}], "used twice"),
    ([{"name": "a", "port": 8000}, {"name": "b", "port": 8000}], "port 8000 is used"),
    ([{"name": "a", "port": "http"}], "port must be an integer"),
    ([{"name": "a", "prot": 8000}], "unknown key(s) prot"),
])
def test_bad_instance_lists_name_the_field(instances, words):
    with pytest.raises(InstanceError) as err:
        build(instances, settings())
    assert words in str(err.value)


def test_cuda_devices_and_gpu_share():
    instances = [{"name": "g0", "port": 8000, "cuda_visible_devices": "0,1",
                  "options": {"gpu_memory_utilization": 0.5}},
                 {"name": "g1", "port": 8001, "cuda_visible_devices": "GPU-8d3c2f1e-aaaa"}]
    cuda = settings(device="cuda", options={"block_size": 16, "kv_cache_memory_bytes": None})
    out, _warnings = build(instances, cuda)
    assert [(i["cuda_visible_devices"], i["gpu_memory_utilization"]) for i in out] == [
        ("0,1", 0.5), ("GPU-8d3c2f1e-aaaa", 0.92)]


def test_flag_value_reads_the_last_occurrence():
    assert flag_value(["--port", "1", "--port=2"], "--port") == "2"
    assert flag_value(["--max_num_seqs", "3"], "--max-num-seqs") == "3"
    assert flag_value(["--model", "m"], "--host") is None


def test_filter_wraps_errors_and_returns_the_list():
    f = FilterModule().filters()["vllm_instances"]
    assert f([{"name": "main", "port": 8000}], settings())[0]["url"] == "http://127.0.0.1:8000"
    with pytest.raises(AnsibleFilterError):
        f([{"name": "main", "port": 8000, "options": {"host": "0.0.0.0"}}], settings())


def test_a_key_rotation_reads_the_keys_from_a_file_never_from_argv():
    inst = one(api_key_rotation=True)
    assert inst["argv"][-2:] == ["--config", "/etc/vllm/main.keys.yaml"]
    assert inst["keys_file"] == "/etc/vllm/main.keys.yaml"
    assert one()["keys_file"] is None and "--config" not in one()["argv"]
    with pytest.raises(InstanceError, match="--config in extra_args cannot be combined with "
                                            "vllm_server_api_keys_previous"):
        one({"name": "main", "port": 8000, "extra_args": ["--config", "/x.yaml"]},
            api_key_rotation=True)


# The server role's TLS settings as roles/server/vars/main.yml builds them (host paths)
TLS = dict(certfile="/etc/vllm/tls/server.crt", keyfile="/etc/vllm/tls/server.key",
           ca_file="/etc/vllm/tls/ca.crt", client_auth="none", server_name="",
           probe_cert="", probe_key="")


def test_tls_serves_https_and_every_probe_gets_the_ca():
    inst = one(tls=TLS)
    assert inst["url"] == "https://127.0.0.1:8000" and inst["record"]["url"] == inst["url"]
    assert flag_value(inst["argv"], "--ssl-certfile") == "/etc/vllm/tls/server.crt"
    assert flag_value(inst["argv"], "--ssl-keyfile") == "/etc/vllm/tls/server.key"
    # no client certificates asked for: vLLM gets neither the CA nor --ssl-cert-reqs
    assert flag_value(inst["argv"], "--ssl-ca-certs") is None
    assert flag_value(inst["argv"], "--ssl-cert-reqs") is None
    assert inst["record"]["tls"] == {"ca_file": "/etc/vllm/tls/ca.crt", "client_cert": None, "client_key": None}


def test_tls_off_is_plain_http_with_no_ssl_flag():
    inst = one(tls=dict(TLS, certfile="", keyfile="", ca_file=""))
    assert inst["url"] == "http://127.0.0.1:8000" and inst["record"]["tls"] is None
    assert not [a for a in inst["argv"] if a.startswith("--ssl")]


def test_tls_server_name_replaces_the_probe_address():
    inst = one(tls=dict(TLS, server_name="gpu-01.example.net"), options={"host": "0.0.0.0"}, api_key_set=True)
    assert inst["url"] == "https://gpu-01.example.net:8000"


@pytest.mark.parametrize("auth,reqs", [("optional", "1"), ("required", "2")])
def test_client_certificates_render_cert_reqs_and_the_probe_presents_one(auth, reqs):
    inst = one(tls=dict(TLS, client_auth=auth, probe_cert="/etc/vllm/tls/probe.crt",
                        probe_key="/etc/vllm/tls/probe.key"))
    assert flag_value(inst["argv"], "--ssl-cert-reqs") == reqs
    assert flag_value(inst["argv"], "--ssl-ca-certs") == "/etc/vllm/tls/ca.crt"
    assert inst["record"]["tls"] == {"ca_file": "/etc/vllm/tls/ca.crt", "client_cert": "/etc/vllm/tls/probe.crt",
                                     "client_key": "/etc/vllm/tls/probe.key"}


def test_https_given_in_extra_args_is_probed_over_https():
    inst = one(extra_args=["--ssl-certfile", "/srv/c.pem", "--ssl-keyfile", "/srv/k.pem"])
    assert inst["url"].startswith("https://") and inst["record"]["tls"]["ca_file"] is None


@pytest.mark.parametrize("tls,words", [
    (dict(TLS, keyfile=""), "vllm_server_tls_key"),
    (dict(TLS, client_auth="always"), "none, optional, required"),
    (dict(TLS, client_auth="optional", ca_file=""), "vllm_server_tls_ca"),
    (dict(TLS, client_auth="required"), "vllm_server_tls_probe_cert"),
    (dict(TLS, certfile="/etc/vllm/tls/a b.crt"), "absolute path"),
    (dict(TLS, certfile="/etc/x\nExecStartPre=+/bin/sh"), "absolute path"),
    (dict(TLS, server_name="a b"), "vllm_server_tls_server_name"),
])
def test_bad_tls_settings_are_refused_naming_the_variable(tls, words):
    with pytest.raises(InstanceError) as err:
        one(tls=tls)
    assert words in str(err.value)


def test_tls_with_a_vllm_that_lacks_ssl_flags_is_refused_not_served_plain():
    flags = {"--model": {}, "--port": {}, "--host": {}, "--max-num-seqs": {}, "--max-model-len": {}}
    manifest = {"vllm_version": "0.32.0", "flags": flags}
    with pytest.raises(InstanceError) as err:
        one(tls=TLS, flag_manifest=manifest)
    assert "plain HTTP" in str(err.value)
