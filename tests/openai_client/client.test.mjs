// The official `openai` npm client (pinned in package.json) against a real `tessera serve` on
// stories260K: what a user of the OpenAI API gets (every item of issue #18's OpenAI bullet), with
// structured outputs judged by Ajv (pinned too). Run by run.sh (ctest: openai_client), which
// passes the binary, the shared data folder and the installed node_modules:
//   TESSERA_BIN=build/release/bin/tessera TESSERA_SHARED_DATA=../shared/data \
//   OPENAI_NODE_MODULES=build/openai_client/node_modules node --test tests/openai_client/
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

// node_modules lives outside the source tree (build/openai_client): load the package from there.
const require = createRequire(path.join(path.resolve(process.env.OPENAI_NODE_MODULES), 'x.js'));
const OpenAI = require('openai');
// Ajv, the JavaScript JSON Schema validator, judges what structured output generates.
const Ajv2020 = require('ajv/dist/2020').default;
const addFormats = require('ajv-formats').default;

const data = process.env.TESSERA_SHARED_DATA;
const MAX_BODY = 64 * 1024;
let server, client, baseURL;

// Starts `tessera serve` on a free port; resolves once it prints where it listens.
function startServer(args) {
  const proc = spawn(process.env.TESSERA_BIN, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  return new Promise((resolve, reject) => {
    let log = '';
    proc.stderr.on('data', (chunk) => {
      log += chunk;
      const m = log.match(/on http:\/\/([\d.]+):(\d+)/);
      if (m) resolve({ proc, url: `http://${m[1]}:${m[2]}` });
    });
    proc.on('exit', (code) => reject(new Error(`tessera serve exited (${code}): ${log}`)));
  });
}

before(async () => {
  const started = await startServer([
    'serve', '--model', path.join(data, 'stories260K.bin'),
    '--tokenizer', path.join(data, 'stories260K_idtok.bin'), '--port', '0',
    '--served-model-name', 'stories', '--served-model-name', 'stories-alias',
    '--max-concurrent', '1', '--max-body-bytes', String(MAX_BODY), '--threads', '1',
  ]);
  server = started.proc;
  baseURL = started.url;
  // No retries: 429 and 5xx must reach the test as errors.
  client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
});

after(() => server?.kill('SIGTERM'));

const greedy = { model: 'stories', temperature: 0 };

describe('models and names', () => {
  test('models.list shows every --served-model-name', async () => {
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    assert.deepEqual(ids, ['stories', 'stories-alias']);
  });

  test('an alias serves, an unknown model is NotFoundError model_not_found', async () => {
    const r = await client.completions.create({ ...greedy, model: 'stories-alias', prompt: 'Once', max_tokens: 3 });
    assert.equal(r.model, 'stories-alias');
    await assert.rejects(
      client.completions.create({ model: 'gpt-4', prompt: 'Once', max_tokens: 3 }),
      (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === 'model_not_found'
        && e.type === 'invalid_request_error');
  });
});

describe('completions and chat', () => {
  test('completions.create: text, finish reason and usage', async () => {
    const r = await client.completions.create({ ...greedy, prompt: 'Once upon a time', max_tokens: 8, ignore_eos: true });
    assert.equal(r.object, 'text_completion');
    assert.equal(r.choices.length, 1);
    assert.ok(r.choices[0].text.length > 0);
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 8);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 8);
  });

  test('echo with logprobs scores the prompt (as lm-evaluation-harness asks)', async () => {
    const r = await client.completions.create({ ...greedy, prompt: 'Once upon a time', max_tokens: 1, logprobs: 1, echo: true });
    const lp = r.choices[0].logprobs;
    assert.ok(r.choices[0].text.startsWith('Once upon a time'));
    assert.equal(lp.tokens.length, r.usage.prompt_tokens + 1);
    assert.equal(lp.token_logprobs[0], null);
    assert.equal(lp.top_logprobs[0], null);
    assert.ok(lp.token_logprobs.slice(1).every((x) => typeof x === 'number' && x <= 0));
  });

  test('chat streamed equals chat not streamed; usage chunk with include_usage', async () => {
    const req = { ...greedy, messages: [{ role: 'user', content: 'Tell a story' }], max_completion_tokens: 10, ignore_eos: true };
    const whole = await client.chat.completions.create(req);
    assert.equal(whole.choices[0].message.role, 'assistant');
    assert.equal(whole.usage.completion_tokens, 10, 'max_completion_tokens');
    const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
    let text = '', usage = null, finish = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        text += c.delta.content ?? '';
        finish = c.finish_reason ?? finish;
      }
    }
    assert.equal(text, whole.choices[0].message.content);
    assert.equal(finish, 'length');
    const { prompt_tokens_details: details, ...counts } = usage;
    const { prompt_tokens_details: _, ...wholeCounts } = whole.usage;
    assert.deepEqual(counts, wholeCounts);
    // The same prompt a second time: its full block of 16 tokens came from the prefix cache.
    assert.equal(details.cached_tokens, 16);
  });

  test('n choices each with its own index, streamed and not; seeds differ per choice', async () => {
    const req = { model: 'stories', prompt: 'Once', max_tokens: 12, n: 3, seed: 11, temperature: 1, ignore_eos: true };
    const r = await client.completions.create(req);
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
    assert.notEqual(r.choices[0].text, r.choices[1].text);
    assert.equal(r.usage.completion_tokens, 36);
    const texts = ['', '', ''];
    for await (const chunk of await client.completions.create({ ...req, stream: true }))
      for (const c of chunk.choices) texts[c.index] += c.text;
    assert.deepEqual(texts, r.choices.map((c) => c.text));
    const chat = await client.chat.completions.create({
      model: 'stories', messages: [{ role: 'user', content: 'hi' }], n: 2, max_tokens: 6, seed: 3 });
    assert.deepEqual(chat.choices.map((c) => c.index), [0, 1]);
  });

  test('seed reproduces samples', async () => {
    const req = { model: 'stories', prompt: 'The cat', max_tokens: 20, temperature: 1, seed: 1234 };
    const a = await client.completions.create(req);
    const b = await client.completions.create(req);
    assert.equal(a.choices[0].text, b.choices[0].text);
  });

  test('best_of returns the n samples with the highest cumulative logprob', async () => {
    const req = { model: 'stories', prompt: 'Once', max_tokens: 10, temperature: 1, seed: 5, logprobs: 0, ignore_eos: true };
    const all = await client.completions.create({ ...req, n: 4 });
    const sums = all.choices.map((c) => c.logprobs.token_logprobs.reduce((x, y) => x + y, 0));
    const best = await client.completions.create({ ...req, n: 2, best_of: 4 });
    assert.deepEqual(best.choices.map((c) => c.index), [0, 1]);
    const want = [...sums].sort((x, y) => y - x).slice(0, 2);
    const got = best.choices.map((c) => c.logprobs.token_logprobs.reduce((x, y) => x + y, 0));
    got.forEach((g, i) => assert.ok(Math.abs(g - want[i]) < 1e-4, `${got} vs ${want}`));
  });

  test('stop strings (a list) cut the text; more than 4 is BadRequestError', async () => {
    const base = { ...greedy, prompt: 'Once upon a time', max_tokens: 40, ignore_eos: true };
    const full = (await client.completions.create(base)).choices[0].text;
    const mid = Math.floor(full.length / 2);
    const stop = full.slice(mid, mid + 4);
    const r = await client.completions.create({ ...base, stop: ['zzzz', stop] });
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.choices[0].text, full.slice(0, full.indexOf(stop)));
    await assert.rejects(client.completions.create({ ...base, stop: ['a', 'b', 'c', 'd', 'e'] }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'stop');
  });
});

describe('logprobs', () => {
  test('chat: choices[i].logprobs.content with token, logprob, bytes, top_logprobs', async () => {
    const r = await client.chat.completions.create({
      ...greedy, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5, logprobs: true, top_logprobs: 3, ignore_eos: true });
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, 5);
    assert.equal(content.map((e) => e.token).join(''), r.choices[0].message.content);
    for (const e of content) {
      assert.ok(e.logprob <= 0);
      assert.deepEqual(e.bytes, [...Buffer.from(e.token, 'utf8')]);
      assert.equal(e.top_logprobs.length, 3);
      assert.equal(e.top_logprobs[0].token, e.token, 'greedy picks the most likely');
    }
  });

  test('completions: legacy tokens / token_logprobs / top_logprobs / text_offset', async () => {
    const r = await client.completions.create({ ...greedy, prompt: 'Once', max_tokens: 4, logprobs: 2, ignore_eos: true });
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, 4);
    assert.equal(lp.token_logprobs.length, 4);
    assert.equal(Object.keys(lp.top_logprobs[0]).length, 2);
    assert.equal(lp.text_offset[0], 0);
    assert.equal(lp.text_offset[1], Buffer.byteLength(lp.tokens[0]));
  });

  test('top_logprobs over 20 is BadRequestError', async () => {
    await assert.rejects(client.chat.completions.create({
      ...greedy, messages: [{ role: 'user', content: 'hi' }], logprobs: true, top_logprobs: 21 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'top_logprobs');
  });
});

describe('structured output', () => {
  test('response_format json_schema: the content parses and satisfies the schema', async () => {
    const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] };
    const r = await client.chat.completions.create({
      ...greedy, messages: [{ role: 'user', content: 'hi' }], max_tokens: 200,
      response_format: { type: 'json_schema', json_schema: { name: 'flag', strict: true, schema } } });
    assert.equal(r.choices[0].finish_reason, 'stop');
    const v = JSON.parse(r.choices[0].message.content);
    assert.deepEqual(Object.keys(v), ['ok']);
    assert.equal(typeof v.ok, 'boolean');
  });

  test('a schema pattern holds, and vLLM\'s structured_outputs regex and grammar shape the text', async () => {
    const schema = { type: 'object', properties: { code: { type: 'string', pattern: '^[A-Z]{2}\\d{3}$' } },
      required: ['code'] };
    const chat = await client.chat.completions.create({
      ...greedy, messages: [{ role: 'user', content: 'hi' }], max_tokens: 200,
      response_format: { type: 'json_schema', json_schema: { name: 'code', schema } } });
    assert.match(JSON.parse(chat.choices[0].message.content).code, /^[A-Z]{2}\d{3}$/);
    const regex = await client.completions.create({ ...greedy, prompt: 'Once', max_tokens: 50,
      structured_outputs: { regex: '(Tom|Sue) is \\d{1,2}\\.' } });
    assert.equal(regex.choices[0].finish_reason, 'stop');
    assert.match(regex.choices[0].text, /^(Tom|Sue) is \d{1,2}\.$/);
    const grammar = await client.completions.create({ ...greedy, prompt: 'Once', max_tokens: 50,
      guided_grammar: 'root ::= "(" inner ")"\ninner ::= [a-z]{1,3} | "(" [a-z]{1,3} ")"' });
    assert.equal(grammar.choices[0].finish_reason, 'stop');
    assert.match(grammar.choices[0].text, /^\((\([a-z]{1,3}\)|[a-z]{1,3})\)$/);
  });

  test('sampled replies validate with Ajv (draft 2020-12, full formats) for bounds, multiples, tuples, formats, patterns and refs', async () => {
    const schema = { type: 'object', required: ['score', 'pair', 'day', 'at', 'mail', 'tags', 'n'],
      properties: {
        score: { type: 'number', minimum: -1, exclusiveMaximum: 1, multipleOf: 0.05 },
        pair: { type: 'array', prefixItems: [{ type: 'integer', exclusiveMinimum: 0 },
          { type: 'string', maxLength: 3 }], items: false, minItems: 2 },
        day: { type: 'string', format: 'date' },
        at: { type: 'string', format: 'date-time' },
        mail: { type: 'string', format: 'email', pattern: '^[a-z]+@', maxLength: 24 },
        tags: { type: 'array', items: { enum: ['a', 'b'] }, maxItems: 3 },
        n: { allOf: [{ $ref: '#/$defs/small' }], description: 'a small count' } },
      additionalProperties: false,
      $defs: { small: { type: 'integer', minimum: 0, maximum: 9 } } };
    // Ajv divides doubles for multipleOf: 0.15 / 0.05 is not a whole number there without a
    // precision; the grammar's multiples are exact decimals.
    const ajv = new Ajv2020({ strict: false, multipleOfPrecision: 9 });
    addFormats(ajv);
    const valid = ajv.compile(schema);
    const r = await client.chat.completions.create({
      model: 'stories', temperature: 1, seed: 13, n: 4, messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 400, response_format: { type: 'json_schema', json_schema: { name: 'mixed', schema } } });
    assert.equal(r.choices.length, 4);
    for (const c of r.choices) {
      assert.equal(c.finish_reason, 'stop', c.message.content);
      const v = JSON.parse(c.message.content);
      assert.ok(valid(v), `${c.message.content}: ${ajv.errorsText(valid.errors)}`);
      assert.ok(Math.abs(v.score * 20 - Math.round(v.score * 20)) < 1e-9, String(v.score));
    }
  });

  test('tools: tool_choice "required" and a named function give tool_calls the client parses', async () => {
    const tools = [{ type: 'function', function: { name: 'add', description: 'a + b',
      parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } },
        required: ['a', 'b'] } } }];
    const req = { ...greedy, messages: [{ role: 'user', content: 'add' }], max_tokens: 400, tools };
    for (const tool_choice of ['required', { type: 'function', function: { name: 'add' } }]) {
      const r = await client.chat.completions.create({ ...req, tool_choice, parallel_tool_calls: false });
      const msg = r.choices[0].message;
      assert.equal(msg.content, null);
      assert.equal(msg.tool_calls.length, 1);
      assert.equal(msg.tool_calls[0].type, 'function');
      assert.equal(msg.tool_calls[0].function.name, 'add');
      const args = JSON.parse(msg.tool_calls[0].function.arguments);
      assert.deepEqual(Object.keys(args).sort(), ['a', 'b']);
      assert.ok(Number.isInteger(args.a) && Number.isInteger(args.b));
      assert.equal(r.choices[0].finish_reason, tool_choice === 'required' ? 'tool_calls' : 'stop');
    }
    await assert.rejects(client.chat.completions.create(req),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice');
  });

  test('logit_bias -100 bans a token, +100 forces it', async () => {
    const base = { ...greedy, prompt: 'Once', max_tokens: 3 };
    const free = await client.completions.create(base);
    const first = free.choices[0].token_ids[0];
    const banned = await client.completions.create({ ...base, logit_bias: { [first]: -100 } });
    assert.notEqual(banned.choices[0].token_ids[0], first);
    const forced = await client.completions.create({ ...base, logit_bias: { 77: 100 } });
    assert.deepEqual(forced.choices[0].token_ids, [77, 77, 77]);
  });
});

describe('limits and rejected options', () => {
  test('response_format json_schema the grammar cannot guarantee is BadRequestError naming the keyword', async () => {
    const req = { ...greedy, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 };
    await client.chat.completions.create({ ...req, response_format: { type: 'text' } });
    const format = { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'array', not: { maxItems: 0 } } } };
    await assert.rejects(client.chat.completions.create({ ...req, response_format: format }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'response_format' && /'not'/.test(e.message));
  });

  test('prompt + max_tokens beyond the context is BadRequestError', async () => {
    await assert.rejects(client.completions.create({ ...greedy, prompt: 'Once', max_tokens: 100000 }),
      (e) => e instanceof OpenAI.BadRequestError && /maximum context length/.test(e.message));
  });

  test('a body over --max-body-bytes is a 413 APIError', async () => {
    await assert.rejects(client.completions.create({ ...greedy, prompt: 'a'.repeat(MAX_BODY), max_tokens: 1 }),
      (e) => e instanceof OpenAI.APIError && e.status === 413);
  });

  test('requests beyond --max-concurrent are RateLimitError', async () => {
    // One slow request holds the only slot (32 choices of 300 tokens); the others arrive meanwhile.
    const slow = client.completions.create({ model: 'stories', prompt: 'Once', n: 32, max_tokens: 300, ignore_eos: true });
    await new Promise((r) => setTimeout(r, 50));
    const results = await Promise.allSettled(
      Array.from({ length: 4 }, () => client.completions.create({ ...greedy, prompt: 'a', max_tokens: 1 })));
    await slow;
    const limited = results.filter((r) => r.status === 'rejected');
    assert.ok(limited.length > 0, 'some request should have hit the limit');
    for (const r of limited) assert.ok(r.reason instanceof OpenAI.RateLimitError, String(r.reason));
  });
});

describe('embeddings', () => {
  test('embeddings.create: strings and token arrays, float and base64, usage', async () => {
    // The client asks for base64 by default and decodes it to floats itself.
    const b64 = await client.embeddings.create({ model: 'stories', input: ['Once upon', 'a time'] });
    assert.equal(b64.data.length, 2);
    assert.deepEqual(b64.data.map((d) => d.index), [0, 1]);
    const dim = b64.data[0].embedding.length;
    assert.ok(dim > 0);
    assert.ok(b64.usage.prompt_tokens > 0);
    const floats = await client.embeddings.create({ model: 'stories', input: 'Once upon', encoding_format: 'float' });
    assert.equal(floats.data[0].embedding.length, dim);
    floats.data[0].embedding.forEach((x, i) => assert.ok(Math.abs(x - b64.data[0].embedding[i]) < 1e-6));
    const ids = await client.embeddings.create({ model: 'stories', input: [[1, 403, 407]], encoding_format: 'float' });
    assert.equal(ids.usage.prompt_tokens, 3);
    await assert.rejects(client.embeddings.create({ model: 'nope', input: 'a' }), OpenAI.NotFoundError);
  });
});

describe('tokenizer endpoints (fetch)', () => {
  const post = async (route, body) => {
    const res = await fetch(`${baseURL}${route}`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    return { status: res.status, body: await res.json() };
  };

  test('/tokenize a prompt and chat messages, /detokenize back', async () => {
    const t = await post('/tokenize', { model: 'stories', prompt: 'Once upon a time' });
    assert.equal(t.status, 200);
    assert.equal(t.body.count, t.body.tokens.length);
    assert.ok(t.body.max_model_len > 0);
    const d = await post('/detokenize', { model: 'stories', tokens: t.body.tokens });
    assert.equal(d.status, 200);
    assert.match(d.body.prompt, /Once upon a time/);
    const m = await post('/tokenize', { messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(m.status, 200);
    assert.ok(m.body.count > 0);
    assert.equal((await post('/tokenize', { model: 'nope', prompt: 'a' })).status, 404);
  });
});

describe('chat templates', () => {
  let templated, dir;
  before(async () => {
    // A ChatML template given with --chat-template (a tokenizer_config.json beside the model
    // works the same way); a tool message reaches its raise_exception.
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-openai-'));
    const file = path.join(dir, 'chatml.jinja');
    fs.writeFileSync(file, "{% for m in messages %}{% if m['role'] == 'tool' %}{{ raise_exception('no tools') }}"
      + "{% endif %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
      + "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}");
    const started = await startServer([
      'serve', '--model', path.join(data, 'stories260K.bin'),
      '--tokenizer', path.join(data, 'stories260K_idtok.bin'), '--port', '0', '--threads', '1',
      '--served-model-name', 'chatml', '--chat-template', file]);
    templated = started;
  });
  after(() => {
    templated?.proc.kill('SIGTERM');
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('--chat-template renders chat prompts; raise_exception is BadRequestError', async () => {
    const post = async (body) => (await fetch(`${templated.url}/tokenize`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) })).json();
    const messages = [{ role: 'user', content: 'hi' }];
    const viaTemplate = await post({ messages });
    const rendered = await post({ prompt: '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n', add_special_tokens: false });
    assert.deepEqual(viaTemplate.tokens, rendered.tokens);
    const c = new OpenAI({ baseURL: `${templated.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const r = await c.chat.completions.create({ model: 'chatml', messages, max_tokens: 2 });
    assert.equal(r.usage.prompt_tokens, viaTemplate.count);
    await assert.rejects(c.chat.completions.create({ model: 'chatml', messages: [{ role: 'tool', content: 'x' }] }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'messages' && /no tools/.test(e.message));
  });
});
