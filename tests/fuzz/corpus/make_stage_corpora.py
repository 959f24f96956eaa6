#!/usr/bin/env python3
"""Writes the seed corpora of the zstd, jsonl, tokenizer and pipeline fuzzers (tests/fuzz/*_fuzz_target.h
give the layouts: zstd = window byte | chunk-seed byte | stream; jsonl = option byte | chunk-seed byte |
lines; tokenizer = flag byte | text; pipeline = flag byte | batch byte | read-size byte | flag byte | lines).
Needs the zstd and gzip programs. Deterministic."""
import gzip, os, struct, subprocess
here = os.path.dirname(os.path.abspath(__file__))
bad = os.path.join(here, '..', '..', 'data', 'bad')

def write(corpus, name, data):
    d = os.path.join(here, corpus)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)

def zstd(data, *args):
    return subprocess.run(['zstd', '-q', '-c', *args], input=data, stdout=subprocess.PIPE,
                          check=True).stdout

# ---- zstd: window byte 17 -> window_log_max 27 (the default); 0 -> 10 (tiny).
W27, W10 = bytes([17]), bytes([0])
lines = b''.join(b'{"text": "document %d \\u00e9 caf\\u00e9"}\n' % i for i in range(40))
frame = zstd(lines)
write('zstd', 'one_frame', W27 + b'\x01' + frame)
write('zstd', 'one_frame_other_chunks', W27 + b'\x9c' + frame)
write('zstd', 'two_frames', W27 + b'\x02' + frame + zstd(b'{"text": "x"}\n'))
write('zstd', 'empty_frame', W27 + b'\x03' + zstd(b''))
write('zstd', 'empty_file', W27 + b'\x04')
write('zstd', 'skippable_then_frame', W27 + b'\x05' + struct.pack('<II', 0x184D2A50, 5) + b'hello' + frame)
write('zstd', 'only_skippable', W27 + b'\x06' + struct.pack('<II', 0x184D2A5F, 0))
write('zstd', 'truncated', W27 + b'\x07' + frame[:len(frame) // 2])
write('zstd', 'trailing_garbage', W27 + b'\x08' + frame + b'garbage\n')
write('zstd', 'bitflip', W27 + b'\x09' + frame[:20] + bytes([frame[20] ^ 0x10]) + frame[21:])
write('zstd', 'gzip_under_zst', W27 + b'\x0a' + gzip.compress(lines, mtime=0))
write('zstd', 'plain_under_zst', W27 + b'\x0b' + lines[:300])
# Streamed from a pipe (no content size), the frame keeps its 2^20 window: above a 2^10 limit.
big_window = subprocess.run(['sh', '-c', 'printf "%s" "$0" | zstd -q -c --zstd=wlog=20', lines.decode()],
                            stdout=subprocess.PIPE, check=True).stdout
write('zstd', 'window_above_limit', W10 + b'\x0c' + big_window)
write('zstd', 'window_within_limit', W27 + b'\x0c' + big_window)
# A frame that needs dictionary 1: FHD 0x21 (single segment, 1-byte dictionary id), FCS 5, one
# raw last block of 5 bytes.
write('zstd', 'needs_dictionary', W27 + b'\x0d' + b'\x28\xb5\x2f\xfd\x21\x01\x05' +
      bytes([(5 << 3) | 1, 0, 0]) + b'hello')
write('zstd', 'with_checksum', W27 + b'\x0e' + zstd(lines, '--check'))
# A frame stating 200 bytes of content over an empty last block (and the checksum of no bytes):
# damage, which libzstd 1.5.4 does not see when fed block by block.
write('zstd', 'content_size_wrong', W27 + b'\x10' + frame +
      b'\x28\xb5\x2f\xfd\x24\xc8\x01\x00\x00\x99\xe9\xd8\x51')
for name in ('multi-frame', 'crlf', 'invalid-utf8', 'empty-and-tiny-texts'):
    write('zstd', 'bad_' + name, W27 + b'\x0f' + open(os.path.join(bad, name + '.jsonl.zst'), 'rb').read())

# ---- jsonl: option byte 0 = keys {"text"}, 1 = {"text", "meta"}, 2 = max_line_bytes 64.
J = {
    'valid': b'{"text": "hello world"}\n{"text": "", "meta": {"a": 1}}\n',
    'two_keys': b'{"text": "a", "meta": "b"}\n{"meta": "only"}\n',
    'escapes': b'{"text": "tab\\t nl\\n quote\\" bs\\\\ u\\u00e9 pair\\ud83d\\ude00 nul\\u0000"}\n',
    'lone_surrogates': b'{"text": "\\ud800 \\udc00 \\udc00\\ud800 \\ud83d"}\n',
    'invalid_utf8': b'{"text": "a\xff\xfe b\xc3 c\xe2\x82 d\xf0\x9f\x98"}\n{"te\xffxt": "k"}\n',
    'nan_infinity': b'{"text": "x", "n": NaN, "i": Infinity, "m": -Infinity, "big": 1e400, "int": 123456789012345678901234567890}\n',
    'raw_control': b'{"text": "a\x01b"}\n{"text": "tab\there"}\n',
    'deep_nesting': b'{"text": "x", "d": ' + b'[' * 1100 + b']' * 1100 + b'}\n' + b'[' * 5000 + b'\n',
    'duplicate_keys': b'{"text": "first", "text": "second"}\n{"text": 1, "text": "s"}\n{"text": "s", "text": 1}\n',
    'bom': b'\xef\xbb\xbf{"text": "after a BOM"}\n',
    'utf16': '{"text": "utf-16"}\n'.encode('utf-16'),
    'rfc_violations': b"{'text': 'single'}\n{\"text\": \"x\",}\n{text: \"x\"}\n{\"text\": \"x\"} trailing\n{\"text\": 01}\n{\"text\": .5}\n{\"text\": +1}\n{\"text\": \"\\x41\"}\n{\"text\": \"\\u12\"}\n[\"text\"]\n\"text\"\nnull\n{\"text\" \"x\"}\n",
    'not_string': b'{"text": null}\n{"text": 5}\n{"text": ["a"]}\n{"text": {"a": 1}}\n{"text": true}\n',
    'blank_and_crlf': b'\n   \n\t\r\n{"text": "crlf"}\r\n{"text": "cr\\r"}\r\r\n',
    'no_final_newline': b'{"text": "one"}\n{"text": "two"}',
    'whitespace_everywhere': b' \t{ "text" \t: \r "x" , "k" : [ 1 , 2 ] } \t\n',
    'escaped_key': b'{"te\\u0078t": "key by escape"}\n',
}
opts = {'two_keys': 1}
for i, (name, data) in enumerate(sorted(J.items())):
    write('jsonl', name, bytes([opts.get(name, 0), i]) + data)
write('jsonl', 'long_line_small_limit', bytes([2, 99]) + b'{"text": "' + b'x' * 200 + b'"}\n{"text": "y"}\n')

# ---- tokenizer: flag byte 0 = <|endoftext|> special, 1 = ordinary.
T = {
    'english': "Hello world! It's a test: don't, we'll, I'd've 12345 tokens.",
    'whitespace': "a  b   c\t\td\n\n\ne \u00a0 f\u3000g   \n  \n",
    'unicode': "caf\u00e9 na\u00efve \u4f60\u597d\u4e16\u754c \U0001f600\U0001f44d\U0001f3fd \u0915\u094d\u0937 \u05e9\u05dc\u05d5\u05dd",
    'endoftext': "a<|endoftext|>b <|endoftext|><|endoftext|> <|endoftext| <|end",
    'numbers': "1234567890 3.14159 1e10 0x1F 000123",
    'repeated_char': "a" * 3000,
    'repeated_pair': "ab" * 1500,
    'repeated_space': " " * 2000 + "x",
    'code': "def f(x):\n    return x**2  # comment\n\tif (a&&b) { c->d[i] = 'e'; }\n",
    'replacement': "\ufffd\ufffd x \ufffd",
    'contractions': "'s 't 're 've 'm 'll 'd 'S 'T ''' 'x",
    'nul_and_controls': "a\x00b\x01c\x7f d",
}
for name, text in sorted(T.items()):
    write('tokenizer', name, b'\x00' + text.encode())
    write('tokenizer', name + '_ordinary', b'\x01' + text.encode())
write('tokenizer', 'invalid_utf8_bytes', b'\x00' + b'ok \xff\xfe \xc3 \xed\xa0\x80 \xf4\x90\x80\x80 end')

# ---- pipeline: flag byte (bits 0-1 threads, 2 zstd, 3 keys text+meta, 4 EOD, 5 max_line_bytes 64,
# 6 at most 2 bad records, 7 zstd decoded in the read stage) | batch byte | read-size byte | byte of more
# flags (bit 0: plain input through View(), as a mapped file; 1: 2 bad records kept, not 100; 2: one batch
# in flight; 3: with zstd, the rest is zstd as it is; 4: with bit 5 of the first, max_line_bytes 16; 5: the
# view with kPadding bytes of slack; 6: cancelled before the run, 7: with 6, when its third batch is
# reported) | lines.
docs = b''.join(b'{"text": "document %d: caf\\u00e9 \\u4f60\\u597d, it\'s %d tokens.", "meta": "m%d"}\n'
                % (i, i * 7, i) for i in range(30))
mixed = (b'{"text": "good one"}\n\n{"text": 5}\nnot json\n{"text": "bad \xff utf8 \\ud800"}\n'
         b'{"meta": "no text"}\n{"text": ""}\n{"text": "<|endoftext|> inside"}\n{"text": "last, no newline"}')
long_lines = b'{"text": "' + b'y' * 300 + b'"}\n{"text": "short"}\n' + b'{"text": "' + b'z ' * 100 + b'"}\n'
P = {
    'docs_one_thread_whole': (0x10, 255, 255, docs),
    'docs_two_threads_tiny_batches': (0x11, 0, 0, docs),
    'docs_three_threads_odd_reads': (0x12, 3, 5, docs),
    'docs_zstd_two_threads': (0x15, 2, 1, docs),
    'docs_zstd_decoded_in_read_stage': (0x95, 4, 9, docs),
    'docs_two_keys': (0x19, 1, 2, docs),
    'mixed_bad_records': (0x11, 1, 1, mixed),
    'mixed_bad_records_limit': (0x51, 0, 0, mixed),
    'mixed_zstd_two_keys': (0x1e, 2, 3, mixed),
    'long_lines_small_limit': (0x31, 0, 0, long_lines),
    'long_lines_any_length': (0x12, 1, 0, long_lines),
    'empty': (0x11, 0, 0, b''),
    'only_bad': (0x11, 0, 0, b'x\ny\n{"text": 1}\n'),
    'crlf_and_blank': (0x12, 0, 0, b'{"text": "a"}\r\n\r\n{"text": "b"}\r\n'),
}
for name, (flags, batch, read, data) in sorted(P.items()):
    write('pipeline', name, bytes([flags, batch, read, 0]) + data)
# The same inputs read where they lie (View(), as a mapped file): the last line ends the block.
for name in ('docs_two_threads_tiny_batches', 'mixed_bad_records', 'mixed_bad_records_limit',
             'long_lines_small_limit', 'crlf_and_blank', 'only_bad'):
    flags, batch, read, data = P[name]
    write('pipeline', name + '_viewed', bytes([flags, batch, read, 1]) + data)
write('pipeline', 'one_line_no_newline_viewed', bytes([0x11, 0, 0, 1]) + b'{"text": "x"}')
write('pipeline', 'mixed_two_reports_kept', bytes([0x12, 0, 0, 2]) + mixed)
write('pipeline', 'docs_one_batch_in_flight', bytes([0x12, 1, 1, 4]) + docs)
write('pipeline', 'mixed_zstd_one_batch_in_flight_two_reports', bytes([0x16, 0, 2, 6]) + mixed)
# Lines shorter than the parser's padding, then one too long, near the end of a view.
# Batch byte 10 (171 bytes) ends a batch inside the run of x, which is then found too long: the batch
# before it ends 40 bytes before the end of the view.
short_then_long = b'{}\n' * 50 + b'"a"\n' + b'x' * 40
for batch in (0, 1, 10):
    write('pipeline', 'short_lines_limit16_viewed_batch%d' % batch, bytes([0x31, batch, 0, 1 | 16]) + short_then_long)
write('pipeline', 'short_lines_limit16_read', bytes([0x31, 1, 0, 16]) + short_then_long)
write('pipeline', 'docs_viewed_with_slack', bytes([0x11, 1, 0, 1 | 32]) + docs)
write('pipeline', 'one_line_no_newline_viewed_with_slack', bytes([0x11, 0, 0, 1 | 32]) + b'{"text": "x"}')
# zstd streams as they are (bit 3 of the fourth byte): damage must fail the same, at the same byte,
# however the stream is read and decoded.
Z = {
    'one_frame': frame,
    'two_frames': frame + zstd(b'{"text": "x"}\n'),
    'truncated': frame[:len(frame) // 2],
    'trailing_garbage': frame + b'garbage\n',
    'bitflip': frame[:20] + bytes([frame[20] ^ 0x10]) + frame[21:],
    'skippable_then_frame': struct.pack('<II', 0x184D2A50, 5) + b'hello' + frame,
    'empty_frame': zstd(b''),
}
for i, (name, stream) in enumerate(sorted(Z.items())):
    write('pipeline', 'zstd_as_is_' + name, bytes([0x14 | (i % 3), i, 2 * i + 1, 8 | (i & 4)]) + stream)
    write('pipeline', 'zstd_as_is_' + name + '_read_stage', bytes([0x94, 0, 0, 8]) + stream)
# Cancelled (bit 6 of the fourth byte) before the run begins, or (bit 7) when its third batch is reported:
# Cancelled, nothing published, and what it did a prefix of what the reference did.
for name in ('docs_two_threads_tiny_batches', 'mixed_bad_records', 'mixed_bad_records_limit',
             'docs_zstd_two_threads', 'docs_zstd_decoded_in_read_stage'):
    flags, batch, read, data = P[name]
    write('pipeline', name + '_cancelled_at_start', bytes([flags, batch, read, 64]) + data)
    write('pipeline', name + '_cancelled_at_batch3', bytes([flags, batch, read, 64 | 128]) + data)
# Cancelled when the last batch is reported (the outputs complete, not yet published): batch byte 45
# (766 bytes) cuts these 30 lines into three batches.
flags, batch, read, data = P['docs_two_threads_tiny_batches']
write('pipeline', 'docs_cancelled_at_the_last_batch', bytes([flags, 45, read, 64 | 128]) + data)
