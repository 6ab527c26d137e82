/**
 * The promise, end to end: several worker processes share one Redis and call a simulated vendor
 * whose per-user limit is silent (scripts/sim-vendor.ts); the vendor must drop nothing, and a batch
 * must take close to the ideal `(ceil(M/N) − 1) · T` (design brief §2, §4b, §7).
 *
 * Real time, real processes (spec/support/worker.ts), real Redis (the run's own, spec/support/hooks.ts).
 * The workers run in the one waiting mode, 'wait' (the default): a slot is booked only once the
 * completions it depends on are known (a decision that depends on a call in flight waits for the
 * store to announce its completion), so it is exact at the vendor by construction and loses about
 * one response time per window. Other settings are the library's defaults (maxHoldMs 10 s).
 * To try other settings without editing: VT_SPEC_MAX_HOLD_MS=2000 npx mocha spec/multi-process.spec.ts
 * The measured numbers are printed with console.log before they are asserted.
 */
import { expect } from 'chai';
import type { ThrottleMode } from '../lib/index.js';
import { startVendor, type VendorStats } from '../scripts/sim-vendor.js';
import { redisServer, uniquePrefix } from './support/hooks.js';
import { spawnWorkers, type WorkerConfig, type WorkerResult } from './support/worker.js';

const LATENCY = { min: 5, max: 55 };
const mode = (process.env.VT_SPEC_MODE || 'wait') as ThrottleMode;
const maxHoldMs = process.env.VT_SPEC_MAX_HOLD_MS ? Number(process.env.VT_SPEC_MAX_HOLD_MS) : undefined;

interface Scenario {
  readonly limit: number;
  readonly windowMs: number;
  /** One worker per entry: its keys, calls per key, clock skew and Redis client library. */
  readonly workers: ReadonlyArray<{ keys: readonly string[]; calls: number; clockSkewMs?: number; client?: WorkerConfig['client'] }>;
  /** Overrides the spec's mode for this scenario. */
  readonly mode?: ThrottleMode;
}

interface Outcome {
  readonly stats: VendorStats;
  readonly results: WorkerResult[];
  readonly scheduled: number;
  /** windowViolations summed over users (every arrival counted). */
  readonly violations: number;
  /** Most arrivals of one user in any window. */
  readonly maxInWindow: number;
  /** Per user: first arrival to last arrival (ms). */
  readonly durations: Map<string, number>;
}

/** Starts a fresh vendor, runs the workers released at once, and reads the vendor's figures. */
async function run(scenario: Scenario): Promise<Outcome> {
  const vendor = await startVendor({ limit: scenario.limit, windowMs: scenario.windowMs, latencyMs: LATENCY });
  try {
    const prefix = uniquePrefix();
    const configs: WorkerConfig[] = scenario.workers.map((worker) => ({
      redisUrl: redisServer().url,
      vendorUrl: vendor.url,
      prefix,
      name: 'vendor',
      rules: [`${scenario.limit}/${scenario.windowMs}ms`],
      keys: worker.keys,
      calls: worker.calls,
      clockSkewMs: worker.clockSkewMs,
      client: worker.client,
      mode: scenario.mode ?? mode,
      maxHoldMs,
    }));
    const results = await spawnWorkers(configs, { timeoutMs: 50_000 });
    const stats = vendor.stats();
    const durations = new Map<string, number>();
    for (const [user, arrivals] of stats.perUser) durations.set(user, arrivals.at(-1)! - arrivals[0]!);
    return {
      stats,
      results,
      scheduled: results.reduce((sum, result) => sum + result.scheduled, 0),
      violations: vendor.violations(),
      maxInWindow: vendor.maxInWindow(),
      durations,
    };
  } finally {
    await vendor.close();
  }
}

/** `(ceil(M/N) − 1) · T`: the shortest time M calls can span under N per T. */
function ideal(calls: number, limit: number, windowMs: number): number {
  return (Math.ceil(calls / limit) - 1) * windowMs;
}

/** Arrivals jitter by up to the latency, so a batch that keeps the limit can span a little less than the ideal. */
function floor(target: number): number {
  return (target - LATENCY.max) / target;
}

function settings(scenarioMode: ThrottleMode = mode): string {
  return `mode ${scenarioMode}, maxHoldMs ${maxHoldMs ?? '10000 (default)'}`;
}

function expectEveryCallRanOnce(outcome: Outcome): void {
  const errors = outcome.results.flatMap((result) => result.errors);
  expect(errors, 'errors in the workers').to.deep.equal([]);
  expect(outcome.stats.received, 'calls received by the vendor').to.equal(outcome.scheduled);
}

function expectNothingDropped(outcome: Outcome, limit: number): void {
  const worst = [...outcome.stats.droppedPerUser].slice(0, 5);
  expect(outcome.stats.dropped, `calls silently dropped by the vendor (worst users: ${JSON.stringify(worst)})`).to.equal(0);
  expect(outcome.violations, 'arrivals over the limit in their trailing window').to.equal(0);
  expect(outcome.maxInWindow, 'most arrivals of one user in one window').to.be.at.most(limit);
}

describe('multi-process: workers sharing one Redis against a silent vendor', function () {
  // Child processes start tsx (~1 s each on 2 cores) before the clock of each scenario starts.
  this.timeout(60_000);

  // As run on ioredis alone, and with two of the processes on node-redis (RESP3, its default): one limit for both.
  for (const { clients, label } of [
    { clients: ['ioredis', 'ioredis', 'ioredis', 'ioredis'], label: '' },
    { clients: ['node-redis', 'ioredis', 'node-redis', 'ioredis'], label: ', two of them on node-redis' },
  ] as const) {
    describe(`a. 4 processes × 100 calls on one key${label}, rule 20/500ms, latency 5–55 ms, released at once`, () => {
      const limit = 20;
      const windowMs = 500;
      const target = ideal(400, limit, windowMs); // 9.5 s
      let outcome: Outcome;
      let duration: number;

      before(async function () {
        this.timeout(60_000);
        outcome = await run({ limit, windowMs, workers: clients.map((client) => ({ keys: ['acct-1'], calls: 100, client })) });
        duration = outcome.durations.get('acct-1') ?? NaN;
        console.log(
          `    [a${label}] ${settings()}: 400 calls, dropped ${outcome.stats.dropped}, violations ${outcome.violations}, ` +
            `max in window ${outcome.maxInWindow}/${limit}, duration ${Math.round(duration)} ms vs ideal ${target} ms ` +
            `(ratio ${(duration / target).toFixed(3)}), maxHoldMs ${outcome.results.map((r) => r.maxHoldMs).join('/')}`,
        );
      });

      it('runs every call exactly once', () => {
        expectEveryCallRanOnce(outcome);
      });

      it('has the vendor drop nothing: no window (a − 500, a] holds more than 20 arrivals', () => {
        expectNothingDropped(outcome, limit);
      });

      // The aim is 10%. Counting each call until its response costs about one response time
      // (30 ± 25 ms) per window, the slowest of 20 parallel chains, and a decision that waits for a
      // completion from another process learns of it by the store's announcement (one round trip).
      // v1 measured 1.093–1.131. The bound leaves room for a loaded CI machine.
      it('spans first to last arrival within 15% of the ideal (ceil(400/20) − 1) · 500 ms = 9.5 s (aim: 10%)', () => {
        expect(duration / target, `duration ${Math.round(duration)} ms / ideal ${target} ms`).to.be.within(floor(target), 1.15);
      });
    });
  }

  describe('b. 100 users × 5 calls in each of 4 processes, rule 3/300ms, released at once', () => {
    const limit = 3;
    const windowMs = 300;
    const users = Array.from({ length: 100 }, (_, i) => `user-${i}`);
    const target = ideal(20, limit, windowMs); // 1.8 s per user
    let outcome: Outcome;

    before(async function () {
      this.timeout(60_000);
      outcome = await run({ limit, windowMs, workers: [0, 1, 2, 3].map(() => ({ keys: users, calls: 5 })) });
      const durations = [...outcome.durations.values()].sort((x, y) => x - y);
      console.log(
        `    [b] ${settings()}: 2000 calls over ${outcome.stats.perUser.size} users, dropped ${outcome.stats.dropped} ` +
          `(users hit ${outcome.stats.droppedPerUser.size}), violations ${outcome.violations}, max in window ${outcome.maxInWindow}/${limit}, ` +
          `per-user duration median ${Math.round(durations[durations.length >> 1]!)} ms / max ${Math.round(durations.at(-1)!)} ms ` +
          `vs ideal ${target} ms (ratio ${(durations.at(-1)! / target).toFixed(3)}), maxHoldMs ${outcome.results.map((r) => r.maxHoldMs).join('/')}`,
      );
    });

    it('runs every call exactly once', () => {
      expectEveryCallRanOnce(outcome);
      expect(outcome.stats.perUser.size).to.equal(100);
    });

    it('has the vendor drop nothing for any user', () => {
      expectNothingDropped(outcome, limit);
    });
  });

  describe('c. clock skew: 2 processes with Date.now shifted by +5 min and −5 min share one key', () => {
    const limit = 20;
    const windowMs = 500;
    const skew = 5 * 60_000;
    const target = ideal(200, limit, windowMs); // 4.5 s
    let outcome: Outcome;
    let duration: number;

    before(async function () {
      this.timeout(60_000);
      outcome = await run({
        limit,
        windowMs,
        workers: [skew, -skew].map((clockSkewMs) => ({ keys: ['acct-skew'], calls: 100, clockSkewMs })),
      });
      duration = outcome.durations.get('acct-skew') ?? NaN;
      console.log(
        `    [c] ${settings()}: skews ${outcome.results.map((r) => r.observedSkewMs).join('/')} ms, 200 calls, ` +
          `dropped ${outcome.stats.dropped}, violations ${outcome.violations}, max in window ${outcome.maxInWindow}/${limit}, ` +
          `duration ${Math.round(duration)} ms vs ideal ${target} ms (ratio ${(duration / target).toFixed(3)})`,
      );
    });

    it('really runs the workers with skewed clocks', () => {
      const observed = outcome.results.map((result) => result.observedSkewMs);
      expect(observed[0]).to.be.closeTo(skew, 5);
      expect(observed[1]).to.be.closeTo(-skew, 5);
    });

    it('runs every call exactly once and the vendor drops nothing', () => {
      expectEveryCallRanOnce(outcome);
      expectNothingDropped(outcome, limit);
    });

    // A skewed clock changes nothing: the ratio is the one of scenario a. With 9 windows instead of
    // 19, the response time each window costs (30 ± 25 ms, the slowest of 20 parallel chains) weighs
    // more: measured 1.099–1.115, against 1.09–1.13 for scenario a.
    it('spans first to last arrival within 18% of the ideal (ceil(200/20) − 1) · 500 ms = 4.5 s', () => {
      expect(duration / target, `duration ${Math.round(duration)} ms / ideal ${target} ms`).to.be.within(floor(target), 1.18);
    });
  });
});
