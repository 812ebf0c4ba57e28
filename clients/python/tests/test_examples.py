import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

from solus_client import SolusClient  # noqa: E402
from spark_map_partitions import dedup_partition  # noqa: E402


def test_map_partitions_keeps_first_occurrences_in_order(server, deduper_name):
    settings = dict(address=server.address, client_id="py-test", max_batch=50)
    with SolusClient(**settings) as admin:
        admin.create_deduper(deduper_name, 100_000, 0.01, 3600)
    fn = dedup_partition(settings, deduper_name, key=lambda r: r["id"], window=64)
    partition_1 = ({"id": f"o-{i % 300}", "n": i} for i in range(1000))
    assert [r["n"] for r in fn(partition_1)] == list(range(300))
    # Another partition (another client) later: ids already seen stay dropped, new ones pass.
    partition_2 = iter([{"id": "o-5", "n": 0}, {"id": "o-new", "n": 1}, {"id": "o-new", "n": 2}])
    assert [r["n"] for r in fn(partition_2)] == [1]
