# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
name: prometheus_targets
short_description: Prometheus file_sd targets for every vLLM instance and node_exporter of the hosts
version_added: 0.4.0
description:
  - What the C(kvfleet.vllm.prometheus) role writes into its file_sd files, one target per instance
    that serves an API, and one node_exporter target per host.
  - Each host's instances are its deployment record (C(ansible_local.kvfleet_vllm_server.current)),
    where the role read one; else the instance model the server role derived in this run
    (C(server_result.instances)), less a serving group's headless workers (their engines are in their
    head's /metrics).
  - A host is reached at C(vllm_prometheus_address), else C(ansible_host), else its name. An instance
    whose record has an https URL or TLS files is scraped over https.
  - Labels C(host), C(vllm_instance), C(model) (the instance's C(--served-model-name), else the
    host's served name, model source name or model), C(vllm_version), C(device) and
    C(max_num_seqs); an empty label is left out.
options:
  _input:
    description: The vLLM hosts, in order.
    type: list
    elements: str
    required: true
  hostvars:
    description: Ansible's C(hostvars).
    type: dict
    required: true
  node_exporter_port:
    description: The port of each host's node_exporter.
    type: int
    required: true
"""

EXAMPLES = r"""
- name: List every vLLM instance and node_exporter
  ansible.builtin.set_fact:
    _prometheus_found: "{{ groups['vllm'] | kvfleet.vllm.prometheus_targets(hostvars, 9100) }}"
"""

RETURN = r"""
_value:
  description: C(vllm) and C(node), each a list of file_sd entries (C(targets), C(labels)); C(missing),
    the hosts with neither a record nor a derived instance.
  type: dict
"""

import re
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._hostvars import current_record, host_names, server_result, var


def _served_model(hv, argv):
    """The instance's --served-model-name, else the host's served name, source name or model."""
    argv = list(argv or [])
    if "--served-model-name" in argv[:-1]:
        return argv[argv.index("--served-model-name") + 1]
    source = var(hv, "vllm_server_model_source", {})
    source_name = source.get("name") if isinstance(source, Mapping) else None
    return var(hv, "vllm_server_served_model_name") or source_name or var(hv, "vllm_server_model", "")


def _text(value):
    return "" if value is None else str(value)


def host_targets(name, hv, node_exporter_port):
    """(vllm entries, node entry, known) of one host, from its variables."""
    current = current_record(hv)
    derived = server_result(hv, "instances", []) or []
    address = var(hv, "vllm_prometheus_address") or var(hv, "ansible_host") or name
    if "instances" in current:
        records = current.get("instances") or []
        known = list(records) + list(current.get("workers") or [])
        version, device = current.get("version", ""), current.get("device", "")
    else:
        records = [d.get("record") for d in derived if not d.get("headless")]
        known = derived
        version, device = var(hv, "vllm_server_version", ""), var(hv, "vllm_server_device", "")
    vllm = []
    for rec in records:
        if not isinstance(rec, Mapping) or not rec.get("name") or not rec.get("port"):
            raise AnsibleFilterError("prometheus_targets: host %s has an instance without a name or port: %r" % (name, rec))
        argv = next((d.get("argv") for d in derived if d.get("name") == rec["name"]), None)
        labels = {"host": name, "vllm_instance": rec["name"], "model": _text(_served_model(hv, argv)),
                  "vllm_version": _text(version), "device": _text(device),
                  "max_num_seqs": _text(rec.get("max_num_seqs") or "")}
        if re.match("https:", rec.get("url") or "") or rec.get("tls"):
            labels["__scheme__"] = "https"
        vllm.append({"targets": ["%s:%s" % (address, rec["port"])],
                     "labels": dict((k, v) for k, v in labels.items() if v != "")})
    node = {"targets": ["%s:%s" % (address, node_exporter_port)], "labels": {"host": name}}
    return vllm, node, bool(known)


def _prometheus_targets(hosts, hostvars=None, node_exporter_port=None):
    if hostvars is None or node_exporter_port is None:
        raise AnsibleFilterError("prometheus_targets needs hostvars and node_exporter_port")
    out = {"vllm": [], "node": [], "missing": []}
    for name in host_names("prometheus_targets", hosts):
        vllm, node, known = host_targets(name, hostvars[name], node_exporter_port)
        out["vllm"].extend(vllm)
        out["node"].append(node)
        if not known:
            out["missing"].append(name)
    return out


class FilterModule(object):
    def filters(self):
        return {"prometheus_targets": _prometheus_targets}
