/**
 * The bucketed log (ThrottleOptions.bucketAbove) keeps the promise of the exact one: worker
 * processes sharing one Redis, every rule bucketed, and the vendor sees no window over the limit.
 * The stores' own answers with buckets are in spec/store-contract.spec.ts.
 */
import { expect } from 'chai';
import { MemoryStore, Throttle, ThrottleConfigError, type Rule } from '../lib/index.js';
import { startVendor } from '../scripts/sim-vendor.js';
import { delegatingStore } from './support/delegating-store.js';
import { keyNames } from '../lib/keys.js';
import { redisClient, redisServer, redisStore, uniquePrefix } from './support/hooks.js';
import { spawnWorkers, type WorkerConfig } from './support/worker.js';

describe('bucketed log', function () {
  this.timeout(60_000);

  it('4 processes, every rule bucketed (10/s in 50 buckets of 20 ms): every call once, no window over the limit', async () => {
    const vendor = await startVendor({ limit: 10, windowMs: 1_000, latencyMs: { min: 5, max: 40 } });
    try {
      const prefix = uniquePrefix();
      const configs: WorkerConfig[] = [0, 1, 2, 3].map(() => ({
        redisUrl: redisServer().url,
        vendorUrl: vendor.url,
        prefix,
        rules: ['10/1000ms'],
        keys: ['hot', 'u1'],
        calls: 10,
        bucketAbove: 0,
      }));
      const results = await spawnWorkers(configs, { timeoutMs: 50_000 });
      const stats = vendor.stats();
      console.log(
        `    [bucketed] ${stats.received} calls, dropped ${stats.dropped}, violations ${vendor.violations()}, max in window ${vendor.maxInWindow()}/10`,
      );
      expect(results.flatMap((result) => result.errors)).to.deep.equal([]);
      expect(stats.received).to.equal(80);
      expect(vendor.violations()).to.equal(0);
      expect(stats.dropped).to.equal(0);
    } finally {
      await vendor.close();
    }
  });

  it('RedisStore: a decision sees the calls an earlier decision of the same batch folded into buckets', async () => {
    // 50/min in 50 buckets: a log past 32 entries folds its calls that only the bucketed rule still
    // counts. Two decisions on one key in one batch (another cost: two operations): the first folds.
    const redis = redisClient();
    const prefix = uniquePrefix();
    const store = redisStore(redisClient(), { prefix });
    const rules: Rule[] = [{ limit: 50, windowMs: 60_000, bucketMs: 1_200 }];
    const request = (key: string, cost: number) => ({ namespace: 'acme', key, rules, cost, maxDelayMs: 60_000, maxHoldMs: 10_000, retainMs: 60_000 });
    // The namespace's epoch and mark, made by a first decision elsewhere.
    await store.reserve(request('warm', 1));
    // 41 calls of other processes completed over the last 50 s, and 9 in flight: 50 count now.
    const [seconds, micros] = await redis.time();
    const now = Number(seconds) * 1_000 + Number(micros) / 1_000;
    const { log } = keyNames(prefix, 'acme', 'u');
    const slots: Array<string | number> = [];
    for (let i = 0; i < 41; i++) slots.push(Math.floor(now - 50_000 + i * 1_000), `${i + 1}.other`);
    for (let i = 0; i < 9; i++) slots.push(Math.floor(now + 10_000), `${i + 42}.other`);
    await redis.zadd(log, ...slots);
    await redis.pexpire(log, 120_000);
    const [both, one] = await Promise.all([store.reserve(request('u', 2)), store.reserve(request('u', 1))]);
    // Room comes as the oldest calls leave the window, 10 s from now: nothing starts before.
    expect(both.status).to.equal('booked');
    expect(both.waitMs).to.be.above(9_000);
    expect(one.status).to.equal('booked');
    expect(one.waitMs, 'the second decision counts the folded calls').to.be.above(9_000);
  });

  it('is chosen for limits above bucketAbove (default 48), with windowMs / buckets wide buckets', async () => {
    const memory = new MemoryStore();
    const seen: Array<readonly Rule[]> = [];
    const store = delegatingStore(memory, {
      reserve: (request) => {
        seen.push(request.rules);
        return memory.reserve(request);
      },
    });
    const byDefault = new Throttle({ rules: ['5/s', '48/min', '49/min', '1000/h'], store });
    await byDefault.schedule('u', () => {});
    expect(seen[0]).to.deep.equal([
      { limit: 5, windowMs: 1_000 },
      { limit: 48, windowMs: 60_000 },
      { limit: 49, windowMs: 60_000, bucketMs: 1_200 },
      { limit: 1_000, windowMs: 3_600_000, bucketMs: 72_000 },
    ]);
    const tuned = new Throttle({ rules: ['5/s', '1000/h'], store, bucketAbove: 4, buckets: 60 });
    await tuned.schedule('v', () => {});
    expect(seen[1]).to.deep.equal([
      { limit: 5, windowMs: 1_000, bucketMs: 17 },
      { limit: 1_000, windowMs: 3_600_000, bucketMs: 60_000 },
    ]);
    await Promise.all([byDefault.close(), tuned.close()]);
    expect(() => new Throttle({ rules: ['5/s'], buckets: 1 })).to.throw(ThrottleConfigError, /buckets/);
    expect(() => new Throttle({ rules: ['5/s'], bucketAbove: -1 })).to.throw(ThrottleConfigError, /bucketAbove/);
  });
});
