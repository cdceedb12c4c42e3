"""A stand-in for nvidia-ml-py's pynvml module, for tests that run kvfleet.vllm.gpu_info in a
child process (ansible-playbook): put this folder first on PYTHONPATH and name a JSON file in
KVFLEET_FAKE_NVML. A test fixture only; no role installs it.

Only the part of the API that plugins/module_utils/_nvml.py and gpu_info use. Every public name
here exists in the real pynvml.py (nvidia-ml-py 13.615.71) with the same kind, constants with
the real values, functions with the real parameter names
(tests/unit/plugins/test_fake_pynvml.py compares them). Helpers are private (leading _).

The JSON file (every key optional):
  nvml: "ok" (default), or why nvmlInit fails as the real one does: "library_not_found" (no
        libnvidia-ml.so.1: no driver installed), "driver_not_loaded", "no_permission"
  driver_version: "580.65.06"; cuda_driver_version: 13000 (NVML's integer); nvml_version
  gpus: a list, each {"preset": "h100"} (a healthy, idle H100) and/or these keys (a key left out
        answers NVML_ERROR_NOT_SUPPORTED, as NVML does on a GPU without the feature):
        name, uuid, memory {total, free, used}, utilization {gpu, memory}, compute_capability
        [9, 0], persistence_mode (0/1), processes [{pid, used_memory}], ecc_mode [current,
        pending], ecc {volatile|aggregate: {corrected, uncorrected}}, retired_pages
        {multiple_single_bit_ecc: [...], double_bit_ecc: [...]}, retired_pending (0/1),
        remapped_rows [correctable, uncorrectable, pending, failed], row_remapper_histogram
        {max, high, partial, low, none}, clock_event_reasons (bit mask), pcie {gen, width,
        max_gen, max_width, gpu_max_gen}, nvlink [{state, counters [5 ints]}] (index = link),
        temperature, temperature_thresholds {shutdown, slowdown}, xids [Xid numbers raised
        during the event wait], lost (true: NVML_ERROR_GPU_IS_LOST)
"""

import json as _json
import os as _os

# ---- constants (pynvml.py 13.615.71 values)
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_UNKNOWN = 999
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_NVLINK_MAX_LINKS = 36
NVML_NVLINK_ERROR_DL_REPLAY = 0
NVML_NVLINK_ERROR_DL_RECOVERY = 1
NVML_NVLINK_ERROR_DL_CRC_FLIT = 2
NVML_NVLINK_ERROR_DL_CRC_DATA = 3
NVML_NVLINK_ERROR_DL_ECC_DATA = 4
nvmlEventTypeXidCriticalError = 0x8
nvmlClocksEventReasonGpuIdle = 0x1
nvmlClocksEventReasonApplicationsClocksSetting = 0x2
nvmlClocksEventReasonSwPowerCap = 0x4
nvmlClocksEventReasonHwSlowdown = 0x8
nvmlClocksEventReasonSyncBoost = 0x10
nvmlClocksEventReasonSwThermalSlowdown = 0x20
nvmlClocksEventReasonHwThermalSlowdown = 0x40
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80
nvmlClocksEventReasonDisplayClockSetting = 0x100
nvmlClocksThrottleReasonBoardLimit = 0x200
nvmlClocksThrottleReasonReliability = 0x400


# ---- errors: NVMLError(value) becomes the value's subclass, as in the real module
class NVMLError(Exception):
    _valClassMapping = dict()
    _errcode_to_string = {
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_TIMEOUT: "Timeout",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }

    def __new__(cls, value):
        # NVMLError(value) is the value's subclass, as in the real module
        kind = NVMLError._valClassMapping.get(value, cls) if cls == NVMLError else cls
        obj = Exception.__new__(kind)
        obj.value = value
        return obj

    def __str__(self):
        return NVMLError._errcode_to_string.get(self.value, "NVML Error with code %d" % self.value)

    def __eq__(self, other):
        return self.value == other.value


def _error_class(name, value):
    def new(typ, *args):
        return NVMLError.__new__(typ, value)
    cls = type(name, (NVMLError,), {"__new__": new})
    cls.__module__ = __name__
    NVMLError._valClassMapping[value] = cls
    return cls


NVMLError_Uninitialized = _error_class("NVMLError_Uninitialized", NVML_ERROR_UNINITIALIZED)
NVMLError_InvalidArgument = _error_class("NVMLError_InvalidArgument", NVML_ERROR_INVALID_ARGUMENT)
NVMLError_NotSupported = _error_class("NVMLError_NotSupported", NVML_ERROR_NOT_SUPPORTED)
NVMLError_NoPermission = _error_class("NVMLError_NoPermission", NVML_ERROR_NO_PERMISSION)
NVMLError_DriverNotLoaded = _error_class("NVMLError_DriverNotLoaded", NVML_ERROR_DRIVER_NOT_LOADED)
NVMLError_Timeout = _error_class("NVMLError_Timeout", NVML_ERROR_TIMEOUT)
NVMLError_LibraryNotFound = _error_class("NVMLError_LibraryNotFound", NVML_ERROR_LIBRARY_NOT_FOUND)
NVMLError_FunctionNotFound = _error_class("NVMLError_FunctionNotFound", NVML_ERROR_FUNCTION_NOT_FOUND)
NVMLError_GpuIsLost = _error_class("NVMLError_GpuIsLost", NVML_ERROR_GPU_IS_LOST)
NVMLError_ResetRequired = _error_class("NVMLError_ResetRequired", NVML_ERROR_RESET_REQUIRED)
NVMLError_Unknown = _error_class("NVMLError_Unknown", NVML_ERROR_UNKNOWN)

_INIT_ERRORS = {"library_not_found": NVML_ERROR_LIBRARY_NOT_FOUND,
                "driver_not_loaded": NVML_ERROR_DRIVER_NOT_LOADED,
                "no_permission": NVML_ERROR_NO_PERMISSION}

# a healthy, idle H100 SXM (every health field read)
_PRESETS = {"h100": {
    "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-00000000-0000-0000-0000-000000000000",
    "memory": {"total": 85520809984, "free": 84986691584, "used": 534118400},
    "utilization": {"gpu": 0, "memory": 0}, "compute_capability": [9, 0], "persistence_mode": 1,
    "processes": [], "ecc_mode": [1, 1],
    "ecc": {"volatile": {"corrected": 0, "uncorrected": 0}, "aggregate": {"corrected": 0, "uncorrected": 0}},
    "remapped_rows": [0, 0, 0, 0],
    "row_remapper_histogram": {"max": 640, "high": 0, "partial": 0, "low": 0, "none": 0},
    "clock_event_reasons": 0x1,
    "pcie": {"gen": 1, "width": 16, "max_gen": 5, "max_width": 16, "gpu_max_gen": 5},
    "nvlink": [{"state": 1, "counters": [0, 0, 0, 0, 0]} for _link in range(18)],
    "temperature": 33, "temperature_thresholds": {"shutdown": 92, "slowdown": 89},
    "xids": []}}


class _Struct(object):
    def __init__(self, **fields):
        self.__dict__.update(fields)


class _State(object):
    config = None
    initialised = False
    event_sets = []


def _config():
    if _State.config is None:
        path = _os.environ.get("KVFLEET_FAKE_NVML")
        if not path:
            raise RuntimeError("the fake pynvml needs KVFLEET_FAKE_NVML (a JSON file)")
        with open(path) as f:
            config = _json.load(f)
        gpus = []
        for gpu in config.get("gpus", []):
            full = dict(_PRESETS[gpu["preset"]]) if gpu.get("preset") else {}
            full.update((k, v) for k, v in gpu.items() if k != "preset")
            gpus.append(full)
        config["gpus"] = gpus
        _State.config = config
    return _State.config


def _check():
    if not _State.initialised:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)


def _gpu(handle):
    _check()
    gpu = _config()["gpus"][handle]
    if gpu.get("lost"):
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    return gpu


def _field(handle, key):
    gpu = _gpu(handle)
    if gpu.get(key) is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return gpu[key]


def _item(value, key):
    if not isinstance(value, dict) or value.get(key) is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return value[key]


# ---- system
def nvmlInit():
    failure = _config().get("nvml", "ok")
    if failure != "ok":
        raise NVMLError(_INIT_ERRORS[failure])
    _State.initialised = True


def nvmlShutdown():
    _check()
    _State.initialised = False


def nvmlSystemGetDriverVersion():
    _check()
    return _config().get("driver_version", "580.65.06")


def nvmlSystemGetCudaDriverVersion():
    _check()
    return int(_config().get("cuda_driver_version", 13000))


def nvmlSystemGetCudaDriverVersion_v2():
    return nvmlSystemGetCudaDriverVersion()


def nvmlSystemGetNVMLVersion():
    _check()
    return _config().get("nvml_version", "13.580.65.06")


# ---- devices
def nvmlDeviceGetCount():
    _check()
    return len(_config()["gpus"])


def nvmlDeviceGetHandleByIndex(index):
    _check()
    if not 0 <= index < len(_config()["gpus"]):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    if _config()["gpus"][index].get("lost"):
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    return index


def nvmlDeviceGetIndex(handle):
    _gpu(handle)
    return handle


def nvmlDeviceGetName(handle):
    return _field(handle, "name")


def nvmlDeviceGetUUID(handle):
    return _field(handle, "uuid")


def nvmlDeviceGetMemoryInfo(handle, version=None):
    mem = _field(handle, "memory")
    return _Struct(total=mem["total"], free=mem["free"], used=mem["used"])


def nvmlDeviceGetUtilizationRates(handle):
    util = _field(handle, "utilization")
    return _Struct(gpu=util["gpu"], memory=util["memory"])


def nvmlDeviceGetCudaComputeCapability(handle):
    return tuple(_field(handle, "compute_capability"))


def nvmlDeviceGetPersistenceMode(handle):
    return _field(handle, "persistence_mode")


def nvmlDeviceGetComputeRunningProcesses(handle):
    return [_Struct(pid=p["pid"], usedGpuMemory=p.get("used_memory"))
            for p in _field(handle, "processes")]


def nvmlDeviceGetGraphicsRunningProcesses(handle):
    _gpu(handle)
    return []


# ---- health
def nvmlDeviceGetEccMode(handle):
    return list(_field(handle, "ecc_mode"))


def nvmlDeviceGetTotalEccErrors(handle, errorType, counterType):
    ecc = _field(handle, "ecc")
    counter = _item(ecc, "volatile" if counterType == NVML_VOLATILE_ECC else "aggregate")
    return _item(counter, "corrected" if errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED else "uncorrected")


def nvmlDeviceGetRetiredPages(device, sourceFilter):
    pages = _field(device, "retired_pages")
    return list(_item(pages, "multiple_single_bit_ecc" if sourceFilter == 0 else "double_bit_ecc"))


def nvmlDeviceGetRetiredPagesPendingStatus(device):
    return _field(device, "retired_pending")


def nvmlDeviceGetRemappedRows(device):
    return tuple(_field(device, "remapped_rows"))


def nvmlDeviceGetRowRemapperHistogram(device):
    return _Struct(**_field(device, "row_remapper_histogram"))


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    return _field(handle, "clock_event_reasons")


def nvmlDeviceGetCurrentClocksThrottleReasons(handle):
    return _field(handle, "clock_event_reasons")


def nvmlDeviceGetCurrPcieLinkGeneration(handle):
    return _item(_field(handle, "pcie"), "gen")


def nvmlDeviceGetCurrPcieLinkWidth(handle):
    return _item(_field(handle, "pcie"), "width")


def nvmlDeviceGetMaxPcieLinkGeneration(handle):
    return _item(_field(handle, "pcie"), "max_gen")


def nvmlDeviceGetMaxPcieLinkWidth(handle):
    return _item(_field(handle, "pcie"), "max_width")


def nvmlDeviceGetGpuMaxPcieLinkGeneration(handle):
    return _item(_field(handle, "pcie"), "gpu_max_gen")


def _link(device, link):
    links = _field(device, "nvlink")
    if not 0 <= link < len(links):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return links[link]


def nvmlDeviceGetNvLinkState(device, link):
    return _link(device, link)["state"]


def nvmlDeviceGetNvLinkErrorCounter(device, link, counter):
    return _link(device, link)["counters"][counter]


def nvmlDeviceGetTemperatureV(handle, sensor, version=16777228):
    return _field(handle, "temperature")


def nvmlDeviceGetTemperature(handle, sensor):
    return _field(handle, "temperature")


def nvmlDeviceGetTemperatureThreshold(handle, threshold):
    return _item(_field(handle, "temperature_thresholds"),
                 "shutdown" if threshold == NVML_TEMPERATURE_THRESHOLD_SHUTDOWN else "slowdown")


# ---- events: a GPU's xids arrive on the waits after its registration, one per wait
def nvmlDeviceGetSupportedEventTypes(handle):
    return nvmlEventTypeXidCriticalError if _gpu(handle).get("xids") is not None else 0


def nvmlEventSetCreate():
    _check()
    _State.event_sets.append([])
    return len(_State.event_sets) - 1


def nvmlDeviceRegisterEvents(handle, eventTypes, eventSet):
    if not nvmlDeviceGetSupportedEventTypes(handle) & eventTypes:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    _State.event_sets[eventSet].append(handle)


def nvmlEventSetWait(eventSet, timeoutms):
    _check()
    for handle in _State.event_sets[eventSet]:
        pending = _config()["gpus"][handle].get("xids") or []
        if pending:
            return _Struct(device=handle, eventType=nvmlEventTypeXidCriticalError, eventData=pending.pop(0),
                           gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
    raise NVMLError(NVML_ERROR_TIMEOUT)


def nvmlEventSetFree(eventSet):
    _check()
    _State.event_sets[eventSet] = []
