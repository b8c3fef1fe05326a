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

That leaves a replica's start. Its worker process starts at the raylet's niceness, 0: the
interpreter and `import ray` (about a CPU-second), then the replica's own imports at Ray's
15, until its constructor calls give_way. While a replacement started beside the replicas
serving at 19, it outranked them 68 to 1: on a host twice slower than a quiet one, a killed
supervisor's survivor waited on the run queue 2-4 times as long as it ran while its
replacement started, and the logins it held were refused at HAProxy's answer timeout
(2026-11-27, docs/runs/reliability.md, S). `start_niced` starts the worker itself under
`nice` (a runtime_env's py_executable), so every thread of a replica runs at its niceness
from its first instruction. Only Ray's own `setup_worker.py`, which execs it, runs before:
at the niceness of the process that starts every worker, the node's raylet, 0. It imports
Ray (about a CPU-second on a quiet 2-core host), and at 0 it outranked the survivor of a
killed supervisor 68 to 1 while the replacement started: the logins the survivor held
were refused at HAProxy's answer timeout (CI, 2026-11-28; reproduced at one core's
quota). `raylet_gives_way` raises the raylet's threads to Ray's own worker niceness, so
what it starts begins there: 2.4 to 1 against a serving replica, as HAProxy is.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

PROC = Path("/proc")
TASKS = PROC / "self" / "task"


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


def start_niced(niceness: int, command: str | None = None) -> dict[str, Any]:
    """The runtime_env (Ray's `py_executable`) that starts a replica's worker under `nice` at
    `niceness`, with `command` (a shell command; default: this interpreter, the node's). Empty
    when there is nothing to raise or no `nice` on this host: the replica then starts as Ray
    starts it and gives way in its constructor only."""
    nice = shutil.which("nice")
    if niceness <= 0 or nice is None:
        return {}
    interpreter = command or shlex.quote(sys.executable)
    return {"py_executable": f"{shlex.quote(nice)} -n {niceness} {interpreter}"}


RAYLET_COMMAND = "raylet"  # /proc/<pid>/comm of Ray's node process


def raylet_gives_way(niceness: int, parent: int | None = None, proc: Path = PROC) -> int:
    """Raise every thread of this process's parent, if it is Ray's raylet (the parent of
    every worker of its node), to at least `niceness`; returns how many were raised.

    The workers the raylet starts, and the threads it starts later, inherit the niceness.
    Raising another process's niceness needs no privilege when it runs as the same user, as
    a replica and its raylet do. Any other parent (a test, a driver) is left as it is."""
    pid = os.getppid() if parent is None else parent
    try:
        command = (proc / str(pid) / "comm").read_text().strip()
    except OSError:
        return 0
    if command != RAYLET_COMMAND:
        logger.info("parent %d is %r, not Ray's raylet: its niceness left as it is", pid, command)
        return 0
    return give_way(niceness, tasks=proc / str(pid) / "task")
