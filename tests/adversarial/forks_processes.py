"""Forks 200 processes that sleep, half of them in sessions of their own (setsid: out of the
child's process group) and orphaned by a double fork (issue 15: 200 processes, no limit as
root). Every process it makes is named "limits-forker" (its comm)."""
import os
import time

from task import input_t, output_t


def _sleep_forever() -> None:
    while True:
        time.sleep(1)


def custom_kernel(data: input_t) -> output_t:
    with open("/proc/self/comm", "w") as comm:
        comm.write("limits-forker")
    for index in range(200):
        if os.fork() != 0:
            continue
        if index % 2:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
        _sleep_forever()
    time.sleep(600)
    return data[2]
