/**
 * Redis loses its data mid-run (`kill -9`, then started empty on the same port, as a restart without
 * persistence): the surviving processes find the missing epoch, put back the calls they know they made
 * (their journal), and decide nothing new until every live process has had time to do the same
 * (docs/design.md §6). The vendor must see no window over the limit.
 */
import { expect } from 'chai';
import { Redis } from 'ioredis';
import { Throttle } from '../lib/index.js';
import { startVendor, type Vendor } from '../scripts/sim-vendor.js';
import { startRedis, type RedisServer } from '../scripts/support/redis-server.js';
import { redisStore, uniquePrefix } from './support/hooks.js';
import { spawnWorkers, type WorkerConfig } from './support/worker.js';

const LIMIT = 10;
const WINDOW_MS = 1_000;

describe('Redis loses its data mid-run (kill -9, started again empty)', function () {
  this.timeout(90_000);
  let server: RedisServer | undefined;
  let vendor: Vendor | undefined;

  afterEach(async () => {
    await vendor?.close();
    await server?.stop();
    vendor = undefined;
    server = undefined;
  });

  /** 4 workers at full rate on 3 keys; Redis is killed once the vendor has seen `killAfter` calls. */
  async function run(recovery: false | undefined, killAfter: number) {
    server = await startRedis();
    vendor = await startVendor({ limit: LIMIT, windowMs: WINDOW_MS, latencyMs: { min: 5, max: 40 } });
    const prefix = uniquePrefix();
    const configs: WorkerConfig[] = [0, 1, 2, 3].map(() => ({
      redisUrl: server!.url,
      vendorUrl: vendor!.url,
      prefix,
      rules: [`${LIMIT}/${WINDOW_MS}ms`],
      keys: ['hot', 'u1', 'u2'],
      calls: 15,
      onStoreError: 'wait',
      commandTimeoutMs: 300,
      recovery,
    }));
    const done = spawnWorkers(configs, { timeoutMs: 80_000 });
    const port = server.port;
    // Kill Redis once the run is in full swing, in the middle of windows full of calls.
    while (vendor.stats().received < killAfter) await new Promise((resolve) => setTimeout(resolve, 5));
    process.kill(server.pid, 'SIGKILL');
    await server.stop();
    server = await startRedis({ port });
    const results = await done;
    return { results, stats: vendor.stats(), violations: vendor.violations(), maxInWindow: vendor.maxInWindow() };
  }

  it('4 processes at full rate: every call runs once and no window goes over the limit', async () => {
    const outcome = await run(undefined, 45);
    console.log(
      `    [data loss] ${outcome.stats.received} calls, dropped ${outcome.stats.dropped}, violations ${outcome.violations}, ` +
        `max in window ${outcome.maxInWindow}/${LIMIT}`,
    );
    expect(outcome.results.flatMap((result) => result.errors)).to.deep.equal([]);
    expect(outcome.stats.received).to.equal(4 * 3 * 15);
    expect(outcome.violations).to.equal(0);
    expect(outcome.stats.dropped).to.equal(0);
  });

  it('an idle process finds the loss by its heartbeat and puts back its calls: the window stays full', async () => {
    server = await startRedis();
    const client = new Redis(server.url);
    client.on('error', () => {});
    const store = redisStore(client, { prefix: uniquePrefix(), recovery: { heartbeatMs: 100, graceMs: 400 } });
    const throttle = new Throttle({ name: 'acme', rules: ['3/5s'], store, maxDelayMs: 0 });
    try {
      for (let i = 0; i < 3; i++) await throttle.schedule('u', () => i);
      expect((await throttle.inspect('u')).rules[0]!.used).to.equal(3);
      await client.flushall();
      // The heartbeat finds the loss on its own and puts the 3 calls back.
      await new Promise((resolve) => setTimeout(resolve, 250));
      expect(store.recoveries).to.equal(1);
      expect((await throttle.inspect('u')).rules[0]!.used).to.equal(3);
      // The window is full again: refused, as before the loss.
      const refused = await throttle.schedule('u', () => 'over').catch((error: unknown) => error);
      expect(refused).to.have.property('name', 'RateLimitedError');
    } finally {
      await throttle.close();
      await store.close();
      client.disconnect();
    }
  });

  it('puts back calls it put into Redis for the local fallback (restore), not only the ones Redis decided', async () => {
    server = await startRedis();
    const client = new Redis(server.url);
    client.on('error', () => {});
    const store = redisStore(client, { prefix: uniquePrefix(), recovery: { heartbeatMs: 100, graceMs: 400 } });
    const rules = [{ limit: 3, windowMs: 5_000 }];
    try {
      // Two calls decided in-process while Redis was away, put into it once it was back, and one
      // decided by Redis: all three count in the window.
      await store.restore('acme', 'u', [{ releaseInMs: 0, cost: 2 }], 5_000, 10_000);
      const reserve = { namespace: 'acme', key: 'u', rules, cost: 1, maxDelayMs: 0, holdMs: 100, retainMs: 5_000, defer: false, maxHoldMs: 10_000, settle: [] };
      expect((await store.reserve(reserve)).granted).to.equal(true);
      expect((await store.inspect('acme', 'u', rules)).rules[0]!.used).to.equal(3);
      await client.flushall();
      await new Promise((resolve) => setTimeout(resolve, 250));
      expect(store.recoveries).to.equal(1);
      expect((await store.inspect('acme', 'u', rules)).rules[0]!.used).to.equal(3);
    } finally {
      await store.close();
      client.disconnect();
    }
  });

  it('without recovery, the same loss lets a process decide on an empty log (the reason it exists)', async () => {
    server = await startRedis();
    const client = new Redis(server.url);
    const store = redisStore(client, { prefix: uniquePrefix(), recovery: false });
    const throttle = new Throttle({ name: 'acme', rules: ['3/5s'], store, maxDelayMs: 0 });
    try {
      for (let i = 0; i < 3; i++) await throttle.schedule('u', () => i);
      await client.flushall();
      expect(await throttle.schedule('u', () => 'over')).to.equal('over');
    } finally {
      await throttle.close();
      client.disconnect();
    }
  });
});
