"""Game-server login traffic against one Dynamic Offers application.

Each locust user is one game server; each task is one player login asking
`POST <route-prefix>/v1/offers` which offer to show. Players are Zipf-popular (a few hot
players log in a lot), ~5% are unknown to the feature store and ~2% of bodies are malformed on
purpose (counted apart as "offers [malformed]"; they pass only when refused with a 4xx).

Against a running service (`make run` serves on :8000):

    # headless, constant load: 20 game servers x 1 login/s each for 30 s
    .venv/bin/locust -f loadtest/locustfile.py --headless -u 20 -r 20 -t 30s \\
        --host http://127.0.0.1:8000

    # web UI on http://127.0.0.1:8089 (users, spawn rate and run time are set in the form)
    .venv/bin/locust -f loadtest/locustfile.py --host http://127.0.0.1:8000

    # headless login day: warm-up, steps up, peak, spike, cool-down (9 x --stage-seconds)
    .venv/bin/locust -f loadtest/locustfile.py --headless --stages login-day \\
        --peak-users 40 --stage-seconds 20 --host http://127.0.0.1:8000

    # web UI login day: "Start" runs the stages
    .venv/bin/locust -f loadtest/locustfile.py --stages login-day --host http://127.0.0.1:8000

Run from the repository root: locust puts the working directory on sys.path, which is how
this file finds `loadtest.traffic`. Add `--csv out/run --outcomes-json out/outcomes.json` to
keep the stats and the outcome tally (format: `loadtest.traffic.OutcomeTally`).

Options (defaults): --game (galaxy-raiders), --route-prefix (/galaxy-raiders/2026-11),
--players (10000, the seeded population), --unknown-share (0.05), --malformed-share (0.02),
--zipf-exponent (1.1), --user-rps (1.0 mean logins/s per user, Poisson waits),
--arrivals (closed: wait after each answer | open: one login per 1 / --user-rps s on a fixed
schedule from a random phase, whatever the answers),
--stages (none | login-day), --peak-users (40), --stage-seconds (20),
--late-after-ms (0: off), --outcomes-json (unset). Locust's own --help does not list them
(it is printed before the locustfile is loaded); all but --stages and --outcomes-json are
editable in the web UI form.

The login day: locust attaches the first LoadTestShape in the locustfile to every run, so
`LoginDay` is defined here and detached again at init unless `--stages login-day` is given.
Detaching sets `environment.shape_class = None`, which is what the web UI's own shape picker
does for "Default": with `--stages none` the run is a plain `-u/-r/-t` test.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import random
import time
from pathlib import Path
from typing import Any

import gevent
from locust import FastHttpUser, LoadTestShape, events, poisson, task
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from loadtest.traffic import (
    LOGIN_DAY,
    LoginMix,
    Malformed,
    OutcomeTally,
    TrafficConfig,
    judge_malformed,
    judge_offer,
    stage_at,
)

logger = logging.getLogger(__name__)

JSON_HEADERS = {"Content-Type": "application/json"}
# The API key, when the service requires one (its X-API-Key header): from the environment,
# e.g. a Kubernetes secret (k8s/loadtest/job.yaml), never on the command line.
API_KEY_ENV = "OFFERS_API_KEY"
# Users are seeded (TRAFFIC_SEED, worker index, user number): reproducible, and no two game
# servers replay the same login sequence.
TRAFFIC_SEED = 2026
_user_numbers = itertools.count()

# This process's outcomes; workers ship theirs to the master with every stats report.
OUTCOMES = OutcomeTally()
REPORT_KEY = "offer_outcomes"


@events.init_command_line_parser.add_listener
def add_options(parser: Any, **_: Any) -> None:
    parser.add_argument("--game", default="galaxy-raiders", help="game id sent in each body")
    parser.add_argument(
        "--route-prefix", default="/galaxy-raiders/2026-11", help="the application's prefix"
    )
    parser.add_argument("--players", type=int, default=10_000, help="seeded population size")
    parser.add_argument("--unknown-share", type=float, default=0.05, help="unknown players")
    parser.add_argument("--malformed-share", type=float, default=0.02, help="malformed bodies")
    parser.add_argument("--zipf-exponent", type=float, default=1.1, help="player popularity skew")
    parser.add_argument(
        "--user-rps",
        type=float,
        default=1.0,
        help="mean logins/s per game server (exponential waits)",
    )
    parser.add_argument(
        "--arrivals",
        choices=["closed", "open"],
        default="closed",
        help="'closed': a user waits (exponentially) after each answer; 'open': a user sends "
        "one login every 1 / --user-rps seconds from a random phase, whatever the answers",
    )
    parser.add_argument(
        "--stages",
        choices=["none", "login-day"],
        default="none",
        include_in_web_ui=False,  # decided at start-up: the shape is attached or not
        help="'login-day' runs the LoginDay shape; 'none' a plain -u/-r/-t test",
    )
    parser.add_argument("--peak-users", type=int, default=40, help="login day: users at peak")
    parser.add_argument(
        "--stage-seconds", type=float, default=20.0, help="login day: seconds per stage"
    )
    parser.add_argument(
        "--late-after-ms",
        type=float,
        default=0.0,
        help="count answers slower than this as late (the deadline plus slack; 0: off)",
    )
    parser.add_argument(
        "--outcomes-json",
        default=None,
        include_in_web_ui=False,
        help="write the outcome tally here when a test stops and at quit",
    )


def traffic_config(options: Any) -> TrafficConfig:
    return TrafficConfig(
        game=options.game,
        n_players=options.players,
        unknown_share=options.unknown_share,
        malformed_share=options.malformed_share,
        zipf_exponent=options.zipf_exponent,
    )


def _json(response: Any) -> Any:
    try:
        return response.json()
    except (TypeError, ValueError):  # no body, or not JSON
        return None


class GameServer(FastHttpUser):
    """One game server: every task is one player login asking which offer to show."""

    def on_start(self) -> None:
        options = self.environment.parsed_options
        self.offers_path = f"{options.route_prefix.rstrip('/')}/v1/offers"
        # A key file written with `echo` ends in a newline, which is not part of the key.
        api_key = os.environ.get(API_KEY_ENV, "").strip()
        self.headers = {**JSON_HEADERS, **({"X-API-Key": api_key} if api_key else {})}
        worker = max(getattr(self.environment.runner, "worker_index", 0), 0)
        seed = (TRAFFIC_SEED, worker, next(_user_numbers))
        self.logins = LoginMix(traffic_config(options), seed=seed)
        # Exponential waits (mean 1 / --user-rps): many independent game servers add up to a
        # Poisson arrival stream, offered load ~ users x --user-rps while latency is small
        # against the mean wait. Fixed pacing (constant_throughput) was measured to leave
        # users phase-locked, sending in bursts: 172 of 200 logins started in the same 50 ms
        # slice of the 500 ms period, which tripled the p50 of an idle server.
        self._pace = poisson(options.user_rps)
        # Open arrivals: each user sends on a fixed schedule, one login every 1 / --user-rps
        # seconds from a random phase, whatever the answers (locust's constant_pacing, but
        # paced from the last send, not the last answer). Many users with random phases add
        # up to an even stream of users x --user-rps; it stays on schedule while answers
        # take less than the period.
        self._open_loop = options.arrivals == "open"
        self._period_s = 1.0 / options.user_rps
        self._next_at = time.monotonic()
        if self._open_loop:
            # Otherwise every user's first login lands in the one second users spawn in.
            self._next_at += random.uniform(0.0, self._period_s)
            gevent.sleep(self._next_at - time.monotonic())

    def wait_time(self) -> float:
        if not self._open_loop:
            return self._pace(self)
        self._next_at += self._period_s
        return max(0.0, self._next_at - time.monotonic())

    @task
    def login(self) -> None:
        login = self.logins.next_login()
        if login.malformed is None:
            self._offer(login.body)
        else:
            self._malformed(login.malformed, login.body)

    def _offer(self, body: bytes) -> None:
        started = time.perf_counter()
        with self.client.post(
            self.offers_path, data=body, headers=self.headers, name="offers", catch_response=True
        ) as response:
            verdict = judge_offer(response.status_code, _json(response))
            self._settle(response, verdict, started)

    def _malformed(self, kind: Malformed, body: bytes) -> None:
        started = time.perf_counter()
        with self.client.post(
            self.offers_path,
            data=body,
            headers=self.headers,
            name="offers [malformed]",
            catch_response=True,
        ) as response:
            self._settle(response, judge_malformed(kind, response.status_code), started)

    def _settle(self, response: Any, verdict: Any, started: float) -> None:
        late_after_ms = self.environment.parsed_options.late_after_ms or None
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        OUTCOMES.record_response(response.status_code or 0, elapsed_ms, late_after_ms)
        OUTCOMES.record(verdict)
        if verdict.ok:
            response.success()  # also for the expected 4xx of a malformed body
        else:
            response.failure(f"{verdict.outcome}: {verdict.detail}")


class LoginDay(LoadTestShape):
    """A game's login day (loadtest.traffic.LOGIN_DAY), attached with `--stages login-day`.

    warm-up 10% -> step-up 25%, 50%, 75% -> peak 100% (two stages) -> spike 150% (reached in a
    tenth of the stage) -> cool-down 50% -> night 10%, of --peak-users; one stage lasts
    --stage-seconds. Of locust's common options it reads only --run-time, as a cap on the day.
    """

    use_common_options = True
    stages = LOGIN_DAY

    def __init__(self) -> None:
        super().__init__()
        self._stage: str | None = None

    def tick(self) -> tuple[int, float] | None:
        options = self.runner.environment.parsed_options
        elapsed_s = self.get_run_time()
        if options.run_time and elapsed_s >= options.run_time:
            return None
        now = stage_at(
            elapsed_s,
            self.stages,
            peak_users=options.peak_users,
            stage_seconds=options.stage_seconds,
        )
        if now is None:
            return None
        if now.stage.name != self._stage:
            self._stage = now.stage.name
            logger.info("login day: %s, %d users", now.stage.name, now.users)
        return now.users, now.spawn_rate


@events.init.add_listener
def wire_up(environment: Environment, runner: Any, **_: Any) -> None:
    options = environment.parsed_options
    if options is None:  # used as a library, not from the locust command line
        return
    if options.stages == "none":
        # The web UI's shape picker does the same for "Default": the runner then follows
        # -u/-r/-t (or the form) as if no shape were defined.
        environment.shape_class = None
    elif options.num_users or options.spawn_rate:
        logger.warning("--stages login-day: -u/-r are ignored; scale with --peak-users")
    _reset_tally_with_stats(environment)
    if isinstance(runner, WorkerRunner):
        _report_tally_to_master(environment)
    else:
        if isinstance(runner, MasterRunner):
            _collect_worker_tallies(environment)
        _write_tally(environment, options.outcomes_json)


def _reset_tally_with_stats(environment: Environment) -> None:
    """The tally covers the same window as locust's stats: a new test, the web UI's "Reset
    stats" and --reset-stats (once spawning completes) start it over."""

    def after_spawning(**_: Any) -> None:
        if environment.reset_stats:
            OUTCOMES.reset()

    environment.events.test_start.add_listener(lambda **_: OUTCOMES.reset())
    environment.events.reset_stats.add_listener(lambda **_: OUTCOMES.reset())
    environment.events.spawning_complete.add_listener(after_spawning)


def _report_tally_to_master(environment: Environment) -> None:
    def report(data: dict[str, Any], **_: Any) -> None:
        data[REPORT_KEY] = OUTCOMES.drain()

    environment.events.report_to_master.add_listener(report)


def _collect_worker_tallies(environment: Environment) -> None:
    def collect(data: dict[str, Any], **_: Any) -> None:
        if REPORT_KEY in data:
            OUTCOMES.merge(data[REPORT_KEY])

    environment.events.worker_report.add_listener(collect)


def _write_tally(environment: Environment, outcomes_json: str | None) -> None:
    def write(**_: Any) -> None:
        if outcomes_json:
            path = Path(outcomes_json)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(OUTCOMES.snapshot(), indent=2) + "\n")

    def write_and_log(**_: Any) -> None:
        write()
        logger.info("offer outcomes: %s", json.dumps(OUTCOMES.snapshot()))

    # At test stop, for the web UI's repeated runs; again at quit, once the master has the
    # workers' final reports.
    environment.events.test_stop.add_listener(write)
    environment.events.quitting.add_listener(write_and_log)
