// Browser test of the Findings tab, against `holter ui` serving a stored
// recording in which cmd/holter's TestUIInBrowser stored a busy-loop
// finding about its cpu_spin workload (the recorder's online analysis may
// have stored more). Environment:
//   HOLTER_URL, HOLTER_ARTIFACTS  as browser.test.mjs
//   HOLTER_FINDING_RULE           the stored finding's rule
//   HOLTER_CPU_COMM               the process it names
//   HOLTER_CPU_FUNC               the function it names
//   HOLTER_UNRECORDED_VITAL       a vital a second recording, after a
//                                 pause, left out
import assert from 'node:assert/strict';
import { env, session } from './harness.mjs';

const url = env('HOLTER_URL');
const rule = env('HOLTER_FINDING_RULE');
const comm = env('HOLTER_CPU_COMM');
const func = env('HOLTER_CPU_FUNC');
const leftOut = env('HOLTER_UNRECORDED_VITAL');
const { uiTest, shot, page: pageOf } = session();

uiTest('the UI opens on the ranked incidents, each naming its culprit and showing its samples', 'findings', async () => {
  const page = pageOf();
  await page.goto(url);
  await page.waitForSelector('body[data-ready]', { timeout: 60000 });
  // With incidents in the range it shows, the UI opens on them.
  await page.waitForFunction(() => location.hash === '#/findings', null, { timeout: 60000 });
  await page.waitForSelector('#incidents li.incident', { timeout: 60000 }); // the findings take seconds on a loaded machine
  const ranks = await page.$$eval('#incidents li.incident', (lis) => lis.map((li) => Number(li.dataset.rank)));
  assert.deepEqual(ranks, ranks.map((_, i) => i + 1), `incidents not ranked 1..n: ${ranks}`);
  // Its incident (another may name the same function: rule 7 blames the
  // spinner for the waits of others).
  const card = page.locator(`#incidents li.incident[data-function="${func}"][data-rules~="${rule}"]`).first();
  await card.waitFor();
  const text = await card.textContent();
  assert.ok(text.includes(comm) && text.includes(func), `the incident does not name ${comm} in ${func}: ${text}`);
  assert.match(await card.getAttribute('data-rules'), new RegExp(rule));
  await card.locator('details.evidence summary').click();
  assert.match(await card.locator('details.evidence').textContent(), new RegExp(rule));
  await shot('findings-list');
  // Its flame graph: the vitals page, its range selected, its process.
  await card.locator('button.show-flame').click();
  await page.waitForSelector('#page-vitals:not([hidden]) #drill:not([hidden])');
  assert.match(await page.textContent('#sel-info'), /Selected/);
  await page.waitForSelector('.drill-tabs button.active[data-tab="flame"]');
  assert.ok(Number(await page.inputValue('#f-pid')) > 0, 'the drill-down is not filtered to the culprit');
  await page.waitForSelector(`#flame-graph g.frame[data-name="${func}"]`);
  await shot('findings-flame');
  // The charts mark the incidents: the overlay all, each vital's chart
  // those with findings of that vital only.
  await page.selectOption('#range', 'all');
  await page.waitForSelector('.vital-chart[data-vital="cpu"] rect.finding');
  await page.waitForSelector('#overlay-chart rect.finding');
  const marks = await page.$$eval('.vital-chart rect.finding', (rs) => rs.map((r) => ({ chart: r.closest('.vital-chart').dataset.vital, of: r.dataset.vitals })));
  for (const m of marks) assert.ok(m.of.split(' ').includes(m.chart), `the ${m.chart} chart marks a finding of ${m.of}`);
  await shot('findings-marks');
});

uiTest('the charts say where the recorder was not running and where it did not record a vital', 'coverage', async () => {
  const page = pageOf();
  await page.click('nav a[data-route="vitals"]');
  await page.selectOption('#range', 'all');
  const off = page.locator('#overlay-chart rect.note.off').first();
  await off.waitFor();
  assert.match(await off.locator('title').textContent(), /nothing recorded.*holter was not running/);
  const unrecorded = page.locator(`.vital-chart[data-vital="${leftOut}"] rect.note.unrecorded`).first();
  await unrecorded.waitFor();
  assert.match(await unrecorded.locator('title').textContent(), new RegExp(`${leftOut} not recorded`));
  assert.equal(await page.locator('.vital-chart[data-vital="cpu"] rect.note.unrecorded').count(), 0, 'cpu was recorded throughout');
  assert.match(await page.textContent('#no-data'), /Hatched: not recorded/);
});
