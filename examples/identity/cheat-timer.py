"""A correct but slow kernel (50 ms) that replaces every clock in its
process, so a harness timing it there reports a mean of about 1 ns. The
built-in harness times it from its own process: about 50 ms."""
import itertools
import time

_tick = itertools.count()
for _name in ("perf_counter_ns", "monotonic_ns", "time_ns", "process_time_ns", "thread_time_ns"):
    setattr(time, _name, lambda: next(_tick))
for _name in ("perf_counter", "monotonic", "time", "process_time", "thread_time"):
    setattr(time, _name, lambda: next(_tick) / 1e9)

_sleep = time.sleep


def custom_kernel(data):
    _sleep(0.05)
    return list(data)
