"""The errors both clients raise or fail their futures with."""
from __future__ import annotations

import grpc


class SolusError(Exception):
    """A call that failed for good.

    ``code`` is the ``grpc.StatusCode`` of the last attempt, ``details`` its message,
    ``attempts`` how many were made (0: refused by the client before sending), ``retryable``
    whether that last status was one the client retries (then ``max_attempts`` were spent).
    """

    def __init__(self, rpc: str, code: grpc.StatusCode, details: str, attempts: int, retryable: bool = False):
        name = code.name if code is not None else "UNKNOWN"
        if attempts:
            tail = f"(after {attempts} attempt{'s' if attempts != 1 else ''}"
            tail += ", the retry budget spent)" if retryable else ", not retryable)"
            text = f"{rpc} failed with {name}: {details} {tail}"
        else:
            text = f"{rpc} refused: {details}"
        super().__init__(text)
        self.rpc = rpc
        self.code = code
        self.details = details
        self.attempts = attempts
        self.retryable = retryable


class ClientClosedError(SolusError, RuntimeError):
    """The client was closed: a call made after ``close()``, one still waiting for room when it
    began, or one left unanswered when ``close(timeout_s)`` ran out (it may or may not have been
    executed by the server). ``code`` is ``CANCELLED``. Also a ``RuntimeError``, which is what a
    call after ``close()`` raised before."""

    def __init__(self, rpc: str, why: str, attempts: int = 0):
        super().__init__(rpc, grpc.StatusCode.CANCELLED, "the Solus client was closed " + why, attempts)


class CallbackWaitError(RuntimeError):
    """A completion callback, running on one of the client's sender threads, waited for an answer
    of the same client that was not there yet (``result()`` or ``exception()`` of an unfinished
    future). Raised at once instead of hanging: the answer could need the very thread that waits
    (with ``max_in_flight = 1`` it always does). Chain the work with ``add_done_callback``, or
    hand it to another thread. The same rule as Kafka's producer (KAFKA-10790)."""


class ForkedClientError(RuntimeError):
    """A client, or a future of it, used in a process forked after it was made: in the child its
    threads are gone. A ``SolusClient`` that made its own channel rebuilds itself in the child
    instead; this is raised for one built on a ``channel=`` given by the caller (its channel
    belongs to the parent), for an ``AsyncSolusClient``, and for a future made in the parent
    (the parent answers it; the child never will)."""
