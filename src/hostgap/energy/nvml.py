"""NVIDIA GPUs' total-energy counters through NVML (``nvidia-ml-py``, the optional extra
``energy``): ``nvmlDeviceGetTotalEnergyConsumption``, mJ since the driver loaded, 64-bit (it does
not wrap; a reading that goes back was reset). Imported only when a meter opens; the analysis
never needs it."""

from __future__ import annotations

from hostgap.energy.counters import Domain


def _load():
    import pynvml  # nvidia-ml-py

    return pynvml


def domains() -> tuple[list[Domain], list[str]]:
    """One domain per GPU whose counter answers, and a line for what is left out."""
    try:
        nv = _load()
    except ImportError:
        return [], ["NVML not installed (pip install 'hostgap[energy]')"]
    try:
        nv.nvmlInit()
        count = int(nv.nvmlDeviceGetCount())
    except Exception as e:  # pynvml raises NVMLError subclasses; no driver, no device
        return [], [f"NVML: no driver answers ({_short(e)})"]
    out: list[Domain] = []
    left: list[str] = []
    for i in range(count):
        try:
            h = nv.nvmlDeviceGetHandleByIndex(i)
            nv.nvmlDeviceGetTotalEnergyConsumption(h)
        except Exception as e:  # a GPU before Volta has no energy counter
            left.append(f"gpu{i}: NVML total energy not supported ({_short(e)})")
            continue
        out.append(Domain(f"gpu{i}", "nvml", "mj", None, _reader(nv, h)))
    if not count:
        left.append("NVML: no GPU")
    return out, left


def _reader(nv, handle):
    def read() -> int:
        try:
            return int(nv.nvmlDeviceGetTotalEnergyConsumption(handle))
        except Exception as e:  # an NVMLError is no OSError: the meter counts OSError as unreadable
            raise OSError(str(e)) from e

    return read


def _short(e: BaseException) -> str:
    return (str(e) or type(e).__name__).splitlines()[0][:120]
