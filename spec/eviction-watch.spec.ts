/**
 * The store's eviction watch (lib/stores/redis-evictions.ts) on its own, with a fake Redis: when it
 * says Redis evicts, what it keeps, and when it lets go. The real thing runs in spec/evictions.spec.ts.
 */
import { expect } from 'chai';
import { StoreUnavailableError } from '../lib/errors.js';
import type { StoreNotice } from '../lib/store.js';
import { EvictionWatch } from '../lib/stores/redis-evictions.js';
import { useFakeClock } from './support/fake-clock.js';

describe('eviction watch', () => {
  const fake = useFakeClock();

  function watch(policy = 'volatile-ttl') {
    const redis = {
      evicted: 0,
      policy,
      keepCalls: [] as string[],
      refuseOff: false,
      infoDown: undefined as Error | undefined,
      keepDown: undefined as Error | undefined,
    };
    const notices: StoreNotice[] = [];
    const w = new EvictionWatch({
      info: async (section) => {
        if (redis.infoDown && section === 'stats') throw redis.infoDown;
        return section === 'stats' ? `# Stats\r\nevicted_keys:${redis.evicted}\r\n` : `maxmemory_policy:${redis.policy}\r\n`;
      },
      keep: async (namespace, mode) => {
        if (redis.keepDown) throw redis.keepDown;
        redis.keepCalls.push(`${mode} ${namespace}`);
        return mode === 'off' && redis.refuseOff ? -1 : 0;
      },
      namespaces: () => ['acme'],
      notify: (notice) => notices.push(notice),
      quietMs: 1_000,
      recentMs: 150,
    });
    /** One heartbeat: 50 ms later, a check. */
    const beat = async (evicted = 0) => {
      redis.evicted += evicted;
      await fake.clock.tickAsync(50);
      await w.check();
    };
    return { redis, notices, w, beat };
  }

  it('volatile-*: says so and keeps the namespace while the count rises, and lets go quietMs after the last rise', async () => {
    const { redis, notices, w, beat } = watch();
    await beat(); // the first reading: a baseline
    await beat(5);
    expect(notices.map((n) => n.kind)).to.deep.equal(['evicting']);
    expect(notices[0]!.message).to.match(/maxmemory-policy volatile-ttl; evicted_keys 5, 5 since the last check\): the throttle's keys are kept/);
    expect(redis.keepCalls).to.deep.equal(['on acme']);
    expect(w.active).to.equal(true);
    expect(w.failure).to.equal(undefined);
    for (let i = 0; i < 19; i++) await beat(i === 5 ? 1 : 0);
    expect(redis.keepCalls).to.deep.equal(['on acme', 'on acme']);
    for (let i = 0; i < 10; i++) await beat();
    expect(notices.map((n) => n.kind)).to.deep.equal(['evicting', 'evictionsStopped']);
    expect(redis.keepCalls.at(-1)).to.equal('off acme');
    expect(w.active).to.equal(false);
  });

  it('allkeys-*: decisions fail with StoreUnavailableError naming the policy until the evictions stop', async () => {
    const { notices, w, beat } = watch('allkeys-lru');
    await beat();
    await beat(3);
    expect(w.failure).to.be.instanceOf(StoreUnavailableError);
    expect(w.failure!.message).to.match(/maxmemory-policy allkeys-lru.*no decision is trusted/);
    for (let i = 0; i < 21; i++) await beat();
    expect(w.failure).to.equal(undefined);
    expect(notices.map((n) => n.kind)).to.deep.equal(['evicting', 'evictionsStopped']);
  });

  it('a rise across a long gap between readings (an idle heartbeat) is a new baseline, not evictions now', async () => {
    const { notices, w, beat } = watch('allkeys-lru');
    await beat();
    await fake.clock.tickAsync(60_000);
    await beat(40);
    expect(notices).to.deep.equal([]);
    expect(w.failure).to.equal(undefined);
  });

  it('says once that its checks fail (evictionCheckFailed, with the error), whether INFO or keeping the keys fails, and again after a check succeeded', async () => {
    const { redis, notices, beat } = watch();
    await beat();
    const unreachable = new Error('Redis cannot be reached: the client is reconnecting (connect ECONNREFUSED 127.0.0.1:6399)');
    redis.infoDown = unreachable;
    // Each check resolves: the heartbeat and the decisions that run it go on.
    for (let i = 0; i < 3; i++) await beat();
    expect(notices.map((n) => n.kind)).to.deep.equal(['evictionCheckFailed']);
    expect(notices[0]!.error).to.equal(unreachable);
    expect(notices[0]!.message).to.match(/^Cannot check Redis's evictions \(Redis cannot be reached.*\): until a check succeeds/);
    redis.infoDown = undefined;
    await beat();
    // Evictions start, and keeping the namespace fails (the connection closed after INFO answered).
    const closed = new Error('Connection is closed.');
    redis.keepDown = closed;
    await beat(5);
    await beat(5);
    expect(notices.map((n) => n.kind)).to.deep.equal(['evictionCheckFailed', 'evicting', 'evictionCheckFailed']);
    expect(notices[2]!.error).to.equal(closed);
  });

  it('lets a namespace go only quietMs after its first reading, and never while another process saw evictions lately', async () => {
    const { redis, beat } = watch();
    await beat();
    for (let i = 0; i < 18; i++) await beat();
    expect(redis.keepCalls, 'before quietMs from the first reading').to.deep.equal([]);
    redis.refuseOff = true;
    for (let i = 0; i < 4; i++) await beat();
    // Tried once (a namespace left kept by a process that stopped): the script refused, as another
    // process saw evictions lately; it keeps the namespace kept.
    expect(redis.keepCalls).to.deep.equal(['off acme']);
  });
});
