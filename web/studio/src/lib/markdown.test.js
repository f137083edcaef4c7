import { describe, expect, test } from 'vitest';
import { renderMarkdown } from './markdown.js';
import { highlight } from './highlight.js';

// Every tag the renderer may produce; anything else in the output came from the input.
const ALLOWED = /^<\/?(p|br|strong|em|code|pre|h[3-6]|ul|ol|li|blockquote|span|a)(\s|>|$)/;

function tags(html) {
  return html.match(/<[^>]*>/g) ?? [];
}

describe('renderMarkdown sanitises', () => {
  const attacks = [
    '<script>alert(1)</script>',
    '<img src=x onerror=alert(1)>',
    '[click](javascript:alert(1))',
    '[x](https://e.com" onmouseover="alert(1))',
    '```\n</code></pre><script>alert(1)</script>\n```',
    '`<b>` **<i>bold</i>**',
    '<a href="javascript:alert(1)">a</a>',
    '```js\n"</span><script>x</script>" // <img src=x>\n```',
  ];
  for (const input of attacks)
    test(JSON.stringify(input), () => {
      const html = renderMarkdown(input);
      for (const t of tags(html)) expect(t).toMatch(ALLOWED);
      expect(html).not.toMatch(/<script|<img/i);
      // Attributes only in the forms the renderer writes (nothing from the input inside a tag).
      for (const t of tags(html).filter((x) => x.includes(' ')))
        expect(t).toMatch(/^<(span class="tok-\w+"|pre class="code"|code data-lang="[\w+-]*"|a href="[^"]*" target="_blank" rel="noopener noreferrer")>$/);
      for (const t of tags(html).filter((x) => x.startsWith('<a ')))
        expect(t).toMatch(/^<a href="(https?:|mailto:)[^"]*" target="_blank" rel="noopener noreferrer">$/);
    });
});

describe('renderMarkdown formats', () => {
  test('paragraphs, emphasis, code and links', () => {
    expect(renderMarkdown('Hello **world** and *you*')).toBe(
      '<p>Hello <strong>world</strong> and <em>you</em></p>',
    );
    expect(renderMarkdown('use `a < b`')).toBe('<p>use <code>a &lt; b</code></p>');
    expect(renderMarkdown('[docs](https://example.com/a?b=1&c=2)')).toBe(
      '<p><a href="https://example.com/a?b=1&amp;c=2" target="_blank" rel="noopener noreferrer">docs</a></p>',
    );
  });

  test('lists, headings and fenced code with highlighting', () => {
    expect(renderMarkdown('# Title\n- a\n- b\n\n1. one')).toBe(
      '<h3>Title</h3><ul><li>a</li><li>b</li></ul><ol><li>one</li></ol>',
    );
    const html = renderMarkdown('```python\ndef f(x):\n    return "s" # note\n```');
    expect(html).toContain('<span class="tok-keyword">def</span>');
    expect(html).toContain('<span class="tok-string">&quot;s&quot;</span>');
    expect(html).toContain('<span class="tok-comment"># note</span>');
  });

  test('highlight keeps C preprocessor lines out of comments', () => {
    expect(highlight('#include <x>\nint a = 1; // one', 'cpp')).toBe(
      '#include &lt;x&gt;\n<span class="tok-keyword">int</span> a = <span class="tok-number">1</span>; <span class="tok-comment">// one</span>',
    );
  });
});
