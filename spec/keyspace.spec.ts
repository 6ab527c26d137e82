/**
 * Nothing left behind: every Redis key a throttle writes per user expires when its namespace goes
 * idle, and after a run and `close()` the keyspace holds nothing of the namespace but its epoch and
 * its mark once its longest window has passed. The epoch and the mark (a few bytes per namespace, not
 * per user) have no time to live on purpose: only a loss removes them, so silence never looks like
 * one (docs/design.md §7, §9).
 * Scans the run's own Redis.
 */
import { expect } from 'chai';
import type { Redis } from 'ioredis';
import { RedisStore, Throttle } from '../lib/index.js';
import { scripts } from '../lib/stores/redis-scripts.js';
import { redisClient, uniquePrefix } from './support/hooks.js';

/** Every key under `prefix`, with its time to live in ms (-1: none). */
async function keysOf(client: Redis, prefix: string): Promise<Map<string, number>> {
  const found = new Map<string, number>();
  let cursor = '0';
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
    cursor = next;
    for (const key of keys) found.set(key, await client.pttl(key));
  } while (cursor !== '0');
  return found;
}

describe('keyspace: nothing left behind', function () {
  this.timeout(20_000);
  const windowMs = 300;
  const recovery = { heartbeatMs: 50, graceMs: 150 };

  /** A run that writes every kind of key: logs, metas with waiting lists, a pause, a call of two keys, an aborted call, the epoch. */
  async function run(client: Redis, prefix: string): Promise<void> {
    const store = new RedisStore(client, { prefix, hashTag: 'name', recovery });
    const throttle = new Throttle({ name: 'acme', rules: ['3/150ms', `5/${windowMs}ms`], store });
    await throttle.pause('paused', 100);
    const aborted = new AbortController();
    const calls = [
      ...Array.from({ length: 12 }, (_, i) => throttle.schedule(`user-${i % 3}`, () => i)),
      throttle.schedule(['user-0', 'app'], () => 'both'),
      throttle.schedule('paused', () => 'after the pause'),
      throttle.schedule('user-1', () => Promise.reject(new Error('vendor failed'))).catch(() => 'failed'),
      throttle.schedule('user-2', () => 'never', { signal: aborted.signal }).catch(() => 'aborted'),
    ];
    aborted.abort();
    await Promise.all(calls);
    await throttle.close();
    await store.close();
  }

  it('leaves every user key with a time to live no longer than the longest window, and the epoch and the mark alone after it', async () => {
    const client = redisClient();
    const prefix = uniquePrefix();
    await run(client, prefix);
    const closedAt = performance.now();
    const left = await keysOf(client, prefix);
    const epoch = `${prefix}:acme:epoch`;
    const mark = `${prefix}:acme:mark`;
    expect(left.get(epoch), 'the epoch never expires').to.equal(-1);
    expect(left.get(mark), 'the mark never expires').to.equal(-1);
    left.delete(epoch);
    left.delete(mark);
    expect(left.size).to.be.above(4);
    for (const [key, ttl] of left) expect(ttl, key).to.be.above(0);
    // The calls' history counts a window after their release.
    const idleMs = windowMs + 100;
    for (const [key, ttl] of left) expect(ttl, key).to.be.at.most(idleMs);
    await new Promise((resolve) => setTimeout(resolve, idleMs - (performance.now() - closedAt)));
    expect([...(await keysOf(client, prefix)).keys()].sort()).to.deep.equal([epoch, mark]);
  });

  it('while Redis evicts (a kept namespace), the same run leaves its keys without a time to live, their lifetimes in the index, which gives them back: nothing left after the window either', async () => {
    const client = redisClient();
    const prefix = uniquePrefix();
    const kept = `${prefix}:acme:kept`;
    // What the store's eviction watch does when Redis starts evicting under a volatile-* policy.
    await client.zadd(kept, '+inf', '');
    // A key whose time passed while kept: the next batch deletes it, as its time to live would have.
    await client.set(`${prefix}:acme:{acme}:gone:log`, 'x');
    await client.zadd(kept, '1', `${prefix}:acme:{acme}:gone:log`);
    await run(client, prefix);
    const left = await keysOf(client, prefix);
    expect(left.has(`${prefix}:acme:{acme}:gone:log`), 'a kept key past its time').to.equal(false);
    const epoch = `${prefix}:acme:epoch`;
    const mark = `${prefix}:acme:mark`;
    const index = new Map<string, number>();
    const entries = await client.zrange(kept, '0', '-1', 'WITHSCORES');
    for (let i = 0; i < entries.length; i += 2) index.set(entries[i]!, Number(entries[i + 1]));
    expect(left.size).to.be.above(5);
    for (const [key, ttl] of left) {
      if (key === epoch || key === mark || key === kept) continue;
      expect(ttl, `${key} has no time to live`).to.equal(-1);
      expect(index.get(key), `${key} in the index`).to.be.a('number');
    }
    // The evictions stop: the index gives every key its time to live back, then goes.
    const store = new RedisStore(client, { prefix, hashTag: 'name', recovery });
    const keep = (client as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>)[scripts.keep.name]!;
    // A process saw evictions just now: nobody lets the namespace go for QUIET ms.
    await keep.call(client, 2, kept, `${kept}:seen`, 'on', 0, 0);
    expect(await keep.call(client, 2, kept, `${kept}:seen`, 'off', 1000, 60_000)).to.equal(-1);
    expect(await client.exists(kept)).to.equal(1);
    expect(await keep.call(client, 2, kept, `${kept}:seen`, 'off', 1000, 0)).to.equal(0);
    await store.close();
    const after = await keysOf(client, prefix);
    expect(after.has(kept), 'the index').to.equal(false);
    after.delete(epoch);
    after.delete(mark);
    for (const [key, ttl] of after) expect(ttl, key).to.be.within(1, windowMs + 100);
    await new Promise((resolve) => setTimeout(resolve, windowMs + 100));
    expect([...(await keysOf(client, prefix)).keys()].sort()).to.deep.equal([epoch, mark]);
  });

  it('keys that had times to live before the namespace was kept lose them at the next batch that opens them, meta included', async () => {
    const client = redisClient();
    const prefix = uniquePrefix();
    const store = new RedisStore(client, { prefix, recovery });
    const throttle = new Throttle({ name: 'acme', rules: ['5/s'], store });
    await throttle.schedule('u', () => undefined);
    const log = `${prefix}:acme:{u}:log`;
    const meta = `${prefix}:acme:{u}:meta`;
    // A meta written before, with its time to live (a pause, a fold, a waiting list).
    await client.hset(meta, 'pause', '1');
    await client.pexpire(meta, 60_000);
    expect(await client.pttl(log)).to.be.above(0);
    expect(await client.pttl(meta)).to.be.above(0);
    await client.zadd(`${prefix}:acme:kept`, '+inf', '');
    await throttle.schedule('u', () => undefined);
    expect([await client.pttl(log), await client.pttl(meta)]).to.deep.equal([-1, -1]);
    expect(await client.zscore(`${prefix}:acme:kept`, meta)).to.be.a('string');
    await throttle.close();
    await store.close();
  });

  it('a namespace left kept (its process stopped while Redis evicted) gets its times to live back from the next process that sees no eviction', async () => {
    const client = redisClient();
    const prefix = uniquePrefix();
    const kept = `${prefix}:acme:kept`;
    const left = `${prefix}:acme:{left}:log`;
    await client.zadd(kept, '+inf', '');
    await client.zadd(left, '1', 'x');
    await client.zadd(kept, String(Date.now() + 60_000), left);
    // Evictions are over once none came for max(20 heartbeats, graceMs): 400 ms here.
    const store = new RedisStore(client, { prefix, recovery: { heartbeatMs: 20, graceMs: 60 } });
    const throttle = new Throttle({ name: 'acme', rules: ['5/s'], store });
    await throttle.schedule('u', () => undefined);
    const ttlWhileKept = await client.pttl(`${prefix}:acme:{u}:log`);
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect(ttlWhileKept, 'kept meanwhile').to.equal(-1);
    expect(await client.exists(kept), 'the index').to.equal(0);
    expect(await client.pttl(left)).to.be.within(55_000, 60_000);
    expect(await client.pttl(`${prefix}:acme:{u}:log`), 'a time to live again').to.be.above(0);
    await throttle.close();
    await store.close();
  });
});
