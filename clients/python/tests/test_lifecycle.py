"""Future lifecycle (issue 18, item 3): cancellation, callbacks, close, each test written the way
the fault was found. A test that would hang on a fault runs its body in a thread and fails
when it does not finish in time."""
import asyncio
import threading
import time
from concurrent.futures import Future

import pytest

from solus_client import AsyncSolusClient, ClientClosedError, SolusClient

CLIENT = "py-lifecycle"


def within(seconds, body):
    """Run ``body()`` on a daemon thread; fail the test (not hang it) when it does not finish."""
    outcome = {}

    def run():
        try:
            outcome["value"] = body()
        except BaseException as e:  # noqa: BLE001 - reported below
            outcome["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        pytest.fail(f"did not finish within {seconds} s (a future never completed, or a call blocked for good)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


async def sent(client, call, timeout_s=5):
    """Await an asyncio client's ``call`` with its batch flushed at once (no linger)."""
    task = asyncio.ensure_future(call)
    await asyncio.sleep(0)
    client.flush()
    return await asyncio.wait_for(task, timeout_s)


def test_cancelling_one_future_of_a_batch_affects_only_that_future(server, deduper_name):
    # Found as: one caller cancels its future, the rest of its batch never completes, the
    # batch's slots leak, and once max_pending_records leaked every call blocks.
    # 11 slots: the repeat holds one while it waits (issue 46), the 10 others fill the batch.
    with SolusClient(server.address, client_id=CLIENT, max_batch=10, max_pending_records=11,
                     linger_ms=3_600_000) as c:
        c.create_deduper(deduper_name, 100_000, 0.01, 3600)
        first = c.add_if_absent(deduper_name, "cancel-0")
        repeat = c.add_if_absent(deduper_name, "cancel-0")  # waits on `first`, not sent again
        rest = [c.add_if_absent(deduper_name, f"cancel-{i}") for i in range(1, 10)]
        assert first.cancel()
        c.flush()
        assert within(10, lambda: [f.result() for f in rest]) == [True] * 9
        assert within(10, repeat.result) is False
        # The cancelled entity was still sent (only its answer was discarded) ...
        absent = c.check_absence(deduper_name, "cancel-0")
        c.flush()
        assert within(10, absent.result) is False
        # ... and every slot came back: a second full round of max_pending_records goes through.
        def again():
            fs = [c.add_if_absent(deduper_name, f"again-{i}") for i in range(10)]
            return [f.result() for f in fs]
        assert within(10, again) == [True] * 10


def test_a_completion_callback_may_call_the_client_again(server, deduper_name):
    # KAFKA-10790's shape: a callback that calls the client ran before its batch gave its slots
    # back, so with one sender thread and a full pending bound it waited on itself for good.
    # The callbacks also raise: a failing callback must not cost the batch its slots.
    with SolusClient(server.address, client_id=CLIENT, max_in_flight=1, max_batch=2, max_pending_records=2,
                     linger_ms=1) as c:
        c.create_deduper(deduper_name, 100_000, 0.01, 3600)
        chained, lock = [], threading.Lock()

        def call_again(_, i):
            f = c.add_if_absent(deduper_name, f"chained-{i}")
            with lock:
                chained.append(f)
            raise RuntimeError("a callback that fails (on purpose, by the test)")

        def run():
            firsts = []
            for i in range(20):
                f = c.add_if_absent(deduper_name, f"first-{i}")
                f.add_done_callback(lambda f, i=i: call_again(f, i))
                firsts.append(f)
            answers = [f.result() for f in firsts]
            while True:
                with lock:
                    if len(chained) == 20:
                        break
                time.sleep(0.01)
            c.flush()
            return answers, [f.result() for f in chained]
        assert within(15, run) == ([True] * 20, [True] * 20)


def test_close_from_a_completion_callback_is_refused(server, deduper_name):
    # It would wait for the answers of the sender thread it runs on (the old client hung).
    with SolusClient(server.address, client_id=CLIENT, max_in_flight=1, linger_ms=3_600_000) as c:
        c.create_deduper(deduper_name, 100_000, 0.01, 3600)
        refused = Future()

        def close_inside(_):
            try:
                c.close()
                refused.set_result("closed")
            except RuntimeError as e:
                refused.set_result(str(e))
        f = c.add_if_absent(deduper_name, "k")
        f.add_done_callback(close_inside)
        c.flush()
        assert "completion callback" in within(10, refused.result)
        assert c.add_if_absent_many(deduper_name, ["k", "l"]) == [False, True]  # still open


def test_close_without_a_timeout_waits_for_every_answer(server, deduper_name):
    # The old close() did not wait at all (its slot wait returned at once) and cancelled the
    # batches still queued for a sender thread: their futures stayed pending forever.
    c = SolusClient(server.address, client_id=CLIENT, max_batch=10, max_in_flight=1, linger_ms=3_600_000)
    c.create_deduper(deduper_name, 100_000, 0.01, 3600)
    fs = [c.add_if_absent(deduper_name, f"closing-{i}") for i in range(55)]
    c.close()
    assert [f.done() for f in fs] == [True] * 55
    assert [f.result() for f in fs] == [True] * 55


def test_close_with_a_timeout_completes_every_future_when_the_server_is_paused(own_server):
    # Found as: close(timeout) returned with queued futures pending forever.
    c = SolusClient(own_server.address, client_id=CLIENT, max_batch=10, max_in_flight=2, max_pending_records=100,
                    linger_ms=3_600_000, deadline_s=30)
    c.create_deduper("paused", 100_000, 0.01, 3600)
    with own_server.paused():
        # 4 full batches: 2 in flight on the stopped server, 2 queued behind them; 5 in a partial batch.
        fs = [c.add_if_absent("paused", f"paused-{i}") for i in range(45)]
        start = time.monotonic()
        c.close(timeout_s=1)
        took = time.monotonic() - start
        assert [f.done() for f in fs] == [True] * 45
        assert took < 2.0
        assert all(isinstance(f.exception(), ClientClosedError) for f in fs)
        with pytest.raises(ClientClosedError):
            c.add_if_absent("paused", "after-close")


def test_asyncio_close_with_a_timeout_ends_every_call_when_the_server_is_paused(own_server):
    async def main():
        c = AsyncSolusClient(own_server.address, client_id=CLIENT, max_batch=10, max_in_flight=2,
                             max_pending_records=100, linger_ms=3_600_000, deadline_s=30)
        await c.create_deduper("paused", 100_000, 0.01, 3600)
        with own_server.paused():
            calls = [asyncio.ensure_future(c.add_if_absent("paused", f"paused-{i}")) for i in range(45)]
            await asyncio.sleep(0.05)  # queued: 4 batches sent, 5 records lingering
            start = time.monotonic()
            await asyncio.wait_for(c.close(timeout_s=1), 5)
            took = time.monotonic() - start
            await asyncio.sleep(0)  # the calls' tasks see their records' outcome
            assert [t.done() for t in calls] == [True] * 45
            assert took < 2.0
            assert all(isinstance(t.exception(), ClientClosedError) for t in calls)
    asyncio.run(main())


def test_asyncio_call_cancelled_while_waiting_for_room_leaves_no_state(server, deduper_name):
    # Found as: the cancelled call stayed registered as "unanswered", and every later call of
    # that entity waited on it forever.
    async def main():
        async with AsyncSolusClient(server.address, client_id=CLIENT, max_pending_records=1,
                                    linger_ms=3_600_000) as c:
            await c.create_deduper(deduper_name, 100_000, 0.01, 3600)
            holder = asyncio.ensure_future(c.add_if_absent(deduper_name, "holds-the-slot"))
            await asyncio.sleep(0.01)
            waiting = asyncio.ensure_future(c.add_if_absent(deduper_name, "e"))
            await asyncio.sleep(0.01)  # blocked on backpressure
            waiting.cancel()
            c.flush()
            assert await asyncio.wait_for(holder, 5) is True
            assert await asyncio.wait_for(c.add_if_absent_many(deduper_name, ["e"]), 5) == [True]
    asyncio.run(main())


def test_asyncio_cancelling_a_call_does_not_fail_its_waiting_repeat(server, deduper_name):
    # The repeat of an unanswered entity waits for the first call's record; cancelling the first
    # caller cancelled that record too, and the repeat failed with CancelledError.
    async def main():
        async with AsyncSolusClient(server.address, client_id=CLIENT, linger_ms=3_600_000) as c:
            await c.create_deduper(deduper_name, 100_000, 0.01, 3600)
            first = asyncio.ensure_future(c.add_if_absent(deduper_name, "x"))
            await asyncio.sleep(0.01)
            repeat = asyncio.ensure_future(c.add_if_absent(deduper_name, "x"))
            await asyncio.sleep(0.01)
            first.cancel()
            await asyncio.sleep(0)
            c.flush()
            assert await asyncio.wait_for(repeat, 5) is False
            assert first.cancelled()
            assert await sent(c, c.check_absence(deduper_name, "x")) is False  # sent all the same
    asyncio.run(main())
