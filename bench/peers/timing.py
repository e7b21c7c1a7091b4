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
