"""Deduplicating inside a PySpark ``mapPartitions`` function, safe under task retries.

    rdd.mapPartitions(dedup_partition(settings, "orders", key=lambda r: r["order_id"],
                                      record_id=lambda r: r["event_id"]))
    rdd.mapPartitionsWithIndex(dedup_partition_by_position(settings, "orders",
                                                           key=lambda r: r["order_id"], source="orders-2026-12-01"))

keeps the records whose key Solus has not seen, in partition order. Each partition opens one
batching client, keeps up to ``window`` records waiting for their answers, and yields the new
ones as their answers arrive. Nothing here needs Spark: a partition is any iterator.

Why record ids: Spark re-runs a failed (or speculative) task from the start of its partition.
Without record ids the retry reads every record the first attempt already added as "present"
and drops it: the new records of the first attempt are lost for good. With a record id that is
the same on every attempt, each record gets the answer it got the first time (within the
server's ``limits.record_id_window_seconds``), so a retry emits exactly the same new records.
The id must be the record's stable identity, the user's choice:

- an id field of the record (an event id, a primary key) - ``dedup_partition(record_id=...)``;
- its position in a deterministic source (file and line, Kafka topic/partition/offset):
  ``dedup_partition_by_position`` uses ``<source>/<partition index>/<position>``, stable only
  when every attempt reads the same records in the same order (not after an unsorted shuffle).

Run it on its own against a server (``solus serve``); with pyspark installed, ``--spark`` runs
the same function in a local Spark job:

    python examples/spark_map_partitions.py --addr 127.0.0.1:50051 [--spark]
"""
import argparse
from collections import deque

from solus_client import SolusClient

try:  # Spark is optional: the functions below run on plain iterators
    from pyspark import SparkContext
except ImportError:
    SparkContext = None


def _dedup(settings, deduper, keyed, window):
    """(record, key, record id) triples in; the records answered new out, in order."""
    with SolusClient(**settings) as client:
        waiting = deque()
        for record, key, rid in keyed:
            waiting.append((record, client.add_if_absent(deduper, key, record_id=rid)))
            while waiting and (waiting[0][1].done() or len(waiting) >= window):
                record_, answer = waiting.popleft()
                if answer.result():
                    yield record_
        client.flush()
        for record_, answer in waiting:
            if answer.result():
                yield record_


def dedup_partition(settings, deduper, key, *, record_id, window=10_000):
    """A ``mapPartitions`` function: iterator of records in, iterator of new records out.

    ``settings`` are SolusClient's keyword arguments (address, client_id, max_batch, ...);
    ``key(record)`` gives the entity (bytes or str) that decides whether a record is new;
    ``record_id(record)`` its stable identity (bytes or str, at most 128 bytes), the same on
    every attempt of the task. ``record_id=None`` sends none: not safe under task retries.
    Failures raise ``SolusError`` out of the iterator (Spark then retries the task).
    """
    def run(records):
        rid = record_id or (lambda _: None)
        return _dedup(settings, deduper, ((r, key(r), rid(r)) for r in records), window)
    return run


def dedup_partition_by_position(settings, deduper, key, *, source, window=10_000):
    """A ``mapPartitionsWithIndex`` function whose record ids are the records' positions,
    ``<source>/<partition index>/<position in the partition>`` (``source`` names the input,
    e.g. a dataset and date, so another input's positions are other records)."""
    def run(index, records):
        keyed = ((r, key(r), f"{source}/{index}/{i}") for i, r in enumerate(records))
        return _dedup(settings, deduper, keyed, window)
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--addr", default="127.0.0.1:50051")
    ap.add_argument("--client", default="examples")
    ap.add_argument("--deduper", default="spark-orders")
    ap.add_argument("--spark", action="store_true", help="run it in a local Spark job (needs pyspark)")
    args = ap.parse_args()
    settings = dict(address=args.addr, client_id=args.client)
    with SolusClient(**settings) as admin:
        if args.deduper not in [d.name for d in admin.list_dedupers()]:
            admin.create_deduper(args.deduper, 1_000_000, 0.01, 86400)
    orders = [{"event_id": f"ev-{i}", "order_id": f"o-{i % 7}", "n": i} for i in range(20)]
    fn = dedup_partition(settings, args.deduper, key=lambda r: r["order_id"], record_id=lambda r: r["event_id"])
    if args.spark:
        if SparkContext is None:
            raise SystemExit("--spark needs pyspark (pip install pyspark); without it the example runs on iterators")
        sc = SparkContext("local[2]", "solus-dedup")
        try:
            new = sc.parallelize(orders, 2).mapPartitions(fn).collect()
        finally:
            sc.stop()
    else:
        new = list(fn(iter(orders)))
    for record in new:
        print(record)


if __name__ == "__main__":
    main()
