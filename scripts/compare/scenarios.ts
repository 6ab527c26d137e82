/**
 * The five scenarios of the side-by-side benchmark. Every window is a whole number of seconds
 * (RateLimiterRedis counts in whole seconds, Bottleneck refreshes reservoirs in steps of 250 ms).
 * Calls per user are per worker process: with 4 processes a hot key gets 4 × 30 calls.
 */
import type { ContenderId, Rule } from './contender.js';

export type ScenarioId = 'hot-key' | 'many-users' | 'multi-rule' | 'jitter' | 'unconstrained';

export const SCENARIO_IDS: readonly ScenarioId[] = ['hot-key', 'many-users', 'multi-rule', 'jitter', 'unconstrained'];

export interface BurstShape {
  readonly kind: 'burst';
  readonly users: number;
  /** Calls per user from each worker, all released at once. */
  readonly callsPerUser: number;
}

export interface ClosedShape {
  readonly kind: 'closed';
  readonly users: number;
  /** Calls in flight per worker. */
  readonly concurrency: number;
  readonly warmMs: number;
  readonly measureMs: number;
}

export interface Scenario {
  readonly id: ScenarioId;
  readonly number: number;
  readonly title: string;
  readonly rules: readonly Rule[];
  readonly shape: BurstShape | ClosedShape;
  /** Latency of one vendor call, drawn uniformly (scripts/sim-vendor.ts). */
  readonly vendorLatencyMs: { readonly min: number; readonly max: number };
  /** Added to every chunk between the workers and Redis, each way, drawn uniformly (a TCP proxy). */
  readonly redisDelayMs?: { readonly min: number; readonly max: number };
  /** The vendor-throttle mode its docs recommend for this job. */
  readonly recommended: Extract<ContenderId, 'vt-queue' | 'vt-delay'>;
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
      recommended: 'vt-queue',
    },
    {
      id: 'many-users',
      number: 2,
      title: 'Many users',
      rules: [{ limit: 5, windowMs: 1000 }],
      shape: { kind: 'burst', users: quick ? 50 : 100, callsPerUser: quick ? 3 : 4 },
      vendorLatencyMs,
      recommended: 'vt-queue',
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
      recommended: 'vt-queue',
    },
    {
      id: 'jitter',
      number: 4,
      title: 'Network jitter (vendor 20–300 ms, Redis +1–4 ms each way)',
      rules: [{ limit: 10, windowMs: 1000 }],
      shape: { kind: 'burst', users: 10, callsPerUser: quick ? 5 : 10 },
      vendorLatencyMs: { min: 20, max: 300 },
      redisDelayMs: { min: 1, max: 4 },
      recommended: 'vt-queue',
    },
    {
      id: 'unconstrained',
      number: 5,
      title: 'Unconstrained overhead (limit far above the load, no-op calls)',
      rules: [{ limit: 1_000_000, windowMs: 1000 }],
      shape: { kind: 'closed', users: 1000, concurrency: 64, warmMs: quick ? 300 : 1000, measureMs: quick ? 1000 : 3000 },
      vendorLatencyMs,
      recommended: 'vt-delay',
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
    recommended: 'vt-queue',
  };
}
