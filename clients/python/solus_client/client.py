"""Thread-based batching client: ``concurrent.futures.Future`` per entity."""
from __future__ import annotations

import atexit
import heapq
import itertools
import os
import threading
import time
import warnings
import weakref
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from typing import Dict, Iterable, List, Optional, Tuple

import grpc

from ._common import (ADD, ADD_IF_ABSENT, CHECK_ABSENCE, Settings, answers, build_request, check_record_id,
                      create_request, new_request_id, update_request)
from ._errors import CallbackWaitError, ClientClosedError, ForkedClientError, SolusError
from ._pb import deduper_pb2 as pb
from ._pb import deduper_pb2_grpc as pb_grpc
from ._records import DEFER, SAME, Batch, Record, relation
from ._retry import failure, retry_delay_s

_AFTER_ABORT_WAIT_S = 1.0  # how long close() waits for completions already running elsewhere


class SolusExitWarning(UserWarning):
    """The interpreter exited with a :class:`SolusClient` never closed, and some of its records
    were still unanswered ``exit_timeout_s`` after the exit hook sent them: their futures failed
    with :class:`ClientClosedError` (the server may or may not have executed them)."""


# Open clients of this process: flushed when the interpreter exits, reset in a forked child.
_live: "weakref.WeakSet[SolusClient]" = weakref.WeakSet()
_live_lock = threading.Lock()


def _flush_at_exit() -> None:
    with _live_lock:
        clients = list(_live)
    for client in clients:
        try:
            client._close_at_exit()
        except Exception as e:  # noqa: BLE001 - one client's failure must not keep the others from closing
            warnings.warn(f"closing a SolusClient at exit failed: {e!r}", SolusExitWarning, stacklevel=1)


def _after_fork_in_child() -> None:
    # Only the forking thread exists in the child: a lock another thread held at the fork stays
    # held for good, so every lock of a client is made anew before anything else runs.
    global _live_lock
    _live_lock = threading.Lock()
    for client in list(_live):
        client._forked()


# threading's exit hooks run before the interpreter joins non-daemon threads, and the last
# registered runs first: this one runs before concurrent.futures' own (registered when it was
# imported above), which joins the sender threads and refuses new work from then on.
_register = getattr(threading, "_register_atexit", None)
if _register is not None:
    _register(_flush_at_exit)
else:  # pragma: no cover - CPython has had threading._register_atexit since 3.9
    atexit.register(_flush_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _Answer(Future):
    """The future of one call. A wait that could never end fails at once instead of hanging: from
    a completion callback running on its client's sender thread (:class:`CallbackWaitError`), or
    in a process forked after it was made (:class:`ForkedClientError`)."""

    def __init__(self, local, pid):
        super().__init__()
        self._solus_local = local
        self._solus_pid = pid

    def _may_wait(self, what, timeout) -> None:
        if (timeout is not None and timeout <= 0) or self.done():
            return
        if os.getpid() != self._solus_pid:
            raise ForkedClientError(
                f"{what} of a Solus future made in process {self._solus_pid}, waited for in process "
                f"{os.getpid()} forked from it: the parent sends it and gets its answer, this process never "
                f"will. Make the call again in this process.")
        if getattr(self._solus_local, "sender", False):
            raise CallbackWaitError(
                f"{what} of an unanswered Solus future, called from a completion callback: callbacks run on "
                f"the client's sender threads, the very threads that deliver answers, so this wait could "
                f"hang until its timeout (with max_in_flight = 1 it always does). Chain the work with "
                f"add_done_callback, or wait on another thread (the rule of KAFKA-10790).")

    def result(self, timeout=None):
        self._may_wait("result()", timeout)
        return super().result(timeout)

    def exception(self, timeout=None):
        self._may_wait("exception()", timeout)
        return super().exception(timeout)


def _settle(future: Future, value=None, error=None) -> None:
    """Answer ``future`` unless its caller cancelled it: a cancelled future affects only itself."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)
    except InvalidStateError:
        pass


class SolusClient:
    """Client of a Solus server, one entity at a time, batched under the hood.

    Entities of the same RPC, deduper and TTL are coalesced into one request of up to
    ``max_batch`` entities, sent when full or ``linger_ms`` after its first entity. At most
    ``max_in_flight`` requests run at once (a retry waiting for its backoff counts as one); at most
    ``max_pending_records`` calls wait for their answer, repeats of an unanswered entity included,
    beyond which calls block (backpressure). A failed attempt is retried only when the server
    says it is transient (the status carries ``google.rpc.RetryInfo``: wait at least its delay)
    or the transport failed (``UNAVAILABLE``/``DEADLINE_EXCEEDED`` without status details, a
    GOAWAY without trailers included), with exponential backoff and
    jitter, up to ``max_attempts``; ``Add``/``AddIfAbsent`` keep the same ``request_id``, so a
    retry answers what the first attempt computed. Anything else fails at once with
    :class:`SolusError`.

    A repeat of an entity whose ``add_if_absent`` is still unanswered is not sent alongside it:
    without a record id it is answered ``False`` once the first is answered; with the first's
    record id (the same record) it gets the first's answer; with another record id it is sent
    once the first is answered (the server decides, so a replayed new record is not dropped).

    Lifecycle: cancelling a future only discards its answer (the entity may still be sent);
    slots are returned before any future of a batch is completed, so completion callbacks may
    call this client again (they run on a sender thread; there a call never waits for room,
    and waiting there for an unanswered future of this client raises :class:`CallbackWaitError`).
    Thread-safe.

    Fork: a client that made its own channel rebuilds itself (channel, threads) at its first use
    in a forked child, starting empty; one on a ``channel=`` of the caller raises
    :class:`ForkedClientError` there. Exit without :meth:`close`: an exit hook sends what is
    queued and waits up to ``exit_timeout_s`` for the answers, then fails the rest and warns
    (:class:`SolusExitWarning`) with their number.
    """

    def __init__(self, address: str = "127.0.0.1:50051", *, client_id: str, channel: Optional[grpc.Channel] = None,
                 **settings):
        self._s = Settings(address=address, client_id=client_id, **settings).validate()
        self._given = channel        # the caller's channel, None when this client makes its own
        self._owned = None           # the channel this client made (and closes)
        self._inherited: list = []   # in a forked child: the parent's channels, never used nor closed
        self._local = threading.local()
        self._reset()
        self._start()
        with _live_lock:
            _live.add(self)

    def _start(self) -> None:
        """Channel, stubs, sender threads and linger thread, in this process."""
        s = self._s
        channel = self._given
        if channel is None:
            target, tls = s.target()
            opts = [("grpc.max_receive_message_length", 16 * 1024 * 1024)]
            channel = grpc.secure_channel(target, s.credentials(), options=opts) if tls \
                else grpc.insecure_channel(target, options=opts)
            self._owned = channel
        if s.interceptors:
            channel = grpc.intercept_channel(channel, *s.interceptors)
        self._data = pb_grpc.DeduperServiceStub(channel)
        self._admin = pb_grpc.DeduperAdminServiceStub(channel)
        self._methods = {ADD: self._data.Add, CHECK_ABSENCE: self._data.CheckAbsence,
                         ADD_IF_ABSENT: self._data.AddIfAbsent}
        self._senders = ThreadPoolExecutor(max_workers=s.max_in_flight, thread_name_prefix="solus-send",
                                           initializer=self._mark_sender)
        self._timer = threading.Thread(target=self._linger_loop, name="solus-linger", daemon=True)
        self._timer.start()
        self._pid = os.getpid()

    def _reset(self) -> None:
        """Locks and an empty queue (a new client, or one inherited by a forked child)."""
        s = self._s
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)   # a slot came back, or close began
        self._idle = threading.Condition(self._lock)   # _outstanding went down
        self._wake = threading.Condition(self._lock)   # the linger thread's next deadline changed
        self._free = s.max_pending_records             # slots not held
        self._outstanding = 0                          # records queued or in flight, futures unsettled
        self._pending: Dict[Tuple[str, str, int], Batch] = {}
        self._in_flight: set = set()                   # sealed batches not completed yet
        self._unanswered: Dict[Tuple[str, int, bytes], Record] = {}
        self._deadlines: list = []                     # heap of (monotonic s, seq, key, batch)
        self._seq = itertools.count()
        self._closed = False
        self._aborted = threading.Event()              # close(timeout_s) ran out

    def _forked(self) -> None:
        """In a forked child (at-fork hook: one thread, no callbacks, no gRPC): the sender and
        linger threads are gone and the queue is the parent's (the parent sends it). Start empty
        with new locks; the next use rebuilds the channel and threads (:meth:`_check_fork`)."""
        if self._owned is not None:
            self._inherited.append(self._owned)  # the parent's: closing it here could touch its state
            self._owned = None
        self._reset()
        self._senders = self._timer = None
        self._pid = None

    def _check_fork(self) -> None:
        """Rebuild this client when the process is not the one that started it (a forked child)."""
        if self._pid == os.getpid():
            return
        with _live_lock:
            if self._pid == os.getpid():
                return
            if self._pid is not None:  # forked without the at-fork hook running (a raw fork syscall)
                self._forked()
            if self._given is not None:
                raise ForkedClientError(
                    f"this SolusClient was made in another process (pid {os.getpid()} is a fork of it) on a "
                    f"channel given by the caller, which belongs to the parent: make a new channel and "
                    f"client in this process")
            self._start()

    # ------------------------------------------------------------------ data path

    def add_if_absent(self, deduper: str, entity, ttl_ms: Optional[int] = None,
                      record_id=None) -> "Future[bool]":
        """Remember ``entity`` (bytes or str, 1 to ``max_entity_bytes``) for ``ttl_ms`` ms
        (None: the ``ttl_ms`` setting; 0: the deduper's expiry) and answer whether it was absent
        just before: True = new, False = probably seen. Blocks while ``max_pending_records`` calls
        wait for their answers (repeats of an unanswered entity count too).

        ``record_id`` (bytes, or str encoded UTF-8; at most 128 bytes, else ValueError) is the
        record's stable identity: within the server's ``limits.record_id_window_seconds`` the
        same record id with the same entity, sent again in any batch (a replay after a task
        retry), gets the answer it got the first time. Entity errors fail the future with
        :class:`SolusError` (``INVALID_ARGUMENT``); after ``close()`` raises ClientClosedError."""
        return self._submit(ADD_IF_ABSENT, deduper, entity, self._s.ttl_ms if ttl_ms is None else ttl_ms, record_id)

    def check_absence(self, deduper: str, entity, record_id=None) -> "Future[bool]":
        """True = definitely never added (or expired), False = probably present. Changes nothing.
        ``record_id`` as in :meth:`add_if_absent`: a record an earlier ``add_if_absent`` answered
        new is answered True again."""
        return self._submit(CHECK_ABSENCE, deduper, entity, 0, record_id)

    def add(self, deduper: str, entity, ttl_ms: Optional[int] = None) -> "Future[bool]":
        """Remember ``entity`` for ``ttl_ms`` (0 = the deduper's expiry); the future's value is True."""
        return self._submit(ADD, deduper, entity, self._s.ttl_ms if ttl_ms is None else ttl_ms, None)

    def add_if_absent_many(self, deduper: str, entities: Iterable) -> List[bool]:
        """``add_if_absent`` of each entity, answers in order (waits for them all)."""
        futures = [self.add_if_absent(deduper, e) for e in entities]
        self.flush()
        return [f.result() for f in futures]

    def flush(self) -> None:
        """Send every partly filled batch now instead of after its linger time. Does not wait."""
        self._check_fork()
        with self._lock:
            ready = [self._take(k) for k in list(self._pending)]
        for batch in ready:
            if batch is not None:
                self._send(batch)

    def close(self, timeout_s: Optional[float] = None) -> None:
        """Stop taking calls, send what is queued and wait for its answers, close the channel.

        Calls made after close began, and calls still blocked on backpressure then, raise
        :class:`ClientClosedError`. When ``timeout_s`` seconds pass first, every future still
        unanswered fails with :class:`ClientClosedError` (the server may or may not have
        executed it) before close returns. On return every future of this client is done."""
        self._close(timeout_s)

    def _close(self, timeout_s: Optional[float]) -> int:
        """close(); the number of calls failed because ``timeout_s`` ran out."""
        if getattr(self._local, "sender", False):
            raise RuntimeError("close() called from a completion callback: it would wait for the thread it runs on")
        if self._pid != os.getpid():  # a forked child that never used this client: nothing to send
            with self._lock:
                self._closed = True
            with _live_lock:
                _live.discard(self)
            return 0
        with self._lock:
            self._closed = True
            self._room.notify_all()
            self._wake.notify()
        self.flush()
        with self._lock:
            done = self._idle.wait_for(lambda: self._outstanding == 0, timeout=timeout_s)
        failed = 0 if done else self._abort()
        self._senders.shutdown(wait=False, cancel_futures=True)
        if self._owned is not None:
            self._owned.close()
        with _live_lock:
            _live.discard(self)
        return failed

    def _close_at_exit(self) -> None:
        """The interpreter is exiting and this client was never closed: send what is queued, wait
        up to ``exit_timeout_s`` for the answers, fail the rest and say how many."""
        if self._closed or self._pid != os.getpid():
            return
        timeout_s = self._s.exit_timeout_s
        failed = self._close(timeout_s)
        if failed:
            warnings.warn(
                f"SolusClient(address={self._s.address!r}, client_id={self._s.client_id!r}) was not closed before "
                f"the interpreter exited: {failed} call(s) still unanswered after exit_timeout_s = {timeout_s:g} s "
                f"were failed with ClientClosedError (the server may or may not have executed them); call "
                f"close() before exiting", SolusExitWarning, stacklevel=1)

    def __enter__(self) -> "SolusClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ queueing

    def _mark_sender(self):
        self._local.sender = True

    def _submit(self, op: str, deduper: str, entity, ttl_ms: int, record_id) -> Future:
        self._check_fork()
        if self._closed:
            raise ClientClosedError(op, "before this call")
        rid = check_record_id(record_id)
        f: Future = _Answer(self._local, self._pid)
        try:
            entity = self._s.check_entity(deduper, entity)
        except ValueError as e:
            f.set_exception(SolusError(op, grpc.StatusCode.INVALID_ARGUMENT, str(e), 0))
            return f
        rec = Record(entity, rid, f, (deduper, ttl_ms, entity) if op == ADD_IF_ABSENT else None)
        # Every call holds a slot until answered, a repeat waiting on an earlier call of its entity
        # too: otherwise one hot entity queues calls without bound while the server stalls.
        self._take_slot(op, rec)
        for batch in self._place((op, deduper, ttl_ms), rec, counted=False):
            self._send(batch)
        return f

    def _take_slot(self, op: str, rec: Record) -> None:
        with self._lock:
            if self._free == 0 and getattr(self._local, "sender", False):
                return  # from a completion callback: waiting would wait on this very thread
            while self._free == 0 and not self._closed:
                self._room.wait()
            if self._closed:
                raise ClientClosedError(op, "while this call waited for room (backpressure)")
            self._free -= 1
            rec.slot = True

    def _give_back(self, rec: Record) -> None:
        """Return ``rec``'s slot (lock held)."""
        if rec.slot:
            rec.slot = False
            self._free += 1
            self._room.notify()

    def _follow(self, earlier: Record, rec: Record) -> None:
        if earlier.followers is None:
            earlier.followers = []
        earlier.followers.append(rec)

    def _place(self, key, rec: Record, counted: bool) -> list:
        """Queue ``rec`` (holding its slot, or none from a callback); the batches sealed by it.
        ``counted``: a deferred repeat, already counted in _outstanding and allowed while closing."""
        with self._lock:
            refused = self._aborted.is_set() or (self._closed and not counted)
            if refused:
                self._give_back(rec)
                if counted:
                    self._outstanding -= 1
                    self._idle.notify_all()
            else:
                earlier = self._unanswered.get(rec.ukey) if rec.ukey is not None else None
                if earlier is not None:
                    # A follower keeps its slot until it is answered (in _complete).
                    if relation(earlier.record_id, rec.record_id) != DEFER:
                        if counted:
                            self._outstanding -= 1
                            self._idle.notify_all()
                    elif not counted:
                        self._outstanding += 1
                    self._follow(earlier, rec)
                    return []
                if rec.ukey is not None:
                    self._unanswered[rec.ukey] = rec
                if not counted:
                    self._outstanding += 1
                return self._append(key, rec)
        error = ClientClosedError(key[0], "before this call was sent")
        if not counted:
            raise error
        _settle(rec.future, error=error)
        return []

    def _append(self, key, rec: Record) -> list:
        """Add ``rec`` to the pending batch of ``key`` (lock held); the batches now sealed."""
        sealed = []
        batch = self._pending.get(key)
        if batch is None:
            batch = self._pending[key] = Batch(key)
        size = len(rec.entity) + len(rec.record_id or b"") + 8
        if batch.records and batch.bytes + size > self._s.max_batch_bytes:
            sealed.append(self._take(key))
            batch = self._pending[key] = Batch(key)
        batch.records.append(rec)
        batch.bytes += size
        if len(batch.records) >= self._s.max_batch or self._closed:
            sealed.append(self._take(key))
        elif len(batch.records) == 1:
            when = time.monotonic() + self._s.linger_ms / 1000.0
            heapq.heappush(self._deadlines, (when, next(self._seq), key, batch))
            if self._deadlines[0][3] is batch:
                self._wake.notify()
        return sealed

    def _take(self, key) -> Optional[Batch]:
        """Seal the pending batch of ``key`` (lock held): it is in flight from now on."""
        batch = self._pending.pop(key, None)
        if batch is None or not batch.records:
            return None
        self._in_flight.add(batch)
        return batch

    def _linger_loop(self):
        while True:
            due = []
            with self._lock:
                while not due:
                    if self._closed and not self._deadlines:
                        return
                    now = time.monotonic()
                    while self._deadlines and self._deadlines[0][0] <= now:
                        _, _, key, batch = heapq.heappop(self._deadlines)
                        if self._pending.get(key) is batch:
                            due.append(self._take(key))
                    if not due:
                        self._wake.wait(self._deadlines[0][0] - now if self._deadlines else 0.5)
            for batch in due:
                self._send(batch)

    # ------------------------------------------------------------------ sending, completing

    def _send(self, batch: Batch) -> None:
        try:
            self._senders.submit(self._call, batch)
        except RuntimeError:  # the executor is shut down: close() is done with this client
            self._complete(batch, error=ClientClosedError(batch.key[0], "before this batch was sent"))

    def _call(self, batch: Batch) -> None:
        op = batch.key[0]
        request = build_request(self._s, batch, new_request_id())
        method = self._methods[op]
        attempt = 0
        while not batch.claimed:
            attempt += 1
            try:
                response = method(request, timeout=self._s.deadline_s, metadata=self._s.metadata())
                got = answers(op, response, len(batch.records))
            except grpc.RpcError as e:
                delay = retry_delay_s(e)
                if delay is not None and attempt < self._s.max_attempts:
                    if self._aborted.wait(delay + self._s.backoff_s(attempt)):
                        return  # close(timeout_s) ran out and failed this batch
                    continue
                self._complete(batch, error=failure(op, e, attempt, delay is not None))
                return
            except BaseException as e:  # noqa: BLE001 - a future must never be left pending
                self._complete(batch, error=e)
                return
            self._complete(batch, values=got)
            return

    def _complete(self, batch: Batch, values=None, error=None) -> None:
        """Answer every record of ``batch`` once: slots first, then futures, then repeats."""
        with self._lock:
            if batch.claimed:
                return
            batch.claimed = True
            self._in_flight.discard(batch)
            for r in batch.records:
                self._give_back(r)
                for follower in r.followers or ():
                    if relation(r.record_id, follower.record_id) != DEFER:
                        self._give_back(follower)  # answered below; a deferred one is queued with its slot
                if r.ukey is not None and self._unanswered.get(r.ukey) is r:
                    del self._unanswered[r.ukey]
        try:
            for i, r in enumerate(batch.records):
                value = None if error is not None else values[i]
                _settle(r.future, value, error)
                for follower in r.followers or ():
                    self._answer_follower(batch.key, r, follower, value, error)
        finally:
            with self._lock:
                self._outstanding -= len(batch.records)
                self._idle.notify_all()

    def _answer_follower(self, key, first: Record, follower: Record, value, error) -> None:
        kind = relation(first.record_id, follower.record_id)
        if kind == DEFER:
            for batch in self._place(key, follower, counted=True):
                self._send(batch)
        elif error is not None:
            _settle(follower.future, error=error)
        else:
            _settle(follower.future, value if kind == SAME else False)

    def _abort(self) -> int:
        """close(timeout_s) ran out: fail every batch still queued or in flight; the number of
        calls failed (their records and the repeats waiting on them)."""
        with self._lock:
            self._aborted.set()
            batches = list(self._pending.values()) + list(self._in_flight)
            failed = sum(1 + len(r.followers or ()) for b in batches if not b.claimed for r in b.records)
            self._pending.clear()
            self._deadlines.clear()
            self._wake.notify()
        for batch in batches:
            self._complete(batch, error=ClientClosedError(batch.key[0], "before the server answered (close timeout)"))
        with self._lock:
            self._idle.wait_for(lambda: self._outstanding == 0, timeout=_AFTER_ABORT_WAIT_S)
        return failed

    # ------------------------------------------------------------------ admin

    def _admin_call(self, rpc: str, request):
        self._check_fork()
        method = getattr(self._admin, rpc)
        attempt = 0
        while True:
            attempt += 1
            try:
                return method(request, timeout=self._s.deadline_s, metadata=self._s.metadata())
            except grpc.RpcError as e:
                delay = retry_delay_s(e)
                if delay is None or attempt >= self._s.max_attempts:
                    raise failure(rpc, e, attempt, delay is not None) from None
                time.sleep(delay + self._s.backoff_s(attempt))

    def create_deduper(self, name: str, expected_insertions: int, false_positive_rate: float = 0.01,
                       expiry_seconds: int = 86400) -> pb.Deduper:
        """Create a deduper sized for ``expected_insertions`` distinct entities alive within one
        ``expiry_seconds`` window at false-positive rate ``false_positive_rate`` in (0, 1).
        A refusal of the memory budget (``RESOURCE_EXHAUSTED``) is not retried."""
        return self._admin_call("CreateDeduper", create_request(self._s, name, expected_insertions,
                                                                false_positive_rate, expiry_seconds))

    def get_deduper(self, name: str) -> pb.Deduper:
        return self._admin_call("GetDeduper", pb.GetDeduperRequest(client_id=self._s.client_id, name=name))

    def list_dedupers(self, active_only: bool = False) -> List[pb.Deduper]:
        return list(self._admin_call("ListDedupers", pb.ListDedupersRequest(
            client_id=self._s.client_id, active_only=active_only)).dedupers)

    def update_deduper(self, name: str, active: Optional[bool] = None,
                       expiry_seconds: Optional[int] = None) -> pb.Deduper:
        """Change the active flag and/or expiry (None leaves it); the geometry never changes."""
        return self._admin_call("UpdateDeduper", update_request(self._s, name, active, expiry_seconds))

