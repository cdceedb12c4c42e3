"""A stand-in for the pynvml module with the calls gpu_info uses.

Names, signatures, return shapes, error codes and constants are those of pynvml.py in
nvidia-ml-py 13.615.71. A GPU dict without a health key answers that call NotSupported, as NVML
does on a GPU without the feature; ``healthy_gpu`` builds an H100 whose every health field reads
healthy. ``OldFakeNvml`` is a release from before the clock "event" names (throttle names only,
no nvmlDeviceGetTemperatureV)."""

from __future__ import annotations

import importlib.util
import os
from collections import namedtuple


def _standin_constants():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support", "fake_pynvml", "pynvml.py")
    spec = importlib.util.spec_from_file_location("kvfleet_standin_pynvml", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict((k, v) for k, v in vars(module).items()
                if k.startswith(("NVML_", "nvml")) and isinstance(v, int) and not isinstance(v, bool))


Memory = namedtuple("Memory", "total free used")
Util = namedtuple("Util", "gpu memory")
Proc = namedtuple("Proc", "pid usedGpuMemory")


class NVMLError(Exception):
    value = 999   # NVML_ERROR_UNKNOWN


class NVMLError_NotSupported(NVMLError):
    value = 3


class NVMLError_DriverNotLoaded(NVMLError):
    value = 9

    def __str__(self):
        return "Driver Not Loaded"


class NVMLError_Timeout(NVMLError):
    value = 10


class NVMLError_FunctionNotFound(NVMLError):
    value = 13


class NVMLError_GpuIsLost(NVMLError):
    value = 15


class NVMLError_ResetRequired(NVMLError):
    value = 16


class Histogram(object):
    """c_nvmlRowRemapperHistogramValues: max, high, partial, low, none (banks by spare rows left)."""

    def __init__(self, **banks):
        for name in ("max", "high", "partial", "low", "none"):
            setattr(self, name, banks.pop(name, 64 if name == "max" else 0))
        assert not banks, banks


EventData = namedtuple("EventData", "device eventType eventData gpuInstanceId computeInstanceId")

# pynvml.py 13.615.71 values
XID_EVENT = 0x8          # nvmlEventTypeXidCriticalError
HW_SLOWDOWN = 0x8        # nvmlClocksEventReasonHwSlowdown
GPU_IDLE = 0x1           # nvmlClocksEventReasonGpuIdle
SW_POWER_CAP = 0x4       # nvmlClocksEventReasonSwPowerCap
HW_THERMAL = 0x40        # nvmlClocksEventReasonHwThermalSlowdown


def healthy_gpu(**overrides):
    """An H100 SXM whose every health field NVML reads and finds healthy (idle, 18 NVLinks)."""
    gpu = dict(name="NVIDIA H100 80GB HBM3", uuid="GPU-hhhh", mem=Memory(85899345920, 80000000000, 5899345920),
               util=Util(0, 0), cc=(9, 0), pm=1, compute=[], graphics=[],
               ecc_mode=[1, 1],
               # (error type, counter type) -> count: corrected 0 / uncorrected 1; volatile 0 / aggregate 1
               ecc={(0, 0): 3, (1, 0): 0, (0, 1): 12, (1, 1): 0},
               retired={0: [], 1: []}, retired_pending=0,
               remapped=(0, 0, 0, 0), histogram=Histogram(),
               clocks=GPU_IDLE,
               # idle: the link dropped to gen 1 to save power, its width stays
               pcie=dict(gen=1, width=16, max_gen=5, max_width=16, gpu_max_gen=5),
               nvlink=dict((link, {"state": 1, "counters": {0: 0, 1: 0, 2: 0, 3: 0, 4: 0}}) for link in range(18)),
               temp=34, thresholds={0: 92, 1: 87},
               events=[], supported_events=0x8 | 0x1 | 0x2)
    gpu.update(overrides)
    return gpu


class FakeNvml(object):
    NVMLError = NVMLError

    def __init__(self, gpus=None, init_error=None, cuda=12040):
        self.gpus = gpus if gpus is not None else [
            dict(name=b"NVIDIA H100 80GB HBM3", uuid="GPU-aaaa", mem=Memory(85899345920, 80000000000, 5899345920),
                 util=Util(37, 12), cc=(9, 0), pm=1,
                 compute=[Proc(4242, 5000000000)], graphics=[Proc(4242, 5000000000), Proc(7, None)]),
            dict(name="NVIDIA L4", uuid="GPU-bbbb", mem=Memory(24152899584, 24000000000, 152899584),
                 util=NVMLError_NotSupported(), cc=(8, 9), pm=NVMLError_NotSupported(),
                 compute=[], graphics=[]),
        ]
        self.init_error = init_error
        self.cuda = cuda
        self.shutdown_called = False
        self.lost = set()          # indexes of GPUs fallen off the bus
        self.event_sets = []       # [{'handles': [...], 'freed': bool}]
        self.waits = []            # the timeouts nvmlEventSetWait was called with

    def _gpu(self, handle):
        if handle in self.lost:
            raise NVMLError_GpuIsLost()
        return self.gpus[handle]

    def _get(self, handle, key):
        gpu = self._gpu(handle)
        if key not in gpu:
            raise NVMLError_NotSupported()
        value = gpu[key]
        if isinstance(value, Exception):
            raise value
        return value

    def nvmlInit(self):
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self):
        self.shutdown_called = True

    def nvmlSystemGetDriverVersion(self):
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self):
        return self.cuda

    def nvmlSystemGetNVMLVersion(self):
        return b"12.550.54.15"

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        if index in self.lost:
            raise NVMLError_GpuIsLost()
        return index

    def nvmlDeviceGetIndex(self, h):
        return h

    def nvmlDeviceGetName(self, h):
        return self._get(h, "name")

    def nvmlDeviceGetUUID(self, h):
        return self._get(h, "uuid")

    def nvmlDeviceGetMemoryInfo(self, h):
        return self._get(h, "mem")

    def nvmlDeviceGetUtilizationRates(self, h):
        return self._get(h, "util")

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return self._get(h, "cc")

    def nvmlDeviceGetPersistenceMode(self, h):
        return self._get(h, "pm")

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return self._get(h, "compute")

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        return self._get(h, "graphics")

    # ---- health (pynvml.py 13.615.71 signatures)
    def nvmlDeviceGetEccMode(self, h):
        return self._get(h, "ecc_mode")

    def nvmlDeviceGetTotalEccErrors(self, h, errorType, counterType):
        counts = self._get(h, "ecc")
        if (errorType, counterType) not in counts:
            raise NVMLError_NotSupported()
        return counts[(errorType, counterType)]

    def nvmlDeviceGetRetiredPages(self, h, sourceFilter):
        pages = self._get(h, "retired")
        if isinstance(pages, Exception):
            raise pages
        return list(pages[sourceFilter])

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        return self._get(h, "retired_pending")

    def nvmlDeviceGetRemappedRows(self, h):
        return self._get(h, "remapped")

    def nvmlDeviceGetRowRemapperHistogram(self, h):
        return self._get(h, "histogram")

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._get(h, "clocks")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return self._get(h, "clocks")

    def _pcie(self, h, key):
        pcie = self._get(h, "pcie")
        if pcie.get(key) is None:
            raise NVMLError_NotSupported()
        return pcie[key]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._pcie(h, "gen")

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._pcie(h, "width")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._pcie(h, "max_gen")

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._pcie(h, "max_width")

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h):
        return self._pcie(h, "gpu_max_gen")

    def _link(self, h, link):
        links = self._get(h, "nvlink")
        if link not in links:
            raise NVMLError_NotSupported()
        return links[link]

    def nvmlDeviceGetNvLinkState(self, device, link):
        return self._link(device, link)["state"]

    def nvmlDeviceGetNvLinkErrorCounter(self, device, link, counter):
        counters = self._link(device, link)["counters"]
        if counter not in counters:
            raise NVMLError_NotSupported()
        return counters[counter]

    def nvmlDeviceGetTemperatureV(self, handle, sensor, version=0x100000C):
        assert sensor == self.NVML_TEMPERATURE_GPU
        return self._get(handle, "temp")

    def nvmlDeviceGetTemperature(self, handle, sensor):
        assert sensor == self.NVML_TEMPERATURE_GPU
        return self._get(handle, "temp")

    def nvmlDeviceGetTemperatureThreshold(self, handle, threshold):
        thresholds = self._get(handle, "thresholds")
        if threshold not in thresholds:
            raise NVMLError_NotSupported()
        return thresholds[threshold]

    # ---- events: a GPU's 'events' (Xid numbers) arrive on the first waits after registration
    def nvmlDeviceGetSupportedEventTypes(self, h):
        return self._get(h, "supported_events")

    def nvmlEventSetCreate(self):
        self.event_sets.append({"handles": [], "freed": False})
        return len(self.event_sets) - 1

    def nvmlDeviceRegisterEvents(self, handle, eventTypes, eventSet):
        if not self._get(handle, "supported_events") & eventTypes:
            raise NVMLError_NotSupported()
        self.event_sets[eventSet]["handles"].append(handle)

    def nvmlEventSetWait(self, eventSet, timeoutms):
        self.waits.append(timeoutms)
        for handle in self.event_sets[eventSet]["handles"]:
            pending = self.gpus[handle].get("events") or []
            if pending:
                xid = pending.pop(0)
                return EventData(handle, self.nvmlEventTypeXidCriticalError, xid, 0xFFFFFFFF, 0xFFFFFFFF)
        raise NVMLError_Timeout()

    def nvmlEventSetFree(self, eventSet):
        self.event_sets[eventSet]["freed"] = True


# The constants, one copy: the stand-in pynvml's (tests/support/fake_pynvml), which
# tests/unit/plugins/test_fake_pynvml.py checks against the real package.
for _name, _value in _standin_constants().items():
    setattr(FakeNvml, _name, _value)


class OldFakeNvml(FakeNvml):
    """nvidia-ml-py before 12.535: throttle names only, no TemperatureV."""

    def __getattribute__(self, name):
        if name.startswith("nvmlClocksEventReason") or name in (
                "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetTemperatureV"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    nvmlClocksThrottleReasonGpuIdle = 0x1
    nvmlClocksThrottleReasonSwPowerCap = 0x4
    nvmlClocksThrottleReasonHwSlowdown = 0x8
    nvmlClocksThrottleReasonSwThermalSlowdown = 0x20
    nvmlClocksThrottleReasonHwThermalSlowdown = 0x40


class OldDriverFakeNvml(FakeNvml):
    """nvidia-ml-py 13 on a driver without the newer entry points: NVML_ERROR_FUNCTION_NOT_FOUND."""

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        raise NVMLError_FunctionNotFound()

    def nvmlDeviceGetTemperatureV(self, handle, sensor, version=0x100000C):
        raise NVMLError_FunctionNotFound()
