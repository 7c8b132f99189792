// Browser test of the Findings tab, against `holter ui` serving a stored
// recording in which cmd/holter's TestUIInBrowser stored a busy-loop
// finding about its cpu_spin workload (the recorder's online analysis may
// have stored more). Environment:
//   HOLTER_URL, HOLTER_ARTIFACTS  as browser.test.mjs
//   HOLTER_FINDING_RULE           the stored finding's rule
//   HOLTER_CPU_COMM               the process it names
//   HOLTER_CPU_FUNC               the function it names
import assert from 'node:assert/strict';
import { env, session } from './harness.mjs';

const url = env('HOLTER_URL');
const rule = env('HOLTER_FINDING_RULE');
const comm = env('HOLTER_CPU_COMM');
const func = env('HOLTER_CPU_FUNC');
const { uiTest, shot, page: pageOf } = session();

uiTest('the UI opens on the ranked incidents, each naming its culprit and showing its samples', 'findings', async () => {
  const page = pageOf();
  await page.goto(url);
  await page.waitForSelector('body[data-ready]', { timeout: 60000 });
  // With incidents in the range it shows, the UI opens on them.
  await page.waitForFunction(() => location.hash === '#/findings', null, { timeout: 15000 });
  await page.waitForSelector('#incidents li.incident');
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
  // The charts mark the incidents.
  await page.selectOption('#range', 'all');
  await page.waitForSelector('.vital-chart[data-vital="cpu"] rect.finding');
});
