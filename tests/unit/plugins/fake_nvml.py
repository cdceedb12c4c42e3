"""A stand-in for the pynvml module with the calls gpu_info uses (nvidia-ml-py 12.x API)."""

from __future__ import annotations

from collections import namedtuple

Memory = namedtuple("Memory", "total free used")
Util = namedtuple("Util", "gpu memory")
Proc = namedtuple("Proc", "pid usedGpuMemory")


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_DriverNotLoaded(NVMLError):
    def __str__(self):
        return "Driver Not Loaded"


class FakeNvml(object):
    NVMLError = NVMLError
    NVML_FEATURE_ENABLED = 1

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

    def _get(self, handle, key):
        value = self.gpus[handle][key]
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
        return index

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
