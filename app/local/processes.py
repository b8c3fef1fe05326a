"""Child-process helpers shared by the local tooling and the load-test runners."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """preexec_fn: a child gets the default SIGINT action even if we ignore SIGINT.

    A shell that starts a job in the background leaves SIGINT ignored, and children inherit
    that; `serve run` must always shut its Ray down on SIGINT.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
