// What TestUIInBrowser's scripts share: their environment, and one
// Chromium page per test file whose every test leaves a screenshot, pass
// or fail.
import { test } from 'node:test';
import { env as setting, session as chromiumSession } from './lib.mjs';

export const env = (name) => setting(name, 'TestUIInBrowser');

/** session launches Chromium before the file's tests and closes it after;
 * page() is its page, uiTest(title, shotName, fn) a test with a screenshot,
 * shot(name) one more screenshot. */
export function session() {
  const s = chromiumSession(env('HOLTER_ARTIFACTS'));
  const uiTest = (title, shotName, fn) => test(title, async () => {
    try {
      await fn();
    } finally {
      // A screenshot is an artifact: its failure (a starved browser) must
      // not hide the test's own outcome.
      await s.shot(shotName).catch((e) => console.log(`screenshot ${shotName} failed: ${e.message}`));
    }
  });
  return { uiTest, shot: s.shot, page: () => s.page };
}
