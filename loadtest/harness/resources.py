"""Memory and CPU of a process tree, sampled while it runs, by process role."""

from __future__ import annotations

import threading
from typing import Self

import psutil

from loadtest.harness.systems import ManagedProcess

SUBPROCESS = "subprocess"

# What a process of a system's tree is, from its command line (Ray names its workers by
# process title: "ray::ServeReplica:<app>:<deployment>", "ray::ProxyActor", ...).
_ROLES = (
    # A replica's title is "ray::ServeReplica:<app>:<deployment>[.<method>]" once it runs,
    # and "ray::SERVE_REPLICA::<app>#<deployment>#<id>:ServeReplica:<app>:<deployment>..."
    # while its constructor runs: both end in the same part.
    (":ServeReplica:", None),  # replica:<deployment>, below
    # Serve's actors, by class: "ray::ServeController" once running, "ray::<actor
    # name>:ServeController.__init__" while starting.
    (":ServeController", "serve controller"),
    (":ProxyActor", "serve proxy actor"),
    # The actor that writes HAProxy's config and reloads it (RAY_SERVE_ENABLE_HA_PROXY).
    (":HAProxyManager", "serve haproxy manager"),
    ("ray::IDLE", "ray idle worker"),
    ("ray::DashboardAgent", "ray dashboard agent (exports metrics)"),
    ("ray::RuntimeEnvAgent", "ray runtime-env agent"),
    ("gcs_server", "ray gcs"),
    ("raylet", "ray raylet"),
    ("dashboard/agent.py", "ray dashboard agent (exports metrics)"),
    # The dashboard head and its module processes (ray-dashboard-<Module>Head-0), which
    # include_dashboard=False does not start.
    ("ray-dashboard-", "ray dashboard head + modules"),
    ("dashboard/dashboard.py", "ray dashboard head + modules"),
    ("runtime_env/agent", "ray runtime-env agent"),
    ("log_monitor.py", "ray log monitor"),
    ("autoscaler/_private/monitor.py", "ray autoscaler monitor"),
    ("haproxy", "haproxy"),
    # multiprocessing children (forkserver, resource tracker, spawned workers) belong to
    # whatever started them: see ResourceMonitor._role.
    ("multiprocessing", SUBPROCESS),
    ("serve run", "serve run (driver)"),
    ("uvicorn", "web process"),
)


def role(command: str) -> str:
    for marker, label in _ROLES:
        if marker in command:
            if label is None:
                # "<app>:<deployment>", and ".<method>" while the actor runs one (Ray's
                # process title): one role per deployment, whatever it was doing when seen.
                deployment = command.split(marker, 1)[1].split()[0].split(":")[-1]
                return "replica:" + deployment.split(".")[0]
            return label
    return "other"


def _command(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline()) or proc.name()
    except psutil.Error:
        return "?"


class Sampler:
    """Calls `_sample()` on entry and then every `interval_s` on a daemon thread until exit."""

    def __init__(self, interval_s: float) -> None:
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=type(self).__name__)

    def _sample(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample()

    def __enter__(self) -> Self:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


class ResourceMonitor(Sampler):
    """Samples the tree's total RSS (keeping the peak, and what each role held at that
    peak)."""

    def __init__(self, process: ManagedProcess, interval_s: float = 0.5) -> None:
        super().__init__(interval_s)
        self._process = process
        self.peak_rss_mb = 0.0
        self.peak_by_role_mb: dict[str, float] = {}
        self._roles = ProcessRoles()

    @property
    def unclassified(self) -> set[str]:
        """Command lines no role matched, so a report can show what "other" is."""
        return self._roles.unclassified

    def _sample(self) -> None:
        rss = 0
        by_role: dict[str, float] = {}
        for proc in self._process.tree():
            try:
                used = proc.memory_info().rss
            except psutil.Error:
                continue
            rss += used
            name = self._roles.of(proc)
            by_role[name] = by_role.get(name, 0.0) + used / 2**20
        if rss / 2**20 > self.peak_rss_mb:
            self.peak_rss_mb = rss / 2**20
            self.peak_by_role_mb = {k: round(v, 1) for k, v in sorted(by_role.items())}


class ProcessRoles:
    """The role of each process of a tree, remembered by pid (see `role`)."""

    def __init__(self) -> None:
        self._roles: dict[int, str] = {}
        self.unclassified: set[str] = set()

    def of(self, proc: psutil.Process) -> str:
        # A process's title changes as it starts (an idle worker becoming a replica, an
        # actor's constructor title becoming its class's): those are read again.
        name = self._roles.get(proc.pid)
        if name is None or name in ("ray idle worker", "other"):
            name = self._roles[proc.pid] = self._classify(proc)
        return name

    def _classify(self, proc: psutil.Process) -> str:
        name = role(_command(proc))
        if name == SUBPROCESS:
            try:
                parent = proc.parent()
            except psutil.Error:
                parent = None
            if parent is not None:
                owner = self._roles.get(parent.pid) or self._classify(parent)
                # uvicorn's --workers processes, a process pool's workers
                name = "worker process" if owner == "web process" else owner
        if name == "other":
            self.unclassified.add(_command(proc)[:120])
        return name


def cpu_seconds_by_role(process: ManagedProcess, roles: ProcessRoles) -> dict[str, float]:
    """CPU seconds (user + system) each role's live processes have used so far. Two
    readings' difference is the CPU a role used between them, if none of its processes
    exited in between."""
    by_role: dict[str, float] = {}
    for proc in process.tree():
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        name = roles.of(proc)
        by_role[name] = by_role.get(name, 0.0) + times.user + times.system
    return by_role


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and its live children (HAProxy's master forks its worker)."""
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for each in procs:
        try:
            times = each.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total
