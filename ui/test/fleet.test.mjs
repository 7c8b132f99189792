// Browser test of the fleet UI (holter ui --source CLICKHOUSE). cmd/holter's
// TestFleetUI ships two hosts' recordings to ClickHouse and starts this with:
//   HOLTER_URL        the fleet UI
//   HOLTER_ARTIFACTS  where screenshots go
//   HOLTER_HOSTS      the hosts, comma-separated
// It drives Debian's headless Chromium through playwright-core.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { env as setting, session } from './lib.mjs';

const env = (name) => setting(name, 'TestFleetUI');
const url = env('HOLTER_URL');
const artifacts = env('HOLTER_ARTIFACTS');
const hosts = env('HOLTER_HOSTS').split(',');

const ui = session(artifacts);
const { errors, shot } = ui;

test('the host selector offers every host, and a vital overlays one line per host', async () => {
  const { page } = ui; // launched by now
  try {
    await page.goto(url);
    await page.waitForSelector('body[data-ready]', { timeout: 60000 });
    // The UI opens on the findings when there are incidents: the vitals
    // are a click away.
    await page.click('nav a[data-route="vitals"]');
    const options = await page.locator('#host-select option').evaluateAll((os) => os.map((o) => [o.value, o.textContent]));
    assert.deepEqual(options.map((o) => o[0]), ['', ...hosts], `host options ${JSON.stringify(options)}`);
    assert.match(options[0][1], /all 2 hosts/);
    // The whole recording: wait for its charts, not the ones drawn before
    // (they have the same lines, and the redraw detaches them).
    const before = await page.locator('#scale-info').textContent();
    await page.selectOption('#range', 'all');
    await page.waitForFunction((b) => document.getElementById('scale-info').textContent !== b, before);
    const lines = page.locator('.vital-chart[data-vital="cpu"] path.line');
    await page.waitForFunction(() => document.querySelectorAll('.vital-chart[data-vital="cpu"] path.line').length === 2);
    const names = await lines.evaluateAll((ls) => ls.map((l) => [l.dataset.vital, l.getAttribute('stroke'), l.getAttribute('d')]));
    assert.deepEqual(names.map((n) => n[0]), hosts, 'one cpu line per host, named by host');
    assert.notEqual(names[0][1], names[1][1], 'the hosts have their own colours');
    for (const [name, , d] of names) assert.ok((d.match(/L/g) ?? []).length >= 1, `${name}'s line has points: ${d}`);
    assert.equal(await page.locator('.host-legend .chip').count(), 2, 'a legend of the hosts');
    await shot('fleet-all-hosts');

    // Brush the whole cpu chart: the fleet's top processes, with their host.
    const box = await page.locator('.vital-chart[data-vital="cpu"] svg').boundingBox();
    await page.mouse.move(box.x + 55, box.y + box.height / 2);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2, { steps: 5 });
    await page.mouse.move(box.x + box.width - 12, box.y + box.height / 2, { steps: 5 });
    await page.mouse.up();
    await page.click('.drill-tabs button[data-tab="top"]');
    await page.waitForSelector('.top[data-by="comm"] tbody tr');
    const head = await page.locator('.top[data-by="comm"] thead th').allTextContents();
    assert.equal(head[1], 'host', `top processes have a host column: ${head}`);
    const rowHosts = new Set(await page.locator('.top[data-by="comm"] tbody td.host').allTextContents());
    assert.deepEqual([...rowHosts].sort(), hosts, 'both hosts have rows in the fleet top processes');
    await shot('fleet-top');

    // One host: its lines only, and the header says so.
    await page.selectOption('#host-select', hosts[1]);
    await page.waitForFunction(() => document.querySelectorAll('.vital-chart[data-vital="cpu"] path.line').length === 1);
    assert.equal(await page.locator('.host-legend .chip').count(), 0);
    await shot('fleet-one-host');
    assert.deepEqual(errors, [], 'no page errors');
  } catch (e) {
    await shot('fleet-failed');
    throw e;
  }
});
