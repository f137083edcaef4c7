import { describe, expect, test } from 'vitest';
import { SseParser } from './sse.js';

describe('SseParser', () => {
  test('returns only complete events, whatever the chunking', () => {
    const text = 'data: {"delta":"Hel"}\n\ndata: {"delta":"lo"}\n\n: comment\n\ndata: [DONE]\n\n';
    for (let size = 1; size <= text.length; ++size) {
      const p = new SseParser();
      const events = [];
      for (let i = 0; i < text.length; i += size) events.push(...p.feed(text.slice(i, i + size)));
      expect(events).toEqual(['{"delta":"Hel"}', '{"delta":"lo"}', '[DONE]']);
    }
  });

  test('joins data lines and accepts CRLF and CR line ends', () => {
    const p = new SseParser();
    expect(p.feed('data: a\r\ndata:b\r\n\r\n')).toEqual(['a\nb']);
    expect(p.feed('data: c\r')).toEqual([]); // the CR may be half of a CRLF
    expect(p.feed('\r\n')).toEqual(['c']);
    expect(p.feed('event: x\nid: 3\ndata: d\n\n')).toEqual(['d']);
  });

  test('decodes UTF-8 characters split across chunks', () => {
    const bytes = new TextEncoder().encode('data: 你好\n\n');
    const p = new SseParser();
    const events = [];
    for (const b of bytes) events.push(...p.feed(new Uint8Array([b])));
    expect(events).toEqual(['你好']);
  });
});
