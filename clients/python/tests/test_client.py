import asyncio
import threading

import grpc
import pytest

from solus_client import AsyncSolusClient, SolusClient, SolusError

from failed_call import FailedCall

CLIENT = "py-test"


class DropFirstAnswer(grpc.UnaryUnaryClientInterceptor):
    """Lets the first AddIfAbsent reach the server and run, then throws its answer away and
    reports UNAVAILABLE: an answer lost on the way back."""

    def __init__(self):
        self.dropped = 0
        self._lock = threading.Lock()

    def intercept_unary_unary(self, continuation, details, request):
        call = continuation(details, request)
        with self._lock:
            drop = details.method.endswith("/AddIfAbsent") and self.dropped == 0
            if drop:
                self.dropped += 1
        if not drop:
            return call
        call.result()  # executed by the server
        return FailedCall(grpc.StatusCode.UNAVAILABLE, "answer dropped on purpose by the test")


class AioDropFirstAnswer(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self):
        self.dropped = 0

    async def intercept_unary_unary(self, continuation, details, request):
        call = await continuation(details, request)
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        if method.endswith("/AddIfAbsent") and self.dropped == 0:
            self.dropped += 1
            await call  # executed by the server
            raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                       "answer dropped on purpose by the test")
        return call


def test_records_are_coalesced_into_full_batches(server, deduper_name):
    with SolusClient(server.address, client_id=CLIENT, max_batch=100, linger_ms=3_600_000) as c:
        c.create_deduper(deduper_name, 100_000, 0.01, 3600)
        before = server.requests("AddIfAbsent")
        fs = [c.add_if_absent(deduper_name, f"batch-{i}") for i in range(1000)]
        assert [f.result() for f in fs] == [True] * 1000
        assert server.requests("AddIfAbsent") - before == 10


def test_linger_sends_a_partial_batch(server, deduper_name):
    with SolusClient(server.address, client_id=CLIENT, linger_ms=20) as c:
        c.create_deduper(deduper_name, 100_000, 0.01, 3600)
        before = server.requests("CheckAbsence")
        fs = [c.check_absence(deduper_name, f"linger-{i}") for i in range(7)]
        assert [f.result() for f in fs] == [True] * 7
        assert server.requests("CheckAbsence") - before == 1


def test_order_and_repeats_within_and_across_batches(server, deduper_name):
    with SolusClient(server.address, client_id=CLIENT, max_batch=4, max_in_flight=4, linger_ms=2) as c:
        c.create_deduper(deduper_name, 100_000, 0.01, 3600)
        keys = ["a", "b", "a", "c", "b", "d", "a", "e", "f", "c"]
        assert c.add_if_absent_many(deduper_name, keys) == [True, True, False, True, False, True, False, True, True,
                                                            False]
        got = c.add_if_absent_many(deduper_name, [f"race-{k}" for _ in range(4) for k in range(300)])
        assert got == [True] * 300 + [False] * 900
        fs = [c.check_absence(deduper_name, k) for k in ["f", "never", b"a"]]
        c.flush()
        assert [f.result() for f in fs] == [False, True, False]


def test_admin_and_refusals(server, deduper_name):
    with SolusClient(server.address, client_id=CLIENT) as c:
        d = c.create_deduper(deduper_name, 100_000, 0.01, 3600)
        assert (d.name, d.expiry_seconds, d.active) == (deduper_name, 3600, True)
        assert c.get_deduper(deduper_name).expected_insertions == 100_000
        assert deduper_name in [x.name for x in c.list_dedupers()]
        off = c.update_deduper(deduper_name, active=False, expiry_seconds=1800)
        assert (off.active, off.expiry_seconds) == (False, 1800)
        with pytest.raises(SolusError) as e:
            c.add_if_absent(deduper_name, "x").result()
        assert (e.value.code, e.value.attempts) == (grpc.StatusCode.FAILED_PRECONDITION, 1)
        assert c.update_deduper(deduper_name, active=True).active
        with pytest.raises(SolusError) as e:
            c.create_deduper(deduper_name, 10)
        assert e.value.code == grpc.StatusCode.ALREADY_EXISTS
        with pytest.raises(SolusError) as e:
            c.add_if_absent("no-such-deduper", "x").result()
        assert e.value.code == grpc.StatusCode.NOT_FOUND
        with pytest.raises(SolusError) as e:
            c.add_if_absent(deduper_name, b"").result()
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_a_dropped_answer_is_retried_with_the_same_request_id(server, deduper_name):
    drop = DropFirstAnswer()
    with SolusClient(server.address, client_id=CLIENT, interceptors=[drop], linger_ms=3_600_000,
                     initial_backoff_ms=10, max_backoff_ms=50) as c:
        c.create_deduper(deduper_name, 100_000, 0.01, 3600)
        before = server.requests("AddIfAbsent")
        assert c.add_if_absent_many(deduper_name, [f"lost-{i}" for i in range(20)]) == [True] * 20
        assert drop.dropped == 1
        assert server.requests("AddIfAbsent") - before == 2  # executed, then answered again
        assert c.add_if_absent_many(deduper_name, ["lost-3"]) == [False]


def test_the_retry_budget_ends_in_a_failure(own_server):
    address = own_server.address
    own_server.stop()
    with SolusClient(address, client_id=CLIENT, max_attempts=3, initial_backoff_ms=5, max_backoff_ms=20) as c:
        with pytest.raises(SolusError) as e:
            c.add_if_absent("d", "x").result()
        assert (e.value.code, e.value.attempts) == (grpc.StatusCode.UNAVAILABLE, 3)


def test_retries_across_a_restart_never_turn_new_into_present(own_server):
    with SolusClient(own_server.address, client_id=CLIENT, max_batch=100, max_pending_records=10_000,
                     max_attempts=100, initial_backoff_ms=20, max_backoff_ms=300) as c:
        c.create_deduper("restart", 100_000, 0.01, 3600)
        fs = [c.add_if_absent("restart", f"restart-{i}") for i in range(3000)]
        c.flush()
        own_server.stop()
        fs += [c.add_if_absent("restart", f"restart-{i}") for i in range(3000, 6000)]
        c.flush()
        own_server.start()
        assert sum(1 for f in fs if not f.result()) == 0
        assert not any(c.add_if_absent_many("restart", [f"restart-{i}" for i in range(6000)]))


def test_asyncio_client(server, deduper_name):
    async def main():
        drop = AioDropFirstAnswer()
        async with AsyncSolusClient(server.address, client_id=CLIENT, max_batch=4, linger_ms=2,
                                    interceptors=[drop], initial_backoff_ms=10, max_backoff_ms=50) as c:
            await c.create_deduper(deduper_name, 100_000, 0.01, 3600)
            before = server.requests("AddIfAbsent")
            got = await c.add_if_absent_many(deduper_name, ["a", "b", "a", "c", "b", "d", "a", "e"])
            assert got == [True, True, False, True, False, True, False, True]
            assert drop.dropped == 1
            assert server.requests("AddIfAbsent") - before == 3  # 2 batches, the first answered twice
            assert await c.check_absence(deduper_name, "never")
            assert not await c.check_absence(deduper_name, "e")
            await c.add(deduper_name, "added")
            assert not await c.check_absence(deduper_name, "added")
            assert (await c.get_deduper(deduper_name)).name == deduper_name
            with pytest.raises(SolusError) as e:
                await c.add_if_absent("no-such-deduper", "x")
            assert e.value.code == grpc.StatusCode.NOT_FOUND
    asyncio.run(main())
