// What the browser tests share: their environment, and one Chromium page
// per test file whose every test leaves a screenshot, pass or fail.
import { after, before, test } from 'node:test';
import { env as setting, launch } from './lib.mjs';

export const env = (name) => setting(name, 'TestUIInBrowser');

/** session launches Chromium before the file's tests and closes it after;
 * page() is its page, uiTest(title, shotName, fn) a test with a screenshot,
 * shot(name) one more screenshot. */
export function session() {
  const artifacts = env('HOLTER_ARTIFACTS');
  let browser, page;
  before(async () => {
    ({ browser, page } = await launch());
  });
  after(async () => { await browser?.close(); });
  const shot = async (name) => {
    const path = `${artifacts}/${name}.png`;
    await page.screenshot({ path, fullPage: true });
    console.log(`screenshot: ${path}`);
  };
  const uiTest = (title, shotName, fn) => test(title, async () => {
    try {
      await fn();
    } finally {
      // A screenshot is an artifact: its failure (a starved browser) must
      // not hide the test's own outcome.
      await shot(shotName).catch((e) => console.log(`screenshot ${shotName} failed: ${e.message}`));
    }
  });
  return { uiTest, shot, page: () => page };
}
