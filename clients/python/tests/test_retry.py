"""Retry only what the server marks retryable (issue 18, item 4)."""
import asyncio
import threading
import time

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from solus_client import AsyncSolusClient, SolusClient, SolusError
from solus_client._retry import retry_delay_s

CLIENT = "py-retry"
TINY_BUDGET = {"SOLUS__STORAGE__EMBEDDED__MAX_MEMORY_MIB": "1"}


class Refusal(grpc.RpcError, grpc.Call, grpc.Future):
    """A failed call as grpcio hands it over, with a google.rpc.Status in its trailer
    (``retry_delay_s``: a RetryInfo detail; ``detail``: another one) or none (``bare``)."""

    def __init__(self, code, retry_delay_s=None, detail=None, bare=False, message="refused by the test"):
        self._code, self._message = code, message
        status = status_pb2.Status(code=code.value[0], message=message)
        if retry_delay_s is not None:
            info = error_details_pb2.RetryInfo()
            info.retry_delay.seconds = int(retry_delay_s)
            info.retry_delay.nanos = round((retry_delay_s % 1) * 1e9)
            status.details.add().Pack(info)
        if detail is not None:
            status.details.add().Pack(detail)
        self._trailer = () if bare else (("grpc-status-details-bin", status.SerializeToString()),)

    def code(self):
        return self._code

    def details(self):
        return self._message

    def trailing_metadata(self):
        return self._trailer

    def initial_metadata(self):
        return ()

    def result(self, timeout=None):
        raise self

    def exception(self, timeout=None):
        return self

    def traceback(self, timeout=None):
        return None

    def add_done_callback(self, fn):
        fn(self)

    def cancel(self):
        return False

    def cancelled(self):
        return False

    def running(self):
        return False

    def done(self):
        return True

    def is_active(self):
        return False

    def time_remaining(self):
        return None

    def add_callback(self, callback):
        return False


def test_retryable_is_what_the_status_says():
    budget = error_details_pb2.ErrorInfo(reason="MEMORY_BUDGET")
    C = grpc.StatusCode
    assert retry_delay_s(Refusal(C.RESOURCE_EXHAUSTED, retry_delay_s=1.25)) == pytest.approx(1.25)
    assert retry_delay_s(Refusal(C.UNAVAILABLE, retry_delay_s=0)) == 0.0
    assert retry_delay_s(Refusal(C.RESOURCE_EXHAUSTED)) is None           # details, no RetryInfo
    assert retry_delay_s(Refusal(C.RESOURCE_EXHAUSTED, bare=True)) is None
    assert retry_delay_s(Refusal(C.RESOURCE_EXHAUSTED, detail=budget)) is None
    assert retry_delay_s(Refusal(C.UNAVAILABLE, detail=budget)) is None  # the server said: not this one
    assert retry_delay_s(Refusal(C.UNAVAILABLE, bare=True)) == 0.0       # transport failure
    assert retry_delay_s(Refusal(C.DEADLINE_EXCEEDED, bare=True)) == 0.0  # one attempt's deadline
    assert retry_delay_s(Refusal(C.CANCELLED, bare=True)) == 0.0          # raced a GOAWAY: never run
    assert retry_delay_s(Refusal(C.CANCELLED, detail=budget)) is None
    for code in (C.INVALID_ARGUMENT, C.NOT_FOUND, C.FAILED_PRECONDITION, C.INTERNAL):
        assert retry_delay_s(Refusal(code, bare=True)) is None, code


class RefuseFirst(grpc.UnaryUnaryClientInterceptor):
    """Answers the first call of ``rpc`` with ``refusal`` without sending it."""

    def __init__(self, rpc, refusal):
        self.rpc, self.refusal, self.refused = rpc, refusal, 0
        self._lock = threading.Lock()

    def intercept_unary_unary(self, continuation, details, request):
        with self._lock:
            refuse = details.method.endswith("/" + self.rpc) and self.refused == 0
            self.refused += refuse
        return self.refusal if refuse else continuation(details, request)


def test_the_client_waits_at_least_the_servers_retry_delay(server, deduper_name):
    refuse = RefuseFirst("AddIfAbsent", Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, retry_delay_s=0.4))
    with SolusClient(server.address, client_id=CLIENT, interceptors=[refuse], initial_backoff_ms=1,
                     max_backoff_ms=2) as c:
        c.create_deduper(deduper_name, 100_000, 0.01, 3600)
        start = time.monotonic()
        assert c.add_if_absent_many(deduper_name, ["w"]) == [True]
        assert time.monotonic() - start >= 0.4
        assert refuse.refused == 1


def test_a_budget_refused_create_fails_after_one_attempt(server_with):
    # Found as: RESOURCE_EXHAUSTED from the memory budget (freed only by a delete) was retried
    # 10 times over 13.5 s, like the transient concurrency limit.
    s = server_with(TINY_BUDGET)
    with SolusClient(s.address, client_id=CLIENT) as c:
        start = time.monotonic()
        with pytest.raises(SolusError) as e:
            c.create_deduper("too-big", 10_000_000, 0.01, 3600)
        took = time.monotonic() - start
    assert (e.value.code, e.value.attempts) == (grpc.StatusCode.RESOURCE_EXHAUSTED, 1)
    assert took < 1.0
    assert not e.value.retryable
    assert s.requests("CreateDeduper", "RESOURCE_EXHAUSTED") == 1

    async def main():
        async with AsyncSolusClient(s.address, client_id=CLIENT) as c:
            with pytest.raises(SolusError) as e:
                await c.create_deduper("too-big", 10_000_000, 0.01, 3600)
            return e.value
    err = asyncio.run(main())
    assert (err.code, err.attempts) == (grpc.StatusCode.RESOURCE_EXHAUSTED, 1)
    assert s.requests("CreateDeduper", "RESOURCE_EXHAUSTED") == 2


def test_a_transient_refusal_is_retried_until_all_succeed(server_with):
    # limits.max_concurrent_requests = 1 against 8 requests in flight: the server refuses with
    # RESOURCE_EXHAUSTED carrying RetryInfo, and every refused batch is retried.
    s = server_with({"SOLUS__LIMITS__MAX_CONCURRENT_REQUESTS": "1"})
    keys = [f"busy-{i}" for i in range(2000)]
    with SolusClient(s.address, client_id=CLIENT, max_batch=20, max_in_flight=8, max_pending_records=2000,
                     initial_backoff_ms=5, max_backoff_ms=50, max_attempts=100) as c:
        c.create_deduper("busy", 100_000, 0.01, 3600)
        assert c.add_if_absent_many("busy", keys) == [True] * 2000

    async def main():
        async with AsyncSolusClient(s.address, client_id=CLIENT, max_batch=20, max_in_flight=8,
                                    max_pending_records=2000, initial_backoff_ms=5, max_backoff_ms=50,
                                    max_attempts=100) as c:
            return await c.add_if_absent_many("busy", keys + [f"busy-aio-{i}" for i in range(1000)])
    assert asyncio.run(main()) == [False] * 2000 + [True] * 1000
    assert s.requests("AddIfAbsent", "RESOURCE_EXHAUSTED") > 0  # refusals happened, and were retried


def test_a_budget_refused_add_fails_after_one_attempt(server_with):
    # The record-id budget (storage.embedded.max_record_memory_mib = 0: no room for any) refuses
    # an AddIfAbsent with a new record id: final, not retried.
    s = server_with({"SOLUS__STORAGE__EMBEDDED__MAX_RECORD_MEMORY_MIB": "0"})
    with SolusClient(s.address, client_id=CLIENT, linger_ms=1) as c:
        c.create_deduper("records", 100_000, 0.01, 3600)
        start = time.monotonic()
        with pytest.raises(SolusError) as e:
            c.add_if_absent("records", "e", record_id="topic/0/1").result(10)
        took = time.monotonic() - start
        assert c.add_if_absent("records", "no-record-id").result(10) is True  # the budget is for record ids only
    assert (e.value.code, e.value.attempts) == (grpc.StatusCode.RESOURCE_EXHAUSTED, 1)
    assert "max_record_memory_mib" in e.value.details
    assert took < 1.0

    async def main():
        async with AsyncSolusClient(s.address, client_id=CLIENT, linger_ms=1) as c:
            with pytest.raises(SolusError) as e:
                await c.add_if_absent("records", "f", record_id="topic/0/2")
            return e.value
    err = asyncio.run(main())
    assert (err.code, err.attempts) == (grpc.StatusCode.RESOURCE_EXHAUSTED, 1)
    assert s.requests("AddIfAbsent", "RESOURCE_EXHAUSTED") == 2
