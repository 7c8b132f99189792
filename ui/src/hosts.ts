// Fleet mode (holter ui --source CLICKHOUSE): the host selector, one line
// per host so a vital's chart overlays the hosts on one time axis, and the
// host column of the fleet's tables. With one host everything here is
// what the single-host UI always showed.

import { Overview, Series, VitalsAnswer } from './api';
import { h, palette } from './dom';

/** True when the answer's series come from several hosts. */
export function severalHosts(a: VitalsAnswer | null): boolean {
  return (a?.hosts?.length ?? 0) > 1;
}

/** A stable colour per host: its place among the fleet's hosts. */
export function hostColour(host: string, hosts: string[]): string {
  return palette[Math.max(hosts.indexOf(host), 0) % palette.length];
}

/** The host selector: all hosts or one. A single host is just named. */
export function hostSelector(ov: Overview, onChange: (host: string) => void): HTMLElement {
  if (ov.hosts.length <= 1) return h('span', { class: 'host' }, ov.host ? 'host ' + ov.host : 'nothing recorded yet');
  return h('label', { class: 'host' }, 'host ',
    h('select', { id: 'host-select', title: 'show every host, each its own line, or one', onchange: (e) => onChange((e.target as HTMLSelectElement).value) },
      h('option', { value: '', selected: !ov.host }, `all ${ov.hosts.length} hosts`),
      ...ov.hosts.map((x) => h('option', { value: x, selected: x === ov.host }, x))));
}

/** Where the UI reads from, for the header. */
export function sourceLabel(ov: Overview): string {
  if (ov.fleet) return `fleet (ClickHouse), ${ov.hosts.length} host${ov.hosts.length === 1 ? '' : 's'}`;
  return ov.live ? '● live' : 'stored recording';
}

/** How a series is drawn. In one vital's chart of several hosts each
 * host is a line of its own colour; in the overlay of several vitals the
 * colour is the vital's and the name says the host. */
export function seriesStyle(sr: Series, a: VitalsAnswer, oneVital: boolean, vitalColour: (v: string) => string): { name: string; color: string } {
  if (!severalHosts(a)) return { name: sr.vital, color: vitalColour(sr.vital) };
  if (oneVital) return { name: sr.host, color: hostColour(sr.host, a.hosts) };
  return { name: `${sr.vital} ${sr.host}`, color: vitalColour(sr.vital) };
}

/** The legend of the hosts' colours above the vitals' charts. */
export function hostLegend(a: VitalsAnswer): HTMLElement | null {
  if (!severalHosts(a)) return null;
  return h('div', { class: 'host-legend' }, 'hosts: ', ...a.hosts.map((x) =>
    h('span', { class: 'chip', 'data-host': x, style: `border-color:${hostColour(x, a.hosts)}` }, x)));
}

/** The vitals to chart, once each, in the answer's order. */
export function vitalsOf(a: VitalsAnswer): Series[][] {
  const by = new Map<string, Series[]>();
  for (const sr of a.series) {
    if (!by.has(sr.vital)) by.set(sr.vital, []);
    by.get(sr.vital)!.push(sr);
  }
  return [...by.values()];
}

/** Whether the drill-down's tables need a host column: all of several
 * hosts are shown. */
export function allHosts(ov: Overview): boolean {
  return !ov.host && ov.hosts.length > 1;
}
