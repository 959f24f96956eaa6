#!/usr/bin/python3
"""The Python baseline: what Megatron-LM's tools/preprocess_data.py --append-eod does, in plain Python.

GPT-2 BPE as Megatron's gpt2_tokenization.py (OpenAI's encoder.py: the `regex` pattern, byte->unicode
mapping, per-word bpe() with a dict cache; encode() as tokenize() to BPE strings, then
convert_tokens_to_ids()), literal <|endoftext|> split out as id 50256 (pileprep's default policy),
Megatron's Encoder.encode per line through multiprocessing.Pool.imap(chunksize=32), its progress lines
every 1000 documents, and its IndexedDatasetBuilder (numpy: add_document, finalize) writing .bin/.idx.
Until 2026-11-30 the tokenizer went from BPE strings to ids in one step and the loop wrote the .bin
itself, a little less work per token than Megatron's code does. Needs Debian's python3-regex, numpy.

  python_baseline.py tokenize TEXTS.bin [IDS.bin]      -> JSON: text_bytes, tokens, seconds, ids_match
  python_baseline.py job INPUT.jsonl OUT_PREFIX WORKERS -> JSON: seconds (writes OUT_PREFIX.{bin,idx})
"""
import json
import multiprocessing
import struct
import sys
import time

import numpy as np
import regex as re

TOKENIZER_DIR = sys.path[0] + "/../../tokenizers/gpt2"
EOT = "<|endoftext|>"


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(2 ** 8):
        if b not in bs:
            bs.append(b)
            cs.append(2 ** 8 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def get_pairs(word):
    pairs = set()
    prev = word[0]
    for ch in word[1:]:
        pairs.add((prev, ch))
        prev = ch
    return pairs


class GPT2Tokenizer:
    def __init__(self):
        with open(TOKENIZER_DIR + "/encoder.json", encoding="utf-8") as f:
            self.encoder = json.load(f)
        with open(TOKENIZER_DIR + "/vocab.bpe", encoding="utf-8") as f:
            merges = f.read().split("\n")[1:-1]
        self.bpe_ranks = dict(zip([tuple(m.split()) for m in merges], range(len(merges))))
        self.byte_encoder = bytes_to_unicode()
        self.cache = {}
        self.special_tokens = {}
        self.max_len = int(1e12)
        self.pat = re.compile(
            r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
        self.eod = self.encoder[EOT]

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        pairs = get_pairs(word)
        if not pairs:
            return token
        while True:
            bigram = min(pairs, key=lambda pair: self.bpe_ranks.get(pair, float("inf")))
            if bigram not in self.bpe_ranks:
                break
            first, second = bigram
            new_word = []
            i = 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                    new_word.extend(word[i:j])
                    i = j
                except ValueError:
                    new_word.extend(word[i:])
                    break
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
            if len(word) == 1:
                break
            pairs = get_pairs(word)
        word = " ".join(word)
        self.cache[token] = word
        return word

    # tokenize / convert_tokens_to_ids / encode: Megatron's gpt2_tokenization.GPT2Tokenizer, which
    # Megatron's _GPT2BPETokenizer.tokenize calls as encode(text): BPE tokens as strings first, then
    # their ids (GPT2BPETokenizer passes special_tokens=[] and max_len=None: an empty dict, 1e12).
    def tokenize_to_strings(self, text):
        bpe_tokens = []
        for token in re.findall(self.pat, text):
            token = "".join(self.byte_encoder[b] for b in token.encode("utf-8"))
            bpe_tokens.extend(bpe_token for bpe_token in self.bpe(token).split(" "))
        return bpe_tokens

    def convert_tokens_to_ids(self, tokens):
        ids = []
        for token in tokens:
            if token in self.special_tokens:
                ids.append(self.special_tokens[token])
            else:
                ids.append(self.encoder.get(token, 0))
        if len(ids) > self.max_len:
            print("Token indices sequence length is longer than the specified maximum", file=sys.stderr)
        return ids

    def encode_ordinary(self, text):
        return self.convert_tokens_to_ids(self.tokenize_to_strings(text))

    def tokenize(self, text):
        # pileprep's default policy for literal <|endoftext|> (one id, as NeMo's Hugging Face
        # tokenizer does), which Megatron-LM's own GPT-2 tokenizer leaves as text (pileprep's
        # --endoftext-as-text): split out first, the parts encoded as Megatron encodes a text.
        parts = text.split(EOT)
        ids = self.encode_ordinary(parts[0])
        for part in parts[1:]:
            ids.append(self.eod)
            ids.extend(self.encode_ordinary(part))
        return ids


_tokenizer = None
_SURROGATE = re.compile("[\ud800-\udfff]")


def _init():
    global _tokenizer
    _tokenizer = GPT2Tokenizer()


def _encode(json_line):
    # Megatron's Encoder.encode with --append-eod and the one key "text" (no sentence splitting):
    # the ids and sequence lengths per key, and the line's length for its progress figures. Bad
    # lines are skipped here rather than crashing the pool (Megatron would crash).
    try:
        data = json.loads(json_line)
        text = data["text"]
    except Exception:
        return None
    if not isinstance(text, str):
        return None
    # pileprep's policy for lone surrogate escapes (json.loads keeps them; .encode would raise).
    text = _SURROGATE.sub("\ufffd", text)
    ids, lens = {}, {}
    doc_ids, sentence_lens = [], []
    for sentence in [text]:
        sentence_ids = _tokenizer.tokenize(sentence)
        if len(sentence_ids) > 0:
            doc_ids.extend(sentence_ids)
            sentence_lens.append(len(sentence_ids))
    if len(doc_ids) > 0:
        doc_ids.append(_tokenizer.eod)
        sentence_lens[-1] += 1
    ids["text"] = doc_ids
    lens["text"] = sentence_lens
    return ids, lens, len(json_line)


def write_index(idx_path, sequence_lengths, document_indices):
    lengths = np.array(sequence_lengths, dtype=np.int32)
    pointers = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths) > 1:
        pointers[1:] = np.cumsum(lengths[:-1].astype(np.int64) * 2)
    with open(idx_path, "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", 8))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(document_indices)))
        f.write(lengths.tobytes(order="C"))
        f.write(pointers.tobytes(order="C"))
        f.write(np.array(document_indices, dtype=np.int64).tobytes(order="C"))


class Builder:
    """Megatron's IndexedDatasetBuilder for a uint16 .bin: add_document, then finalize."""

    def __init__(self, bin_path):
        self.data_file = open(bin_path, "wb")
        self.sequence_lengths = []
        self.document_indices = [0]

    def add_document(self, tokens, lengths):
        np_array = np.array(tokens, dtype=np.uint16)
        self.data_file.write(np_array.tobytes(order="C"))
        self.sequence_lengths.extend(lengths)
        self.document_indices.append(len(self.sequence_lengths))

    def finalize(self, idx_path):
        self.data_file.close()
        write_index(idx_path, self.sequence_lengths, self.document_indices)


def job(input_path, prefix, workers, log_interval=1000):
    # Megatron's Partition.process_json_file: the pool's documents in input order into the builder,
    # progress every log_interval documents (Megatron's default) on stderr.
    start = time.time()
    builder = Builder(prefix + ".bin")
    with open(input_path, "r", encoding="utf-8", errors="replace") as fin, \
            multiprocessing.Pool(workers, initializer=_init) as pool:
        encoded_docs = pool.imap(_encode, fin, 32)
        proc_start = time.time()
        total_bytes_processed = 0
        for i, encoded in enumerate(encoded_docs, start=1):
            if encoded is None:
                continue
            doc, sentence_lens, bytes_processed = encoded
            total_bytes_processed += bytes_processed
            for key in doc.keys():
                builder.add_document(doc[key], sentence_lens[key])
            if i % log_interval == 0:
                elapsed = time.time() - proc_start
                print(f"Processed {i} documents", f"({i / elapsed} docs/s,",
                      f"{total_bytes_processed / elapsed / 1024 / 1024} MB/s).", file=sys.stderr)
    builder.finalize(prefix + ".idx")
    return time.time() - start


def read_records(path, count_prefixed):
    data = open(path, "rb").read()
    out, o = [], 0
    while o < len(data):
        n = struct.unpack_from("<I", data, o)[0]
        o += 4
        size = 4 * n if count_prefixed else n
        out.append(data[o:o + size])
        o += size
    return out


def main():
    if sys.argv[1] == "tokenize":
        texts = [t.decode("utf-8") for t in read_records(sys.argv[2], False)]
        tok = GPT2Tokenizer()
        start = time.time()
        results = [tok.tokenize(t) for t in texts]
        seconds = time.time() - start
        match = None
        if len(sys.argv) > 3:
            want = read_records(sys.argv[3], True)
            match = all(np.frombuffer(w, dtype=np.uint32).tolist() == r for w, r in zip(want, results))
        print(json.dumps({"text_bytes": sum(len(t.encode("utf-8")) for t in texts),
                          "tokens": sum(len(r) for r in results), "seconds": seconds,
                          "ids_match": match}))
    elif sys.argv[1] == "job":
        print(json.dumps({"seconds": job(sys.argv[2], sys.argv[3], int(sys.argv[4]))}))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
