"""The peer scripts' step timer, shared: the median over `repeats` timings
of `steps` calls of fn, in ms per call, each timing between two syncs (the
C++ side's is bench/step_timing.h)."""
import statistics
import time


def ms_per_step(fn, sync, steps, repeats=5):
    t = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        sync()
        t.append((time.perf_counter() - t0) * 1e3 / steps)
    return statistics.median(t)


def cuda_profiler():
    """cudaProfilerStart/Stop through the CUDA runtime a framework loaded (its
    primary context), for ncu --profile-from-start off."""
    import ctypes
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            rt = ctypes.CDLL(name)
        except OSError:
            continue
        return rt.cudaProfilerStart, rt.cudaProfilerStop
    raise RuntimeError("--profile: no libcudart.so found for cudaProfilerStart")
