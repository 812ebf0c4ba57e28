"""Thread-based batching client: ``concurrent.futures.Future`` per entity."""
from __future__ import annotations

import heapq
import itertools
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Dict, Iterable, List, Optional, Tuple

import grpc

from ._common import (ADD, ADD_IF_ABSENT, CHECK_ABSENCE, RETRYABLE, Settings, SolusError, answers,
                      build_request, create_request, new_request_id, update_request)
from ._pb import deduper_pb2 as pb
from ._pb import deduper_pb2_grpc as pb_grpc


class _Pending:
    __slots__ = ("entities", "futures", "bytes", "generation")

    def __init__(self):
        self.entities: list = []
        self.futures: list = []
        self.bytes = 0
        self.generation = 0


class SolusClient:
    """Client of a Solus server, one entity at a time, batched under the hood.

    Entities of the same RPC, deduper and TTL are coalesced into one request of up to
    ``max_batch`` entities, sent when full or ``linger_ms`` after its first entity. At most
    ``max_in_flight`` requests run at once (a retry waiting for its backoff counts as one); at most
    ``max_pending_records`` entities wait for their answer, beyond which calls block
    (backpressure). Retryable failures (``UNAVAILABLE``, ``RESOURCE_EXHAUSTED``,
    ``DEADLINE_EXCEEDED``, ``CANCELLED``) are retried with exponential backoff and jitter up to
    ``max_attempts`` attempts, ``Add``/``AddIfAbsent`` with the same ``request_id``: a retry
    answers what the first attempt computed, so it never turns a new entity into a duplicate.
    Then every future of the request fails with :class:`SolusError`.

    A repeat of an entity whose ``add_if_absent`` is still unanswered is not sent again: it is
    answered ``False`` once the first call is answered, so the first call through this client is
    the one answered new. Thread-safe.
    """

    def __init__(self, address: str = "127.0.0.1:50051", *, client_id: str, channel: Optional[grpc.Channel] = None,
                 **settings):
        self._s = Settings(address=address, client_id=client_id, **settings).validate()
        s = self._s
        if channel is None:
            target, tls = s.target()
            opts = [("grpc.max_receive_message_length", 16 * 1024 * 1024)]
            channel = grpc.secure_channel(target, s.credentials(), options=opts) if tls \
                else grpc.insecure_channel(target, options=opts)
            self._owned = channel
        else:
            self._owned = None
        if s.interceptors:
            channel = grpc.intercept_channel(channel, *s.interceptors)
        self._data = pb_grpc.DeduperServiceStub(channel)
        self._admin = pb_grpc.DeduperAdminServiceStub(channel)
        self._methods = {ADD: self._data.Add, CHECK_ABSENCE: self._data.CheckAbsence,
                         ADD_IF_ABSENT: self._data.AddIfAbsent}
        self._lock = threading.Lock()
        self._pending: Dict[Tuple[str, str, int], _Pending] = {}
        self._unanswered: Dict[Tuple[str, int, bytes], Future] = {}
        self._slots = threading.BoundedSemaphore(s.max_pending_records)
        self._senders = ThreadPoolExecutor(max_workers=s.max_in_flight, thread_name_prefix="solus-send")
        self._deadlines: list = []  # heap of (monotonic s, seq, key, generation)
        self._seq = itertools.count()
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self._timer = threading.Thread(target=self._linger_loop, name="solus-linger", daemon=True)
        self._timer.start()

    # ------------------------------------------------------------------ data path

    def add_if_absent(self, deduper: str, entity, ttl_ms: Optional[int] = None) -> "Future[bool]":
        """Remember ``entity`` (bytes or str) and answer whether it was absent just before:
        True = new, False = probably seen. Blocks while ``max_pending_records`` wait."""
        return self._submit(ADD_IF_ABSENT, deduper, entity, self._s.ttl_ms if ttl_ms is None else ttl_ms)

    def check_absence(self, deduper: str, entity) -> "Future[bool]":
        """True = definitely never added (or expired), False = probably present. Changes nothing."""
        return self._submit(CHECK_ABSENCE, deduper, entity, 0)

    def add(self, deduper: str, entity, ttl_ms: Optional[int] = None) -> "Future[bool]":
        """Remember ``entity`` for ``ttl_ms`` (0 = the deduper's expiry); the future's value is True."""
        return self._submit(ADD, deduper, entity, self._s.ttl_ms if ttl_ms is None else ttl_ms)

    def add_if_absent_many(self, deduper: str, entities: Iterable) -> List[bool]:
        """``add_if_absent`` of each entity, answers in order (waits for them all)."""
        futures = [self.add_if_absent(deduper, e) for e in entities]
        self.flush()
        return [f.result() for f in futures]

    def flush(self) -> None:
        """Send every partly filled batch now instead of after its linger time. Does not wait."""
        with self._lock:
            ready = [(k, self._take(k)) for k in list(self._pending)]
        for key, batch in ready:
            if batch:
                self._send(key, batch)

    def close(self, timeout_s: Optional[float] = None) -> None:
        """Send what is queued, wait for the answers (up to ``timeout_s``), close the channel."""
        with self._lock:
            self._closed = True
            self._wake.notify()
        self.flush()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for _ in range(self._s.max_pending_records):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self._slots.acquire(timeout=left if left is not None else -1):
                break
        self._senders.shutdown(wait=False, cancel_futures=True)
        if self._owned is not None:
            self._owned.close()

    def __enter__(self) -> "SolusClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _submit(self, op: str, deduper: str, entity, ttl_ms: int) -> Future:
        if self._closed:
            raise RuntimeError("the Solus client is closed")
        f: Future = Future()
        try:
            entity = self._s.check_entity(deduper, entity)
        except ValueError as e:
            f.set_exception(SolusError(op, grpc.StatusCode.INVALID_ARGUMENT, str(e), 0))
            return f
        if op == ADD_IF_ABSENT:
            ek = (deduper, ttl_ms, entity)
            with self._lock:
                earlier = self._unanswered.get(ek)
                if earlier is None:
                    self._unanswered[ek] = f
            if earlier is not None:
                repeat: Future = Future()

                def follow(e: Future, repeat=repeat):
                    err = e.exception()
                    repeat.set_exception(err) if err else repeat.set_result(False)
                earlier.add_done_callback(follow)
                return repeat

            def forget(_, ek=ek, f=f):
                with self._lock:
                    if self._unanswered.get(ek) is f:
                        del self._unanswered[ek]
            f.add_done_callback(forget)
        self._slots.acquire()
        key = (op, deduper, ttl_ms)
        sealed = []
        with self._lock:
            p = self._pending.get(key)
            if p is None:
                p = self._pending[key] = _Pending()
            size = len(entity) + 8
            if p.entities and p.bytes + size > self._s.max_batch_bytes:
                sealed.append(self._take(key))
            p.entities.append(entity)
            p.futures.append(f)
            p.bytes += size
            if len(p.entities) >= self._s.max_batch:
                sealed.append(self._take(key))
            elif len(p.entities) == 1:
                when = time.monotonic() + self._s.linger_ms / 1000.0
                heapq.heappush(self._deadlines, (when, next(self._seq), key, p.generation))
                if self._deadlines[0][2] == key:
                    self._wake.notify()
        for batch in sealed:
            self._send(key, batch)
        return f

    def _take(self, key):
        """Seal the pending batch of ``key`` (lock held): (entities, futures) or None."""
        p = self._pending.get(key)
        if p is None or not p.entities:
            return None
        batch = (p.entities, p.futures)
        p.entities, p.futures, p.bytes = [], [], 0
        p.generation += 1
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
                        _, _, key, generation = heapq.heappop(self._deadlines)
                        p = self._pending.get(key)
                        if p is not None and p.generation == generation:
                            batch = self._take(key)
                            if batch:
                                due.append((key, batch))
                    if not due:
                        self._wake.wait(self._deadlines[0][0] - now if self._deadlines else 0.5)
            for key, batch in due:
                self._send(key, batch)

    def _send(self, key, batch):
        try:
            self._senders.submit(self._call, key, batch)
        except RuntimeError as e:  # shut down
            self._finish(batch[1], error=SolusError(key[0], grpc.StatusCode.CANCELLED, str(e), 0))

    def _call(self, key, batch):
        op, deduper, ttl_ms = key
        entities, futures = batch
        request = build_request(self._s, op, deduper, entities, ttl_ms, new_request_id())
        method = self._methods[op]
        attempt = 0
        while True:
            attempt += 1
            try:
                response = method(request, timeout=self._s.deadline_s, metadata=self._s.metadata())
                got = answers(op, response, len(futures))
            except grpc.RpcError as e:
                code = e.code() if callable(getattr(e, "code", None)) else grpc.StatusCode.UNKNOWN
                if code in RETRYABLE and attempt < self._s.max_attempts:
                    time.sleep(self._s.backoff_s(attempt))
                    continue
                details = e.details() if callable(getattr(e, "details", None)) else str(e)
                self._finish(futures, error=SolusError(op, code, details, attempt))
                return
            except SolusError as e:
                self._finish(futures, error=e)
                return
            except BaseException as e:  # noqa: BLE001 - a future must never be left pending
                self._finish(futures, error=e)
                return
            self._finish(futures, values=got)
            return

    def _finish(self, futures, values=None, error=None):
        for i, f in enumerate(futures):
            if error is not None:
                f.set_exception(error)
            else:
                f.set_result(values[i])
        for _ in futures:
            self._slots.release()

    # ------------------------------------------------------------------ admin

    def _admin_call(self, rpc: str, request):
        method = getattr(self._admin, rpc)
        for attempt in range(1, self._s.max_attempts + 1):
            try:
                return method(request, timeout=self._s.deadline_s, metadata=self._s.metadata())
            except grpc.RpcError as e:
                if e.code() not in RETRYABLE or attempt >= self._s.max_attempts:
                    raise SolusError(rpc, e.code(), e.details(), attempt) from None
                time.sleep(self._s.backoff_s(attempt))

    def create_deduper(self, name: str, expected_insertions: int, false_positive_rate: float = 0.01,
                       expiry_seconds: int = 86400) -> pb.Deduper:
        """Create a deduper sized for ``expected_insertions`` distinct entities alive within one
        ``expiry_seconds`` window at false-positive rate ``false_positive_rate`` in (0, 1)."""
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
