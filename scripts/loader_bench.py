#!/usr/bin/python3
"""Loader throughput: index build time and random-access samples/s on a large synthetic dataset.

    PYTHONPATH=build/python /usr/bin/python3 scripts/loader_bench.py [--tokens 1e9] [--dir /tmp/bench]

Writes DIR/synthetic.{bin,idx}: sequence lengths drawn like Pile documents (log-normal, median
~600 tokens), uint16 tokens from a fixed random pattern (a real, fully written .bin of 2 bytes per
token). Then times GPTDataset construction (document, sample and shuffle indices for two epochs'
worth of samples, seq 2048; then again from the .npy cache) and g[i] over shuffled indices.
"""
import argparse
import os
import struct
import subprocess
import tempfile
import sys
import time

import numpy

import pileprep


def write_dataset(prefix, tokens, seed=0):
    rng = numpy.random.default_rng(seed)
    lengths = []
    total = 0
    while total < tokens:
        chunk = numpy.clip(rng.lognormal(6.4, 1.2, 1 << 20).astype(numpy.int64), 1, 200000)
        lengths.append(chunk)
        total += int(chunk.sum())
    lengths = numpy.concatenate(lengths)
    cut = numpy.searchsorted(numpy.cumsum(lengths), tokens)
    lengths = lengths[: cut + 1].astype(numpy.int32)
    lengths[-1] -= int(lengths.astype(numpy.int64).sum()) - tokens
    if lengths[-1] <= 0:
        lengths = lengths[:-1]
    pattern = rng.integers(0, 50257, 1 << 24, dtype=numpy.uint16)
    n = int(lengths.astype(numpy.int64).sum())
    with open(prefix + ".bin", "wb") as f:
        left = n
        while left:
            k = min(left, pattern.size)
            f.write(pattern[:k].tobytes())
            left -= k
    pointers = numpy.zeros(lengths.size, dtype=numpy.int64)
    numpy.cumsum(lengths[:-1].astype(numpy.int64) * 2, out=pointers[1:])
    docs = numpy.arange(lengths.size + 1, dtype=numpy.int64)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, lengths.size, docs.size))
        f.write(lengths.tobytes())
        f.write(pointers.tobytes())
        f.write(docs.tobytes())
    return n, lengths.size


RANK_PROBE = """
import sys, pileprep
def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
prefix, seq, samples, cache = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
anon, file = rss("RssAnon"), rss("RssFile")
g = pileprep.GPTDataset(prefix, seq_length=seq, num_samples=samples, split="969,30,1", cache_dir=cache)
assert g.loaded_from_cache
print(rss("RssAnon") - anon, rss("RssFile") - file)
"""


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=float, default=1e9)
    p.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "pileprep-bench"))
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--reads", type=int, default=200000)
    args = p.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    prefix = os.path.join(args.dir, "synthetic")
    t = time.perf_counter()
    n, s = write_dataset(prefix, int(args.tokens))
    print(f"dataset: {n:,} tokens, {s:,} sequences, written in {time.perf_counter() - t:.1f} s")

    num_samples = 2 * n // args.seq  # two epochs
    cache = os.path.join(args.dir, "cache")
    for f in os.listdir(cache) if os.path.isdir(cache) else []:
        os.remove(os.path.join(cache, f))
    t = time.perf_counter()
    g = pileprep.GPTDataset(prefix, seq_length=args.seq, num_samples=num_samples, split="969,30,1")
    build = time.perf_counter() - t
    print(f"indices (in memory): {len(g):,} samples, {g.num_epochs} epochs, "
          f"{len(g.document_index):,} document_index entries: {build:.2f} s")
    t = time.perf_counter()
    pileprep.GPTDataset(prefix, seq_length=args.seq, num_samples=num_samples, split="969,30,1",
                        cache_dir=cache)
    print(f"indices built and cached as .npy: {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    h = pileprep.GPTDataset(prefix, seq_length=args.seq, num_samples=num_samples, split="969,30,1",
                            cache_dir=cache)
    assert h.loaded_from_cache
    print(f"indices loaded from cache: {time.perf_counter() - t:.2f} s")
    # What one more rank costs: a fresh process opens the dataset from the cache, and its own memory
    # (RssAnon; the mapped files' pages are the page cache's, shared by every rank) is measured.
    child = subprocess.run(
        [sys.executable, "-c", RANK_PROBE, prefix, str(args.seq), str(num_samples), cache],
        check=True, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    own, shared = (int(x) for x in child.stdout.split())
    print(f"one more rank opening it from the cache: {own / 1e6:.1f} MB of its own memory (RssAnon), "
          f"{shared / 1e6:.1f} MB of shared file pages (RssFile)")

    order = numpy.random.default_rng(1).integers(0, len(g), args.reads)
    for i in order[:1000]:
        g[int(i)]
    t = time.perf_counter()
    for i in order:
        g[int(i)]
    dt = time.perf_counter() - t
    print(f"random access g[i] (Python, {args.seq + 1} tokens each, page cache warm after first touch): "
          f"{args.reads / dt:,.0f} samples/s")


if __name__ == "__main__":
    main()
