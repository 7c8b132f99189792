// Browser test of the Findings tab, against `holter ui` serving a stored
// recording in which cmd/holter's TestUIInBrowser stored a finding through
// the findings package (evaluate, attribute, store). Environment:
//   HOLTER_URL, HOLTER_ARTIFACTS  as browser.test.mjs
//   HOLTER_FINDING_RULE           the stored finding's rule
//   HOLTER_CPU_COMM               a process the finding names
import assert from 'node:assert/strict';
import { env, session } from './harness.mjs';

const url = env('HOLTER_URL');
const rule = env('HOLTER_FINDING_RULE');
const comm = env('HOLTER_CPU_COMM');
const { uiTest, shot, page: pageOf } = session();

uiTest('a stored finding is listed, marked on the charts, and picks its range', 'findings', async () => {
  const page = pageOf();
  await page.goto(url);
  await page.waitForSelector('body[data-ready]', { timeout: 15000 });
  await page.selectOption('#range', 'all');
  await page.waitForSelector('.vital-chart[data-vital="cpu"] rect.finding');
  await page.click('nav a[data-route="findings"]');
  await page.waitForSelector(`#findings-table tr.finding[data-rule="${rule}"]`);
  const row = page.locator(`#findings-table tr.finding[data-rule="${rule}"]`).first();
  const text = await row.textContent();
  assert.ok(text.includes(comm), `the finding does not name ${comm}: ${text}`);
  assert.match(text, /evidence: /);
  await shot('findings-list');
  await page.selectOption('#finding-rule', rule);
  await page.waitForFunction((r) => [...document.querySelectorAll('#findings-table tr.finding')].every((tr) => tr.dataset.rule === r), rule);
  await page.locator(`#findings-table tr.finding[data-rule="${rule}"]`).first().click();
  await page.waitForSelector('#page-vitals:not([hidden]) #drill:not([hidden])');
  assert.match(await page.textContent('#sel-info'), /Selected/);
  await page.waitForSelector('#samples-table tbody tr');
});
