"""Settings, errors and helpers shared by the sync and asyncio clients."""
from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import Optional, Sequence

import grpc

from ._errors import ClientClosedError, SolusError  # noqa: F401 - re-exported
from ._pb import deduper_pb2 as pb

ADD, CHECK_ABSENCE, ADD_IF_ABSENT = "Add", "CheckAbsence", "AddIfAbsent"
MAX_RECORD_ID_BYTES = 128


@dataclass
class Settings:
    """Every knob, with its unit in its name."""
    address: str = "127.0.0.1:50051"
    client_id: str = ""
    token: Optional[str] = None
    ca_cert: Optional[str] = None
    client_cert: Optional[str] = None
    client_key: Optional[str] = None
    deadline_s: float = 10.0
    max_batch: int = 1000
    max_batch_bytes: int = 4 * 1024 * 1024
    linger_ms: float = 5.0
    max_in_flight: int = 8
    max_pending_records: Optional[int] = None
    max_attempts: int = 10
    initial_backoff_ms: float = 50.0
    max_backoff_ms: float = 5000.0
    ttl_ms: int = 0
    max_entity_bytes: int = 4096
    exit_timeout_s: float = 5.0
    interceptors: Sequence = field(default_factory=tuple)

    def validate(self) -> "Settings":
        if not self.client_id:
            raise ValueError("client_id is required: the client id that owns the dedupers")
        if not 1 <= self.max_batch <= 10_000:
            raise ValueError(f"max_batch must be in 1..10000 (the server's limits.max_entities_per_request), got {self.max_batch}")
        if self.max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {self.max_in_flight}")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.exit_timeout_s < 0:
            raise ValueError(f"exit_timeout_s must be >= 0, got {self.exit_timeout_s}")
        if self.linger_ms < 0 or self.deadline_s <= 0:
            raise ValueError("linger_ms must be >= 0 and deadline_s > 0")
        if not 0 < self.initial_backoff_ms <= self.max_backoff_ms:
            raise ValueError("backoff: need 0 < initial_backoff_ms <= max_backoff_ms")
        if (self.client_cert is None) != (self.client_key is None):
            raise ValueError("client_cert needs client_key (and the reverse)")
        if self.max_pending_records is None:
            self.max_pending_records = 2 * self.max_batch * self.max_in_flight
        if self.max_pending_records < 1:
            raise ValueError("max_pending_records must be at least 1")
        return self

    def target(self) -> tuple[str, bool]:
        """(host:port, tls) from the address."""
        addr, tls = self.address, bool(self.ca_cert or self.client_cert)
        if addr.startswith("https://"):
            addr, tls = addr[len("https://"):], True
        elif addr.startswith("http://"):
            if tls:
                raise ValueError(f"address {self.address} says plaintext (http://) but a CA or client certificate was given")
            addr = addr[len("http://"):]
        addr = addr.rstrip("/")
        host_has_port = addr.rsplit(":", 1)[-1].isdigit() and (not addr.startswith("[") or "]:" in addr)
        if not host_has_port:
            addr += ":50051"
        return addr, tls

    def credentials(self) -> grpc.ChannelCredentials:
        def read(path):
            if path is None:
                return None
            with open(path, "rb") as f:
                return f.read()
        return grpc.ssl_channel_credentials(read(self.ca_cert), read(self.client_key), read(self.client_cert))

    def metadata(self):
        return (("authorization", f"Bearer {self.token}"),) if self.token else None

    def backoff_s(self, attempts_made: int) -> float:
        """Exponential backoff with equal jitter (half fixed, half random), in seconds."""
        step = min(self.max_backoff_ms, self.initial_backoff_ms * (2 ** min(30, attempts_made - 1)))
        return (step / 2 + random.uniform(0, step / 2)) / 1000.0

    def check_entity(self, deduper: str, entity) -> bytes:
        if isinstance(entity, str):
            entity = entity.encode("utf-8")
        if not isinstance(entity, (bytes, bytearray, memoryview)):
            raise TypeError(f"an entity is bytes or str, got {type(entity).__name__}")
        entity = bytes(entity)
        if not deduper:
            raise ValueError(f"the deduper name is empty: give the name of a deduper of client {self.client_id}")
        if not 1 <= len(entity) <= self.max_entity_bytes:
            raise ValueError(f"entity of {len(entity)} bytes refused: entities are 1 to max_entity_bytes = "
                             f"{self.max_entity_bytes} bytes (the server's limits.max_entity_bytes)")
        return entity


def check_record_id(record_id) -> Optional[bytes]:
    """A record id as sent: bytes of at most 128 (a str is encoded UTF-8), None for none (also
    for an empty one). TypeError for another type, ValueError when longer."""
    if record_id is None:
        return None
    if isinstance(record_id, str):
        record_id = record_id.encode("utf-8")
    elif isinstance(record_id, (bytes, bytearray, memoryview)):
        record_id = bytes(record_id)
    else:
        raise TypeError(f"a record id is bytes or str, got {type(record_id).__name__}")
    if len(record_id) > MAX_RECORD_ID_BYTES:
        raise ValueError(f"record id of {len(record_id)} bytes refused: at most {MAX_RECORD_ID_BYTES} bytes")
    return record_id or None


def new_request_id() -> bytes:
    return os.urandom(16)


def build_request(s: Settings, batch, request_id: bytes):
    """The request of a sealed ``Batch`` (its key is (rpc, deduper, ttl_ms))."""
    op, deduper, ttl_ms = batch.key
    entities = batch.entities()
    if op == ADD:
        return pb.AddRequest(client_id=s.client_id, deduper=deduper, entities=entities, ttl_ms=ttl_ms, request_id=request_id)
    if op == ADD_IF_ABSENT:
        return pb.AddIfAbsentRequest(client_id=s.client_id, deduper=deduper, entities=entities, ttl_ms=ttl_ms,
                                     request_id=request_id, record_ids=batch.record_ids())
    return pb.CheckAbsenceRequest(client_id=s.client_id, deduper=deduper, entities=entities,
                                  record_ids=batch.record_ids())


def answers(op: str, response, n: int) -> list:
    got = [True] * n if op == ADD else list(response.absent)
    if len(got) != n:
        raise SolusError(op, grpc.StatusCode.INTERNAL, f"the server answered {len(got)} values for {n} entities", 1)
    return got


def create_request(s: Settings, name, expected_insertions, false_positive_rate, expiry_seconds):
    return pb.CreateDeduperRequest(client_id=s.client_id, name=name, expected_insertions=expected_insertions,
                                   false_positive_rate=false_positive_rate, expiry_seconds=expiry_seconds)


def update_request(s: Settings, name, active, expiry_seconds):
    r = pb.UpdateDeduperRequest(client_id=s.client_id, name=name)
    if active is not None:
        r.active = active
    if expiry_seconds is not None:
        r.expiry_seconds = expiry_seconds
    return r
