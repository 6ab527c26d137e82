/**
 * One key loses its data while the rest of Redis keeps it (docs/design.md §9, "One key loses its
 * data"): evicted under maxmemory, or wiped with its Cluster shard. Every process that knows calls on
 * the key finds it at its next decision there (or its heartbeat), holds the key, and puts back its
 * own calls on that key only, before anything new is decided on it.
 */
import { expect } from 'chai';
import { Redis } from 'ioredis';
import { RateLimitedError, Throttle } from '../lib/index.js';
import { keyNames } from '../lib/keys.js';
import { parseRule } from '../lib/rules.js';
import type { ReserveRequest } from '../lib/store.js';
import type { RedisStore } from '../lib/stores/redis-store.js';
import { startRedis } from '../scripts/support/redis-server.js';
import { redisClient, redisStore, uniquePrefix } from './support/hooks.js';

const RULES = [parseRule('5/2s')];
const NAMESPACE = 'acme';

function request(key: string, maxDelayMs = 10_000): ReserveRequest {
  return { namespace: NAMESPACE, key, rules: RULES, cost: 1, maxDelayMs, maxHoldMs: 10_000, retainMs: 2_000 };
}

describe('data lost under the processes: one key (eviction, a Cluster shard), or a whole Redis a new process finds without an epoch', function () {
  this.timeout(20_000);

  function stores(prefix: string, count: number): RedisStore[] {
    return Array.from({ length: count }, () => redisStore(redisClient(), { prefix, recovery: { heartbeatMs: 100, graceMs: 800 } }));
  }

  /** Books `count` calls of `key` in `store`, each completed at once. */
  async function book(store: RedisStore, key: string, count: number): Promise<void> {
    for (let i = 0; i < count; i++) {
      const result = await store.reserve(request(key));
      expect(result.status).to.equal('booked');
      await store.settle(
        NAMESPACE,
        key,
        result.members.map((member) => ({ member, releaseAt: result.now })),
      );
    }
  }

  it('is held, and every process that knows calls on it puts them back before anything is decided there', async () => {
    const prefix = uniquePrefix();
    const [a, b, c] = stores(prefix, 3);
    await book(a!, 'u1', 3);
    await book(b!, 'u1', 2);
    await book(a!, 'u2', 1);
    const admin = redisClient();
    const u1 = keyNames(prefix, NAMESPACE, 'u1');
    const u2 = keyNames(prefix, NAMESPACE, 'u2');
    expect(await admin.zcard(u1.log)).to.equal(5);
    // Evicted: u1's log is gone, u2's stays.
    await admin.del(u1.log);

    // A decision of a process that knows calls there finds the loss: not made, the key held.
    const first = await a!.reserve(request('u1'));
    expect(first.status).to.equal('deferred');
    expect(first.ruleIndex).to.equal(-3);
    expect(a!.keysRestored).to.equal(1);
    // A process that knows nothing of the key waits too, while the others put their calls back.
    const other = await c!.reserve(request('u1', 0));
    expect(other.status).to.equal('refused');
    expect((await c!.inspect(NAMESPACE, 'u1', RULES)).nextFreeInMs).to.be.within(400, 800);
    // b finds the loss by its heartbeat, deciding nothing, while the key is still held.
    const heldUntil = performance.now() + (await c!.inspect(NAMESPACE, 'u1', RULES)).nextFreeInMs;
    while (b!.keysRestored === 0 && performance.now() < heldUntil) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(b!.keysRestored).to.equal(1);
    expect(await admin.zcard(u1.log)).to.equal(5);
    // Only the lost key was put back: u2 was never touched again.
    expect(await admin.zcard(u2.log)).to.equal(1);
    expect(a!.keysRestored + b!.keysRestored).to.equal(2);

    // Once held no more: the window is full with the calls put back.
    await new Promise((resolve) => setTimeout(resolve, 700));
    const after = await c!.reserve(request('u1', 0));
    expect(after.status).to.equal('refused');
  });

  it('a key nobody holds calls on pays nothing: new, or expired because idle', async () => {
    const prefix = uniquePrefix();
    const [a] = stores(prefix, 1);
    const admin = redisClient();
    const fresh = await a!.reserve(request('new', 0));
    expect(fresh.status).to.equal('booked');
    expect(fresh.waitMs).to.equal(0);
    await a!.settle(
      NAMESPACE,
      'new',
      fresh.members.map((member) => ({ member, releaseAt: fresh.now })),
    );
    // Expired as idle: once its calls no longer count (their bound and history, 200 ms), the
    // journal holds nothing that would call it lost. Its time to live (the history, the bound and a
    // slack of seconds) is cut short to that moment here.
    const idle = keyNames(prefix, NAMESPACE, 'idle');
    const old = await a!.reserve({ ...request('idle', 0), rules: [parseRule('5/100ms')], retainMs: 100, maxHoldMs: 100 });
    await a!.settle(
      NAMESPACE,
      'idle',
      old.members.map((member) => ({ member, releaseAt: old.now })),
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    await admin.pexpire(idle.log, 1);
    await admin.pexpire(idle.meta, 1);
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(await admin.exists(idle.log)).to.equal(0);
    const again = await a!.reserve({ ...request('idle', 0), rules: [parseRule('5/100ms')], retainMs: 100, maxHoldMs: 100 });
    expect(again.status).to.equal('booked');
    expect(a!.keysRestored).to.equal(0);
  });

  it('a slot given back (a call that never started) is no loss', async () => {
    const prefix = uniquePrefix();
    const [a] = stores(prefix, 1);
    const booked = await a!.reserve(request('u'));
    // Given back: the member leaves the log, and the journal.
    await a!.settle(
      NAMESPACE,
      'u',
      booked.members.map((member) => ({ member, releaseAt: null })),
    );
    const next = await a!.reserve(request('u', 0));
    expect(next.status).to.equal('booked');
    expect(a!.keysRestored).to.equal(0);
  });

  it('a brand-new process that finds no epoch on a Redis that lost data waits two heartbeats: the live processes put back first', async () => {
    const server = await startRedis();
    const clients = [new Redis(server.url), new Redis(server.url)];
    try {
      const prefix = uniquePrefix();
      const rules = [parseRule('3/2s')];
      const recovery = { heartbeatMs: 100, graceMs: 800 };
      const a = redisStore(clients[0]!, { prefix, recovery });
      for (let i = 0; i < 3; i++) expect((await a.reserve({ ...request('u'), rules })).status).to.equal('booked');
      await clients[0]!.flushall();
      // Started after the loss, before anyone noticed it: the Redis was flushed since it started, so
      // the epoch it creates is ready two heartbeats later, and `a` finds it within one.
      const late = redisStore(clients[1]!, { prefix, recovery });
      const first = await late.reserve({ ...request('u'), rules });
      expect(first.status).to.equal('deferred');
      expect(first.ruleIndex).to.equal(-3);
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      expect(a.recoveries).to.equal(1);
      // a's 3 calls are back: the window is full for the new process too.
      expect((await late.reserve({ ...request('u', 0), rules })).status).to.equal('refused');
    } finally {
      for (const client of clients) client.disconnect();
      await server.stop();
    }
  });

  describe('a Redis that has just started', () => {
    // Heartbeats of 5 s: the first epoch's sign of a restart (uptime under two heartbeats) lasts 10 s,
    // far longer than these specs take, so that each runs inside it.
    const recovery = { heartbeatMs: 5_000, graceMs: 15_000 };

    it('a process alone on it serves its first calls at once: throw mode refuses only calls over the limit', async () => {
      const server = await startRedis();
      const client = new Redis(server.url);
      const throttle = new Throttle({ name: 'fresh', rules: ['5/s'], mode: 'throw', store: redisStore(client, { recovery }) });
      try {
        const outcomes = await Promise.all(Array.from({ length: 6 }, () => throttle.schedule('u', () => 'ran').catch((error: unknown) => error)));
        expect(outcomes.slice(0, 5)).to.deep.equal(['ran', 'ran', 'ran', 'ran', 'ran']);
        expect(outcomes[5]).to.be.instanceOf(RateLimitedError).and.to.include({ reason: 'rule' });
        expect(await client.info('server')).to.match(/uptime_in_seconds:\d\r?\n/); // still within its first 10 s
      } finally {
        await throttle.close();
        client.disconnect();
        await server.stop();
      }
    });

    it('with another client connected (a process that knew the namespace may be back), the first calls wait for it: reason recovering', async () => {
      const server = await startRedis();
      const other = new Redis(server.url);
      const client = new Redis(server.url);
      const throttle = new Throttle({ name: 'fresh', rules: ['5/s'], mode: 'throw', store: redisStore(client, { recovery }) });
      try {
        await other.ping();
        const error = await throttle.schedule('u', () => 'ran').catch((e: unknown) => e);
        expect(error).to.be.instanceOf(RateLimitedError).and.to.include({ reason: 'recovering' });
        expect((error as Error).message).to.match(/lost data/);
      } finally {
        await throttle.close();
        client.disconnect();
        other.disconnect();
        await server.stop();
      }
    });
  });

  it('a hold ends a grace period after the loss was found, however many processes put their calls back', async () => {
    const prefix = uniquePrefix();
    const all = stores(prefix, 3);
    const rules = [parseRule('100/10s')];
    const long = (maxDelayMs = 10_000): ReserveRequest => ({ ...request('k', maxDelayMs), rules, retainMs: 10_000 });
    for (const store of all) {
      for (let i = 0; i < 3; i++) {
        const booked = await store.reserve(long());
        await store.settle(
          NAMESPACE,
          'k',
          booked.members.map((member) => ({ member, releaseAt: booked.now })),
        );
      }
    }
    await redisClient().del(keyNames(prefix, NAMESPACE, 'k').log);
    const lostAt = performance.now();
    // Every process asks until it books: each finds the loss, or the hold, and puts its calls back;
    // none of those put-backs may keep the key held (the window has room for 91 more).
    const bookedAt = await Promise.all(
      all.map(async (store) => {
        for (;;) {
          const answer = await store.reserve(long(0));
          if (answer.status === 'booked') return performance.now() - lostAt;
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
      }),
    );
    expect(Math.max(...bookedAt)).to.be.below(2 * 800);
    expect(await redisClient().zcard(keyNames(prefix, NAMESPACE, 'k').log)).to.equal(9 + 3);
  });

  it('a bucketed key whose log went while its meta stayed: the calls not yet folded are found missing', async () => {
    const prefix = uniquePrefix();
    const [a] = stores(prefix, 1);
    // An exact 20/1s beside a bucketed 10/60s: calls stay in the log until a fold, which has not come.
    const rules = [parseRule('20/1s'), { limit: 10, windowMs: 60_000, bucketMs: 1_200 }];
    const bucketed = (maxDelayMs = 10_000): ReserveRequest => ({ ...request('b', maxDelayMs), rules, retainMs: 60_000 });
    for (let i = 0; i < 9; i++) {
      const booked = await a!.reserve(bucketed());
      await a!.settle(
        NAMESPACE,
        'b',
        booked.members.map((member) => ({ member, releaseAt: booked.now })),
      );
    }
    const { log } = keyNames(prefix, NAMESPACE, 'b');
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    await redisClient().del(log);
    const next = await a!.reserve(bucketed());
    expect(next.ruleIndex).to.equal(-3);
    expect(a!.keysRestored).to.equal(1);
    expect(await redisClient().zcard(log)).to.equal(9);
  });

  it("an idle process's heartbeat reads the epoch within its checks' batch, with no GET of its own, and still finds it changed", async () => {
    const prefix = uniquePrefix();
    const [a] = stores(prefix, 1);
    await book(a!, 'u1', 1);
    const epochKey = `${prefix}:${NAMESPACE}:epoch`;
    const monitor = await redisClient().monitor();
    try {
      const reads: string[] = [];
      monitor.on('monitor', (_time: string, args: string[], source: string) => {
        if (args[0]?.toLowerCase() === 'get' && args[1] === epochKey) reads.push(source);
      });
      // Beats of 100 ms: each checks u1 (idle) in a batch of checks alone, under the epoch. Three of them.
      const deadline = Date.now() + 5_000;
      while (reads.filter((source) => source === 'lua').length < 3 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
      expect(reads.filter((source) => source === 'lua').length, 'the epoch read inside the checks').to.be.at.least(3);
      expect(
        reads.filter((source) => source !== 'lua'),
        'GETs of its own',
      ).to.deep.equal([]);
      // A changed epoch is found by the next beat all the same: the calls are put back.
      await redisClient().set(epochKey, 'another:0');
      const found = Date.now() + 2_000;
      while (a!.recoveries === 0 && Date.now() < found) await new Promise((resolve) => setTimeout(resolve, 20));
      expect(a!.recoveries).to.equal(1);
    } finally {
      monitor.disconnect();
    }
  });
});
