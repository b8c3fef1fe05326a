import pytest

from app.batch.cli import job_env, parser, to_args

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def args_of(*argv):
    return to_args(parser().parse_args(["--game", "galaxy-raiders", "--version", "2026-11", *argv]))


def test_options_reach_the_typed_args_and_defaults_stay():
    args = args_of("--segments", "8", "--read-budget", "2000", "--actors", "1:4")
    assert (args.segments, args.read_budget_per_s, args.min_actors, args.max_actors) == (
        8,
        2000,
        1,
        4,
    )
    assert args.read_budget_unit == "items" and args.batch_size == 2048
    assert (args_of("--actors", "3").min_actors, args_of("--actors", "3").max_actors) == (3, 3)


def test_impossible_options_are_refused():
    with pytest.raises(ValueError):
        args_of("--actors", "4:1")
    with pytest.raises(ValueError):
        args_of("--read-budget", "0")
    with pytest.raises(ValueError):
        to_args(parser().parse_args(["--game", "Bad Game", "--version", "2026-11"]))


def test_only_the_services_and_aws_variables_go_to_the_workers():
    env = {"OFFERS_DYNAMODB_TABLE": "t", "AWS_REGION": "eu-west-1", "HOME": "/root", "PATH": "x"}
    assert job_env(env) == {"OFFERS_DYNAMODB_TABLE": "t", "AWS_REGION": "eu-west-1"}


def test_make_runs_jobs_release_ray_datas_actors_and_others_keep_them_by_default():
    from app.local.precompute import BATCH_OPTIONS

    given = parser().parse_args(["--game", "galaxy-raiders", "--version", "2026-11"])
    assert given.release_data_actors is False  # a RayJob's, `make batch`'s: as Ray leaves them
    precompute = ["--game", "galaxy-raiders", "--version", "2026-11", *BATCH_OPTIONS]
    assert parser().parse_args(precompute).release_data_actors is True


def test_a_release_that_fails_is_reported_and_the_job_still_succeeds(monkeypatch, capsys):
    """The snapshot is written by then: a Ray error in the release must not fail the job."""
    from app.batch import cli, data_actors

    def refused() -> list[str]:
        raise RuntimeError("GCS unreachable")

    monkeypatch.setattr(data_actors, "release_data_actors", refused)
    cli._release_data_actors()  # no exception
    assert "not released: RuntimeError('GCS unreachable')" in capsys.readouterr().err
