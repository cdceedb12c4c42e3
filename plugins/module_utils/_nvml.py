# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU facts through NVML. The pynvml module is passed in, so tests use a fake.

Every NVML name used here was checked against pynvml.py of nvidia-ml-py 13.615.71; where a name
changed across releases the new one is tried first and the old one after it. The health rules
(``judge``) are pure and take only the fields read here, so the host program and the diagnosis
reuse them; docs/gpu-health.md explains each reason and its source.
"""

from __future__ import annotations

import time

__all__ = ["HEALTH_FIELDS", "HEALTH_VERDICTS", "NvmlUnavailable", "THRESHOLDS", "XID_DEGRADED",
           "XID_UNHEALTHY", "collect", "gpus_visible", "headroom", "health_findings", "judge",
           "process_memory"]


class NvmlUnavailable(Exception):
    """NVML could not be initialised (no driver, no library); the message says which."""


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _optional(nvml, func, *args):
    """Fields some GPUs or drivers do not support become None rather than failing."""
    try:
        return func(*args)
    except nvml.NVMLError:
        return None


def _cuda_version(nvml):
    getter = getattr(nvml, "nvmlSystemGetCudaDriverVersion_v2", None) or \
        nvml.nvmlSystemGetCudaDriverVersion
    raw = _optional(nvml, getter)
    if not raw:
        return None
    return "%d.%d" % (raw // 1000, (raw % 1000) // 10)


def _processes(nvml, handle):
    seen = {}
    for kind, getter in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                         ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
        func = getattr(nvml, getter, None)
        for proc in (_optional(nvml, func, handle) if func else None) or []:
            used = getattr(proc, "usedGpuMemory", None)
            entry = seen.setdefault(proc.pid, {"pid": proc.pid, "used_memory": used, "types": []})
            entry["types"].append(kind)
    return sorted(seen.values(), key=lambda p: p["pid"])


# ---------------------------------------------------------------------------------------------
# GPU health: what NVML reads (``_health_fields``) and what it means (``judge``, pure).
#
# Thresholds and Xid lists, in one place. Sources (docs/gpu-health.md quotes them):
#   [ECC]  NVIDIA GPU Memory Error Management (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt):
#          row remapping needs a GPU reset to take effect; the row-remapping failure flag meets
#          the RMA criteria; legacy page retirement holds at most 64 pages.
#   [DPR]  NVIDIA Dynamic Page Retirement (docs.nvidia.com/deploy/dynamic-page-retirement): a
#          retired page is excluded only after the driver reloads or the GPU resets ("pending").
#   [XID]  NVIDIA Xid catalogue (docs.nvidia.com/deploy/xid-errors).
#   [NVML] NVML API reference, nvmlClocksEventReasons and nvmlTemperatureThresholds_t.
THRESHOLDS = {
    # [ECC]: an uncorrectable error since the driver loaded; the data it touched is lost and a
    # remap or retirement is waiting for a reset
    "ecc_volatile_uncorrected_max": 0,
    # lifetime uncorrectable errors already mapped out (nothing pending): the GPU works, but
    # its memory has failed before
    "ecc_aggregate_uncorrected_max": 0,
    # [ECC]: legacy page retirement stops at 64 pages; this close to it the next retirement may
    # have no room (our margin, not an NVIDIA number)
    "retired_pages_degraded": 60,
    # [ECC] row remapper histogram: banks with no spare row left; the next uncorrectable error
    # in such a bank sets the remapping failure flag
    "remap_banks_without_spare_max": 0,
    # NVLink data-link error counters (replay, recovery, CRC) on an active link: any, or any
    # growth when an earlier reading is given
    "nvlink_errors_max": 0,
}
# [XID] critical Xids: the GPU needs a reset or a replacement before it serves again.
#   48 double-bit (uncorrectable) ECC error; 63 ECC page retirement / row remapping recorded
#   (takes effect at the next reset); 64 page retirement / row remapping could not be recorded
#   (RMA); 79 the GPU has fallen off the bus; 94 contained ECC error (a remap is pending);
#   95 uncontained ECC error (every process on the GPU is affected; reset required).
XID_UNHEALTHY = {
    48: "drain the host and reset the GPU (double-bit ECC error); replace the GPU if it recurs",
    63: "reset the GPU so that the recorded row remapping or page retirement takes effect",
    64: "drain the host and replace the GPU (the row remapping or page retirement failed)",
    79: "drain the host and power-cycle it; replace the GPU or its riser if it falls off the bus again",
    94: "reset the GPU when its work is drained (a contained ECC error left a row remap pending)",
    95: "drain the host and reset the GPU (uncontained ECC error); replace the GPU if it recurs",
}
# [XID] 92: high single-bit ECC error rate: corrected, but the memory is wearing
XID_DEGRADED = {
    92: "watch the corrected ECC counters; replace the GPU if they keep growing",
}
# clock event reasons: (name, nvidia-ml-py >= 12.535 constant, older constant, bit).
# pynvml.py 13.615.71 defines nvmlClocksEventReason* (0x1..0x100) and keeps the deprecated
# nvmlClocksThrottleReason* names, which alone have BoardLimit (0x200) and Reliability (0x400).
_CLOCK_EVENT_REASONS = (
    ("gpu_idle", "nvmlClocksEventReasonGpuIdle", "nvmlClocksThrottleReasonGpuIdle", 0x1),
    ("applications_clocks_setting", "nvmlClocksEventReasonApplicationsClocksSetting",
     "nvmlClocksThrottleReasonApplicationsClocksSetting", 0x2),
    ("sw_power_cap", "nvmlClocksEventReasonSwPowerCap", "nvmlClocksThrottleReasonSwPowerCap", 0x4),
    ("hw_slowdown", "nvmlClocksEventReasonHwSlowdown", "nvmlClocksThrottleReasonHwSlowdown", 0x8),
    ("sync_boost", "nvmlClocksEventReasonSyncBoost", "nvmlClocksThrottleReasonSyncBoost", 0x10),
    ("sw_thermal_slowdown", "nvmlClocksEventReasonSwThermalSlowdown",
     "nvmlClocksThrottleReasonSwThermalSlowdown", 0x20),
    ("hw_thermal_slowdown", "nvmlClocksEventReasonHwThermalSlowdown",
     "nvmlClocksThrottleReasonHwThermalSlowdown", 0x40),
    ("hw_power_brake_slowdown", "nvmlClocksEventReasonHwPowerBrakeSlowdown",
     "nvmlClocksThrottleReasonHwPowerBrakeSlowdown", 0x80),
    ("display_clock_setting", "nvmlClocksEventReasonDisplayClockSetting",
     "nvmlClocksThrottleReasonDisplayClockSetting", 0x100),
    ("board_limit", None, "nvmlClocksThrottleReasonBoardLimit", 0x200),
    ("reliability", None, "nvmlClocksThrottleReasonReliability", 0x400),
)
# [NVML] the clock events that mean heat or power trouble: HW slowdown (clocks cut by half or
# more: too hot, external power brake, or power draw too high), its thermal and power-brake
# variants, and the software thermal slowdown (above the maximum operating temperature).
# sw_power_cap is the normal limit of a busy GPU and is not counted.
_SLOWDOWN_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
                     "sw_thermal_slowdown")
# NVLink data-link error counters: (name, pynvml constant, value in pynvml.py 13.615.71)
_NVLINK_COUNTERS = (("replay", "NVML_NVLINK_ERROR_DL_REPLAY", 0),
                    ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY", 1),
                    ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT", 2),
                    ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA", 3),
                    ("ecc_data", "NVML_NVLINK_ERROR_DL_ECC_DATA", 4))
_NVLINK_JUDGED = ("replay", "recovery", "crc_flit", "crc_data")
# the health fields a GPU may or may not support (null when NVML does not)
HEALTH_FIELDS = ("ecc", "retired_pages", "remapped_rows", "clock_event_reasons", "pcie", "nvlink",
                 "xid", "temperature")
HEALTH_VERDICTS = ("healthy", "degraded", "unhealthy")
# NVML error codes (pynvml.py 13.615.71: NVML_ERROR_TIMEOUT 10, NVML_ERROR_FUNCTION_NOT_FOUND 13,
# NVML_ERROR_GPU_IS_LOST 15, NVML_ERROR_RESET_REQUIRED 16)
_CODES = {"timeout": ("NVML_ERROR_TIMEOUT", 10), "not_found": ("NVML_ERROR_FUNCTION_NOT_FOUND", 13),
          "lost": ("NVML_ERROR_GPU_IS_LOST", 15), "reset": ("NVML_ERROR_RESET_REQUIRED", 16)}


def _is(nvml, exc, what):
    name, value = _CODES[what]
    return getattr(exc, "value", None) == getattr(nvml, name, value)


def _const(nvml, name, fallback):
    value = getattr(nvml, name, None) if name else None
    return fallback if value is None else value


class _Reader(object):
    """Calls NVML for one GPU: an error means "not supported here" (None), except a lost GPU or
    one that needs a reset, which it remembers."""

    def __init__(self, nvml, handle):
        self.nvml, self.handle = nvml, handle
        self.lost = self.reset_required = False

    def _note(self, exc):
        self.lost = self.lost or _is(self.nvml, exc, "lost")
        self.reset_required = self.reset_required or _is(self.nvml, exc, "reset")

    def call(self, names, *args):
        """The first of `names` that this pynvml has and the driver implements; None if none."""
        for name in (names,) if isinstance(names, str) else names:
            func = getattr(self.nvml, name, None)
            if func is None:
                continue
            try:
                return func(self.handle, *args)
            except self.nvml.NVMLError as exc:
                if _is(self.nvml, exc, "not_found"):
                    continue   # an older driver without the newer entry point: try the old one
                self._note(exc)
                return None
        return None


def _group(values):
    """A group of fields is null when NVML supports none of them."""
    return values if any(v is not None for v in values.values()) else None


def _int(value):
    return int(value) if value is not None else None


def _ecc(r):
    n = r.nvml
    unc = _const(n, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    cor = _const(n, "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
    vol, agg = _const(n, "NVML_VOLATILE_ECC", 0), _const(n, "NVML_AGGREGATE_ECC", 1)
    mode = r.call("nvmlDeviceGetEccMode")   # [current, pending]
    counts = dict((key, _int(r.call("nvmlDeviceGetTotalEccErrors", etype, ctype)))
                  for key, etype, ctype in (("volatile_corrected", cor, vol),
                                            ("volatile_uncorrected", unc, vol),
                                            ("aggregate_corrected", cor, agg),
                                            ("aggregate_uncorrected", unc, agg)))
    if mode is None and all(v is None for v in counts.values()):
        return None
    return {"enabled": (mode[0] == _const(n, "NVML_FEATURE_ENABLED", 1)) if mode else None,
            "volatile": {"corrected": counts["volatile_corrected"],
                         "uncorrected": counts["volatile_uncorrected"]},
            "aggregate": {"corrected": counts["aggregate_corrected"],
                          "uncorrected": counts["aggregate_uncorrected"]}}


def _retired_pages(r):
    n = r.nvml
    counts = {}
    for key, const, value in (("multiple_single_bit_ecc",
                               "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0),
                              ("double_bit_ecc", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1)):
        pages = r.call("nvmlDeviceGetRetiredPages", _const(n, const, value))
        counts[key] = len(pages) if pages is not None else None
    pending = r.call("nvmlDeviceGetRetiredPagesPendingStatus")
    counts["pending"] = (pending == _const(n, "NVML_FEATURE_ENABLED", 1)) if pending is not None else None
    return _group(counts)


def _remapped_rows(r):
    rows = r.call("nvmlDeviceGetRemappedRows")   # (correctable, uncorrectable, pending, failure)
    hist = r.call("nvmlDeviceGetRowRemapperHistogram")   # c_nvmlRowRemapperHistogramValues
    histogram = None
    if hist is not None:
        histogram = dict((k, _int(getattr(hist, k, None))) for k in ("max", "high", "partial", "low", "none"))
    if rows is None:
        return {"correctable": None, "uncorrectable": None, "pending": None, "failed": None,
                "histogram": histogram} if histogram else None
    return {"correctable": int(rows[0]), "uncorrectable": int(rows[1]), "pending": bool(rows[2]),
            "failed": bool(rows[3]), "histogram": histogram}


def _clock_event_reasons(r):
    # the new entry point first (nvidia-ml-py 12.535+), the deprecated one on older drivers
    mask = r.call(("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"))
    if mask is None:
        return None
    names, known = [], 0
    for name, new, old, documented in _CLOCK_EVENT_REASONS:
        bit = _const(r.nvml, new, None) if new else None
        bit = _const(r.nvml, old, documented) if bit is None else bit
        known |= bit
        if mask & bit:
            names.append(name)
    rest = int(mask) & ~known
    names.extend("unknown_0x%x" % (1 << b) for b in range(64) if rest & (1 << b))
    return names


def _pcie(r):
    return _group({"gen": _int(r.call("nvmlDeviceGetCurrPcieLinkGeneration")),
                   "width": _int(r.call("nvmlDeviceGetCurrPcieLinkWidth")),
                   # the link's best with this GPU in this slot
                   "max_gen": _int(r.call("nvmlDeviceGetMaxPcieLinkGeneration")),
                   "max_width": _int(r.call("nvmlDeviceGetMaxPcieLinkWidth")),
                   # the GPU's own best, whatever the slot
                   "gpu_max_gen": _int(r.call("nvmlDeviceGetGpuMaxPcieLinkGeneration"))})


def _nvlink(r):
    """Active links and their error counters; None when NVML knows no link on this GPU."""
    n = r.nvml
    enabled = _const(n, "NVML_FEATURE_ENABLED", 1)
    links, any_link = [], False
    # NVML_NVLINK_MAX_LINKS: 36 in pynvml.py 13.615.71, fewer in older releases
    for link in range(int(_const(n, "NVML_NVLINK_MAX_LINKS", 18))):
        state = r.call("nvmlDeviceGetNvLinkState", link)
        if state is None:
            if r.lost:
                break
            continue
        any_link = True
        if state != enabled:
            continue
        entry = {"link": link}
        for name, const, value in _NVLINK_COUNTERS:
            entry[name] = _int(r.call("nvmlDeviceGetNvLinkErrorCounter", link, _const(n, const, value)))
        links.append(entry)
    return links if any_link else None


def _temperature(r):
    n = r.nvml
    sensor = _const(n, "NVML_TEMPERATURE_GPU", 0)
    # nvmlDeviceGetTemperatureV is new in nvidia-ml-py 13; nvmlDeviceGetTemperature is marked
    # deprecated there but is what older releases and drivers have
    current = r.call(("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"), sensor)
    return _group({
        "current": _int(current),
        "slowdown": _int(r.call("nvmlDeviceGetTemperatureThreshold",
                                _const(n, "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", 1))),
        "shutdown": _int(r.call("nvmlDeviceGetTemperatureThreshold",
                                _const(n, "NVML_TEMPERATURE_THRESHOLD_SHUTDOWN", 0)))})


def _health_fields(nvml, handle):
    """The health fields of one GPU (no verdict yet; the Xid wait covers every GPU at once)."""
    r = _Reader(nvml, handle)
    fields = {"ecc": _ecc(r), "retired_pages": _retired_pages(r), "remapped_rows": _remapped_rows(r),
              "clock_event_reasons": _clock_event_reasons(r), "pcie": _pcie(r), "nvlink": _nvlink(r),
              "xid": None, "temperature": _temperature(r)}
    fields["gpu_lost"], fields["reset_required"] = r.lost, r.reset_required
    return fields


def _wait_for_xids(nvml, handles, wait_ms):
    """{index: {'waited_ms', 'events', 'unattributed'}} for the GPUs whose critical Xid events
    NVML delivers, after waiting up to wait_ms on one event set for all of them.

    NVML delivers the events that happen after the registration: this sees an Xid raised during
    the wait, not one in the kernel log from before (journalctl -k | grep Xid has those).
    """
    xid_type = _const(nvml, "nvmlEventTypeXidCriticalError", 0x8)
    needed = ("nvmlEventSetCreate", "nvmlDeviceGetSupportedEventTypes", "nvmlDeviceRegisterEvents",
              "nvmlEventSetWait", "nvmlEventSetFree")
    if wait_ms <= 0 or not handles or not all(hasattr(nvml, f) for f in needed):
        return {}
    try:
        event_set = nvml.nvmlEventSetCreate()
    except nvml.NVMLError:
        return {}
    found = {}
    try:
        for index, handle in handles:
            try:
                supported = nvml.nvmlDeviceGetSupportedEventTypes(handle)
                if not supported & xid_type:
                    continue
                nvml.nvmlDeviceRegisterEvents(handle, xid_type, event_set)
            except nvml.NVMLError:
                continue   # not supported here (or not allowed): null, not a failure
            found[index] = {"waited_ms": int(wait_ms), "events": [], "unattributed": []}
        if not found:
            return {}
        deadline = time.monotonic() + wait_ms / 1000.0
        while True:
            left = int((deadline - time.monotonic()) * 1000)
            if left <= 0:
                break
            try:
                data = nvml.nvmlEventSetWait(event_set, left)
            except nvml.NVMLError:
                break   # NVML_ERROR_TIMEOUT: nothing more in the time left
            if not data.eventType & xid_type:
                continue
            xid = int(data.eventData)
            try:
                where = nvml.nvmlDeviceGetIndex(data.device)
            except (nvml.NVMLError, AttributeError):
                where = next(iter(found)) if len(found) == 1 else None
            if where in found:
                found[where]["events"].append(xid)
            else:
                for entry in found.values():
                    entry["unattributed"].append(xid)
    finally:
        try:
            nvml.nvmlEventSetFree(event_set)
        except nvml.NVMLError:
            pass
    return found


def _reason(rid, severity, evidence, remedy):
    return {"id": rid, "severity": severity, "evidence": evidence, "remedy": remedy}


def _n(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def judge(fields, previous=None, thresholds=None):
    """The verdict on one GPU's health fields: {'verdict', 'reasons'}.

    fields: what ``collect`` returns under each GPU's 'health' (the reading's own verdict and
    reasons are ignored). previous: an earlier reading of the same GPU (the host program keeps
    one): NVLink errors then count only when they grew. verdict is None when none of
    HEALTH_FIELDS was read and NVML did not call the GPU lost.
    """
    th = dict(THRESHOLDS, **dict((k, v) for k, v in (thresholds or {}).items() if v is not None))
    f = fields or {}
    reasons = []
    U, D = "unhealthy", "degraded"
    if f.get("gpu_lost"):
        reasons.append(_reason("gpu_lost", U, {"nvml_error": "GPU is lost"},
                               "drain the host and power-cycle it; replace the GPU or its riser if it "
                               "falls off the bus again"))
    if f.get("reset_required"):
        reasons.append(_reason("reset_required", U, {"nvml_error": "GPU requires reset"},
                               "reset the GPU (nvidia-smi -r) or reboot the host"))
    ecc = f.get("ecc") or {}
    vol_unc = (ecc.get("volatile") or {}).get("uncorrected")
    agg_unc = (ecc.get("aggregate") or {}).get("uncorrected")
    if _n(vol_unc) > th["ecc_volatile_uncorrected_max"]:
        reasons.append(_reason("ecc_uncorrected_volatile", U, {
            "volatile_uncorrected": vol_unc, "max": th["ecc_volatile_uncorrected_max"]},
            "drain the host and reset the GPU; replace the GPU if uncorrectable errors return"))
    pages = f.get("retired_pages") or {}
    if pages.get("pending"):
        reasons.append(_reason("retired_pages_pending", U, {
            "pending": True, "multiple_single_bit_ecc": pages.get("multiple_single_bit_ecc"),
            "double_bit_ecc": pages.get("double_bit_ecc")},
            "reset the GPU (or reload the driver) so that the retired pages are excluded"))
    rows = f.get("remapped_rows") or {}
    if rows.get("failed"):
        reasons.append(_reason("row_remap_failed", U, {
            "failed": True, "uncorrectable": rows.get("uncorrectable"), "correctable": rows.get("correctable")},
            "drain the host and replace the GPU (a failed row remapping meets NVIDIA's RMA criteria)"))
    if rows.get("pending"):
        reasons.append(_reason("row_remap_pending", U, {
            "pending": True, "uncorrectable": rows.get("uncorrectable"), "correctable": rows.get("correctable")},
            "reset the GPU so that the pending row remapping takes effect"))
    xid = f.get("xid") or {}
    for code in sorted(set(xid.get("events") or [])):
        seen = {"xid": code, "seen": xid["events"].count(code), "waited_ms": xid.get("waited_ms")}
        if code in XID_UNHEALTHY:
            reasons.append(_reason("xid_critical", U, seen, XID_UNHEALTHY[code]))
        elif code in XID_DEGRADED:
            reasons.append(_reason("xid_degraded", D, seen, XID_DEGRADED[code]))
    memory_pending = any(r["id"] in ("ecc_uncorrected_volatile", "retired_pages_pending", "row_remap_failed",
                                     "row_remap_pending") for r in reasons)
    if _n(agg_unc) > th["ecc_aggregate_uncorrected_max"] and not memory_pending:
        reasons.append(_reason("ecc_uncorrected_aggregate", D, {
            "aggregate_uncorrected": agg_unc, "volatile_uncorrected": vol_unc,
            "max": th["ecc_aggregate_uncorrected_max"]},
            "keep watching the GPU: its past uncorrectable errors are mapped out; replace it if they recur"))
    retired = _n(pages.get("multiple_single_bit_ecc")) + _n(pages.get("double_bit_ecc"))
    if retired >= th["retired_pages_degraded"]:
        reasons.append(_reason("retired_pages_high", D, {"retired_pages": retired,
                                                         "degraded_at": th["retired_pages_degraded"]},
                               "plan to replace the GPU: few retirements are left before the maximum"))
    hist = rows.get("histogram") or {}
    if _n(hist.get("none")) > th["remap_banks_without_spare_max"]:
        reasons.append(_reason("row_remap_banks_exhausted", D, {
            "banks_without_spare_rows": hist["none"], "histogram": hist},
            "plan to replace the GPU: a memory bank has no spare row left for the next remapping"))
    events = f.get("clock_event_reasons") or []
    slow = [e for e in events if e in _SLOWDOWN_REASONS]
    if slow:
        reasons.append(_reason("clock_slowdown", D, {"clock_event_reasons": events, "slowdown": slow},
                               "check the cooling and the power supply (airflow, fans, inlet "
                               "temperature, power cables); the GPU is slowing its clocks"))
    temp = f.get("temperature") or {}
    if isinstance(temp.get("current"), int) and isinstance(temp.get("slowdown"), int) and \
            temp["slowdown"] > 0 and temp["current"] >= temp["slowdown"]:
        reasons.append(_reason("temperature_slowdown", D, dict(temp), "check the cooling"))
    pcie = f.get("pcie") or {}
    if isinstance(pcie.get("width"), int) and isinstance(pcie.get("max_width"), int) and \
            0 < pcie["width"] < pcie["max_width"]:
        # NVIDIA GPUs lower the link generation when idle to save power, not its width
        reasons.append(_reason("pcie_width_reduced", D, {"width": pcie["width"], "max_width": pcie["max_width"]},
                               "reseat the GPU and check its slot and riser: the link trained with "
                               "fewer lanes than it has"))
    busy = f.get("clock_event_reasons") is not None and "gpu_idle" not in events
    if busy and isinstance(pcie.get("gen"), int) and isinstance(pcie.get("max_gen"), int) and \
            0 < pcie["gen"] < pcie["max_gen"]:
        # only while the GPU works: at idle the link drops its generation on purpose
        reasons.append(_reason("pcie_gen_reduced", D, {"gen": pcie["gen"], "max_gen": pcie["max_gen"],
                                                       "clock_event_reasons": events},
                               "check the slot, the riser and the BIOS PCIe settings: the busy "
                               "link runs below its generation"))
    before = dict((e.get("link"), e) for e in ((previous or {}).get("nvlink") or []))
    bad = []
    for entry in f.get("nvlink") or []:
        old = before.get(entry.get("link"))
        for name in _NVLINK_JUDGED:
            now = entry.get(name)
            if not isinstance(now, int):
                continue
            base = old.get(name) if old and isinstance(old.get(name), int) and old.get(name) <= now else 0
            if now - base > th["nvlink_errors_max"]:
                bad.append({"link": entry["link"], "counter": name, "value": now,
                            "growth": now - base if old else None})
    if bad:
        reasons.append(_reason("nvlink_errors", D, {"links": bad, "compared_with_previous": bool(before)},
                               "check the NVLink bridge or NVSwitch tray and reset the GPU; replace "
                               "it if the errors keep growing"))
    severities = set(r["severity"] for r in reasons)
    if U in severities:
        verdict = U
    elif D in severities:
        verdict = D
    elif any(f.get(k) is not None for k in HEALTH_FIELDS):
        verdict = "healthy"
    else:
        verdict = None
    # unhealthy first, then the order above
    reasons.sort(key=lambda r: 0 if r["severity"] == U else 1)
    return {"verdict": verdict, "reasons": reasons}


def _lost_gpu(nvml, index, handle):
    """The entry of a GPU NVML calls lost (fallen off the bus): every field it cannot read is
    null or 0 (no memory to place anything in), and the health says why."""
    uuid = _Reader(nvml, handle).call("nvmlDeviceGetUUID") if handle is not None else None
    health = dict((k, None) for k in HEALTH_FIELDS)
    health.update(gpu_lost=True, reset_required=False)
    return {"index": index, "uuid": _text(uuid), "name": None, "memory_total": 0, "memory_used": 0,
            "memory_free": 0, "utilization_gpu": None, "utilization_memory": None,
            "compute_capability": None, "persistence_mode": None, "processes": [], "health": health}


def _gpu(nvml, index):
    """(entry, handle); handle is None when the GPU is lost."""
    handle = None
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        mem = nvml.nvmlDeviceGetMemoryInfo(handle)
    except nvml.NVMLError as exc:
        if _is(nvml, exc, "lost"):
            return _lost_gpu(nvml, index, handle), None
        raise
    util = _optional(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
    cc = _optional(nvml, nvml.nvmlDeviceGetCudaComputeCapability, handle)
    persistence = _optional(nvml, nvml.nvmlDeviceGetPersistenceMode, handle)
    return {
        "index": index,
        "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
        "name": _text(nvml.nvmlDeviceGetName(handle)),
        "memory_total": int(mem.total),
        "memory_used": int(mem.used),
        "memory_free": int(mem.free),
        "utilization_gpu": util.gpu if util is not None else None,
        "utilization_memory": util.memory if util is not None else None,
        "compute_capability": "%d.%d" % tuple(cc) if cc else None,
        "persistence_mode": (persistence == nvml.NVML_FEATURE_ENABLED
                             if persistence is not None else None),
        "processes": _processes(nvml, handle),
        "health": _health_fields(nvml, handle),
    }, handle


def collect(nvml, xid_wait_ms=0):
    """-> {'driver_version', 'cuda_driver_version', 'nvml_version', 'gpus': [...]}.

    Each GPU carries 'health': the fields of HEALTH_FIELDS (null where NVML does not support
    them), 'gpu_lost', 'reset_required', and judge()'s 'verdict' and 'reasons'. xid_wait_ms:
    how long to wait for critical Xid events on all GPUs together (0: not at all, 'xid' null).
    """
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NvmlUnavailable("NVML could not be initialised (%s): is the NVIDIA driver "
                              "installed and loaded on this host?" % _text(str(exc)))
    try:
        count = nvml.nvmlDeviceGetCount()
        facts = {
            "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
            "cuda_driver_version": _cuda_version(nvml),
            "nvml_version": _text(_optional(nvml, nvml.nvmlSystemGetNVMLVersion)),
        }
        read = [_gpu(nvml, i) for i in range(count)]
        xids = _wait_for_xids(nvml, [(g["index"], h) for g, h in read if h is not None], xid_wait_ms)
        for gpu, _handle in read:
            gpu["health"]["xid"] = xids.get(gpu["index"])
            gpu["health"].update(judge(gpu["health"]))
        facts["gpus"] = [g for g, _h in read]
        return facts
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


def process_memory(nvml, pids):
    """GPU memory held by these processes (a vLLM unit's main process and its engine cores),
    summed over every GPU: {'gpu_bytes', 'gpus' (how many GPUs they are on)}, or None when NVML
    cannot say: no driver, or none of the processes listed with a size (NVML inside a container
    lists processes of its own PID namespace only)."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return None
    try:
        wanted, total, gpus, sized = set(int(p) for p in pids), 0, 0, False
        for index in range(nvml.nvmlDeviceGetCount()):
            mine = [p for p in _processes(nvml, nvml.nvmlDeviceGetHandleByIndex(index)) if p["pid"] in wanted]
            gpus += 1 if mine else 0
            for proc in mine:
                if isinstance(proc["used_memory"], int):
                    total += proc["used_memory"]
                    sized = True
        return {"gpu_bytes": total, "gpus": gpus} if sized else None
    except nvml.NVMLError:
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


def _gpu_indexes(visible, gpus, skip_unknown=False):
    """CUDA_VISIBLE_DEVICES ('0,1', UUIDs, or empty for all) -> NVML indexes. An id not on the
    host raises (the headroom check names it), or with skip_unknown is left out, and then each
    index comes once (the health checks, which leave unknown ids to headroom)."""
    known = [g["index"] for g in gpus]
    if visible is None or str(visible).strip() == "":
        return known
    by_uuid = dict((g.get("uuid"), g["index"]) for g in gpus if g.get("uuid"))
    out = []
    for part in str(visible).split(","):
        part = part.strip()
        index = int(part) if part.isdigit() else by_uuid.get(part)
        if index in known:
            if not (skip_unknown and index in out):
                out.append(index)
        elif not skip_unknown:
            raise ValueError("cuda_visible_devices %r names GPU %r, which is not on this host "
                             "(GPUs: %s)" % (visible, part, ", ".join(
                                 str(i) for i in sorted(known)) or "none"))
    return out


def gpus_visible(visible, gpus):
    """The NVML indexes that CUDA_VISIBLE_DEVICES (indexes or UUIDs, comma-separated; empty for
    all) names among `gpus`; ids not on the host are left out (headroom names them)."""
    return _gpu_indexes(visible, gpus, skip_unknown=True)


def _evidence_text(evidence):
    parts = []
    for key, value in evidence.items():
        if isinstance(value, list) and value and all(isinstance(v, (str, int)) for v in value):
            value = "/".join(str(v) for v in value)
        if value is None or isinstance(value, (dict, list)):
            continue
        parts.append("%s %s" % (key.replace("_", " "), str(value).lower() if isinstance(value, bool) else value))
    return ", ".join(parts)


def health_findings(gpus, visible=None, verdicts=("unhealthy", "degraded")):
    """The GPUs whose health verdict is in `verdicts`, among those `visible` names (None: all),
    unhealthy first: [{'index', 'uuid', 'name', 'verdict', 'reasons', 'text'}]; text is one
    sentence naming the GPU, each reason with its numbers, and what to do."""
    wanted = set(gpus_visible(visible, gpus)) if visible is not None else None
    out = []
    for gpu in gpus:
        health = gpu.get("health") or {}
        if health.get("verdict") not in verdicts or (wanted is not None and gpu["index"] not in wanted):
            continue
        reasons = health.get("reasons") or []
        text = "GPU %s (%s%s) is %s: %s." % (
            gpu["index"], gpu.get("name") or "name unknown",
            ", " + gpu["uuid"] if gpu.get("uuid") else "", health["verdict"],
            "; ".join("%s%s: %s" % (r["id"], " (%s)" % _evidence_text(r["evidence"])
                                    if _evidence_text(r["evidence"]) else "", r["remedy"])
                      for r in reasons))
        out.append({"index": gpu["index"], "uuid": gpu.get("uuid"), "name": gpu.get("name"),
                    "verdict": health["verdict"], "reasons": reasons, "text": text})
    out.sort(key=lambda g: (HEALTH_VERDICTS.index(g["verdict"]) * -1, g["index"]))
    return out


def headroom(facts, instances, own_pids=()):
    """Problems that would stop vLLM from starting, as sentences; [] when every GPU has room.

    vLLM takes gpu_memory_utilization of a GPU's *total* memory and refuses to start when less
    is free. Memory held by this host's own vLLM units (own_pids) is counted as free, because
    a deploy restarts them; memory held by anything else is not. Instances sharing a GPU add up.
    instances: [{'name', 'cuda_visible_devices', 'gpu_memory_utilization', 'gpus_needed'}];
    gpus_needed: {'count', 'why'} (kvfleet.vllm.vllm_instances), one GPU when absent.
    """
    gpus = facts.get("gpus") or []
    own = {int(p) for p in own_pids}
    demand = {}
    problems = []
    for inst in instances:
        try:
            indexes = _gpu_indexes(inst.get("cuda_visible_devices"), gpus)
        except ValueError as exc:
            problems.append("instance %s: %s." % (inst["name"], exc))
            continue
        # each engine takes tensor x pipeline parallel GPUs, from the visible ones in order;
        # vLLM fails at start-up (after the old server stopped) when fewer are visible
        need = inst.get("gpus_needed") or {}
        if isinstance(need, dict) and isinstance(need.get("count"), int) and need["count"] > len(indexes):
            problems.append("instance %s needs %d GPUs (%s) but sees %d (cuda_visible_devices %s)."
                            % (inst["name"], need["count"], need.get("why", "?"), len(indexes),
                               repr(inst.get("cuda_visible_devices")) if inst.get("cuda_visible_devices")
                               else "empty: every GPU of the host"))
            continue
        share = float(inst.get("gpu_memory_utilization") or 0)
        for index in indexes:
            demand.setdefault(index, []).append((inst["name"], share))
    for gpu in gpus:
        wanted = demand.get(gpu["index"])
        if not wanted:
            continue
        share = sum(w[1] for w in wanted)
        names = ", ".join("%s (%.2f)" % w for w in wanted)
        if share > 1.0 + 1e-9:
            problems.append("GPU %d (%s): instances %s ask for %.2f of its memory in all; the "
                            "shares of instances on one GPU must add up to 1.0 or less."
                            % (gpu["index"], gpu["name"], names, share))
            continue
        if own and not gpu["processes"] and gpu["memory_used"]:
            # NVML lists no processes (pid namespaces, some VMs): what is used may be our own
            # running vLLM, so free memory proves nothing; only the sum above is checked.
            continue
        held_by_us = sum(p["used_memory"] or 0 for p in gpu["processes"] if p["pid"] in own)
        available = gpu["memory_free"] + held_by_us
        needed = int(share * gpu["memory_total"])
        if available < needed:
            others = ["pid %d (%.1f GiB)" % (p["pid"], (p["used_memory"] or 0) / 2.0 ** 30)
                      for p in gpu["processes"] if p["pid"] not in own]
            problems.append(
                "GPU %d (%s): %s need %.1f GiB (gpu_memory_utilization %.2f of %.1f GiB) but "
                "only %.1f GiB is free%s. Stop what holds it or lower gpu_memory_utilization."
                % (gpu["index"], gpu["name"], names, needed / 2.0 ** 30, share,
                   gpu["memory_total"] / 2.0 ** 30, available / 2.0 ** 30,
                   "; held by other processes: " + ", ".join(others) if others else ""))
    return problems
