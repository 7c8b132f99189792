// The Live queries tab: a query of `holter trace` run by the recorder's
// host (POST /api/trace), its answer streamed as NDJSON, one line per
// interval, shown as a table that refreshes each interval, with the lost
// events and map-full counters. Errors point at the offending part of the
// query (the server's message carries the query line and a caret).

import { fmtNum, fmtTime, h } from './dom';

interface Result { columns: string[]; types?: string[]; rows: unknown[][]; truncated?: boolean }
interface TraceLine { start?: string; end?: string; result?: Result; counters?: Record<string, number>; explain?: string; error?: string }

const example = 'SELECT comm, count() AS syscalls FROM syscall.any GROUP BY comm ORDER BY syscalls DESC LIMIT 10';
const st = { query: example, interval: '1s', duration: '', running: null as AbortController | null };

export function renderLive(el: HTMLElement) {
  if (el.dataset.built) return; // keep a running query and its results across tab switches
  el.dataset.built = 'true';
  const text = h('textarea', { id: 'live-query', rows: 4, cols: 100, spellcheck: false,
    oninput: (e) => { st.query = (e.target as HTMLTextAreaElement).value; } });
  text.value = st.query;
  const field = (key: 'interval' | 'duration', label: string, title: string) => h('label', { title }, label + ' ',
    h('input', { id: 'live-' + key, size: 5, value: st[key], placeholder: key === 'duration' ? 'until Stop' : '',
      onchange: (e) => { st[key] = (e.target as HTMLInputElement).value.trim(); } }));
  const status = h('span', { id: 'live-status', class: 'hint' });
  const out = h('div', { id: 'live-out' });
  const run = h('button', { id: 'live-run', onclick: () => start(false) }, 'Run');
  const explain = h('button', { id: 'live-explain', onclick: () => start(true) }, 'Explain');
  const stop = h('button', { id: 'live-stop', disabled: true, onclick: () => st.running?.abort() }, 'Stop');
  const busy = (on: boolean) => { run.disabled = on; explain.disabled = on; stop.disabled = !on; };

  async function start(explainOnly: boolean) {
    const ctl = new AbortController();
    st.running = ctl;
    busy(true);
    out.replaceChildren();
    status.textContent = explainOnly ? 'compiling…' : 'attaching probes…';
    let intervals = 0;
    const lost: Record<string, number> = {};
    try {
      const resp = await fetch('/api/trace', { method: 'POST', signal: ctl.signal, headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ query: st.query, interval: st.interval || undefined, for: st.duration || undefined, explain: explainOnly }) });
      if (!resp.ok) {
        const body = await resp.json().catch(() => null);
        return showError(body?.error ?? `${resp.status} ${resp.statusText}`);
      }
      const reader = resp.body!.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let nl: number;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl).trim();
          buf = buf.slice(nl + 1);
          if (!line) continue;
          const l = JSON.parse(line) as TraceLine;
          if (l.error) return showError(l.error);
          if (l.explain !== undefined) {
            out.replaceChildren(h('pre', { id: 'live-explain-out', class: 'explain' }, l.explain));
            continue;
          }
          intervals++;
          for (const [k, v] of Object.entries(l.counters ?? {})) lost[k] = (lost[k] ?? 0) + v;
          show(l, intervals, lost);
        }
      }
      status.textContent = explainOnly ? 'plan above' : `finished after ${intervals} intervals`;
    } catch (e) {
      if (ctl.signal.aborted) status.textContent = `stopped after ${intervals} intervals`;
      else showError(e instanceof Error ? e.message : String(e));
    } finally {
      if (st.running === ctl) st.running = null;
      busy(false);
    }
  }

  function showError(msg: string) {
    status.textContent = 'failed';
    out.replaceChildren(h('pre', { id: 'live-error', class: 'error' }, msg));
  }

  function show(l: TraceLine, n: number, lost: Record<string, number>) {
    const r = l.result ?? { columns: [], rows: [] };
    status.textContent = `interval ${n}: ${l.start ? fmtTime(Date.parse(l.start) * 1e6, false, true) : ''} – ` +
      `${l.end ? fmtTime(Date.parse(l.end) * 1e6, false, true) : ''} UTC, ${r.rows.length} rows` + (r.truncated ? ' (truncated)' : '');
    const counters = Object.entries(lost);
    out.replaceChildren(
      h('p', { id: 'live-counters', class: counters.length ? 'warn' : 'hint' }, counters.length
        ? 'dropped or missed so far: ' + counters.map(([k, v]) => `${k} ${fmtNum(v)}`).join(', ')
        : 'no event lost, no map full'),
      h('table', { id: 'live-table' }, h('thead', {}, h('tr', {}, ...r.columns.map((c) => h('th', {}, c)))),
        h('tbody', {}, ...r.rows.map((row) => h('tr', {}, ...row.map((v) => h('td', { class: typeof v === 'number' ? 'num' : '' }, cell(v))))))));
  }

  el.replaceChildren(
    h('h2', {}, 'Live queries'),
    h('p', { class: 'hint' }, 'A holter trace query over probe sources, compiled into eBPF on the recorder\'s host; aggregates run in the kernel. ' +
      '@NAME runs a ready query (holter trace --list shows the sources and the ready queries). Needs a recorder running as root.'),
    text,
    h('div', { class: 'filters' }, run, explain, stop, field('interval', 'every', 'interval, a Go duration'),
      field('duration', 'for', 'how long, a Go duration; empty: until Stop'), status),
    out);
}

function cell(v: unknown): string {
  if (v === null || v === undefined) return '';
  if (typeof v === 'number') return Number.isInteger(v) ? String(v) : v.toPrecision(4);
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}
