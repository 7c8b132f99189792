// Browser test of request paths in the fleet UI (holter ui --source
// CLICKHOUSE). cmd/holter's TestFleetSpans sends one request's spans to two
// agents, ships them to ClickHouse and starts this with:
//   HOLTER_URL        the fleet UI
//   HOLTER_ARTIFACTS  where screenshots go
//   HOLTER_TRACE_ID   the request whose spans both hosts recorded
//   HOLTER_HOSTS      its spans' hosts, comma-separated, in order
// It drives Debian's headless Chromium through playwright-core.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { env as setting, session } from './lib.mjs';

const env = (name) => setting(name, 'TestFleetSpans');
const url = env('HOLTER_URL');
const artifacts = env('HOLTER_ARTIFACTS');
const traceId = env('HOLTER_TRACE_ID');
const hosts = env('HOLTER_HOSTS').split(',');

const ui = session(artifacts);
const { errors, shot } = ui;

test('the Request traces tab lists the cross-host request and draws its whole waterfall', async () => {
  const { page } = ui; // launched by now
  try {
    await page.goto(url);
    await page.waitForSelector('body[data-ready]', { timeout: 60000 });
    await page.click('nav a[data-route="traces"]');
    const row = `#traces-table tr[data-trace="${traceId}"]`;
    await page.waitForSelector(row);
    assert.equal(await page.textContent(`${row} td.hosts`), hosts.join(', '), 'the request lists both hosts');
    await page.click(row);
    await page.waitForSelector('#trace-detail svg.waterfall g.span');
    const spans = await page.$$eval('#trace-detail svg.waterfall g.span',
      (gs) => gs.map((g) => `${g.dataset.service}@${g.dataset.host}${g.classList.contains('remote') ? ' remote' : ''}${g.classList.contains('batch') ? ' batch' : ''}`));
    assert.deepEqual(spans, [`front@${hosts[0]}`, `middle@${hosts[1]} remote`, `storage@${hosts[0]} remote`, `middle@${hosts[1]} batch`],
      'front → middle → storage across the hosts, then the batch billed to it');
    const costs = await page.$$eval('#trace-detail svg.waterfall g.span text.cost', (ts) => ts.map((t) => t.textContent.split(' · ')[0]));
    assert.deepEqual(costs, [hosts[0], hosts[1], hosts[0], hosts[1]], 'each span names its host');
    // The workload's latency graph crosses the hosts: front → middle and
    // middle → storage are remote hops, both ways.
    await page.waitForSelector('#latency-graph svg.lgraph g.node');
    assert.ok(await page.locator('#latency-graph svg.lgraph path.edge.remote').count() >= 4, 'the remote hops are drawn');
    await shot('fleet-trace');
    assert.deepEqual(errors, [], 'no page errors');
  } catch (e) {
    await shot('fleet-trace-failed');
    throw e;
  }
});
