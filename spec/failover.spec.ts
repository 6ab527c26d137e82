/**
 * A standalone Redis replaced by its replica (a Sentinel failover, a managed Redis's), which had
 * not received the latest writes (docs/design.md §9). The namespace's epoch names the Redis that
 * created it: on the promoted replica it names the former master, so the first decision of any
 * process, or the lookup of a new one, finds the failover, and every live process puts back its
 * calls before anything new is decided. No key records a Redis of its own on a standalone Redis.
 */
import { expect } from 'chai';
import { Redis } from 'ioredis';
import { RateLimitedError, ReservationError } from '../lib/errors.js';
import { keyNames } from '../lib/keys.js';
import { parseRule } from '../lib/rules.js';
import type { ReserveRequest } from '../lib/store.js';
import type { RedisStore } from '../lib/stores/redis-store.js';
import { Throttle } from '../lib/throttle.js';
import { startRedis, type RedisServer } from '../scripts/support/redis-server.js';
import { redisClient, redisStore, uniquePrefix } from './support/hooks.js';

// A window far longer than a case takes (its fixed waits alone are over 1 s): the calls booked at its
// start still count when it checks that no sixth is booked.
const RULES = [parseRule('5/20s')];
const NAMESPACE = 'acme';
const RECOVERY = { heartbeatMs: 100, graceMs: 800 };

function request(key: string, maxDelayMs = 10_000): ReserveRequest {
  return { namespace: NAMESPACE, key, rules: RULES, cost: 1, maxDelayMs, maxHoldMs: 10_000, retainMs: 20_000 };
}

/**
 * Books `count` calls of `key` in `store`, each completed at once. A Redis in its first second
 * holds a new namespace briefly (it cannot tell a fresh start from a restart): a deferral is
 * asked again at its time, as a throttle would.
 */
async function book(store: RedisStore, key: string, count: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    let result = await store.reserve(request(key));
    while (result.status === 'deferred' && result.ruleIndex === -3) {
      await new Promise((resolve) => setTimeout(resolve, result.retryMs));
      result = await store.reserve(request(key));
    }
    expect(result.status).to.equal('booked');
    await store.settle(
      NAMESPACE,
      key,
      result.members.map((member) => ({ member, releaseAt: result.now })),
    );
  }
}

/** The client's connection moves to `server`, as a client behind Sentinel or a DNS name follows a failover. */
function follow(client: Redis, server: RedisServer): void {
  client.options.port = server.port;
  client.disconnect(true);
}

/** A primary and its replica, in sync, with a connection to each. */
async function replicated(): Promise<{ primary: RedisServer; replica: RedisServer; admin: Redis; adminReplica: Redis }> {
  const primary = await startRedis();
  const replica = await startRedis();
  const [admin, adminReplica] = [new Redis(primary.url), new Redis(replica.url)];
  // The first sync starts at once, not after Redis's 5 s wait for more replicas.
  await admin.config('SET', 'repl-diskless-sync-delay', '0');
  await adminReplica.replicaof('127.0.0.1', String(primary.port));
  // Synced before the throttle starts: a master changes its replication id when its first
  // replica attaches, which the epoch would take for a failover (held once, needlessly).
  await admin.set('synced', '1');
  expect(await admin.wait(1, 5_000), 'the replica follows').to.equal(1);
  return { primary, replica, admin, adminReplica };
}

/**
 * a reserves on the primary and claims the token there; the replica, about to be promoted, misses
 * the claim (there the reservation waits at its bound, unclaimed). b reaches the promoted replica (a
 * worker that took a job back after a stall) and claims the same token: refused `early` until a,
 * following the failover, has put back its call and its claim (`putBack` counts it), then `used`.
 * `earlierEpoch`: an epoch of an earlier version, which names no Redis, so that each key names the
 * Redis that took its last booking (meta `r`), as on a Cluster.
 */
async function claimAgainAfterFailover({ earlierEpoch, putBack }: { earlierEpoch: boolean; putBack: (store: RedisStore) => number }): Promise<void> {
  const { primary, replica, admin, adminReplica } = await replicated();
  const clients = [new Redis(primary.url), new Redis(replica.url)];
  const prefix = uniquePrefix();
  if (earlierEpoch) await admin.set(`${prefix}:${NAMESPACE}:epoch`, 'earlier:0');
  const stores = clients.map((client) => redisStore(client, { prefix, recovery: RECOVERY }));
  const [a, b] = stores.map((store) => new Throttle({ name: NAMESPACE, rules: ['1/20s'], store }));
  try {
    const reservation = await a!.reserve('u');
    await admin.set('synced', '2');
    expect(await admin.wait(1, 5_000), 'the replica has the reservation').to.equal(1);
    await adminReplica.replicaof('NO', 'ONE');
    const starts: string[] = [];
    await a!.schedule('u', () => starts.push('a, on the token'), { token: reservation.token });
    const claim = (maxDelayMs: number): Promise<unknown> =>
      b!.schedule('u', () => starts.push('b, on the token'), { token: reservation.token, maxDelayMs }).catch((error: unknown) => error);
    expect(await claim(0))
      .to.be.instanceOf(ReservationError)
      .with.property('reason', 'early');
    // a follows the failover, finds it by its heartbeat, and puts back its call and its claim.
    follow(clients[0]!, replica);
    for (const until = Date.now() + 3_000; putBack(stores[0]!) === 0 && Date.now() < until;) await new Promise((resolve) => setTimeout(resolve, 50));
    expect(putBack(stores[0]!), 'a put back its calls').to.equal(1);
    expect(await claim(5_000))
      .to.be.instanceOf(ReservationError)
      .with.property('reason', 'used');
    // The window holds a's call: no other call starts in it.
    const plain = await b!.schedule('u', () => starts.push('b'), { maxDelayMs: 0 }).catch((error: unknown) => error);
    expect(plain).to.be.instanceOf(RateLimitedError);
    expect(starts).to.deep.equal(['a, on the token']);
  } finally {
    await Promise.allSettled([a!.close(), b!.close()]);
    for (const client of [...clients, admin, adminReplica]) client.disconnect();
    await Promise.all([primary.stop(), replica.stop()]);
  }
}

describe('a standalone Redis replaced by a replica that missed writes (a failover)', function () {
  this.timeout(20_000);

  it('is found by the epoch, by processes that hold calls there and those that do not, and nothing goes over the limit', async () => {
    const { primary, replica, admin, adminReplica } = await replicated();
    const clients = [new Redis(primary.url), new Redis(primary.url), new Redis(replica.url)];
    try {
      const prefix = uniquePrefix();
      const [a, b] = [redisStore(clients[0]!, { prefix, recovery: RECOVERY }), redisStore(clients[1]!, { prefix, recovery: RECOVERY })];
      await book(a, 'u', 3);
      await book(b, 'v', 1);
      // WAIT counts the replicas that have this connection's writes: one written after the bookings
      // (the replication stream is in order) makes it wait for theirs too.
      await admin.set('synced', '2');
      expect(await admin.wait(1, 5_000), 'the replica has every write so far').to.equal(1);
      // The replica stops following (it is about to be promoted) and misses a's next 2 calls.
      await adminReplica.replicaof('NO', 'ONE');
      await book(a, 'u', 2);
      const { log, meta } = keyNames(prefix, NAMESPACE, 'u');
      expect(await admin.zcard(log)).to.equal(5);
      expect(await adminReplica.zcard(log)).to.equal(3);

      // The failover: both processes now reach the promoted replica, where u shows 3 calls of 5.
      follow(clients[0]!, replica);
      follow(clients[1]!, replica);
      // b holds nothing on u: its decision finds the epoch of the former master, and waits.
      const first = await b.reserve(request('u', 0));
      expect(first.status).to.equal('refused');
      expect(first.ruleIndex, 'held while processes put back their calls').to.equal(-3);
      // A process started after the failover waits as well.
      const late = redisStore(clients[2]!, { prefix, recovery: RECOVERY });
      expect((await late.reserve(request('u', 0))).ruleIndex).to.equal(-3);
      // a finds it by its heartbeat, deciding nothing, and puts back its 5 calls.
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      expect(a.recoveries).to.equal(1);
      expect(await adminReplica.zcard(log)).to.equal(5);
      // The window holds the 5 calls the vendor saw: no process books a sixth in it.
      for (const store of [b, late]) {
        const after = await store.reserve(request('u', 0));
        expect(after.status).to.equal('refused');
        expect(after.ruleIndex).to.equal(0);
      }
      expect(await adminReplica.hget(meta, 'r'), 'no key records a Redis of its own').to.equal(null);
    } finally {
      for (const client of [...clients, admin, adminReplica]) client.disconnect();
      await Promise.all([primary.stop(), replica.stop()]);
    }
  });

  it('holds a claim until the processes put back their calls, and a token claimed before the failover stays used', async () => {
    // The epoch names the former master: b's claim waits while live processes put back their calls.
    await claimAgainAfterFailover({ earlierEpoch: false, putBack: (store) => store.recoveries });
  });

  it('where the epoch names no Redis (as on a Cluster), holds a claim on a key another Redis booked, and a token claimed before stays used', async () => {
    // The key names the former master (meta `r`): b's claim holds it, and waits.
    await claimAgainAfterFailover({ earlierEpoch: true, putBack: (store) => store.keysRestored });
  });

  it('is found by the heartbeat of a process that decides nothing, alone with its calls on the promoted replica', async () => {
    const { primary, replica, admin, adminReplica } = await replicated();
    const client = new Redis(primary.url);
    try {
      const prefix = uniquePrefix();
      const a = redisStore(client, { prefix, recovery: RECOVERY });
      await book(a, 'u', 3);
      await admin.set('synced', '2');
      expect(await admin.wait(1, 5_000), 'the replica has every write so far').to.equal(1);
      await adminReplica.replicaof('NO', 'ONE');
      await book(a, 'u', 2);
      // The promoted replica holds the namespace's epoch as it was (the same value, written by the
      // former master) and u's first 3 calls. No other process decides there: the epoch stays.
      follow(client, replica);
      // Within a few heartbeats (100 ms each) and the put-back.
      for (const until = Date.now() + 3_000; a.recoveries === 0 && Date.now() < until;) await new Promise((resolve) => setTimeout(resolve, 50));
      expect(a.recoveries, 'the namespace put back').to.equal(1);
      const { log } = keyNames(prefix, NAMESPACE, 'u');
      expect(await adminReplica.zcard(log)).to.equal(5);
    } finally {
      for (const connection of [client, admin, adminReplica]) connection.disconnect();
      await Promise.all([primary.stop(), replica.stop()]);
    }
  });

  it('under an epoch of an earlier version, which names no Redis, each key names the Redis that took its last booking', async () => {
    const prefix = uniquePrefix();
    const admin = redisClient();
    await admin.set(`${prefix}:${NAMESPACE}:epoch`, 'earlier:0');
    const store = redisStore(redisClient(), { prefix, recovery: RECOVERY });
    await book(store, 'u', 1);
    expect(await admin.get(`${prefix}:${NAMESPACE}:epoch`), 'kept until a loss').to.equal('earlier:0');
    expect(await admin.hget(keyNames(prefix, NAMESPACE, 'u').meta, 'r')).to.match(/^[0-9a-f]{40}$/);
  });
});
