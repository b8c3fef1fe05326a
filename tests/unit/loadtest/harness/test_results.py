"""The studies' shared plumbing: spreads over rounds, results folders, the command line that
reproduces a run, and a run that SIGTERM unwinds like Ctrl-C."""

import os
import re
import signal
import time

import pytest

from loadtest.harness.results import Study, results_folder, spread

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def test_spread_is_median_min_max_of_the_rounds_that_measured_it():
    assert spread([30.0, 10.0, 20.0, None]) == {
        "median": 20.0,
        "min": 10.0,
        "max": 30.0,
        "n": 3,
    }
    assert spread([None]) is None
    assert spread([1.23456, 2.34567], digits=1) == {"median": 1.8, "min": 1.2, "max": 2.3, "n": 2}


def test_each_run_gets_a_new_folder_named_by_its_utc_start(tmp_path):
    folder = results_folder("bench", root=tmp_path)
    assert folder.is_dir() and folder.parent == tmp_path
    assert re.fullmatch(r"\d{8}T\d{6}Z-bench", folder.name)
    assert re.fullmatch(r"\d{8}T\d{6}Z", results_folder(root=tmp_path / "x").name)


BENCH = Study("loadtest.bench", "The benchmark.\n\nDetails nobody reads.", "bench")


def test_the_recorded_command_reproduces_the_run():
    parser = BENCH.parser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--systems", default="")
    args = BENCH.parse(parser, ["--rounds", "1", "--systems", "legacy,pool ensemble"])
    assert args.rounds == 1
    assert args.command == "python -m loadtest.bench --rounds 1 --systems 'legacy,pool ensemble'"
    assert parser.description == "The benchmark."


def test_a_study_logs_under_its_name(capsys):
    Study("loadtest.reliability", None, "reliability").log("started")
    assert re.fullmatch(r"\[reliability \d\d:\d\d:\d\d\] started\n", capsys.readouterr().out)


def test_a_studys_report_is_indented_json_and_its_log_names_the_file(tmp_path, capsys):
    path = BENCH.save(tmp_path, "bench.json", {"rounds": [1, 2]})
    assert path == tmp_path / "bench.json"
    assert path.read_text() == '{\n  "rounds": [\n    1,\n    2\n  ]\n}\n'
    assert capsys.readouterr().out.endswith(f"report: {path}\n")


def test_sigterm_unwinds_a_job_like_ctrl_c(capsys):
    cleaned = []

    def job():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # interrupted before this ends
        finally:
            cleaned.append(True)

    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert BENCH.run(job) == 130
        # Given back: the caller's own SIGTERM handling is not changed for good.
        assert signal.getsignal(signal.SIGTERM) is previous
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert cleaned == [True]
    assert "[bench " in (logged := capsys.readouterr().out) and "interrupted" in logged
    assert BENCH.run(lambda: None) == 0
    signal.signal(signal.SIGTERM, previous)
