"""A replica gives way on the CPU: every thread of its process at a niceness of at least N.

HAProxy, the edge that refuses a burst in C, is started by Serve's HAProxy manager actor and
so runs at 15: Ray's `worker_niceness`, which a worker applies to the thread that goes on to
run its Python code (the threads it started before, gRPC's and Ray's own, stay at 0). A
replica's Python threads, the ones scoring the logins HAProxy admitted, run at 15 too, and
its gRPC threads at 0, ahead of HAProxy. When a burst lands on a node whose cores are busy
scoring, HAProxy's refusals then wait for a core behind the replicas. Lowering HAProxy's
niceness would need a privilege a pod does not have (CAP_SYS_NICE); raising the replicas'
own needs none. At 19 against HAProxy's 15 the kernel gives HAProxy about 2.4 times a
replica thread's weight when both want the core (and Ray's and Serve's own processes, at 0
and 15, more still), and the replicas still take every cycle nobody else wants.

Linux keeps a niceness per thread: each thread listed in /proc/self/task is set, and threads
started later inherit it from the thread that starts them. Only ever raised, never lowered.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

TASKS = Path("/proc/self/task")


def give_way(niceness: int, tasks: Path = TASKS) -> int:
    """Raise every thread of this process to at least `niceness`; returns how many were
    raised. Where threads cannot be listed (not Linux) nothing is changed."""
    try:
        tids = [int(entry.name) for entry in tasks.iterdir()]
    except OSError:
        logger.info("no %s: replica niceness left as it is", tasks)
        return 0
    raised = 0
    for tid in tids:
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < niceness:
                os.setpriority(os.PRIO_PROCESS, tid, niceness)
                raised += 1
        except ProcessLookupError:
            continue  # the thread ended meanwhile
        except OSError as exc:
            # Raising one's own niceness needs no privilege, but a sandbox (seccomp) may still
            # refuse the call: an optional tweak must never stop a replica from starting.
            logger.warning("could not raise thread %d to niceness %d: %s", tid, niceness, exc)
    return raised
