import itertools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

from solus_client import SolusClient  # noqa: E402
from spark_map_partitions import dedup_partition, dedup_partition_by_position  # noqa: E402


def test_map_partitions_keeps_first_occurrences_in_order(server, deduper_name):
    settings = dict(address=server.address, client_id="py-test", max_batch=50)
    with SolusClient(**settings) as admin:
        admin.create_deduper(deduper_name, 100_000, 0.01, 3600)
    fn = dedup_partition(settings, deduper_name, key=lambda r: r["id"], record_id=lambda r: f"p1/{r['n']}", window=64)
    partition_1 = ({"id": f"o-{i % 300}", "n": i} for i in range(1000))
    assert [r["n"] for r in fn(partition_1)] == list(range(300))
    # Another partition (another client) later: ids already seen stay dropped, new ones pass.
    fn = dedup_partition(settings, deduper_name, key=lambda r: r["id"], record_id=lambda r: f"p2/{r['n']}")
    partition_2 = iter([{"id": "o-5", "n": 0}, {"id": "o-new", "n": 1}, {"id": "o-new", "n": 2}])
    assert [r["n"] for r in fn(partition_2)] == [1]


ORDERS = [{"order_id": f"o-{(i * 7) % 300}", "offset": i} for i in range(1000)]  # 300 ids, 700 repeats
FIRSTS = list(range(300))  # 7 is prime to 300: offsets 0..299 carry the 300 ids once each


def attempts(fn):
    """A Spark task that fails part-way, then its retry and a second retry, all over the same
    partition: (offsets the failed attempt emitted, offsets of each full retry)."""
    failed = fn(iter(ORDERS))
    partial = [r["offset"] for r in itertools.islice(failed, 100)]
    failed.close()  # the task dies; Spark drops its output and re-runs the partition
    return partial, [r["offset"] for r in fn(iter(ORDERS))], [r["offset"] for r in fn(iter(ORDERS))]


def test_a_retried_partition_emits_the_same_new_records(server, deduper_name):
    settings = dict(address=server.address, client_id="py-test", max_batch=50)
    with SolusClient(**settings) as admin:
        admin.create_deduper(deduper_name, 100_000, 0.0001, 3600)
    by_id = dedup_partition(settings, deduper_name, key=lambda r: r["order_id"],
                            record_id=lambda r: f"orders/0/{r['offset']}", window=64)
    partial, retry, again = attempts(by_id)
    assert partial == FIRSTS[:100]
    assert (retry, again) == (FIRSTS, FIRSTS)  # 0 new records lost, none emitted twice


def test_by_position_ids_make_a_retry_emit_the_same(server, deduper_name):
    settings = dict(address=server.address, client_id="py-test", max_batch=50)
    with SolusClient(**settings) as admin:
        admin.create_deduper(deduper_name, 100_000, 0.0001, 3600)
    fn = dedup_partition_by_position(settings, deduper_name, key=lambda r: r["order_id"], source="orders", window=64)
    partial, retry, again = attempts(lambda records: fn(3, records))
    assert (partial, retry, again) == (FIRSTS[:100], FIRSTS, FIRSTS)


def test_without_record_ids_a_retry_loses_the_first_attempts_new_records(server, deduper_name):
    # Why the record ids: the same run without them drops, on retry, every new record the
    # failed attempt had already added.
    settings = dict(address=server.address, client_id="py-test", max_batch=50)
    with SolusClient(**settings) as admin:
        admin.create_deduper(deduper_name, 100_000, 0.0001, 3600)
    fn = dedup_partition(settings, deduper_name, key=lambda r: r["order_id"], record_id=None, window=64)
    partial, retry, _ = attempts(fn)
    assert partial == FIRSTS[:100]
    assert len(retry) < 200  # at least the 100 emitted by the failed attempt are lost
