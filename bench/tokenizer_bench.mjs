// tokenizers.js's side of bench/tokenizer_bench.sh: loads TOKENIZER_DIR's tokenizer.json and
// tokenizer_config.json (timed apart), encodes TEXT_FILE REPS times on fresh tokenizers, and
// prints "load_ms tokens median_MB_per_s" as bench/tokenizer_bench.cpp does.
//
//   node tokenizer_bench.mjs TOKENIZERS_PACKAGE_DIR TOKENIZER_DIR TEXT_FILE [REPS]
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [pkg, dir, textPath, repsArg] = process.argv.slice(2);
const { Tokenizer } = await import(pathToFileURL(join(pkg, "dist", "tokenizers.mjs")).href);
const text = readFileSync(textPath, "utf8");
const bytes = Buffer.byteLength(text, "utf8");
const rates = [];
let loadMs = 0, tokens = 0;
for (let r = 0; r < Number(repsArg ?? 5); ++r) {
  const t0 = performance.now();
  const tokenizer = new Tokenizer(JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8")),
                                  JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8")));
  const t1 = performance.now();
  tokens = tokenizer.encode(text, { add_special_tokens: false }).ids.length;
  rates.push(bytes / 1e6 / ((performance.now() - t1) / 1000));
  loadMs = t1 - t0;
}
rates.sort((a, b) => a - b);
console.log(`${loadMs.toFixed(0)} ${tokens} ${rates[Math.floor(rates.length / 2)].toFixed(2)}`);
