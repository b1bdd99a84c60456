#!/usr/bin/env node
// GPT-2 token ids of text files by js-tiktoken (a port of OpenAI's tiktoken) with its own `gpt2`
// ranks: the independent implementation precon's BPE is compared with. Shares nothing with
// precon: not its code, not its encoder.json/vocab.bpe.
//
// Usage: node tiktoken_tokens.cjs NODE_MODULES_DIR FILE...
// Prints one line per file: its token ids separated by spaces (an empty line for an empty
// file). Files are read as UTF-8 and a leading byte order mark is dropped, as precon's
// prepare-data does; "<|endoftext|>" inside a file is encoded as plain text, as precon does.
"use strict";
const fs = require("fs");
const path = require("path");
const { createRequire } = require("module");

const [modules, ...files] = process.argv.slice(2);
if (!modules || files.length === 0) {
  process.stderr.write("usage: node tiktoken_tokens.cjs NODE_MODULES_DIR FILE...\n");
  process.exit(2);
}
const load = createRequire(path.join(path.resolve(modules), "resolver.js"));
const { Tiktoken } = load("js-tiktoken/lite");
const gpt2 = load("js-tiktoken/ranks/gpt2");
const enc = new Tiktoken(gpt2.default || gpt2);

for (const file of files) {
  let text = fs.readFileSync(file, "utf8");
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  process.stdout.write(enc.encode(text, [], []).join(" ") + "\n");
}
