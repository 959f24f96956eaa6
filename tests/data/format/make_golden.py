#!/usr/bin/python3
"""Writes the golden .bin/.idx pairs of tests/unit/indexed_dataset_test.cc.

The builder below is Megatron-LM's IndexedDatasetBuilder and _IndexWriter
(megatron/core/datasets/indexed_dataset.py), transcribed without torch and without the multimodal
branch: numpy arrays written with tobytes(), header fields with struct.pack. The documents are those
tools/preprocess_data.py passes to add_document(tokens, sentence_lens). The C++ test builds the same
documents (the same literal lists and the same LCG) with pileprep's writer and compares bytes.

Run once from the repository root:  /usr/bin/python3 tests/data/format/make_golden.py
"""
import os
import struct

import numpy

_INDEX_HEADER = b"MMIDIDX\x00\x00"
_DTYPE_CODES = {numpy.int32: 4, numpy.uint16: 8}


class _IndexWriter:
    def __init__(self, idx_path, dtype):
        self.idx_path = idx_path
        self.dtype = dtype

    def __enter__(self):
        self.idx_writer = open(self.idx_path, "wb")
        self.idx_writer.write(_INDEX_HEADER)
        self.idx_writer.write(struct.pack("<Q", 1))
        self.idx_writer.write(struct.pack("<B", _DTYPE_CODES[self.dtype]))
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.idx_writer.close()

    def write(self, sequence_lengths, document_indices):
        sequence_pointers = self._sequence_pointers(sequence_lengths)
        self.idx_writer.write(struct.pack("<Q", len(sequence_lengths)))
        self.idx_writer.write(struct.pack("<Q", len(document_indices)))
        self.idx_writer.write(numpy.array(sequence_lengths, dtype=numpy.int32).tobytes(order="C"))
        self.idx_writer.write(numpy.array(sequence_pointers, dtype=numpy.int64).tobytes(order="C"))
        self.idx_writer.write(numpy.array(document_indices, dtype=numpy.int64).tobytes(order="C"))

    def _sequence_pointers(self, sequence_lengths):
        itemsize = numpy.dtype(self.dtype).itemsize
        curr_ptr = 0
        list_ptr = []
        for length in sequence_lengths:
            list_ptr.append(curr_ptr)
            curr_ptr += length * itemsize
        return list_ptr


class IndexedDatasetBuilder:
    def __init__(self, bin_path, dtype):
        self.data_file = open(bin_path, "wb")
        self.dtype = dtype
        self.sequence_lengths = []
        self.document_indices = [0]

    def add_document(self, tensor, lengths):
        np_array = numpy.array(tensor, dtype=self.dtype)
        self.data_file.write(np_array.tobytes(order="C"))
        self.sequence_lengths.extend(lengths)
        self.document_indices.append(len(self.sequence_lengths))

    def finalize(self, idx_path):
        self.data_file.close()
        with _IndexWriter(idx_path, self.dtype) as writer:
            writer.write(self.sequence_lengths, self.document_indices)


# (tokens, sequence lengths) per document; [] / [] is an empty text (no sequence, repeated index).
HAND_UINT16 = [
    ([15496, 995, 50256], [3]),
    ([], []),
    ([0, 65535, 50256], [3]),
    ([1, 2, 3, 4, 5, 6], [2, 3, 1]),
    ([], []),
    ([7, 50256], [2]),
]
HAND_INT32 = [
    ([100000, 2147483647, 0], [3]),
    ([], []),
    ([5, 6, 7, 8], [1, 3]),
    ([65536, 50256], [2]),
]


def lcg_documents(count, seed):
    """Documents of 0..40 GPT-2 ids (EOD-terminated when non-empty), from a 64-bit LCG."""
    mask = (1 << 64) - 1
    x = seed

    def next_value():
        nonlocal x
        x = (x * 6364136223846793005 + 1442695040888963407) & mask
        return x >> 33

    docs = []
    for _ in range(count):
        n = next_value() % 41
        if n == 0:
            docs.append(([], []))
            continue
        tokens = [next_value() % 50257 for _ in range(n - 1)] + [50256]
        docs.append((tokens, [n]))
    return docs


def write(prefix, dtype, docs):
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype)
    for tokens, lengths in docs:
        builder.add_document(tokens, lengths)
    builder.finalize(prefix + ".idx")


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    write(os.path.join(here, "hand_uint16"), numpy.uint16, HAND_UINT16)
    write(os.path.join(here, "hand_int32"), numpy.int32, HAND_INT32)
    write(os.path.join(here, "lcg300_uint16"), numpy.uint16, lcg_documents(300, 2024))
