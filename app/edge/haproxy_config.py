"""Rewrite the HAProxy config Serve generates so the edge refuses in C and stamps arrivals.

Serve 2.60 renders `haproxy.cfg` from its own template and exposes none of what admission at
the edge needs. This module adds, to the config Serve wrote:

- `maxconn N` on every ingress replica (`server` line) of a listed application: N is the
  application's admission bound, so HAProxy never holds more logins on one replica than the
  replica takes on; the rest wait in HAProxy's queue;
- no `backup` server in a listed application's backend. Serve renders its own Python proxy
  there, for when no ingress replica is up; that proxy holds a login until a replica comes
  back or its `request_timeout_s` (10 s) passes, so a version whose supervisors all died hung
  its route for ~20 s (measured 2026-11-26: 30-40 client timeouts of 5 s, resets, in one
  kill each). Without it, a login with no live replica gets the service's 503 with
  Retry-After at once, from HAProxy, and one in flight on a replica that dies is retried on
  a live one (`retry-on`, `option redispatch 1`) or gets the same 503.
  A backend Serve renders with no replica at all keeps the proxy while its replicas are
  only being reconfigured (a live `serve deploy` of knobs takes them out of Serve's list
  for a moment, alive; the proxy answers those logins), and loses it once HAProxy saw every
  one of them down (the server-state file Serve saves before each reload): then the proxy
  could only hold each login to `timeout server` and refuse it there (measured 1.1 s), and
  HAProxy's own 503 comes at once instead. That holds until the backend lists a replica
  again (`dead`, carried from one reload to the next by the wrapper);
- `timeout queue` on that application's backend: a login that waited that long is answered
  503 by HAProxy itself, without reaching any Python event loop; and a short `timeout
  connect`, which is also how long HAProxy waits before retrying a replica that just died;
- `timeout server` of the application's budget + 100 ms: a login nothing answers in time
  (Serve's proxy holding it while no replica is listed) is refused then, not answered late;
- a cap on that queue (`http-request deny deny_status 503 if { queue() ge N }`): a login
  that finds N already waiting is answered the same 503 at once. In a burst, one deeper in
  the queue than the slots that free up within `timeout queue` would only wait that long to
  be refused, on a host whose cores are busy with the logins admitted;
- a second, adaptive cap below it: the room the replicas measure they can drain within the
  queue's wait (X-Offers-Queue-Room on their answers, app.core.service_time_limit), kept
  in a process-wide variable per application, times the replicas up (`room_rules`); a
  room never reported since HAProxy started, or not refreshed by an answer within the
  queue's wait, counts as one login per replica;
- the whole login buffered before a replica is picked (`option http-buffer-request`), so
  that HAProxy holds the copy its retries replay (it skips a request still arriving when
  it connected). HAProxy 2.8 sends nothing back (it closes the caller's connection, the
  keep-alive close a client may replay) when a login forwarded over a reused connection
  fails on every retry: every replica of the version dead, 1-2 logins per whole-version
  kill. Over a fresh connection that login gets the 503. So either a fresh connection to a
  replica per login (`option http-server-close`, where BackendLimits.reuse_connections is
  off: the supervisors pay a connection per login), or, by default, kept-alive connections
  to the replicas behind a relay (`relay_sections`): the caller's frontend sends each login
  to a second frontend of the same HAProxy over a unix socket, a fresh connection per
  login, and that frontend to the replicas. The close lands on the relay's connection,
  which is not reused, so the relay replays the login (`retry-on empty-response`) and the
  replay, seeing no replica up, gets the 503 (or the relay answers it: its errorfiles are
  the application's);
- `Retry-After` on a `503` from behind HAProxy that has none (Serve's proxy answers one while
  it finds no replica);
- `errorfile 503` with the service's own refusal (JSON body, `Retry-After`), in place of
  Serve's `errorfile`, which turns HAProxy's 503 (and 502/504) into a 500;
- `X-Request-Start: t=<unix µs>` on every request, set when HAProxy has read it, so the
  budget the replicas run (app.core.admission.parse_request_start) includes HAProxy's queue.

It only rewrites a config whose shape it recognizes (the sections and lines above, as the
installed Ray renders them: tests/unit/edge check it against Ray's own renderer) and raises
UnrecognizedConfig otherwise, so a Ray upgrade that changes the template stops HAProxy from
starting instead of silently serving without admission.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from app.config.edge import BackendLimits, EdgeConfig
from app.core.admission import OVERLOADED_DETAIL, QUEUE_ROOM_HEADER
from app.edge.server_state import BackendServer

MARKER = "# rewritten by offers-haproxy (app/edge): edge admission, 503 errorfiles, arrival stamp"
STAMP_RULE = "    http-request set-header X-Request-Start t=%[date(0,us)]"
QUEUE_CAP_RULE = "http-request deny deny_status 503 if {{ queue() ge {} }}"
# HAProxy asks the replica to close after its answer (`Connection: close`), so the replica,
# not HAProxy, mostly holds the closed connection's TIME_WAIT (`ss` on `make run` after
# the kill scenarios: about 70 % on the replicas' side), and HAProxy's ports to a replica
# last longer at a high login rate.
FRESH_CONNECTION_RULE = "option http-server-close"
ROOM_HEADER = QUEUE_ROOM_HEADER.lower()
RETRY_AFTER_RULE = (
    "http-response set-header Retry-After {} "
    "if {{ status 503 }} !{{ res.hdr(retry-after) -m found }}"
)


def room_rules(
    var: str, fresh_ms: int, *, servers: str = "nbsrv", waiting: str = "queue", answers: bool = True
) -> list[str]:
    """The adaptive queue cap: the room the application's replicas last reported (per
    replica, X-Offers-Queue-Room), times the replicas HAProxy has up. A login that finds that
    many waiting is refused at once.

    The queue opens on evidence. A room no answer refreshed for `fresh_ms` (the queue's
    wait: the time it is a forecast for) is stale: it says what the host drained when the
    replicas last answered, and a host that slowed while idle (neighbours, throttling) sends
    no answer to correct it. A burst let into the queue on it waited out `timeout queue` to
    be refused (run AF: 74 logins at 755-777 ms). Stale, it counts as the least room a
    replica reports, one login waiting per replica, until the burst's first answers bring
    the room measured now. A room never reported counts the same: HAProxy's variables start
    empty when it starts and at every reload (Serve reloads it at each change of its
    replicas), and the static cap let a burst then queue as deep as it allows.

    `servers` and `waiting`: the sample fetches of the replicas up and the logins waiting
    for them (the backend's own, by default). `answers`: whether the rules read the room
    from the answers; the relay's backend (relay_sections) refuses on the replicas'
    backend's rules without it: the header reaches, and leaves, the replicas' backend first."""
    at = f"{var}_at"
    reported = f"{{ res.hdr({ROOM_HEADER}) -m found }}"
    response = [
        f"http-response set-var({var}) res.hdr_val({ROOM_HEADER}) if {reported}",
        f"http-response set-var({at}) date(0,ms) if {reported}",
        f"http-response del-header {ROOM_HEADER}",
    ]
    return [
        *(response if answers else []),
        *_room_request_rules(var, at, fresh_ms, servers, waiting),
    ]


def _room_request_rules(var: str, at: str, fresh_ms: int, servers: str, waiting: str) -> list[str]:
    return [
        f"http-request set-var(txn.offers_servers) {servers}",
        # The least room first: the next line leaves it when nothing was reported (a
        # fetch of an unset variable fails, and set-var then sets nothing).
        "http-request set-var(txn.offers_room) var(txn.offers_servers)",
        f"http-request set-var(txn.offers_room) var({var}),mul(txn.offers_servers)",
        f"http-request set-var(txn.offers_room_age) date(0,ms),sub({at})",
        "http-request set-var(txn.offers_room) var(txn.offers_servers) "
        f"if {{ var(txn.offers_room_age) -m int gt {fresh_ms} }}",
        f"http-request set-var(txn.offers_over) {waiting},sub(txn.offers_room)",
        "http-request deny deny_status 503 if { var(txn.offers_over) -m int ge 0 }",
    ]


# The relay of a backend: a backend the caller's frontend uses in its place, and the frontend
# it forwards to, on a unix socket beside the config. `:` is legal in HAProxy's names and
# never in Serve's (safe_name), so neither can collide with a backend Serve renders.
RELAY_BACKEND = "{}:relay"
RELAY_FRONTEND = "{}:relayed"
RELAY_SOCKET = "offers-relay-{}.sock"
# The kernel's limit on a unix socket's path (sun_path, with its terminating NUL).
MAX_SOCKET_PATH = 107
# How long the relay waits for the replicas' backend past its own `timeout server`: the
# inner stream's refusal (its errorfile) arrives first, and is the answer.
RELAY_TIMEOUT_MARGIN_MS = 100


def relay_sections(
    name: str, limits: BackendLimits, socket: Path, errorfile: str, room_var: str
) -> list[str]:
    """The relay in front of backend `name`: `backend <name>:relay`, which the caller's
    frontend uses instead (one connection per login over `socket`, no reuse, so that a
    close without an answer is replayed and answered), and `frontend <name>:relayed` on
    `socket`, which hands the login to the replicas' backend (kept-alive connections) with
    every admission rule there unchanged. The relay refuses on the same caps before its
    hop: a login finding the application's logins beyond its replicas' slots (the relay's
    own, `be_conn`, less the replicas up times `max_in_flight`) as many as its queue may
    hold is refused in one pass through HAProxy's single thread, not two. Counted there,
    the logins between the two frontends count too: in a burst of 1,000 the replicas'
    queue alone fills only as the relay hands them over, and a cap on it let most of the
    burst through the hop to be refused behind it (refusal p99 about 1.7x, run BL). A
    login let through is checked again where it queues. The relayed frontend logs
    nothing: the caller's frontend keeps the one access-log and metrics line per login
    Serve expects."""
    if len(str(socket).encode()) > MAX_SOCKET_PATH:
        raise ValueError(f"relay socket path over {MAX_SOCKET_PATH} bytes: {socket}")
    return [
        RELAY_BACKEND.format(name).join(("backend ", "")),
        f"    timeout connect {limits.connect_timeout_ms}ms",
        f"    timeout server {limits.answer_timeout_ms + RELAY_TIMEOUT_MARGIN_MS}ms",
        f"    errorfile 502 {errorfile}",
        f"    errorfile 503 {errorfile}",
        f"    errorfile 504 {errorfile}",
        # Held whole, for the replay; a connection of its own per login, never reused.
        "    option http-buffer-request",
        f"    {FRESH_CONNECTION_RULE}",
        "    http-reuse never",
        # What the relayed frontend does when its replicas all died under a login it
        # forwarded over a reused connection: it closes this connection without an answer.
        "    retry-on conn-failure empty-response",
        f"    http-request set-var(txn.offers_slots) nbsrv({name}),mul({limits.max_in_flight})",
        # This login excluded (`be_conn` counts it), as the replicas' `queue` would.
        "    http-request set-var(txn.offers_waiting) be_conn,sub(txn.offers_slots),sub(1)",
        "    http-request deny deny_status 503 "
        f"if {{ var(txn.offers_waiting) -m int ge {limits.max_queued} }}",
        *(
            f"    {rule}"
            for rule in room_rules(
                room_var,
                limits.queue_timeout_ms,
                servers=f"nbsrv({name})",
                waiting="var(txn.offers_waiting)",
                answers=False,
            )
        ),
        f"    server relay unix@{socket}",
        RELAY_FRONTEND.format(name).join(("frontend ", "")),
        f"    bind unix@{socket}",
        "    no log",
        f"    default_backend {name}",
    ]


HTTP_FRONTEND = "frontend http_frontend"
_SERVER = re.compile(r"^(\s+)server\s+(\S+)\s+(\S+)(.*)$")
_ERRORFILE = re.compile(r"^(\s+)errorfile\s+(502|503|504)\s+(\S+)\s*$")


class UnrecognizedConfig(ValueError):
    """The config is not the shape this rewrite was written (and tested) against."""


@dataclass(frozen=True)
class Rewritten:
    text: str
    # errorfile path -> its contents (a whole HTTP response); written beside the config.
    errorfiles: dict[str, bytes]
    # Listed backends rendered with no replica whose replicas HAProxy last saw all down:
    # no fallback proxy. Passed back as `dead` to the next rewrite (the next reload).
    dead: frozenset[str] = frozenset()


def safe_name(name: str) -> str:
    """Serve's HAProxy label for a name (HAProxyManager.get_safe_name; tested to match)."""
    name = name.replace("#", "-").replace("/", ".")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def backend_name(app_name: str) -> str:
    """The HAProxy backend Serve renders for an application's HTTP ingress."""
    return safe_name(f"http-{app_name}")


def refusal_response(retry_after_s: int) -> bytes:
    """HAProxy's 503, byte for byte the body and Retry-After of the replicas' own refusal."""
    body = json.dumps({"detail": OVERLOADED_DETAIL}).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\n"
        "content-type: application/json\r\n"
        f"retry-after: {retry_after_s}\r\n"
        "cache-control: no-store\r\n"
        f"content-length: {len(body)}\r\n"
        "\r\n"
    )
    return head.encode() + body


def _sections(lines: list[str]) -> list[tuple[str, list[str]]]:
    """(header, body lines) in order; a header is a line that starts without indentation."""
    sections: list[tuple[str, list[str]]] = []
    for line in lines:
        if line and not line[0].isspace() and not line.startswith("#"):
            sections.append((line.rstrip(), []))
        elif sections:
            sections[-1][1].append(line)
        elif line.strip():
            raise UnrecognizedConfig(f"content before the first section: {line!r}")
    return sections


def rewrite(
    text: str,
    edge: EdgeConfig,
    config_dir: Path,
    last_seen: dict[str, list[BackendServer]] | None = None,
    dead: frozenset[str] = frozenset(),
) -> Rewritten:
    """The config with edge admission, or `text` unchanged if it was already rewritten.

    `last_seen`: each backend's servers as the running HAProxy saw them (the saved server
    states); `dead`: the backends the previous rewrite found dead (Rewritten.dead)."""
    if text.startswith(MARKER):
        return Rewritten(text, {}, dead)
    sections = _sections(text.splitlines())
    headers = [header for header, _ in sections]
    for required in ("global", "defaults", HTTP_FRONTEND):
        if required not in headers:
            raise UnrecognizedConfig(f"no `{required}` section (sections: {headers})")
    files: dict[str, bytes] = {}
    default_file = str(config_dir / "offers-503.http")
    files[default_file] = refusal_response(edge.retry_after_s)
    by_backend = {backend_name(app): limits for app, limits in edge.backends.items()}
    if edge.unlisted is not None:
        for header, _ in sections:
            name = header.split()[1] if header.startswith("backend ") else ""
            if _is_application_backend(name) and name not in by_backend:
                by_backend[name] = edge.unlisted
    # A process-wide variable per backend (HAProxy's names take no `-`).
    room_vars = {name: f"proc.offers_room_{i}" for i, name in enumerate(sorted(by_backend))}
    present = {header.split()[1] for header, _ in sections if header.startswith("backend ")}
    relayed = {
        name: config_dir / RELAY_SOCKET.format(i)
        for i, name in enumerate(sorted(by_backend))
        if name in present and by_backend[name].reuse_connections and by_backend[name].relay
    }
    out = [MARKER]
    now_dead: set[str] = set()
    relays: list[str] = []
    for header, body in sections:
        out.append(header)
        if header == "defaults":
            out += _defaults(body, default_file)
        elif header == HTTP_FRONTEND:
            out += _frontend(body, set(relayed))
        elif header.startswith("backend ") and header.split()[1] in by_backend:
            name = header.split()[1]
            path = str(config_dir / f"offers-503-{name}.http")
            files[path] = refusal_response(by_backend[name].retry_after_s)
            is_dead = _all_replicas_down(body, (last_seen or {}).get(name, []), name in dead)
            if is_dead:
                now_dead.add(name)
            # Serve's proxy stays only while no replica is listed and they are not all down.
            keep_fallback = not _primaries(body) and not is_dead
            out += _backend(body, by_backend[name], path, room_vars[name], keep_fallback)
            if name in relayed:
                relays += relay_sections(
                    name, by_backend[name], relayed[name], path, room_vars[name]
                )
        else:
            out += body
    return Rewritten("\n".join(out + relays) + "\n", files, frozenset(now_dead))


def _primaries(body: list[str]) -> list[str]:
    """A backend's replica server lines (every `server` but Serve's `backup` proxy)."""
    return [
        line for line in body if (m := _SERVER.match(line)) and "backup" not in m.group(4).split()
    ]


def _all_replicas_down(body: list[str], last_seen: list[BackendServer], was_dead: bool) -> bool:
    """Whether a backend rendered with no replica lost them all, rather than having them out
    of Serve's list for a moment (reconfigured by a live `serve deploy`, alive).

    HAProxy's last view decides: every replica it held was down (connections refused, failed
    checks). With none in that view (the previous config had no replica either), the previous
    verdict stands, so a new application, deploying, keeps Serve's proxy as Serve intends."""
    if _primaries(body):
        return False
    fallbacks = {m.group(2) for line in body if (m := _SERVER.match(line))}
    replicas = [s for s in last_seen if s.name not in fallbacks]
    if replicas:
        return all(s.down for s in replicas)
    return was_dead


def _is_application_backend(name: str) -> bool:
    """An application's HTTP backend as Serve names them (backend_name), not its default,
    gRPC or request-router backends."""
    return name.startswith("http-") and not name.endswith("-via-ingress-request-router")


def _defaults(body: list[str], errorfile: str) -> list[str]:
    """Serve's 502/503/504 -> 500 errorfiles become the service's 503: a login the edge
    cannot place is a retryable refusal, never a 500."""
    out: list[str] = []
    replaced = set()
    for line in body:
        match = _ERRORFILE.match(line)
        if match:
            replaced.add(match.group(2))
            out.append(f"{match.group(1)}errorfile {match.group(2)} {errorfile}")
        else:
            out.append(line)
    if replaced and replaced != {"502", "503", "504"}:
        raise UnrecognizedConfig(f"errorfile lines for {sorted(replaced)} only")
    if not replaced:
        out += [f"    errorfile {code} {errorfile}" for code in ("502", "503", "504")]
    return out


def _frontend(body: list[str], relayed: set[str]) -> list[str]:
    binds = [i for i, line in enumerate(body) if line.strip().startswith("bind ")]
    if len(binds) != 1:
        raise UnrecognizedConfig(f"{HTTP_FRONTEND} has {len(binds)} bind lines, expected 1")
    if any("X-Request-Start" in line for line in body):
        raise UnrecognizedConfig(f"{HTTP_FRONTEND} already sets X-Request-Start")
    # First rule after bind: overwrites any client-sent stamp, before any other rule.
    at = binds[0] + 1
    out = [*body[:at], STAMP_RULE, *body[at:]]
    # A relayed application's logins go to its relay (relay_sections) instead.
    routed: set[str] = set()
    for i, line in enumerate(out):
        words = line.split()
        if len(words) == 4 and words[0] == "use_backend" and words[1] in relayed:
            if words[2:] != ["if", f"is_{words[1]}"]:
                raise UnrecognizedConfig(f"use_backend line not as rendered: {line.strip()!r}")
            out[i] = line.replace(
                f"use_backend {words[1]} ", f"use_backend {RELAY_BACKEND.format(words[1])} "
            )
            routed.add(words[1])
    if routed != relayed:
        raise UnrecognizedConfig(f"no use_backend line for {sorted(relayed - routed)}")
    return out


def _backend(
    body: list[str], limits: BackendLimits, errorfile: str, room_var: str, keep_fallback: bool
) -> list[str]:
    ours = {
        "timeout queue": f"timeout queue {limits.queue_timeout_ms}ms",
        "timeout connect": f"timeout connect {limits.connect_timeout_ms}ms",
        "timeout server": f"timeout server {limits.answer_timeout_ms}ms",
        "errorfile 503": f"errorfile 503 {errorfile}",
        # HAProxy's 504 (`timeout server`) and 502 are this application's refusal too.
        "errorfile 504": f"errorfile 504 {errorfile}",
        "errorfile 502": f"errorfile 502 {errorfile}",
    }
    out = [f"    {line}" for line in ours.values()]
    # The whole login before a replica is picked, so that HAProxy holds a copy to retry
    # (its L7 retries skip a request still arriving when it connected).
    out.append("    option http-buffer-request")
    if not limits.reuse_connections:
        out.append(f"    {FRESH_CONNECTION_RULE}")
    # Before any queueing: the errorfile 503 above is the answer (HAProxy's own deny).
    out.append(f"    {QUEUE_CAP_RULE.format(limits.max_queued)}")
    out += [f"    {rule}" for rule in room_rules(room_var, limits.queue_timeout_ms)]
    # A 503 from behind HAProxy without Retry-After (Serve's proxy answers one while it
    # finds no replica: DeploymentUnavailableError) gets the application's, as every
    # refusal of the service does; one that carries its own keeps it.
    out.append(f"    {RETRY_AFTER_RULE.format(limits.retry_after_s)}")
    for line in body:
        stripped = line.strip()
        if stripped.startswith("http-request "):
            raise UnrecognizedConfig(f"backend already has http-request rules: {stripped!r}")
        if any(stripped.startswith(f"{key} ") for key in ours):
            continue  # ours, above, replaces it
        match = _SERVER.match(line)
        if match:
            words = match.group(4).split()
            if "maxconn" in words:
                raise UnrecognizedConfig(f"server line already has maxconn: {stripped!r}")
            if "backup" in words:
                # Serve's proxy as the fallback would hold a login while no replica is up;
                # without it HAProxy answers the 503 above (module docstring). Kept while
                # Serve (re)deploys or reconfigures the application: it routes the login.
                out.append(
                    line
                    if keep_fallback
                    else f"    # {stripped} (removed by offers-haproxy: no live replica -> 503)"
                )
                continue
            line = f"{line.rstrip()} maxconn {limits.max_in_flight}"
        out.append(line)
    return out
