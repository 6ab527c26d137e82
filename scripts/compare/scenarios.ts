/**
 * The scenarios of the side-by-side benchmark. Every window is a whole number of seconds
 * (RateLimiterRedis counts in whole seconds, Bottleneck refreshes reservoirs in steps of 250 ms),
 * except in `two-rules` (3/200ms), which only vendor-throttle runs.
 * Calls per user are per worker process unless `totalPerUser` is given: with 4 processes a hot key
 * gets 4 × 30 calls.
 *
 * Scenarios 11–15 are shapes the others lack (a single-key burst, a send delay, two short rules, skewed clocks, no HTTP); they run
 * vendor-throttle and rate-limiter-flexible only, to keep the suite short.
 */
import type { ContenderId, Rule } from './contender.js';

export type ScenarioId =
  | 'hot-key'
  | 'many-users'
  | 'multi-rule'
  | 'jitter'
  | 'heavy-tail'
  | 'late-arrival'
  | 'long-window'
  | 'crowd'
  | 'unconstrained'
  | 'cost'
  | 'burst'
  | 'send-delay'
  | 'two-rules'
  | 'skew'
  | 'hot-key-no-http'
  | 'steady-http';

export const SCENARIO_IDS: readonly ScenarioId[] = [
  'hot-key',
  'many-users',
  'multi-rule',
  'jitter',
  'heavy-tail',
  'late-arrival',
  'long-window',
  'crowd',
  'unconstrained',
  'cost',
  'burst',
  'send-delay',
  'two-rules',
  'skew',
  'hot-key-no-http',
  'steady-http',
];

export interface BurstShape {
  readonly kind: 'burst';
  readonly users: number;
  /** Calls per user from each worker, all released at once. */
  readonly callsPerUser: number;
  /** Calls per user over all workers, split as evenly as can be (the first workers take one more); overrides `callsPerUser`. */
  readonly totalPerUser?: number;
}

export interface ClosedShape {
  readonly kind: 'closed';
  readonly users: number;
  /** Calls in flight per worker. */
  readonly concurrency: number;
  readonly warmMs: number;
  readonly measureMs: number;
  /** Each call makes one HTTP request to the simulated vendor (default: no-op calls). */
  readonly http?: boolean;
}

export interface Scenario {
  readonly id: ScenarioId;
  readonly number: number;
  readonly title: string;
  readonly rules: readonly Rule[];
  readonly shape: BurstShape | ClosedShape;
  /** Latency of one vendor call, drawn uniformly (scripts/compare/vendor.ts). */
  readonly vendorLatencyMs: { readonly min: number; readonly max: number };
  /** A heavy tail: this share of the vendor's calls take `ms` instead (answered then; arrival anywhere before). */
  readonly vendorTail?: { readonly share: number; readonly ms: number };
  /** Client-side delay between `fn` starting and the HTTP request leaving, drawn uniformly per call. */
  readonly sendDelayMs?: { readonly min: number; readonly max: number };
  /** Added to every chunk between the workers and Redis, each way, drawn uniformly (a TCP proxy). */
  readonly redisDelayMs?: { readonly min: number; readonly max: number };
  /**
   * Shift of the worker processes' wall clocks (`Date.now()` and `performance.timeOrigin`), ms: the
   * even-numbered workers run this much ahead, the odd-numbered ones this much behind. Times the
   * workers report are read from the unshifted clock.
   */
  readonly clockSkewMs?: number;
  /** Burst only: `fn` does nothing (no HTTP); drops and quota are measured on the calls' start times instead of vendor arrivals. */
  readonly noHttp?: boolean;
  /** Worker processes that take part (the first ones of the pool); default: all. */
  readonly processes?: number;
  /** Contenders run in this scenario; default: all those asked for. */
  readonly contenders?: readonly ContenderId[];
  /** The floor of quota use aimed at for this shape, where one is set. */
  readonly floor?: number;
}

export function burstCount(shape: BurstShape, workers: number): number {
  return shape.totalPerUser ?? shape.callsPerUser * workers;
}

/** Calls per user worker `index` of `workers` schedules. */
export function callsOfWorker(shape: BurstShape, workers: number, index: number): number {
  if (shape.totalPerUser === undefined) return shape.callsPerUser;
  return Math.floor(shape.totalPerUser / workers) + (index < shape.totalPerUser % workers ? 1 : 0);
}

export function scenarios(quick: boolean): Scenario[] {
  const vendorLatencyMs = { min: 5, max: 55 };
  return [
    {
      id: 'hot-key',
      number: 1,
      title: 'One hot key burst',
      rules: [{ limit: 20, windowMs: 1000 }],
      shape: { kind: 'burst', users: 1, callsPerUser: quick ? 15 : 30 },
      vendorLatencyMs,
    },
    {
      id: 'many-users',
      number: 2,
      title: 'Many users',
      rules: [{ limit: 5, windowMs: 1000 }],
      shape: { kind: 'burst', users: quick ? 50 : 100, callsPerUser: quick ? 3 : 4 },
      vendorLatencyMs,
    },
    {
      id: 'multi-rule',
      number: 3,
      title: 'Multi-rule (5/s + 30/min, shortened to 5/1s + 15/5s)',
      rules: [
        { limit: 5, windowMs: 1000 },
        { limit: 15, windowMs: 5000 },
      ],
      shape: { kind: 'burst', users: 10, callsPerUser: quick ? 4 : 6 },
      vendorLatencyMs,
    },
    {
      id: 'jitter',
      number: 4,
      title: 'Network jitter (vendor 20–300 ms, Redis +1–4 ms each way)',
      rules: [{ limit: 10, windowMs: 1000 }],
      shape: { kind: 'burst', users: 10, callsPerUser: quick ? 5 : 10 },
      vendorLatencyMs: { min: 20, max: 300 },
      redisDelayMs: { min: 1, max: 4 },
    },
    {
      id: 'heavy-tail',
      number: 5,
      title: 'Heavy latency tail (5 % of vendor calls answered after 1.5 s)',
      rules: [{ limit: 10, windowMs: 1000 }],
      shape: { kind: 'burst', users: 10, callsPerUser: quick ? 5 : 10 },
      vendorLatencyMs,
      vendorTail: { share: 0.05, ms: 1500 },
      floor: 0.85,
    },
    {
      id: 'late-arrival',
      number: 6,
      title: 'Late arrival (requests leave 0–250 ms after the call starts)',
      rules: [{ limit: 10, windowMs: 1000 }],
      shape: { kind: 'burst', users: 10, callsPerUser: quick ? 5 : 10 },
      vendorLatencyMs,
      sendDelayMs: { min: 0, max: 250 },
      floor: 0.83,
    },
    {
      id: 'long-window',
      number: 7,
      title: 'Long window (200 users, 2/s + 5000/day)',
      rules: [
        { limit: 2, windowMs: 1000 },
        { limit: 5000, windowMs: 86_400_000 },
      ],
      shape: { kind: 'burst', users: quick ? 100 : 200, callsPerUser: quick ? 1 : 2 },
      vendorLatencyMs,
      floor: 0.9,
    },
    {
      id: 'crowd',
      number: 8,
      title: '100 users × 15 calls released at once, 5/s each',
      rules: [{ limit: 5, windowMs: 1000 }],
      shape: { kind: 'burst', users: quick ? 50 : 100, callsPerUser: 0, totalPerUser: 15 },
      vendorLatencyMs,
      floor: 0.72,
    },
    {
      id: 'unconstrained',
      number: 9,
      title: 'Unconstrained overhead (limit far above the load, no-op calls)',
      rules: [{ limit: 1_000_000, windowMs: 1000 }],
      shape: { kind: 'closed', users: 1000, concurrency: 64, warmMs: quick ? 300 : 1000, measureMs: quick ? 1000 : 3000 },
      vendorLatencyMs,
    },
    {
      id: 'cost',
      number: 10,
      title: 'Cost of a decision: 10,000 keys, 2 processes, no HTTP',
      rules: [{ limit: 1000, windowMs: 1000 }],
      shape: { kind: 'closed', users: 10_000, concurrency: 256, warmMs: quick ? 300 : 1000, measureMs: quick ? 1000 : 3000 },
      vendorLatencyMs,
      processes: 2,
      contenders: ['vendor-throttle', 'rlf'],
    },
    {
      id: 'burst',
      number: 11,
      title: 'One key, 150 calls at once, 30/2s',
      rules: [{ limit: 30, windowMs: 2000 }],
      shape: { kind: 'burst', users: 1, callsPerUser: 0, totalPerUser: quick ? 75 : 150 },
      vendorLatencyMs,
      contenders: ['vendor-throttle', 'rlf'],
      floor: 0.97,
    },
    {
      id: 'send-delay',
      number: 12,
      title: 'Latency 30 ± 25 ms plus a 0–20 ms send delay',
      rules: [{ limit: 10, windowMs: 1000 }],
      shape: { kind: 'burst', users: 10, callsPerUser: 0, totalPerUser: quick ? 20 : 40 },
      vendorLatencyMs,
      sendDelayMs: { min: 0, max: 20 },
      contenders: ['vendor-throttle', 'rlf'],
      floor: 0.95,
    },
    {
      id: 'two-rules',
      number: 13,
      title: 'Two rules, 3/200ms + 20/2s',
      rules: [
        { limit: 3, windowMs: 200 },
        { limit: 20, windowMs: 2000 },
      ],
      shape: { kind: 'burst', users: 10, callsPerUser: 0, totalPerUser: quick ? 20 : 40 },
      vendorLatencyMs,
      // RateLimiterRedis counts in whole seconds: it cannot express 3/200ms.
      contenders: ['vendor-throttle'],
      floor: 0.95,
    },
    {
      id: 'skew',
      number: 14,
      title: 'One hot key burst, worker clocks skewed ±600 ms',
      rules: [{ limit: 20, windowMs: 1000 }],
      shape: { kind: 'burst', users: 1, callsPerUser: quick ? 15 : 30 },
      vendorLatencyMs,
      clockSkewMs: 600,
      contenders: ['vendor-throttle', 'rlf'],
      floor: 0.95,
    },
    {
      id: 'hot-key-no-http',
      number: 15,
      title: 'One hot key, 2,000 calls at once, no HTTP',
      // 2,000 calls at 350/1s: the last may start 5 s after the release.
      rules: [{ limit: 350, windowMs: 1000 }],
      shape: { kind: 'burst', users: 1, callsPerUser: 0, totalPerUser: quick ? 1000 : 2000 },
      vendorLatencyMs,
      noHttp: true,
      contenders: ['vendor-throttle', 'rlf'],
      floor: 0.97,
    },
    {
      id: 'steady-http',
      number: 16,
      title: 'Cost of a call with HTTP: 1,000 keys, 2 processes, never limited',
      rules: [{ limit: 1000, windowMs: 1000 }],
      shape: { kind: 'closed', users: 1000, concurrency: 64, warmMs: quick ? 300 : 1000, measureMs: quick ? 1000 : 3000, http: true },
      vendorLatencyMs: { min: 1, max: 3 },
      processes: 2,
      contenders: ['vendor-throttle', 'rlf'],
    },
  ];
}

/**
 * Not reported: one tiny batch per contender before the measured runs, so that every worker has
 * loaded each library and Redis has cached each contender's Lua scripts, as in a running service.
 */
export function warmUpScenario(): Scenario {
  return {
    id: 'hot-key',
    number: 0,
    title: 'Warm-up',
    rules: [{ limit: 1000, windowMs: 1000 }],
    shape: { kind: 'burst', users: 1, callsPerUser: 2 },
    vendorLatencyMs: { min: 1, max: 2 },
  };
}
