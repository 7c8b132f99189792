// The Request traces tab: recent requests (GET /api/traces), a request's
// causal path as a waterfall (GET /api/traces/{id}/path) and a workload's
// latency graph (GET /api/latency-graph, Stardust §3.3 Figure 9) drawn
// with a simple layered layout.

import { get } from './api';
import { fmtDuration, fmtNs, fmtNum, fmtTime, h, s } from './dom';

export interface TraceSummary {
  trace_id: string; client: string; service: string; operation: string; start_ns: number; duration_ns: number;
  error: boolean; spans: number; accounted: boolean; cpu_ns: number; billed_cpu_ns: number; blocked_ns: number;
  io_bytes: number; io_ns: number; hosts: string[];
}
export interface TraceWorkload { service: string; operation: string; traces: number }
export interface TracesAnswer { total: number; traces: TraceSummary[]; workloads: TraceWorkload[] }
export interface Cost {
  accounted: boolean; cpu_ns: number; self_cpu_ns: number; blocked_ns: number; self_blocked_ns: number;
  runnable_ns: number; io_bytes: number; io_ns: number; io_count: number; blocked_sites?: string;
}
export interface PathNode {
  host: string; trace_id: string; span_id: string; parent_span_id?: string; service: string; operation: string; kind: string;
  start_ns: number; end_ns: number; error?: boolean; pid?: number; tid?: number; client: string; kernel?: Cost;
  duration_ns: number; self_ns: number; before_ns: number; after_ns: number; remote?: boolean; async?: boolean; children?: PathNode[];
}
export interface Coalesced { via_span_id: string; share: number; requests: number; batch: PathNode; billed: Cost }
export interface TracePath {
  trace_id: string; client: string; spans: number; start_ns: number; duration_ns: number; roots: PathNode[];
  coalesced?: Coalesced[]; coalesces?: string[]; own: Cost; total: Cost; queries: number; build_ns: number;
}
export interface GraphNode { id: string; service: string; operation: string; point: string }
export interface GraphEdge {
  from: string; to: string; n: number; mean_ns: number; min_ns: number; p50_ns: number; p90_ns: number; p99_ns: number;
  max_ns: number; remote?: boolean; async?: boolean;
}
export interface LatencyGraph { workload: { service: string; operation: string; client?: string }; paths: number; nodes: GraphNode[]; edges: GraphEdge[]; rolled_up_paths: number }

export interface TracesPage {
  /** The vitals page's visible range, offered as a filter. */
  view: [number, number];
  onError: (e: unknown) => void;
}

const f = { service: '', operation: '', client: '', inView: false, workload: '' };
let seq = 0;

// Runnable is the time the span's thread waited for a CPU (its children's
// on the thread included: the API keeps no self share of it).
const costText = (c?: Cost) => !c ? 'no kernel account' : !c.accounted ? 'not accounted' :
  `cpu ${fmtNs(c.self_cpu_ns)} · runnable ${fmtNs(c.runnable_ns)} · blocked ${fmtNs(c.self_blocked_ns)} · io ${fmtNum(c.io_bytes)}B`;
// A span without thread.id or process.pid cannot be charged: say so, and
// where the fix is.
const spanCost = (n: PathNode) => !n.kernel && (!n.pid || !n.tid)
  ? 'not accounted: the span has no thread.id or process.pid (holter status says how to add them)' : costText(n.kernel);

export async function renderTraces(el: HTMLElement, p: TracesPage) {
  const mine = ++seq;
  const params: Record<string, string | number> = { service: f.service, operation: f.operation, client: f.client, limit: 200 };
  if (f.inView) { params.from = p.view[0]; params.to = p.view[1]; }
  let a: TracesAnswer;
  try {
    a = await get<TracesAnswer>('/api/traces', params);
  } catch (e) { return p.onError(e); }
  if (mine !== seq) return;
  const input = (key: 'service' | 'operation' | 'client', size: number) => h('label', {}, key + ' ',
    h('input', { id: 'tr-' + key, size, value: f[key], onchange: (e) => { f[key] = (e.target as HTMLInputElement).value.trim(); renderTraces(el, p); } }));
  const detail = h('div', { id: 'trace-detail' }, h('p', { class: 'empty' }, 'Click a trace to see its causal path.'));
  const graph = h('div', { id: 'latency-graph' });
  const rows = a.traces.map((t) => h('tr', { class: 'trace', 'data-trace': t.trace_id, onclick: (e) => {
    el.querySelectorAll('tr.trace.active').forEach((r) => r.classList.remove('active'));
    (e.currentTarget as HTMLElement).classList.add('active');
    showPath(detail, t.trace_id, p);
  } }, h('td', {}, fmtTime(t.start_ns, true, true)), h('td', {}, t.service || '?'), h('td', {}, t.operation || '?'), h('td', {}, t.client),
  h('td', { class: 'hosts' }, (t.hosts ?? []).join(', ')), h('td', { class: 'num' }, fmtNs(t.duration_ns)), h('td', { class: 'num' }, t.spans),
  h('td', { class: 'num' }, t.accounted ? fmtNs(t.cpu_ns) + (t.billed_cpu_ns > 0 ? ` (${fmtNs(t.billed_cpu_ns)} billed)` : '') : '—'),
  h('td', { class: 'num' }, t.accounted ? fmtNs(t.blocked_ns) : '—'), h('td', { class: 'num' }, t.accounted ? fmtNum(t.io_bytes) + 'B' : '—'),
  h('td', {}, t.error ? 'error' : '')));
  const wlKey = (w: TraceWorkload) => w.service + '\u0000' + w.operation;
  if (!a.workloads.some((w) => wlKey(w) === f.workload)) f.workload = a.workloads[0] ? wlKey(a.workloads[0]) : '';
  const wl = h('select', { id: 'graph-workload', onchange: (e) => { f.workload = (e.target as HTMLSelectElement).value; showGraph(graph, p); } },
    ...a.workloads.map((w) => h('option', { value: wlKey(w), selected: wlKey(w) === f.workload }, `${w.service} · ${w.operation} (${w.traces})`)));
  el.replaceChildren(
    h('h2', {}, 'Request traces'),
    h('div', { class: 'filters' }, input('service', 10), input('operation', 14), input('client', 10),
      h('label', {}, h('input', { type: 'checkbox', checked: f.inView, onchange: (e) => { f.inView = (e.target as HTMLInputElement).checked; renderTraces(el, p); } }),
        ' only in the visible range'),
      h('span', {}, `${a.total} traces` + (a.total > a.traces.length ? `, newest ${a.traces.length} shown` : ''))),
    a.traces.length === 0 ? h('p', { class: 'empty', id: 'no-traces' }, 'No trace received (holter record takes OTLP on 127.0.0.1:4317 and :4318).') :
      h('div', { class: 'samples' }, h('table', { id: 'traces-table' },
        h('thead', {}, h('tr', {}, ...['start (UTC)', 'service', 'operation', 'client', 'hosts', 'duration', 'spans', 'CPU', 'blocked', 'I/O', ''].map((c) => h('th', {}, c)))),
        h('tbody', {}, ...rows))),
    detail,
    h('h3', {}, 'Latency graph'),
    a.workloads.length ? h('div', { class: 'filters' }, h('label', {}, 'requests entering ', wl),
      h('small', {}, 'client filter: the client field above')) : h('p', { class: 'empty' }, 'No workload yet.'),
    graph);
  if (f.workload) showGraph(graph, p);
}

async function showPath(el: HTMLElement, id: string, p: TracesPage) {
  let path: TracePath;
  try {
    path = await get<TracePath>(`/api/traces/${id}/path`);
  } catch (e) { return p.onError(e); }
  waterfall(el, path);
}

interface Row { n: PathNode; depth: number; batch?: Coalesced }

/** Draws a causal path as a waterfall: a bar per span on the trace's time
 * axis, indented by depth, with its service, host and charged kernel cost;
 * asynchronous spans (outliving their parent) are hatched, remote hops
 * marked, and the coalesced batches billed to the request follow with
 * their share. */
export function waterfall(el: HTMLElement, path: TracePath) {
  const rows: Row[] = [];
  const walk = (n: PathNode, depth: number, batch?: Coalesced) => {
    rows.push({ n, depth, batch });
    for (const c of n.children ?? []) walk(c, depth + 1);
  };
  path.roots.forEach((r) => walk(r, 0));
  for (const c of path.coalesced ?? []) walk(c.batch, 0, c);
  const t0 = Math.min(...rows.map((r) => r.n.start_ns));
  const t1 = Math.max(...rows.map((r) => r.n.end_ns), t0 + 1);
  const W = Math.max(el.clientWidth, 900), RH = 22, LW = 300, CW = 300;
  const bw = W - LW - CW - 20;
  const x = (t: number) => LW + ((t - t0) / (t1 - t0)) * bw;
  const H = rows.length * RH + 30;
  const svg = s('svg', { class: 'waterfall', width: W, height: H, viewBox: `0 0 ${W} ${H}` });
  svg.append(s('defs', {}, s('pattern', { id: 'hatch', width: 6, height: 6, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' },
    s('rect', { width: 3, height: 6, fill: '#f0a04b' }))));
  for (const t of [0, 0.25, 0.5, 0.75, 1]) {
    svg.append(s('line', { class: 'grid', x1: x(t0 + t * (t1 - t0)), x2: x(t0 + t * (t1 - t0)), y1: 14, y2: H }),
      s('text', { class: 'tick', x: x(t0 + t * (t1 - t0)), y: 10, 'text-anchor': 'middle' }, '+' + fmtNs(t * (t1 - t0))));
  }
  rows.forEach((r, i) => {
    const y = 18 + i * RH;
    const n = r.n;
    const cls = ['span', n.async ? 'async' : '', n.remote ? 'remote' : '', r.batch ? 'batch' : '', n.error ? 'err' : ''].filter(Boolean).join(' ');
    const g = s('g', { class: cls, 'data-service': n.service, 'data-host': n.host, 'data-span': n.span_id });
    const marks = [n.remote ? '↪' : '', n.async ? 'async' : '', r.batch ? `coalesced: billed ${(r.batch.share * 100).toFixed(0)}% of ${r.batch.requests} requests` : ''].filter(Boolean).join(' ');
    g.append(s('text', { class: 'label', x: 4 + r.depth * 12, y: y + 14 }, `${n.service} · ${n.operation}`),
      s('rect', { class: 'bar', x: x(n.start_ns), y: y + 3, width: Math.max(x(n.end_ns) - x(n.start_ns), 2), height: RH - 6 }),
      // The duration and marks go after the bar, or before it when the
      // bar ends in the right half.
      x(n.end_ns) < LW + bw / 2
        ? s('text', { class: 'tick', x: x(n.end_ns) + 4, y: y + 14 }, fmtNs(n.duration_ns) + (marks ? ' ' + marks : ''))
        : s('text', { class: 'tick', x: x(n.start_ns) - 4, y: y + 14, 'text-anchor': 'end' }, fmtNs(n.duration_ns) + (marks ? ' ' + marks : '')),
      s('text', { class: 'cost', x: LW + bw + 10, y: y + 14 }, `${n.host} · ` + (r.batch && r.depth === 0 ? 'billed ' + costText(r.batch.billed) : spanCost(n))));
    g.append(s('title', {}, `${n.service} ${n.operation} (${n.kind}) on ${n.host}, pid ${n.pid ?? '?'} tid ${n.tid ?? '?'}\n` +
      `${fmtNs(n.duration_ns)}, self ${fmtNs(n.self_ns)}, ${fmtNs(n.before_ns)} after its parent started` + (n.async ? ', outlives its parent' : '') +
      `\n${spanCost(n)}`));
    svg.append(g);
  });
  el.replaceChildren(
    h('h3', {}, `Trace ${path.trace_id}`),
    h('p', { class: 'hint' }, `client ${path.client}, ${path.spans} spans, ${fmtNs(path.duration_ns)} from ${fmtTime(path.start_ns, true, true)} UTC. ` +
      `Own kernel cost: ${costText(path.own)}; with billed shares: ${costText(path.total)}. Built in ${fmtDuration(path.build_ns)} (${path.queries} queries).`),
    h('div', { class: 'scroll' }, svg));
}

async function showGraph(el: HTMLElement, p: TracesPage) {
  const [service, operation] = f.workload.split('\u0000');
  let g: LatencyGraph;
  try {
    g = await get<LatencyGraph>('/api/latency-graph', { service, operation, client: f.client });
  } catch (e) { return p.onError(e); }
  latencyGraph(el, g);
}

/** Draws a latency graph: nodes are instrumentation points placed in
 * layers by their longest distance from a source, edges are labelled with
 * the latency's p50 / p99 and count; remote hops dashed, async orange. */
export function latencyGraph(el: HTMLElement, g: LatencyGraph) {
  const layer = new Map<string, number>(g.nodes.map((n) => [n.id, 0]));
  // Longest-path layering; a cycle (which timestamps should not make)
  // stops after as many rounds as there are nodes.
  for (let round = 0; round < g.nodes.length; round++) {
    let moved = false;
    for (const e of g.edges) {
      const want = (layer.get(e.from) ?? 0) + 1;
      if (e.from !== e.to && (layer.get(e.to) ?? 0) < want) { layer.set(e.to, want); moved = true; }
    }
    if (!moved) break;
  }
  const byLayer: GraphNode[][] = [];
  for (const n of g.nodes) (byLayer[layer.get(n.id)!] ??= []).push(n);
  const NW = 150, NH = 38, CG = 170, RG = 34;
  const pos = new Map<string, { x: number; y: number }>();
  byLayer.forEach((ns, L) => ns.forEach((n, i) => pos.set(n.id, { x: 10 + L * (NW + CG), y: 30 + i * (NH + RG) })));
  const W = 20 + byLayer.length * (NW + CG), H = 40 + Math.max(...byLayer.map((ns) => ns?.length ?? 0), 1) * (NH + RG);
  const svg = s('svg', { class: 'lgraph', width: W, height: H, viewBox: `0 0 ${W} ${H}` });
  svg.append(s('defs', {}, s('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
    s('path', { d: 'M0,0 L10,5 L0,10 z', fill: '#57606a' }))));
  svg.append(s('text', { class: 'ylabel', x: 10, y: 14 }, `${g.workload.service} · ${g.workload.operation}` +
    (g.workload.client ? ` from ${g.workload.client}` : '') + `: ${g.paths} requests` + (g.rolled_up_paths ? ` (${g.rolled_up_paths} from rollups)` : '')));
  for (const e of g.edges) {
    const a = pos.get(e.from), b = pos.get(e.to);
    if (!a || !b) continue;
    const x1 = a.x + NW, y1 = a.y + NH / 2, x2 = b.x, y2 = b.y + NH / 2;
    const mx = (x1 + x2) / 2;
    const cls = 'edge' + (e.remote ? ' remote' : '') + (e.async ? ' async' : '');
    const path = s('path', { class: cls, d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`, 'marker-end': 'url(#arrow)', 'data-from': e.from, 'data-to': e.to });
    path.append(s('title', {}, `${e.from} → ${e.to}: n ${e.n}, mean ${fmtNs(e.mean_ns)}, min ${fmtNs(e.min_ns)}, p50 ${fmtNs(e.p50_ns)}, p90 ${fmtNs(e.p90_ns)}, p99 ${fmtNs(e.p99_ns)}, max ${fmtNs(e.max_ns)}`));
    svg.append(path, s('text', { class: 'elabel', x: mx, y: (y1 + y2) / 2 - 5, 'text-anchor': 'middle' }, `p50 ${fmtNs(e.p50_ns)} · p99 ${fmtNs(e.p99_ns)} (${e.n})`));
  }
  for (const n of g.nodes) {
    const q = pos.get(n.id)!;
    svg.append(s('g', { class: 'node ' + n.point, 'data-id': n.id },
      s('rect', { x: q.x, y: q.y, width: NW, height: NH, rx: 5 }),
      s('text', { x: q.x + NW / 2, y: q.y + 15, 'text-anchor': 'middle' }, n.service),
      s('text', { class: 'tick', x: q.x + NW / 2, y: q.y + 30, 'text-anchor': 'middle' }, `${n.operation.slice(0, 22)} ${n.point}`)));
  }
  el.replaceChildren(h('div', { class: 'scroll card' }, svg));
}
