/**
 * Caps on calls in flight (`'3 concurrent'`), end to end: worker processes share one Redis and call
 * a simulated vendor that records, per user, when each call is in service (arrival to response).
 * No user ever has more calls in service than the cap, nor more calls between start and
 * completion at the clients; the cap is used (it is reached), and a rate rule beside it still holds.
 */
import { expect } from 'chai';
import { maxOverlap, startVendor } from '../scripts/sim-vendor.js';
import { redisServer, uniquePrefix } from './support/hooks.js';
import { spawnWorkers, type WorkerResult } from './support/worker.js';

/** Per user: the most calls between their start and their completion at once, over every worker. */
function clientOverlap(results: readonly WorkerResult[]): Map<string, number> {
  const spans = new Map<string, Array<readonly [number, number]>>();
  for (const result of results) {
    result.keys.forEach((key, i) => {
      const start = result.starts[i];
      const end = result.completions[i];
      if (start === null || start === undefined || end === null || end === undefined) return;
      let list = spans.get(key);
      if (!list) spans.set(key, (list = []));
      list.push([start, end]);
    });
  }
  return new Map([...spans].map(([key, list]) => [key, maxOverlap(list)]));
}

describe('caps on calls in flight: 4 processes share one Redis', function () {
  this.timeout(60_000);

  it('never has more than 3 calls of a user in service at the vendor, and reaches 3', async () => {
    const vendor = await startVendor({ limit: 1_000, windowMs: 1_000, latencyMs: { min: 5, max: 55 } });
    try {
      const prefix = uniquePrefix();
      const results = await spawnWorkers(
        [0, 1, 2, 3].map(() => ({
          redisUrl: redisServer().url,
          vendorUrl: vendor.url,
          prefix,
          rules: ['3 concurrent', '1000/s'],
          keys: ['alice', 'bob'],
          calls: 12,
        })),
        { timeoutMs: 50_000 },
      );
      const stats = vendor.stats();
      const overlap = clientOverlap(results);
      console.log(
        `    [concurrent] ${stats.received} calls; most in service at once at the vendor: alice ${vendor.maxConcurrent('alice')}, bob ${vendor.maxConcurrent('bob')}; ` +
          `between start and completion at the clients: alice ${overlap.get('alice')}, bob ${overlap.get('bob')}`,
      );
      expect(results.flatMap((result) => result.errors)).to.deep.equal([]);
      expect(stats.received).to.equal(96);
      for (const user of ['alice', 'bob']) {
        expect(vendor.maxConcurrent(user), `${user} at the vendor`).to.be.at.most(3);
        expect(overlap.get(user), `${user} at the clients`).to.equal(3);
      }
    } finally {
      await vendor.close();
    }
  });

  it('keeps a rate rule beside the cap: 2 in flight and 10 per 500 ms', async () => {
    const vendor = await startVendor({ limit: 10, windowMs: 500, latencyMs: { min: 5, max: 55 } });
    try {
      const prefix = uniquePrefix();
      const results = await spawnWorkers(
        [0, 1, 2].map(() => ({ redisUrl: redisServer().url, vendorUrl: vendor.url, prefix, rules: ['2 concurrent', '10/500ms'], keys: ['carol'], calls: 10 })),
        { timeoutMs: 50_000 },
      );
      const stats = vendor.stats();
      console.log(
        `    [concurrent + rate] ${stats.received} calls, dropped ${stats.dropped}, most in one window ${vendor.maxInWindow()}/10, most in service ${vendor.maxConcurrent()}`,
      );
      expect(results.flatMap((result) => result.errors)).to.deep.equal([]);
      expect(stats.received).to.equal(30);
      expect(stats.dropped).to.equal(0);
      expect(vendor.violations()).to.equal(0);
      expect(vendor.maxConcurrent()).to.be.at.most(2);
      expect(clientOverlap(results).get('carol')).to.be.at.most(2);
    } finally {
      await vendor.close();
    }
  });
});
