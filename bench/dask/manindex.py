"""The manindex scenario's job in Dask, for the bench's comparison.

An idiomatic dask.bag reduction of the gzip files named one a line on
stdin: per word ([a-z]{3,}), how many files hold it and how often it
occurs. A LocalCluster of 2 worker processes of one thread each, started
before the clock (as the bench's redmap workers are). For each partition
count given (argv), one line of JSON: partitions, seconds (the compute
alone), words, and the sums of the files and counts over all words, which
the bench checks against its loop's.
"""
import gzip
import json
import re
import sys
import time

import dask.bag as db
from dask.distributed import Client, LocalCluster

WORD = re.compile(rb"[a-z]{3,}")


def words(path):
    """(word, (1, occurrences)) for each distinct word of the file."""
    with gzip.open(path, "rb") as f:
        counts = {}
        for w in WORD.findall(f.read()):
            counts[w] = counts.get(w, 0) + 1
    return [(w.decode(), (1, n)) for w, n in counts.items()]


def add(a, b):
    return (a[0] + b[0], a[1] + b[1])


def main():
    paths = [line.rstrip("\n") for line in sys.stdin if line.strip()]
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, Client(cluster):
        for parts in [int(a) for a in sys.argv[1:]]:
            start = time.perf_counter()
            index = dict(
                db.from_sequence(paths, npartitions=parts)
                .map(words)
                .flatten()
                .foldby(lambda kv: kv[0], lambda acc, kv: add(acc, kv[1]), (0, 0), add, (0, 0))
                .compute()
            )
            took = time.perf_counter() - start
            print(json.dumps({
                "partitions": parts, "seconds": took, "words": len(index),
                "files": sum(v[0] for v in index.values()), "count": sum(v[1] for v in index.values()),
            }), flush=True)


if __name__ == "__main__":
    main()
