// The extra `tessera serve` options a user types for a service ("--max-model-len 4096
// --reasoning-parser qwen3"), as the list the studio's API takes: each option one string,
// `--name=value` when it has a value. Values may be quoted ('…' or "…") to hold spaces, as in a
// shell; a JSON value such as --hf-overrides' then needs single quotes.
export function splitServeArgs(text) {
  const words = [];
  let word = null;
  let quote = null;
  for (const c of text) {
    if (quote) {
      if (c === quote)
        quote = null;
      else
        word += c;
    } else if (c === '"' || c === '\'') {
      quote = c;
      word ??= '';
    } else if (/\s/.test(c)) {
      if (word !== null) words.push(word);
      word = null;
    } else {
      word = (word ?? '') + c;
    }
  }
  if (quote) throw new Error(`unclosed ${quote} in the options`);
  if (word !== null) words.push(word);
  const args = [];
  for (const w of words) {
    const last = args.length - 1;
    if (!w.startsWith('--') && last >= 0 && !args[last].includes('='))
      args[last] += `=${w}`;
    else if (!w.startsWith('--'))
      throw new Error(`expected --options, got '${w}'`);
    else
      args.push(w);
  }
  return args;
}
