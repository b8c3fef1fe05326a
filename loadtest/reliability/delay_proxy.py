"""A TCP proxy that can make a server slow without making it down: the "slow DynamoDB" fault.

    python -m loadtest.reliability.delay_proxy --listen 127.0.0.1:PORT \
        --target 127.0.0.1:4567 --delay-ms 800

Every chunk the client sends is held for the current delay before it is forwarded, so each
DynamoDB call (one request per chunk on a kept-alive connection) takes that much longer.
The delay starts at 0: SIGUSR1 turns it on, SIGUSR2 off, so a runner can flip it under load
without moving the service's endpoint; SIGHUP prints the calls forwarded so far. Answers are
passed back at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys


class DelayProxy:
    def __init__(self, target: tuple[str, int], delay_s: float) -> None:
        self.target = target
        self.configured_delay_s = delay_s
        self.delay_s = 0.0
        # Requests forwarded (a chunk from the client is one DynamoDB call on a kept-alive
        # connection); SIGHUP prints it, so a runner can count reads over a scenario.
        self.calls = 0

    def slow(self) -> None:
        self.delay_s = self.configured_delay_s
        print(f"delay on: +{self.delay_s * 1000:.0f} ms per call", flush=True)

    def fast(self) -> None:
        self.delay_s = 0.0
        print("delay off", flush=True)

    def report(self) -> None:
        print(f"calls {self.calls}", flush=True)

    async def handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            client_w.close()
            return

        async def upstream() -> None:
            while chunk := await client_r.read(65536):
                self.calls += 1
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                server_w.write(chunk)
                await server_w.drain()

        async def downstream() -> None:
            while chunk := await server_r.read(65536):
                client_w.write(chunk)
                await client_w.drain()

        with contextlib.suppress(OSError):
            # Whichever side closes first ends the pair.
            tasks = [asyncio.ensure_future(upstream()), asyncio.ensure_future(downstream())]
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in tasks:
                task.cancel()
        for writer in (server_w, client_w):
            writer.close()


def parse_address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


async def serve(args: argparse.Namespace) -> None:
    proxy = DelayProxy(parse_address(args.target), args.delay_ms / 1000.0)
    host, port = parse_address(args.listen)
    server = await asyncio.start_server(proxy.handle, host, port)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, proxy.slow)
    loop.add_signal_handler(signal.SIGUSR2, proxy.fast)
    loop.add_signal_handler(signal.SIGHUP, proxy.report)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    print(f"listening on {host}:{port} -> {args.target}", flush=True)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.reliability.delay_proxy", description=__doc__
    )
    parser.add_argument("--listen", required=True, help="host:port to accept on")
    parser.add_argument("--target", required=True, help="host:port to forward to")
    parser.add_argument("--delay-ms", type=float, default=800.0, help="delay once turned on")
    asyncio.run(serve(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
