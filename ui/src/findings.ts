// The Findings tab: what the rules and detectors concluded (GET
// /api/findings). The vitals charts mark each finding's range; picking a
// finding selects its range for the drill-down.

import { get } from './api';
import { fmtDuration, fmtNum, fmtTime, h } from './dom';

export interface FindingProcess { pid: number; comm: string; exe?: string; vital?: string; weight?: number }
export interface FindingSite { vital: string; kind: string; frames: string[]; weight: number }
export interface FindingEvidence { name: string; value: number; against: number; relation: string; unit?: string }
export interface Finding {
  rule: string; timescale: string; subject: string; start_ns: number; end_ns: number; score: number; summary: string;
  vitals: string[] | null; processes?: FindingProcess[]; sites?: FindingSite[]; evidence?: FindingEvidence[];
}
export interface FindingsAnswer { host: string; from: number; to: number; rules: string[]; findings: Finding[] }

/** A range marked on the vitals charts. */
export interface Mark { from: number; to: number; label: string }

export async function loadFindings(from: number, to: number, host: string, rule = ''): Promise<FindingsAnswer> {
  return get<FindingsAnswer>('/api/findings', { from, to, host, rule });
}

/** The charts' marks of a list of findings. */
export function marksOf(fs: Finding[]): Mark[] {
  return fs.map((f) => ({ from: f.start_ns, to: f.end_ns, label: `${f.rule}: ${f.summary}` }));
}

export interface FindingsPage {
  from: number;
  to: number;
  host: string;
  /** Select the finding's range (and vital) in the vitals page's drill-down. */
  onPick: (f: Finding) => void;
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
  const rows = a.findings.map((f, i) => h('tr', { class: 'finding', 'data-i': i, 'data-rule': f.rule, title: 'select this range on the vitals page',
    onclick: () => p.onPick(f) },
  h('td', {}, fmtTime(f.start_ns, true)), h('td', {}, fmtDuration(f.end_ns - f.start_ns)), h('td', {}, h('code', {}, f.rule)),
  h('td', {}, f.subject), h('td', { class: 'num' }, fmtNum(f.score)),
  h('td', { class: 'wrap' }, f.summary, ...detailOf(f))));
  el.replaceChildren(
    h('h2', {}, 'Findings'),
    h('p', { class: 'hint' }, `${fmtTime(p.from)} – ${fmtTime(p.to)} UTC on host ${a.host || '—'}: what the rules and detectors ` +
      'found (holter findings; stored by the recorder\'s online analysis). Click one to select its range on the vitals page.'),
    h('div', { class: 'filters' }, h('label', {}, 'rule ', pick), h('span', {}, `${a.findings.length} findings`)),
    a.findings.length === 0 ? h('p', { class: 'empty', id: 'no-findings' }, 'No finding in this range.') :
      h('table', { id: 'findings-table' }, h('thead', {}, h('tr', {}, ...['start (UTC)', 'lasted', 'rule', 'subject', 'score', 'summary, processes, sites, evidence'].map((c) => h('th', {}, c)))),
        h('tbody', {}, ...rows)));
}

function detailOf(f: Finding): HTMLElement[] {
  const out: HTMLElement[] = [];
  if (f.processes?.length) {
    out.push(h('div', { class: 'procs' }, 'processes: ', ...f.processes.slice(0, 6).map((pr) =>
      h('span', { class: 'chip' }, `${pr.comm} (${pr.pid})` + (pr.vital ? ` ${pr.vital} ${fmtNum(pr.weight ?? 0)}` : '')))));
  }
  if (f.sites?.length) {
    out.push(h('div', { class: 'sites' }, 'sites: ', ...f.sites.slice(0, 3).map((s) =>
      h('code', { title: s.frames.join(' < ') }, `${s.vital} ${s.kind}: ${s.frames.slice(0, 3).join(' < ')}`))));
  }
  if (f.evidence?.length) {
    out.push(h('div', { class: 'evidence' }, 'evidence: ' + f.evidence.map((e) =>
      `${e.name} ${fmtNum(e.value)}${e.unit ? ' ' + e.unit : ''} ${e.relation} ${fmtNum(e.against)}`).join('; ')));
  }
  return out;
}
