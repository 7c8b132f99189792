// What the browser tests share: their settings from the environment, and
// Debian's headless Chromium driven through playwright-core.
import { after, before } from 'node:test';
import { chromium } from 'playwright-core';

/** env returns a required setting, which the Go test named sets. */
export const env = (name, goTest) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run this through cmd/holter's ${goTest}`);
  return v;
};

/** launch starts Chromium and opens a page that logs its errors (and
 * keeps them in errors). */
export async function launch(errors = []) {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.setDefaultTimeout(45000); // a loaded 2-CPU machine answers slowly (seconds a findings request)
  page.on('pageerror', (e) => { errors.push(e.message); console.log('page error:', e.message); });
  return { browser, page };
}

/** session launches Chromium before a script's tests and closes it after
 * them; its page is set once they start, and shot saves a full-page
 * screenshot NAME.png in artifacts. */
export function session(artifacts) {
  const s = { errors: [], browser: null, page: null };
  before(async () => { ({ browser: s.browser, page: s.page } = await launch(s.errors)); });
  after(async () => { await s.browser?.close(); });
  s.shot = async (name) => {
    const path = `${artifacts}/${name}.png`;
    await s.page.screenshot({ path, fullPage: true });
    console.log(`screenshot: ${path}`);
  };
  return s;
}
