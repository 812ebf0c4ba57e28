"""asyncio batching client: ``await client.add_if_absent(deduper, entity)``."""
from __future__ import annotations

import asyncio
from typing import Dict, Iterable, List, Optional, Tuple

import grpc
import grpc.aio

from ._common import (ADD, ADD_IF_ABSENT, CHECK_ABSENCE, RETRYABLE, Settings, SolusError, answers,
                      build_request, create_request, new_request_id, update_request)
from ._pb import deduper_pb2 as pb
from ._pb import deduper_pb2_grpc as pb_grpc


class AsyncSolusClient:
    """The asyncio twin of :class:`solus_client.SolusClient`: same settings, batching, bounds
    and retry rules; data calls are coroutines answering the entity's value. Create and use it
    inside one running event loop; ``async with`` closes it."""

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
        self._pending: Dict[Tuple[str, str, int], Tuple[list, list, int]] = {}
        self._timers: Dict[Tuple[str, str, int], asyncio.TimerHandle] = {}
        self._unanswered: Dict[Tuple[str, int, bytes], asyncio.Future] = {}
        self._in_flight = asyncio.Semaphore(s.max_in_flight)
        self._slots = asyncio.Semaphore(s.max_pending_records)
        self._tasks: set = set()
        self._closed = False

    async def add_if_absent(self, deduper: str, entity, ttl_ms: Optional[int] = None) -> bool:
        """True = new (definitely never added, or expired); False = probably seen."""
        return await self._submit(ADD_IF_ABSENT, deduper, entity, self._s.ttl_ms if ttl_ms is None else ttl_ms)

    async def check_absence(self, deduper: str, entity) -> bool:
        """True = definitely never added (or expired), False = probably present."""
        return await self._submit(CHECK_ABSENCE, deduper, entity, 0)

    async def add(self, deduper: str, entity, ttl_ms: Optional[int] = None) -> None:
        """Remember ``entity`` for ``ttl_ms`` (0 = the deduper's expiry)."""
        await self._submit(ADD, deduper, entity, self._s.ttl_ms if ttl_ms is None else ttl_ms)

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

    async def close(self) -> None:
        """Send what is queued, wait for every answer, close the channel."""
        self._closed = True
        self.flush()
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self._channel.close()

    async def __aenter__(self) -> "AsyncSolusClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _submit(self, op: str, deduper: str, entity, ttl_ms: int):
        if self._closed:
            raise RuntimeError("the Solus client is closed")
        try:
            entity = self._s.check_entity(deduper, entity)
        except ValueError as e:
            raise SolusError(op, grpc.StatusCode.INVALID_ARGUMENT, str(e), 0) from None
        loop = asyncio.get_running_loop()
        f = loop.create_future()
        if op == ADD_IF_ABSENT:
            ek = (deduper, ttl_ms, entity)
            earlier = self._unanswered.get(ek)
            if earlier is not None:
                # The earlier, unanswered call adds it: this repeat is present.
                await asyncio.shield(earlier)
                return False
            self._unanswered[ek] = f
            f.add_done_callback(lambda _f, ek=ek: self._unanswered.pop(ek, None) if self._unanswered.get(ek) is _f else None)
        await self._slots.acquire()
        key = (op, deduper, ttl_ms)
        entities, futures, nbytes = self._pending.get(key) or ([], [], 0)
        size = len(entity) + 8
        if entities and nbytes + size > self._s.max_batch_bytes:
            self._seal(key)
            entities, futures, nbytes = [], [], 0
        entities.append(entity)
        futures.append(f)
        self._pending[key] = (entities, futures, nbytes + size)
        if len(entities) >= self._s.max_batch:
            self._seal(key)
        elif len(entities) == 1:
            self._timers[key] = loop.call_later(self._s.linger_ms / 1000.0, self._seal, key)
        return await f

    def _seal(self, key) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        batch = self._pending.pop(key, None)
        if not batch or not batch[0]:
            return
        task = asyncio.ensure_future(self._call(key, batch[0], batch[1]))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _call(self, key, entities, futures) -> None:
        op, deduper, ttl_ms = key
        request = build_request(self._s, op, deduper, entities, ttl_ms, new_request_id())
        method = self._methods[op]
        attempt = 0
        try:
            while True:
                attempt += 1
                try:
                    async with self._in_flight:
                        response = await method(request, timeout=self._s.deadline_s, metadata=self._s.metadata())
                    got = answers(op, response, len(futures))
                except grpc.RpcError as e:
                    code = e.code() if callable(getattr(e, "code", None)) else grpc.StatusCode.UNKNOWN
                    if code in RETRYABLE and attempt < self._s.max_attempts:
                        await asyncio.sleep(self._s.backoff_s(attempt))
                        continue
                    details = e.details() if callable(getattr(e, "details", None)) else str(e)
                    raise SolusError(op, code, details, attempt) from None
                for f, v in zip(futures, got):
                    if not f.done():
                        f.set_result(v)
                return
        except BaseException as e:  # noqa: BLE001 - a future must never be left pending
            for f in futures:
                if not f.done():
                    f.set_exception(e)
            if isinstance(e, asyncio.CancelledError):
                raise
        finally:
            for _ in futures:
                self._slots.release()

    async def _admin_call(self, rpc: str, request):
        method = getattr(self._admin, rpc)
        for attempt in range(1, self._s.max_attempts + 1):
            try:
                return await method(request, timeout=self._s.deadline_s, metadata=self._s.metadata())
            except grpc.RpcError as e:
                if e.code() not in RETRYABLE or attempt >= self._s.max_attempts:
                    raise SolusError(rpc, e.code(), e.details(), attempt) from None
                await asyncio.sleep(self._s.backoff_s(attempt))

    async def create_deduper(self, name: str, expected_insertions: int, false_positive_rate: float = 0.01,
                             expiry_seconds: int = 86400) -> pb.Deduper:
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
