"""Which failed attempts are retried, told by the server (issue 18, item 4).

Retried: a status carrying ``google.rpc.RetryInfo`` in its ``grpc-status-details-bin`` trailer
(the server's transient refusals: the concurrency limit, storage unavailable, draining); an
``UNAVAILABLE``, ``DEADLINE_EXCEEDED`` or ``CANCELLED`` with no status details at all (the
transport failed, this attempt's deadline passed, or a server shutting down sent its GOAWAY while
the request was on its way: the server never ran it, see the server README, "Shutdown"). Anything else (the memory or record-id budget, bad arguments,
...) fails at once: a retry cannot fix it.
"""
from __future__ import annotations

from typing import Optional

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from ._errors import SolusError

_DETAILS_KEY = "grpc-status-details-bin"
_BARE_RETRYABLE = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
)


def _code(error) -> grpc.StatusCode:
    code = getattr(error, "code", None)
    return code() if callable(code) else grpc.StatusCode.UNKNOWN


def _details(error) -> str:
    details = getattr(error, "details", None)
    return details() if callable(details) else str(error)


def rich_status(error) -> Optional[status_pb2.Status]:
    """The google.rpc.Status of a failed call (sync or asyncio), None when it has none."""
    if not callable(getattr(error, "trailing_metadata", None)):
        return None
    try:
        return rpc_status.from_call(error)
    except ValueError:
        # Code or message differ from the call's: still the server's details, read them as sent.
        for key, value in error.trailing_metadata() or ():
            if key == _DETAILS_KEY:
                return status_pb2.Status.FromString(value)
        return None


def retry_delay_s(error) -> Optional[float]:
    """None when ``error`` must not be retried; else the least wait the server asks for, in
    seconds (0.0 when it names none). The client adds its own backoff on top."""
    status = rich_status(error)
    if status is None:
        return 0.0 if _code(error) in _BARE_RETRYABLE else None
    for detail in status.details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            return max(0.0, info.retry_delay.seconds + info.retry_delay.nanos / 1e9)
    return None


def failure(rpc: str, error, attempts: int, retryable: bool) -> SolusError:
    """The SolusError for a call given up after ``attempts`` attempts ending in ``error``."""
    return SolusError(rpc, _code(error), _details(error), attempts, retryable)
