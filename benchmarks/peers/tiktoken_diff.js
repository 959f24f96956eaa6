// Compares pileprep's ids for a file of JSON lines with tiktoken's GPT-2 encoding of the same texts.
// Usage: node tiktoken_diff.js BINDING.node TEXTS.jsonl PREFIX
// PREFIX_text_document.{bin,idx} is what `pileprep preprocess --input TEXTS.jsonl --output-prefix PREFIX`
// (no --append-eod) wrote: one document per line, every text non-empty. JSON.parse decodes each line
// (escapes, surrogate pairs) independently of pileprep's parser. Prints one JSON object:
// {"texts","documents","bytes","tokens","differ","errors","first"}; "first" holds up to 20 texts that
// differ: {"line","text","id" (the first id that differs),"ids" (both counts),"pileprep","tiktoken" (the
// ids from 4 before it to 8 after)}, or {"line","text","error"} where tiktoken failed.
const fs = require('fs');
const [binding, jsonlPath, prefix] = process.argv.slice(2);
const enc = require(binding).getEncoding('gpt2');  // <|endoftext|> -> 50256, like pileprep's default
// Split as bytes and decoded line by line: a batch of long texts can pass Node's ~537 M-character limit
// on one string.
const raw = fs.readFileSync(jsonlPath);
const lines = [];
for (let from = 0; from < raw.length;) {
  let nl = raw.indexOf(0x0a, from);
  if (nl < 0) nl = raw.length;
  if (nl > from) lines.push(raw.toString('utf8', from, nl));
  from = nl + 1;
}
const idx = fs.readFileSync(prefix + '_text_document.idx');
const bin = fs.readFileSync(prefix + '_text_document.bin');
// MMIDIDX: 9-byte magic, u64 version, u8 dtype code, u64 sequences, u64 documents, i32 sizes, i64 pointers.
let o = 9 + 8;
const dtype = idx[o]; o += 1;
const count = Number(idx.readBigUInt64LE(o)); o += 8;
o += 8;  // documents: one per sequence here
if (dtype !== 8) throw new Error(`dtype code ${dtype}, expected 8 (uint16)`);
const sizes = new Array(count), pointers = new Array(count);
for (let i = 0; i < count; i++) sizes[i] = idx.readInt32LE(o + 4 * i);
o += 4 * count;
for (let i = 0; i < count; i++) pointers[i] = Number(idx.readBigInt64LE(o + 8 * i));
let bytes = 0, tokens = 0, differ = 0, errors = 0;
const first = [];
for (let i = 0; i < Math.min(count, lines.length); i++) {
  const text = JSON.parse(lines[i]).text;
  bytes += Buffer.byteLength(text);
  let ref;
  try {
    ref = enc.encode(text);
  } catch (e) {
    ++errors;
    if (first.length < 20) first.push({line: i + 1, text, error: String(e)});
    continue;
  }
  const mine = new Array(sizes[i]);
  for (let k = 0; k < sizes[i]; k++) mine[k] = bin.readUInt16LE(pointers[i] + 2 * k);
  tokens += mine.length;
  let at = 0;  // the first id that differs
  while (at < mine.length && at < ref.length && mine[at] === ref[at]) ++at;
  if (at < mine.length || at < ref.length) {
    ++differ;
    if (first.length < 20) {
      const from = Math.max(0, at - 4);
      first.push({line: i + 1, text, id: at, ids: [mine.length, ref.length],
                  pileprep: mine.slice(from, at + 8), tiktoken: Array.from(ref.slice(from, at + 8))});
    }
  }
}
console.log(JSON.stringify({texts: lines.length, documents: count, bytes, tokens, differ, errors, first}));
