// Markdown for model output, safe by construction: every character of the input is HTML-escaped
// before any tag is added, and only the tags below are ever produced (no raw HTML passes, link
// targets are limited to http(s) and mailto). Supports fenced code (highlighted), inline code,
// headings, bold, italic, links, lists, block quotes and paragraphs.
import { highlight } from './highlight.js';

export function escapeHtml(s) {
  return s
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

const SAFE_URL = /^(https?:\/\/|mailto:)[^\s"'<>]*$/i;

// Inline markup on text that is not yet escaped: code spans first, so that nothing inside them
// is formatted.
function inline(text) {
  return text
    .split(/(`[^`\n]+`)/)
    .map((part, i) => {
      if (i % 2 === 1) return `<code>${escapeHtml(part.slice(1, -1))}</code>`;
      let s = escapeHtml(part);
      s = s.replace(/\*\*([^*]+)\*\*/g, '<strong>$1</strong>');
      s = s.replace(/(^|[^*])\*([^*\s][^*]*)\*/g, '$1<em>$2</em>');
      // The URL was escaped with the rest; unescape it only to check it, never to emit it.
      s = s.replace(/\[([^\]]+)\]\(([^)\s]+)\)/g, (m, label, url) => {
        const raw = url.replace(/&amp;/g, '&');
        return SAFE_URL.test(raw)
          ? `<a href="${url}" target="_blank" rel="noopener noreferrer">${label}</a>`
          : `${label} (${url})`;
      });
      return s;
    })
    .join('');
}

export function renderMarkdown(source) {
  const lines = String(source ?? '').split('\n');
  const out = [];
  let paragraph = [];
  let list = null; // 'ul' | 'ol'
  const flush = () => {
    if (paragraph.length) out.push(`<p>${paragraph.map(inline).join('<br>')}</p>`);
    paragraph = [];
  };
  const closeList = () => {
    if (list) out.push(`</${list}>`);
    list = null;
  };
  for (let i = 0; i < lines.length; ++i) {
    const line = lines[i];
    const fence = line.match(/^```\s*([\w+-]*)\s*$/);
    if (fence) {
      flush();
      closeList();
      const code = [];
      while (++i < lines.length && !/^```\s*$/.test(lines[i])) code.push(lines[i]);
      const lang = fence[1].toLowerCase();
      out.push(
        `<pre class="code"><code data-lang="${escapeHtml(lang)}">${highlight(code.join('\n'), lang)}</code></pre>`,
      );
      continue;
    }
    const heading = line.match(/^(#{1,4})\s+(.*)$/);
    const item = line.match(/^\s*([-*]|\d+\.)\s+(.*)$/);
    if (heading) {
      flush();
      closeList();
      out.push(`<h${heading[1].length + 2}>${inline(heading[2])}</h${heading[1].length + 2}>`);
    } else if (item) {
      flush();
      const kind = /\d/.test(item[1]) ? 'ol' : 'ul';
      if (list !== kind) {
        closeList();
        out.push(`<${kind}>`);
        list = kind;
      }
      out.push(`<li>${inline(item[2])}</li>`);
    } else if (line.startsWith('>')) {
      flush();
      closeList();
      out.push(`<blockquote>${inline(line.replace(/^>\s?/, ''))}</blockquote>`);
    } else if (line.trim() === '') {
      flush();
      closeList();
    } else {
      closeList();
      paragraph.push(line);
    }
  }
  flush();
  closeList();
  return out.join('');
}
