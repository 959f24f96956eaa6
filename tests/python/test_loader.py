#!/usr/bin/python3
"""Differential tests of the pileprep Python module against a plain-Python Megatron reference.

The reference below transcribes Megatron-core's GPTDataset index building
(megatron/core/datasets/gpt_dataset.py), helpers.cpp's build_sample_idx / build_blending_indices /
build_exhaustive_blending_indices, the split rules of blended_megatron_dataset_builder.py (and the
legacy one), and _IndexReader, using numpy's own RandomState. Datasets are written by a Python
transcription of Megatron's IndexedDatasetBuilder (tests/data/format/make_golden.py) and by
pileprep's CLI.

Run by CTest:  PYTHONPATH=build/python /usr/bin/python3 tests/python/test_loader.py --cli build/bin/pileprep
Exit status 77 (skipped) when the module was not built.
"""
import argparse
import errno
import importlib.util
import itertools
import json
import math
import os
import random
import re
import struct
import subprocess
import sys
import tempfile
import time

import numpy

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# ---------------------------------------------------------------------------------------------
# Megatron reference
# ---------------------------------------------------------------------------------------------

_DTYPES = {1: numpy.uint8, 2: numpy.int8, 3: numpy.int16, 4: numpy.int32, 5: numpy.int64,
           6: numpy.float64, 7: numpy.float32, 8: numpy.uint16}


class RefIndexedDataset:
    """Megatron-core's _IndexReader + IndexedDataset.get, with numpy only."""

    def __init__(self, prefix):
        with open(prefix + ".idx", "rb") as f:
            header = f.read(9)
            assert header == b"MMIDIDX\x00\x00"
            version = struct.unpack("<Q", f.read(8))[0]
            assert version == 1
            code = struct.unpack("<B", f.read(1))[0]
            self.dtype = _DTYPES[code]
            self.sequence_count = struct.unpack("<Q", f.read(8))[0]
            self.document_count = struct.unpack("<Q", f.read(8))[0]
            offset = f.tell()
        buf = numpy.memmap(prefix + ".idx", mode="r", order="C")
        self.sequence_lengths = numpy.frombuffer(buf, dtype=numpy.int32, count=self.sequence_count,
                                                 offset=offset)
        self.sequence_pointers = numpy.frombuffer(buf, dtype=numpy.int64, count=self.sequence_count,
                                                  offset=offset + self.sequence_lengths.nbytes)
        self.document_indices = numpy.frombuffer(
            buf, dtype=numpy.int64, count=self.document_count,
            offset=offset + self.sequence_lengths.nbytes + self.sequence_pointers.nbytes)
        self.bin = numpy.memmap(prefix + ".bin", mode="r", order="C")

    def __len__(self):
        return self.sequence_count

    def get(self, idx, offset=0, length=None):
        ptr = self.sequence_pointers[idx]
        size = self.sequence_lengths[idx]
        if length is None:
            length = size - offset
        ptr += offset * numpy.dtype(self.dtype).itemsize
        return numpy.frombuffer(self.bin, dtype=self.dtype, count=length, offset=ptr)

    def __getitem__(self, idx):
        """IndexedDataset.__getitem__ (not multimodal): an int or a contiguous slice."""
        if isinstance(idx, (int, numpy.integer)):
            return self.get(idx)
        start, stop, step = idx.indices(len(self))
        if step != 1:
            raise ValueError("Slices into indexed_dataset must be contiguous")
        sequence_lengths = self.sequence_lengths[idx]
        sequence_offsets = list(itertools.accumulate(sequence_lengths))
        return numpy.split(
            numpy.frombuffer(self.bin, dtype=self.dtype, count=sum(sequence_lengths),
                             offset=self.sequence_pointers[start]),
            sequence_offsets[:-1])


def ref_split(split, n, legacy=False):
    if not legacy:
        w = list(map(float, re.findall(r"[.0-9]+", split)))
        w = w + [0.0 for _ in range(3 - len(w))]
        assert len(w) == 3  # parse_and_normalize_split: len(split) == len(Split)
        w = numpy.array(w, dtype=numpy.float64)
        w = (w / numpy.sum(w)).tolist()
        bookends = [0]
        for x in w:
            bookends.append(bookends[-1] + x)
        out = []
        for i in range(3):
            if bookends[i] >= bookends[i + 1]:
                out.append(None)
            else:
                out.append((int(round(bookends[i] * float(n))), int(round(bookends[i + 1] * float(n)))))
        return out
    # Legacy Megatron/NeMo's get_train_valid_test_split_, verbatim in its parsing: ',' or else '/',
    # each piece through float() (ValueError for "50 25 25"), the first three kept.
    if split.find(",") != -1:
        splits = [float(s) for s in split.split(",")]
    elif split.find("/") != -1:
        splits = [float(s) for s in split.split("/")]
    else:
        splits = [float(split)]
    while len(splits) < 3:
        splits.append(0.0)
    splits = splits[:3]
    total = sum(splits)
    assert total > 0.0
    splits = [s / total for s in splits]
    index = [0]
    for i, s in enumerate(splits):
        index.append(index[i] + int(round(s * float(n))))
    diff = index[-1] - n
    for i in range(1, len(index)):
        index[i] -= diff
    return [(index[i], index[i + 1]) if index[i + 1] > index[i] else None for i in range(3)]


def ref_build_document_index(documents, num_epochs, rng, separate_final_epoch):
    if not separate_final_epoch or num_epochs == 1:
        document_index = numpy.mgrid[0:num_epochs, 0:len(documents)][1]
        document_index[:] = documents
        document_index = document_index.reshape(-1)
        document_index = document_index.astype(numpy.int32)
        rng.shuffle(document_index)
        return document_index
    first = ref_build_document_index(documents, num_epochs - 1, rng, False)
    last = ref_build_document_index(documents, 1, rng, False)
    return numpy.concatenate((first, last))


def ref_build_sample_idx(sizes, document_idx, seq_length, num_epochs, tokens_per_epoch, drop_last,
                         extra):
    if drop_last:
        num_samples = (num_epochs * tokens_per_epoch - extra) // seq_length
    else:
        num_samples = int(math.ceil(numpy.float32(num_epochs * tokens_per_epoch - extra)
                                    / numpy.float32(seq_length)))
    sample_idx_max = max(document_idx.shape[0], sizes.max())
    int32 = sample_idx_max <= numpy.iinfo(numpy.int32).max
    dtype = numpy.int32 if int32 else numpy.int64
    sample_idx = numpy.zeros((num_samples + 1, 2), dtype=dtype)
    document_idx_index = 0
    doc_offset = 0
    for s in range(1, num_samples + 1):
        remaining = seq_length + extra
        while remaining != 0:
            doc_len = int(sizes[document_idx[document_idx_index]]) - doc_offset
            remaining -= doc_len
            if remaining <= 0:
                doc_offset += remaining + doc_len - extra
                remaining = 0
            else:
                if document_idx_index == len(document_idx) - 1:
                    assert s == num_samples
                    doc_offset = int(sizes[document_idx[document_idx_index]]) - extra
                    break
                document_idx_index += 1
                doc_offset = 0
        sample_idx[s] = (document_idx_index, doc_offset)
    if int32:  # helpers.py's build_sample_idx, on the int32 path only
        assert sample_idx.min() >= 0 and sample_idx.max() <= sample_idx_max
    return sample_idx


def ref_build_shuffle_index(num_samples, total_size, rng):
    dtype_ = numpy.uint32
    if total_size >= (numpy.iinfo(numpy.uint32).max - 1):
        dtype_ = numpy.int64
    first = numpy.arange(start=0, stop=num_samples, step=1, dtype=dtype_)
    rng.shuffle(first)
    if num_samples == total_size:
        return first
    last = numpy.arange(start=num_samples, stop=total_size, step=1, dtype=dtype_)
    rng.shuffle(last)
    return numpy.concatenate((first, last))


class RefGPTDataset:
    """GPTDataset._build_document_sample_shuffle_indices and _query_document_sample_shuffle_indices."""

    def __init__(self, ds, indices, seq_length, num_samples, seed, extra, drop_last=True):
        self.ds = ds
        self.extra = extra
        sizes = ds.sequence_lengths
        tpe = int(numpy.sum(sizes[indices]))
        num_epochs = 1
        if num_samples is not None:
            tokens = tpe
            requested = num_samples * seq_length + extra
            while tokens < requested:
                tokens += tpe
                num_epochs += 1
        if num_epochs == 1:
            separate = False
        else:
            sans = ((num_epochs - 1) * tpe - extra) // seq_length
            from_final = num_samples - sans
            per_epoch = (tpe - extra) // seq_length
            separate = from_final < int(0.80 * per_epoch)
        rng = numpy.random.RandomState(seed)
        self.document_index = ref_build_document_index(indices, num_epochs, rng, separate)
        self.sample_index = ref_build_sample_idx(sizes, self.document_index, seq_length, num_epochs,
                                                 tpe, drop_last, extra)
        if separate:
            self.shuffle_index = ref_build_shuffle_index(sans, self.sample_index.shape[0] - 1, rng)
        else:
            self.shuffle_index = ref_build_shuffle_index(self.sample_index.shape[0] - 1,
                                                         self.sample_index.shape[0] - 1, rng)
        self.num_epochs = num_epochs
        self.separate = separate

    def __len__(self):
        return self.sample_index.shape[0] - 1

    def __getitem__(self, idx):
        idx = self.shuffle_index[idx]
        beg, off_beg = self.sample_index[idx]
        end, off_end = self.sample_index[idx + 1]
        parts = []
        if beg == end:
            parts.append(self.ds.get(self.document_index[beg], offset=off_beg,
                                     length=off_end - off_beg + self.extra))
        else:
            for i in range(beg, end + 1):
                offset = 0 if i > beg else off_beg
                length = None if i < end else off_end + self.extra
                parts.append(self.ds.get(self.document_index[i], offset=offset, length=length))
        return numpy.array(numpy.concatenate(parts), dtype=numpy.int64)


def ref_blending_indices(weights, size):
    dataset_index = numpy.zeros(size, dtype=numpy.int16)
    dataset_sample_index = numpy.zeros(size, dtype=numpy.int64)
    current = [0] * len(weights)
    for s in range(size):
        x = max(float(s), 1.0)
        best = 0
        best_err = weights[0] * x - current[0]
        for d in range(1, len(weights)):
            err = weights[d] * x - current[d]
            if err > best_err:
                best_err = err
                best = d
        dataset_index[s] = best
        dataset_sample_index[s] = current[best]
        current[best] += 1
    return dataset_index, dataset_sample_index


def ref_exhaustive_blending_indices(sizes):
    total = sum(sizes)
    weights = [s / float(total) for s in sizes]
    counts = [0] * len(sizes)
    unspent = sorted(range(len(sizes)))
    di, dsi = [], []
    s = 0
    while unspent:
        x = max(float(s), 1.0)
        best, best_err = None, -sys.float_info.max
        for d in unspent:
            err = weights[d] * x - counts[d]
            if err > best_err:
                best, best_err = d, err
        di.append(best)
        dsi.append(counts[best])
        counts[best] += 1
        if sizes[best] - counts[best] == 0:
            unspent.remove(best)
        s += 1
    return numpy.array(di, dtype=numpy.int16), numpy.array(dsi, dtype=numpy.int64)


def load_megatron_writer():
    spec = importlib.util.spec_from_file_location(
        "make_golden", os.path.join(ROOT, "tests", "data", "format", "make_golden.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


def same(a, b, what, dtype=True):
    a = numpy.asarray(a)
    b = numpy.asarray(b)
    ok = a.shape == b.shape and numpy.array_equal(a, b) and (not dtype or a.dtype == b.dtype)
    if not ok:
        print("  got     ", a.dtype, a.shape, a.ravel()[:40])
        print("  expected", b.dtype, b.shape, b.ravel()[:40])
    check(ok, what)


def test_vectors(pileprep, writer, tmp):
    prefix = os.path.join(tmp, "vec")
    docs = [([100 * s + p for p in range(n)], [n]) for s, n in enumerate([5, 3, 7, 4, 6])]
    writer.write(prefix, numpy.uint16, docs)
    table = {
        5: (1, [4, 0, 1, 2, 3], [(0, 0), (0, 4), (1, 2), (2, 1), (3, 2), (3, 6), (4, 3)],
            [5, 2, 3, 1, 0, 4]),
        9: (2, [4, 0, 1, 2, 3, 3, 2, 1, 0, 4],
            [(0, 0), (0, 4), (1, 2), (2, 1), (3, 2), (3, 6), (4, 3), (5, 3), (6, 3), (7, 0), (8, 1),
             (9, 0), (9, 4)], [0, 4, 3, 2, 5, 1, 7, 6, 9, 8, 11, 10]),
        11: (2, [2, 2, 4, 1, 0, 3, 4, 0, 1, 3],
             [(0, 0), (0, 4), (1, 1), (1, 5), (2, 2), (3, 0), (4, 1), (5, 0), (6, 0), (6, 4),
              (7, 2), (8, 1), (9, 2)], [3, 11, 2, 1, 7, 5, 4, 0, 8, 6, 10, 9]),
    }
    for n, (epochs, doc, sample, shuffle) in table.items():
        g = pileprep.GPTDataset(prefix, seq_length=4, num_samples=n)
        check(g.num_epochs == epochs, f"vector {n}: epochs")
        check(g.separate_final_epoch == (n == 9), f"vector {n}: separate")
        same(g.document_index, numpy.array(doc, dtype=numpy.int32), f"vector {n}: document_index")
        same(g.sample_index, numpy.array(sample, dtype=numpy.int32), f"vector {n}: sample_index")
        same(g.shuffle_index, numpy.array(shuffle, dtype=numpy.uint32), f"vector {n}: shuffle_index")
    g = pileprep.GPTDataset(prefix, seq_length=4, num_samples=5)
    same(g[0], numpy.array([206, 300, 301, 302, 303], dtype=numpy.int64), "vector: sample 0")
    same(g[-6], g[0], "negative index")
    di, dsi = pileprep.blending_indices([0.3, 0.7], 10)
    same(di, numpy.array([1, 0, 1, 1, 0, 1, 1, 0, 1, 1], dtype=numpy.int16), "blending vector")
    same(dsi, numpy.array([0, 0, 1, 2, 1, 3, 4, 2, 5, 6], dtype=numpy.int64), "blending vector")
    di, dsi = pileprep.exhaustive_blending_indices([2, 3])
    same(di, numpy.array([1, 0, 1, 0, 1], dtype=numpy.int16), "exhaustive vector")
    same(dsi, numpy.array([0, 0, 1, 1, 2], dtype=numpy.int64), "exhaustive vector")
    check(pileprep.split_ranges("969,30,1", 7021438)[0] == (0, 6803773), "split current")
    check(pileprep.split_ranges("969,30,1", 7021438, legacy=True)[0] == (0, 6803774), "split legacy")
    check(pileprep.split_ranges("1,1,1", 10) == [(0, 3), (3, 7), (7, 10)], "split 1,1,1")
    check(pileprep.split_ranges("1,1,1", 10, legacy=True) == [(0, 4), (4, 7), (7, 10)],
          "split 1,1,1 legacy")
    # The legacy parser is legacy Megatron's: pieces at ',' (or '/') through float(), the first
    # three kept; the current one takes [.0-9]+ runs, at most three.
    check(pileprep.split_ranges("98,2,0,0", 100, legacy=True) == ref_split("98,2,0,0", 100, True),
          "split legacy keeps the first three of four weights")
    check(pileprep.split_ranges(" 1e2 /1/ +1", 102, legacy=True) == ref_split(" 1e2 /1/ +1", 102, True),
          "split legacy reads pieces as float() does")
    check(pileprep.split_ranges("1_000,0,0", 10, legacy=True) == ref_split("1_000,0,0", 10, True),
          "split legacy reads 1_000 as float() does")
    check(pileprep.split_ranges("98,2,0,inf", 100, legacy=True) == ref_split("98,2,0,inf", 100, True),
          "split legacy drops a fourth piece after reading it")
    for bad in ["50 25 25", "1,,1", "1,inf,1", "1,nan", "+-1,2", "0,0,0", "-1,3,0", "1e18,-1e18,1"]:
        try:
            pileprep.split_ranges(bad, 10, legacy=True)
            check(False, f"split legacy {bad!r} accepted")
        except ValueError:
            pass
    try:
        pileprep.split_ranges("98,2,0,0", 100)
        check(False, "split current accepted four weights")
    except ValueError:
        pass


def random_docs(rnd, dtype):
    top = 65535 if dtype == numpy.uint16 else 2**31 - 1
    docs = []
    for _ in range(rnd.randint(1, 40)):
        if rnd.random() < 0.1:
            docs.append(([], []))  # empty text: no sequence
            continue
        n = rnd.choice([1, 2, 3, rnd.randint(1, 30), rnd.randint(1, 120)])
        docs.append(([rnd.randint(0, top) for _ in range(n)], [n]))
    if all(not d[0] for d in docs):
        docs.append(([1, 2, 3], [3]))
    return docs


def test_randomized(pileprep, writer, tmp, trials, seed):
    rnd = random.Random(seed)
    separate_cases = 0
    multi_epoch = 0
    kept_partial = 0
    for t in range(trials):
        dtype = rnd.choice([numpy.uint16, numpy.int32])
        prefix = os.path.join(tmp, f"rand{t}")
        writer.write(prefix, dtype, random_docs(rnd, dtype))
        ref_ds = RefIndexedDataset(prefix)
        n = len(ref_ds)
        split = rnd.choice([None, None, "969,30,1", "8,1,1", "1,1,1", "50 25 25", "3,1",
                            "98/2", " 1e2 , 1 ,+1", "8,1,1,0"])
        legacy = rnd.random() < 0.3
        split_index = rnd.randint(0, 2) if split else 0
        if split:
            try:
                ranges = ref_split(split, n, legacy)
            except (ValueError, AssertionError):  # a split string Megatron's parser refuses
                try:
                    pileprep.split_ranges(split, n, legacy=legacy)
                except ValueError:
                    continue
                check(False, f"trial {t}: split {split!r} legacy={legacy}: accepted, Megatron refuses")
                continue
            if ranges[split_index] is None or ranges[split_index][1] <= ranges[split_index][0]:
                continue
            begin, end = ranges[split_index]
        else:
            begin, end = 0, n
        indices = numpy.arange(begin, end, dtype=numpy.int32)
        extra = rnd.choice([0, 1, 1])
        tpe = int(ref_ds.sequence_lengths[indices].sum())
        if tpe <= extra:
            continue
        seq = rnd.choice([1, 2, 3, rnd.randint(1, 16), rnd.randint(1, 64)])
        per_epoch = max((tpe - extra) // seq, 1)
        num_samples = rnd.choice([None, rnd.randint(0, per_epoch), rnd.randint(1, 4 * per_epoch),
                                  per_epoch + rnd.randint(0, max(per_epoch // 4, 1))])
        s = rnd.choice([0, 1, 1234, 2**32 - 1, rnd.randint(0, 2**32 - 1)])
        # Megatron's drop_last_partial_validation_sequence: only the validation split keeps it.
        drop_last_valid = rnd.random() < (0.5 if split_index == 1 else 0.85)
        drop_last = drop_last_valid or split_index != 1
        kept_partial += not drop_last and (tpe - extra) % seq != 0
        what = (f"trial {t}: n={n} split={split!r}/{split_index} legacy={legacy} seq={seq} "
                f"num_samples={num_samples} seed={s} extra={extra} drop_last={drop_last}")
        ref = RefGPTDataset(ref_ds, indices, seq, num_samples, s, extra, drop_last)
        g = pileprep.GPTDataset(prefix, seq_length=seq, num_samples=num_samples, seed=s, split=split,
                                split_index=split_index, add_extra_token=bool(extra),
                                drop_last_partial_validation_sequence=drop_last_valid,
                                legacy_split=legacy)
        separate_cases += ref.separate
        multi_epoch += ref.num_epochs > 1
        check(g.sequence_range == (begin, end), what + ": split range")
        check(g.num_epochs == ref.num_epochs and g.separate_final_epoch == ref.separate,
              what + ": epochs")
        same(g.document_index, ref.document_index, what + ": document_index")
        same(g.sample_index, ref.sample_index, what + ": sample_index")
        same(g.shuffle_index, ref.shuffle_index, what + ": shuffle_index")
        check(len(g) == len(ref), what + ": len")
        for i in range(min(len(ref), 300)):
            if not numpy.array_equal(g[i], ref[i]):
                same(g[i], ref[i], what + f": sample {i}")
                break
    print(f"randomized: {trials} trials, {multi_epoch} multi-epoch, {separate_cases} separate-final-epoch, "
          f"{kept_partial} validation splits keeping a partial sample")
    check(separate_cases >= 3, "randomized trials cover the separate-final-epoch case")
    check(kept_partial >= 3, "randomized trials cover a validation split that keeps its partial sample")


def test_random_blending(pileprep, seed):
    rnd = random.Random(seed)
    for t in range(100):
        k = rnd.randint(1, 6)
        w = numpy.array([rnd.random() + 1e-3 for _ in range(k)], dtype=numpy.float64)
        w = (w / w.sum()).tolist()
        size = rnd.randint(0, 3000)
        got = pileprep.blending_indices(w, size)
        exp = ref_blending_indices(w, size)
        same(got[0], exp[0], f"blending {t}")
        same(got[1], exp[1], f"blending {t}")
        sizes = [rnd.randint(1, 200) for _ in range(k)]
        got = pileprep.exhaustive_blending_indices(sizes)
        exp = ref_exhaustive_blending_indices(sizes)
        same(got[0], exp[0], f"exhaustive {t}")
        same(got[1], exp[1], f"exhaustive {t}")


def test_blended_dataset(pileprep, writer, tmp, seed):
    rnd = random.Random(seed)
    prefixes = []
    for k in range(3):
        prefix = os.path.join(tmp, f"blend{k}")
        writer.write(prefix, numpy.uint16, random_docs(rnd, numpy.uint16) + random_docs(rnd, numpy.uint16))
        prefixes.append(prefix)
    for trial in range(11):
        raw = [rnd.randint(1, 30) for _ in prefixes]
        num_samples = rnd.randint(1, 200)
        if trial == 10:
            # Weights whose second normalization changes the picks (at 50 samples).
            raw, num_samples = [1, 4, 1], 50
        weights = (numpy.array(raw, dtype=numpy.float64) / sum(raw)).tolist()
        seq = rnd.randint(2, 16)
        s = rnd.randint(0, 2**32 - 1)
        data_path = " ".join(f"{r} {p}" for r, p in zip(raw, prefixes))
        g = pileprep.GPTDataset(data_path, seq_length=seq, num_samples=num_samples, seed=s,
                                split="90,5,5")
        parts = []
        for w, p in zip(weights, prefixes):
            ref_ds = RefIndexedDataset(p)
            b, e = ref_split("90,5,5", len(ref_ds))[0]
            asked = int(math.ceil(math.ceil(num_samples * w) * (1 + 0.005)))
            parts.append(RefGPTDataset(ref_ds, numpy.arange(b, e, dtype=numpy.int32), seq, asked, s, 1))
        size = sum(int(math.ceil(num_samples * w)) for w in weights)
        # BlendedDataset normalizes the builder's normalized weights again.
        again = (numpy.array(weights, dtype=numpy.float64) / numpy.sum(weights)).tolist()
        di, dsi = ref_blending_indices(again, size)
        what = f"blend trial {trial} ({data_path}, seq {seq}, {num_samples} samples)"
        check(len(g) == size, what + ": len")
        same(g.dataset_index, di, what + ": dataset_index")
        same(g.dataset_sample_index, dsi, what + ": dataset_sample_index")
        for i in range(size):
            exp = parts[di[i]][dsi[i]]
            if not numpy.array_equal(g[i], exp):
                same(g[i], exp, what + f": sample {i}")
                break
    # The same data path as a list.
    g2 = pileprep.GPTDataset(["1", prefixes[0], "3", prefixes[1]], seq_length=8, num_samples=50)
    g3 = pileprep.GPTDataset(f"1 {prefixes[0]} 3 {prefixes[1]}", seq_length=8, num_samples=50)
    check(len(g2) == len(g3) and all(numpy.array_equal(g2[i], g3[i]) for i in range(len(g2))),
          "blend as list equals blend as string")
    # Unweighted: exhaustive over one epoch of each.
    g4 = pileprep.GPTDataset([prefixes[0], prefixes[1]], seq_length=8)
    lens = [len(pileprep.GPTDataset(p, seq_length=8)) for p in prefixes[:2]]
    di, dsi = ref_exhaustive_blending_indices(lens)
    same(g4.dataset_index, di, "unweighted blend: exhaustive")
    same(g4.dataset_sample_index, dsi, "unweighted blend: exhaustive")


def expect_raises(exc, fn, what, message=None):
    """fn() raises exc (with `message` in its text when given)."""
    try:
        fn()
    except exc as e:
        check(message is None or message in str(e), f"{what}: message {e!r} lacks {message!r}")
        return
    except Exception as e:  # noqa: BLE001
        check(False, f"{what}: raised {type(e).__name__}: {e}")
        return
    check(False, f"{what}: no {exc.__name__}")


def outcome(fn):
    """fn()'s value, or its exception's type (what Megatron's reference and pileprep must share)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        return type(e)


def test_blend_list_is_stripped(pileprep, writer, tmp):
    """Megatron's get_blend_from_list strips every prefix of a --data-path list; "/x/cb\n" failed to
    open as "/x/cb\n.idx" (FileNotFoundError)."""
    rnd = random.Random(11)
    prefix = os.path.join(tmp, "stripped")
    writer.write(prefix, numpy.uint16, random_docs(rnd, numpy.uint16) * 3)
    plain = pileprep.GPTDataset(f"1 {prefix} 1 {prefix}", seq_length=6, num_samples=40)
    for items in (["1", prefix + "\n", "1", prefix], [" 1 ", "\t" + prefix + " \r\n", "1\n", prefix],
                  ["1", "\u3000" + prefix + "\u00a0", "1", prefix]):
        try:
            g = pileprep.GPTDataset(items, seq_length=6, num_samples=40)
        except Exception as e:  # noqa: BLE001
            check(False, f"blend list {items!r}: {type(e).__name__}: {e}")
            continue
        check(len(g) == len(plain) and all(numpy.array_equal(g[i], plain[i]) for i in range(len(g))),
              f"blend list {items!r}: the samples of the stripped prefixes")
    g = pileprep.GPTDataset([prefix + "\n", " " + prefix], seq_length=6)
    h = pileprep.GPTDataset([prefix, prefix], seq_length=6)
    same(g.dataset_index, h.dataset_index, "unweighted blend list: stripped")
    # get_blend_from_list's assert: a weight after an item that is not one.
    expect_raises(ValueError, lambda: pileprep.GPTDataset([prefix, prefix, "1", prefix], seq_length=6),
                  "a number after a prefix", "get_blend_from_list")


def test_indexed_dataset_slices_and_get(pileprep, writer, tmp, seed):
    """IndexedDataset's slices and get(idx, offset, length) are Megatron's, values and errors: a
    transcription of megatron/core/datasets/indexed_dataset.py over the same files."""
    rnd = random.Random(seed)
    for t in range(20):
        dtype = rnd.choice([numpy.uint16, numpy.int32])
        prefix = os.path.join(tmp, f"slices{t}")
        docs = random_docs(rnd, dtype)
        if t % 4 == 0:
            docs.insert(rnd.randint(0, len(docs)), ([], [0]))  # an empty sequence
        writer.write(prefix, dtype, docs)
        ours = pileprep.IndexedDataset(prefix)
        ref = RefIndexedDataset(prefix)
        n = len(ref)
        points = [None, 0, 1, n - 1, n, n + 3, -1, -n, -n - 2, rnd.randint(-n, n)]
        for _ in range(12):
            sl = slice(rnd.choice(points), rnd.choice(points), rnd.choice([None, None, 1, 2, -1]))
            what = f"slices {t}: ds[{sl.start}:{sl.stop}:{sl.step}] of {n}"
            got, exp = outcome(lambda: ours[sl]), outcome(lambda: ref[sl])
            if isinstance(exp, type):
                check(got is exp, f"{what}: {got!r}, expected {exp.__name__}")
                continue
            if not isinstance(got, list) or len(got) != len(exp):
                check(False, f"{what}: {got!r}, expected {len(exp)} arrays")
                continue
            for k, (a, b) in enumerate(zip(got, exp)):
                same(a, b, f"{what}: array {k}")
                check(not a.flags.writeable, f"{what}: array {k} read-only")
        for _ in range(30):
            i = rnd.randint(-n, n - 1)
            size = int(ref.sequence_lengths[i])
            offset = rnd.choice([0, 0, 1, size, size + 1, rnd.randint(0, max(size, 1)), -1, -3,
                                 10**6])
            length = rnd.choice([None, None, 0, 1, size, size - offset, size + 2, -1, -2,
                                 rnd.randint(0, 10)])
            what = f"get {t}: ds.get({i}, offset={offset}, length={length}) (length {size})"
            got = outcome(lambda: ours.get(i, offset=offset, length=length))
            exp = outcome(lambda: ref.get(i, offset=offset, length=length))
            if isinstance(exp, type):
                check(got is exp, f"{what}: {got!r}, expected {exp.__name__}")
            else:
                same(got, exp, what)
        same(ours.get(0), ours[0], f"get {t}: get(0) is ds[0]")
        expect_raises(IndexError, lambda: ours.get(n), f"get {t}: idx {n}")
        expect_raises(ValueError, lambda: ours[0:n:2], f"slices {t}: step 2",
                      "Slices into indexed_dataset must be contiguous")
        expect_raises(ValueError, lambda: ours[::0], f"slices {t}: step 0")
    # Past the .bin: numpy.frombuffer's errors, as ValueError.
    golden = pileprep.IndexedDataset(os.path.join(ROOT, "tests", "data", "format", "hand_uint16"))
    expect_raises(ValueError, lambda: golden.get(0, offset=-1), "get before the .bin",
                  "offset must be non-negative and no greater than buffer length (28)")
    expect_raises(ValueError, lambda: golden.get(5, length=3), "get past the .bin",
                  "buffer is smaller than requested size")
    check(golden.get(4, offset=0, length=3).tolist() == [6, 7, 50256],
          "get reads on into the next sequence, as Megatron's does")
    check(golden[1:3][1].tolist() == [1, 2] and len(golden[2:2]) == 1 and len(golden[2:2][0]) == 0,
          "slices: sequences, and one empty array for an empty slice")


def test_mid_level_dataset_surplus(pileprep, writer, tmp):
    """GPTDataset(mid_level_dataset_surplus=...) is Megatron's config field of that name: the samples
    each dataset of a weighted blend is built for, kept through pickling; it was fixed at 0.005."""
    import pickle
    rnd = random.Random(13)
    prefixes = []
    for k in range(2):
        prefix = os.path.join(tmp, f"surplus{k}")
        writer.write(prefix, numpy.uint16, random_docs(rnd, numpy.uint16) * 2)
        prefixes.append(prefix)
    raw, num_samples, seq, s = [1, 3], 80, 5, 42
    weights = (numpy.array(raw, dtype=numpy.float64) / sum(raw)).tolist()
    data_path = " ".join(f"{r} {p}" for r, p in zip(raw, prefixes))

    def reference(surplus):
        parts = []
        for w, p in zip(weights, prefixes):
            ref_ds = RefIndexedDataset(p)
            asked = int(math.ceil(math.ceil(num_samples * w) * (1 + surplus)))
            parts.append(RefGPTDataset(ref_ds, numpy.arange(len(ref_ds), dtype=numpy.int32), seq,
                                       asked, s, 1))
        size = sum(int(math.ceil(num_samples * w)) for w in weights)
        again = (numpy.array(weights, dtype=numpy.float64) / numpy.sum(weights)).tolist()
        di, dsi = ref_blending_indices(again, size)
        return [parts[di[i]][dsi[i]] for i in range(size)]

    default = reference(0.005)
    for surplus in (0.0, 0.005, 0.5, 3):
        exp = reference(surplus)
        if surplus == 3:
            check(any(not numpy.array_equal(a, b) for a, b in zip(exp, default)),
                  "surplus 3 gives other samples than 0.005 (the check below can fail)")
        g = pileprep.GPTDataset(data_path, seq_length=seq, num_samples=num_samples, seed=s,
                                mid_level_dataset_surplus=surplus,
                                cache_dir=os.path.join(tmp, "surplus_cache"))
        for name, h in (("opened", g), ("unpickled", pickle.loads(pickle.dumps(g)))):
            check(len(h) == len(exp) and all(numpy.array_equal(h[i], exp[i]) for i in range(len(h))),
                  f"mid_level_dataset_surplus={surplus}: {name}: Megatron's samples")
    check(len(pileprep.GPTDataset(data_path, seq_length=seq, num_samples=num_samples, seed=s))
          == len(default), "mid_level_dataset_surplus: default 0.005")
    for bad in (-0.1, float("nan"), float("inf"), float("-inf"), 1e300):
        expect_raises(ValueError, lambda: pileprep.GPTDataset(
            data_path, seq_length=seq, num_samples=num_samples, mid_level_dataset_surplus=bad),
            f"mid_level_dataset_surplus={bad}")


def test_partial_sample_ending_on_an_empty_sequence(pileprep, writer, tmp):
    """Lengths [5, 0], 3 tokens a sample, the validation split's partial sample kept: the last row
    would be (1, -1), which Megatron's helpers.py asserts against (sample_idx.min() >= 0, int32);
    pileprep built it."""
    prefix = os.path.join(tmp, "empty_last")
    writer.write(prefix, numpy.uint16, [([0, 1, 2, 3, 4], [5]), ([], [0])])
    ref_ds = RefIndexedDataset(prefix)
    kw = dict(seq_length=3, split="0,1,0", split_index=1)
    check(outcome(lambda: RefGPTDataset(ref_ds, numpy.arange(2, dtype=numpy.int32), 3, None, 1234,
                                        1, drop_last=False)) is AssertionError,
          "empty last sequence: Megatron's reference asserts")
    expect_raises(RuntimeError, lambda: pileprep.GPTDataset(
        prefix, drop_last_partial_validation_sequence=False, **kw),
        "empty last sequence, partial sample kept", "sample_idx.min() >= 0")
    g = pileprep.GPTDataset(prefix, **kw)
    ref = RefGPTDataset(ref_ds, numpy.arange(2, dtype=numpy.int32), 3, None, 1234, 1)
    same(g.sample_index, ref.sample_index, "empty last sequence, partial sample dropped")


def test_readers_agree(pileprep, writer, tmp, cli, seed):
    """pileprep's CLI and Megatron's writer produce datasets both readers read identically."""
    rnd = random.Random(seed)
    words = ["the", "Pile", "naïve", "東京", "tokens", " ", "\n", "x" * 30, "😀", "EOD", "1234"]
    jsonl = os.path.join(tmp, "docs.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for _ in range(300):
            text = "".join(rnd.choice(words) + rnd.choice(["", " "]) for _ in range(rnd.randint(0, 60)))
            f.write(json.dumps({"text": text}) + "\n")
    prefix = os.path.join(tmp, "cli")
    subprocess.run([cli, "preprocess", "--input", jsonl, "--output-prefix", prefix, "--json-keys",
                    "text", "--append-eod", "--workers", "1", "-q"], check=True)
    pile = prefix + "_text_document"
    ours = pileprep.IndexedDataset(pile)
    ref = RefIndexedDataset(pile)
    check(len(ours) == len(ref), "cli dataset: len")
    check(ours.dtype == ref.dtype, "cli dataset: dtype")
    same(ours.sequence_lengths, ref.sequence_lengths, "cli dataset: sequence_lengths")
    same(ours.sequence_pointers, ref.sequence_pointers, "cli dataset: sequence_pointers")
    same(ours.document_indices, ref.document_indices, "cli dataset: document_indices")
    for i in range(len(ref)):
        if not numpy.array_equal(ours[i], ref.get(i)):
            same(ours[i], ref.get(i), f"cli dataset: sequence {i}")
            break
    # The same documents through Megatron's writer: identical bytes and identical samples.
    docs = []
    seq_i = 0
    di = ref.document_indices
    for d in range(len(di) - 1):
        seqs = [ref.get(j).tolist() for j in range(di[d], di[d + 1])]
        docs.append(([t for s in seqs for t in s], [len(s) for s in seqs]))
        seq_i += len(seqs)
    mega = os.path.join(tmp, "mega")
    writer.write(mega, numpy.uint16, docs)
    for ext in (".bin", ".idx"):
        with open(pile + ext, "rb") as a, open(mega + ext, "rb") as b:
            check(a.read() == b.read(), f"cli and Megatron writer: identical {ext}")
    m = pileprep.IndexedDataset(mega)
    check(all(numpy.array_equal(m[i], ours[i]) for i in range(len(m))), "both datasets read the same")
    ga = pileprep.GPTDataset(pile, seq_length=32, num_samples=500, split="969,30,1")
    gb = pileprep.GPTDataset(mega, seq_length=32, num_samples=500, split="969,30,1")
    rg = RefGPTDataset(ref, numpy.arange(*ga.sequence_range, dtype=numpy.int32), 32, 500, 1234, 1)
    check(len(ga) == len(gb) == len(rg), "cli dataset: GPT len")
    check(all(numpy.array_equal(ga[i], gb[i]) and numpy.array_equal(ga[i], rg[i])
              for i in range(len(ga))), "cli dataset: GPT samples equal the reference")


def test_view_and_errors(pileprep, tmp):
    golden = os.path.join(ROOT, "tests", "data", "format", "hand_uint16")
    ds = pileprep.IndexedDataset(golden)
    a = ds[0]
    check(a.dtype == numpy.uint16 and a.tolist() == [15496, 995, 50256], "view: sequence 0")
    check(not a.flags.owndata and not a.flags.writeable, "view: zero-copy and read-only")
    check(ds[-1].tolist() == ds[len(ds) - 1].tolist(), "view: negative index")
    same(ds.document_indices, numpy.array([0, 1, 1, 2, 5, 5, 6], dtype=numpy.int64), "view: documents")
    check(ds.dtype is numpy.uint16, "view: dtype")
    i32 = pileprep.IndexedDataset(os.path.join(ROOT, "tests", "data", "format", "hand_int32"))
    check(i32.dtype is numpy.int32 and i32[0].tolist() == [100000, 2147483647, 0], "view: int32")
    del ds
    check(a.tolist() == [15496, 995, 50256], "view outlives its dataset object")

    def raises(exc, fn, what):
        try:
            fn()
        except exc:
            return
        except Exception as e:  # noqa: BLE001
            check(False, f"{what}: raised {type(e).__name__}: {e}")
            return
        check(False, f"{what}: no exception")

    raises(FileNotFoundError, lambda: pileprep.IndexedDataset(os.path.join(tmp, "missing")), "missing")
    raises(IndexError, lambda: pileprep.IndexedDataset(golden)[6], "index")
    raises(ValueError, lambda: pileprep.GPTDataset(golden, seq_length=4, split="1.2.3"), "bad split")
    raises(ValueError, lambda: pileprep.GPTDataset(f"0.5 {golden} 0.5 {golden}", seq_length=4),
           "weighted blend without num_samples")
    raises(ValueError, lambda: pileprep.GPTDataset(f"1 {golden} 1 {golden}", seq_length=4,
                                                   num_samples=3).document_index, "blend indices")
    # Megatron's BlendedDataset asserts every weight > 0: a weight of 0 is refused, not built.
    raises(ValueError, lambda: pileprep.GPTDataset(f"0 {golden} 1 {golden}", seq_length=4,
                                                   num_samples=3), "blend weight 0")
    # Indices that do not fit in memory are a MemoryError, as numpy's would be (not RuntimeError,
    # not a crash): 2^34 samples of 1 token over 6 sequences, in a child whose address space is
    # limited to 4 GB (the same whatever the machine's overcommit policy).
    child = subprocess.run(
        [sys.executable, "-c", "import resource, sys, pileprep\n"
         "resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
         "try:\n"
         f"    pileprep.GPTDataset({golden!r}, seq_length=1, num_samples=2**34)\n"
         "except MemoryError as e:\n"
         "    print('MemoryError:', e); sys.exit(0)\n"
         "sys.exit(3)\n"],
        capture_output=True, text=True, timeout=120)
    check(child.returncode == 0 and "out of memory opening the dataset" in child.stdout,
          f"indices too large: MemoryError expected, got rc {child.returncode}: "
          f"{child.stdout}{child.stderr[-500:]}")
    bad = os.path.join(tmp, "bad")
    with open(golden + ".idx", "rb") as f:
        idx = bytearray(f.read())
    idx[17] = 7
    with open(bad + ".idx", "wb") as f:
        f.write(idx)
    with open(golden + ".bin", "rb") as f, open(bad + ".bin", "wb") as g:
        g.write(f.read())
    try:
        pileprep.IndexedDataset(bad)
        check(False, "bad dtype accepted")
    except ValueError as e:
        check("bad.idx: byte 17: dtype code 7" in str(e), f"bad dtype message: {e}")


def test_blending_refusals(pileprep):
    """blending_indices / exhaustive_blending_indices refuse what GptDataset refuses in a blend.

    Taken before: weight 0 or NaN gave picks from the wrong datasets, no weights with size > 0 read
    weights[0] of an empty list, and more than 32766 datasets wrapped the int16 dataset ids.
    """
    def refused(fn, want, what):
        try:
            fn()
        except ValueError as e:
            check(want in str(e), f"{what}: message {e!r} lacks {want!r}")
            return
        except Exception as e:  # noqa: BLE001
            check(False, f"{what}: raised {type(e).__name__}: {e}")
            return
        check(False, f"{what}: no ValueError")

    for w in (0.0, -1.0, float("nan"), float("inf")):
        refused(lambda: pileprep.blending_indices([1.0, w], 4), "is not finite > 0", f"weight {w}")
    refused(lambda: pileprep.blending_indices([], 3), "no weights", "no weights, size 3")
    refused(lambda: pileprep.blending_indices([1.0], -1), "size -1 < 0", "size -1")
    refused(lambda: pileprep.blending_indices([1.0] * 32767, 1), "at most 32766", "32767 weights")
    refused(lambda: pileprep.exhaustive_blending_indices([2, -1]), "size -1 of dataset 1 < 0",
            "negative size")
    refused(lambda: pileprep.exhaustive_blending_indices([1] * 32767), "at most 32766",
            "32767 sizes")
    refused(lambda: pileprep.exhaustive_blending_indices([2**62, 2**62, 2**62]), "overflows",
            "sizes past int64")
    # What stays allowed: no picks, and the largest number of datasets.
    di, dsi = pileprep.blending_indices([], 0)
    check(len(di) == len(dsi) == 0, "no weights, size 0: empty")
    di, _ = pileprep.blending_indices([1.0] * 32766, 2)
    check(di.tolist() == [0, 1], "32766 weights")


def test_blending_releases_the_gil(pileprep):
    """Another Python thread runs while the blending indices are built (a build of billions of
    picks held every thread of the process before)."""
    import threading
    builds = {
        "blending_indices": lambda: pileprep.blending_indices([1.0] * 1000, 300_000),
        "exhaustive_blending_indices": lambda: pileprep.exhaustive_blending_indices([100] * 1000),
    }
    interval = sys.getswitchinterval()
    # The worker keeps the GIL from the moment it wakes this thread until it blocks or releases
    # it: this thread runs before the build has returned only if the build released it.
    sys.setswitchinterval(100)
    try:
        for name, build in builds.items():
            state = {"returned": False}
            started = threading.Event()

            def work():
                started.set()
                build()
                state["returned"] = True

            t = threading.Thread(target=work)
            t.start()
            started.wait()
            ran_during_build = not state["returned"]
            t.join()
            check(ran_during_build, f"{name}: another thread ran during the build")
    finally:
        sys.setswitchinterval(interval)


def test_cache(pileprep, writer, tmp):
    rnd = random.Random(5)
    prefix = os.path.join(tmp, "cached")
    writer.write(prefix, numpy.uint16, random_docs(rnd, numpy.uint16) * 3)
    cache = os.path.join(tmp, "cache")
    kw = dict(seq_length=7, num_samples=400, seed=77, split="80,10,10", cache_dir=cache)
    a = pileprep.GPTDataset(prefix, **kw)
    b = pileprep.GPTDataset(prefix, **kw)
    check(not a.loaded_from_cache and b.loaded_from_cache, "cache: second open hits")
    for name in ("document_index", "sample_index", "shuffle_index"):
        same(getattr(b, name), getattr(a, name), f"cache: {name}")
        files = [f for f in os.listdir(cache) if f.endswith(f"-{name}.npy")]
        check(len(files) == 1, f"cache: one {name} file")
        same(numpy.load(os.path.join(cache, files[0])), getattr(a, name), f"cache: numpy reads {name}")
    check(not any(".tmp." in f for f in os.listdir(cache)), "cache: no temporaries left")
    # The arrays are read-only views of the mapped files, not copies, and keep what they view
    # alive: one stays valid after its dataset's last name is gone.
    kept = b.shuffle_index
    check(not kept.flags.writeable and not kept.flags.owndata, "cache: index arrays are read-only views")
    expected = numpy.array(a.shuffle_index)
    del b
    same(kept, expected, "cache: an index array outlives its dataset's name")
    c = pileprep.GPTDataset(prefix, **dict(kw, split_index=1))
    check(not c.loaded_from_cache, "cache: another split is another key")
    blend = f"0.4 {prefix} 0.6 {prefix}"
    bkw = dict(seq_length=7, num_samples=300, seed=77, cache_dir=cache)
    e = pileprep.GPTDataset(blend, **bkw)
    f = pileprep.GPTDataset(blend, **bkw)
    check(not e.blending_loaded_from_cache and f.blending_loaded_from_cache, "cache: blend hits")
    check(f.loaded_from_cache, "cache: a blend's datasets hit")
    # The first dataset's indices are cached (e's), the second's are not: not loaded from the cache.
    other = os.path.join(tmp, "cached_other")
    writer.write(other, numpy.uint16, random_docs(rnd, numpy.uint16) * 3)
    g = pileprep.GPTDataset(f"0.4 {prefix} 0.6 {other}", **bkw)
    check(not g.loaded_from_cache, "cache: a blend with one dataset built is not loaded from the cache")
    for name in ("dataset_index", "dataset_sample_index"):
        same(getattr(f, name), getattr(e, name), f"cache: blend {name}")
        check(not getattr(f, name).flags.owndata, f"cache: blend {name} is a view")
    for i in range(0, len(e), 37):
        same(f[i], e[i], f"cache: blend sample {i}")
    same(a.dataset_index, numpy.zeros(0, dtype=numpy.int16), "not a blend: empty int16 dataset_index")


def test_ctrl_c_ends_a_wait_for_another_ranks_build(pileprep, writer, tmp):
    """Ctrl-C (SIGINT) while GPTDataset waits on another process's build lock raises
    KeyboardInterrupt at once: the wait, the GIL released, went on until the other let go."""
    import signal
    import threading
    prefix = os.path.join(tmp, "interrupted")
    writer.write(prefix, numpy.uint16, random_docs(random.Random(9), numpy.uint16))
    cache = os.path.join(tmp, "interrupted_cache")
    kw = dict(seq_length=7, num_samples=50, seed=3, cache_dir=cache)
    pileprep.GPTDataset(prefix, **kw)
    for f in os.listdir(cache):  # built again: the lock files stay, the indices go
        if not f.endswith("lock"):
            os.unlink(os.path.join(cache, f))
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys, time\n"
         "d = sys.argv[1]\n"
         "held = [open(os.path.join(d, f), 'a') for f in os.listdir(d)]\n"
         "for h in held: fcntl.flock(h, fcntl.LOCK_EX)\n"
         "print(len(held), flush=True)\n"
         "time.sleep(20)\n", cache], stdout=subprocess.PIPE, text=True)
    try:
        check(int(holder.stdout.readline()) > 0, "interrupt: the holder holds the build locks")
        timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
        start = time.monotonic()
        timer.start()
        interrupted = False
        try:
            pileprep.GPTDataset(prefix, **kw)
        except KeyboardInterrupt:
            interrupted = True
        waited = time.monotonic() - start
        timer.join()
        check(interrupted, "interrupt: no KeyboardInterrupt")
        check(waited < 10, f"interrupt: raised after {waited:.1f} s, when the holder let go")
        # A daemon thread waiting on the lock while the main thread ends: the process exits with
        # its own status. The wait took the GIL every 0.1 s on any thread, to ask for signals, and
        # a thread taking it during finalization ended in std::terminate (SIGABRT).
        child = subprocess.run(
            [sys.executable, "-c",
             "import sys, threading, time\n"
             "sys.path.insert(0, sys.argv[1])\n"
             "import pileprep\n"
             "class Slow:\n"
             "    def __del__(self): time.sleep(1)  # a global slow to finalize\n"
             "slow = Slow()\n"
             "kw = dict(seq_length=7, num_samples=50, seed=3, cache_dir=sys.argv[3])\n"
             "threading.Thread(target=lambda: pileprep.GPTDataset(sys.argv[2], **kw), daemon=True).start()\n"
             "time.sleep(0.3)\n",
             os.path.dirname(os.path.dirname(pileprep.__file__)), prefix, cache],
            capture_output=True, text=True, timeout=60)
        check(child.returncode == 0,
              f"interrupt: a daemon thread waiting on the lock at exit: exit {child.returncode}, "
              f"{child.stderr.strip()[-200:]}")
    finally:
        holder.kill()
        holder.wait()
    ds = pileprep.GPTDataset(prefix, **kw)  # and then built as usual
    check(not ds.loaded_from_cache and len(ds) >= 50, "interrupt: built after the interrupted wait")


class _FakeTensor(numpy.ndarray):
    """numpy standing in for torch tensors in _megatron_sample (torch is not a test dependency)."""

    def contiguous(self):
        return self

    def unsqueeze(self, dim):
        return numpy.expand_dims(self, dim).view(_FakeTensor)


class _FakeTorch:
    float = numpy.float32
    long = numpy.int64

    @staticmethod
    def from_numpy(a):
        return numpy.array(a).view(_FakeTensor)

    @staticmethod
    def roll(t, shifts, dims):
        return numpy.roll(t, shifts, axis=dims).view(_FakeTensor)

    @staticmethod
    def ones(shape, dtype=None):
        return numpy.ones(shape, dtype=dtype).view(_FakeTensor)

    @staticmethod
    def arange(n, dtype=None):
        return numpy.arange(n, dtype=dtype).view(_FakeTensor)

    @staticmethod
    def tril(t):
        return numpy.tril(t).view(_FakeTensor)

    @staticmethod
    def zeros_like(t):
        return numpy.zeros_like(t).view(_FakeTensor)


def ref_megatron_sample(text, seq, extra, eod, eod_mask_loss, pad):
    """Megatron-core GPTDataset: _query_document_sample_shuffle_indices' padding, then __getitem__."""
    text = numpy.asarray(text, dtype=numpy.int64)
    if len(text) < seq + extra:
        text = numpy.concatenate([text, numpy.full(seq + extra - len(text), pad, dtype=numpy.int64)])
    if extra:
        tokens, labels = text[:-1].copy(), text[1:].copy()
    else:
        tokens, labels = text.copy(), numpy.roll(text, -1)
        labels[-1] = pad
    loss_mask = numpy.ones(len(tokens), dtype=numpy.float32)
    if eod_mask_loss:
        loss_mask[tokens == eod] = 0.0
    loss_mask[labels == pad] = 0.0
    tokens[tokens == pad] = 0
    labels[labels == pad] = 0
    return tokens, labels, loss_mask


def test_pickle(pileprep, writer, tmp):
    """A DataLoader's spawned workers get the datasets pickled: they open them again, alike."""
    import pickle

    # Subclasses: the attributes an instance set come along (they were dropped), and one whose
    # own __init__ takes other arguments is made through the pileprep class's (it failed:
    # "takes 2 positional arguments but 12 were given").
    global _PickledSub, _PickledSubOwnInit, _PickledIndexedSub

    class _PickledSub(pileprep.GPTDataset):
        pass

    class _PickledSubOwnInit(pileprep.GPTDataset):
        def __init__(self, path):
            super().__init__(path, seq_length=5, seed=11)
            self.tag = "own"

    class _PickledIndexedSub(pileprep.IndexedDataset):
        pass

    _PickledSub.__qualname__ = "_PickledSub"
    _PickledSubOwnInit.__qualname__ = "_PickledSubOwnInit"
    _PickledIndexedSub.__qualname__ = "_PickledIndexedSub"
    rnd = random.Random(9)
    a = os.path.join(tmp, "pickled_a")
    b = os.path.join(tmp, "pickled_b")
    writer.write(a, numpy.uint16, random_docs(rnd, numpy.uint16) * 2)
    writer.write(b, numpy.uint16, random_docs(rnd, numpy.uint16) * 2)
    d = pileprep.IndexedDataset(a)
    # Every protocol: protocols 0 and 1 aborted the interpreter (pybind11's pickling covers 2 and
    # up), so each runs in a child.
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        e = pickle.loads(pickle.dumps(d, protocol=protocol)) if protocol >= 2 else None
        if protocol < 2:
            child = subprocess.run(
                [sys.executable, "-c", "import pickle, sys, pileprep\n"
                 f"d = pileprep.IndexedDataset({a!r})\n"
                 f"g = pileprep.GPTDataset({a!r}, seq_length=5)\n"
                 f"e = pickle.loads(pickle.dumps(d, protocol={protocol}))\n"
                 f"h = pickle.loads(pickle.dumps(g, protocol={protocol}))\n"
                 "sys.exit(0 if len(e) == len(d) and (h[3] == g[3]).all() else 3)\n"],
                capture_output=True, text=True, timeout=120)
            check(child.returncode == 0,
                  f"pickle protocol {protocol}: rc {child.returncode}: {child.stderr[-300:]}")
            continue
        check(e.prefix == d.prefix and len(e) == len(d), f"pickle {protocol}: IndexedDataset")
        same(e[len(d) - 1], d[len(d) - 1], f"pickle {protocol}: IndexedDataset last sequence")
    sub = _PickledSub(a, seq_length=5, seed=3)
    sub.epoch = 4
    own = _PickledSubOwnInit(a)
    isub = _PickledIndexedSub(a)
    isub.note = "n"
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        s2 = pickle.loads(pickle.dumps(sub, protocol=protocol))
        check(type(s2) is _PickledSub and getattr(s2, "epoch", None) == 4 and
              len(s2) == len(sub) and (s2[7] == sub[7]).all(),
              f"pickle {protocol}: a GPTDataset subclass with its attributes")
        o2 = pickle.loads(pickle.dumps(own, protocol=protocol))
        check(type(o2) is _PickledSubOwnInit and o2.tag == "own" and (o2[7] == own[7]).all(),
              f"pickle {protocol}: a subclass with its own __init__")
        i2 = pickle.loads(pickle.dumps(isub, protocol=protocol))
        check(type(i2) is _PickledIndexedSub and i2.note == "n" and len(i2) == len(isub),
              f"pickle {protocol}: an IndexedDataset subclass with its attributes")
    for path in (f"0.3 {a} 0.7 {b}", ["0.3", a, "0.7", b], a):
        g = pileprep.GPTDataset(path, seq_length=5, num_samples=60, seed=3, split="90,5,5",
                                cache_dir=os.path.join(tmp, "pickle_cache"))
        h = pickle.loads(pickle.dumps(g))
        check(len(h) == len(g), f"pickle: GPTDataset {path!r} len")
        for i in range(len(g)):
            same(h[i], g[i], f"pickle: GPTDataset {path!r} sample {i}")
        check(h.loaded_from_cache, f"pickle: GPTDataset {path!r} reopened from the cache")


def test_python_edges(pileprep, tmp):
    """What Python code may do to the classes, answered as Python's own I/O and numpy answer it.

    Before: OS errors other than ENOENT/EACCES were RuntimeError without errno; a NUL in a path cut
    it short (another file opened, a cache directory made under another name); an instance made
    with __new__ alone crashed on use; an index past int64 was TypeError; a bytes prefix for a
    GPTDataset was read as a list of ints; blending_indices past memory was a cryptic ValueError.
    """
    golden = os.path.join(ROOT, "tests", "data", "format", "lcg300_uint16")
    plain = os.path.join(tmp, "edges_plain_file")
    with open(plain, "w"):
        pass

    def raised(fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            return e
        return None

    for what, fn, kind, err in (
            ("under a plain file", lambda: pileprep.IndexedDataset(plain + "/x"),
             NotADirectoryError, errno.ENOTDIR),
            ("name too long", lambda: pileprep.IndexedDataset(os.path.join(tmp, "a" * 5000)),
             OSError, errno.ENAMETOOLONG),
            ("missing", lambda: pileprep.IndexedDataset(os.path.join(tmp, "missing")),
             FileNotFoundError, errno.ENOENT),
            ("cache_dir a plain file", lambda: pileprep.GPTDataset(golden, 4, 10, cache_dir=plain),
             FileExistsError, errno.EEXIST),
            ("cache_dir under a plain file",
             lambda: pileprep.GPTDataset(golden, 4, 10, cache_dir=plain + "/sub"),
             NotADirectoryError, errno.ENOTDIR)):
        e = raised(fn)
        check(isinstance(e, kind) and e.errno == err,
              f"{what}: {kind.__name__} with errno {err} expected, got {type(e).__name__} "
              f"{getattr(e, 'errno', None)}: {e}")
    os.makedirs(os.path.join(tmp, "edges_dir.idx"), exist_ok=True)
    e = raised(lambda: pileprep.IndexedDataset(os.path.join(tmp, "edges_dir")))
    check(isinstance(e, IsADirectoryError), f"a directory named .idx: {type(e).__name__}: {e}")
    # A NUL ends a path for the system: refused, as open() refuses it.
    for what, fn in (("prefix", lambda: pileprep.IndexedDataset(golden + "\0junk")),
                     ("prefix naming the .idx", lambda: pileprep.IndexedDataset(golden + ".idx\0")),
                     ("blend", lambda: pileprep.GPTDataset(f"1 {golden}\0x 1 {golden}", 4, 10)),
                     ("cache_dir", lambda: pileprep.GPTDataset(
                         golden, 4, cache_dir=os.path.join(tmp, "nul\0dir")))):
        e = raised(fn)
        check(isinstance(e, ValueError) and "embedded null byte" in str(e),
              f"NUL in the {what}: {type(e).__name__}: {e}")
    check(not os.path.exists(os.path.join(tmp, "nul")), "NUL in cache_dir: a directory was made")
    # A path that is not UTF-8 is named in the message (it was empty).
    e = raised(lambda: pileprep.IndexedDataset(os.path.join(tmp, "bad\udcff").encode(
        "utf-8", "surrogateescape")))
    check(isinstance(e, FileNotFoundError) and "bad" in str(e), f"non-UTF-8 path: {e!r}")
    # Instances whose __init__ never ran: TypeError, not a crash (in a child, in case).
    child = subprocess.run(
        [sys.executable, "-c", "import pickle, sys, pileprep\n"
         "fails = 0\n"
         "for cls, uses in ((pileprep.IndexedDataset, (len, lambda o: o[0], lambda o: o[0:2],\n"
         "                   lambda o: o.get(0), lambda o: o.dtype, pickle.dumps)),\n"
         "                  (pileprep.GPTDataset, (len, lambda o: o[0], lambda o: o.is_blend,\n"
         "                   lambda o: o.document_index, pickle.dumps))):\n"
         "    for use in uses:\n"
         "        try:\n"
         "            use(cls.__new__(cls))\n"
         "            fails += 1\n"
         "        except TypeError as e:\n"
         "            fails += '__init__ was not called' not in str(e)\n"
         "# A method called through its class on another object (it crashed: self is untyped).\n"
         f"g = pileprep.GPTDataset({golden!r}, seq_length=4)\n"
         "for call in (lambda: pileprep.IndexedDataset.__len__(42),\n"
         "             lambda: pileprep.IndexedDataset.__reduce__(g),\n"
         "             lambda: pileprep.IndexedDataset.__getitem__(g, 0),\n"
         "             lambda: pileprep.GPTDataset.__len__('x')):\n"
         "    try:\n"
         "        call()\n"
         "        fails += 1\n"
         "    except TypeError:\n"
         "        pass\n"
         "sys.exit(fails)\n"],
        capture_output=True, text=True, timeout=120)
    check(child.returncode == 0, f"__new__ without __init__, or another self: rc {child.returncode}: "
          f"{child.stderr[-300:]}")
    ds = pileprep.IndexedDataset(golden)
    g = pileprep.GPTDataset(golden, seq_length=4)
    for what, fn in (("ds[2**63]", lambda: ds[2**63]), ("ds[-2**63 - 1]", lambda: ds[-2**63 - 1]),
                     ("g[2**63]", lambda: g[2**63])):
        e = raised(fn)
        check(isinstance(e, IndexError), f"{what}: {type(e).__name__}: {e}")
    h = pileprep.GPTDataset(golden.encode(), seq_length=4)
    check(len(h) == len(g) and all((h[i] == g[i]).all() for i in range(len(g))),
          "a bytes prefix opens the dataset, as a str one")
    e = raised(lambda: pileprep.blending_indices([1.0], 2**62))
    check(isinstance(e, MemoryError), f"blending_indices past memory: {type(e).__name__}: {e}")
    e = raised(lambda: pileprep.exhaustive_blending_indices([2**63 - 1]))
    check(isinstance(e, MemoryError) and "do not fit in memory" in str(e),
          f"exhaustive_blending_indices past memory: {type(e).__name__}: {e}")
    # An index or count that is not an integer is refused (TypeError, as Megatron's), not cut to
    # one: numpy.float32(1.7) read sequence 1 (pybind11 converted it through int()). numpy
    # integers are integers.
    import decimal
    for what, fn in (("ds[float32]", lambda: ds[numpy.float32(1.7)]),
                     ("ds[Decimal]", lambda: ds[decimal.Decimal("2.9")]),
                     ("g[float32]", lambda: g[numpy.float32(2.9)]),
                     ("ds.get offset float32", lambda: ds.get(1, numpy.float32(1.5))),
                     ("GPTDataset seq_length float32",
                      lambda: pileprep.GPTDataset(golden, numpy.float32(4.9), 5)),
                     ("blending_indices size float32",
                      lambda: pileprep.blending_indices([0.3, 0.7], numpy.float32(10.9))),
                     ("exhaustive_blending_indices float32 size",
                      lambda: pileprep.exhaustive_blending_indices([numpy.float32(3.5)])),
                     ("split_ranges float32", lambda: pileprep.split_ranges("1,1,1", numpy.float32(9.5)))):
        e = raised(fn)
        check(isinstance(e, TypeError), f"{what}: {type(e).__name__}: {e}")
    same(ds[numpy.int64(1)], ds[1], "numpy.int64 index")
    same(g[numpy.int32(2)], g[2], "numpy.int32 sample index")
    check(len(pileprep.GPTDataset(golden, numpy.int64(4), numpy.int64(5), seed=numpy.uint32(3))) ==
          len(pileprep.GPTDataset(golden, 4, 5, seed=3)), "numpy integers as GPTDataset arguments")


def test_sample_dict(pileprep):
    """The torch adapter's sample dict, with numpy standing in for torch: short samples padded,
    pad labels masked out of the loss and mapped to 0, as Megatron does."""
    import pileprep as package
    build = package._megatron_sample
    rnd = random.Random(7)
    for trial in range(200):
        seq = rnd.randint(1, 12)
        extra = rnd.randint(0, 1)
        n = rnd.randint(1, seq + extra)  # the last sample of a split may be short
        text = numpy.array([rnd.choice([5, 7, 50256, 11]) for _ in range(n)], dtype=numpy.int64)
        pad = rnd.choice([-1, 0, 7])
        eod_mask = rnd.random() < 0.5
        got = build(text, seq, bool(extra), 50256, eod_mask, pad, rnd.random() < 0.3, _FakeTorch)
        exp = ref_megatron_sample(text, seq, extra, 50256, eod_mask, pad)
        what = f"sample dict trial {trial} (seq {seq}, extra {extra}, {n} tokens, pad {pad})"
        check(len(got["tokens"]) == seq, what + ": length")
        same(numpy.asarray(got["tokens"]), exp[0], what + ": tokens")
        same(numpy.asarray(got["labels"]), exp[1], what + ": labels")
        same(numpy.asarray(got["loss_mask"]), exp[2], what + ": loss_mask")
        check(int(numpy.asarray(got["labels"]).min()) >= 0, what + ": a negative label")
    # TorchGPTDataset's item (torch stands in as above): Megatron-core's padding sample for idx
    # None (sample 0's tokens, no loss), and a blend's dataset_id first, as BlendedDataset's.
    golden = os.path.join(ROOT, "tests", "data", "format", "lcg300_uint16")
    g = package.GPTDataset(golden, seq_length=8)
    item = package._torch_sample
    plain = item(g, 0, 50256, False, -1, False, _FakeTorch)
    pad = item(g, None, 50256, False, -1, False, _FakeTorch)
    check("dataset_id" not in plain, "torch item: no dataset_id outside a blend")
    same(numpy.asarray(pad["tokens"]), numpy.asarray(plain["tokens"]), "torch item: None is sample 0's tokens")
    check(numpy.asarray(plain["loss_mask"]).any() and not numpy.asarray(pad["loss_mask"]).any(),
          "torch item: None's loss_mask is all 0, sample 0's is not")
    b = package.GPTDataset(f"0.5 {golden} 0.5 {golden}", seq_length=8, num_samples=40)
    for i in (0, 7, -1):
        got = item(b, i, 50256, False, -1, False, _FakeTorch)
        check(list(got)[0] == "dataset_id" and got["dataset_id"] == b.dataset_index[i] and
              got["dataset_id"].dtype == numpy.int16, f"torch item {i} of a blend: dataset_id first")
        same(numpy.asarray(got["tokens"]), b[i][:8], f"torch item {i} of a blend: tokens")


def test_readme_examples(pileprep):
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    m = re.search(r"<!-- loader-cpp-example -->\s*```cpp\n(.*?)```", readme, re.S)
    check(m is not None, "README: C++ loader example present")
    if m:
        with open(os.path.join(ROOT, "tests", "install", "consumer", "loader_example.cc")) as f:
            check(m.group(1) == f.read(),
                  "README's C++ example is tests/install/consumer/loader_example.cc (compiled by the "
                  "install test)")
    m = re.search(r"<!-- loader-python-example -->\s*```python\n(.*?)```", readme, re.S)
    check(m is not None, "README: Python loader example present")
    if m:
        cwd = os.getcwd()
        os.chdir(ROOT)
        try:
            exec(compile(m.group(1), "README.md", "exec"), {})
        finally:
            os.chdir(cwd)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cli", help="build/bin/pileprep, for datasets written by pileprep")
    parser.add_argument("--build-python", help="build/python (to tell 'not built' from 'broken')")
    parser.add_argument("--trials", type=int, default=250)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    if args.build_python and not os.path.exists(os.path.join(args.build_python, "pileprep")):
        print("pileprep Python module not built: skipped")
        return 77
    import pileprep

    seed = args.seed if args.seed is not None else random.randrange(2**31)
    print(f"seed {seed} (rerun with --seed {seed})")
    writer = load_megatron_writer()
    with tempfile.TemporaryDirectory() as tmp:
        test_vectors(pileprep, writer, tmp)
        test_view_and_errors(pileprep, tmp)
        test_randomized(pileprep, writer, tmp, args.trials, seed)
        test_random_blending(pileprep, seed)
        test_blending_refusals(pileprep)
        test_blending_releases_the_gil(pileprep)
        test_blended_dataset(pileprep, writer, tmp, seed)
        test_cache(pileprep, writer, tmp)
        test_ctrl_c_ends_a_wait_for_another_ranks_build(pileprep, writer, tmp)
        test_pickle(pileprep, writer, tmp)
        test_python_edges(pileprep, tmp)
        test_blend_list_is_stripped(pileprep, writer, tmp)
        test_indexed_dataset_slices_and_get(pileprep, writer, tmp, seed)
        test_mid_level_dataset_surplus(pileprep, writer, tmp)
        test_partial_sample_ending_on_an_empty_sequence(pileprep, writer, tmp)
        if args.cli:
            test_readers_agree(pileprep, writer, tmp, args.cli, seed)
        test_readme_examples(pileprep)
        test_sample_dict(pileprep)
    if hasattr(pileprep, "TorchGPTDataset"):
        print("torch adapter present")
    else:
        print("torch not importable: TorchGPTDataset not defined (as documented)")
    print("FAILED:" if FAILURES else "all loader checks passed", len(FAILURES) or "")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
