// holter's web UI: vitals over time (Chopstix's visualizer), and a
// drill-down into a selected range's samples, flame graphs and top tables.
// Everything comes from the JSON API (internal/server/openapi.yaml).

import { apiURL, Filter, FlameAnswer, get, Overview, Sample, SamplesAnswer, Stack, TopAnswer, VitalInfo, VitalsAnswer } from './api';
import { lineChart, Line } from './chart';
import { fmtAmount, fmtDuration, fmtTime, h, palette, parseTime, rateOf, unitHead } from './dom';
import { flameGraph } from './flame';
import { renderDiff } from './diff';
import { loadFindings, Mark, marksOf, Pick, renderFindings } from './findings';
import { renderLive } from './live';
import { renderTraces } from './traces';
import { offNotes, seriesNotes } from './coverage';
import { allHosts, hostLegend, hostSelector, seriesStyle, sourceLabel, vitalsOf } from './hosts';

type Range = { kind: 'last'; span: number } | { kind: 'abs'; from: number; to: number };
type DrillTab = 'samples' | 'flame' | 'top' | 'diff';

const MIN = 60e9;
const presets: [string, number][] = [['last 15 min', 15 * MIN], ['last 1 h', 60 * MIN], ['last 24 h', 1440 * MIN], ['last 7 d', 7 * 1440 * MIN]];

const state = {
  ov: null as Overview | null,
  range: { kind: 'last', span: 15 * MIN } as Range,
  timescale: 'auto',
  overlay: new Set(['cpu', 'blck']),
  vitals: null as VitalsAnswer | null,
  selection: null as [number, number] | null,
  selectionVital: '',
  baseline: null as [number, number] | null,
  tab: 'samples' as DrillTab,
  filter: {} as Filter,
  flameVital: 'cpu',
  flameDiff: false,
  topVital: 'cpu',
  samples: [] as Sample[],
  sampleTotal: 0,
  marks: [] as Mark[], // the findings of the visible range
};

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;

function colourOf(vital: string): string {
  const i = state.ov?.vitals.findIndex((v) => v.name === vital) ?? 0;
  return palette[Math.max(i, 0) % palette.length];
}

/** The vitals the UI offers: those recorded (the recorder's last epoch has
 * them) or with data in the range shown. One the host cannot record (l2
 * without a hardware PMU) is named as not recorded instead. */
function offered(): VitalInfo[] {
  const data = new Set(state.vitals?.series.filter((s) => s.t.length > 0).map((s) => s.vital) ?? []);
  return state.ov!.vitals.filter((v) => v.recorded || data.has(v.name));
}

function showError(err: unknown) {
  const banner = $('error');
  banner.textContent = err instanceof Error ? err.message : String(err);
  banner.hidden = false;
}

/** The visible time range: "last N" ends at now while recording, or at
 * the end of a stored recording. */
function view(): [number, number] {
  const r = state.range;
  if (r.kind === 'abs') return [r.from, r.to];
  const ov = state.ov!;
  const end = ov.live ? Math.max(Date.now() * 1e6, ov.last_ns) : ov.last_ns || Date.now() * 1e6;
  return [end - r.span, end];
}

function setRange(r: Range) {
  state.range = r;
  syncRangeControls();
  refreshVitals();
}

// ---- header: tabs, range picker, timescale, live ----

function route(): string {
  return (location.hash.replace(/^#\//, '') || 'vitals').split('?')[0];
}

// The tabs besides the vitals: each draws itself (findings.ts, traces.ts,
// live.ts) into its own section when shown.
const tabs: Record<string, [string, (el: HTMLElement) => void]> = {
  live: ['Live queries', renderLive],
  traces: ['Request traces', (el) => renderTraces(el, { view: view(), onError: showError })],
  findings: ['Findings', (el) => { const [from, to] = view(); renderFindings(el, { from, to, host: state.ov!.host, onPick: pickFinding, onError: showError }); }],
};

function renderRoute() {
  const r = route();
  document.querySelectorAll<HTMLAnchorElement>('nav a').forEach((a) => a.classList.toggle('active', a.dataset.route === r));
  $('page-vitals').hidden = !!tabs[r];
  for (const [k, [, render]] of Object.entries(tabs)) {
    $('page-' + k).hidden = k !== r;
    if (k === r) render($('page-' + k));
  }
}

/** Shows an incident on the vitals page: its range selected for the
 * drill-down, on the tab asked for, filtered to its culprit. */
function pickFinding(p: Pick) {
  location.hash = '#/vitals';
  const [from, to] = view();
  if (p.from < from || p.to > to) {
    const pad = Math.max((p.to - p.from) * 2, 60e9);
    state.range = { kind: 'abs', from: p.from - pad, to: p.to + pad };
    syncRangeControls();
  }
  state.tab = p.tab;
  state.filter = p.pid ? { pid: String(p.pid) } : {};
  $<HTMLInputElement>('f-pid').value = state.filter.pid ?? '';
  if (p.tab === 'flame') state.flameVital = p.vital;
  if (p.tab === 'diff') {
    // The stretch before the incident, three times as long, as the
    // baseline: what holter findings' diff compares it with.
    const span = p.to - p.from;
    state.baseline = [p.from - 3 * span, p.from];
    state.filter = {};
    $<HTMLInputElement>('f-pid').value = '';
  }
  select(p.from, p.to, p.vital);
  refreshVitals();
}

function syncRangeControls() {
  const sel = $<HTMLSelectElement>('range');
  const r = state.range;
  sel.value = r.kind === 'last' ? String(r.span) : 'custom';
  $('custom').hidden = r.kind !== 'abs';
  if (r.kind === 'abs') {
    $<HTMLInputElement>('from').value = fmtTime(r.from);
    $<HTMLInputElement>('to').value = fmtTime(r.to);
  }
}

function header(): HTMLElement {
  const ranges = h('select', { id: 'range', title: 'time range', onchange: (e) => {
    const v = (e.target as HTMLSelectElement).value;
    if (v === 'custom') { const [from, to] = view(); setRange({ kind: 'abs', from, to }); }
    else if (v === 'all') setRange({ kind: 'abs', from: state.ov!.first_ns, to: state.ov!.last_ns });
    else setRange({ kind: 'last', span: Number(v) });
  } }, ...presets.map(([label, span]) => h('option', { value: span }, label)),
  h('option', { value: 'all' }, 'whole recording'), h('option', { value: 'custom' }, 'custom…'));
  const applyCustom = () => {
    const from = parseTime($<HTMLInputElement>('from').value), to = parseTime($<HTMLInputElement>('to').value);
    if (Number.isNaN(from) || Number.isNaN(to)) return showError('custom range: give times as YYYY-MM-DD HH:MM:SS, UTC');
    if (!(from < to)) return showError('custom range: "from" must be before "to"');
    setRange({ kind: 'abs', from, to });
  };
  const timescales = h('select', { id: 'timescale', title: 'timescale', onchange: (e) => {
    state.timescale = (e.target as HTMLSelectElement).value;
    refreshVitals();
  } }, h('option', { value: 'auto' }, 'auto'), ...state.ov!.timescales.map((t) => h('option', { value: t.name }, t.name)));
  return h('header', {},
    h('span', { class: 'brand' }, 'holter'),
    h('nav', {}, ...[['vitals', 'Vitals'], ...Object.entries(tabs).map(([k, v]) => [k, v[0]])].map(([k, label]) =>
      h('a', { href: '#/' + k, 'data-route': k }, label))),
    h('span', { class: 'spacer' }),
    hostSelector(state.ov!, selectHost),
    ranges,
    h('span', { id: 'custom', hidden: true },
      // Text, not datetime-local, which shows the browser's locale (12 h
      // in en-US): every time in the UI reads UTC, 24 h.
      h('input', { id: 'from', size: 19, placeholder: 'YYYY-MM-DD HH:MM:SS' }), '–', h('input', { id: 'to', size: 19, placeholder: 'YYYY-MM-DD HH:MM:SS' }),
      h('button', { onclick: applyCustom }, 'apply'), h('small', {}, 'UTC')),
    h('label', {}, 'timescale ', timescales),
    h('span', { id: 'live', class: state.ov!.live ? 'live on' : 'live', title: 'new epochs appear as they are recorded' },
      sourceLabel(state.ov!)));
}

/** Shows one host, or all ('') of a fleet. */
async function selectHost(host: string) {
  try {
    state.ov = await get<Overview>('/api/overview', { host });
  } catch (e) { return showError(e); }
  await refreshVitals();
  refreshDrill();
}

// ---- vitals over time ----

function zoom(center: number, factor: number) {
  const [from, to] = view();
  const span = Math.max((to - from) * factor, 5e9);
  const k = (center - from) / (to - from);
  setRange({ kind: 'abs', from: center - k * span, to: center + (1 - k) * span });
}

function pan(frac: number) {
  const [from, to] = view();
  const d = (to - from) * frac;
  setRange({ kind: 'abs', from: from + d, to: to + d });
}

function linesOf(vitals: string[]): Line[] {
  const a = state.vitals!;
  return a.series.filter((s) => vitals.includes(s.vital)).map((s) => {
    const k = rateOf(s.vital, s.unit).scale;
    return {
      ...seriesStyle(s, a, vitals.length === 1, colourOf), t: s.t,
      width: s.t.map(() => a.bucket_ns),
      // Rates per second, so the timescales agree.
      y: s.weight.map((w, i) => k * (s.seconds[i] > 0 ? w / s.seconds[i] : w)),
    };
  });
}

function drawCharts() {
  const a = state.vitals;
  if (!a) return;
  const [from, to] = view();
  const common = {
    from, to, selection: state.selection, baseline: state.baseline, marks: state.marks,
    onZoom: zoom,
  };
  lineChart($('overlay-chart'), linesOf([...state.overlay]), {
    ...common, notes: [...new Set(a.series.map((s) => s.host))].flatMap((host) => offNotes(a, host)), height: 200, normalised: true, yLabel: 'each vital scaled to its max = 1',
    onSelect: (f, t) => select(f, t, ''),
  });
  const grid = $('vital-charts');
  grid.replaceChildren();
  $('host-legend').replaceChildren(hostLegend(a) ?? '');
  $('overlay-controls').replaceWith(overlayControls());
  const fv = $<HTMLSelectElement>('f-vital');
  fv.replaceChildren(...vitalOptions(fv.value));
  const empty: string[] = [];
  let noted = 0;
  for (const hs of vitalsOf(a)) {
    const s = hs[0];
    if (hs.every((x) => x.t.length === 0)) { empty.push(s.vital); continue; }
    const total = hs.reduce((sum, x) => sum + x.weight.reduce((p, q) => p + q, 0), 0);
    const box = h('div', { class: 'vital-chart', 'data-vital': s.vital });
    grid.append(h('div', { class: 'card' },
      h('div', { class: 'card-title' }, h('span', { class: 'swatch', style: `background:${colourOf(s.vital)}` }), s.vital,
        h('small', {}, ` ${fmtAmount(total, s.unit)} in range`)), box));
    const notes = hs.flatMap((x) => seriesNotes(a, x));
    noted += notes.length;
    lineChart(box, linesOf([s.vital]), { ...common, notes, marks: state.marks.filter((m) => m.vitals.includes(s.vital)), height: 110, yLabel: rateOf(s.vital, s.unit).label, onSelect: (f, t) => select(f, t, s.vital) });
  }
  const unrecorded = state.ov!.vitals.filter((v) => !offered().includes(v)).map((v) => v.name);
  $('no-data').textContent = (unrecorded.length ? `Not recorded on this host: ${unrecorded.join(', ')} (holter status says why). ` : '') +
    (empty.filter((v) => !unrecorded.includes(v)).length ? `No data in this range for: ${empty.filter((v) => !unrecorded.includes(v)).join(', ')}. ` : '') +
    (noted ? 'Hatched: not recorded (the recorder was not running, or not this vital); amber: throttled or lost samples (hover for why).' : '');
  $('scale-info').textContent = `${fmtTime(from)} – ${fmtTime(to)} UTC (${fmtDuration(to - from)}), ${a.timescale === 'epoch' ? 'per epoch' : a.timescale + ' buckets'}`;
}

let vitalsSeq = 0;
let firstViewDone = false;
async function refreshVitals() {
  const [from, to] = view();
  const seq = ++vitalsSeq;
  // The charts are drawn as soon as their vitals come, and marked when the
  // findings do (seconds later on a loaded host). They do without their
  // marks rather than fail (a fleet may keep its findings with its hosts:
  // no marks then).
  const found = loadFindings(from, to, state.ov!.host).catch((e) => { if (!state.ov!.fleet) showError(e); return { incidents: [] }; });
  try {
    const a = await get<VitalsAnswer>('/api/vitals', { from, to, timescale: state.timescale, host: state.ov!.host });
    if (seq !== vitalsSeq) return; // a newer view was asked for meanwhile
    state.vitals = a;
    drawCharts();
  } catch (e) { return showError(e); }
  void found.then((fs) => {
    if (seq !== vitalsSeq) return;
    state.marks = marksOf(fs.incidents);
    drawCharts();
    // Opened on no page in particular, the UI shows what is wrong first,
    // when something is.
    if (!firstViewDone) {
      firstViewDone = true;
      if (!location.hash && fs.incidents.length > 0) location.hash = '#/findings';
    }
  });
}

function overlayControls(): HTMLElement {
  return h('div', { id: 'overlay-controls', class: 'overlay-controls' }, 'overlay: ', ...offered().map((v) =>
    h('label', { class: 'chip', style: `border-color:${colourOf(v.name)}` },
      h('input', { type: 'checkbox', name: 'overlay', value: v.name, checked: state.overlay.has(v.name), onchange: (e) => {
        const c = e.target as HTMLInputElement;
        if (c.checked) state.overlay.add(v.name); else state.overlay.delete(v.name);
        drawCharts();
      } }), v.name)));
}

// ---- the drill-down into a selected range ----

function select(from: number, to: number, vital: string) {
  state.selection = [from, to];
  state.selectionVital = vital;
  if (vital) {
    $<HTMLSelectElement>('f-vital').value = vital;
    if (['cpu', 'blck'].includes(vital)) state.flameVital = vital;
    state.topVital = vital;
  }
  drawCharts();
  refreshDrill();
}

function filterParams(): Record<string, string | number> {
  const [from, to] = state.selection!;
  return { from, to, host: state.ov!.host, ...state.filter } as Record<string, string | number>;
}

// drillSeq numbers the drill-down's renders: an answer that arrives after
// the user moved on (another tab, another filter) is dropped.
let drillSeq = 0;

function refreshDrill() {
  drillSeq++;
  const panel = $('drill');
  panel.hidden = !state.selection;
  if (!state.selection) return;
  const [from, to] = state.selection;
  $('sel-info').textContent = `Selected ${fmtTime(from, true, true)} – ${fmtTime(to, false, true)} UTC (${fmtDuration(to - from)})` +
    (state.baseline ? ` · baseline ${fmtTime(state.baseline[0])} – ${fmtTime(state.baseline[1], false)}` : '');
  document.querySelectorAll<HTMLButtonElement>('.drill-tabs button').forEach((b) => b.classList.toggle('active', b.dataset.tab === state.tab));
  ({ samples: refreshSamples, flame: refreshFlame, top: refreshTop, diff: refreshDiff })[state.tab]();
}

/** The drill-down's vital filter's options, keeping the choice. */
function vitalOptions(chosen = ''): HTMLOptionElement[] {
  return [h('option', { value: '' }, 'all'), ...offered().map((v) => h('option', { value: v.name, selected: v.name === chosen }, v.name))];
}

function filterBar(): HTMLElement {
  const text = (key: keyof Filter, label: string, width = 9) => h('label', {}, label + ' ',
    h('input', { id: 'f-' + key, size: width, onchange: (e) => {
      const v = (e.target as HTMLInputElement).value.trim();
      if (v === (state.filter[key] ?? '')) return;
      if (v) state.filter[key] = v; else delete state.filter[key];
      refreshDrill();
    } }));
  return h('div', { class: 'filters' },
    h('label', {}, 'vital ', h('select', { id: 'f-vital', onchange: () => refreshDrill() },
      ...vitalOptions())),
    text('pid', 'pid', 6), text('comm', 'process'), text('uid', 'uid', 5), text('exe', 'executable', 12), text('func', 'function', 14));
}

async function refreshSamples(more = false) {
  const body = $('drill-body');
  const seq = drillSeq;
  try {
    const a = await get<SamplesAnswer>('/api/samples', { ...filterParams(), vital: $<HTMLSelectElement>('f-vital').value,
      limit: 200, offset: more ? state.samples.length : 0 });
    if (seq !== drillSeq) return;
    if (!more) state.samples = [];
    state.samples.push(...a.samples);
    state.sampleTotal = a.total;
  } catch (e) { return showError(e); }
  const unit = (v: string) => state.ov!.vitals.find((x) => x.name === v)?.unit ?? '';
  const rows = state.samples.map((sm, i) => h('tr', { class: 'sample', 'data-i': i, onclick: (e) => {
    document.querySelectorAll('tr.sample.active').forEach((r) => r.classList.remove('active'));
    (e.currentTarget as HTMLElement).classList.add('active');
    openSample(sm);
  } }, h('td', {}, fmtTime(sm.ts_ns, false, true)), allHosts(state.ov!) ? h('td', { class: 'host' }, sm.host) : null, h('td', {}, sm.vital), h('td', { class: 'num' }, fmtAmount(sm.weight, unit(sm.vital))),
  h('td', { class: 'num' }, sm.pid), h('td', { class: 'num' }, sm.tid), h('td', { class: 'num' }, sm.uid), h('td', {}, sm.comm),
  h('td', { title: sm.exe }, sm.exe.split('/').pop() ?? '')));
  body.replaceChildren(h('div', { class: 'split' },
    h('div', { class: 'samples' },
      h('p', {}, `${state.sampleTotal} samples` + (state.sampleTotal > state.samples.length ? `, ${state.samples.length} shown` : '')),
      h('table', { id: 'samples-table' }, h('thead', {}, h('tr', {}, ...['time', ...(allHosts(state.ov!) ? ['host'] : []), 'vital', 'weight', 'pid', 'tid', 'uid', 'process', 'executable'].map((c) => h('th', {}, c)))),
        h('tbody', {}, ...rows)),
      state.sampleTotal > state.samples.length ? h('button', { onclick: () => refreshSamples(true) }, 'more') : null),
    h('div', { id: 'sample-detail', class: 'detail' }, h('p', { class: 'empty' }, 'Click a sample to see its stacks and fields.'))));
}

// The sample fields that are addresses or bit flags, shown in hex.
const hexFields = new Set(['ip', 'site', 'handler', 'lock_addr', 'address', 'gfp', 'fault_code', 'lock_flags']);

/** A sample field as people read it: addresses and flags in hex (64-bit
 * values beyond 2^53 arrive as decimal strings). */
function fieldText(k: string, v: unknown): string {
  if (hexFields.has(k) && (typeof v === 'number' || (typeof v === 'string' && /^\d+$/.test(v)))) return '0x' + BigInt(v).toString(16);
  return String(v);
}

async function openSample(sm: Sample) {
  const detail = $('sample-detail');
  const seq = drillSeq;
  const ids = [sm.ustack_id, sm.kstack_id].filter((x): x is string => !!x);
  let stacks: Stack[] = [];
  if (ids.length) {
    try {
      stacks = (await get<{ stacks: Stack[] }>('/api/stacks?' + ids.map((id) => 'id=' + id).join('&'))).stacks;
    } catch (e) { return showError(e); }
  }
  if (seq !== drillSeq) return;
  const stackBlock = (kind: string, id: string | null) => {
    const st = stacks.find((x) => x.id === id);
    return h('div', { class: 'stack', 'data-kind': kind }, h('h4', {}, `${kind} stack`),
      st ? h('ol', {}, ...st.frames.map((f, i) => h('li', {}, h('code', {}, f), st.modules[i] ? h('small', {}, ' ' + st.modules[i]) : null)))
        : h('p', { class: 'empty' }, 'none recorded'));
  };
  const fields = Object.entries(sm.fields);
  detail.replaceChildren(
    h('h3', {}, `${sm.vital} sample: ${sm.comm} (pid ${sm.pid}, tid ${sm.tid}, uid ${sm.uid})`),
    h('table', { class: 'fields' },
      ...[['time', fmtTime(sm.ts_ns, true, true) + ' UTC'], ['epoch', sm.epoch], ['weight', sm.weight], ['estimated count', sm.est_count],
        ['executable', sm.exe], ['label hash', sm.label_hash], ...fields.map(([k, v]) => [k, fieldText(k, v)])]
        .map(([k, v]) => h('tr', {}, h('th', {}, String(k)), h('td', {}, String(v))))),
    stackBlock('user', sm.ustack_id), stackBlock('kernel', sm.kstack_id));
}

async function refreshFlame() {
  const body = $('drill-body');
  const controls = h('div', { class: 'flame-controls' },
    h('label', {}, 'profile ', h('select', { id: 'flame-vital', onchange: (e) => { state.flameVital = (e.target as HTMLSelectElement).value; refreshDrill(); } },
      ...offered().map((v) => h('option', { value: v.name, selected: v.name === state.flameVital },
        v.name === 'cpu' ? 'on-CPU (cpu)' : v.name === 'blck' ? 'off-CPU (blck)' : v.name)))),
    h('label', { title: state.baseline ? '' : 'pick a baseline range first ("use as baseline")' },
      h('input', { id: 'flame-diff', type: 'checkbox', checked: state.flameDiff && !!state.baseline, disabled: !state.baseline,
        onchange: (e) => { state.flameDiff = (e.target as HTMLInputElement).checked; refreshDrill(); } }),
      ' differential against the baseline (red grew, blue shrank)'),
    h('span', { id: 'flame-info' }), h('span', { id: 'flame-download' }));
  const graph = h('div', { id: 'flame-graph' });
  const seq = drillSeq;
  body.replaceChildren(controls, graph);
  const diff = state.flameDiff && !!state.baseline;
  const params: Record<string, string | number> = { ...filterParams(), vital: state.flameVital };
  if (diff) { params.base_from = state.baseline![0]; params.base_to = state.baseline![1]; }
  try {
    const a = await get<FlameAnswer>('/api/flame', params);
    if (seq !== drillSeq) return;
    $('flame-info').textContent = ` ${fmtAmount(a.total, a.unit)}` + (diff ? ` (baseline ${fmtAmount(a.base_total, a.unit)})` : '') +
      (a.truncated ? ' — truncated to the heaviest stacks' : '');
    flameGraph(graph, a, diff);
    // The same stacks for other tools: go tool pprof, Pyroscope, Parca;
    // flamegraph.pl, speedscope. A differential graph exports as JSON only.
    if (!diff) {
      $('flame-download').replaceChildren(' download: ',
        h('a', { id: 'flame-pprof', href: apiURL('/api/flame', { ...params, format: 'pprof' }), download: `holter-${a.vital}.pb.gz` }, 'pprof'), ' · ',
        h('a', { id: 'flame-folded', href: apiURL('/api/flame', { ...params, format: 'folded' }), download: `holter-${a.vital}.folded` }, 'folded'));
    }
  } catch (e) { showError(e); }
}

async function refreshTop() {
  const body = $('drill-body');
  const pick = h('select', { id: 'top-vital', onchange: (e) => { state.topVital = (e.target as HTMLSelectElement).value; refreshDrill(); } },
    ...offered().map((v) => h('option', { value: v.name, selected: v.name === state.topVital }, v.name)));
  const tables = h('div', { class: 'tops' });
  const seq = drillSeq;
  body.replaceChildren(h('div', {}, h('label', {}, 'vital ', pick)), tables);
  const kinds: [string, string, keyof Filter][] = [['comm', 'Processes', 'comm'], ['exe', 'Executables', 'exe'], ['site', 'Sites (leaf frames)', 'func']];
  try {
    const answers = await Promise.all(kinds.map(([by]) => get<TopAnswer>('/api/top', { ...filterParams(), vital: state.topVital, by, limit: 10 })));
    if (seq !== drillSeq) return;
    tables.replaceChildren(...answers.map((a, i) => h('div', { class: 'top', 'data-by': a.by }, h('h4', {}, kinds[i][1]),
      h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, kinds[i][0]), allHosts(state.ov!) ? h('th', {}, 'host') : null, h('th', {}, unitHead(a.unit)), h('th', {}, 'share'), h('th', {}, 'samples'))),
        h('tbody', {}, ...a.rows.map((r) => {
          const share = a.total_weight > 0 ? r.weight / a.total_weight : 0;
          return h('tr', { title: 'filter on this', onclick: () => {
            const key = kinds[i][2];
            state.filter[key] = r.key.replace(/ \[k\]$/, '');
            $<HTMLInputElement>('f-' + key).value = state.filter[key]!;
            state.tab = 'samples';
            refreshDrill();
          } }, h('td', { title: r.key }, r.key.split('/').pop() ?? r.key), allHosts(state.ov!) ? h('td', { class: 'host' }, r.host) : null,
          h('td', { class: 'num' }, fmtAmount(r.weight, a.unit, true)),
          h('td', {}, h('span', { class: 'bar', style: `width:${(share * 30).toFixed(0)}px` }), ` ${(share * 100).toFixed(1)}%`),
          h('td', { class: 'num' }, r.samples));
        }))))));
  } catch (e) { showError(e); }
}

function refreshDiff() {
  const seq = drillSeq;
  renderDiff($('drill-body'), { target: state.selection!, baseline: state.baseline, host: state.ov!.host,
    current: () => seq === drillSeq, onError: showError });
}

function drillPanel(): HTMLElement {
  const tab = (t: DrillTab, label: string) => h('button', { 'data-tab': t, onclick: () => { state.tab = t; refreshDrill(); } }, label);
  return h('section', { id: 'drill', hidden: true },
    h('div', { class: 'drill-head' }, h('strong', { id: 'sel-info' }),
      h('button', { onclick: () => { state.baseline = state.selection; drawCharts(); refreshDrill(); }, title: 'compare other ranges against this one' }, 'use as baseline'),
      h('button', { onclick: () => { state.baseline = null; state.flameDiff = false; drawCharts(); refreshDrill(); } }, 'clear baseline'),
      h('button', { onclick: () => { const [f, t] = state.selection!; setRange({ kind: 'abs', from: f, to: t }); } }, 'zoom to selection')),
    filterBar(),
    h('div', { class: 'drill-tabs' }, tab('samples', 'Samples'), tab('flame', 'Flame graph'), tab('top', 'Top'),
      tab('diff', 'Diff (ranked metrics)')),
    h('div', { id: 'drill-body' }));
}

// ---- start ----

// A poll still waiting for its answers (a loaded host answers in seconds)
// is not joined by the next: they would pile up.
let polling = false;

async function poll() {
  if (polling) return;
  polling = true;
  try {
    const ov = await get<Overview>('/api/overview', { host: state.ov!.host });
    const grew = ov.last_ns !== state.ov!.last_ns;
    state.ov = ov;
    if (grew && state.range.kind === 'last') await refreshVitals();
  } catch (e) { showError(e); } finally { polling = false; }
}

async function start() {
  const app = $('app');
  try {
    state.ov = await get<Overview>('/api/overview');
  } catch (e) {
    app.replaceChildren(h('p', { class: 'error' }, 'holter API: ' + (e instanceof Error ? e.message : String(e))));
    return;
  }
  app.replaceChildren(header(), h('div', { id: 'error', class: 'error', hidden: true, onclick: (e) => { (e.target as HTMLElement).hidden = true; } }),
    h('main', {},
      h('section', { id: 'page-vitals' },
        h('div', { class: 'toolbar' }, h('span', { id: 'scale-info' }), h('span', { class: 'spacer' }),
          h('button', { onclick: () => { const [f, t] = view(); zoom((f + t) / 2, 0.5); }, title: 'zoom in (or wheel over a chart)' }, '+'),
          h('button', { onclick: () => { const [f, t] = view(); zoom((f + t) / 2, 2); }, title: 'zoom out' }, '−'),
          h('button', { onclick: () => pan(-0.5), title: 'earlier' }, '←'),
          h('button', { onclick: () => pan(0.5), title: 'later' }, '→'),
          h('button', { onclick: () => setRange({ kind: 'last', span: 15 * MIN }) }, 'reset')),
        h('p', { class: 'hint' }, 'Click a point to drill into its epoch, drag to select a range, wheel to zoom.'),
        overlayControls(),
        h('div', { id: 'overlay-chart', class: 'card' }),
        h('p', { id: 'no-data', class: 'hint' }),
        h('div', { id: 'host-legend' }),
        h('div', { id: 'vital-charts', class: 'grid' }),
        drillPanel()),
      ...Object.keys(tabs).map((k) => h('section', { id: 'page-' + k, hidden: true }))));
  syncRangeControls();
  renderRoute();
  window.addEventListener('hashchange', renderRoute);
  window.addEventListener('resize', () => drawCharts());
  await refreshVitals();
  performance.mark('holter-dashboard');
  document.body.dataset.ready = 'true';
  const every = Math.min(Math.max(state.ov.epoch_ns / 1e6, 1000), 5000);
  if (state.ov.live || state.ov.fleet) setInterval(poll, every);
}

start();
