/**
 * RedisStore on a real Redis Cluster: 3 masters, no replicas, started by this spec alone
 * (spec/support/redis-cluster.ts) and stopped after it. Each Throttle gets its own ioredis `Cluster`
 * client, as separate processes would. The simulated vendor (scripts/sim-vendor.ts) counts arrivals
 * with a silent per-user limit; a slot migration (resharding) runs in the middle of a busy key's run.
 */
import { expect } from 'chai';
import type { ClusterOptions } from 'ioredis';
import { RedisStore, Throttle, ThrottleConfigError, type ThrottleMode } from '../lib/index.js';
import { encodeKey, keyNames } from '../lib/keys.js';
import { startVendor, windowViolations, type Vendor } from '../scripts/sim-vendor.js';
import { uniquePrefix } from './support/hooks.js';
import { startRedisCluster, type ErrorStats, type RedisCluster } from './support/redis-cluster.js';
import type { RuleString } from '../lib/rules.js';

const NAME = 'acme';
const LIMIT = 5;
const WINDOW_MS = 200;
const RULE = `${LIMIT}/${WINDOW_MS}ms`;

describe('RedisStore on a Redis Cluster (3 masters)', function () {
  this.timeout(30_000);
  let cluster: RedisCluster;
  let vendor: Vendor;
  const stores: RedisStore[] = [];
  const throttles: Throttle[] = [];

  before(async function () {
    this.timeout(60_000);
    cluster = await startRedisCluster({ masters: 3 });
  });

  after(async function () {
    this.timeout(20_000);
    await cluster?.stop();
  });

  beforeEach(async () => {
    vendor = await startVendor({ limit: LIMIT, windowMs: WINDOW_MS, latencyMs: { min: 5, max: 40 } });
  });

  afterEach(async () => {
    await Promise.all(throttles.splice(0).map((throttle) => throttle.close()));
    await Promise.all(stores.splice(0).map((store) => store.close()));
    await vendor.close();
  });

  /** A throttle on its own Cluster client (one "process"), sharing `prefix` with the others. */
  function throttleOn(prefix: string, mode: ThrottleMode = 'wait', rules = [RULE], clientOptions: ClusterOptions = {}): Throttle {
    const client = cluster.client(clientOptions);
    const store = new RedisStore(client, { prefix });
    stores.push(store);
    const throttle = new Throttle({ name: NAME, rules: rules as RuleString[], store, mode });
    throttles.push(throttle);
    return throttle;
  }

  /** One call to the vendor for `user`, through the throttle. */
  function call(throttle: Throttle, user: string): Promise<string> {
    return throttle.schedule(user, async () => (await fetch(`${vendor.url}?user=${encodeURIComponent(user)}`)).text());
  }

  function expectKeptAtVendor(user: string, calls: number): void {
    const stats = vendor.stats();
    expect(stats.perUser.get(user)?.length ?? 0, `calls of ${user} received`).to.equal(calls);
    expect(vendor.violations(user), `arrivals of ${user} over ${RULE} in their trailing window`).to.equal(0);
    expect(vendor.maxInWindow(user), `most arrivals of ${user} in one window`).to.be.at.most(LIMIT);
    expect(stats.droppedPerUser.get(user) ?? 0, `calls of ${user} silently dropped`).to.equal(0);
  }

  it(`keeps ${RULE} at the vendor on one busy key, two clients sharing it`, async () => {
    const prefix = uniquePrefix();
    const a = throttleOn(prefix);
    const b = throttleOn(prefix);
    const results = await Promise.all(Array.from({ length: 30 }, (_, i) => call(i % 2 === 0 ? a : b, 'busy')));
    expect(results).to.have.length(30);
    expectKeptAtVendor('busy', 30);
  });

  it('answers every call on many keys, each key in one slot, the keys spread over every master', async () => {
    const prefix = uniquePrefix();
    const throttle = throttleOn(prefix);
    const users = Array.from({ length: 60 }, (_, i) => `user-${i}`);
    await Promise.all(users.flatMap((user) => [call(throttle, user), call(throttle, user)]));
    for (const user of users) expectKeptAtVendor(user, 2);

    // The library ran no KEYS or SCAN on any master (read before this spec's own SCAN below).
    for (const node of cluster.masters) {
      const stats = (await cluster.admin(node).call('INFO', 'commandstats')) as string;
      expect(stats, `commands on master ${node.port}`).not.to.match(/^cmdstat_(scan|keys):/m);
    }
    const admin = cluster.admin(cluster.masters[0]!);
    const holders = new Map<string, Set<number>>();
    for (const user of users) {
      const { log, meta } = keyNames(prefix, NAME, encodeKey(user));
      const slots = await Promise.all([log, meta].map((key) => admin.call('CLUSTER', 'KEYSLOT', key)));
      expect(new Set(slots).size, `slots of ${user}'s keys`).to.equal(1);
    }
    for (const node of cluster.masters) {
      const keys = await scanAll(cluster, node.port, `${prefix}:*`);
      for (const key of keys) {
        const tag = /\{(.+)\}/.exec(key)?.[1];
        if (tag === undefined) {
          expect(key, 'the one key without a user').to.equal(`${prefix}:${NAME}:epoch`);
          continue;
        }
        const user = decodeURIComponent(tag);
        if (!holders.has(user)) holders.set(user, new Set());
        holders.get(user)!.add(node.port);
      }
    }
    expect([...holders.keys()].sort(), 'users with keys in the cluster').to.deep.equal([...users].sort());
    for (const [user, ports] of holders) expect(ports.size, `masters holding ${user}'s keys`).to.equal(1);
    const used = new Set([...holders.values()].flatMap((ports) => [...ports]));
    expect(used.size, 'masters holding some user').to.equal(cluster.masters.length);
  });

  it('moves a busy key’s slot to another master mid-run (ASK, then MOVED): no error, nothing over the limit, every call done', async () => {
    const prefix = uniquePrefix();
    const user = 'hot';
    const a = throttleOn(prefix);
    const b = throttleOn(prefix);
    const { log } = keyNames(prefix, NAME, encodeKey(user));
    // Other keys of the same slot, so that the slot takes a while to move once the busy key's keys have gone.
    const admin = cluster.admin(await cluster.ownerOf(log));
    for (let i = 0; i < 20; i++) await admin.set(`${prefix}:filler:{${encodeKey(user)}}:${i}`, 'x');
    const before = await cluster.errorStats();
    const ownerBefore = await cluster.ownerOf(log);

    const calls = 50;
    const errors: unknown[] = [];
    const run = Promise.all(
      Array.from({ length: calls }, (_, i) =>
        call(i % 2 === 0 ? a : b, user).catch((error: unknown) => {
          errors.push(error);
        }),
      ),
    );
    await new Promise((resolve) => setTimeout(resolve, 600));
    // A user of the same slot with no keys yet: its first call meets the half-moved slot (TRYAGAIN).
    const newcomer = await userInSlotOf(cluster, log, 'newcomer');
    let newcomerCall: Promise<unknown> | undefined;
    const migration = await cluster.migrateSlotOf(log, {
      // The log alone: it exists all along the run, while meta exists only while a call waits (a
      // missing key of a migrating slot is answered with ASK, which the migration cannot move).
      // Meta, if any, moves with the fillers: meanwhile a script that needs both meets TRYAGAIN.
      first: [log],
      batch: 2,
      pauseMs: 25,
      onBatch: (moved) => {
        // Once the busy key's log and a batch of other keys have moved: the slot is half-moved.
        if (moved >= 3 && newcomerCall === undefined) newcomerCall = call(a, newcomer).catch((error: unknown) => errors.push(error));
      },
    });
    expect(newcomerCall, 'the newcomer called while the slot was half-moved').not.to.equal(undefined);
    await Promise.all([run, newcomerCall]);
    const usage = await a.inspect(user);
    const redirections = delta(before, await cluster.errorStats());
    console.log(
      `    slot ${migration.slot} moved ${migration.from.port} → ${migration.to.port}: ${migration.keys} keys in ${migration.batches} ` +
        `MIGRATEs over ${Math.round(migration.durationMs)} ms; replies meanwhile ${JSON.stringify(redirections)}`,
    );

    expect(errors.map(String), 'errors that reached callers').to.deep.equal([]);
    expectKeptAtVendor(user, calls);
    expectKeptAtVendor(newcomer, 1);
    expect((await cluster.ownerOf(log)).port)
      .to.equal(migration.to.port)
      .and.not.equal(ownerBefore.port);
    // The busy key's log (and its meta, if any) and the 20 fillers.
    expect(migration.keys, 'keys moved').to.be.at.least(21);
    expect(redirections.ASK ?? 0, 'ASK replies while the slot was moving').to.be.above(0);
    expect(redirections.MOVED ?? 0, 'MOVED replies once it had moved').to.be.above(0);
    expect(redirections.TRYAGAIN ?? 0, 'TRYAGAIN replies to the newcomer, whose keys were on neither master').to.be.above(0);
    // The busy key's state moved with it: its last calls still counted on the new master.
    expect(usage.rules[0]!.used, 'calls still counting after the run').to.be.within(1, LIMIT);
  });

  it('works through a Cluster client with ioredis auto-pipelining (commands of one tick batched per master)', async () => {
    const prefix = uniquePrefix();
    const throttle = throttleOn(prefix, 'wait', [RULE], { enableAutoPipelining: true });
    const users = Array.from({ length: 30 }, (_, i) => `piped-${i}`);
    await Promise.all(users.flatMap((user) => [call(throttle, user), call(throttle, user)]));
    for (const user of users) expectKeptAtVendor(user, 2);
    const busy = await Promise.all(Array.from({ length: 12 }, () => call(throttle, 'piped-busy')));
    expect(busy).to.have.length(12);
    expectKeptAtVendor('piped-busy', 12);
  });

  it("decides calls of several keys (per user and app-wide) in one slot with hashTag 'name', and refuses them without it", async () => {
    const prefix = uniquePrefix();
    const rules = (key: string): RuleString[] => (key === 'app' ? ['6/200ms'] : [RULE]);
    const throttlesOf = [0, 1].map(() => {
      const store = new RedisStore(cluster.client(), { prefix, hashTag: 'name' });
      stores.push(store);
      const throttle = new Throttle({ name: NAME, rules, store });
      throttles.push(throttle);
      return throttle;
    });
    const users = ['u1', 'u2', 'u3'];
    await Promise.all(
      Array.from({ length: 24 }, (_, i) => {
        const user = users[i % 3]!;
        return throttlesOf[i % 2]!.schedule([user, 'app'], async () => (await fetch(`${vendor.url}?user=${encodeURIComponent(user)}`)).text());
      }),
    );
    for (const user of users) expectKeptAtVendor(user, 8);
    const all = [...vendor.stats().perUser.values()].flat().sort((a, b) => a - b);
    expect(windowViolations(all, 6, 200), 'arrivals over the app-wide 6/200ms').to.equal(0);
    // Every key of the throttle under one hash tag: one slot.
    const names = keyNames(prefix, NAME, encodeKey('u1'), 'name');
    expect(names.log).to.equal(`${prefix}:${NAME}:{${NAME}}:u1:log`);
    // Each user key in a slot of its own: a call of several keys cannot be decided by one script.
    const spread = throttleOn(prefix, 'wait', [RULE]);
    const error = await spread.schedule(['u1', 'u2'], () => 'never').catch((reason: unknown) => reason);
    expect(error)
      .to.be.instanceOf(ThrottleConfigError)
      .with.property('message')
      .match(/hashTag: 'name'/);
  });

  it('shares a vendor pause and inspect() between clients through the cluster', async () => {
    const prefix = uniquePrefix();
    // A window long enough to hold the calls before the pause and the one after it: a call whose
    // start a pause set goes out one slot (1000 / 3 ms) after its end, which the retries keep.
    const rules = ['3/1s'];
    const a = throttleOn(prefix, 'wait', rules);
    const b = throttleOn(prefix, 'wait', rules);
    await a.schedule('acct', () => undefined);
    await a.schedule('acct', () => undefined);
    const usage = await b.inspect('acct');
    expect(usage.rules[0]).to.include({ limit: 3, windowMs: 1000, used: 2 });
    expect(usage.pausedForMs).to.equal(0);

    await a.pause('acct', 250);
    const paused = await b.inspect('acct');
    expect(paused.pausedForMs, 'pause left, ms rounded up').to.be.within(200, 251);
    const askedAt = performance.now();
    const startedAfter = await b.schedule('acct', () => performance.now() - askedAt);
    // Timers may fire up to ~1 ms early and the pause is counted on Redis' clock: a few ms of slack.
    expect(startedAfter, 'ms until the paused key started').to.be.at.least(paused.pausedForMs - 10);
    expect((await a.inspect('acct')).rules[0]!.used).to.equal(3);
  });

  it('a reservation made through one client is claimed through another: behind a call in flight, of two slots, and of two keys under one hash tag', async () => {
    const prefix = uniquePrefix();
    const open = (hashTag: 'key' | 'name'): Throttle => {
      const store = new RedisStore(cluster.client(), { prefix, hashTag });
      stores.push(store);
      const throttle = new Throttle({ name: NAME, rules: ['2/300ms'], store, maxHoldMs: 2_000, reservationGraceMs: 2_000 });
      throttles.push(throttle);
      return throttle;
    };
    const [a, b] = [open('key'), open('key')];
    for (const user of ['u1', 'u2', 'u3']) {
      // Calls in flight: the reservation depends on one, and its claim names that slot's pointer key too.
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      let started = 0;
      const flying = Promise.all([1, 2].map(() => a.schedule(user, () => (started++, gate))));
      while (started < 2) await new Promise((resolve) => setTimeout(resolve, 5));
      const reservation = await a.reserve(user);
      expect(reservation.waitMs, user).to.be.above(0);
      setTimeout(release, 20);
      let startedAt = 0;
      await b.schedule(user, () => (startedAt = Date.now()), { token: reservation.token });
      await flying;
      expect(startedAt, user).to.be.within(reservation.startAt - 5, reservation.claimBy);
      const two = await a.reserve(user, { cost: 2 });
      expect(await b.schedule(user, () => 'two', { token: two.token, cost: 2 })).to.equal('two');
    }
    // Keys of one call share a slot with hashTag 'name'.
    const [c, d] = [open('name'), open('name')];
    const both = await c.reserve(['u4', 'app']);
    expect(await d.schedule(['app', 'u4'], () => 'both', { token: both.token })).to.equal('both');
    expect((await d.inspect('app')).rules[0]!.used).to.equal(1);
  });
});

/** Every key of one master matching `pattern` (SCAN here in the spec; the library never scans). */
async function scanAll(cluster: RedisCluster, port: number, pattern: string): Promise<string[]> {
  const node = cluster.masters.find((master) => master.port === port)!;
  const admin = cluster.admin(node);
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await admin.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    keys.push(...batch);
    cursor = next;
  } while (cursor !== '0');
  return keys;
}

/** The first of `base-0`, `base-1`, … whose keys hash to the slot of `key` (CLUSTER KEYSLOT, 1,000 names a round trip). */
async function userInSlotOf(cluster: RedisCluster, key: string, base: string): Promise<string> {
  const admin = cluster.admin(cluster.masters[0]!);
  const slot = (await admin.call('CLUSTER', 'KEYSLOT', key)) as number;
  for (let from = 0; from < 200_000; from += 1_000) {
    const pipeline = admin.pipeline();
    for (let i = from; i < from + 1_000; i++) pipeline.call('CLUSTER', 'KEYSLOT', `{${encodeKey(`${base}-${i}`)}}`);
    const replies = (await pipeline.exec()) ?? [];
    const index = replies.findIndex(([, value]) => value === slot);
    if (index >= 0) return `${base}-${from + index}`;
  }
  throw new Error(`no ${base}-N in slot ${slot}`);
}

function delta(before: ErrorStats, after: ErrorStats): ErrorStats {
  const out: ErrorStats = {};
  for (const [kind, count] of Object.entries(after)) {
    const grown = count - (before[kind] ?? 0);
    if (grown > 0) out[kind] = grown;
  }
  return out;
}
