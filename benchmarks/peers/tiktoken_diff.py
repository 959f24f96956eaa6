#!/usr/bin/python3
"""pileprep's ids against tiktoken's GPT-2 encoding on generated adversarial texts.

Usage (scripts/tiktoken_diff.sh does the set-up, build and npm install):
  tiktoken_diff.py --pileprep build/bin/pileprep --binding TIKTOKEN.node [--texts N] [--seed S]
                   [--no-code-points] [--work DIR]

Each category below makes N texts (default 20,000); each category's texts are written twice as JSON
lines, once as json.dumps writes them with raw UTF-8 and once with escapes made by hand (upper- and
lower-case \\uXXXX, surrogate pairs, \\/), so pileprep's JSON stage is checked on both; then every
valid code point (U+0000..U+10FFFF, surrogates aside) in eleven contexts. `pileprep preprocess` (2
workers, no --append-eod) writes each batch; tiktoken_diff.js encodes the same texts with tiktoken's
Rust core and compares id by id. Exits 1 on any difference, error or count mismatch, printing the
first texts that differ.

The generators are those of a review of 2026-12-06 (2.74 M texts, 1.03 GB, no difference): whitespace
of every kind (the 25 of gpt2.md and look-alikes that are not), contractions in every case and their
near misses, runs of spaces before every kind of character and at 64-byte block edges, digits of
every script, letters and marks of every block, emoji sequences, private use, noncharacters, code
points new in Unicode 15.1 and 16.0, random bytes decoded with replacement, mutated real text, long
pieces at the cache's tier edges, and near-identical pieces that churn the cache. Texts never hold
<|endoftext|> (handled as a special token by both) and are never empty.
"""
import argparse
import glob
import json
import os
import random
import string
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ASCII_L = string.ascii_letters
DIG = string.digits
PUNCT = string.punctuation
WS_U = [' ', '\t', '\n', '\r', '\x0b', '\x0c', '\xa0', '\x85', '\u1680', '\u2028', '\u2029', '\u202f',
        '\u205f', '\u3000'] + [chr(c) for c in range(0x2000, 0x200B)]
NOT_WS = ['\x1c', '\x1d', '\x1e', '\x1f', '\u180e', '\ufeff', '\u200b', '\u200c', '\u200d', '\u200e',
          '\u200f', '\u00ad', '\u2060', '\x00', '\x7f', '\x01', '\x1b']
CONTR = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Re", "'rE", "'VE", "'vE", "'M",
         "'LL", "'Ll", "'lL", "'D", "\u2019s", "\u2019ll", "\u2019t", "'", "''", "'r", "'v", "'l", "'x", "'e",
         "'ss", "'tt", "'ree", "'lll", "'dd", "`s", "\u02bcs", "\uff07s"]
WORDS = ["I", "don", "can", "we", "they", "you", "it", "he", "She", "JOHN", "x", "a", "1", "42", "2024",
         "\u00e9t\u00e9", "na\u00efve", "\u0434\u0430", "\u4e2d\u6587", "\u3042", "\u0915\u093f", "\U0001F600"]
DIGS = ([chr(c) for c in range(0x30, 0x3A)] + [chr(c) for c in range(0x660, 0x66A)] +
        [chr(c) for c in range(0x6F0, 0x6FA)] + [chr(c) for c in range(0x966, 0x970)] +
        [chr(c) for c in range(0x9E6, 0x9F0)] + [chr(c) for c in range(0xE50, 0xE5A)] +
        [chr(c) for c in range(0xFF10, 0xFF1A)] + ['\u00b2', '\u00b3', '\u00b9', '\u00bc', '\u00bd', '\u00be'] +
        [chr(c) for c in range(0x2070, 0x208F)] + [chr(c) for c in range(0x2150, 0x218C)] +
        [chr(c) for c in range(0x2460, 0x2500)] + [chr(c) for c in range(0x2776, 0x2794)] +
        [chr(c) for c in range(0x3007, 0x3008)] + [chr(c) for c in range(0x3021, 0x302A)] +
        [chr(c) for c in range(0x3038, 0x303B)] + [chr(c) for c in range(0x3192, 0x3196)] +
        [chr(c) for c in range(0x3220, 0x322A)] + [chr(c) for c in range(0x3280, 0x328A)] +
        [chr(c) for c in range(0x1D7CE, 0x1D800)] + [chr(c) for c in range(0x10D40, 0x10D4A)] +
        [chr(c) for c in range(0x11F50, 0x11F5A)] + [chr(c) for c in range(0x1E950, 0x1E95A)] +
        [chr(c) for c in range(0x1F100, 0x1F10D)] + [chr(c) for c in range(0x16AC0, 0x16ACA)] +
        [chr(c) for c in range(0x1CCF0, 0x1CCFA)] + [chr(c) for c in range(0x116D0, 0x116E4)] +
        [chr(c) for c in range(0x1E4F0, 0x1E4FA)] + ['\u0f2a', '\u0f33', '\u09f4', '\u0bf0', '\u2cfd', '\U00010107'])
# script blocks (letters, marks, etc.)
BLOCKS = [(0x00C0, 0x0250), (0x0250, 0x0370), (0x0300, 0x0370), (0x0370, 0x0400), (0x0400, 0x0530),
          (0x0530, 0x0590), (0x0590, 0x0600), (0x0600, 0x0700), (0x0700, 0x0780), (0x0780, 0x07C0),
          (0x0800, 0x0900), (0x0900, 0x0980), (0x0980, 0x0A00), (0x0B80, 0x0C00), (0x0E00, 0x0E80),
          (0x0E80, 0x0F00), (0x0F00, 0x1000), (0x1000, 0x10A0), (0x10A0, 0x1100), (0x1100, 0x1200),
          (0x1200, 0x13A0), (0x13A0, 0x1400), (0x1680, 0x1700), (0x1700, 0x1800), (0x1800, 0x18B0),
          (0x1AB0, 0x1B00), (0x1C80, 0x1CC0), (0x1D00, 0x1DC0), (0x1DC0, 0x1E00), (0x1E00, 0x2000),
          (0x2000, 0x2070), (0x2070, 0x20D0), (0x20D0, 0x2100), (0x2100, 0x2200), (0x2C00, 0x2E00),
          (0x2E00, 0x2E80), (0x2E80, 0x3000), (0x3000, 0x3040), (0x3040, 0x3100), (0x3100, 0x3200),
          (0x3200, 0x3400), (0x3400, 0x4DC0), (0x4E00, 0x9FFF), (0xA000, 0xA4D0), (0xA4D0, 0xA800),
          (0xA800, 0xABFF), (0xAC00, 0xD7B0), (0xD7B0, 0xD800), (0xE000, 0xF900), (0xF900, 0xFB00),
          (0xFB00, 0xFE00), (0xFE00, 0xFE70), (0xFE70, 0xFF00), (0xFF00, 0xFFF0), (0xFFF0, 0x10000),
          (0x10000, 0x10400), (0x10400, 0x10900), (0x10900, 0x11000), (0x11000, 0x11800), (0x11800, 0x12000),
          (0x13000, 0x13460), (0x16000, 0x17000), (0x17000, 0x18D00), (0x1AFF0, 0x1B300), (0x1BC00, 0x1BCB0),
          (0x1CC00, 0x1CEC0), (0x1D000, 0x1D800), (0x1E000, 0x1E900), (0x1E900, 0x1EF00), (0x1F000, 0x1F300),
          (0x1F300, 0x1FB00), (0x1FB00, 0x1FC00), (0x20000, 0x2A6E0), (0x2A700, 0x2F800), (0x2F800, 0x2FA20),
          (0x30000, 0x323B0), (0xE0000, 0xE0080), (0xE0100, 0xE01F0), (0xF0000, 0xF0010), (0x10FFF0, 0x110000)]
NEW_16 = ([0x1C89, 0x1C8A, 0x2C2F, 0x2C5F, 0xA7CB, 0xA7CC, 0xA7CD, 0xA7DA, 0xA7DB, 0xA7DC, 0x10D4A, 0x10D4E, 0x10D4F,
           0x10D50, 0x10D65, 0x10D69, 0x10D6F, 0x10D70, 0x10EC2, 0x10EC4, 0x10EFC, 0x113B7, 0x113B8, 0x11B60, 0x11BC0,
           0x11BE1, 0x11BF0, 0x11F5A, 0x13460, 0x143FA, 0x16100, 0x1611E, 0x16130, 0x16139, 0x16D40, 0x16D43, 0x16D6B,
           0x16D70, 0x1CCD6, 0x1CCF0, 0x1CCFA, 0x1E5D0, 0x1E5F0, 0x1E5F1, 0x1E5FF, 0x2EBF0, 0x2EE5D, 0x31350, 0x323AF] +
          list(range(0x1E030, 0x1E070)) + list(range(0x10780, 0x107BB)) + list(range(0x1DF00, 0x1DF2B)) +
          list(range(0x0870, 0x08A0)) + list(range(0x1E4D0, 0x1E500)) + list(range(0x11F00, 0x11F5A)) +
          list(range(0x0CF0, 0x0CF4)) + list(range(0x1B11F, 0x1B133)) + list(range(0x1E290, 0x1E2C0)))
EMOJI = ['\U0001F600', '\U0001F468\u200d\U0001F469\u200d\U0001F467', '\u2764\ufe0f', '\U0001F44D\U0001F3FD',
         '\U0001F1FA\U0001F1F8', '\U0001F1E6', '\u0023\ufe0f\u20e3', '\U0001F3F4\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F',
         '\u2603', '\u00a9\ufe0f', '\U0001FAE8', '\U0001F9D1\u200d\U0001F4BB', '\u263a\ufe0e', '\U0001F9D1\U0001F3FF\u200d\U0001F91D\u200d\U0001F9D1\U0001F3FB']
SPECIAL = ['\ufffe', '\uffff', '\U0010FFFF', '\U0010FFFE', '\ufdd0', '\ufdef', '\U0001FFFE', '\ue000', '\uf8ff',
           '\U000F0000', '\U00100000', '\ufffd', '\u0378', '\u0380', '\U000E0001', '\U000E007F', '\u0600', '\u061c',
           '\u180e', '\ufeff', '\u200b', '\u00ad', '\u2066', '\u2069', '\U000E0020', '\u034f', '\u115f', '\u3164',
           '\uffa0', '\u2800', '\U0001D173']


def rcp(r):
    """random valid scalar from everywhere, weighted"""
    x = r.random()
    if x < 0.3:
        c = r.randrange(0x80, 0x800)
    elif x < 0.65:
        c = r.randrange(0x800, 0x10000)
    elif x < 0.8:
        c = r.randrange(0x10000, 0x40000)
    else:
        c = r.randrange(0x10000, 0x110000)
    if 0xD800 <= c < 0xE000:
        c = 0xFFFD
    return chr(c)


def blockchar(r):
    a, b = r.choice(BLOCKS)
    c = r.randrange(a, b)
    if 0xD800 <= c < 0xE000:
        c = 0x41
    return chr(c)


def fix(s):
    s = s.replace('<|endoftext|>', '<|endoftext |>')
    return s if s else 'x'


def g_ascii_ws(r):
    n = int(r.expovariate(1 / 80)) + 1
    w = [r.random() for _ in range(5)]
    pools = [ASCII_L, DIG, PUNCT, ' ', WS_U + NOT_WS[:8]]
    out = []
    for _ in range(n):
        p = r.choices(pools, w)[0]
        if p == ' ':
            out.append(' ' * r.choice([1, 1, 1, 2, 3, 4, 8, 17]))
        else:
            out.append(r.choice(p))
    return ''.join(out)


def g_contr(r):
    n = r.randint(1, 30)
    out = []
    for _ in range(n):
        x = r.random()
        if x < 0.35:
            out.append(r.choice(CONTR))
        elif x < 0.6:
            out.append(r.choice(WORDS))
        elif x < 0.75:
            out.append(' ' * r.choice([1, 1, 2, 3]))
        elif x < 0.85:
            out.append(r.choice(WS_U))
        elif x < 0.9:
            out.append(r.choice(DIG) * r.randint(1, 4))
        elif x < 0.95:
            out.append(r.choice(PUNCT))
        else:
            out.append(r.choice(DIGS + NOT_WS + EMOJI))
    return ''.join(out)


TERMS = None


def g_spaces(r):
    global TERMS
    if TERMS is None:
        TERMS = list(ASCII_L[:5]) + list(DIG[:3]) + list(PUNCT[:6]) + ['\n', '\t', '\r\n', "'s", "'ll", '\u3000',
                                                                       '\xa0', '\u4e2d', '\U0001F600', '\u0301', '\u00e9', '\u0660', '\u2028', '\x0b', '\x85', '']
    out = []
    for _ in range(r.randint(1, 6)):
        k = r.choice([0, 1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 66, 67, 68, 100, 127, 128, 129, 255, 256, 257, 300, r.randint(0, 400)])
        sp = r.choice([' ', ' ', ' ', '\t', '\n', '\xa0', '\u3000', None])
        if sp is None:
            s = ''.join(r.choice([' ', ' ', ' ', '\t', '\n', '\u3000', '\xa0', '\u2003']) for _ in range(k))
        else:
            s = sp * k
        out.append(s + r.choice(TERMS) + r.choice(['', 'word', '12', '!!', ' x']))
    return ''.join(out)


def g_digits(r):
    out = []
    for _ in range(r.randint(1, 12)):
        x = r.random()
        if x < 0.5:
            pool = r.choice([DIG, DIGS, DIGS[:10] + DIGS[10:40]])
            out.append(''.join(r.choice(pool) for _ in range(r.randint(1, 40))))
        elif x < 0.7:
            out.append(r.choice(ASCII_L) * r.randint(1, 3))
        elif x < 0.8:
            out.append(' ')
        elif x < 0.9:
            out.append(r.choice(PUNCT + "'"))
        else:
            out.append(r.choice(WS_U + ['\u00e9', '\u4e00', '\u0915\u093e', '\u0301', "'s"]))
    return ''.join(out)


def g_scripts(r):
    n = int(r.expovariate(1 / 60)) + 1
    nb = r.randint(1, 3)
    blocks = [r.choice(BLOCKS) for _ in range(nb)]
    out = []
    for _ in range(n):
        x = r.random()
        if x < 0.7:
            a, b = r.choice(blocks)
            c = r.randrange(a, b)
            out.append(chr(c) if not 0xD800 <= c < 0xE000 else 'a')
        elif x < 0.8:
            out.append(' ')
        elif x < 0.85:
            out.append(chr(r.randrange(0x300, 0x370)))
        elif x < 0.9:
            out.append(r.choice(ASCII_L + DIG + PUNCT))
        elif x < 0.95:
            out.append(r.choice(EMOJI + SPECIAL + [chr(c) for c in NEW_16[:60]]))
        else:
            out.append(r.choice(WS_U + CONTR))
    return ''.join(out)


def g_random(r):
    n = int(r.expovariate(1 / 50)) + 1
    mode = r.random()
    out = []
    for _ in range(n):
        x = r.random()
        if x < mode:
            out.append(rcp(r))
        elif x < mode + (1 - mode) * 0.5:
            out.append(r.choice(ASCII_L + DIG + PUNCT + " '"))
        elif x < mode + (1 - mode) * 0.8:
            out.append(r.choice(WS_U + NOT_WS + SPECIAL))
        else:
            out.append(chr(r.choice(NEW_16)))
    return ''.join(out)


def g_bytes(r):
    n = int(r.expovariate(1 / 60)) + 1
    mode = r.random()
    if mode < 0.3:
        b = bytes(r.randrange(256) for _ in range(n))
    elif mode < 0.6:
        b = bytes(r.choice([r.randrange(0x80, 0xC0), r.randrange(0xC0, 0x100), r.randrange(0x20, 0x7F), 0x20, 0x27])
                  for _ in range(n))
    else:
        # valid utf-8 of random text with a few byte-level corruptions
        s = ''.join(rcp(r) if r.random() < 0.5 else r.choice(ASCII_L + ' ') for _ in range(n)).encode('utf-8')
        b = bytearray(s)
        for _ in range(r.randint(1, 4)):
            if b:
                i = r.randrange(len(b))
                op = r.random()
                if op < 0.4:
                    del b[i]
                elif op < 0.7:
                    b[i] = r.randrange(256)
                else:
                    b.insert(i, r.randrange(0x80, 0x100))
        b = bytes(b)
    return b.decode('utf-8', 'replace')


_REAL = None


def real_docs():
    global _REAL
    if _REAL is None:
        _REAL = []
        for path in sorted(glob.glob(os.path.join(ROOT, 'data', 'samples', '*.jsonl.zst'))):
            out = subprocess.run(['zstd', '-q', '-d', '-c', path], capture_output=True, check=True).stdout
            for line in out.decode('utf-8').split('\n'):
                if line.strip():
                    t = json.loads(line)['text']
                    _REAL.append(''.join(ch if not 0xD800 <= ord(ch) < 0xE000 else '\ufffd' for ch in t))
    return _REAL


INSERTS = WS_U + NOT_WS + SPECIAL + EMOJI + CONTR + DIGS[::7] + [' ' * 5, ' ' * 70, '\u0301', '\u093f', '\u0e31', '\u02b0', '\uac00', '\u4e00', '\u30a2']


def g_real(r):
    docs = real_docs()
    d = r.choice(docs)
    L = r.choice([50, 100, 300, 1000, 3000])
    i = r.randrange(max(1, len(d) - L))
    s = list(d[i:i + L])
    for _ in range(r.randint(0, 8)):
        if not s:
            break
        j = r.randrange(len(s) + 1)
        op = r.random()
        if op < 0.6:
            s.insert(j, r.choice(INSERTS) if r.random() < 0.8 else chr(r.choice(NEW_16)))
        elif op < 0.8 and j < len(s):
            del s[j]
        elif j < len(s):
            s[j] = rcp(r)
    return ''.join(s)


B64 = string.ascii_letters + string.digits + '+/'


def g_long(r):
    k = r.random()
    L = r.choice([15, 16, 17, 63, 64, 65, 66, 67, 68, 127, 128, 129, 255, 256, 257, 258, 1000, 4096, 20000])
    if k < 0.15:
        return r.choice(ASCII_L) * L
    if k < 0.25:
        return r.choice(DIG) * L + r.choice(['', 'a', ' ', "'s"])
    if k < 0.35:
        return r.choice([' ', '\n', '\t', '\u3000', ' \n']) * L + r.choice(['', 'x', ' y', '\n', '1'])
    if k < 0.5:
        return ''.join(r.choice(B64) for _ in range(L))
    if k < 0.6:
        return r.choice(['\u4e2d', '\u3042', '\uac00', '\u0430', '\u00e9', '\U0001F600', '\u0301', 'ab', 'a\u0301']) * (L // 3 + 1)
    if k < 0.7:
        return ''.join(r.choice(PUNCT) for _ in range(L))
    if k < 0.8:
        return ''.join(r.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(L))
    if k < 0.9:
        return r.choice(['ab', 'abc', 'the', ' the', '==', '-=', '\u00e9a', '0x', 'ing']) * (L // 2 + 1)
    return ''.join(rcp(r) if r.random() < 0.3 else r.choice(ASCII_L) for _ in range(L))



TRIG = ["'s", "'ll", "'re", "'", "''s", " 's", "\u3000", "\u3000\u3000", " \u3000", "\xa0", "\u2028", "\x85", "  ", "   x", "\t\t",
        "\n\n", " \n", "\u00e9", "\u4e2d\u6587", "\u0301", "\U0001F600", "\U0001F468\u200d\U0001F469", "\u0660\u0661", "\u00b2",
        "1'", "a'", "\u2000\u2001", "\r\n", " \r\n ", "!'s", " \u0301", "\ufeff", "\u200b", "\x0b\x0c", "  \u3000 a"]
def g_block(r):
    L = r.randrange(0, 140)
    pre = r.choice([lambda: 'a' * L, lambda: ''.join(r.choice(ASCII_L) for _ in range(L)),
                    lambda: ''.join(r.choice(ASCII_L + '  ' + DIG) for _ in range(L)),
                    lambda: ' ' * L, lambda: ''.join(r.choice(PUNCT) for _ in range(L)),
                    lambda: ''.join(r.choice(['ab', ' cd', "'s", '12', '\u00e9', '!!', '\n']) for _ in range(L // 2))])()
    out = [pre]
    for _ in range(r.randint(1, 4)):
        out.append(r.choice(TRIG))
        out.append(''.join(r.choice(ASCII_L + ' ' + DIG) for _ in range(r.randrange(0, 80))))
    return ''.join(out)

def g_cache(r):
    base = r.choice(['!!', 'abcdefgh', ' abcdefghijklmn', ' abcdefghijklmno', '12345678', '\u00e9\u00e9\u00e9', '\u4e2d\u6587\u4e2d\u6587\u4e2d',
                     ' the', 'ing', '$$$$', "'", '!\x00', '\x00', '\x00\x00', ' \x00', '\x7f', 'x' * 15, 'x' * 16, ' ' + 'y' * 63, 'z' * 64, 'q' * 65,
                     'w' * 256, 'v' * 257, '\u0430' * 8, '\u0430' * 32, '\u0430' * 128])
    pieces = []
    for _ in range(r.randint(1, 20)):
        v = base
        op = r.random()
        if op < 0.3:
            v = v + r.choice(['\x00', '!', '.', '\x01', '\x7f', '\u0301', '\u00ad'])
        elif op < 0.5 and len(v) > 1:
            i = r.randrange(len(v)); v = v[:i] + r.choice(['\x00', 'a', 'b', '!']) + v[i + 1:]
        elif op < 0.6:
            v = v[:-1] or v
        pieces.append(v)
    sep = r.choice([' ', '\n', '\t', ' 1 ', '. ', '\u3000', 'A', '9'])
    return sep.join(pieces)


GENERATORS = dict(ascii_ws=g_ascii_ws, contractions=g_contr, spaces=g_spaces, digits=g_digits,
                  scripts=g_scripts, random=g_random, bytes=g_bytes, real=g_real, long=g_long,
                  block_edges=g_block, cache=g_cache)


def make(category, n, seed):
    r = random.Random(f'{category}:{seed}')
    return [fix(GENERATORS[category](r)) for _ in range(n)]


def code_point_texts():
    """Every valid code point in eleven contexts, twelve code points per text."""
    contexts = ["a{c}'s", "{c}{c}'s", " {c}x", "1{c}1", "x {c}{c} {c}", "{c}  {c}", "'{c}'s", "\u00e9{c}",
                "\u0660{c}\u0660", "{c}\t{c}", "!{c}!"]
    texts, cur = [], []
    for c in range(0x110000):
        if 0xD800 <= c < 0xE000:
            continue
        cur.append(''.join(x.format(c=chr(c)) for x in contexts))
        if len(cur) == 12:
            texts.append('\n'.join(cur))
            cur = []
    if cur:
        texts.append('\n'.join(cur))
    return [fix(t) for t in texts]


def escaped_line(text, r):
    """{"text": ...} with escapes made by hand: \\uXXXX in either case, surrogate pairs, \\/."""
    out = []
    for ch in text:
        c = ord(ch)
        x = r.random()
        if ch == '"':
            out.append('\\"')
        elif ch == '\\':
            out.append('\\\\')
        elif ch == '/' and x < 0.5:
            out.append('\\/')
        elif c < 0x20 or (x < 0.3 and c < 0x10000):
            out.append(('\\u%04X' if r.random() < 0.5 else '\\u%04x') % c)
        elif c >= 0x10000 and x < 0.5:
            v = c - 0x10000
            out.append('\\u%04X\\u%04x' % (0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF)))
        else:
            out.append(ch)
    return '{"text": "' + ''.join(out) + '"}'


def run_batch(args, name, texts, escaped):
    jsonl = os.path.join(args.work, name + '.jsonl')
    prefix = os.path.join(args.work, name)
    r = random.Random(name)
    with open(jsonl, 'w', encoding='utf-8') as f:
        for t in texts:
            f.write((escaped_line(t, r) if escaped else json.dumps({'text': t}, ensure_ascii=False)) + '\n')
    # --max-bad-records 0: a line pileprep skipped would shift every later document against its text,
    # and the comparison would blame ids; the run fails there instead, naming the line.
    p = subprocess.run([args.pileprep, 'preprocess', '--input', jsonl, '--output-prefix', prefix, '-q',
                        '--workers', '2', '--max-bad-records', '0'], capture_output=True, text=True)
    if p.returncode != 0:
        return {'name': name, 'failed': f'pileprep exited {p.returncode}: {p.stderr[-2000:]}'}
    c = subprocess.run(['node', '--max-old-space-size=4096', os.path.join(ROOT, 'benchmarks', 'peers',
                        'tiktoken_diff.js'), args.binding, jsonl, prefix], capture_output=True, text=True)
    if c.returncode != 0:
        return {'name': name, 'failed': f'tiktoken_diff.js exited {c.returncode}: {c.stderr[-2000:]}'}
    result = json.loads(c.stdout)
    result['name'] = name
    for path in (jsonl, prefix + '_text_document.bin', prefix + '_text_document.idx'):
        os.remove(path)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--pileprep', required=True)
    ap.add_argument('--binding', required=True, help="tiktoken's Node binding (scripts/tiktoken_peer.sh)")
    ap.add_argument('--texts', type=int, default=20000, help='texts per category (default 20000)')
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--no-code-points', action='store_true', help='skip the pass over every code point')
    ap.add_argument('--work', help='scratch directory (default: a temporary one)')
    args = ap.parse_args()
    tmp = None
    if args.work is None:
        tmp = tempfile.TemporaryDirectory()
        args.work = tmp.name
    batches = []
    for category in GENERATORS:
        texts = make(category, args.texts, args.seed)
        batches.append((category, texts, False))
        batches.append((category + '_escaped', texts, True))
    if not args.no_code_points:
        texts = code_point_texts()
        batches.append(('code_points', texts, False))
        batches.append(('code_points_escaped', texts, True))
    bad = 0
    total_texts = total_bytes = total_tokens = 0
    print(f"{'batch':24} {'texts':>8} {'MB':>8} {'tokens':>10} {'differ':>7}")
    for name, texts, escaped in batches:
        res = run_batch(args, name, texts, escaped)
        if 'failed' in res:
            print(f'{name:24} FAILED: {res["failed"]}')
            bad += 1
            continue
        total_texts += res['texts']
        total_bytes += res['bytes']
        total_tokens += res['tokens']
        wrong = res['differ'] + res['errors'] + (res['documents'] != len(texts)) + (res['texts'] != len(texts))
        print(f"{name:24} {res['texts']:8d} {res['bytes'] / 1e6:8.1f} {res['tokens']:10d} {res['differ']:7d}"
              + ('' if res['documents'] == len(texts) else f"  documents {res['documents']} of {len(texts)}")
              + (f"  tiktoken errors {res['errors']}" if res['errors'] else ''), flush=True)
        for d in res['first'][:5]:
            text = json.dumps(d['text'], ensure_ascii=True)
            print(f"  line {d['line']}: {text[:300]}{'...' if len(text) > 300 else ''}")
            if 'error' in d:
                print(f"    tiktoken: {d['error']}")
            else:
                print(f"    ids differ from id {d['id']} (pileprep {d['ids'][0]} ids, tiktoken {d['ids'][1]});"
                      f" from id {max(0, d['id'] - 4)}: pileprep {d['pileprep']}, tiktoken {d['tiktoken']}")
        bad += wrong > 0
    print(f'{total_texts} texts, {total_bytes / 1e6:.1f} MB of UTF-8, {total_tokens} tokens: '
          + ('the same ids' if bad == 0 else f'{bad} batch(es) differ or failed'))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
