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
