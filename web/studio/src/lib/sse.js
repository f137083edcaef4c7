// A buffered server-sent events parser: network chunks split events (and UTF-8 characters)
// anywhere, so bytes are decoded in streaming mode and only complete events (ended by a blank
// line) are returned. Follows the WHATWG rules the studio needs: "data:" lines joined by "\n",
// one optional space after the colon, comments (":") ignored, LF, CRLF or CR line ends.
export class SseParser {
  constructor() {
    this.decoder = new TextDecoder();
    this.buffer = '';
    this.data = [];
  }

  // Feeds a chunk (Uint8Array or string); returns the data strings of the events it completed.
  feed(chunk) {
    this.buffer += typeof chunk === 'string' ? chunk : this.decoder.decode(chunk, { stream: true });
    const events = [];
    // A trailing CR may be the first half of a CRLF: keep it for the next chunk.
    let match;
    const line = /\r\n|\n|\r(?=.)/s;
    while ((match = line.exec(this.buffer)) !== null) {
      const text = this.buffer.slice(0, match.index);
      this.buffer = this.buffer.slice(match.index + match[0].length);
      if (text === '') {
        if (this.data.length) events.push(this.data.join('\n'));
        this.data = [];
      } else if (!text.startsWith(':')) {
        const colon = text.indexOf(':');
        const field = colon < 0 ? text : text.slice(0, colon);
        let value = colon < 0 ? '' : text.slice(colon + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        if (field === 'data') this.data.push(value);
      }
    }
    return events;
  }
}

// Reads a fetch Response's body as SSE, calling onEvent with each event's data parsed as JSON
// ("[DONE]" and malformed events are skipped).
export async function readSse(response, onEvent) {
  const parser = new SseParser();
  const reader = response.body.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    for (const data of parser.feed(value)) {
      if (data === '[DONE]') continue;
      let event;
      try {
        event = JSON.parse(data);
      } catch {
        continue;
      }
      onEvent(event);
    }
  }
}
