// Flame graphs from the API's folded stacks, drawn as SVG, root at the
// top (an icicle). With a baseline, a differential graph: frame widths are
// the selected range's, colours say how each frame's share changed
// against the baseline — red grew, blue shrank.

import { FlameAnswer } from './api';
import { fmtAmount, h, s } from './dom';

interface Node {
  name: string;
  value: number;
  base: number;
  children: Map<string, Node>;
}

function tree(a: FlameAnswer): Node {
  const root: Node = { name: 'all', value: 0, base: 0, children: new Map() };
  for (const st of a.stacks) {
    let n = root;
    n.value += st.weight;
    n.base += st.base_weight;
    for (const f of st.frames) {
      let c = n.children.get(f);
      if (!c) { c = { name: f, value: 0, base: 0, children: new Map() }; n.children.set(f, c); }
      c.value += st.weight;
      c.base += st.base_weight;
      n = c;
    }
  }
  return root;
}

function hash(str: string): number {
  let x = 2166136261;
  for (let i = 0; i < str.length; i++) x = Math.imul(x ^ str.charCodeAt(i), 16777619);
  return (x >>> 0) / 4294967296;
}

function colour(n: Node, depth: number, a: FlameAnswer, diff: boolean): string {
  if (diff) {
    const share = a.total > 0 ? n.value / a.total : 0;
    const baseShare = a.base_total > 0 ? n.base / a.base_total : 0;
    const d = Math.max(-1, Math.min(1, (share - baseShare) * 5));
    const k = Math.round(255 - Math.abs(d) * 160);
    return d >= 0 ? `rgb(255,${k},${k})` : `rgb(${k},${k},255)`;
  }
  if (depth === 1) return '#c8c8c8'; // the process
  const r = hash(n.name);
  if (n.name.endsWith(' [k]')) return `hsl(${30 + r * 20},85%,${60 + r * 10}%)`;
  return `hsl(${r * 40},80%,${58 + r * 12}%)`;
}

const ROW = 17;

// The search term outlives a redraw (zoom, another range).
let search = '';

/** A search term as a case-insensitive pattern: a regular expression, or
 * the text itself when it is not one. */
function pattern(term: string): RegExp | null {
  if (!term) return null;
  try { return new RegExp(term, 'i'); } catch { return new RegExp(term.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'i'); }
}

/** The weight of the frames matching re under n, each stack once (a match
 * inside a matching frame is already counted). */
function matched(n: Node, re: RegExp): number {
  if (re.test(n.name)) return n.value;
  let sum = 0;
  n.children.forEach((c) => { sum += matched(c, re); });
  return sum;
}

/** Draws the flame graph of a into host; clicking a frame zooms to it. */
export function flameGraph(host: HTMLElement, a: FlameAnswer, diff: boolean) {
  const root = tree(a);
  const W = Math.max(host.clientWidth, 300);
  const box = h('div', {});
  const info = h('span', { id: 'flame-match' });
  // Highlights the frames matching the search, and says their share.
  const mark = () => {
    const re = pattern(search);
    box.querySelectorAll<SVGGElement>('g.frame').forEach((g) => g.classList.toggle('match', !!re && re.test(g.dataset.name ?? '')));
    info.textContent = re ? ` matched: ${fmtAmount(matched(root, re), a.unit)} (${root.value > 0 ? (100 * matched(root, re) / root.value).toFixed(1) : 0}%)` : '';
  };
  const input = h('input', { id: 'flame-search', type: 'search', size: 28, value: search, placeholder: 'search frames (regular expression)',
    oninput: (e) => { search = (e.target as HTMLInputElement).value; mark(); } });
  const draw = (focus: Node, path: Node[]) => {
    let depth = 0;
    const measure = (n: Node, d: number) => { depth = Math.max(depth, d); n.children.forEach((c) => measure(c, d + 1)); };
    measure(focus, path.length);
    const svg = s('svg', { width: W, height: (depth + 1) * ROW + 2, class: 'flame' });
    const scale = focus.value > 0 ? W / focus.value : 0;
    // chain is n's ancestors: clicking n zooms to it with them above.
    const put = (n: Node, d: number, x0: number, chain: Node[]) => {
      const w = n.value * scale;
      if (w < 0.5) return;
      const pct = root.value > 0 ? (100 * n.value) / root.value : 0;
      let tip = `${n.name}\n${fmtAmount(n.value, a.unit)} (${pct.toFixed(1)}%)`;
      if (diff) tip += `\nbaseline ${fmtAmount(n.base, a.unit)} (${(a.base_total > 0 ? (100 * n.base) / a.base_total : 0).toFixed(1)}%)`;
      const g = s('g', { class: 'frame', 'data-name': n.name, transform: `translate(${x0.toFixed(1)},${d * ROW})` },
        s('rect', { width: Math.max(w - 0.5, 0.5), height: ROW - 1, fill: colour(n, d, a, diff) }),
        s('title', {}, tip));
      if (w > 28) {
        const chars = Math.floor((w - 6) / 6.5);
        g.append(s('text', { x: 3, y: ROW - 5 }, n.name.length > chars ? n.name.slice(0, Math.max(chars - 1, 1)) + '…' : n.name));
      }
      g.addEventListener('click', () => draw(n, chain));
      svg.append(g);
      let cx = x0;
      for (const c of [...n.children.values()].sort((p, q) => (p.name < q.name ? -1 : 1))) {
        put(c, d + 1, cx, [...chain, n]);
        cx += c.value * scale;
      }
    };
    // The frames above the focus stay visible, full width, to zoom back out.
    path.forEach((p, d) => {
      const g = s('g', { class: 'frame ancestor', 'data-name': p.name, transform: `translate(0,${d * ROW})` },
        s('rect', { width: W, height: ROW - 1, fill: '#e8e8e8' }),
        s('text', { x: 3, y: ROW - 5 }, p.name));
      g.addEventListener('click', () => draw(p, path.slice(0, d)));
      svg.append(g);
    });
    put(focus, path.length, 0, path);
    box.replaceChildren(svg);
    mark();
  };
  if (root.value === 0) {
    host.replaceChildren(h('p', { class: 'empty' }, 'No samples with stacks in this range.'));
    return;
  }
  host.replaceChildren(h('div', { class: 'flame-search' }, input, info), box);
  draw(root, []);
}
