// Types and calls of holter's JSON API (internal/server/openapi.yaml).
// Times are UTC nanoseconds; in the browser they are doubles, exact to a
// few hundred nanoseconds, which the API tolerates (an epoch is picked by
// its middle). Stack ids are strings: 64-bit hashes.

export interface VitalInfo { name: string; unit: string; recorded: boolean }
export interface TimescaleDef { name: string; width_ns: number }
export interface HostInfo { host: string; first_ns: number; last_ns: number; epochs: number; last_epoch: number; epoch_ns: number }
/** host is the host asked for, or the only one; empty, the figures are every host's. */
export interface Overview {
  hosts: string[]; host: string; fleet: boolean; first_ns: number; last_ns: number; epochs: number;
  last_epoch: number; epoch_ns: number; live: boolean; vitals: VitalInfo[]; timescales: TimescaleDef[]; per_host: HostInfo[];
}
export interface Series {
  vital: string; host: string; unit: string; t: number[]; weight: number[]; events: number[];
  samples: number[]; lost: number[]; seconds: number[]; threshold: number[];
}
export interface VitalsAnswer { host: string; hosts: string[]; from: number; to: number; timescale: string; bucket_ns: number; series: Series[] }
export interface Sample {
  host: string; epoch: number; ts_ns: number; vital: string; label_hash: string; weight: number; est_count: number;
  pid: number; tid: number; uid: number; comm: string; exe: string;
  kstack_id: string | null; ustack_id: string | null; fields: Record<string, unknown>;
}
export interface SamplesAnswer { total: number; offset: number; samples: Sample[] }
export interface Stack { id: string; kind: string; frames: string[]; modules: string[] }
export interface FlameStack { frames: string[]; weight: number; base_weight: number }
export interface FlameAnswer { vital: string; unit: string; total: number; base_total: number; truncated: boolean; stacks: FlameStack[] }
export interface TopRow { key: string; host: string; comm: string; weight: number; samples: number; est_count: number }
export interface TopAnswer { vital: string; unit: string; by: string; total_weight: number; rows: TopRow[] }

export type Params = Record<string, string | number | undefined | null>;

/** The process filters of the drill-down; empty ones are left out. */
export interface Filter { pid?: string; comm?: string; uid?: string; exe?: string; func?: string }

export class APIError extends Error {}

/** The URL of an API path with its parameters; empty ones are left out. */
export function apiURL(path: string, params: Params = {}): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, typeof v === 'number' ? Math.round(v).toString() : v);
  }
  return path + (q.size ? '?' + q.toString() : '');
}

/** How long a busy store's answers are waited for before the error is shown. */
const busyPatienceMs = 60_000;

export async function get<T>(path: string, params: Params = {}): Promise<T> {
  const url = apiURL(path, params);
  const giveUp = Date.now() + busyPatienceMs;
  for (;;) {
    const resp = await fetch(url, { headers: { Accept: 'application/json' } });
    const body = await resp.json().catch(() => null);
    if (resp.ok) return body as T;
    // A store running as many queries as it may says when to ask again
    // (503 with Retry-After): a page's panels load at once, and on a busy
    // host some of them are told to wait, which is not an error to show.
    const wait = retryAfterMs(resp);
    if (wait === null || Date.now() + wait > giveUp) throw new APIError(body?.error ?? `${resp.status} ${resp.statusText}`);
    await new Promise((r) => setTimeout(r, wait));
  }
}

/** The wait a 503's Retry-After asks for (seconds, 1 to 10), null for any other answer. */
function retryAfterMs(resp: Response): number | null {
  if (resp.status !== 503) return null;
  const secs = Number(resp.headers.get('Retry-After'));
  if (!Number.isFinite(secs)) return null;
  return Math.min(Math.max(secs, 1), 10) * 1000;
}
