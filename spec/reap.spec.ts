/**
 * A process that dies with slots booked ahead (docs/design.md §5, "A process that dies"): its
 * liveness stamp goes stale, and a process waiting on the key gives back the slots it booked to
 * start after that, while those that may have started count to their bound.
 *
 * Store level, against the run's Redis: a dead process is written by hand (its stamp in the
 * namespace's `alive` hash, its slots in the key's log), and a live `RedisStore` waits on the key.
 * The end-to-end cases, with processes killed and stalled, are in spec/faults.spec.ts.
 */
import { expect } from 'chai';
import { encodeKey, keyNames } from '../lib/keys.js';
import { parseRule } from '../lib/rules.js';
import { Reaper, STALE_MS, STAMP_EVERY_MS, Stamps } from '../lib/stores/redis-liveness.js';
import type { ReserveRequest, StoreNotice } from '../lib/store.js';
import { useFakeClock } from './support/fake-clock.js';
import { redisClient, redisStore, uniquePrefix } from './support/hooks.js';

const MAX_HOLD = 10_000;
const NAME = 'vendor';

function request(key: string, limit: number, maxDelayMs = Infinity): ReserveRequest {
  return { namespace: NAME, key: encodeKey(key), rules: [parseRule(`${limit}/1000ms`)], cost: 1, maxDelayMs, maxHoldMs: MAX_HOLD, retainMs: 1000 };
}

/** The Redis's replication id, which a stamp written by it carries (lib/lua/includes/alive.lua). */
async function replidOf(redis: ReturnType<typeof redisClient>): Promise<string> {
  return /master_replid:(\w+)/.exec(await redis.info('replication'))![1]!;
}

async function until(what: string, check: () => Promise<boolean>, withinMs: number): Promise<void> {
  const end = Date.now() + withinMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`${what}: not within ${withinMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('RedisStore: slots of a dead process', () => {
  it('gives back the slots booked ahead to start after its stamp went stale, and keeps those that may have started', async () => {
    const redis = redisClient();
    const prefix = uniquePrefix();
    const { log } = keyNames(prefix, NAME, encodeKey('acct'));
    const [seconds, micros] = (await redis.time()) as [string | number, string | number];
    const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    // Dead a second ago: it had asked for slots 1 and 2 when it last stamped.
    const stampedAt = now - 1000;
    await redis.hset(`${prefix}:${NAME}:alive`, '.dead', `${stampedAt}:2:${MAX_HOLD}:${await replidOf(redis)}`);
    const mayHaveStarted = stampedAt + STALE_MS - 100;
    const neverStarted = now + 2000;
    await redis.zadd(
      log,
      String(mayHaveStarted + MAX_HOLD),
      '1.dead',
      String(neverStarted + MAX_HOLD),
      '2.dead',
      // Asked for after its last stamp: unknown, kept.
      String(neverStarted + MAX_HOLD),
      '3.dead',
      // A process that wrote no stamp (recovery: false): unknown, kept.
      String(neverStarted + MAX_HOLD),
      '1.nostamp',
    );
    await redis.pexpire(log, 60_000);

    const store = redisStore(redisClient(), { prefix });
    const answer = await store.reserve(request('acct', 3));
    expect(answer.status).to.equal('deferred');
    await until('slot 2.dead given back', async () => (await redis.zscore(log, '2.dead')) === null, 1500);
    expect(await redis.zrange(log, '0', '-1')).to.have.members(['1.dead', '3.dead', '1.nostamp']);
  });

  it('gives back nothing on a stale stamp that another Redis wrote (one rolled back: a failover to a replica that missed writes, a restart)', async () => {
    const redis = redisClient();
    const prefix = uniquePrefix();
    const { log } = keyNames(prefix, NAME, encodeKey('acct'));
    const [seconds] = (await redis.time()) as [string | number];
    const now = Number(seconds) * 1000;
    // The stamp a replica held from before it missed the owner's later ones: stale by its time,
    // written under the Redis it replicated. The owner, alive, went on stamping there.
    const other = (await replidOf(redis)).replace(/^./, (c) => (c === '0' ? '1' : '0'));
    await redis.hset(`${prefix}:${NAME}:alive`, '.rolled', `${now - 1000}:2:${MAX_HOLD}:${other}`);
    await redis.zadd(log, String(now + 2000 + MAX_HOLD), '1.rolled', String(now + 2100 + MAX_HOLD), '2.rolled');
    await redis.pexpire(log, 60_000);
    const store = redisStore(redisClient(), { prefix });
    expect((await store.reserve(request('acct', 2))).status).to.equal('deferred');
    // Two watches of the stamps (WATCH_EVERY_MS 500) and more.
    await new Promise((resolve) => setTimeout(resolve, 1200));
    expect(await redis.zrange(log, '0', '-1')).to.have.members(['1.rolled', '2.rolled']);
    // Written by this Redis, the same stamp is evidence: the slots go.
    await redis.hset(`${prefix}:${NAME}:alive`, '.rolled', `${now - 1000}:2:${MAX_HOLD}:${await replidOf(redis)}`);
    await until('the slots given back', async () => (await redis.zcard(log)) === 0, 1500);
  });

  it('gives back nothing of a process whose stamp is fresh', async () => {
    const redis = redisClient();
    const prefix = uniquePrefix();
    const { log } = keyNames(prefix, NAME, encodeKey('acct'));
    const [seconds] = (await redis.time()) as [string | number];
    const now = Number(seconds) * 1000;
    const alive = `${prefix}:${NAME}:alive`;
    await redis.zadd(log, String(now + 2000 + MAX_HOLD), '1.live', String(now + 2100 + MAX_HOLD), '2.live', String(now + 2200 + MAX_HOLD), '3.live');
    await redis.pexpire(log, 60_000);
    const store = redisStore(redisClient(), { prefix });
    const replid = await replidOf(redis);
    // Stamped every 100 ms for 1.2 s while the store waits on the key.
    for (let i = 0; i < 12; i++) {
      const [s, us] = (await redis.time()) as [string | number, string | number];
      await redis.hset(alive, '.live', `${Number(s) * 1000 + Math.floor(Number(us) / 1000)}:3:${MAX_HOLD}:${replid}`);
      if (i === 0) expect((await store.reserve(request('acct', 3))).status).to.equal('deferred');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(await redis.zcard(log)).to.equal(3);
  });

  it('stamps the namespace while this process holds slots booked ahead, and removes the stamp on close()', async () => {
    const redis = redisClient();
    const prefix = uniquePrefix();
    const alive = `${prefix}:${NAME}:alive`;
    const store = redisStore(redisClient(), { prefix });
    const first = await store.reserve(request('acct', 1));
    expect(first.status).to.equal('booked');
    // Completed at the first decision's reading (rounded up): no later than the next decision's, so
    // known there (a release 1 ms later was still in flight when both fell in one ms).
    await store.settle(NAME, encodeKey('acct'), [{ member: first.members[0]!, releaseAt: first.now }]);
    const ahead = await store.reserve(request('acct', 1));
    expect(ahead.status).to.equal('booked');
    expect(ahead.waitMs).to.be.above(0);
    await until('a stamp', async () => (await redis.hlen(alive)) === 1, 500);
    // Not before its start comes: the stamps must reach it first.
    expect(store.mayStart(NAME, ahead.members, ahead.startAt)).to.equal(false);
    await new Promise((resolve) => setTimeout(resolve, ahead.waitMs));
    expect(store.mayStart(NAME, ahead.members, ahead.startAt)).to.equal(true);
    await store.close();
    expect(await redis.hlen(alive)).to.equal(0);
  });

  it('writes no stamp with recovery: false, and starts its slots without one', async () => {
    const redis = redisClient();
    const prefix = uniquePrefix();
    const store = redisStore(redisClient(), { prefix, recovery: false });
    const first = await store.reserve(request('acct', 1));
    // Completed at the first decision's reading (rounded up): no later than the next decision's, so
    // known there (a release 1 ms later was still in flight when both fell in one ms).
    await store.settle(NAME, encodeKey('acct'), [{ member: first.members[0]!, releaseAt: first.now }]);
    const ahead = await store.reserve(request('acct', 1));
    expect(ahead.waitMs).to.be.above(0);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(await redis.exists(`${prefix}:${NAME}:alive`)).to.equal(0);
    expect(store.mayStart(NAME, ahead.members, ahead.startAt)).to.equal(true);
  });

  it('a process whose stamps stopped (a stalled event loop) starts none of the slots its stamps covered: they may have been given back', async () => {
    // The store's answers to the stamps, by hand: confirmed at 1000, then at 1000 + STALE_MS + 100 (a gap).
    const times = [1000, 1000 + STALE_MS + 100];
    let seq = 5;
    const stamps = new Stamps({ tag: '.me', seq: () => seq, storeNow: () => 1000, aliveKey: () => 'alive', run: async () => times.shift() ?? -1 });
    stamps.holds(NAME, 5000, MAX_HOLD);
    await new Promise((resolve) => setTimeout(resolve, STAMP_EVERY_MS / 2));
    // Slot 5, covered by the stamp at 1000: starts while the stamp is fresh, not past it.
    expect(stamps.mayStart(NAME, [5], 1000 + STALE_MS - 100)).to.equal(true);
    expect(stamps.mayStart(NAME, [5], 1000 + STALE_MS + 50)).to.equal(false);
    // Slot 6, asked for after the latest stamp was sent: in no stamp, no reaper touches it.
    seq = 6;
    expect(stamps.mayStart(NAME, [6], 99_999)).to.equal(true);
    // The next stamp comes after a gap: a reaper may have taken this process for dead meanwhile.
    await new Promise((resolve) => setTimeout(resolve, STAMP_EVERY_MS * 2));
    expect(stamps.mayStart(NAME, [5], 1000 + STALE_MS)).to.equal(false);
    // Slot 6 was first covered by the stamp after the gap: no reaper could take it before.
    expect(stamps.mayStart(NAME, [6], 1000 + STALE_MS)).to.equal(true);
    await stamps.close();
  });

  it("a stamp answered with an earlier time than the last (another Redis's clock, after a failover) is a gap: the slots the stamps before it covered do not start", async () => {
    // Confirmed at 10,000, then at 9,000: a Redis whose clock runs a second behind, where no stamp
    // of this process was written before it.
    const times = [10_000, 9_000];
    let seq = 5;
    const stamps = new Stamps({ tag: '.me', seq: () => seq, storeNow: () => 9_000, aliveKey: () => 'alive', run: async () => times.shift() ?? -1 });
    stamps.holds(NAME, 50_000, MAX_HOLD);
    await new Promise((resolve) => setTimeout(resolve, STAMP_EVERY_MS / 2));
    expect(stamps.mayStart(NAME, [5], 10_000 + STALE_MS - 100)).to.equal(true);
    seq = 6;
    await new Promise((resolve) => setTimeout(resolve, STAMP_EVERY_MS * 1.5));
    // Slot 5 was covered only by the stamp on the other clock: a reaper here may have given it back.
    expect(stamps.mayStart(NAME, [5], 9_000 + 100)).to.equal(false);
    // Slot 6 was first covered by the stamp at 9,000, judged on this clock.
    expect(stamps.mayStart(NAME, [6], 9_000 + STALE_MS - 100)).to.equal(true);
    expect(stamps.mayStart(NAME, [6], 9_000 + STALE_MS + 50)).to.equal(false);
    await stamps.close();
  });
});

describe('liveness timers: a batch that rides while their own work is under way', () => {
  const fake = useFakeClock();
  const later = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

  it('the reaper leaves no timer after close(), so reads nothing more', async () => {
    let reads = 0;
    const reaper = new Reaper({
      tag: '.me',
      cluster: false,
      aliveKey: () => 'alive',
      names: () => ({ log: 'log', meta: 'meta' }),
      channel: () => 'free',
      freed: () => undefined,
      // A read of the stamps answered 300 ms later: none stale.
      run: async (_name, _keys, args) => {
        if (args[0] !== 'read') return 0;
        reads += 1;
        await later(300);
        return [0];
      },
    });
    reaper.waits(NAME, 'k', 10_000);
    await fake.clock.tickAsync(0);
    expect(reads).to.equal(1);
    // A batch rides 260 ms into its own read (past a fifth of a period since it began).
    await fake.clock.tickAsync(260);
    expect(reaper.rides(NAME)).to.equal(true);
    await fake.clock.tickAsync(100);
    reaper.close();
    expect(fake.clock.countTimers()).to.equal(0);
    await fake.clock.tickAsync(2_000);
    expect(reads).to.equal(1);
  });

  it('stamps leave no timer after close(): a ride while a stamp of their own is under way starts no second one', async () => {
    const stamps = new Stamps({
      tag: '.me',
      seq: () => 1,
      storeNow: () => 1_000,
      aliveKey: () => 'alive',
      // A stamp answered 200 ms later; the drop at close at once.
      run: async (_name, _keys, args) => {
        if (args[0] === 'stamp') await later(200);
        return 1_000;
      },
    });
    stamps.holds(NAME, 60_000, MAX_HOLD);
    await fake.clock.tickAsync(0);
    // A batch rides 170 ms into the stamp of its own (past a fifth of a period since it was sent).
    await fake.clock.tickAsync(170);
    expect(stamps.ride(NAME, false)).to.not.equal(undefined);
    await fake.clock.tickAsync(30);
    await stamps.close();
    expect(fake.clock.countTimers()).to.equal(0);
  });
});

describe('RedisStore: failures of the liveness stamps and of the reaper are said (storeWarning)', () => {
  it('says once that its stamp cannot be written (stampFailed), until a stamp succeeds', async () => {
    const redis = redisClient();
    const prefix = uniquePrefix();
    const alive = `${prefix}:${NAME}:alive`;
    const store = redisStore(redisClient(), { prefix });
    const notices: StoreNotice[] = [];
    store.watch((notice) => notices.push(notice));
    const slow = (): ReserveRequest => ({ ...request('acct', 1), rules: [parseRule('1/4000ms')] });
    const first = await store.reserve(slow());
    await store.settle(NAME, encodeKey('acct'), [{ member: first.members[0]!, releaseAt: first.now }]);
    const ahead = await store.reserve(slow());
    expect(ahead.waitMs).to.be.above(2000);
    await until('a stamp', async () => (await redis.hlen(alive)) === 1, 500);
    // The stamps' key taken by a value of another type: every stamp fails (WRONGTYPE).
    await redis.set(alive, 'not a hash');
    await new Promise((resolve) => setTimeout(resolve, STAMP_EVERY_MS * 3));
    // (The heartbeat's batches, which carry stamps, fail too: heartbeatFailed, said on its own.)
    const said = (): string[] => notices.map((notice) => notice.kind).filter((kind) => kind === 'stampFailed');
    expect(said()).to.deep.equal(['stampFailed']);
    const stamp = notices.find((notice) => notice.kind === 'stampFailed')!;
    expect(stamp.message).to.match(/^This process cannot write its liveness stamp to Redis \(.*WRONGTYPE.*\): until a stamp succeeds/);
    expect(stamp.error).to.be.instanceOf(Error);
    // A stamp succeeds: the next failure is a new episode, said again.
    await redis.del(alive);
    await until('a stamp again', async () => (await redis.hlen(alive)) === 1, 1000);
    await redis.set(alive, 'not a hash');
    await new Promise((resolve) => setTimeout(resolve, STAMP_EVERY_MS * 2));
    expect(said()).to.deep.equal(['stampFailed', 'stampFailed']);
    await redis.del(alive);
  });

  it('says once that it cannot read the stamps for the keys it waits on (reapFailed), until a read succeeds', async () => {
    const replies: Array<unknown[] | Error> = [new Error('NOPERM this user has no permissions to access one of the keys'), new Error('NOPERM again'), [1000]];
    const notices: StoreNotice[] = [];
    const reaper = new Reaper({
      tag: '.me',
      cluster: false,
      aliveKey: () => 'alive',
      names: (namespace, key) => keyNames('p', namespace, key),
      channel: () => 'channel',
      run: async () => {
        const reply = replies.shift() ?? new Error('NOPERM once more');
        if (reply instanceof Error) throw reply;
        return reply;
      },
      freed: () => undefined,
      notify: (notice) => notices.push(notice),
    });
    reaper.waits(NAME, encodeKey('acct'), 10_000);
    // Reads every 500 ms: two fail, one succeeds, then they fail again.
    await until('four reads', async () => replies.length === 0 && notices.length === 2, 3000);
    expect(notices.map((notice) => notice.kind)).to.deep.equal(['reapFailed', 'reapFailed']);
    expect(notices[0]!.message).to.match(/^This process cannot read the liveness stamps, or give back the slots of dead processes, in Redis \(NOPERM/);
    expect(notices[0]!.error).to.be.instanceOf(Error);
    reaper.close();
  });
});
