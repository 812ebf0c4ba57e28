"""Deduplicate a stream of records with repeats through the batching client, and check it.

Every repeat must be dropped (0 false negatives); first occurrences dropped are false
positives, expected within the deduper's rate p. Prints records/s.

    python examples/dedup_stream.py --addr 127.0.0.1:50051 --records 1000000 --duplicates 0.3 --batch 1000
"""
import argparse
import random
import sys
import time
from collections import deque

from solus_client import SolusClient


def main():
    ap = argparse.ArgumentParser(description="Deduplicate a stream with repeats through Solus")
    ap.add_argument("--addr", default="127.0.0.1:50051")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--duplicates", type=float, default=0.3, help="share of records that repeat an earlier one")
    ap.add_argument("--batch", type=int, default=1000, help="max entities per request")
    ap.add_argument("--in-flight", type=int, default=8, help="max requests in flight")
    ap.add_argument("--fpr", type=float, default=0.01, help="false-positive rate p of the deduper created")
    args = ap.parse_args()

    distinct = round(args.records * (1 - args.duplicates))
    deduper = f"stream-{int(time.time() * 1000)}"
    rnd = random.Random(7)
    with SolusClient(args.addr, client_id="examples", max_batch=args.batch, max_in_flight=args.in_flight) as c:
        c.create_deduper(deduper, distinct, args.fpr, 3600)
        seen = bytearray(args.records)
        next_id = repeats = kept = fn = fp = 0
        window = deque()
        limit = 2 * args.batch * args.in_flight

        def settle(item):
            nonlocal kept, fn, fp
            answer, was_repeat = item
            is_new = answer.result()
            kept += is_new
            fn += is_new and was_repeat
            fp += (not is_new) and (not was_repeat)

        start = time.perf_counter()
        for _ in range(args.records):
            if next_id and rnd.random() < args.duplicates:
                i = rnd.randrange(next_id)
            else:
                i = next_id
                next_id += 1
            repeat = seen[i] == 1
            seen[i] = 1
            repeats += repeat
            window.append((c.add_if_absent(deduper, b"record-%d" % i), repeat))
            while window and (len(window) > limit or window[0][0].done()):
                settle(window.popleft())
        c.flush()
        while window:
            settle(window.popleft())
        secs = time.perf_counter() - start
    firsts = args.records - repeats
    print(f"records {args.records} (first occurrences {firsts}, repeats {repeats}) in {secs:.1f} s: "
          f"{args.records / secs:.0f} records/s")
    print(f"kept {kept}; false negatives (repeats kept) {fn}; false positives (first occurrences dropped) "
          f"{fp} = {100 * fp / firsts:.4f}% (deduper p = {100 * args.fpr:.2f}%)")
    print(f"batch {args.batch}, {args.in_flight} requests in flight, deduper {deduper} (n = {distinct})")
    sys.exit(1 if fn else 0)


if __name__ == "__main__":
    main()
