"""Logins waiting for a slot that another login will free, first come first served.

Used where a login would otherwise be refused because a bound is reached while slots free
every few ms: a supervisor's admission gate for the logins a game's router sends it
(app.core.admission), and the router's share of a version (app.core.routing.version_load). Waiting
there costs a future on the event loop; refusing costs the caller a trip back through the
loops, on the cores that score the admitted logins, and the login itself.

A freed slot is taken for the oldest waiter by the one who frees it (`hand_over`), so that a
login arriving before the waiter resumes cannot take it first.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable


class SlotWaiters:
    def __init__(self) -> None:
        self._queue: deque[asyncio.Future[None]] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    async def wait(self, wait_s: float, give_back: Callable[[], None]) -> bool:
        """Wait up to `wait_s` for `hand_over` to take a slot for this login. True: it holds
        the slot (and gives it back itself, when done). False: no slot came in time and it
        holds nothing. Cancelled after a slot was taken for it, it calls `give_back`."""
        if wait_s <= 0:
            return False
        slot: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(slot)
        try:
            async with asyncio.timeout(wait_s):
                await asyncio.shield(slot)
        except TimeoutError:
            pass
        except BaseException:
            if slot.done() and not slot.cancelled():
                give_back()
            raise
        finally:
            if not slot.done():
                slot.cancel()  # no slot is taken for it from now on
                self._queue.remove(slot)
        # A slot taken for it as its time ran out is still its own.
        return slot.done() and not slot.cancelled()

    def hand_over(self, has_room: Callable[[], bool], take: Callable[[], None]) -> None:
        """While there is room, take a slot for the oldest waiter and wake it."""
        while self._queue and has_room():
            slot = self._queue.popleft()
            take()
            slot.set_result(None)
