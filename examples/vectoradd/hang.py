"""Never returns, ignores SIGTERM, and forks helpers that do the same:
only a timeout that kills the whole tree ends it."""
import os
import signal
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)


def custom_kernel(data):
    for _ in range(3):
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            while True:
                time.sleep(1)
    while True:
        time.sleep(1)
