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

/** Reads a UTC time as fmtTime writes it (YYYY-MM-DD HH:MM[:SS[.mmm]])
 * into ns; NaN when it is not one. */
export function parseTime(text: string): number {
  const m = /^\s*(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d(:\d\d(\.\d{1,3})?)?)\s*(UTC|Z)?\s*$/.exec(text);
  return m ? Date.parse(`${m[1]}T${m[2]}Z`) * 1e6 : NaN;
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

/** Formats a short duration in ns: s, ms or µs. */
export function fmtNs(ns: number): string {
  return ns >= 1e9 ? (ns / 1e9).toFixed(2) + ' s' : ns >= 1e6 ? (ns / 1e6).toFixed(ns >= 1e8 ? 0 : 1) + ' ms' : (ns / 1e3).toFixed(0) + ' µs';
}

// A vital whose unit is "µs something" counts time: an amount of it reads
// as a duration, and its rate per second as how many CPUs (cpu) or threads
// (the waits) it kept busy on average.
const timeUnit = /^µs ?(.*)$/;

/** Formats an amount of a vital's unit: "2.41 s on CPU", "3.1M bytes …";
 * bare, the number alone ("2.41 s", "3.1M") under a heading of unitHead. */
export function fmtAmount(v: number, unit: string, bare = false): string {
  const m = timeUnit.exec(unit);
  if (m) return fmtNs(v * 1e3) + (m[1] && !bare ? ' ' + m[1] : '');
  return fmtNum(v) + (bare ? '' : ' ' + unit);
}

/** The heading of a column of bare amounts of unit. */
export const unitHead = (unit: string) => unit.replace(timeUnit, 'time $1');

/** How a vital's rate per second is drawn: its factor from unit/s and its
 * label ("cores busy", "threads blocked", "bytes of block I/O/s"). */
export function rateOf(vital: string, unit: string): { scale: number; label: string } {
  const m = timeUnit.exec(unit);
  if (!m) return { scale: 1, label: unit + '/s' };
  return { scale: 1e-6, label: vital === 'cpu' ? 'cores busy (CPUs on CPU)' : 'threads ' + m[1] };
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
