#!/usr/bin/env node
// js-tiktoken's side of tests/bench/bench_tokenize.py: encodes one text file with an encoding's
// own rank file and prints one JSON line (best of N encodes, the encoder built once).
// Usage: node bench_tokenize.cjs NODE_MODULES_DIR ENCODING FILE [REPEAT]
"use strict";
const fs = require("fs");
const path = require("path");
const { createRequire } = require("module");

const [modules, encoding, file, repeatArg] = process.argv.slice(2);
if (!modules || !encoding || !file) {
  process.stderr.write("usage: node bench_tokenize.cjs NODE_MODULES_DIR ENCODING FILE [REPEAT]\n");
  process.exit(2);
}
const load = createRequire(path.join(path.resolve(modules), "resolver.js"));
const t0 = process.hrtime.bigint();
const { Tiktoken } = load("js-tiktoken/lite");
const ranks = load("js-tiktoken/ranks/" + encoding);
const enc = new Tiktoken(ranks.default || ranks);
const loadSeconds = Number(process.hrtime.bigint() - t0) / 1e9;
const text = fs.readFileSync(file, "utf8");
let best = Infinity;
let tokens = 0;
for (let r = 0; r < Number(repeatArg || 1); r++) {
  const t1 = process.hrtime.bigint();
  tokens = enc.encode(text, [], []).length;
  best = Math.min(best, Number(process.hrtime.bigint() - t1) / 1e9);
}
process.stdout.write(JSON.stringify({ tokenizer: encoding, bytes: fs.statSync(file).size, tokens,
                                      load_seconds: loadSeconds, encode_seconds: best }) + "\n");
