"""Issue 46: a hot key, a fork, a GOAWAY, a held group, a waiting callback and an exit without
close(), each tried the way the outside trial found it. A test that would hang on a fault runs
its body with a time limit and fails instead."""
import asyncio
import os
import subprocess
import sys
import textwrap
import threading
import time

import grpc
import pytest

from solus_client import AsyncSolusClient, CallbackWaitError, ForkedClientError, SolusClient, SolusError
from solus_client._pb import deduper_pb2 as pb
from solus_client._pb import deduper_pb2_grpc as pb_grpc
from solus_client._retry import retry_delay_s

from failed_call import FailedCall
from goaway_proxy import GoawayProxy
from test_lifecycle import within

CLIENT = "py-issue46"


# ---------------------------------------------------------------- class 1: a hot key in a stall

def test_repeats_of_a_hot_entity_wait_within_the_pending_bound_while_the_server_is_stalled(own_server):
    # Found as: Solus stalled, one hot entity, a caller calling add_if_absent in a loop - every
    # repeat of the unanswered entity returned at once as one more dependent of the first call
    # (232,498 calls, +432 MiB). Now a waiting repeat holds a slot: the caller blocks at the bound.
    bound = 100
    c = SolusClient(own_server.address, client_id=CLIENT, max_pending_records=bound, max_in_flight=2,
                    linger_ms=1, deadline_s=60)
    c.create_deduper("hot", 100_000, 0.01, 3600)
    futures, stop, cap = [], threading.Event(), 20_000

    def caller():
        while not stop.is_set() and len(futures) < cap:
            futures.append(c.add_if_absent("hot", "the-hot-key"))
    t = threading.Thread(target=caller, daemon=True)
    try:
        with own_server.paused():
            t.start()
            time.sleep(1.5)
            returned_while_stalled = len(futures)
            assert returned_while_stalled == bound, (
                f"{returned_while_stalled} calls of one entity returned while the server was stalled; "
                f"max_pending_records = {bound}")
            stop.set()
        t.join(30)
        assert not t.is_alive(), "the blocked call did not return after the server resumed"
        answers = within(30, lambda: [f.result() for f in futures])
        assert len(answers) == bound + 1  # the call blocked at the bound went through on resume
        assert answers == [True] + [False] * bound
    finally:
        stop.set()
        c.close(timeout_s=5)


# ---------------------------------------------------------------- class 2: fork

def _in_child(body, timeout_s=20):
    """fork(); run ``body()`` in the child and hand back what it returned (repr) or raised
    (``"raised <Type>: msg"``); a child still running after ``timeout_s`` is killed and fails the test."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(r)
        try:
            out = "returned " + repr(body())
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            out = f"raised {type(e).__name__}: {e}"
        os.write(w, out.encode())
        os._exit(0)
    os.close(w)
    until = time.monotonic() + timeout_s
    while time.monotonic() < until:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(r)
        pytest.fail(f"the forked child did not finish within {timeout_s} s (a call's future never completed)")
    with os.fdopen(r, "rb") as f:
        return f.read().decode()


def test_a_client_inherited_through_fork_rebuilds_itself_in_the_child(server, deduper_name):
    # Found as: a client made before fork() (multiprocessing, pre-fork workers), used in the child:
    # its sender and linger threads are gone there, the call's future never completed, nothing raised.
    c = SolusClient(server.address, client_id=CLIENT, linger_ms=1)
    try:
        c.create_deduper(deduper_name, 100_000, 0.01, 3600)
        assert c.add_if_absent(deduper_name, "before-fork").result(10) is True

        def child():
            answers = c.add_if_absent(deduper_name, "in-child").result(10), \
                c.add_if_absent(deduper_name, "before-fork").result(10)
            c.close()
            return answers
        assert _in_child(child) == "returned (True, False)"
        # The parent's client is untouched by the child's rebuild, and sees what the child stored.
        assert c.add_if_absent(deduper_name, "in-child").result(10) is False
        assert c.add_if_absent(deduper_name, "after-fork").result(10) is True
    finally:
        c.close()


def test_a_future_made_before_fork_fails_at_once_in_the_child(server, deduper_name):
    # The parent's unanswered call is the parent's: the child must not wait on it for ever.
    with SolusClient(server.address, client_id=CLIENT, linger_ms=3_600_000) as c:
        c.create_deduper(deduper_name, 100_000, 0.01, 3600)
        pending = c.add_if_absent(deduper_name, "queued-in-parent")

        def child():
            start = time.monotonic()
            try:
                pending.result(10)
            except ForkedClientError as e:
                return round(time.monotonic() - start), "forked" in str(e)
        assert _in_child(child) == "returned (0, True)"
        c.flush()
        assert pending.result(10) is True  # the parent still sends it and gets its answer


def test_a_client_on_a_given_channel_fails_at_once_in_a_forked_child(server, deduper_name):
    channel = grpc.insecure_channel(server.address)
    c = SolusClient(server.address, client_id=CLIENT, channel=channel, linger_ms=1)
    try:
        c.create_deduper(deduper_name, 100_000, 0.01, 3600)
        out = _in_child(lambda: c.add_if_absent(deduper_name, "x").result(10), timeout_s=10)
        assert out.startswith("raised ForkedClientError: ") and "channel given by the caller" in out, out
        assert c.add_if_absent(deduper_name, "x").result(10) is True  # the parent's works
    finally:
        c.close()
        channel.close()


def test_an_asyncio_client_fails_at_once_in_a_forked_child(server, deduper_name):
    async def made_and_used():
        c = AsyncSolusClient(server.address, client_id=CLIENT, linger_ms=1)
        await c.create_deduper(deduper_name, 100_000, 0.01, 3600)
        assert await c.add_if_absent(deduper_name, "parent") is True
        return c
    c = asyncio.run(made_and_used())  # left open: its channel belongs to that (finished) loop
    out = _in_child(lambda: asyncio.run(asyncio.wait_for(c.add_if_absent(deduper_name, "child"), 5)), timeout_s=15)
    assert out.startswith("raised ForkedClientError: ") and "Make a new client in this process" in out, out


# ---------------------------------------------------------------- class 4: GOAWAY without trailers

def test_a_goaway_enhance_your_calm_without_trailers_is_retried(server, deduper_name):
    # Found as (Java): on resume from a stall hyper counted too many reset streams and answered
    # GOAWAY ENHANCE_YOUR_CALM "too_many_resets" with no trailers. What Python's grpc surfaces:
    with SolusClient(server.address, client_id=CLIENT) as c:
        c.create_deduper(deduper_name, 100_000, 0.01, 3600)
    proxy = GoawayProxy(server.port)
    channel = grpc.insecure_channel(proxy.address)
    try:
        with pytest.raises(grpc.RpcError) as raised:
            pb_grpc.DeduperServiceStub(channel).AddIfAbsent(
                pb.AddIfAbsentRequest(client_id=CLIENT, deduper=deduper_name, entities=[b"raw"]), timeout=10)
        e = raised.value
        assert proxy.goaways_sent == 1
        assert e.code() == grpc.StatusCode.UNAVAILABLE
        assert "GOAWAY received; Error code: 11; Debug Text: too_many_resets" in e.details()
        assert tuple(e.trailing_metadata() or ()) == ()
        assert retry_delay_s(e) == 0.0  # a bare UNAVAILABLE: the client's rule retries it
    finally:
        channel.close()
        proxy.close()
    # With the request not taken (last stream 0), grpc core itself retries it on a new connection.
    proxy = GoawayProxy(server.port, last_stream=False)
    channel = grpc.insecure_channel(proxy.address)
    try:
        got = pb_grpc.DeduperServiceStub(channel).AddIfAbsent(
            pb.AddIfAbsentRequest(client_id=CLIENT, deduper=deduper_name, entities=[b"raw"]), timeout=10)
        assert list(got.absent) == [True]
        assert (proxy.goaways_sent, proxy.piped) == (1, 1)
    finally:
        channel.close()
        proxy.close()

    # ... and the client rides it out: the GOAWAYed attempt is retried on a new connection.
    proxy = GoawayProxy(server.port)
    before = server.requests("AddIfAbsent")
    try:
        with SolusClient(proxy.address, client_id=CLIENT, linger_ms=1, initial_backoff_ms=1) as c:
            assert c.add_if_absent(deduper_name, "goaway").result(10) is True
        assert (proxy.goaways_sent, proxy.piped) == (1, 1)
        assert server.requests("AddIfAbsent") == before + 1  # the GOAWAYed attempt never reached Solus
    finally:
        proxy.close()


# ---------------------------------------------------------------- class 5: a held group after a failure

class FailFirstWhenReleased(grpc.UnaryUnaryClientInterceptor):
    """Holds the first AddIfAbsent until ``release`` is set, then fails it without sending it."""

    def __init__(self):
        self.release = threading.Event()
        self.sent = []
        self._first = True
        self._lock = threading.Lock()

    def intercept_unary_unary(self, continuation, details, request):
        if not details.method.endswith("/AddIfAbsent"):
            return continuation(details, request)
        with self._lock:
            first, self._first = self._first, False
        if first:
            self.release.wait(10)
            return FailedCall(grpc.StatusCode.INVALID_ARGUMENT, "failed unsent by the test")
        with self._lock:
            self.sent.append(list(request.record_ids))
        return continuation(details, request)


def test_a_held_group_after_a_failed_first_call_answers_one_record_new(server, deduper_name):
    # Found as (Java): calls of one entity with other record ids are held while an earlier call
    # is unanswered; when that call failed unsent, the group went out in one request and every
    # record was answered new. Python re-sends the held records one at a time.
    gate = FailFirstWhenReleased()
    with SolusClient(server.address, client_id=CLIENT, interceptors=[gate], linger_ms=1, max_attempts=1) as c:
        c.create_deduper(deduper_name, 100_000, 0.01, 3600)
        first = c.add_if_absent(deduper_name, "held", record_id="src/0/0")
        time.sleep(0.2)  # the first call is on its way (held by the interceptor)
        group = [c.add_if_absent(deduper_name, "held", record_id=f"src/0/{i}") for i in range(1, 6)]
        gate.release.set()
        with pytest.raises(SolusError) as failed:
            first.result(10)
        assert "failed unsent by the test" in str(failed.value)
        answers = within(20, lambda: [f.result() for f in group])
    assert answers == [True, False, False, False, False]
    assert gate.sent == [[b"src/0/%d" % i] for i in range(1, 6)]  # one record per request, in order


# ---------------------------------------------------------------- class 6: a callback that waits

def test_a_callback_waiting_for_another_answer_of_the_client_fails_at_once(server, deduper_name):
    # Found as: a done-callback that waits for another answer of the same client hung until its
    # timeout: the only sender thread is the one waiting.
    with SolusClient(server.address, client_id=CLIENT, max_in_flight=1, linger_ms=1) as c:
        c.create_deduper(deduper_name, 100_000, 0.01, 3600)
        seen, done = {}, threading.Event()

        def waits(_):
            second = c.add_if_absent(deduper_name, "second")
            seen["second"] = second
            start = time.monotonic()
            try:
                second.result(timeout=5)
                seen["outcome"] = "answered"
            except BaseException as e:  # noqa: BLE001 - reported to the test
                seen["outcome"] = e
            seen["took"] = time.monotonic() - start
            done.set()
        c.add_if_absent(deduper_name, "first").add_done_callback(waits)
        assert done.wait(15)
        assert isinstance(seen["outcome"], CallbackWaitError), seen["outcome"]
        assert "completion callback" in str(seen["outcome"])
        assert seen["took"] < 0.5
        assert seen["second"].result(10) is True  # the call itself went through
        # A wait on a future already answered is fine inside a callback.
        got = {}
        answered = c.add_if_absent(deduper_name, "third")
        assert answered.result(10) is True
        c.add_if_absent(deduper_name, "fourth").add_done_callback(lambda _: got.setdefault("v", answered.result()))
        within(10, lambda: c.add_if_absent_many(deduper_name, ["fifth"]))
        assert got == {"v": True}


# ---------------------------------------------------------------- class 7: exit without close()

EXIT_SCRIPT = textwrap.dedent("""
    import sys
    from solus_client import SolusClient
    address, deduper, prefix = sys.argv[1:4]
    c = SolusClient(address, client_id=%r, max_batch=100, linger_ms=3_600_000, deadline_s=30)
    futures = [c.add_if_absent(deduper, f"{prefix}-{i}") for i in range(950)]
    print("submitted", len(futures), flush=True)
    # no close(): the interpreter exits (exit_timeout_s: the default, 5 s)
""" % CLIENT)


def _exit_without_close(address, deduper, prefix, timeout_s):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    start = time.monotonic()
    try:
        out = subprocess.run([sys.executable, "-c", EXIT_SCRIPT, address, deduper, prefix], env=env,
                             capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the interpreter's exit blocked for more than {timeout_s} s")
    return out, time.monotonic() - start


def test_exit_without_close_sends_the_last_partly_filled_batch(server, deduper_name):
    # Found as: 950 calls, batches of 100, exit without close(): 900 stored, the last 50 dropped silently.
    with SolusClient(server.address, client_id=CLIENT, linger_ms=1) as c:
        c.create_deduper(deduper_name, 100_000, 0.01, 3600)
        out, _ = _exit_without_close(server.address, deduper_name, "exit", 60)
        assert out.returncode == 0 and "submitted 950" in out.stdout, out.stderr
        assert "SolusExitWarning" not in out.stderr, out.stderr
        present = [f.result(10) for f in [c.check_absence(deduper_name, f"exit-{i}") for i in range(950)]]
        assert present.count(False) == 950  # every one stored (False = present)


def test_exit_without_close_with_the_server_stalled_is_bounded_and_warns(own_server):
    # Found as: the same exit with Solus stalled blocked 42 s, stored nothing, said nothing.
    with SolusClient(own_server.address, client_id=CLIENT, linger_ms=1) as c:
        c.create_deduper("stalled", 100_000, 0.01, 3600)
    with own_server.paused():
        out, took = _exit_without_close(own_server.address, "stalled", "stalled", 25)
    print(f"exit took {took:.2f} s")
    assert out.returncode == 0 and "submitted 950" in out.stdout, out.stderr
    assert took < 5 + 1 + 3, f"exit took {took:.1f} s with exit_timeout_s = 5 (the default)"
    assert "SolusExitWarning" in out.stderr and "950 call(s) still unanswered" in out.stderr, out.stderr
