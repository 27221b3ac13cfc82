"""Starts two fresh Python processes (exec'd, so no page is shared with the candidate's and
each one's resident memory is its own) that each fill and hold 800 MiB, then waits on them: only
the sum is over the limit, and the parent's sum of resident memory never passes the memory
cgroup's count, so where there is a memory cgroup the kernel's OOM kill of one helper comes first
and the candidate waits on, unless the parent ends the whole child for that kill. Every process
it makes is named "limits-helper" (its comm), so a test can look for them."""
import subprocess
import sys
import time

from task import input_t, output_t

HELPER = (
    "open('/proc/self/comm', 'w').write('limits-helper'); import time; "
    "held = [b'\\x01' * (50 * 1024**2) for _ in range(16)]; time.sleep(600)"
)


def custom_kernel(data: input_t) -> output_t:
    with open("/proc/self/comm", "w") as comm:
        comm.write("limits-helper")
    helpers = [subprocess.Popen([sys.executable, "-c", HELPER]) for _ in range(2)]
    time.sleep(600)
    for helper in helpers:
        helper.wait()
    return data[2]
