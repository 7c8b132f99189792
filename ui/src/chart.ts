// Line charts of vitals over time, drawn as SVG. A chart reports what the
// user does to it — a click on a point, a brushed range, a wheel zoom — and
// leaves what follows to the page.

import { Note } from './coverage';
import { fmtNum, fmtTime, s } from './dom';

export interface Line {
  name: string;
  color: string;
  t: number[];      // point start, UTC ns
  width: number[];  // how long each point covers, ns
  y: number[];
}

export interface ChartOptions {
  from: number;
  to: number;
  height: number;
  yLabel: string;
  normalised?: boolean;       // scale each line to its max = 1
  selection?: [number, number] | null;
  baseline?: [number, number] | null;
  /** Ranges to mark (the findings), each with what it is. */
  marks?: { from: number; to: number; label: string; vitals: string[] }[];
  /** Stretches drawn as not recorded (hatched) or throttled (amber). */
  notes?: Note[];
  onSelect?: (from: number, to: number) => void;
  onZoom?: (center: number, factor: number) => void;
}

const PAD = { left: 52, right: 10, top: 8, bottom: 20 };

/** Ticks for a time axis: round times at a step fitting about n ticks. */
function timeTicks(from: number, to: number, n: number): number[] {
  const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800].map((x) => x * 1e9);
  const step = steps.find((st) => (to - from) / st <= n) ?? steps[steps.length - 1];
  const out: number[] = [];
  for (let t = Math.ceil(from / step) * step; t <= to; t += step) out.push(t);
  return out;
}

function niceMax(v: number): number {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

export function lineChart(host: HTMLElement, lines: Line[], o: ChartOptions) {
  const W = Math.max(host.clientWidth, 300);
  const H = o.height;
  const iw = W - PAD.left - PAD.right;
  const ih = H - PAD.top - PAD.bottom;
  const x = (t: number) => PAD.left + ((t - o.from) / (o.to - o.from)) * iw;
  const tAt = (px: number) => o.from + ((px - PAD.left) / iw) * (o.to - o.from);
  const scaled = lines.map((l) => {
    const max = Math.max(0, ...l.y);
    return o.normalised ? l.y.map((v) => (max > 0 ? v / max : 0)) : l.y;
  });
  const ymax = o.normalised ? 1 : niceMax(Math.max(0, ...scaled.flat()));
  const y = (v: number) => PAD.top + ih - (v / ymax) * ih;

  const svg = s('svg', { width: W, height: H, class: 'chart', viewBox: `0 0 ${W} ${H}` });
  svg.append(s('defs', {}, s('pattern', { id: 'unrecorded', width: 6, height: 6, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' },
    s('rect', { width: 2, height: 6, fill: '#d0d4da' }))));
  const band = (r: [number, number] | null | undefined, cls: string) => {
    if (!r) return;
    const x0 = Math.max(PAD.left, x(r[0])), x1 = Math.min(W - PAD.right, x(r[1]));
    if (x1 > x0) svg.append(s('rect', { class: cls, x: x0, y: PAD.top, width: Math.max(x1 - x0, 2), height: ih }));
  };
  band(o.baseline, 'baseline');
  for (const n of o.notes ?? []) {
    const x0 = Math.max(PAD.left, x(n.from)), x1 = Math.min(W - PAD.right, x(n.to));
    if (x1 <= x0) continue;
    const top = n.kind === 'throttled';
    const r = s('rect', { class: 'note ' + n.kind, x: x0, y: PAD.top, width: Math.max(x1 - x0, 2), height: top ? 5 : ih });
    r.append(s('title', {}, n.label));
    svg.append(r);
  }
  for (const m of o.marks ?? []) {
    const x0 = Math.max(PAD.left, x(m.from)), x1 = Math.min(W - PAD.right, x(m.to));
    if (x1 < PAD.left || x0 > W - PAD.right) continue;
    const r = s('rect', { class: 'finding', x: x0, y: PAD.top + ih - 4, width: Math.max(x1 - x0, 3), height: 4, 'data-vitals': m.vitals.join(' ') });
    r.append(s('title', {}, m.label));
    svg.append(r);
  }
  band(o.selection, 'selection');
  // Axes
  for (const t of timeTicks(o.from, o.to, Math.max(2, Math.floor(iw / 110)))) {
    const short = o.to - o.from < 2 * 86400e9;
    svg.append(s('line', { class: 'grid', x1: x(t), x2: x(t), y1: PAD.top, y2: PAD.top + ih }),
      s('text', { class: 'tick', x: x(t), y: H - 5, 'text-anchor': 'middle' }, fmtTime(t, !short)));
  }
  for (const f of [0, 0.5, 1]) {
    svg.append(s('line', { class: 'grid', x1: PAD.left, x2: W - PAD.right, y1: y(f * ymax), y2: y(f * ymax) }),
      s('text', { class: 'tick', x: PAD.left - 4, y: y(f * ymax) + 4, 'text-anchor': 'end' }, o.normalised ? f.toFixed(1) : fmtNum(f * ymax)));
  }
  svg.append(s('text', { class: 'ylabel', x: PAD.left + 4, y: PAD.top + 10 }, o.yLabel));
  // Lines: a point is drawn at the middle of what it covers; a gap longer
  // than two points breaks the line (the recorder was not running).
  lines.forEach((l, i) => {
    const ys = scaled[i];
    let d = '';
    for (let k = 0; k < l.t.length; k++) {
      const gap = k > 0 && l.t[k] - l.t[k - 1] > 2.5 * Math.max(l.width[k], l.width[k - 1]);
      d += `${d === '' || gap ? 'M' : 'L'}${x(l.t[k] + l.width[k] / 2).toFixed(1)},${y(ys[k]).toFixed(1)}`;
    }
    svg.append(s('path', { class: 'line', d, stroke: l.color, 'data-vital': l.name }));
    if (l.t.length <= 240) {
      for (let k = 0; k < l.t.length; k++) {
        const dot = s('circle', { class: 'pt', cx: x(l.t[k] + l.width[k] / 2), cy: y(ys[k]), r: 2.5, fill: l.color,
          'data-vital': l.name, 'data-t': l.t[k], 'data-w': l.width[k] });
        dot.append(s('title', {}, `${l.name} ${fmtTime(l.t[k], true)}: ${fmtNum(l.y[k])}`));
        svg.append(dot);
      }
    }
  });
  // Interaction: a press and release in place picks the point under the
  // pointer; a drag brushes a range; the wheel zooms about the pointer.
  const brush = s('rect', { class: 'brush', y: PAD.top, height: ih, width: 0, x: 0, visibility: 'hidden' });
  svg.append(brush);
  let down: number | null = null;
  const px = (e: MouseEvent) => e.clientX - svg.getBoundingClientRect().left;
  svg.addEventListener('mousedown', (e) => { down = px(e); e.preventDefault(); });
  svg.addEventListener('mousemove', (e) => {
    if (down === null) return;
    const a = Math.min(down, px(e)), b = Math.max(down, px(e));
    brush.setAttribute('x', String(a));
    brush.setAttribute('width', String(b - a));
    brush.setAttribute('visibility', 'visible');
  });
  const finish = (e: MouseEvent) => {
    if (down === null) return;
    const start = down;
    down = null;
    brush.setAttribute('visibility', 'hidden');
    const end = px(e);
    if (Math.abs(end - start) >= 4) {
      o.onSelect?.(tAt(Math.min(start, end)), tAt(Math.max(start, end)));
      return;
    }
    // The point whose span holds the pointer, else the nearest.
    const t = tAt(end);
    let best: [number, number] | null = null, dist = Infinity;
    for (const l of lines) {
      for (let k = 0; k < l.t.length; k++) {
        const dd = t < l.t[k] ? l.t[k] - t : t > l.t[k] + l.width[k] ? t - l.t[k] - l.width[k] : 0;
        if (dd < dist) { dist = dd; best = [l.t[k], l.t[k] + l.width[k]]; }
      }
    }
    if (best) o.onSelect?.(best[0], best[1]);
  };
  svg.addEventListener('mouseup', finish);
  svg.addEventListener('mouseleave', () => { down = null; brush.setAttribute('visibility', 'hidden'); });
  svg.addEventListener('wheel', (e) => {
    if (!o.onZoom) return;
    e.preventDefault();
    o.onZoom(tAt(px(e)), e.deltaY < 0 ? 0.8 : 1.25);
  }, { passive: false });
  host.replaceChildren(svg);
}
