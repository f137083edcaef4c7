// Reference GPT-2 encodings from the gpt-3-encoder npm package (AIDungeon's port of OpenAI's
// encoder.py), for tests/e2e/test_gpt2_tokenizer_vs_js.cpp.
// Usage: node gpt2_encode.js <package dir> <input file>
// Input: one hex-encoded UTF-8 string per line. Output: the ids of each, space-separated.
const fs = require('fs');
const path = require('path');

const [pkg, input] = process.argv.slice(2);
const { encode } = require(path.resolve(pkg, 'Encoder.js'));
const out = [];
for (const hex of fs.readFileSync(input, 'utf-8').split('\n')) {
  if (hex === '') continue;
  const text = hex === '-' ? '' : Buffer.from(hex, 'hex').toString('utf-8');
  out.push(encode(text).join(' '));
}
process.stdout.write(out.join('\n') + '\n');
