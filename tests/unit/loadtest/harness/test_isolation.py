"""CPU isolation of the benchmark: the driver and the system under test in weighted cgroups."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.harness import isolation
from loadtest.harness.isolation import DRIVER_WEIGHT, CpuIsolation

pytestmark = pytest.mark.unit


def fake_v1(root: Path) -> Path:
    cpu = root / "cpu"
    cpu.mkdir(parents=True)
    (cpu / "cpu.shares").write_text("1024")
    return cpu


def test_v1_groups_are_weighted_and_the_driver_joins_its_own(tmp_path, monkeypatch):
    monkeypatch.setattr(isolation, "CGROUP_ROOT", tmp_path)
    cpu = fake_v1(tmp_path)
    moved = []
    monkeypatch.setattr(isolation, "_move", lambda pid, group: moved.append((pid, group)))
    with CpuIsolation() as iso:
        assert iso.active
        group = cpu / f"{isolation.GROUP}-{os.getpid()}"
        assert (group / "system" / "cpu.shares").read_text() == "1024"
        assert (group / "driver" / "cpu.shares").read_text() == str(1024 * DRIVER_WEIGHT)
        assert moved == [(os.getpid(), group / "driver")]
        iso.enter_system()
        assert moved[-1] == (os.getpid(), group / "system")
        assert iso.describe()["method"] == "cgroup v1"


def test_v2_delegates_the_cpu_controller_and_sets_weights(tmp_path, monkeypatch):
    monkeypatch.setattr(isolation, "CGROUP_ROOT", tmp_path)
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids")
    monkeypatch.setattr(isolation, "_move", lambda pid, group: None)
    with CpuIsolation() as iso:
        group = tmp_path / f"{isolation.GROUP}-{os.getpid()}"
        assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu"
        assert (group / "system" / "cpu.weight").read_text() == "100"
        assert (group / "driver" / "cpu.weight").read_text() == str(100 * DRIVER_WEIGHT)
        assert iso.describe()["method"] == "cgroup v2"


def test_without_a_cpu_controller_the_report_says_there_was_no_isolation(tmp_path, monkeypatch):
    monkeypatch.setattr(isolation, "CGROUP_ROOT", tmp_path)
    (tmp_path / "cgroup.controllers").write_text("memory pids")
    with CpuIsolation() as iso:
        assert not iso.active
        iso.enter_system()  # a no-op, not an error
        assert iso.describe() == {
            "method": "none",
            "reason": "no writable cgroup cpu controller on this host",
        }
    assert CpuIsolation(enabled=False).describe()["reason"] == "disabled (--no-isolation)"


def _cgroup_of(pid: int) -> str:
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    # v1: "N:cpu,cpuacct:/path"; v2: "0::/path"
    return next(
        line.split(":", 2)[2]
        for line in lines
        if line.startswith("0::") or "cpu," in line or line.split(":")[1] == "cpu"
    )


def test_on_this_host_a_system_lands_in_its_group_or_the_reason_is_given():
    """Real cgroups: either isolation works end to end, or it says why not."""
    before = _cgroup_of(os.getpid())
    with CpuIsolation() as iso:
        if not iso.active:
            # No cgroup to isolate with (an unprivileged container): the reason is given,
            # and the end-to-end check below cannot run here; say so in the report.
            assert iso.describe()["method"] == "none" and iso.describe()["reason"]
            pytest.skip(f"no CPU isolation on this host: {iso.describe()['reason']}")
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(5)"], preexec_fn=iso.enter_system
        )
        try:
            assert _cgroup_of(child.pid).endswith(f"/{isolation.GROUP}-{os.getpid()}/system")
            assert _cgroup_of(os.getpid()).endswith(f"/{isolation.GROUP}-{os.getpid()}/driver")
        finally:
            child.kill()
            child.wait()
    # Everything is given back and the groups are gone.
    assert _cgroup_of(os.getpid()) in (before, "/")
