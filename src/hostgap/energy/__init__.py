"""Energy counters where the hardware reports them: Linux powercap/RAPL (CPU packages, DRAM) and
NVML's total-energy counter (NVIDIA GPUs); wraps, resets and unreadable counters handled and said
(docs/energy.md)."""
