#!/usr/bin/env node
// Token ids of text files by js-tiktoken (a port of OpenAI's tiktoken) with its own rank files:
// the independent implementation tests/interop/tokenizers_vs_tiktoken.py compares precon's
// gpt2, cl100k_base and o200k_base with.
//
// Usage: node tiktoken_encode.cjs NODE_MODULES_DIR ENCODING [--white-space] FILE...
// Prints one line per file: its ids separated by spaces. Each file is read as UTF-8 the way Node
// decodes it (each invalid subpart becomes U+FFFD; a byte order mark is kept as U+FEFF); special
// tokens in the text are plain text (encode with no special tokens allowed or disallowed).
// --white-space: `\s` in the encoding's pattern means Unicode White_Space, as in Rust's tiktoken
// and precon, instead of JavaScript's \s (which lacks U+0085 and has U+FEFF).
"use strict";
const fs = require("fs");
const path = require("path");
const { createRequire } = require("module");

const args = process.argv.slice(2);
const modules = args.shift();
const encoding = args.shift();
const whiteSpace = args[0] === "--white-space";
if (whiteSpace) args.shift();
if (!modules || !encoding || args.length === 0) {
  process.stderr.write("usage: node tiktoken_encode.cjs NODE_MODULES_DIR ENCODING [--white-space] FILE...\n");
  process.exit(2);
}

// Unicode's White_Space characters, written for the inside of a character class.
const WHITE_SPACE = "\\t-\\r \\x85\\xA0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000";

function withWhiteSpace(pattern) {
  let out = "";
  let inClass = false;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === "\\") {
      const e = pattern[++i];
      if (e === "s") out += inClass ? WHITE_SPACE : "[" + WHITE_SPACE + "]";
      else if (e === "S" && !inClass) out += "[^" + WHITE_SPACE + "]";
      else if (e === "S") throw new Error("\\S inside a class is not rewritten");
      else out += "\\" + e;
      continue;
    }
    if (c === "[") inClass = true;
    if (c === "]") inClass = false;
    out += c;
  }
  return out;
}

const load = createRequire(path.join(path.resolve(modules), "resolver.js"));
const { Tiktoken } = load("js-tiktoken/lite");
const loaded = load("js-tiktoken/ranks/" + encoding);
const ranks = { ...(loaded.default || loaded) };
if (whiteSpace) ranks.pat_str = withWhiteSpace(ranks.pat_str);
const enc = new Tiktoken(ranks);

for (const file of args) {
  const text = fs.readFileSync(file, "utf8");
  process.stdout.write(enc.encode(text, [], []).join(" ") + "\n");
}
