#!/usr/bin/python3
"""Writes the expected outcome of every line of the JSON-lines test inputs, from Python itself.

Megatron's preprocess_data.py does `json.loads(line)[key]`; on top of that pileprep's policies
(docs/gpt2.md §4): lines split on b'\n' with one trailing b'\r' removed; empty or whitespace-only lines
are blank; raw invalid UTF-8 -> U+FFFD per maximal invalid subsequence (bytes.decode 'replace'); lone
surrogates left by json.loads -> U+FFFD. One output line per input line:

    <line number> TAB <outcome> TAB <text bytes> TAB <FNV-1a 64 of the text, hex> TAB <utf8 fixes> TAB <surrogate fixes>

<outcome> is "ok" or a BadRecordKind name; text fields are 0/0 for bad records.

Usage: tests/data/jsonl/make_expected.py   (from anywhere; rewrites tests/data/jsonl/*.expected)
       make_expected.py --classify FILE    (prints the outcome lines for the raw lines of FILE; the
                                            differential test in tests/unit/jsonl_test.cc uses it)
"""
import codecs
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(DATA))
INPUTS = [os.path.join(DATA, 'bad', n + '.jsonl.zst') for n in (
    'multi-frame', 'skippable-frames', 'invalid-json', 'missing-text', 'text-not-string', 'invalid-utf8',
    'lone-surrogates', 'json-escapes', 'crlf', 'crlf-lf-twin', 'blank-lines', 'no-final-newline',
    'empty-and-tiny-texts', 'long-lines')] + [os.path.join(ROOT, 'data', 'samples', n) for n in (
    '00.jsonl.zst', '01.jsonl.zst')]

fixes = [0]


def counting_replace(exc):
    fixes[0] += 1
    return ('\ufffd', exc.end)


codecs.register_error('pileprep_count', counting_replace)
SURROGATE = re.compile('[\ud800-\udfff]')


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return h


def count_surrogates(value):
    if isinstance(value, str):
        return len(SURROGATE.findall(value))
    if isinstance(value, list):
        return sum(count_surrogates(v) for v in value)
    if isinstance(value, dict):
        return sum(count_surrogates(k) + count_surrogates(v) for k, v in value.items())
    return 0


def outcome(raw):
    if raw.endswith(b'\r'):
        raw = raw[:-1]
    if raw.strip(b' \t\r\n') == b'':
        return 'blank line', None, 0, 0
    fixes[0] = 0
    s = raw.decode('utf-8', 'pileprep_count')
    utf8_fixes = fixes[0]
    try:
        obj = json.loads(s)
    except (ValueError, RecursionError):
        return 'invalid JSON', None, utf8_fixes, 0
    surrogates = count_surrogates(obj)
    if not isinstance(obj, dict):
        return 'not an object', None, utf8_fixes, surrogates
    if 'text' not in obj:
        return 'missing key', None, utf8_fixes, surrogates
    if not isinstance(obj['text'], str):
        return 'not a string', None, utf8_fixes, surrogates
    return 'ok', SURROGATE.sub('\ufffd', obj['text']).encode('utf-8'), utf8_fixes, surrogates


def write_outcomes(lines, out):
    for number, line in enumerate(lines, 1):
        kind, text, utf8_fixes, surrogates = outcome(line)
        size = len(text) if text is not None else 0
        digest = fnv1a64(text) if text is not None else 0
        out.write(f'{number}\t{kind}\t{size}\t{digest:016x}\t{utf8_fixes}\t{surrogates}\n')


def split_lines(data):
    lines = data.split(b'\n')
    if lines and lines[-1] == b'':
        lines.pop()
    return lines


def main():
    if len(sys.argv) == 3 and sys.argv[1] == '--classify':
        with open(sys.argv[2], 'rb') as f:
            write_outcomes(split_lines(f.read()), sys.stdout)
        return
    for path in INPUTS:
        data = subprocess.run(['zstd', '-dc', path], check=True, capture_output=True).stdout
        lines = split_lines(data)
        name = os.path.basename(path).replace('.jsonl.zst', '')
        if 'samples' in path:
            name = 'sample-' + name
        with open(os.path.join(HERE, name + '.expected'), 'w') as out:
            write_outcomes(lines, out)


if __name__ == '__main__':
    main()
