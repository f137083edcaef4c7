// A small syntax highlighter for code blocks: the code is split into tokens (comments, strings,
// numbers, keywords, the rest) and every token is HTML-escaped before it is wrapped in a span,
// so the output holds no markup from the input.
import { escapeHtml } from './markdown.js';

const KEYWORDS = new Set(
  (
    'if else for while do return break continue switch case default function def class struct ' +
    'const let var import from export new delete try catch finally throw raise with as in of ' +
    'lambda yield async await static public private protected void int float double char bool ' +
    'auto template typename namespace using true false null None True False nullptr self this fn ' +
    'pub mut impl match enum type interface package go func'
  ).split(' '),
);

const TOKEN =
  /(\/\/[^\n]*|#[^\n]*|\/\*[\s\S]*?\*\/)|("(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|`(?:\\.|[^`\\])*`)|(\b\d+(?:\.\d+)?(?:e[+-]?\d+)?\b)|([A-Za-z_][\w]*)/g;

export function highlight(code, lang = '') {
  // '#' starts a comment in Python, shell and friends, a directive in C: only for the former.
  const hashComments = ['py', 'python', 'sh', 'bash', 'shell', 'yaml', 'toml', 'rb', ''].includes(lang);
  let out = '';
  let last = 0;
  for (const m of code.matchAll(TOKEN)) {
    const [text, comment, string, number, word] = m;
    out += escapeHtml(code.slice(last, m.index));
    last = m.index + text.length;
    if (comment && (hashComments || !comment.startsWith('#'))) out += `<span class="tok-comment">${escapeHtml(text)}</span>`;
    else if (string) out += `<span class="tok-string">${escapeHtml(text)}</span>`;
    else if (number) out += `<span class="tok-number">${escapeHtml(text)}</span>`;
    else if (word && KEYWORDS.has(word)) out += `<span class="tok-keyword">${escapeHtml(text)}</span>`;
    else out += escapeHtml(text);
  }
  return out + escapeHtml(code.slice(last));
}
