/**
 * Redis loses its data mid-run (`kill -9`, then started empty on the same port, as a restart without
 * persistence): the surviving processes find the missing epoch, put back the calls they know they made
 * (their journal), and decide nothing new until every live process has had time to do the same
 * (docs/design.md §9). The vendor must see no window over the limit.
 */
import { expect } from 'chai';
import { Redis } from 'ioredis';
import { RateLimitedError, Throttle } from '../lib/index.js';
import type { ReserveRequest } from '../lib/store.js';
import { startVendor, type Vendor } from '../scripts/sim-vendor.js';
import { startRedis, type RedisServer } from '../scripts/support/redis-server.js';
import { redisStore, uniquePrefix } from './support/hooks.js';
import { spawnWorkers, type WorkerConfig } from './support/worker.js';

const LIMIT = 10;
const WINDOW_MS = 1_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A client whose restore script calls (vtRestore4) pass through `restore` first: to fail some of
 * them, or slow them down as a distant Redis would. `sent` lists the scripts called, in order.
 */
function hookedClient(url: string, restore: (args: unknown[], send: () => Promise<unknown>) => Promise<unknown>) {
  const raw = new Redis(url);
  raw.on('error', () => {});
  const sent: string[] = [];
  const client = new Proxy(raw, {
    get(target, prop, receiver) {
      const value: unknown = Reflect.get(target, prop, receiver);
      if (typeof prop !== 'string' || !/^vt[A-Z]/.test(prop) || typeof value !== 'function') return value;
      const script = value as (...args: unknown[]) => Promise<unknown>;
      return (...args: unknown[]) => {
        sent.push(prop);
        const send = () => script.apply(receiver, args);
        return prop.startsWith('vtRestore') ? restore(args, send) : send();
      };
    },
  });
  return { raw, client, sent };
}

/** One call of cost 1 on `key`, now or never. */
function reserveNow(key: string, rules: ReserveRequest['rules'], windowMs: number): ReserveRequest {
  return { namespace: 'acme', key, rules, cost: 1, maxDelayMs: 0, maxHoldMs: 10_000, retainMs: windowMs };
}

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
  async function run(recovery: false | undefined, killAfter: number, client?: WorkerConfig['client']) {
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
      client,
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

  for (const client of ['ioredis', 'node-redis'] as const) {
    it(`4 processes at full rate on ${client}: every call runs once and no window goes over the limit`, async () => {
      const outcome = await run(undefined, 45, client);
      console.log(
        `    [data loss, ${client}] ${outcome.stats.received} calls, dropped ${outcome.stats.dropped}, violations ${outcome.violations}, ` +
          `max in window ${outcome.maxInWindow}/${LIMIT}`,
      );
      expect(outcome.results.flatMap((result) => result.errors)).to.deep.equal([]);
      expect(outcome.stats.received).to.equal(4 * 3 * 15);
      expect(outcome.violations).to.equal(0);
      expect(outcome.stats.dropped).to.equal(0);
    });
  }

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
      await store.restore('acme', 'u', [{ releaseInMs: 0, cost: 2 }], 5_000);
      const reserve = { namespace: 'acme', key: 'u', rules, cost: 1, maxDelayMs: 0, maxHoldMs: 10_000, retainMs: 5_000 };
      expect((await store.reserve(reserve)).status).to.equal('booked');
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

  it('a put-back that fails is tried again, and every journaled call is back before anything new is decided', async () => {
    server = await startRedis();
    // Process A's restores of k2 fail twice: its first put-back fails as a whole.
    let failuresLeft = 2;
    const a = hookedClient(server.url, (args, send) => {
      if (failuresLeft > 0 && args.some((arg) => String(arg).includes('{k2}'))) {
        failuresLeft -= 1;
        return Promise.reject(new Error('Command timed out'));
      }
      return send();
    });
    const clientB = new Redis(server.url);
    const prefix = uniquePrefix();
    const recovery = { heartbeatMs: 100, graceMs: 400 };
    const storeA = redisStore(a.client, { prefix, recovery });
    const storeB = redisStore(clientB, { prefix, recovery });
    const A = new Throttle({ name: 'acme', rules: ['3/10s'], store: storeA, mode: 'throw' });
    const B = new Throttle({ name: 'acme', rules: ['3/10s'], store: storeB, mode: 'throw' });
    const started: Record<string, number> = { k1: 0, k2: 0, k3: 0 };
    const run = async (throttle: Throttle, key: string, n: number) => {
      const outcomes = await Promise.allSettled(Array.from({ length: n }, () => throttle.schedule(key, () => void started[key]!++)));
      return outcomes.map((outcome) =>
        outcome.status === 'fulfilled' ? 'ok' : outcome.reason instanceof RateLimitedError ? 'refused' : (outcome.reason as Error).name,
      );
    };
    try {
      for (const key of ['k1', 'k2', 'k3']) expect(await run(A, key, 3)).to.deep.equal(['ok', 'ok', 'ok']);
      await clientB.flushall();
      // A finds the loss; its put-back fails (k2, twice), so this call fails as Redis did.
      const [first] = await run(A, 'k1', 1);
      expect(first).to.be.oneOf(['StoreUnavailableError', 'refused']);
      // A's heartbeat puts the journal back again, within the grace period.
      await sleep(600);
      expect(storeA.recoveries).to.equal(1);
      for (const key of ['k1', 'k2', 'k3']) expect(await clientB.zcard(`${prefix}:acme:{${key}}:log`), key).to.equal(3);
      expect(await run(B, 'k2', 3)).to.deep.equal(['refused', 'refused', 'refused']);
      expect(await run(B, 'k3', 3)).to.deep.equal(['refused', 'refused', 'refused']);
      expect(started).to.deep.equal({ k1: 3, k2: 3, k3: 3 });
    } finally {
      await A.close();
      await B.close();
      a.raw.disconnect();
      clientB.disconnect();
    }
  });

  it("a process's own operations wait for its put-back: nothing of the namespace is sent, or read, before it is done", async () => {
    server = await startRedis();
    // Each restore takes 600 ms (a slow Redis), longer than the grace period.
    let restoring = 0;
    let restoresDone = 0;
    const a = hookedClient(server.url, async (_args, send) => {
      restoring += 1;
      await sleep(600);
      const reply = await send();
      restoring -= 1;
      restoresDone += 1;
      return reply;
    });
    const store = redisStore(a.client, { prefix: uniquePrefix(), recovery: { heartbeatMs: 100, graceMs: 300 } });
    const rules = [{ limit: 3, windowMs: 10_000 }];
    try {
      for (const key of ['k1', 'k2']) {
        for (let i = 0; i < 3; i++) expect((await store.reserve(reserveNow(key, rules, 10_000))).status).to.equal('booked');
      }
      await a.raw.flushall();
      const first = store.reserve(reserveNow('k1', rules, 10_000));
      await sleep(150);
      expect(restoring).to.be.above(0);
      const batchesBefore = a.sent.filter((name) => name.startsWith('vtBatch')).length;
      // Past the original grace period, while the put-back still runs: a decision and a read.
      await sleep(100);
      const second = store.reserve(reserveNow('k2', rules, 10_000));
      const used = store.inspect('acme', 'k2', rules);
      await sleep(20);
      expect(a.sent.filter((name) => name.startsWith('vtBatch')).length, 'batches sent during the put-back').to.equal(batchesBefore);
      expect((await used).rules[0]!.used).to.equal(3);
      expect(restoresDone).to.equal(2);
      const results = await Promise.all([first, second]);
      expect(results.map((result) => result.status)).to.deep.equal(['refused', 'refused']);
      expect(store.recoveries).to.equal(1);
    } finally {
      await store.close();
      a.raw.disconnect();
    }
  });

  it("a put-back that outlasts the grace period extends the epoch's ready time: no other process decides before it is done", async () => {
    server = await startRedis();
    let restoresDone = 0;
    const a = hookedClient(server.url, async (_args, send) => {
      await sleep(600);
      const reply = await send();
      restoresDone += 1;
      return reply;
    });
    const clientB = new Redis(server.url);
    const prefix = uniquePrefix();
    const recovery = { heartbeatMs: 100, graceMs: 300 };
    const storeA = redisStore(a.client, { prefix, recovery });
    const storeB = redisStore(clientB, { prefix, recovery });
    const rules = [{ limit: 3, windowMs: 10_000 }];
    try {
      for (let i = 0; i < 3; i++) expect((await storeA.reserve(reserveNow('k', rules, 10_000))).status).to.equal('booked');
      expect((await storeB.reserve(reserveNow('other', rules, 10_000))).status).to.equal('booked');
      await clientB.flushall();
      void storeA.reserve(reserveNow('k', rules, 10_000)).catch(() => undefined);
      await sleep(50);
      let answer = await storeB.reserve(reserveNow('k', rules, 10_000));
      while (answer.ruleIndex === -3) {
        await sleep(10);
        answer = await storeB.reserve(reserveNow('k', rules, 10_000));
      }
      expect(restoresDone, 'restores done when B decided again').to.equal(1);
      expect(answer.status).to.equal('refused');
    } finally {
      await storeA.close();
      await storeB.close();
      a.raw.disconnect();
      clientB.disconnect();
    }
  });

  it('a journal of thousands of keys is put back before the epoch is ready, even over a slow link', async () => {
    server = await startRedis();
    const KEYS = 3_000;
    // 2 ms per restore round trip: one key after the other, 6 s; the grace period is 400 ms.
    const a = hookedClient(server.url, async (_args, send) => {
      await sleep(2);
      return send();
    });
    const clientB = new Redis(server.url);
    const prefix = uniquePrefix();
    const recovery = { heartbeatMs: 100, graceMs: 400 };
    const storeA = redisStore(a.client, { prefix, recovery });
    const storeB = redisStore(clientB, { prefix, recovery });
    const rules = [{ limit: 1, windowMs: 60_000 }];
    try {
      const booked = await Promise.all(Array.from({ length: KEYS }, (_, i) => storeA.reserve(reserveNow(`user${i}`, rules, 60_000))));
      expect(booked.every((result) => result.status === 'booked')).to.equal(true);
      // B is a live process of the namespace too (a new one would create the epoch without a grace).
      expect((await storeB.reserve(reserveNow('other', rules, 60_000))).status).to.equal('booked');
      await clientB.flushall();
      const t0 = Date.now();
      void storeA.reserve(reserveNow('user0', rules, 60_000)).catch(() => undefined);
      // Process B asks for the key A puts back last until it is answered by something else than
      // the epoch's grace (refused with rule index -3): that is when decisions resume.
      const last = `user${KEYS - 1}`;
      let answer = await storeB.reserve(reserveNow(last, rules, 60_000));
      while (answer.ruleIndex === -3) {
        await sleep(10);
        answer = await storeB.reserve(reserveNow(last, rules, 60_000));
      }
      const logs = (await clientB.keys(`${prefix}:acme:*:log`)).length;
      console.log(`    [put-back] ${KEYS} keys; decisions resumed ${Date.now() - t0} ms after the loss, with ${logs} logs back`);
      expect(logs).to.equal(KEYS + 1); // and B's own key
      expect(answer.status).to.equal('refused');
      const others = await Promise.all([0, 1_000, 2_000, KEYS - 2].map((i) => storeB.reserve(reserveNow(`user${i}`, rules, 60_000))));
      expect(others.map((result) => result.status)).to.deep.equal(['refused', 'refused', 'refused', 'refused']);
    } finally {
      await storeA.close();
      await storeB.close();
      a.raw.disconnect();
      clientB.disconnect();
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
