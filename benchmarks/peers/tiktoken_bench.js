// tiktoken's native core (Rust, through its Node binding) on the texts exported by tokenize_bench.
// Usage: node tiktoken_bench.js BINDING.node texts.bin ids.bin [PASSES]
// Prints {"text_bytes","tokens","seconds","ids_match","first_mismatch"}: best of PASSES (default 2)
// passes; ids are compared text by text with pileprep's.
const fs = require('fs');
const [binding, textsPath, idsPath, passesArg] = process.argv.slice(2);
const passes = Math.max(1, parseInt(passesArg || '2', 10));
const enc = require(binding).getEncoding('gpt2');  // <|endoftext|> -> 50256, like pileprep's default
const buf = fs.readFileSync(textsPath);
const texts = [];
let bytes = 0;
for (let o = 0; o < buf.length;) {
  const n = buf.readUInt32LE(o); o += 4;
  texts.push(buf.toString('utf8', o, o + n)); o += n; bytes += n;
}
let best = Infinity, tokens = 0, outs = null;
for (let pass = 0; pass < passes; pass++) {
  const results = new Array(texts.length);
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < texts.length; i++) results[i] = enc.encode(texts[i]);
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  best = Math.min(best, s);
  outs = results;
}
const ids = fs.readFileSync(idsPath);
let match = true, first = null, o = 0;
for (let i = 0; i < texts.length; i++) {
  const n = ids.readUInt32LE(o); o += 4;
  const mine = outs[i];
  tokens += mine.length;
  let same = n === mine.length;
  for (let k = 0; same && k < n; k++) same = ids.readUInt32LE(o + 4 * k) === mine[k];
  if (!same && match) { match = false; first = i; }
  o += 4 * n;
}
console.log(JSON.stringify({text_bytes: bytes, tokens, seconds: best, ids_match: match, first_mismatch: first}));
