// Browser tests of the UI against a live recording. cmd/holter's
// TestUIInBrowser records while workloads run and starts this with:
//   HOLTER_URL        the recorder's UI
//   HOLTER_ARTIFACTS  where screenshots go
//   HOLTER_CPU_FUNC   a function the cpu workload spins in (comm HOLTER_CPU_COMM)
//   HOLTER_BLCK_FUNC  a function the blocking workload sleeps under
// It drives Debian's headless Chromium through playwright-core.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { env as setting, launch } from './lib.mjs';

const env = (name) => setting(name, 'TestUIInBrowser');
const url = env('HOLTER_URL');
const artifacts = env('HOLTER_ARTIFACTS');
const cpuFunc = env('HOLTER_CPU_FUNC');
const cpuComm = env('HOLTER_CPU_COMM');
const blckFunc = env('HOLTER_BLCK_FUNC');

let browser, page;
// uiTest runs one test and saves its screenshot, pass or fail.
const uiTest = (title, shotName, fn) => test(title, async () => {
  try {
    await fn();
  } finally {
    const path = `${artifacts}/${shotName}.png`;
    await page.screenshot({ path, fullPage: true });
    console.log(`screenshot: ${path}`);
  }
});

before(async () => { ({ browser, page } = await launch()); });
after(async () => { await browser?.close(); });

uiTest('the dashboard loads and its graphs show data', 'dashboard', async () => {
  await page.goto(url);
  await page.waitForSelector('body[data-ready]', { timeout: 15000 });
  const t = await page.evaluate(() => ({
    fcp: performance.getEntriesByName('first-contentful-paint')[0]?.startTime,
    dashboard: performance.getEntriesByName('holter-dashboard')[0]?.startTime,
  }));
  console.log(`timing: first contentful paint ${t.fcp?.toFixed(0)} ms, dashboard drawn ${t.dashboard?.toFixed(0)} ms`);
  assert.ok(t.dashboard > 0, 'the dashboard mark is set');
  // Spread the few epochs of the recording over the whole width.
  await page.selectOption('#range', 'all');
  await page.waitForSelector('.vital-chart[data-vital="cpu"] circle.pt');
  const points = await page.locator('.vital-chart[data-vital="cpu"] circle.pt').count();
  assert.ok(points >= 3, `cpu graph has ${points} points`);
  const d = await page.getAttribute('.vital-chart[data-vital="cpu"] path.line', 'd');
  assert.match(d, /^M[\d.]+,[\d.]+L/, 'the cpu line joins its points');
});

uiTest('two vitals overlay on one normalised graph, and a third joins', 'overlay', async () => {
  for (const v of ['cpu', 'blck']) {
    assert.ok(await page.isChecked(`input[name="overlay"][value="${v}"]`));
    await page.waitForSelector(`#overlay-chart path.line[data-vital="${v}"]`);
  }
  await page.check('input[name="overlay"][value="syscall"]');
  await page.waitForSelector('#overlay-chart path.line[data-vital="syscall"]');
  assert.equal(await page.locator('#overlay-chart path.line').count(), 3);
  // Normalised: every line's highest point is at the top of the plot.
  const tops = await page.$$eval('#overlay-chart circle.pt', (cs) => {
    const by = {};
    for (const c of cs) by[c.dataset.vital] = Math.min(by[c.dataset.vital] ?? Infinity, +c.getAttribute('cy'));
    return Object.values(by);
  });
  assert.ok(Math.max(...tops) - Math.min(...tops) < 1, `series tops ${tops} differ`);
});

uiTest('clicking an epoch lists its samples, filterable by process', 'samples', async () => {
  const pts = page.locator('.vital-chart[data-vital="cpu"] circle.pt');
  const n = await pts.count();
  await pts.nth(Math.floor(n / 2)).click();
  await page.waitForSelector('#samples-table tbody tr');
  assert.match(await page.textContent('#sel-info'), /Selected/);
  await page.fill('#f-comm', cpuComm);
  await page.dispatchEvent('#f-comm', 'change');
  await page.fill('#f-func', cpuFunc);
  await page.dispatchEvent('#f-func', 'change');
  await page.waitForFunction((c) => {
    const cells = [...document.querySelectorAll('#samples-table tbody tr td:nth-child(7)')];
    return cells.length > 0 && cells.every((td) => td.textContent === c);
  }, cpuComm, { timeout: 10000 });
});

uiTest("a sample opens its stack with the workload's function", 'sample-stack', async () => {
  await page.click('#samples-table tbody tr');
  await page.waitForSelector('#sample-detail .stack[data-kind="user"] li');
  const user = await page.textContent('#sample-detail .stack[data-kind="user"]');
  assert.ok(user.includes(cpuFunc), `user stack lacks ${cpuFunc}: ${user}`);
  assert.match(await page.textContent('#sample-detail .fields'), /ip/, 'the cpu sample shows its ip field');
});

uiTest("the on-CPU and off-CPU flame graphs show the workloads' functions", 'flame', async () => {
  for (const f of ['#f-comm', '#f-func']) {
    await page.fill(f, '');
    await page.dispatchEvent(f, 'change');
  }
  await page.click('.drill-tabs button[data-tab="flame"]');
  await page.waitForSelector(`#flame-graph g.frame[data-name="${cpuFunc}"]`);
  await page.selectOption('#flame-vital', 'blck');
  await page.waitForSelector(`#flame-graph g.frame[data-name="${blckFunc}"]`);
});

uiTest('a differential flame graph compares two ranges', 'flame-diff', async () => {
  await page.selectOption('#flame-vital', 'cpu');
  await page.waitForSelector(`#flame-graph g.frame[data-name="${cpuFunc}"]`);
  await page.click('text=use as baseline');
  const pts = page.locator('.vital-chart[data-vital="cpu"] circle.pt');
  await pts.nth((await pts.count()) - 2).click();
  await page.check('#flame-diff');
  await page.waitForFunction(() => /baseline/.test(document.querySelector('#flame-info')?.textContent ?? ''));
  await page.waitForSelector(`#flame-graph g.frame[data-name="${cpuFunc}"]`);
  const fill = await page.getAttribute(`#flame-graph g.frame[data-name="${cpuFunc}"] rect`, 'fill');
  assert.match(fill, /^rgb\(/, 'differential frames are coloured by change');
});

uiTest('top tables rank processes, executables and sites', 'top', async () => {
  await page.click('.drill-tabs button[data-tab="top"]');
  await page.selectOption('#top-vital', 'cpu');
  await page.waitForSelector('.top[data-by="comm"] tbody tr');
  assert.ok((await page.textContent('.top[data-by="comm"]')).includes(cpuComm));
  assert.ok((await page.textContent('.top[data-by="site"]')).length > 0);
});

uiTest('future tabs have their place', 'future-tab', async () => {
  await page.click('nav a[data-route="findings"]');
  await page.waitForSelector('#page-future h2');
  assert.ok(await page.isHidden('#page-vitals'));
  await page.click('nav a[data-route="vitals"]');
  assert.ok(await page.isVisible('#page-vitals'));
});
