// The Findings tab: "what is wrong with this host?" for the visible range,
// as one ranked list of incidents (GET /api/findings, what `holter
// findings` prints). Each incident names its culprit (process, executable,
// function, top frames) and the resource, says what it costs, and offers
// the samples, flame graph and diff of its time; its evidence (the
// findings merged into it) unfolds below it. The vitals charts mark each
// incident's range.

import { get } from './api';
import { fmtDuration, fmtNum, fmtTime, h } from './dom';

export interface FindingEvidence { name: string; value: number; against: number; relation: string; unit?: string }
export interface Culprit { pid: number; comm: string; exe?: string; function?: string; user_frames?: string[]; kernel_frames?: string[] }
export interface FindingProcess { pid: number; comm: string; exe?: string; vital?: string; weight?: number }
export interface Finding {
  rule: string; timescale: string; subject: string; start_ns: number; end_ns: number; severity: number; score: number;
  resource?: string; culprit?: Culprit; summary: string; vitals: string[] | null; processes?: FindingProcess[]; evidence?: FindingEvidence[];
}
/** How an incident showed in the host's history before the range, when
 * nothing in it is new: since when, in what share of the time, at what
 * typical severity. */
export interface Before { since_ns: number; share: number; severity: number }
export interface Incident {
  rank: number; severity: number; new_severity: number; before?: Before; resource: string; summary: string; start_ns: number; end_ns: number;
  culprit?: Culprit; processes?: FindingProcess[]; rules: string[]; findings: Finding[]; drill: { what: string; command: string }[];
}
export interface FindingsAnswer { host: string; from: number; to: number; rules: string[]; incidents: Incident[] }

/** A range marked on the vitals charts: on the overlay, and on the chart
 * of each vital its findings are of. */
export interface Mark { from: number; to: number; label: string; vitals: string[] }

/** What the drill-down shows of an incident: its range, the vital its
 * samples are of, the tab, and its culprit's pid as the filter. */
export interface Pick { from: number; to: number; vital: string; tab: 'samples' | 'flame' | 'diff'; pid?: number }

export async function loadFindings(from: number, to: number, host: string, rule = ''): Promise<FindingsAnswer> {
  return get<FindingsAnswer>('/api/findings', { from, to, host, rule });
}

/** The charts' marks of a list of incidents. */
export function marksOf(ins: Incident[]): Mark[] {
  return ins.map((i) => ({ from: i.start_ns, to: i.end_ns, label: `#${i.rank} ${i.summary}`,
    vitals: [...new Set(i.findings.flatMap((f) => f.vitals ?? []))] }));
}

export interface FindingsPage {
  from: number;
  to: number;
  host: string;
  /** Show the incident in the vitals page's drill-down. */
  onPick: (p: Pick) => void;
  onError: (e: unknown) => void;
}

let rule = '';
let seq = 0;

/** Renders the Findings tab into el for the visible range. */
export async function renderFindings(el: HTMLElement, p: FindingsPage) {
  const mine = ++seq;
  let a: FindingsAnswer;
  try {
    a = await loadFindings(p.from, p.to, p.host, rule);
  } catch (e) { return p.onError(e); }
  if (mine !== seq) return;
  const pick = h('select', { id: 'finding-rule', onchange: (e) => { rule = (e.target as HTMLSelectElement).value; renderFindings(el, p); } },
    h('option', { value: '' }, 'all rules'),
    ...[...new Set(a.rules.map((r) => r.split(':')[0]))].flatMap((fam) => {
      const members = a.rules.filter((r) => r.split(':')[0] === fam);
      return [fam, ...members.filter((m) => m !== fam)].map((r) => h('option', { value: r, selected: r === rule }, r === fam && members.length > 1 ? fam + ' (all)' : r));
    }));
  el.replaceChildren(
    h('h2', {}, 'Findings'),
    h('p', { class: 'hint' }, `What is wrong with host ${a.host || '(all hosts)'} from ${fmtTime(p.from)} to ${fmtTime(p.to)} UTC, ` +
      'worst first (holter findings). Severity is what a problem costs: the share of the machine\'s CPU it burns, of its threads\' ' +
      'time spent waiting, or of the free memory it would take in an hour.'),
    h('div', { class: 'filters' }, h('label', {}, 'rule ', pick), h('span', {}, `${a.incidents.length} incidents`)),
    a.incidents.length === 0 ? h('p', { class: 'empty', id: 'no-findings' }, 'Nothing wrong found in this range.') :
      h('ol', { id: 'incidents' }, ...a.incidents.map((i) => incidentCard(i, p))));
}

function vitalOf(i: Incident): string {
  return i.findings.find((f) => f.vitals?.length)?.vitals?.[0] ?? 'cpu';
}

function incidentCard(i: Incident, p: FindingsPage): HTMLElement {
  const c = i.culprit;
  const show = (tab: Pick['tab'], vital = vitalOf(i)) => () => p.onPick({ from: i.start_ns, to: i.end_ns, vital, tab, pid: c?.pid });
  const sev = i.severity > 0 ? `${Math.round(i.severity * 100)}%` : '—';
  const b = i.before;
  return h('li', { class: b ? 'incident as-before' : 'incident', 'data-rank': i.rank, 'data-rules': i.rules.join(' '), 'data-function': c?.function ?? '' },
    h('div', { class: 'incident-head' },
      h('span', { class: 'severity', title: i.severity > 0 ? 'severity: what it costs' : 'no cost measured' },
        h('span', { class: 'bar', style: `width:${Math.round(Math.min(i.severity, 1) * 100)}%` }), sev),
      h('span', { class: 'chip resource' }, i.resource),
      b ? h('span', { class: 'chip before', title: `seen since ${fmtTime(b.since_ns)} in ${Math.round(b.share * 100)}% of the time ` +
        `before this range, at a typical severity of ${Math.round(b.severity * 100)}%: ranked below every new incident` }, 'as before') : '',
      h('span', { class: 'summary' }, i.summary)),
    h('div', { class: 'incident-meta' },
      `${fmtTime(i.start_ns, true)} for ${fmtDuration(i.end_ns - i.start_ns)}`,
      c ? h('span', { class: 'culprit' }, ` · ${c.comm} (pid ${c.pid}) ${c.exe ?? ''}`, c.function ? h('code', {}, ' ' + c.function) : '') : ''),
    c && (c.user_frames?.length || c.kernel_frames?.length) ? h('div', { class: 'frames' },
      c.user_frames?.length ? h('code', { title: 'user stack, innermost first' }, c.user_frames.join(' < ')) : '',
      c.kernel_frames?.length ? h('code', { class: 'kernel', title: 'kernel stack, innermost first' }, c.kernel_frames.join(' < ')) : '') : '',
    h('div', { class: 'drill-links' },
      h('button', { class: 'show-samples', onclick: show('samples') }, 'samples'),
      h('button', { class: 'show-flame', onclick: show('flame', ['cpu', 'blck'].includes(vitalOf(i)) ? vitalOf(i) : 'cpu') }, 'flame graph'),
      h('button', { class: 'show-diff', onclick: show('diff') }, 'diff'),
      h('span', { class: 'rules' }, 'found by ', ...i.rules.map((r) => h('code', { class: 'rule' }, r)))),
    h('details', { class: 'evidence' }, h('summary', {}, `evidence (${i.findings.length} findings)`),
      h('ul', {}, ...i.findings.map((f) => h('li', { 'data-rule': f.rule },
        h('code', {}, f.rule), f.severity > 0 ? ` ${Math.round(f.severity * 100)}%` : '', ' ', f.summary,
        f.evidence?.length ? h('div', { class: 'values' }, f.evidence.map((e) =>
          `${e.name} ${fmtNum(e.value)}${e.unit ? ' ' + e.unit : ''} ${e.relation} ${fmtNum(e.against)}`).join('; ')) : '')))));
}
