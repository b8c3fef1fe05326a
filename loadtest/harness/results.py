"""What every study runner shares: its log line, its command line, its timestamped results
folder, the spread of a figure over rounds, and a run that unwinds on SIGTERM.

A runner declares one `Study` (its module, docstring and log tag); its `main` is then three
lines: `study.parser()`, `study.parse(parser, argv)` (which records the command that
reproduces the run) and `study.run(...)`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from app.local.processes import PROJECT_ROOT

RESULTS = PROJECT_ROOT / "loadtest" / "results"

Log = Callable[[str], None]


def study_log(study: str) -> Log:
    """`[study HH:MM:SS] message` on stdout, flushed (runs are watched live and piped to tee)."""

    def log(message: str) -> None:
        print(f"[{study} {time.strftime('%H:%M:%S')}] {message}", flush=True)

    return log


def results_folder(suffix: str = "", root: Path = RESULTS) -> Path:
    """A new folder for one run's results, named by its UTC start (`20261124T023100Z-suffix`)."""
    name = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + (f"-{suffix}" if suffix else "")
    folder = root / name
    folder.mkdir(parents=True)
    return folder


def spread(values: Iterable[float | None], digits: int = 3) -> dict[str, float] | None:
    """Median and min-max of the rounds that produced a figure, and how many did; None if none
    did. Ratios are only called where two spreads do not overlap (bench.report.verdict)."""
    kept = [float(v) for v in values if v is not None]
    if not kept:
        return None
    return {
        "median": round(statistics.median(kept), digits),
        "min": round(min(kept), digits),
        "max": round(max(kept), digits),
        "n": len(kept),
    }


def study_parser(module: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser of `python -m <module>`, described by the first paragraph of its docstring."""
    return argparse.ArgumentParser(
        prog=f"python -m {module}",
        description=(doc or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_version_args(parser: argparse.ArgumentParser) -> None:
    """--game, --version, --profile: the trained version a study measures (the served one)."""
    parser.add_argument("--game", default="galaxy-raiders")
    parser.add_argument("--version", default="2026-11")
    parser.add_argument("--profile", default="standard")


def parse_study_args(
    parser: argparse.ArgumentParser, argv: list[str] | None
) -> argparse.Namespace:
    """Parse; `args.command` is the command line that reproduces the run, for its report."""
    given = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(given)
    args.command = shlex.join([*parser.prog.split(), *given])
    return args


def run_study(run: Callable[[], object], log: Log) -> int:
    """Run a study; SIGTERM (a CI runner, `kill`) unwinds like Ctrl-C, so every `with` block
    stops the process it started. Exit code 130 when interrupted."""

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    # Restored afterwards: a study run inside a longer-lived process (the test suite) must
    # not leave that process turning every later SIGTERM into an interrupt of its own.
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        run()
    except KeyboardInterrupt:
        log("interrupted; everything started has been stopped")
        return 130
    finally:
        # None: the handler was not installed from Python; nothing to give back then.
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 0


@dataclass(frozen=True)
class Study:
    """One study runner, `python -m <module>`: its log line, command line, results folders
    and a run that unwinds on SIGTERM (the functions above, bound to the study)."""

    module: str
    doc: str | None
    tag: str  # the log line's `[tag HH:MM:SS]`

    def log(self, message: str) -> None:
        study_log(self.tag)(message)

    def parser(self, *, rounds: int | None = None) -> argparse.ArgumentParser:
        """The study's command line; `rounds`: the default of its `--rounds`, for a study
        that measures in interleaved rounds (None: it has no such option)."""
        parser = study_parser(self.module, self.doc)
        if rounds is not None:
            parser.add_argument(
                "--rounds",
                type=int,
                default=rounds,
                help="interleaved rounds: every figure is their median and spread",
            )
        return parser

    def parse(self, parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
        return parse_study_args(parser, argv)

    def folder(self, suffix: str = "") -> Path:
        return results_folder(suffix)

    def run(self, run: Callable[[], object]) -> int:
        return run_study(run, self.log)

    def save(self, folder: Path, name: str, report: dict[str, Any]) -> Path:
        """The study's report as `folder/name`, indented JSON; the log says where."""
        path = folder / name
        path.write_text(json.dumps(report, indent=2) + "\n")
        self.log(f"report: {path}")
        return path


def machine_info() -> dict[str, Any]:
    """What a run was measured on, for its report: figures from another host do not compare."""
    import ray  # only here: the harness is imported by tools that never start Ray

    model = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "ray": ray.__version__,
        "platform": platform.platform(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }
