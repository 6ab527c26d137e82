/**
 * A worker that dies, or stalls, while it holds slots booked ahead (docs/design.md §5, "A process
 * that dies"), end to end: real processes (spec/support/fault-worker.ts), the run's Redis, a silent
 * vendor counting arrivals per window (scripts/sim-vendor.ts). The rule and maxHoldMs are the issue's
 * (10/s, 10 s): a dead slot that kept counting to its bound would freeze the key for 10 s.
 */
import { expect } from 'chai';
import { startVendor, type Vendor } from '../scripts/sim-vendor.js';
import { startFaultWorker, type FaultWorker, type FaultWorkerConfig, type FaultWorkerDone, type FaultWorkerProgress } from './support/fault-worker.js';
import { redisServer, uniquePrefix } from './support/hooks.js';
import { STAMP_EVERY_MS } from '../lib/stores/redis-liveness.js';

const LIMIT = 10;
const WINDOW_MS = 1000;
const MAX_HOLD_MS = 10_000;
const LATENCY = { min: 5, max: 55 };
const CALLS = 20;

const now = (): number => performance.timeOrigin + performance.now();

function expectNothingOverTheLimit(vendor: Vendor): void {
  const stats = vendor.stats();
  expect(stats.dropped, 'calls silently dropped by the vendor').to.equal(0);
  expect(vendor.violations(), 'arrivals over the limit in their trailing window').to.equal(0);
  expect(vendor.maxInWindow(), 'most arrivals of one user in one window').to.be.at.most(LIMIT);
}

interface Outcome {
  readonly vendor: Vendor;
  readonly victim: FaultWorker;
  readonly survivor: FaultWorkerDone;
  readonly victimDone: FaultWorkerDone | undefined;
  readonly wentAt: number;
  /** The survivor's last start from the release of the calls, over the ideal for the calls the vendor received: `(ceil(received / limit) − 1) · window`. */
  readonly ratio: number;
}

/** Releases a victim and a survivor on one key at once; the victim is killed (or stalls by itself) once it sleeps until slots booked ahead. */
async function run(victimFate: 'killed' | 'stalled'): Promise<Outcome> {
  const vendor = await startVendor({ limit: LIMIT, windowMs: WINDOW_MS, latencyMs: LATENCY });
  const config: FaultWorkerConfig = {
    redisUrl: redisServer().url,
    vendorUrl: vendor.url,
    prefix: uniquePrefix(),
    name: 'vendor',
    rules: [`${LIMIT}/${WINDOW_MS}ms`],
    mode: 'wait',
    maxHoldMs: MAX_HOLD_MS,
    key: 'acct-1',
    calls: CALLS,
  };
  // Killed: it kills itself once a liveness stamp covers the slots it booked ahead (stamps go every
  // STAMP_EVERY_MS: slots asked for after the last one are in none, and count to their bound), the
  // first time it has calls asleep after that. It has twice the calls, so that it still has some to
  // sleep for then, however the two processes share the windows.
  const victim = startFaultWorker(
    victimFate === 'stalled' ? { ...config, stallMs: 1500 } : { ...config, calls: 2 * CALLS, dieAsleepAfterMs: 2 * STAMP_EVERY_MS },
  );
  // Stalled: the survivor has calls left to wait on the key all along (it reaps only where it waits).
  const survivor = startFaultWorker(victimFate === 'stalled' ? { ...config, calls: 2 * CALLS } : config);
  try {
    await Promise.all([victim, survivor].map((worker) => worker.waitFor((message) => message.type === 'ready')));
    const wentAt = now();
    victim.go();
    survivor.go();
    const done = await survivor.waitFor((message): message is FaultWorkerDone => message.type === 'done');
    const victimDone = victimFate === 'stalled' ? await victim.waitFor((message): message is FaultWorkerDone => message.type === 'done') : undefined;
    await Promise.all([victim.exited, survivor.exited]);
    const received = vendor.stats().received;
    const idealMs = (Math.ceil(received / LIMIT) - 1) * WINDOW_MS;
    const ratio = (Math.max(...done.starts) - wentAt) / idealMs;
    const atDeath = victim.messages.filter((message): message is FaultWorkerProgress => message.type === 'progress').at(-1);
    console.log(
      `    [${victimFate}] victim at the end: ${JSON.stringify(atDeath)}; vendor received ${received}; survivor's last start ` +
        `${Math.round(Math.max(...done.starts) - wentAt)} ms after the release, ideal ${idealMs} ms: ${ratio.toFixed(2)}×; ` +
        `violations ${vendor.violations()}, most in a window ${vendor.maxInWindow()}`,
    );
    return { vendor, victim, survivor: done, victimDone, wentAt, ratio };
  } finally {
    for (const { child } of [victim, survivor]) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await vendor.close();
  }
}

describe(`a worker that dies or stalls with slots booked ahead (two processes on one key, ${LIMIT}/${WINDOW_MS}ms, maxHoldMs ${MAX_HOLD_MS})`, () => {
  describe('killed (SIGKILL) while it sleeps until slots booked ahead', () => {
    let outcome: Outcome;
    before(async function () {
      this.timeout(40_000);
      outcome = await run('killed');
    });

    it("lets the survivor finish before the dead worker's slots reach their bounds: the slots it never started are given back, and its place in the waiting list", () => {
      expect(outcome.survivor.errors).to.deep.equal([]);
      expect(outcome.survivor.starts).to.have.length(CALLS);
      const atDeath = outcome.victim.messages.filter((message): message is FaultWorkerProgress => message.type === 'progress').at(-1)!;
      expect(outcome.victim.child.signalCode, 'how the victim ended').to.equal('SIGKILL');
      expect(atDeath.sleeping, 'calls of the victim asleep until their slots at its death').to.be.at.least(1);
      // Slots the victim booked that may have started (their start within a stamp's reach) still
      // count to their bound, and take a share of each window; the others, and its waiting entry,
      // go within about a second. Were none given back, the survivor would wait for their bounds,
      // maxHoldMs after their starts. (How close to the ideal it comes: scripts/bench/dead-worker.ts.)
      expect(Math.max(...outcome.survivor.starts) - outcome.wentAt).to.be.below(MAX_HOLD_MS);
    });

    it('lets no window over the limit reach the vendor', () => {
      expectNothingOverTheLimit(outcome.vendor);
    });
  });

  describe('stalled (its event loop blocked 1.5 s) while it sleeps until slots booked ahead', () => {
    let outcome: Outcome;
    before(async function () {
      this.timeout(40_000);
      outcome = await run('stalled');
    });

    it('starts none of the slots the survivor may have been given meanwhile', () => {
      expect(outcome.victim.messages.some((message) => message.type === 'stalled')).to.equal(true);
      console.log(`    calls of the stalled worker that booked again: ${outcome.victimDone!.debug.filter((message) => message.includes('given back')).length}`);
      expectNothingOverTheLimit(outcome.vendor);
    });

    it('lets both finish every call', () => {
      expect(outcome.victimDone!.errors).to.deep.equal([]);
      expect(outcome.victimDone!.starts).to.have.length(CALLS);
      expect(outcome.survivor.starts).to.have.length(2 * CALLS);
    });
  });
});
