// What the vitals charts say about the stretches a line does not show as
// it happened: where the recorder was not running, where it ran but did
// not record a vital (shed, or left out with --vitals), and where the CPU
// budget throttled a vital's sampling or samples were lost. A chart draws
// each as a band with its reason, so a gap in a line is never unexplained.

import { Series, VitalsAnswer } from './api';
import { fmtNum } from './dom';

/** A stretch of a chart with what happened there. */
export interface Note { from: number; to: number; kind: 'off' | 'unrecorded' | 'throttled'; label: string }

// A step between two recorded points longer than this many point widths
// is time the recorder was not running (the charts break their line there
// too).
const GAP = 2.5;

/** The times a host's recorder recorded anything: the points of any of
 * its vitals. */
function recordedTimes(a: VitalsAnswer, host: string): number[] {
  const ts = new Set<number>();
  for (const sr of a.series) if (sr.host === host) sr.t.forEach((t) => ts.add(t));
  return [...ts].sort((p, q) => p - q);
}

/** The stretches between a host's recorded points where its recorder was
 * not running. */
export function offNotes(a: VitalsAnswer, host: string): Note[] {
  const ts = recordedTimes(a, host);
  const out: Note[] = [];
  for (let k = 1; k < ts.length; k++) {
    if (ts[k] - ts[k - 1] > GAP * a.bucket_ns) {
      out.push({ from: ts[k - 1] + a.bucket_ns, to: ts[k], kind: 'off',
        label: `nothing recorded${host ? ' on ' + host : ''}: holter was not running, or its store did not take these epochs` });
    }
  }
  return out;
}

/** The notes of one series: the recorder's gaps, the points where the
 * host recorded other vitals but not this one, and the throttled or
 * lossy points. Neighbouring notes of a kind and reason merge. */
export function seriesNotes(a: VitalsAnswer, sr: Series): Note[] {
  const out = offNotes(a, sr.host);
  const mine = new Set(sr.t);
  const ts = recordedTimes(a, sr.host);
  const add = (n: Note) => {
    const last = out[out.length - 1];
    if (last && last.kind === n.kind && last.label === n.label && n.from - last.to <= a.bucket_ns) last.to = Math.max(last.to, n.to);
    else out.push(n);
  };
  ts.forEach((t, k) => {
    if (mine.has(t)) return;
    const end = k + 1 < ts.length && ts[k + 1] - t <= GAP * a.bucket_ns ? ts[k + 1] : t + a.bucket_ns;
    add({ from: t, to: end, kind: 'unrecorded', label: `${sr.vital} not recorded: the recorder ran without it (shed, or left out with --vitals)` });
  });
  // The threshold the vital was recorded with is the lowest in view: the
  // budget only raises it (the configured one is not in the store).
  const base = Math.min(...(sr.threshold ?? []).filter((x) => x > 0));
  sr.t.forEach((t, k) => {
    const why: string[] = [];
    if (sr.threshold?.[k] > base) why.push(`throttled by the CPU budget: sampling threshold ${sr.threshold[k]}, ×${sr.threshold[k] / base} (counts stay exact, fewer samples)`);
    if (sr.lost[k] > 0) why.push(`${fmtNum(sr.lost[k])} samples lost (ring buffer full)`);
    if (why.length) add({ from: t, to: t + a.bucket_ns, kind: 'throttled', label: `${sr.vital}: ${why.join('; ')}` });
  });
  return out.sort((p, q) => p.from - q.from);
}
