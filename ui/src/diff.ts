// The drill-down's Diff tab: the reference-driven metric ranking of `holter
// diff` (GET /api/diff, Shen et al. §3.1) between the selected range (the
// target) and a reference — the baseline when one is set, else the equal
// span just before. Picking a metric draws its target and reference
// histograms overlaid in one SVG, as in the paper's Figures 6 and 11.

import { get } from './api';
import { fmtDuration, fmtNum, fmtTime, h, s } from './dom';

/** Log: the bins grow by a ratio (values spanning decades), drawn as a
 * log-scale axis. */
export interface DiffHistogram { Edges: number[]; Log?: boolean; Target: number[]; Reference: number[] }
export interface RankedMetric {
  Name: string; EMD: number; Scale: number; TargetMean: number; ReferenceMean: number;
  TargetN: number; ReferenceN: number; Histogram: DiffHistogram;
}
export interface DiffAnswer {
  host: string;
  target: { StartNs: number; EndNs: number };
  reference: { StartNs: number; EndNs: number };
  ranked: RankedMetric[];
  skipped: { name: string; reason: string }[];
}

export interface DiffView {
  target: [number, number];
  /** The baseline range; null compares with the previous equal span. */
  baseline: [number, number] | null;
  host: string;
  /** Tells whether the drill-down moved on while the answer was awaited. */
  current: () => boolean;
  onError: (e: unknown) => void;
}

const ns = (x: number) => Math.round(x).toString();
let picked = '';

export async function renderDiff(el: HTMLElement, v: DiffView) {
  const [tf, tt] = v.target;
  const ref = v.baseline ?? [tf - (tt - tf), tf];
  const head = h('p', { id: 'diff-info' },
    `Target ${fmtTime(tf, true)} – ${fmtTime(tt, false)} (${fmtDuration(tt - tf)}) against ` +
    (v.baseline ? 'the baseline ' : 'the previous equal span ') + `${fmtTime(ref[0], true)} – ${fmtTime(ref[1], false)} UTC. ` +
    'Low-level metrics ranked by earth mover\'s distance (larger mean scaled to 1): the most changed first.');
  el.replaceChildren(head, h('p', { class: 'hint' }, 'ranking…'));
  let a: DiffAnswer;
  try {
    a = await get<DiffAnswer>('/api/diff', { target: ns(tf) + '/' + ns(tt), reference: ns(ref[0]) + '/' + ns(ref[1]), host: v.host });
  } catch (e) {
    if (!v.current()) return;
    el.replaceChildren(head, h('p', { class: 'error', id: 'diff-error' }, e instanceof Error ? e.message : String(e)));
    return;
  }
  if (!v.current()) return;
  if (!a.ranked.some((m) => m.Name === picked)) picked = a.ranked[0]?.Name ?? '';
  const chart = h('div', { id: 'diff-hist', class: 'card' });
  const max = Math.max(...a.ranked.map((m) => m.EMD), 1e-9);
  const rows = a.ranked.map((m, i) => h('tr', { class: 'metric' + (m.Name === picked ? ' active' : ''), 'data-metric': m.Name, onclick: (e) => {
    picked = m.Name;
    el.querySelectorAll('tr.metric.active').forEach((r) => r.classList.remove('active'));
    (e.currentTarget as HTMLElement).classList.add('active');
    overlaidHistogram(chart, m);
  } }, h('td', { class: 'num' }, i + 1), h('td', { title: m.Name }, m.Name),
  h('td', {}, h('span', { class: 'bar', style: `width:${(m.EMD / max * 60).toFixed(0)}px` }), ' ' + m.EMD.toFixed(3)),
  h('td', { class: 'num' }, fmtNum(m.TargetMean)), h('td', { class: 'num' }, m.TargetN),
  h('td', { class: 'num' }, fmtNum(m.ReferenceMean)), h('td', { class: 'num' }, m.ReferenceN)));
  el.replaceChildren(head,
    a.ranked.length === 0 ? h('p', { class: 'empty' }, 'No metric has enough values on both sides.') :
      h('div', { class: 'split' },
        h('div', { class: 'samples' }, h('table', { id: 'diff-table' },
          h('thead', {}, h('tr', {}, ...['#', 'metric', 'EMD', 'target mean', 'n', 'reference mean', 'n'].map((c) => h('th', {}, c)))),
          h('tbody', {}, ...rows))),
        chart),
    h('p', { class: 'hint' }, a.skipped.length ? `${a.skipped.length} metrics not ranked (too few values on a side): ` +
      a.skipped.slice(0, 8).map((x) => x.name).join(', ') + (a.skipped.length > 8 ? ', …' : '') : ''));
  const m = a.ranked.find((x) => x.Name === picked);
  if (m) overlaidHistogram(chart, m);
}

/** Draws a metric's target and reference distributions over their shared
 * bins, overlaid: target red, reference blue, the overlap purple. */
export function overlaidHistogram(el: HTMLElement, m: RankedMetric) {
  const { Edges: edges, Target: tgt, Reference: ref } = m.Histogram;
  const W = Math.max(el.clientWidth - 8, 320), H = 220;
  const pad = { l: 44, r: 10, t: 24, b: 34 };
  const iw = W - pad.l - pad.r, ih = H - pad.t - pad.b;
  const n = tgt.length;
  const top = Math.max(...tgt, ...ref, 1e-9);
  const x = (k: number) => pad.l + (k / Math.max(n, 1)) * iw;
  const y = (v: number) => pad.t + ih - (v / top) * ih;
  // Bars are equal widths whatever the bins: with bins by ratio the axis
  // is a log scale.
  const log = !!m.Histogram.Log;
  const svg = s('svg', { class: 'hist', width: W, height: H, viewBox: `0 0 ${W} ${H}`, 'data-metric': m.Name, 'data-scale': log ? 'log' : 'linear' });
  svg.append(s('text', { class: 'ylabel', x: pad.l, y: 12 }, `${m.Name}: EMD ${m.EMD.toFixed(3)}` + (log ? ' (log scale)' : '')));
  for (const f of [0, 0.5, 1]) {
    svg.append(s('line', { class: 'grid', x1: pad.l, x2: W - pad.r, y1: y(f * top), y2: y(f * top) }),
      s('text', { class: 'tick', x: pad.l - 4, y: y(f * top) + 4, 'text-anchor': 'end' }, (f * top * 100).toFixed(0) + '%'));
  }
  const bars = (shares: number[], cls: string, label: string) => shares.forEach((v, k) => {
    const r = s('rect', { class: cls, x: x(k) + 1, width: Math.max(x(k + 1) - x(k) - 2, 1), y: y(v), height: pad.t + ih - y(v) });
    r.append(s('title', {}, `${label} ${fmtNum(edges[k])} – ${fmtNum(edges[k + 1])}: ${(v * 100).toFixed(1)}%`));
    svg.append(r);
  });
  bars(ref, 'reference', 'reference');
  bars(tgt, 'target', 'target');
  const ticks = n <= 1 ? [0, n] : [0, Math.floor(n / 4), Math.floor(n / 2), Math.floor(3 * n / 4), n];
  for (const k of ticks) svg.append(s('text', { class: 'tick edge', x: x(k), y: H - 18, 'text-anchor': 'middle', 'data-edge': edges[k] ?? edges[edges.length - 1] }, fmtNum(edges[k] ?? edges[edges.length - 1])));
  svg.append(
    s('rect', { class: 'target', x: W - 190, y: H - 12, width: 10, height: 10 }), s('text', { class: 'tick', x: W - 176, y: H - 3 }, `target (n ${m.TargetN})`),
    s('rect', { class: 'reference', x: W - 100, y: H - 12, width: 10, height: 10 }), s('text', { class: 'tick', x: W - 86, y: H - 3 }, `reference (n ${m.ReferenceN})`));
  el.replaceChildren(svg);
}
