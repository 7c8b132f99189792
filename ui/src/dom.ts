// Small helpers for building DOM and SVG without a framework.

type Attrs = Record<string, string | number | boolean | undefined | null | ((e: Event) => void)>;
type Child = Node | string | number | null | undefined | false;

function apply(el: Element, attrs: Attrs, children: Child[]) {
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (typeof v === 'function') el.addEventListener(k.replace(/^on/, ''), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
}

/** h builds an HTML element: h('div', {class: 'x', onclick: f}, 'text'). */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  apply(el, attrs, children);
  return el;
}

const SVGNS = 'http://www.w3.org/2000/svg';

/** s builds an SVG element. */
export function s<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVGNS, tag) as SVGElementTagNameMap[K];
  apply(el, attrs, children);
  return el;
}

/** Formats a UTC nanosecond time; with ms when the span is short. */
export function fmtTime(ns: number, withDate = true, ms = false): string {
  const iso = new Date(ns / 1e6).toISOString();
  const time = iso.slice(11, ms ? 23 : 19);
  return withDate ? iso.slice(0, 10) + ' ' + time : time;
}

/** Formats a number with k/M/G suffixes. */
export function fmtNum(v: number): string {
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(a >= 1e10 ? 0 : 1) + 'G';
  if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + 'M';
  if (a >= 1e3) return (v / 1e3).toFixed(a >= 1e4 ? 0 : 1) + 'k';
  if (a >= 10 || v === 0) return v.toFixed(0);
  return v.toPrecision(2);
}

export function fmtDuration(ns: number): string {
  const sec = ns / 1e9;
  if (sec < 120) return `${+sec.toFixed(1)} s`;
  if (sec < 7200) return `${+(sec / 60).toFixed(1)} min`;
  if (sec < 172800) return `${+(sec / 3600).toFixed(1)} h`;
  return `${+(sec / 86400).toFixed(1)} d`;
}

/** A stable colour per vital. */
export const palette = ['#d62728', '#1f77b4', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf', '#393b79'];
