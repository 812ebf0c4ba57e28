"""asyncio batching client: ``await client.add_if_absent(deduper, entity)``."""
from __future__ import annotations

import asyncio
import os
from typing import Dict, Iterable, List, Optional, Tuple

import grpc
import grpc.aio

from ._common import (ADD, ADD_IF_ABSENT, CHECK_ABSENCE, Settings, answers, build_request, check_record_id,
                      create_request, new_request_id, update_request)
from ._errors import ClientClosedError, ForkedClientError, SolusError
from ._pb import deduper_pb2 as pb
from ._pb import deduper_pb2_grpc as pb_grpc
from ._records import DEFER, SAME, Batch, Record, relation
from ._retry import failure, retry_delay_s


class AsyncSolusClient:
    """The asyncio twin of :class:`solus_client.SolusClient`: same settings, batching, bounds,
    retry rule and record ids; data calls are coroutines answering the entity's value. Create
    and use it inside one running event loop; ``async with`` closes it.

    A call cancelled by its caller leaves no state behind: cancelled while it waits for room
    (backpressure) or for an earlier unanswered repeat, it was never queued; cancelled while it
    waits for its answer, its entity is still sent and answered for everyone else (its repeats
    get their answers), only its caller does not see it.

    Every call waiting for its answer holds one of ``max_pending_records`` slots, a repeat waiting
    on an earlier unanswered call of its entity too. In a process forked after it was made, every
    call raises :class:`ForkedClientError` (its channel belongs to the parent's event loop): make
    a new client in the child."""

    def __init__(self, address: str = "127.0.0.1:50051", *, client_id: str, **settings):
        self._s = Settings(address=address, client_id=client_id, **settings).validate()
        s = self._s
        target, tls = s.target()
        opts = [("grpc.max_receive_message_length", 16 * 1024 * 1024)]
        interceptors = list(s.interceptors) or None
        self._channel = grpc.aio.secure_channel(target, s.credentials(), options=opts, interceptors=interceptors) \
            if tls else grpc.aio.insecure_channel(target, options=opts, interceptors=interceptors)
        self._data = pb_grpc.DeduperServiceStub(self._channel)
        self._admin = pb_grpc.DeduperAdminServiceStub(self._channel)
        self._methods = {ADD: self._data.Add, CHECK_ABSENCE: self._data.CheckAbsence,
                         ADD_IF_ABSENT: self._data.AddIfAbsent}
        self._pending: Dict[Tuple[str, str, int], Batch] = {}
        self._timers: Dict[Tuple[str, str, int], asyncio.TimerHandle] = {}
        self._unanswered: Dict[Tuple[str, int, bytes], Record] = {}
        self._in_flight: set = set()       # sealed batches not completed yet
        self._requests = asyncio.Semaphore(s.max_in_flight)
        self._slots = asyncio.Semaphore(s.max_pending_records)
        self._tasks: set = set()
        self._deferred = 0                 # repeats waiting for an earlier record, to be sent after it
        self._closed = False
        self._aborted = False
        self._pid = os.getpid()

    def _check_fork(self) -> None:
        if self._pid != os.getpid():
            raise ForkedClientError(
                f"this AsyncSolusClient was made in process {self._pid} and is used in process {os.getpid()}, "
                f"forked from it: its channel and event loop belong to the parent. Make a new client in this process")

    async def add_if_absent(self, deduper: str, entity, ttl_ms: Optional[int] = None, record_id=None) -> bool:
        """True = new (definitely never added, or expired); False = probably seen.
        ``ttl_ms`` and ``record_id`` (bytes or str, at most 128 bytes, else ValueError) as in
        :meth:`solus_client.SolusClient.add_if_absent`."""
        return await self._submit(ADD_IF_ABSENT, deduper, entity, self._s.ttl_ms if ttl_ms is None else ttl_ms,
                                  record_id)

    async def check_absence(self, deduper: str, entity, record_id=None) -> bool:
        """True = definitely never added (or expired), False = probably present; ``record_id``
        as in :meth:`add_if_absent`."""
        return await self._submit(CHECK_ABSENCE, deduper, entity, 0, record_id)

    async def add(self, deduper: str, entity, ttl_ms: Optional[int] = None) -> None:
        """Remember ``entity`` for ``ttl_ms`` (0 = the deduper's expiry)."""
        await self._submit(ADD, deduper, entity, self._s.ttl_ms if ttl_ms is None else ttl_ms, None)

    async def add_if_absent_many(self, deduper: str, entities: Iterable) -> List[bool]:
        """``add_if_absent`` of each entity, answers in order."""
        futures = [asyncio.ensure_future(self.add_if_absent(deduper, e)) for e in entities]
        await asyncio.sleep(0)
        self.flush()
        return list(await asyncio.gather(*futures))

    def flush(self) -> None:
        """Send every partly filled batch now instead of after its linger time."""
        for key in list(self._pending):
            self._seal(key)

    async def close(self, timeout_s: Optional[float] = None) -> None:
        """Stop taking calls, send what is queued and wait for its answers, close the channel.

        Calls made after close began, and calls still waiting for room then, raise
        :class:`ClientClosedError`. When ``timeout_s`` seconds pass first, every call still
        unanswered raises :class:`ClientClosedError` (the server may or may not have executed
        it). On return no call of this client is left waiting."""
        self._closed = True
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while self._tasks or self._pending or self._deferred:
            self.flush()
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                break
            if self._tasks:
                await asyncio.wait(list(self._tasks), timeout=left)
            else:  # only repeats about to be queued now that their earlier record is answered
                await asyncio.sleep(0.001)
        if self._tasks or self._pending or self._deferred:
            await self._abort()
        await self._channel.close()

    async def __aenter__(self) -> "AsyncSolusClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _submit(self, op: str, deduper: str, entity, ttl_ms: int, record_id):
        self._check_fork()
        if self._closed:
            raise ClientClosedError(op, "before this call")
        rid = check_record_id(record_id)
        try:
            entity = self._s.check_entity(deduper, entity)
        except ValueError as e:
            raise SolusError(op, grpc.StatusCode.INVALID_ARGUMENT, str(e), 0) from None
        ukey = (deduper, ttl_ms, entity) if op == ADD_IF_ABSENT else None
        deferred = slot = False
        try:
            # Nothing is registered until the record is queued: a cancellation up to there
            # (waiting for room or for an earlier repeat) leaves no state behind.
            while True:
                if self._aborted or (self._closed and not deferred):
                    raise ClientClosedError(op, "before this call was sent")
                if not slot:
                    # Taken first, a repeat included: a repeat waiting on an earlier call holds
                    # one too, so one hot entity cannot queue calls without bound (issue 46).
                    await self._slots.acquire()
                    slot = True
                    continue  # others ran while this call waited: look again
                earlier = self._unanswered.get(ukey) if ukey is not None else None
                if earlier is not None:
                    kind = relation(earlier.record_id, rid)
                    if kind != DEFER:
                        value = await asyncio.shield(earlier.future)
                        return value if kind == SAME else False
                    if not deferred:
                        deferred = True
                        self._deferred += 1
                    await asyncio.wait([earlier.future])  # its outcome is not ours; then the server decides
                    continue
                break
            rec = Record(entity, rid, asyncio.get_running_loop().create_future(), ukey)
            rec.slot, slot = True, False
            self._place((op, deduper, ttl_ms), rec)
        finally:
            if slot:
                self._slots.release()
            if deferred:
                self._deferred -= 1
        # Shielded: a caller that gives up does not cancel the answer its repeats wait for.
        return await asyncio.shield(rec.future)

    def _place(self, key, rec: Record) -> None:
        if rec.ukey is not None:
            self._unanswered[rec.ukey] = rec
        batch = self._pending.get(key)
        size = len(rec.entity) + len(rec.record_id or b"") + 8
        if batch is not None and batch.records and batch.bytes + size > self._s.max_batch_bytes:
            self._seal(key)
            batch = None
        if batch is None:
            batch = self._pending[key] = Batch(key)
        batch.records.append(rec)
        batch.bytes += size
        if len(batch.records) >= self._s.max_batch or self._closed:
            self._seal(key)
        elif len(batch.records) == 1:
            self._timers[key] = asyncio.get_running_loop().call_later(self._s.linger_ms / 1000.0, self._seal, key)

    def _seal(self, key) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        batch = self._pending.pop(key, None)
        if batch is None or not batch.records:
            return
        self._in_flight.add(batch)
        task = asyncio.ensure_future(self._call(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _call(self, batch: Batch) -> None:
        op = batch.key[0]
        request = build_request(self._s, batch, new_request_id())
        method = self._methods[op]
        attempt = 0
        try:
            while True:
                attempt += 1
                try:
                    async with self._requests:
                        response = await method(request, timeout=self._s.deadline_s, metadata=self._s.metadata())
                    got = answers(op, response, len(batch.records))
                except grpc.RpcError as e:
                    delay = retry_delay_s(e)
                    if delay is not None and attempt < self._s.max_attempts:
                        await asyncio.sleep(delay + self._s.backoff_s(attempt))
                        continue
                    self._complete(batch, error=failure(op, e, attempt, delay is not None))
                    return
                self._complete(batch, values=got)
                return
        except asyncio.CancelledError:
            self._complete(batch, error=ClientClosedError(op, "before the server answered", attempt))
            raise
        except BaseException as e:  # noqa: BLE001 - a record must never be left unanswered
            self._complete(batch, error=e)
            if not isinstance(e, Exception):
                raise

    def _complete(self, batch: Batch, values=None, error=None) -> None:
        """Answer every record of ``batch`` once, its slots returned first."""
        if batch.claimed:
            return
        batch.claimed = True
        self._in_flight.discard(batch)
        for r in batch.records:
            if r.slot:
                r.slot = False
                self._slots.release()
            if r.ukey is not None and self._unanswered.get(r.ukey) is r:
                del self._unanswered[r.ukey]
        for i, r in enumerate(batch.records):
            if r.future.done():  # only when the event loop is going away
                continue
            if error is not None:
                r.future.set_exception(error)
            else:
                r.future.set_result(values[i])

    async def _abort(self) -> None:
        """close(timeout_s) ran out: fail every batch still queued or in flight."""
        self._aborted = True
        for key in list(self._pending):
            timer = self._timers.pop(key, None)
            if timer is not None:
                timer.cancel()
        batches = list(self._pending.values()) + list(self._in_flight)
        self._pending.clear()
        for batch in batches:
            self._complete(batch, error=ClientClosedError(batch.key[0], "before the server answered (close timeout)"))
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        while self._deferred:  # repeats waking up to their ClientClosedError
            await asyncio.sleep(0.001)

    async def _admin_call(self, rpc: str, request):
        method = getattr(self._admin, rpc)
        attempt = 0
        while True:
            attempt += 1
            self._check_fork()
            try:
                return await method(request, timeout=self._s.deadline_s, metadata=self._s.metadata())
            except grpc.RpcError as e:
                delay = retry_delay_s(e)
                if delay is None or attempt >= self._s.max_attempts:
                    raise failure(rpc, e, attempt, delay is not None) from None
                await asyncio.sleep(delay + self._s.backoff_s(attempt))

    async def create_deduper(self, name: str, expected_insertions: int, false_positive_rate: float = 0.01,
                             expiry_seconds: int = 86400) -> pb.Deduper:
        """As :meth:`solus_client.SolusClient.create_deduper`."""
        return await self._admin_call("CreateDeduper", create_request(self._s, name, expected_insertions,
                                                                      false_positive_rate, expiry_seconds))

    async def get_deduper(self, name: str) -> pb.Deduper:
        return await self._admin_call("GetDeduper", pb.GetDeduperRequest(client_id=self._s.client_id, name=name))

    async def list_dedupers(self, active_only: bool = False) -> List[pb.Deduper]:
        r = await self._admin_call("ListDedupers", pb.ListDedupersRequest(client_id=self._s.client_id,
                                                                          active_only=active_only))
        return list(r.dedupers)

    async def update_deduper(self, name: str, active: Optional[bool] = None,
                             expiry_seconds: Optional[int] = None) -> pb.Deduper:
        return await self._admin_call("UpdateDeduper", update_request(self._s, name, active, expiry_seconds))
