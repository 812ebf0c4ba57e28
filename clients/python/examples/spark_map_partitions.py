"""Deduplicating inside a PySpark-style ``mapPartitions`` function.

``rdd.mapPartitions(dedup_partition(settings, "orders", key=lambda r: r["order_id"]))`` keeps
the records whose key Solus has not seen, in partition order. Each partition opens one batching
client, keeps up to ``window`` records waiting for their answers, and yields the new ones as
their answers arrive. Nothing here needs Spark: a partition is any iterator.

Run it on its own against a server (``solus serve``) to see it work:

    python examples/spark_map_partitions.py --addr 127.0.0.1:50051
"""
import argparse
from collections import deque

from solus_client import SolusClient


def dedup_partition(settings, deduper, key, window=10_000):
    """A mapPartitions function: iterator of records in, iterator of new records out.

    ``settings`` are SolusClient's keyword arguments (address, client_id, max_batch, ...);
    ``key(record)`` gives the id (bytes or str) that decides whether a record is new.
    """
    def run(records):
        with SolusClient(**settings) as client:
            waiting = deque()
            for record in records:
                waiting.append((record, client.add_if_absent(deduper, key(record))))
                while waiting and (waiting[0][1].done() or len(waiting) >= window):
                    record_, answer = waiting.popleft()
                    if answer.result():
                        yield record_
            client.flush()
            for record_, answer in waiting:
                if answer.result():
                    yield record_
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--addr", default="127.0.0.1:50051")
    ap.add_argument("--client", default="examples")
    ap.add_argument("--deduper", default="spark-orders")
    args = ap.parse_args()
    settings = dict(address=args.addr, client_id=args.client)
    with SolusClient(**settings) as admin:
        if args.deduper not in [d.name for d in admin.list_dedupers()]:
            admin.create_deduper(args.deduper, 1_000_000, 0.01, 86400)
    partition = iter([{"order_id": f"o-{i % 7}", "n": i} for i in range(20)])
    for record in dedup_partition(settings, args.deduper, key=lambda r: r["order_id"])(partition):
        print(record)


if __name__ == "__main__":
    main()
