# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one model of a vLLM instance: every fact derived from the server role's variables.

The unit template, the preflight, the deployment record (which the host program, the monitor,
the restart guard, diagnose, deploy and rolling_restart read) all take an instance's unit,
address, probe URL, argv, cap and drain time from here, so they cannot disagree.
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.kvfleet.vllm.plugins.module_utils._layout import unit_name
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._serving_group import (
    SINCE as _GROUP_FLAGS, GroupError, dp_argv, dp_options, group_record, missing_flags, ray_node)
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._vllm_flags import (
    EXTRA_FLAGS, OPTIONS, VllmArgsError, _manifest_flags, parse_version, render)

__all__ = ["InstanceError", "build", "environments", "flag_value", "is_loopback", "probe_host"]

# Binding these (or giving no --host, vLLM's default) listens on every interface.
ANY = ("", "0.0.0.0", "::")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}\Z")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
# CUDA_VISIBLE_DEVICES: indices, GPU-/MIG- UUIDs, comma separated
_CUDA_DEVICES = re.compile(r"^([0-9]+|(GPU|MIG)-[A-Za-z0-9/-]+)(,([0-9]+|(GPU|MIG)-[A-Za-z0-9/-]+))*\Z")
# Settings whose empty value means "not set" (the role's defaults use "" for unset)
_UNSET = ("", None)


class InstanceError(ValueError):
    """Bad instance settings; the message names the variable, the instance and what is allowed."""


def _gpus_needed(argv, flags=None):
    """{'count', 'why'}: GPUs the instance's engines on this host take: its local data parallel
    engines (all of --data-parallel-size unless --data-parallel-size-local says fewer), each
    --tensor-parallel-size x --pipeline-parallel-size."""
    def size(flag):
        value = _int_or_none(flag_value(argv, flag, flags))
        return value if value and value > 0 else None
    local, total = size("--data-parallel-size-local"), size("--data-parallel-size")
    tp, pp = size("--tensor-parallel-size"), size("--pipeline-parallel-size")
    parts = []
    if local or total:
        parts.append("%s %d" % ("--data-parallel-size-local" if local else "--data-parallel-size", local or total))
    parts += ["%s %d" % (f, v) for f, v in (("--tensor-parallel-size", tp), ("--pipeline-parallel-size", pp)) if v]
    return {"count": (local or total or 1) * (tp or 1) * (pp or 1), "why": " x ".join(parts) or "one engine"}


# The long flags vLLM's parser has, as far as the collection's tables know them: what an
# abbreviation is checked against when the installed vLLM's flag manifest is not at hand.
_TABLE_FLAGS = frozenset(
    [spec["flag"] for _key, spec in OPTIONS] + [spec["negative"] for _key, spec in OPTIONS if spec.get("negative")]
    + list(EXTRA_FLAGS) + list(_GROUP_FLAGS) + ["--config", "--api-key", "--hf-token", "--help"])


def _flag_of(arg, want, flags):
    """Whether vLLM's parser reads argument `arg` as long flag `want` (and the value written
    inline after '=', if any): (bool, inline value or None).

    vLLM 0.32.0's FlexibleArgumentParser (vllm/utils/argparse_utils.py) turns underscores into
    dashes in the flag's name and leaves argparse's allow_abbrev at its default (on): an exact
    flag wins, else a prefix of exactly one flag is that flag (``--ho 0.0.0.0``, ``--hos=::``
    set --host), and a prefix of several stops the parser ("ambiguous option"). A prefix of
    `want` that other known flags share raises InstanceError: the collection cannot tell which
    one vLLM would take, and guards (the public bind above all) must not guess."""
    name, eq, value = arg.partition("=")
    name = "--" + name[2:].split(".", 1)[0].replace("_", "-")
    inline = value if eq else None
    if name == want:
        return True, inline
    if name in flags or len(name) < 3 or not want.startswith(name):
        return False, None
    others = sorted(f for f in flags if f.startswith(name) and f != want)
    if others:
        raise InstanceError("%s abbreviates %s and %s: vLLM refuses an ambiguous abbreviation, and the "
                            "collection reads %s from the arguments; write the flag in full"
                            % (arg.partition("=")[0], want, ", ".join(others), want))
    return True, inline


def flag_value(argv, flag, flags=None):
    """The value the last occurrence of a long flag gets in argv, as vLLM's parser reads it
    (``--flag value``, ``--flag=value``, underscores for dashes, an unambiguous abbreviation:
    see _flag_of); None when absent. `flags`: the parser's long flags (the installed vLLM's
    manifest), else the collection's table. Arguments after a bare ``--`` are positional."""
    found = None
    want = "--" + flag.lstrip("-").replace("_", "-")
    known = _TABLE_FLAGS if flags is None else frozenset(flags) | {"--help"}
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if not arg.startswith("--"):
            continue
        match, inline = _flag_of(arg, want, known)
        if not match:
            continue
        if inline is not None:
            found = inline
        elif i + 1 < len(argv):
            found = argv[i + 1]
    return found


def is_loopback(host):
    """Whether a server bound to `host` is reachable from this host only: a loopback IP literal
    (127.0.0.0/8, ::1, bracketed or not) or exactly 'localhost'. A name such as
    127.0.0.1.example.net is whatever its DNS says, so it is not."""
    if not isinstance(host, str):
        return False
    if host == "localhost":
        return True
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def probe_host(bind):
    """The address this host uses to reach a server bound to `bind`, as a URL host part."""
    if bind in ANY or bind is None:
        return "127.0.0.1"
    if ":" in bind and not bind.startswith("["):
        return "[%s]" % bind  # an IPv6 literal
    return bind


def _int_or_none(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _bool(value):
    # role settings arrive templated: "True"/"False" strings as often as booleans
    return value is True or str(value).strip().lower() in ("true", "yes", "1", "on")


def _no_newline(where, value):
    # the value is not echoed: environment values may be secrets
    if "\n" in str(value) or "\r" in str(value):
        raise InstanceError("%s: must not contain a line break (it would add a line to the "
                            "systemd unit or environment file)" % where)


def _environment(settings, inst, where, extra=None):
    """The instance's environment: the shared one, its own over it, then `extra` where unset.
    Checked (names, no line break) without echoing a value: values may be secrets."""
    environment = dict(settings.get("environment") or {})
    environment.update(inst.get("environment") or {})
    for key, value in (extra or {}).items():
        environment.setdefault(key, value)
    for key, value in environment.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise InstanceError("%s.environment: %r is not a valid variable name "
                                "(letters, digits and '_', not starting with a digit)" % (where, key))
        _no_newline("%s.environment.%s" % (where, key), value)
    return environment


_CLIENT_AUTH = {"none": 0, "optional": 1, "required": 2}
# a path the role wrote: absolute, no line break, no space (it goes in argv and in systemd lines)
_PATH = re.compile(r"^/[A-Za-z0-9._/+@:-]*\Z")


def _tls(tls, prefix):
    """The role's TLS settings -> {options (vLLM's --ssl-* as option keys), server_name, probe}.

    `probe` is what a probe on the host uses: ca_file (None: the system's trust store),
    client_cert and client_key (when the server requires a client certificate)."""
    tls = dict((k, v) for k, v in (tls or {}).items() if v not in _UNSET)
    out = {"options": {}, "server_name": None, "probe": {"ca_file": None, "client_cert": None,
                                                         "client_key": None}}
    if not tls.get("certfile"):
        return out
    for key in ("certfile", "keyfile", "ca_file", "probe_cert", "probe_key"):
        value = tls.get(key)
        if value is not None and not (isinstance(value, str) and _PATH.match(value)):
            raise InstanceError("%stls: %s must be an absolute path without spaces, got %r"
                                % (prefix, key, value))
    if not tls.get("keyfile"):
        raise InstanceError("%stls_cert needs %stls_key (the certificate's private key)" % (prefix, prefix))
    auth = str(tls.get("client_auth", "none"))
    if auth not in _CLIENT_AUTH:
        raise InstanceError("%stls_client_auth must be one of none, optional, required; got %r"
                            % (prefix, tls.get("client_auth")))
    if auth != "none" and not tls.get("ca_file"):
        raise InstanceError("%stls_client_auth %s needs %stls_ca (the CA that signs client "
                            "certificates)" % (prefix, auth, prefix))
    if auth == "required" and not (tls.get("probe_cert") and tls.get("probe_key")):
        raise InstanceError("%stls_client_auth required needs %stls_probe_cert and %stls_probe_key: "
                            "the collection's own probes must present a client certificate"
                            % (prefix, prefix, prefix))
    name = tls.get("server_name")
    if name is not None and not (isinstance(name, str) and re.match(r"^[A-Za-z0-9.-]+\Z", name)):
        raise InstanceError("%stls_server_name must be a host name (letters, digits, '.', '-'), "
                            "got %r" % (prefix, name))
    out["options"] = {"ssl_certfile": tls["certfile"], "ssl_keyfile": tls["keyfile"]}
    if auth != "none":
        out["options"].update(ssl_ca_certs=tls["ca_file"], ssl_cert_reqs=_CLIENT_AUTH[auth])
    out["server_name"] = name
    out["probe"] = {"ca_file": tls.get("ca_file"),
                    "client_cert": tls.get("probe_cert") if auth != "none" else None,
                    "client_key": tls.get("probe_key") if auth != "none" else None}
    return out


def _ray_node_instance(inst, name, where, settings):
    """A serving group member's Ray node (`ray start`, from the vLLM venv): a unit of its own with
    no API, recorded among the host's headless workers, so that everything that restarts a group
    stops the head's vLLM first, starts the nodes, then the head (docs/serving-groups.md)."""
    try:
        argv, group = ray_node(inst["ray_node"], where, settings.get("ray_temp_dir", "/var/lib/vllm/ray"),
                               settings.get("ray_start_args"))
    except GroupError as exc:
        raise InstanceError(str(exc))
    for arg in argv:
        _no_newline("%s (ray start arguments)" % where, arg)
    ray = inst["ray_node"]
    environment = _environment(settings, inst, where)
    unit = unit_name(name)
    env_file = "%s/%s.env" % (settings.get("config_dir", "/etc/vllm"), name)
    record = {"name": name, "unit": unit, "url": None, "port": ray["port"], "bind": ray["node_address"],
              "max_num_seqs": None, "limits": {}, "drain_seconds": 0, "env_file": env_file, "tls": None,
              "group": group, "ray_version": settings.get("ray_version")}
    return {
        "name": name, "unit": unit, "port": ray["port"], "bind": ray["node_address"], "public": False,
        "url": None, "argv": argv, "max_num_seqs": None, "limits": {}, "drain_seconds": 0,
        "gpu_memory_utilization": None,
        "gpus_needed": {"count": ray["gpus"], "why": "its GPUs in the Ray cluster (%sserving_group_gpus %d)"
                        % (settings.get("var_prefix", "vllm_server_"), ray["gpus"])},
        "cuda_visible_devices": str(inst.get("cuda_visible_devices", "") or ""),
        "environment_keys": sorted(environment), "env_file": env_file, "keys_file": None, "tls": None,
        "group_role": "worker", "headless": True, "data_parallel": None, "ray_node": ray, "ray": None,
        "record": record,
    }, environment


def build(instances, settings):
    """Role variables -> (list of instance dicts, warnings).

    An instance dict holds the names of its environment variables (`environment_keys`), never
    their values: the role loops over these dicts, and Ansible prints a loop's whole item with
    -v whatever its label. The values (secrets, perhaps) come from environments() alone.

    `settings` holds the role's shared values: version, device, options (the role's flag
    variables, vllm_server_options already merged over them), extra_args, port (default),
    environment, config_dir, api_key_set, allow_unauthenticated, var_prefix, and optionally
    flag_manifest (the installed vLLM's, read back by the role), strict_flags, allow_v0_engine,
    api_key_rotation (previous keys are accepted: argv reads them from <config_dir>/<name>.keys.yaml),
    tls (host paths: certfile, keyfile, ca_file, client_auth none/optional/required, server_name,
    probe_cert, probe_key; see _tls_options), ray_temp_dir, ray_start_args and ray_version (a
    serving group over Ray: plugins/filter/serving_group.py gives its members `ray` and `ray_node`).
    """
    out, warnings, _environments = _build(instances, settings)
    return out, warnings


def environments(instances, settings):
    """Role variables -> {instance name: its environment (name -> value)}: what its environment
    file holds besides the role's own variables. Only the task that writes that file reads it."""
    return _build(instances, settings)[2]


def _build(instances, settings):
    """build()'s instance dicts and warnings, and environments()'s mapping."""
    prefix = settings.get("var_prefix", "vllm_server_")
    if not isinstance(instances, list) or not instances:
        raise InstanceError("%sinstances must be a non-empty list of {name, port, ...}" % prefix)
    out, warnings, seen_names, seen_ports, envs = [], [], set(), set(), {}
    for index, inst in enumerate(instances):
        if not isinstance(inst, dict):
            raise InstanceError("%sinstances[%d] must be a dictionary, got %r" % (prefix, index, inst))
        name = inst.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise InstanceError(
                "%sinstances[%d].name must be 1-32 lower-case letters, digits, '-' or '_' "
                "starting with a letter or digit; got %r" % (prefix, index, name))
        if name in seen_names:
            raise InstanceError("%sinstances: the name %r is used twice" % (prefix, name))
        seen_names.add(name)
        where = "%sinstances[%s]" % (prefix, name)
        unknown = set(inst) - {"name", "port", "options", "extra_args", "environment",
                               "cuda_visible_devices", "data_parallel", "ray", "ray_node"}
        if unknown:
            raise InstanceError("%s: unknown key(s) %s; allowed: name, port, options, extra_args, "
                                "environment, cuda_visible_devices, data_parallel"
                                % (where, ", ".join(sorted(unknown))))
        if inst.get("ray_node") is not None:
            node, envs[name] = _ray_node_instance(inst, name, where, settings)
            if node["port"] in seen_ports:
                raise InstanceError("%s: port %d is used by another instance" % (where, node["port"]))
            seen_ports.add(node["port"])
            out.append(node)
            continue
        ray = inst.get("ray")
        if ray is not None and (not isinstance(ray, dict) or ray.get("role") != "head"
                                or not isinstance(ray.get("world"), int) or not isinstance(ray.get("port"), int)):
            raise InstanceError("%s.ray: set by the serving_group filter for a Ray group's head (%sserving_group_backend "
                                "ray); got %r" % (where, prefix, ray))
        inst_options = inst.get("options") or {}
        inst_extra = inst.get("extra_args") or []
        if not isinstance(inst_options, dict):
            raise InstanceError("%s.options must be a dictionary of vLLM options" % where)
        if not isinstance(inst_extra, list):
            raise InstanceError("%s.extra_args must be a list of arguments" % where)
        if not isinstance(settings.get("extra_args") or [], (list, tuple)):
            # a string would be taken one character at a time: refuse it, naming the variable
            raise InstanceError("%sextra_args must be a list of arguments, such as [\"--enforce-eager\"] or "
                                "[\"--max-num-batched-tokens\", \"8192\"]; got the string %r"
                                % (prefix, str(settings.get("extra_args"))[:80]))

        options = {}
        for source in (settings.get("options") or {}, inst_options):
            options.update(source)
        port = _int_or_none(inst.get("port", settings.get("port", 8000)))
        if port is None or not 0 < port < 65536:
            raise InstanceError("%s.port must be an integer from 1 to 65535, got %r"
                                % (where, inst.get("port", settings.get("port"))))
        options["port"] = port
        role = dp = None
        if inst.get("data_parallel") not in _UNSET:
            try:
                dp, role = dp_options(inst["data_parallel"], where, port)
            except GroupError as exc:
                raise InstanceError(str(exc))
        tls = _tls(settings.get("tls"), prefix)
        options.update(tls["options"])
        options["extra_args"] = list(settings.get("extra_args") or []) + list(inst_extra)
        options = dict((k, v) for k, v in options.items() if v not in _UNSET)
        try:
            argv, warns = render(options, settings["version"], settings.get("device", "cuda"),
                                 var_prefix=prefix, context="instance " + name,
                                 manifest=settings.get("flag_manifest") or None,
                                 strict=_bool(settings.get("strict_flags")),
                                 allow_v0_engine=_bool(settings.get("allow_v0_engine")))
        except VllmArgsError as exc:
            raise InstanceError(str(exc))
        warnings.extend(warns)
        # the installed vLLM's flags (its manifest) for what an abbreviation stands for; the
        # collection's table without one (render() has warned about a manifest of another version)
        known = _manifest_flags(settings.get("flag_manifest") or None, parse_version(settings["version"]),
                                settings["version"], [])
        keys_file = None
        if _bool(settings.get("api_key_rotation")):
            # Several keys at once (a rotation) go in a 0640 root:vllm file read through vLLM's
            # --config, never in argv: the unit and `ps` show only the file's path.
            if flag_value(argv, "--config", known) is not None:
                raise InstanceError("%s: --config in extra_args cannot be combined with %sapi_keys_previous "
                                    "(vLLM reads one config file, which then holds the keys)" % (where, prefix))
            keys_file = "%s/%s.keys.yaml" % (settings.get("config_dir", "/etc/vllm"), name)
            argv = argv + ["--config", keys_file]
        if role is not None or ray is not None:
            # last, so that they win over the same flags anywhere else; never left out (a member
            # without them would serve alone; a Ray head would not use the cluster): a vLLM that
            # lacks one fails here
            group_argv = dp_argv(dp) if role is not None else ["--distributed-executor-backend", "ray"]
            version = parse_version(settings["version"])
            # render() has warned already when the manifest describes another version
            manifest = _manifest_flags(settings.get("flag_manifest") or None, version,
                                       settings["version"], [])
            missing = missing_flags(group_argv, version, manifest)
            if missing:
                raise InstanceError("%s.%s: vLLM %s does not accept %s, which %s needs"
                                    % (where, "data_parallel" if role is not None else "ray", settings["version"],
                                       ", ".join(missing), "data parallel" if role is not None else "a Ray group"))
            argv = argv + group_argv
        for arg in argv:
            _no_newline("%s (vLLM arguments)" % where, arg)
        headless = role == "worker"
        if ray is not None:
            tp = _int_or_none(flag_value(argv, "--tensor-parallel-size", known)) or 1
            pp = _int_or_none(flag_value(argv, "--pipeline-parallel-size", known)) or 1
            if tp * pp != ray["world"]:
                raise InstanceError(
                    "%s: tensor_parallel_size (%d) x pipeline_parallel_size (%d) in %soptions = %d GPUs, but "
                    "the Ray group's members give %d (%sserving_group_gpus on each); vLLM would wait 30 minutes "
                    "for the rest, then fail" % (where, tp, pp, prefix, tp * pp, ray["world"], prefix))

        # What vLLM really runs with: the last --flag wins, extra_args included.
        port = _int_or_none(flag_value(argv, "--port", known))
        if port is None or not 0 < port < 65536:
            raise InstanceError("%s: --port in extra_args must be an integer from 1 to 65535" % where)
        if port in seen_ports:
            raise InstanceError("%s: port %d is used by another instance" % (where, port))
        seen_ports.add(port)
        bind = flag_value(argv, "--host", known)
        bind = "" if bind is None else bind
        # a headless worker runs no API server: nothing listens on its port
        # (a --config file of extra_args may set host too, but the command line wins over it:
        # vLLM inserts the file's flags before the others, FlexibleArgumentParser._pull_args_from_config;
        # without --host here the instance counts as listening everywhere, whatever the file says)
        public = not headless and not is_loopback(bind)
        if public and not settings.get("api_key_set") and not settings.get("allow_unauthenticated"):
            raise InstanceError(
                "%s listens on %s (reachable from other machines) and %sapi_key is empty: "
                "anyone could use the server. Set %sapi_key, or %sallow_unauthenticated: true "
                "if a proxy in front of it authenticates."
                % (where, repr(bind) if bind else "every interface (no --host)", prefix, prefix, prefix))
        # https exactly when vLLM gets a certificate (the role's variables or extra_args)
        https = flag_value(argv, "--ssl-certfile", known) is not None
        if tls["options"] and not https:
            raise InstanceError("%s: %stls_cert is set but this vLLM (%s) does not accept "
                                "--ssl-certfile: it would serve plain HTTP" % (where, prefix, settings["version"]))
        seqs = _int_or_none(flag_value(argv, "--max-num-seqs", known))
        # a Ray head's vLLM takes no GPU of its own: its workers take the Ray nodes' (counted there)
        gpus_needed = _gpus_needed(argv, known) if ray is None else {
            "count": 0, "why": "its workers run on the Ray cluster's GPUs (counted on each Ray node)"}
        # the scheduler settings /metrics does not show, for the gate's diagnosis
        limits = dict((flag[2:].replace("-", "_"), _int_or_none(flag_value(argv, flag, known)))
                      for flag in ("--max-num-batched-tokens", "--max-num-active-seqs",
                                   "--max-model-len"))
        limits["max_num_seqs"] = seqs
        drain = _int_or_none(flag_value(argv, "--shutdown-timeout", known)) or 0

        # a Ray head: without RAY_ADDRESS ray.init() looks for the cluster in its temp folder, and
        # where it does not find one starts a cluster of its own with no GPU (ray/_private/worker.py, 2.60.0)
        envs[name] = environment = _environment(
            settings, inst, where, {"RAY_ADDRESS": "%s:%d" % (ray["address"], ray["port"])} if ray is not None else None)
        cuda = str(inst.get("cuda_visible_devices", "") or "")
        if cuda and not _CUDA_DEVICES.match(cuda):
            raise InstanceError("%s.cuda_visible_devices must be GPU indices or UUIDs separated "
                                "by commas, such as 0 or 0,1; got %r" % (where, cuda))
        gmu = options.get("gpu_memory_utilization")
        host = tls["server_name"] if https and tls["server_name"] else probe_host(bind)
        url = None if headless else "%s://%s:%d" % ("https" if https else "http", host, port)
        # what every probe on the host needs to check the server's certificate (and present
        # its own, when the server requires one); None: plain HTTP
        probe_tls = tls["probe"] if https else None
        unit = unit_name(name)
        env_file = "%s/%s.env" % (settings.get("config_dir", "/etc/vllm"), name)
        # what the host program, the monitor, the restart guard and the playbooks read back
        record = {"name": name, "unit": unit, "url": url, "port": port, "bind": bind,
                  "max_num_seqs": seqs, "limits": limits, "drain_seconds": drain,
                  "env_file": env_file, "tls": probe_tls}
        group_role = role if role is not None and dp.get("data_parallel_address") else None
        if group_role:
            # only on a group's members: the records of everything else stay as they were (an
            # upgrade of the collection must not read as a change and restart converged hosts)
            record["group"] = group_record(dp, group_role)
        if ray is not None:
            group_role = "head"
            record["group"] = {"key": "%s:%d" % (ray["address"], ray["port"]), "role": "head", "backend": "ray",
                               "size": ray["world"], "size_local": 0}
        out.append({
            "name": name,
            "unit": unit,
            "port": port,
            "bind": bind,
            "public": public,
            "url": url,
            "argv": argv,
            "max_num_seqs": seqs,
            "limits": limits,
            "drain_seconds": drain,
            "gpu_memory_utilization": float(gmu) if gmu not in _UNSET else None,
            # the GPUs this host's engines of the instance take (the GPU preflight counts them)
            "gpus_needed": gpus_needed,
            "cuda_visible_devices": cuda,
            # the names only (see build()); the values: environments()
            "environment_keys": sorted(environment),
            "env_file": env_file,
            "keys_file": keys_file,
            "tls": probe_tls,
            # a serving group's member: head (serves the API) or worker (headless, probed
            # through its head); None otherwise
            "group_role": group_role,
            "headless": headless,
            # the vLLM data parallel options it runs with (None without data_parallel)
            "data_parallel": dp,
            # a Ray group's head: its cluster (ray_plan's); a Ray node is an entry of its own
            "ray": ray,
            "ray_node": None,
            "record": record,
        })
    return out, warnings, envs
