"""Where a Ray node starts: Serve's process settings and how many workers it starts at once."""

import pytest

from app.config.ray_env import (
    SERVE_PROCESS_ENV,
    WORKER_START_CONCURRENCY_ENV,
    ray_node_env,
    worker_start_concurrency,
)

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


@pytest.mark.parametrize(
    ("cores", "at_once"), [(0.5, 1), (1, 1), (2, 1), (3, 1), (4, 2), (7.5, 3), (16, 8)]
)
def test_a_node_starts_workers_on_half_its_cores_and_at_least_one(cores, at_once):
    assert worker_start_concurrency(cores) == at_once


def test_the_node_env_is_serves_settings_plus_the_start_bound_of_the_nodes_cores():
    env = ray_node_env(4)
    assert SERVE_PROCESS_ENV.items() <= env.items()
    assert env[WORKER_START_CONCURRENCY_ENV] == "2"
    # Without a figure, this host's cores: at least one start, whatever the host.
    assert int(ray_node_env()[WORKER_START_CONCURRENCY_ENV]) >= 1
