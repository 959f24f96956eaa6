#!/usr/bin/env python3
"""Writes the seed corpus of the .idx fuzzer: sound pairs from tests/data/format and one of each
corruption kind the validator reports. Entry layout: u32 LE n | (n & 0x7FFFFFFF) bytes of .idx | .bin;
n's top bit turns on the EOD check."""
import os, struct
here = os.path.dirname(os.path.abspath(__file__))
fmt = os.path.join(here, '..', '..', 'data', 'format')
out = os.path.join(here, 'idx')
os.makedirs(out, exist_ok=True)

def entry(name, idx, bin_, eod=False):
    n = len(idx) | (0x80000000 if eod else 0)
    with open(os.path.join(out, name), 'wb') as f:
        f.write(struct.pack('<I', n) + idx + bin_)

def load(stem):
    return (open(os.path.join(fmt, stem + '.idx'), 'rb').read(),
            open(os.path.join(fmt, stem + '.bin'), 'rb').read())

for stem in ('hand_uint16', 'hand_int32', 'lcg300_uint16'):
    idx, b = load(stem)
    entry(stem, idx, b)
    entry(stem + '_eod', idx, b, eod=True)

idx, b = load('hand_uint16')
S = struct.unpack_from('<Q', idx, 18)[0]
D1 = struct.unpack_from('<Q', idx, 26)[0]
def patch(fmtc, off, v):
    i = bytearray(idx); struct.pack_into(fmtc, i, off, v); return bytes(i)
entry('bad_magic', b'X' + idx[1:], b)
entry('version_2', patch('<Q', 9, 2), b)
entry('dtype_7', patch('<B', 17, 7), b)
entry('dtype_6', patch('<B', 17, 6), b)
entry('idx_truncated', idx[:-3], b)
entry('idx_header_only', idx[:20], b'')
entry('idx_trailing', idx + b'\x00' * S, b)
entry('huge_counts', patch('<Q', 18, 2**62), b)
entry('bin_long', idx, b + b'\x01\x00')
entry('bin_short', idx, b[:-2])
entry('pointer_off', patch('<q', 34 + 4 * S + 8 * (S - 1), struct.unpack_from('<q', idx, 34 + 4 * S + 8 * (S - 1))[0] + 2), b)
entry('pointer_far', patch('<q', 34 + 4 * S, 2**62), b)
entry('negative_length', patch('<i', 34, -1), b)
entry('zero_length', patch('<i', 34, 0), b)
entry('doc_end', patch('<q', 34 + 12 * S + 8 * (D1 - 1), S + 5), b)
entry('doc_order', patch('<q', 34 + 12 * S + 8 * (D1 - 1), -1), b)
entry('token_range', idx, b'\xff\xff' + b[2:])
entry('empty', b'', b'')
