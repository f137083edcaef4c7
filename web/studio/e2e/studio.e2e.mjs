// End to end in Debian's headless Chromium (playwright-core, executablePath /usr/bin/chromium,
// no downloaded browser): a real `tessera studio` ($TESSERA_BIN) on a fresh data folder; sign
// in, register a model and start a service through the UI, chat with streaming and press stop
// (the answer ends "cancelled"), see a hung service marked unresponsive, open a training run's
// curves and compare two benchmarks, with a screenshot of every page into $STUDIO_SCREENSHOTS.
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';

const KEY = 'e2e-key';
const data = process.env.TESSERA_SHARED_DATA;
const shots = process.env.STUDIO_SCREENSHOTS;
mkdirSync(shots, { recursive: true });
const work = mkdtempSync(join(tmpdir(), 'tessera-studio-e2e-'));

// A training run folder as `tessera train --out` leaves it.
const run = join(work, 'run');
mkdirSync(run);
writeFileSync(join(run, 'config.json'), JSON.stringify({ arch: 'gpt2', model: { n_layer: 2 }, train: { lr: 1e-3 } }));
let lines = '';
for (let step = 1; step <= 60; ++step) {
  const lr = step < 10 ? 1e-3 * (step / 10) : 1e-3 * (0.5 + 0.5 * Math.cos((Math.PI * (step - 10)) / 50));
  lines += JSON.stringify({ step, train_loss: 4.2 * Math.exp(-step / 25) + 1.1 + 0.05 * Math.sin(step), lr, tok_per_s: 48000 + 900 * Math.sin(step / 3) }) + '\n';
  if (step % 20 === 0) lines += JSON.stringify({ step, val_loss: 4.2 * Math.exp(-step / 25) + 1.25 }) + '\n';
}
writeFileSync(join(run, 'metrics.jsonl'), lines);
writeFileSync(join(run, 'samples.jsonl'), JSON.stringify({ step: 40, text: 'ROMEO:\nWhat light through yonder window breaks?' }) + '\n');

// A run folder of `tessera train`, one step on tinyshakespeare: a 19M-parameter character-level
// LLaMA. Made before the studio starts: the synchronous spawn blocks this event loop.
const slowModel = join(work, 'slow-model');
{
  const r = spawnSync(process.env.TESSERA_BIN, ['train', '--model', 'llama', '--n-layer', '6', '--n-embd', '512',
    '--n-head', '8', '--seq-len', '512', '--batch-size', '1', '--max-steps', '1', '--eval-steps', '1',
    '--sample-tokens', '0', '--data', join(data, 'tinyshakespeare.txt'), '--out', slowModel], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
}

const studio = spawn(process.env.TESSERA_BIN, ['studio', '--port', '0', '--data-dir', join(work, 'studio'), '--api-key', KEY], { stdio: ['ignore', 'ignore', 'pipe'] });
let stderr = '';
const base = await new Promise((resolve, reject) => {
  studio.stderr.on('data', (d) => {
    stderr += d;
    const m = stderr.match(/studio: (http:\/\/[\d.]+:\d+)/);
    if (m) resolve(m[1]);
  });
  studio.on('exit', (code) => reject(new Error(`studio exited ${code}: ${stderr}`)));
});
const api = async (method, path, body) => {
  const r = await fetch(base + '/api' + path, { method, headers: { Authorization: `Bearer ${KEY}` }, body: body && JSON.stringify(body) });
  const j = await r.json();
  assert.ok(r.ok, `${method} ${path}: ${JSON.stringify(j)}`);
  return j;
};

const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox', '--headless=new'] });
const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
const errors = [];
page.on('pageerror', (e) => errors.push(e.message));
const shot = (name) => page.screenshot({ path: join(shots, `${name}.png`) });
const go = async (name) => {
  await page.goto(`${base}/#${name}`);
  await page.waitForSelector('.page-title');
};
const pick = async (select, option) => {
  await page.locator(select).click();
  await page.locator('.ant-select-item-option:visible', { hasText: option }).first().click();
  // Let the dropdown's closing animation end, so the next pick finds only its own options.
  await page.waitForFunction(() => ![...document.querySelectorAll('.ant-select-dropdown')].some((d) => d.offsetParent !== null));
};

try {
  // Sign in with the key.
  await go('overview');
  await page.getByPlaceholder('API key').fill(KEY);
  await page.locator('[data-test=login]').click();
  await page.getByText('API key ✓').waitFor();

  // Accelerators: this CPU, and a hardware bench whose figures attach to it.
  await api('POST', '/accelerators', { brand: 'Intel', model: 'Test CPU 9000', memory_bytes: 8e9, compute: { fp32: 1e12 } });
  const bench = JSON.parse(readFileSync(join(process.env.STUDIO_FIXTURES, 'bench_hardware.json'), 'utf8'));
  await api('POST', '/benchmarks', bench);
  await api('POST', '/accelerators/detect');
  await go('accelerators');
  await page.getByText('gemm fp32 200 GFLOP/s').waitFor();
  await shot('accelerators');

  // Models: registered through the form.
  await go('models');
  await page.getByPlaceholder('Path').fill(join(data, 'stories260K.bin'));
  await page.getByPlaceholder('Tokenizer (optional)').fill(join(data, 'stories260K_idtok.bin'));
  await page.getByPlaceholder('Name').fill('stories260K');
  await page.locator('[data-test=register-model]').click();
  await page.getByText('llama2.c').waitFor();
  await page.locator('[data-test=kv-1]', { hasText: '1.28 KB' }).waitFor();  // 5 layers x 4 KV heads x 8 x 2 x 4 B
  await shot('models');

  // Services: created and started through the UI, with an extra serve option.
  await go('services');
  await page.getByPlaceholder('Name').fill('stories');
  await pick('[data-test=service-model]', 'stories260K');
  await page.locator('[data-test=service-args]').fill('--max-model-len 480');
  await page.locator('[data-test=create-service]').click();
  await page.locator('[data-test=args-1]', { hasText: '--max-model-len=480' }).waitFor();
  await page.locator('[data-test=start-1]').click();
  await page.locator('[data-test=state-1]', { hasText: 'running' }).waitFor({ timeout: 120000 });
  const stories = (await api('GET', '/services')).find((x) => x.id === 1);
  const card = await (await fetch(`${stories.url}/v1/models`)).json();
  assert.equal(card.data[0].max_model_len, 480, JSON.stringify(card));

  // Chat: a streamed answer with its speed figures, then one stopped with the stop button.
  await go('chat');
  await pick('[data-test=chat-service]', 'stories');
  await page.locator('[data-test=new-chat]').click();
  await page.locator('input[data-test=max-tokens], [data-test=max-tokens] input').fill('40');
  await page.getByPlaceholder('Type a message…').fill('Once upon a time');
  await page.locator('[data-test=send]').click();
  await page.locator('[data-test=msg-stats]', { hasText: 'length' }).first().waitFor();
  // An answer held to a regular expression: the service constrains its decoding.
  await pick('[data-test=output]', 'Regular expression');
  await page.locator('[data-test=output-spec]').fill('(Tom|Lily) (ran|smiled)\\.');
  await page.getByPlaceholder('Type a message…').fill('Who?');
  await page.locator('[data-test=send]').click();
  await page.locator('[data-test=msg-stats]', { hasText: 'stop' }).first().waitFor();
  const held = await api('GET', '/conversations/1');
  assert.match(held.messages[3].content, /^(Tom|Lily) (ran|smiled)\.$/, JSON.stringify(held.messages[3]));
  await pick('[data-test=output]', 'Free text');
  // The stop button is pressed on a model slow enough that the stop lands while the answer is
  // still being written (stories260K writes 10,000 tokens/s; this one a few hundred).
  await api('POST', '/models', { path: slowModel, name: 'slow-llama' });
  const created = await api('POST', '/services', { name: 'slow', model_id: 2 });
  const service = await api('POST', `/services/${created.id}/start`);
  await pick('[data-test=chat-service]', 'slow');
  await page.locator('[data-test=new-chat]').click();
  await page.waitForFunction(() => document.querySelectorAll('[data-test=msg-stats]').length === 0);
  await page.locator('input[data-test=max-tokens], [data-test=max-tokens] input').fill('250');
  await page.locator('[data-test=ignore-eos]').click();
  await page.getByPlaceholder('Type a message…').fill('Tell me a long story');
  // Press stop from inside the page at the first streamed token.
  const stopped = page.evaluate(() => new Promise((resolve) => {
    const observer = new MutationObserver(() => {
      const stop = document.querySelector('[data-test=stop]');
      const stats = document.querySelectorAll('[data-test=msg-stats]');
      if (stop && stats.length === 1) {
        observer.disconnect();
        stop.click();
        resolve(true);
      }
    });
    observer.observe(document.body, { childList: true, subtree: true, characterData: true });
  }));
  await page.locator('[data-test=send]').click();
  assert.equal(await stopped, true);
  await page.locator('[data-test=msg-stats]', { hasText: 'cancelled' }).waitFor();
  const history = await api('GET', '/conversations/2');
  assert.ok(history.messages[1].stats.tokens < 250, JSON.stringify(history.messages[1].stats));
  assert.equal(history.settings.max_tokens, 250);
  await page.locator('[data-test=send]').waitFor();
  // The input row ends inside its column, left of the settings card (it once ran under it).
  const row = await page.locator('[data-test=chat-input-row]').boundingBox();
  const exportButton = await page.locator('[data-test=export]').boundingBox();
  const settingsCard = await page.locator('.ant-card', { has: page.locator('[data-test=max-tokens]') }).boundingBox();
  assert.ok(exportButton.x + exportButton.width <= row.x + row.width + 1, JSON.stringify({ row, exportButton }));
  assert.ok(row.x + row.width <= settingsCard.x, JSON.stringify({ row, settingsCard }));
  await page.locator('.ant-list-item').last().click();  // the screenshot shows the finished answer
  await page.locator('[data-test=msg-stats]', { hasText: 'length' }).waitFor();
  // It shows the settings that answer was asked with.
  assert.equal(await page.locator('[data-test=max-tokens] input, input[data-test=max-tokens]').inputValue(), '40');
  assert.equal(await page.locator('input[data-test=ignore-eos], [data-test=ignore-eos] input').isChecked(), false);
  await page.waitForTimeout(500);  // the checkbox's unchecking animation
  await shot('chat');
  const metrics = await api('GET', `/services/${service.id}/metrics`);
  assert.equal(metrics.tessera_requests_running, 0, 'a stopped request still runs in the engine');

  // A reasoning service (stories260K under --reasoning-parser deepseek_r1, whose template opens
  // the thought, so all it writes is thinking) shows the thinking in its own block.
  const thinker = await api('POST', '/services', { name: 'thinker', model_id: 1, args: ['--reasoning-parser=deepseek_r1'] });
  await api('POST', `/services/${thinker.id}/start`);
  await pick('[data-test=chat-service]', 'thinker');
  await page.locator('[data-test=new-chat]').click();
  await page.waitForFunction(() => document.querySelectorAll('[data-test=msg-stats]').length === 0);
  await pick('[data-test=output]', 'Free text');  // a grammar-held reply is not split
  await page.getByPlaceholder('Type a message…').fill('Once upon a time');
  await page.locator('[data-test=send]').click();
  await page.waitForFunction(() => {
    const stats = document.querySelector('[data-test=msg-stats]');
    return stats && !stats.textContent.includes('…');
  });
  assert.match(await page.locator('[data-test=msg-thinking]').innerText(), /^Thinking/);
  const thought = (await api('GET', `/conversations/${(await api('GET', '/conversations'))[0].id}`)).messages[1];
  assert.ok(thought.reasoning.length > 0 && thought.content === '', JSON.stringify(thought));
  await api('POST', `/services/${thinker.id}/stop`);

  // Services page with the live metrics of the service that just answered.
  await go('services');
  await page.locator('[data-test=state-1]').click();
  await page.locator('[data-test=logs]').waitFor();
  await page.waitForTimeout(2500);
  await shot('services');
  // A hung server (its process stopped) is marked as not answering /health.
  process.kill(service.pid, 'SIGSTOP');
  await go('services');
  await page.locator(`[data-test=health-${service.id}]`, { hasText: 'not answering' }).waitFor();
  process.kill(service.pid, 'SIGCONT');
  await page.locator(`[data-test=health-${service.id}]`).waitFor({ state: 'detached', timeout: 15000 });

  // Training run curves.
  await api('POST', '/runs', { path: run, name: 'shakespeare-char' });
  await go('runs');
  await page.getByText('shakespeare-char').click();
  await page.locator('[data-test=loss-chart] polyline').first().waitFor();
  await page.getByText('What light through yonder').waitFor();
  await shot('runs');

  // Benchmarks: a second run to compare with.
  const later = structuredClone(bench);
  later.date = '2026-11-24T09:00:00Z';
  later.commit = 'b7e1c2d0aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa';
  later.figures[0].median = 2.6e11;
  later.figures[1].median = 9.8e9;
  await api('POST', '/benchmarks', later);
  await go('benchmarks');
  await pick('[data-test=bench-a]', '#1');
  await pick('[data-test=bench-b]', '#2');
  await page.locator('[data-test=compare]').click();
  await page.getByText('1.300×').waitFor();
  await page.locator('.ant-table-row', { hasText: '2026-11-24T09:00:00Z' }).first().click();
  await page.getByText('Min – max').waitFor();
  await shot('benchmarks');

  await go('overview');
  await page.locator('.ant-statistic').first().waitFor();
  await page.waitForTimeout(500);
  await shot('overview');
  await page.locator('[data-test=lang]').click();
  await page.getByText('概览').first().waitFor();
  await shot('overview-zh');
  assert.deepEqual(errors, [], 'errors in the page');
  for (const id of [1, service.id]) await api('POST', `/services/${id}/stop`);
  console.log(`studio e2e: passed; screenshots in ${shots}`);
} catch (e) {
  await shot('failure').catch(() => {});
  console.error(stderr);
  throw e;
} finally {
  await browser.close();
  // Leave no service behind when a step failed before its stop.
  for (const id of [1, 2])
    await fetch(`${base}/api/services/${id}/stop`, { method: 'POST', headers: { Authorization: `Bearer ${KEY}` } }).catch(() => {});
  studio.kill('SIGTERM');
}
