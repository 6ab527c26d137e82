/**
 * Messages between scripts/compare.ts and its worker processes (scripts/compare/worker.ts), one
 * JSON object per line: commands on the worker's stdin, replies on its stdout.
 */
import type { ContenderId, Rule } from './contender.js';

/** A batch released at once: every user gets `callsPerUser` calls from this worker. */
export interface BurstLoad {
  readonly kind: 'burst';
  readonly users: readonly string[];
  readonly callsPerUser: number;
  readonly vendorUrl: string;
  /** Client-side delay between `fn` starting and the request leaving, drawn uniformly per call (late arrival). */
  readonly sendDelayMs?: { readonly min: number; readonly max: number };
  /** `fn` does nothing: no request to the vendor. */
  readonly noHttp?: boolean;
}

/** Closed loop: `concurrency` calls in flight, users round-robin, `fn` does nothing. */
export interface ClosedLoad {
  readonly kind: 'closed';
  readonly users: number;
  readonly concurrency: number;
  readonly warmMs: number;
  readonly measureMs: number;
  /** Each call makes one HTTP request here (the `user` query parameter names its key). */
  readonly vendorUrl?: string;
}

export interface RunSpec {
  readonly runId: string;
  readonly contender: ContenderId;
  readonly rules: readonly Rule[];
  readonly workers: number;
  readonly index: number;
  readonly redisUrl: string;
  /** Shift of this worker's wall clock for the run (`Date.now()`, `performance.timeOrigin`), ms. */
  readonly clockSkewMs?: number;
  readonly load: BurstLoad | ClosedLoad;
}

export type Command =
  | { readonly type: 'prepare'; readonly run: RunSpec }
  | { readonly type: 'go' }
  | { readonly type: 'measure' }
  /** The run takes too long: report what has happened so far (handled out of turn). */
  | { readonly type: 'abort' }
  | { readonly type: 'teardown' }
  | { readonly type: 'exit' };

/** Per call of a burst, in schedule order; times are wall-clock ms (sub-ms, same base in every process). */
export interface BurstResult {
  readonly kind: 'burst';
  /** Index into the load's `users`. */
  readonly user: number[];
  readonly ask: number[];
  /** `fn` start, or -1 when it never ran. */
  readonly start: number[];
  /** Vendor response read, or -1. */
  readonly end: number[];
  readonly errors: number;
  readonly firstErrors: string[];
  /** Calls neither finished nor failed when the parent called the run off (`abort`). */
  readonly unfinished: number;
  /** Commands the worker's Redis clients sent from `go` to the limiter's close. */
  readonly sent: number;
  /** CPU this worker process used (user + sys) over the same time, µs. */
  readonly cpuUs: number;
  /** `Date.now()` minus the unshifted clock, read at the end of the burst (the skew really applied). */
  readonly observedSkewMs: number;
}

export interface ClosedResult {
  readonly kind: 'closed';
  readonly ops: number;
  readonly seconds: number;
  /** schedule() call → `fn` start, ms, one per op. */
  readonly latencies: number[];
  readonly errors: number;
  readonly firstErrors: string[];
  readonly sent: number;
  /** CPU this worker process used (user + sys) over the measured time, µs. */
  readonly cpuUs: number;
}

export type Reply =
  | { readonly type: 'ready' }
  | { readonly type: 'warm' }
  | { readonly type: 'result'; readonly result: BurstResult | ClosedResult }
  | { readonly type: 'torn' }
  | { readonly type: 'failed'; readonly message: string };
