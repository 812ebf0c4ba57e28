"""Records waiting for their answer, the batches they travel in, and how a repeat of an
entity relates to an earlier AddIfAbsent of it that is still unanswered."""
from __future__ import annotations

from typing import Optional

# A repeat AddIfAbsent of an entity whose earlier AddIfAbsent is still unanswered is:
SAME = "same"    # the same record (same record id): it gets the earlier one's answer
DUP = "dup"      # a repeat without a record id: answered False once the earlier one is answered
DEFER = "defer"  # another record (its own record id): sent once the earlier one is answered,
#                  so the server decides; its record id may be a replay the server answers new


def relation(earlier_record_id: Optional[bytes], record_id: Optional[bytes]) -> str:
    """SAME, DUP or DEFER for a repeat with ``record_id`` of an unanswered earlier record."""
    if record_id is None:
        return DUP
    return SAME if record_id == earlier_record_id else DEFER


class Record:
    """One entity of one call: ``future`` is answered from its batch; ``slot`` says whether it
    holds one of the ``max_pending_records`` slots; ``ukey`` is its key among the unanswered
    AddIfAbsent records (None for other RPCs); ``followers`` are the repeats waiting on it."""
    __slots__ = ("entity", "record_id", "future", "slot", "ukey", "followers")

    def __init__(self, entity: bytes, record_id: Optional[bytes], future, ukey):
        self.entity = entity
        self.record_id = record_id
        self.future = future
        self.slot = False
        self.ukey = ukey
        self.followers = None


class Batch:
    """Records of one (rpc, deduper, ttl_ms) bound for one request. ``claimed`` is set by
    whoever completes it first (its answer, its failure, or close), so it completes once."""
    __slots__ = ("key", "records", "bytes", "claimed")

    def __init__(self, key):
        self.key = key
        self.records: list = []
        self.bytes = 0
        self.claimed = False

    def entities(self) -> list:
        return [r.entity for r in self.records]

    def record_ids(self) -> list:
        """One per entity (b"" = none), or [] when no record of the batch has one."""
        if all(r.record_id is None for r in self.records):
            return []
        return [r.record_id or b"" for r in self.records]
