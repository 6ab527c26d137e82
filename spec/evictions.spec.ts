/**
 * Redis evicts the throttle's keys mid-run (scripts/bench/evictions.ts): a Redis shared with a
 * cache gets a `maxmemory` just above its use while the cache keeps writing, for 50 ms (300 ms under
 * allkeys-lru, below) (an episode:
 * a few hundred keys evicted, the throttle's among them; a longer storm evicts them again as they are
 * put back, see docs/benchmarks.md), under
 * `volatile-ttl` (the throttle's keys, all with a short time to live, go first) or `allkeys-lru`.
 * 4 processes send 3 users' calls at twice the limit. Every process that knows calls on an evicted
 * key finds it at its next decision or heartbeat, holds it and puts its calls back: the simulated
 * vendor sees no window over the limit, and every call runs exactly once. The keys are held for the
 * default grace period (3 s): a busy machine (the whole suite) is slow to put calls back.
 */
import { expect } from 'chai';
import { runEvictions, type EvictionRunOptions, type EvictionRunResult } from '../scripts/bench/evictions.js';

describe('Redis evicts keys of the throttle under maxmemory (a cache shares it)', function () {
  this.timeout(60_000);

  async function run(options: EvictionRunOptions): Promise<EvictionRunResult> {
    const result = await runEvictions({ pressureMs: 50, graceMs: 3_000, ...options });
    expect(result.errors, 'calls that failed').to.deep.equal([]);
    expect(result.ranOnce, 'calls that ran exactly once').to.equal(result.scheduled);
    expect(result.evictedKeys, 'keys evicted').to.be.above(0);
    return result;
  }

  // Under allkeys-lru every key touched within the last second looks as old as any other (Redis's
  // LRU clock ticks once a second), so an eviction takes one of the throttle's few keys (a plain key
  // has only its log) by the luck of its samples. On a loaded machine the cache writes few keys in
  // 50 ms, and all their evictions took the cache's own once in a whole-suite run: the episode lasts
  // 300 ms there, enough evictions to reach the throttle's keys.
  for (const [policy, pressureMs] of [
    ['volatile-ttl', 50],
    ['allkeys-lru', 300],
  ] as const) {
    it(`${policy}: evicted keys are found and put back before anything is decided there`, async () => {
      const result = await run({ recovery: true, policy, pressureMs });
      expect(result.keysRestored).to.be.above(0);
      expect(result.overLimit).to.equal(0);
    });
  }

  describe('a Redis that keeps evicting', () => {
    // One user at twice 10/s for 2 s; Redis evicts from 0.5 s on (a cache writing 4 KB every 10 ms).
    const shape: Partial<EvictionRunOptions> = {
      users: 1,
      limit: 10,
      windowMs: 1_000,
      arrivalMs: 2_000,
      evictAtMs: 500,
      cacheValueBytes: 4_000,
      cacheEveryMs: 10,
    };

    it("volatile-ttl for 1.5 s: the throttle's keys are kept out of the policy's reach, every call runs once, none over, and it says so while it happens and when it stops", async () => {
      // The stop is said a quiet period (3 s here) after the last eviction, which may come after the last call.
      const result = await run({ ...shape, recovery: true, policy: 'volatile-ttl', pressureMs: 1_500, awaitStoppedMs: 10_000 });
      expect(result.overLimit).to.equal(0);
      // Meanwhile Redis, full, may refuse a check's write or a liveness stamp's (OOM): said too, as the check or the stamp failing.
      const [refused, said] = partition(result.warnings, (warning) => ['evictionCheckFailed', 'heartbeatFailed', 'stampFailed'].includes(warning.kind));
      for (const warning of refused) expect(warning.message).to.match(/\(OOM command not allowed/);
      const kinds = said.map((warning) => warning.kind);
      expect(kinds).to.deep.equal(['evicting', 'evictionsStopped']);
      expect(result.warnings[0]!.kind).to.equal('evicting');
      expect(result.warnings.at(-1)!.kind).to.equal('evictionsStopped');
      expect(result.warnings[0]!.message).to.match(/maxmemory-policy volatile-ttl; evicted_keys \d+/);
      expect(result.warnings[0]!.message).to.match(/kept without a time to live/);
      expect(result.warnings[0]!.message).to.match(/Fix: /);
    });

    it('allkeys-lru to the end, default configuration: calls fail at once with StoreUnavailableError naming the policy, none over', async () => {
      const result = await runEvictions({ ...shape, recovery: true, defaults: true, policy: 'allkeys-lru' });
      expect(result.overLimit).to.equal(0);
      expect(result.errors.length, 'calls that failed').to.be.above(0);
      // Redis also refuses a write when evicting cannot free enough in time (OOM under any policy).
      for (const error of result.errors)
        expect(error).to.match(/StoreUnavailableError: Redis is (evicting keys under maxmemory \(maxmemory-policy allkeys-lru|out of memory)/);
      expect(result.errors.some((error) => /allkeys-lru/.test(error))).to.equal(true);
      expect(result.ranOnce + result.errors.length).to.equal(result.scheduled);
      expect(result.warnings.map((warning) => warning.kind)).to.include('evicting');
    });

    it('noeviction: Redis refuses writes when full, and calls fail with StoreUnavailableError saying it is out of memory', async () => {
      const result = await runEvictions({ ...shape, recovery: true, defaults: true, policy: 'noeviction' });
      expect(result.overLimit).to.equal(0);
      expect(result.errors.length, 'calls that failed').to.be.above(0);
      for (const error of result.errors) expect(error).to.match(/StoreUnavailableError: Redis is out of memory/);
    });
  });

  it('the same evictions without the journal (recovery: false) let calls over the limit: the fault is real', async () => {
    const result = await run({ recovery: false });
    expect(result.overLimit).to.be.above(0);
  });
});

/** The items for which `test` holds, and the others. */
function partition<T>(items: readonly T[], test: (item: T) => boolean): [T[], T[]] {
  return [items.filter(test), items.filter((item) => !test(item))];
}
