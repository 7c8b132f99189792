// Browser tests of the UI against a live recording. cmd/holter's
// TestUIInBrowser records while workloads run and starts this with:
//   HOLTER_URL        the recorder's UI
//   HOLTER_ARTIFACTS  where screenshots go
//   HOLTER_CPU_FUNC   a function the cpu workload spins in (comm HOLTER_CPU_COMM)
//   HOLTER_BLCK_FUNC  a function the blocking workload sleeps under
//   HOLTER_TRACE_ID   a request posted over OTLP: client → front → storage,
//                     with an asynchronous write-back and a coalesced batch
// It drives Debian's headless Chromium through playwright-core.
import assert from 'node:assert/strict';
import { availableParallelism as cpus } from 'node:os';
import { env, session } from './harness.mjs';

const url = env('HOLTER_URL');
const cpuFunc = env('HOLTER_CPU_FUNC');
const cpuComm = env('HOLTER_CPU_COMM');
const blckFunc = env('HOLTER_BLCK_FUNC');
const traceId = env('HOLTER_TRACE_ID');
const { uiTest, page: pageOf } = session();
let page;

uiTest('the dashboard loads and its graphs show data', 'dashboard', async () => {
  page = pageOf();
  await page.goto(url);
  await page.waitForSelector('body[data-ready]', { timeout: 60000 });
  // The UI opens on the findings when there are incidents: the vitals
  // are a click away.
  await page.click('nav a[data-route="vitals"]');
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
  // Joined, except across a gap of the recording (a recorder lagging on a
  // loaded machine leaves long epochs and breaks the line there).
  assert.match(d, /^M[\d.]+,[\d.]+(M[\d.]+,[\d.]+)*L/, 'the cpu line joins its points');
  // CPU reads in cores, its total as time on CPU, not in "µs on CPU/s".
  assert.match(await page.textContent('.vital-chart[data-vital="cpu"] text.ylabel'), /^cores busy/);
  const ticks = await page.$$eval('.vital-chart[data-vital="cpu"] text.tick[text-anchor="end"]', (ts) => ts.map((t) => t.textContent));
  const top = Math.max(...ticks.map(Number));
  assert.ok(top > 0 && top <= 2 * cpus() + 1, `cpu axis up to ${ticks} on ${cpus()} CPUs`);
  assert.match(await page.textContent('.card:has(.vital-chart[data-vital="cpu"]) .card-title'), /[\d.]+ (s|ms|µs) on CPU in range/);
  assert.match(await page.textContent('.vital-chart[data-vital="blck"] text.ylabel'), /^threads blocked/);
  // l2 cannot be recorded here (this version has no trigger for it, and
  // the machine no hardware PMU): not offered anywhere, and said so.
  const overlay = await page.$$eval('input[name="overlay"]', (is) => is.map((i) => i.value));
  const filter = await page.$$eval('#f-vital option', (os) => os.map((o) => o.value));
  assert.ok(overlay.includes('cpu') && !overlay.includes('l2'), `overlay offers ${overlay}`);
  assert.ok(filter.includes('cpu') && !filter.includes('l2'), `the vital filter offers ${filter}`);
  assert.match(await page.textContent('#no-data'), /Not recorded on this host: (.*, )?l2\b/);
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
  }, cpuComm, { timeout: 30000 });
});

uiTest("a sample opens its stack with the workload's function", 'sample-stack', async () => {
  await page.click('#samples-table tbody tr');
  await page.waitForSelector('#sample-detail .stack[data-kind="user"] li');
  const user = await page.textContent('#sample-detail .stack[data-kind="user"]');
  assert.ok(user.includes(cpuFunc), `user stack lacks ${cpuFunc}: ${user}`);
  const ip = await page.textContent('#sample-detail .fields tr:has(th:text-is("ip")) td');
  assert.match(ip, /^0x[0-9a-f]+$/, 'the cpu sample shows its ip in hex');
});

uiTest("the on-CPU and off-CPU flame graphs show the workloads' functions", 'flame', async () => {
  for (const f of ['#f-comm', '#f-func']) {
    await page.fill(f, '');
    await page.dispatchEvent(f, 'change');
  }
  await page.click('.drill-tabs button[data-tab="flame"]');
  await page.waitForSelector(`#flame-graph g.frame[data-name="${cpuFunc}"]`);
  // The search box highlights the frames it matches and says their share.
  await page.fill('#flame-search', cpuFunc);
  await page.waitForSelector(`#flame-graph g.frame.match[data-name="${cpuFunc}"]`);
  const hits = await page.$$eval('#flame-graph g.frame.match', (gs) => gs.map((g) => g.dataset.name));
  assert.ok(hits.every((n) => n.toLowerCase().includes(cpuFunc.toLowerCase())), `highlighted ${hits}`);
  assert.match(await page.textContent('#flame-match'), /matched: .+ \(\d+(\.\d)?%\)/);
  await page.fill('#flame-search', '');
  assert.equal(await page.locator('#flame-graph g.frame.match').count(), 0);
  await page.selectOption('#flame-vital', 'blck');
  await page.waitForSelector(`#flame-graph g.frame[data-name="${blckFunc}"]`);
  // The graph downloads for other tools: a gzip'd pprof profile, folded stacks.
  await page.waitForSelector('#flame-pprof[download="holter-blck.pb.gz"]');
  const got = await page.evaluate(async () => {
    const pprof = new Uint8Array(await (await fetch(document.querySelector('#flame-pprof').href)).arrayBuffer());
    const folded = await (await fetch(document.querySelector('#flame-folded').href)).text();
    return { magic: [pprof[0], pprof[1]], size: pprof.length, folded };
  });
  assert.deepEqual(got.magic, [0x1f, 0x8b], 'the pprof download is gzip');
  assert.ok(got.size > 100, `pprof of ${got.size} bytes`);
  assert.ok(got.folded.split('\n').some((l) => l.includes(blckFunc) && / \d+$/.test(l)), `folded stacks with ${blckFunc}`);
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
  assert.ok(!(await page.$$eval('#top-vital option', (os) => os.map((o) => o.value))).includes('l2'), 'the top tables offer l2');
  await page.waitForSelector('.top[data-by="comm"] tbody tr');
  assert.ok((await page.textContent('.top[data-by="comm"]')).includes(cpuComm));
  assert.ok((await page.textContent('.top[data-by="site"]')).length > 0);
  // Each table fits its third of the panel: long names are cut, not spilled.
  const fits = await page.$$eval('.top', (ts) => ts.map((t) => [t.dataset.by, t.querySelector('table').getBoundingClientRect().width, t.getBoundingClientRect().width]));
  for (const [by, table, box] of fits) assert.ok(table <= box + 1, `the ${by} table is ${table}px in a ${box}px panel`);
});

uiTest('system calls are named, not numbered', 'syscall-names', async () => {
  await page.click('.drill-tabs button[data-tab="samples"]');
  await page.selectOption('#f-vital', 'syscall');
  await page.waitForFunction(() => {
    const cells = [...document.querySelectorAll('#samples-table tbody tr td:nth-child(2)')];
    return cells.length > 0 && cells.every((td) => td.textContent === 'syscall');
  });
  await page.click('#samples-table tbody tr');
  await page.waitForSelector('#sample-detail .fields');
  const fields = await page.$$eval('#sample-detail .fields tr', (trs) => Object.fromEntries(trs.map((tr) => [tr.querySelector('th').textContent, tr.querySelector('td').textContent])));
  assert.match(fields.syscall ?? '', /^[a-z][a-z0-9_]*$/, `syscall field ${fields.syscall} (nr ${fields.syscall_nr})`);
  assert.doesNotMatch(fields.syscall, /^syscall_\d+$/);
  await page.selectOption('#f-vital', '');
});

uiTest('the diff ranks metrics of a brushed range and overlays their histograms', 'diff', async () => {
  await page.click('text=clear baseline');
  // Brush the second half of the recorded epochs (the view may reach past
  // the last one committed): the target; the reference is the equal span
  // before it.
  const xs = (await page.$$eval('#overlay-chart circle.pt[data-vital="cpu"]', (cs) => cs.map((c) => c.getBoundingClientRect())))
    .map((r) => r.x + r.width / 2).sort((a, b) => a - b);
  assert.ok(xs.length >= 4, `only ${xs.length} epochs drawn`);
  const box = await page.locator('#overlay-chart svg').boundingBox();
  const y = box.y + box.height / 2;
  await page.mouse.move(xs[Math.floor(xs.length / 2)] - 3, y);
  await page.mouse.down();
  await page.mouse.move(xs[xs.length - 1] + 3, y, { steps: 5 });
  await page.mouse.up();
  await page.click('.drill-tabs button[data-tab="diff"]');
  await page.waitForSelector('#diff-table tbody tr.metric', { timeout: 30000 });
  assert.match(await page.textContent('#diff-info'), /previous equal span/);
  const rows = page.locator('#diff-table tbody tr.metric');
  const n = await rows.count();
  const emds = await page.$$eval('#diff-table tbody tr.metric td:nth-child(3)', (tds) => tds.map((td) => parseFloat(td.textContent)));
  assert.deepEqual(emds, [...emds].sort((a, b) => b - a), 'metrics ranked by EMD, largest first');
  const names = await page.$$eval('#diff-table tbody tr.metric', (trs) => trs.map((tr) => tr.dataset.metric));
  assert.ok(!names.some((m) => /^syscall \d+ /.test(m)), `a system call by number: ${names.filter((m) => /^syscall \d/.test(m))}`);
  const pick = await rows.nth(Math.min(1, n - 1)).getAttribute('data-metric');
  await rows.nth(Math.min(1, n - 1)).click();
  await page.waitForSelector(`#diff-hist svg.hist[data-metric="${pick}"]`);
  // Two histograms in one SVG, over the same bins.
  const bars = await page.$$eval('#diff-hist svg.hist rect', (rs) => rs.map((r) => ({ cls: r.getAttribute('class'), x: r.getAttribute('x'), h: +r.getAttribute('height') })));
  const tx = new Set(bars.filter((b) => b.cls === 'target').map((b) => b.x));
  const rx = bars.filter((b) => b.cls === 'reference').map((b) => b.x);
  assert.ok(tx.size >= 2 && rx.length >= 2, `target bars ${tx.size}, reference bars ${rx.length}`);
  assert.ok(rx.some((x) => tx.has(x)), 'target and reference bars overlay on shared bins');
  assert.ok(bars.some((b) => b.cls === 'target' && b.h > 0) && bars.some((b) => b.cls === 'reference' && b.h > 0), 'both sides have weight');
  console.log(`diff: ${n} metrics ranked; drew ${pick}`);
  // A latency spans decades: its histogram's bins grow by a ratio, on a
  // log-scale axis.
  const latency = names.find((m) => /^(syscall|blck blocked time|sched wake-up).*\(ns\)$/.test(m) && !/^syscall \S+ latency/.test(m));
  assert.ok(latency, `no latency metric among ${names}`);
  await page.click(`#diff-table tbody tr.metric[data-metric="${latency}"]`);
  await page.waitForSelector(`#diff-hist svg.hist[data-metric="${latency}"]`);
  const scale = await page.getAttribute('#diff-hist svg.hist', 'data-scale');
  const edges = (await page.$$eval('#diff-hist svg.hist text.edge', (ts) => ts.map((t) => +t.dataset.edge)));
  console.log(`diff: ${latency} on a ${scale} axis, ticks at ${edges}`);
  if (edges[edges.length - 1] / edges[0] >= 100) {
    assert.equal(scale, 'log', `${latency} spans ${edges[0]}..${edges[edges.length - 1]} on a linear axis`);
    // Evenly spaced ticks by ratio: the middle one is the geometric mean.
    const mid = edges[Math.floor(edges.length / 2)], geo = Math.sqrt(edges[0] * edges[edges.length - 1]);
    assert.ok(Math.abs(Math.log(mid / geo)) < 0.2, `ticks ${edges} not log-spaced`);
  } else assert.equal(scale, 'linear');
});

uiTest('times read in UTC, 24 h, the custom range too', 'times', async () => {
  await page.selectOption('#range', 'custom');
  const from = await page.inputValue('#from');
  assert.match(from, /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/, 'the custom range is not in UTC, 24 h');
  await page.click('#custom button');
  await page.waitForFunction((f) => document.querySelector('#scale-info').textContent.startsWith(f + ' – '), from);
  assert.match(await page.textContent('#scale-info'), / UTC /);
  assert.doesNotMatch(await page.textContent('body'), /\b\d{1,2}:\d\d(:\d\d)?\s?[AP]M\b/i, 'a 12-hour time');
});

uiTest('a posted trace opens as a waterfall of its causal path, and its workload as a latency graph', 'traces', async () => {
  // The store is busy for the list's first ask (503, Retry-After): the
  // page asks again when told and shows no error.
  const list = (u) => u.pathname === '/api/traces';
  let asked = 0;
  await page.route(list, (route) => asked++ ? route.continue() : route.fulfill({ status: 503, headers: { 'Retry-After': '1' },
    contentType: 'application/json', body: JSON.stringify({ error: 'too many queries running; try again shortly' }) }));
  await page.click('nav a[data-route="traces"]');
  await page.waitForSelector(`#traces-table tr[data-trace="${traceId}"]`, { timeout: 60000 }); // seconds on a loaded machine
  await page.unroute(list);
  assert.ok(asked >= 2, `the list was asked for ${asked} time(s)`);
  const banner = await page.isHidden('#error') ? '' : await page.textContent('#error');
  assert.doesNotMatch(banner, /too many queries running/, 'a busy store shown as an error');
  assert.ok(await page.isHidden('#page-vitals'));
  await page.click(`#traces-table tr[data-trace="${traceId}"]`);
  await page.waitForSelector('#trace-detail svg.waterfall g.span');
  const spans = await page.$$eval('#trace-detail svg.waterfall g.span', (gs) => gs.map((g) => ({ svc: g.dataset.service, cls: g.getAttribute('class') })));
  for (const svc of ['client', 'front', 'storage']) assert.ok(spans.some((s) => s.svc === svc), `no ${svc} span in ${JSON.stringify(spans)}`);
  assert.ok(spans.some((s) => /async/.test(s.cls)), 'the write-back is marked asynchronous');
  assert.ok(spans.some((s) => /batch/.test(s.cls)), 'the coalesced batch is shown');
  assert.match(await page.textContent('#trace-detail svg.waterfall'), /billed 33% of 3 requests/);
  // A charged span says how long its thread waited for a CPU.
  assert.match(await page.textContent('#trace-detail'), /cpu [\d.]+ ?(s|ms|µs|ns) · runnable [\d.]+ ?(s|ms|µs|ns) · blocked/);
  await page.waitForSelector('#latency-graph svg.lgraph g.node');
  const nodes = await page.locator('#latency-graph svg.lgraph g.node').count();
  const labels = await page.$$eval('#latency-graph svg.lgraph text.elabel', (ts) => ts.map((t) => t.textContent));
  assert.ok(nodes >= 4, `latency graph has ${nodes} nodes`);
  assert.ok(labels.length >= 3 && labels.every((l) => /^p50 .* · p99 .* \(\d+\)$/.test(l)), `edge labels ${labels}`);
  assert.ok(await page.locator('#latency-graph svg.lgraph path.edge.remote').count() >= 1, 'remote hops are drawn');
  const g = await page.$eval('#latency-graph svg.lgraph', (svg) => [svg.getBoundingClientRect().width, svg.parentElement.clientWidth]);
  assert.ok(g[0] <= g[1] + 1, `the latency graph is ${g[0]}px in a ${g[1]}px panel`);
});

uiTest('a live query streams rows per interval; a bad one points at its mistake', 'live', async () => {
  await page.click('nav a[data-route="live"]');
  await page.fill('#live-query', 'SELECT comm, count() AS n FROM syscall.no_such_call GROUP BY comm');
  await page.click('#live-run');
  await page.waitForSelector('#live-error');
  const err = await page.textContent('#live-error');
  assert.ok(err.includes('no_such_call') && /\^+/.test(err), `error without the offending part: ${err}`);
  await page.fill('#live-query', 'SELECT comm, count() AS syscalls FROM syscall.any GROUP BY comm ORDER BY syscalls DESC LIMIT 10');
  await page.click('#live-explain');
  await page.waitForSelector('#live-explain-out');
  assert.match(await page.textContent('#live-explain-out'), /kernel part/);
  await page.click('#live-run');
  await page.waitForSelector('#live-table tbody tr', { timeout: 20000 });
  await page.waitForFunction(() => /interval [2-9]/.test(document.querySelector('#live-status')?.textContent ?? ''), null, { timeout: 20000 });
  const cols = await page.$$eval('#live-table th', (ths) => ths.map((t) => t.textContent));
  assert.deepEqual(cols, ['comm', 'syscalls']);
  assert.match(await page.textContent('#live-counters'), /lost|full|missed|dropped|no event/);
  await page.click('#live-stop');
  await page.waitForFunction(() => /stopped after/.test(document.querySelector('#live-status')?.textContent ?? ''));
});
