"""Per-record ids (issue 18, items 1-2): what the clients send, and repeats of an unanswered
record with and without ids."""
import asyncio
import threading

import grpc
import pytest

from solus_client import AsyncSolusClient, SolusClient

CLIENT = "py-record-ids"


class Recorder(grpc.UnaryUnaryClientInterceptor):
    """Keeps (rpc name, request) of every data call sent."""

    def __init__(self):
        self.sent = []
        self._lock = threading.Lock()

    def intercept_unary_unary(self, continuation, details, request):
        rpc = details.method.rsplit("/", 1)[-1]
        if rpc in ("Add", "AddIfAbsent", "CheckAbsence"):
            with self._lock:
                self.sent.append((rpc, request))
        return continuation(details, request)


def test_record_ids_travel_one_per_entity_or_not_at_all(server, deduper_name):
    rec = Recorder()
    with SolusClient(server.address, client_id=CLIENT, interceptors=[rec], linger_ms=3_600_000) as c:
        c.create_deduper(deduper_name, 100_000, 0.01, 3600)
        fs = [c.add_if_absent(deduper_name, "a", record_id="topic/0/17"),
              c.add_if_absent(deduper_name, "b"),
              c.add_if_absent(deduper_name, "c", record_id=b"\x00\xffraw")]
        c.flush()
        assert [f.result() for f in fs] == [True, True, True]
        plain = [c.add_if_absent(deduper_name, k) for k in ("d", "e")]
        c.flush()
        assert [f.result() for f in plain] == [True, True]
        checks = [c.check_absence(deduper_name, "a", record_id="topic/0/17"), c.check_absence(deduper_name, "a"),
                  c.check_absence(deduper_name, "z")]
        c.flush()
        # "a" with its record id is the record answered new: absent again; without it, present.
        assert [f.result() for f in checks] == [True, False, True]
    assert [(rpc, list(r.entities), list(r.record_ids)) for rpc, r in rec.sent] == [
        ("AddIfAbsent", [b"a", b"b", b"c"], [b"topic/0/17", b"", b"\x00\xffraw"]),
        ("AddIfAbsent", [b"d", b"e"], []),
        ("CheckAbsence", [b"a", b"a", b"z"], [b"topic/0/17", b"", b""]),
    ]


def test_record_id_is_at_most_128_bytes(server, deduper_name):
    with SolusClient(server.address, client_id=CLIENT) as c:
        with pytest.raises(ValueError, match="129 bytes"):
            c.add_if_absent(deduper_name, "x", record_id=b"r" * 129)
        with pytest.raises(ValueError, match="129 bytes"):
            c.check_absence(deduper_name, "x", record_id="é" * 64 + "r")  # 129 bytes in UTF-8
        with pytest.raises(TypeError):
            c.add_if_absent(deduper_name, "x", record_id=17)

    async def main():
        async with AsyncSolusClient(server.address, client_id=CLIENT) as c:
            with pytest.raises(ValueError, match="129 bytes"):
                await c.add_if_absent(deduper_name, "x", record_id=b"r" * 129)
    asyncio.run(main())


def test_repeats_of_an_unanswered_record(server, deduper_name):
    # Same entity, same record id: the same record, it gets the first answer. No record id: a
    # repeat, answered False without being sent. Another record id: another record, sent after
    # the first is answered (the server decides).
    rec = Recorder()
    with SolusClient(server.address, client_id=CLIENT, interceptors=[rec], linger_ms=5) as c:
        c.create_deduper(deduper_name, 100_000, 0.01, 3600)
        first = c.add_if_absent(deduper_name, "e", record_id="r1")
        same = c.add_if_absent(deduper_name, "e", record_id="r1")
        plain = c.add_if_absent(deduper_name, "e")
        other = c.add_if_absent(deduper_name, "e", record_id="r2")
        assert [first.result(10), same.result(10), plain.result(10), other.result(10)] == [True, True, False, False]
    assert [(list(r.entities), list(r.record_ids)) for _, r in rec.sent] == [([b"e"], [b"r1"]), ([b"e"], [b"r2"])]


def test_asyncio_repeats_of_an_unanswered_record(server, deduper_name):
    async def main():
        async with AsyncSolusClient(server.address, client_id=CLIENT, linger_ms=5) as c:
            await c.create_deduper(deduper_name, 100_000, 0.01, 3600)
            got = await asyncio.gather(c.add_if_absent(deduper_name, "e", record_id="r1"),
                                       c.add_if_absent(deduper_name, "e", record_id="r1"),
                                       c.add_if_absent(deduper_name, "e"),
                                       c.add_if_absent(deduper_name, "e", record_id="r2"))
            assert got == [True, True, False, False]
    asyncio.run(main())


def test_a_replayed_record_is_not_dropped_behind_an_unanswered_repeat(server, deduper_name):
    # r2 was answered new once; later a repeat r1 of its entity is in flight when r2 is replayed
    # (a task retry). Answering r2 from r1 would drop a new record: it is sent, and the server
    # answers it as the first time.
    with SolusClient(server.address, client_id=CLIENT, linger_ms=5) as c:
        c.create_deduper(deduper_name, 100_000, 0.01, 3600)
        assert c.add_if_absent(deduper_name, "e", record_id="r2").result(10) is True
        later, replay = c.add_if_absent(deduper_name, "e", record_id="r1"), c.add_if_absent(deduper_name, "e",
                                                                                              record_id="r2")
        assert [later.result(10), replay.result(10)] == [False, True]
        # A CheckAbsence of the replayed record says what its AddIfAbsent said the first time.
        check = c.check_absence(deduper_name, "e", record_id="r2")
        assert [check.result(10), c.check_absence(deduper_name, "e").result(10)] == [True, False]

    async def main():
        async with AsyncSolusClient(server.address, client_id=CLIENT, linger_ms=5) as c:
            assert await c.add_if_absent(deduper_name, "f", record_id="r2") is True
            return await asyncio.gather(c.add_if_absent(deduper_name, "f", record_id="r1"),
                                        c.add_if_absent(deduper_name, "f", record_id="r2"))
    assert asyncio.run(main()) == [False, True]
