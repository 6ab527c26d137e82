import { expect } from 'chai';
import fc from 'fast-check';
import { keyNames } from '../lib/keys.js';
import type { Rule } from '../lib/rules.js';
import type { ReserveRequest, ReserveResult, Store } from '../lib/store.js';
import { MemoryStore } from '../lib/stores/memory-store.js';
import { LEARNED } from '../lib/slot-plan.js';
import { Redis as UpstashRedis } from '@upstash/redis';
import { nodeRedisClient, redisClient, redisServer, redisStore, uniquePrefix, type NodeRedisClient } from './support/hooks.js';
import { startUpstashRest, type UpstashRest } from '../scripts/support/upstash-rest.js';
import { maxInWindow } from '../scripts/sim-vendor.js';
import { bookedSlot, claimed, claimPinned, type BookedSlot } from './support/claims.js';
import { ReferenceModel, type ModelDecision, type ModelRequest } from './support/model.js';

/** A store under test, with a way to move its clock (or let real time pass, for Redis). */
interface Subject {
  readonly store: Store;
  readonly namespace: string;
  /** Lets at least `ms` pass on the store's clock. */
  advance(ms: number): Promise<void>;
  /** The store's exact clock, where the test controls it (MemoryStore). */
  readonly clock?: () => number;
  /** Another store on the same data (another process), where there can be one (RedisStore). */
  readonly peer?: () => Store;
}

/** A RedisStore on node-redis clients (`createClient()`), connected before the subject's tests: one for the store, one for its peer. */
function onNodeRedis(RESP: 2 | 3): { name: string; before: () => Promise<void>; make: () => Subject } {
  let clients: NodeRedisClient[] = [];
  return {
    name: `RedisStore on node-redis (RESP${RESP})`,
    before: async () => {
      clients = [await nodeRedisClient({ RESP }), await nodeRedisClient({ RESP })];
    },
    make: () => {
      const prefix = uniquePrefix();
      return {
        store: redisStore(clients[0]!, { prefix }),
        namespace: 'ns',
        advance: (ms) => new Promise((resolve) => setTimeout(resolve, Math.ceil(ms) + 1)),
        peer: () => redisStore(clients[1]!, { prefix }),
      };
    },
  };
}

/** The store on `@upstash/redis`, through a server of Upstash's REST protocol in front of the run's Redis (no pub/sub). */
function onUpstash(): { name: string; before: () => Promise<void>; after: () => Promise<void>; announces: false; make: () => Subject } {
  let rest: UpstashRest | undefined;
  const client = () => new UpstashRedis({ url: rest!.url, token: rest!.token, retry: false });
  return {
    name: 'RedisStore on @upstash/redis (REST)',
    announces: false,
    before: async () => {
      rest = await startUpstashRest(redisServer().url);
    },
    after: async () => {
      await rest?.close();
    },
    make: () => {
      const prefix = uniquePrefix();
      return {
        store: redisStore(client(), { prefix }),
        namespace: 'ns',
        advance: (ms) => new Promise((resolve) => setTimeout(resolve, Math.ceil(ms) + 1)),
        peer: () => redisStore(client(), { prefix }),
      };
    },
  };
}

/** `announces: false`: a store with no pub/sub (Redis over HTTP), whose waiting calls ask again at their bounds. */
const subjects: Array<{ name: string; before?: () => Promise<void>; after?: () => Promise<void>; announces?: false; make: () => Subject }> = [
  {
    name: 'MemoryStore',
    make: () => {
      let clock = 1_000_000;
      return {
        store: new MemoryStore({ now: () => clock }),
        namespace: 'ns',
        advance: async (ms) => {
          clock += ms;
        },
        clock: () => clock,
      };
    },
  },
  {
    name: 'RedisStore',
    make: () => {
      const prefix = uniquePrefix();
      return {
        store: redisStore(redisClient(), { prefix }),
        namespace: 'ns',
        advance: (ms) => new Promise((resolve) => setTimeout(resolve, Math.ceil(ms) + 1)),
        peer: () => redisStore(redisClient(), { prefix }),
      };
    },
  },
  onNodeRedis(2),
  onNodeRedis(3),
  onUpstash(),
];

function request(overrides: Partial<ReserveRequest> & { rules: readonly Rule[] }): ReserveRequest {
  return { namespace: 'ns', key: 'k', cost: 1, maxDelayMs: Infinity, maxHoldMs: 0, retainMs: longest(overrides.rules), ...overrides };
}

function longest(rules: readonly Rule[]): number {
  return Math.max(...rules.map((rule) => rule.windowMs));
}

/** Resolves with the keys announced to `listener`-style callbacks within `ms`. */
function collect(): { readonly seen: string[]; readonly listener: (key: string) => void; settled(ms: number): Promise<string[]> } {
  const seen: string[] = [];
  return {
    seen,
    listener: (key) => seen.push(key),
    settled: (ms) => new Promise((resolve) => setTimeout(() => resolve([...seen]), ms)),
  };
}

for (const { name, before: connect, after: disconnect, announces = true, make } of subjects) {
  describe(`store contract: ${name}`, () => {
    if (connect) before(connect);
    if (disconnect) after(disconnect);

    it('books up to the limit at once, defers while the binding call is in flight, then books one window after its bound', async () => {
      const { store, advance } = make();
      const rules = [{ limit: 3, windowMs: 60_000 }];
      const results: ReserveResult[] = [];
      for (let i = 0; i < 3; i++) results.push(await store.reserve(request({ rules, maxHoldMs: 300 })));
      expect(results.map((r) => r.status)).to.deep.equal(['booked', 'booked', 'booked']);
      expect(results.map((r) => r.waitMs)).to.deep.equal([0, 0, 0]);
      const first = results[0]!;
      // The oldest slot binds, and its call may still be in flight (until start + 300 ms): nothing booked.
      const deferred = await store.reserve(request({ rules, maxHoldMs: 300 }));
      expect(deferred).to.deep.include({ status: 'deferred', members: [] });
      expect(deferred.retryMs).to.be.within(1, 301);
      expect((await store.inspect('ns', 'k', rules)).rules[0]!.used).to.equal(3);
      // Past the bound, the slot's release is known (never settled: its bound).
      await advance(305);
      const fourth = await store.reserve(request({ rules, maxHoldMs: 300 }));
      expect(fourth.status).to.equal('booked');
      expect(fourth.startAt).to.equal(first.startAt + 300 + 60_000);
      expect(fourth.ruleIndex).to.equal(0);
      expect(fourth.waitMs).to.be.within(59_500, 59_996);
      results.push(fourth);
      expect(new Set(results.flatMap((r) => r.members)).size).to.equal(4);
      expect(results.every((r) => r.members.length === 1)).to.equal(true);
    });

    it('caps calls in flight (window 0): a completion frees the slot at once, a call never completed frees it at its bound', async () => {
      const { store, advance, namespace } = make();
      const rules = [{ limit: 2, windowMs: 0 }];
      const first = await store.reserve(request({ rules, maxHoldMs: 300 }));
      const second = await store.reserve(request({ rules, maxHoldMs: 300 }));
      expect([first.status, second.status]).to.deep.equal(['booked', 'booked']);
      expect((await store.inspect(namespace, 'k', rules)).rules[0]!.used).to.equal(2);
      // Both in flight: the next waits for a completion, or refuses at once when it cannot wait.
      const deferred = await store.reserve(request({ rules, maxHoldMs: 300 }));
      expect(deferred).to.deep.include({ status: 'deferred', members: [] });
      expect(deferred.retryMs).to.be.within(1, 301);
      expect((await store.reserve(request({ rules, maxHoldMs: 300, maxDelayMs: 0 }))).status).to.equal('refused');
      // One completes: its slot is free at once.
      await advance(5);
      await store.settle(
        namespace,
        'k',
        first.members.map((member) => ({ member, releaseAt: first.startAt + 5 })),
      );
      await advance(1);
      const third = await store.reserve(request({ rules, maxHoldMs: 300 }));
      expect(third).to.deep.include({ status: 'booked', waitMs: 0 });
      // The second never completes (its process died): it counts until its bound, start + maxHoldMs.
      expect((await store.reserve(request({ rules, maxHoldMs: 300 }))).status).to.equal('deferred');
      await store.settle(
        namespace,
        'k',
        third.members.map((member) => ({ member, releaseAt: third.startAt + 7 })),
      );
      await advance(300);
      const fourth = await store.reserve(request({ rules, maxHoldMs: 300 }));
      expect(fourth).to.deep.include({ status: 'booked', waitMs: 0 });
      const fifth = await store.reserve(request({ rules, maxHoldMs: 300 }));
      expect(fifth).to.deep.include({ status: 'booked', waitMs: 0 });
    });

    it('refuses a slot further than maxDelayMs, books nothing, and says when to retry', async () => {
      const { store } = make();
      const rules = [{ limit: 2, windowMs: 60_000 }];
      const firstAt = performance.now();
      await store.reserve(request({ rules }));
      await store.reserve(request({ rules }));
      const refused = await store.reserve(request({ rules, maxDelayMs: 0 }));
      // The first slot was decided after firstAt, the refusal before now: a window less at most this much.
      const apart = Math.ceil(performance.now() - firstAt);
      expect(refused.status).to.equal('refused');
      expect(refused.members).to.deep.equal([]);
      expect(refused.waitMs).to.be.within(60_000 - apart, 60_001);
      const again = await store.reserve(request({ rules, maxDelayMs: 0 }));
      expect(again.status).to.equal('refused');
      expect(again.startAt).to.equal(refused.startAt);
      // A finite maxDelayMs shorter than the wait refuses too.
      expect((await store.reserve(request({ rules, maxDelayMs: 59_000 }))).status).to.equal('refused');
      const usage = await store.inspect('ns', 'k', rules);
      expect(usage.rules[0]!.used).to.equal(2);
      // One that may wait that long is booked there.
      const booked = await store.reserve(request({ rules, maxDelayMs: 60_002 }));
      expect(booked).to.deep.include({ status: 'booked', startAt: refused.startAt });
    });

    it('refuses a call that cannot wait for a call in flight, with the soonest the slot could be free', async () => {
      const { store } = make();
      const rules = [{ limit: 1, windowMs: 60_000 }];
      await store.reserve(request({ rules, maxHoldMs: 5_000 }));
      // maxDelayMs 0: now or never, and the call in flight could free the slot one window after now at the soonest.
      const refused = await store.reserve(request({ rules, maxHoldMs: 5_000, maxDelayMs: 0 }));
      expect(refused).to.deep.include({ status: 'refused', members: [], retryMs: 0, ruleIndex: 0 });
      expect(refused.waitMs).to.be.within(60_000, 60_001);
      // The same for a wait shorter than that window.
      expect((await store.reserve(request({ rules, maxHoldMs: 5_000, maxDelayMs: 100 }))).status).to.equal('refused');
      // One that may wait that long waits for the completion: deferred, nothing booked.
      const deferred = await store.reserve(request({ rules, maxHoldMs: 5_000, maxDelayMs: 61_000 }));
      expect(deferred).to.deep.include({ status: 'deferred', members: [] });
      expect(deferred.waitMs).to.be.within(60_000, 60_001);
      expect((await store.inspect('ns', 'k', rules)).rules[0]!.used).to.equal(1);
    });

    it('takes a call booked ahead to start at the soonest at its bound - maxHoldMs', async () => {
      const { store } = make();
      const rules = [{ limit: 1, windowMs: 1_000 }];
      const first = await store.reserve(request({ rules }));
      const ahead = await store.reserve(request({ rules }));
      expect(ahead).to.deep.include({ status: 'booked', startAt: first.startAt + 1_000 });
      // The slot booked ahead is in flight (its score after now): its call starts at the soonest at
      // its score, so no slot before one window later.
      const refused = await store.reserve(request({ rules, maxDelayMs: 1_500 }));
      expect(refused).to.deep.include({ status: 'refused', ruleIndex: 0, members: [] });
      expect(refused.waitMs).to.be.within(1_950, 2_001);
      const deferred = await store.reserve(request({ rules, maxDelayMs: 2_100 }));
      expect(deferred).to.deep.include({ status: 'deferred', members: [] });
      expect(deferred.retryMs).to.be.within(950, 1_001);
    });

    it('books cost slots in one step and never splits them', async () => {
      const { store } = make();
      const rules = [{ limit: 5, windowMs: 60_000 }];
      const a = await store.reserve(request({ rules, cost: 3 }));
      const b = await store.reserve(request({ rules, cost: 3, maxDelayMs: 0 }));
      const c = await store.reserve(request({ rules, cost: 2, maxDelayMs: 0 }));
      expect(a.members).to.have.length(3);
      expect(b.status).to.equal('refused');
      expect(b.members).to.deep.equal([]);
      expect(c.status).to.equal('booked');
      expect(c.members).to.have.length(2);
      expect((await store.inspect('ns', 'k', rules)).rules[0]!.used).to.equal(5);
    });

    it('applies the rule that binds last, across several rules', async () => {
      const { store } = make();
      const rules = [
        { limit: 2, windowMs: 1_000 },
        { limit: 3, windowMs: 60_000 },
      ];
      const starts = [];
      for (let i = 0; i < 4; i++) starts.push(await store.reserve(request({ rules })));
      expect(starts.map((s) => s.status)).to.deep.equal(['booked', 'booked', 'booked', 'booked']);
      expect(starts[2]!.ruleIndex).to.equal(0);
      expect(starts[2]!.startAt).to.equal(starts[0]!.startAt + 1_000);
      expect(starts[3]!.ruleIndex).to.equal(1);
      expect(starts[3]!.startAt).to.equal(starts[0]!.startAt + 60_000);
    });

    it('keeps no first-come order: a call that fits now is booked now, before a call booked ahead', async () => {
      const { store } = make();
      const rules = [{ limit: 1, windowMs: 60_000 }];
      const first = await store.reserve(request({ rules }));
      const second = await store.reserve(request({ rules }));
      expect(second.status).to.equal('booked');
      expect(second.startAt).to.equal(first.startAt + 60_000);
      // Two slots in the log, one booked ahead: a looser rule has room at once.
      const small = await store.reserve(request({ rules: [{ limit: 5, windowMs: 60_000 }] }));
      expect(small).to.deep.include({ status: 'booked', waitMs: 0, ruleIndex: -1 });
      expect(small.startAt).to.be.below(second.startAt);
      // A slot booked ahead counts as in flight: a rule it fills defers.
      const tight = await store.reserve(request({ rules: [{ limit: 1, windowMs: 1_000 }] }));
      expect(tight.status).to.equal('deferred');
    });

    it('frees capacity when a completion earlier than the bound is settled', async () => {
      const { store, advance } = make();
      const rules = [{ limit: 1, windowMs: 60_000 }];
      const first = await store.reserve(request({ rules, maxHoldMs: 5_000 }));
      await advance(25);
      // In flight: refused with a whole window, nothing known yet.
      const flying = await store.reserve(request({ rules, maxHoldMs: 5_000, maxDelayMs: 0 }));
      expect(flying.status).to.equal('refused');
      expect(flying.waitMs).to.be.within(60_000, 60_001);
      await store.settle('ns', 'k', [{ member: first.members[0]!, releaseAt: first.startAt + 20 }]);
      const next = await store.reserve(request({ rules, maxHoldMs: 5_000, maxDelayMs: 0 }));
      expect(next).to.deep.include({ status: 'refused', ruleIndex: 0 });
      expect(next.startAt).to.equal(first.startAt + 20 + 60_000);
      // From the store's clock when it decided, 25 ms or more after the first start.
      expect(next.now - first.startAt).to.be.at.least(25);
      expect(next.waitMs).to.be.within(next.startAt - next.now, next.startAt - next.now + 1);
      const booked = await store.reserve(request({ rules, maxHoldMs: 5_000 }));
      expect(booked).to.deep.include({ status: 'booked', startAt: first.startAt + 20 + 60_000 });
    });

    it('never raises a slot above its bound: a completion after it changes nothing', async () => {
      const { store, advance } = make();
      const rules = [{ limit: 1, windowMs: 60_000 }];
      const first = await store.reserve(request({ rules, maxHoldMs: 10 }));
      await store.settle('ns', 'k', [{ member: first.members[0]!, releaseAt: first.startAt + 3_000 }]);
      await advance(15);
      const next = await store.reserve(request({ rules, maxDelayMs: 0 }));
      expect(next.status).to.equal('refused');
      expect(next.startAt).to.equal(first.startAt + 10 + 60_000);
      // A completion can lower it further after an earlier one.
      await store.settle('ns', 'k', [{ member: first.members[0]!, releaseAt: first.startAt + 5 }]);
      await store.settle('ns', 'k', [{ member: first.members[0]!, releaseAt: first.startAt + 8 }]);
      expect((await store.reserve(request({ rules, maxDelayMs: 0 }))).startAt).to.equal(first.startAt + 5 + 60_000);
    });

    it('removes a released slot, so the capacity is free again', async () => {
      const { store } = make();
      const rules = [{ limit: 1, windowMs: 60_000 }];
      const first = await store.reserve(request({ rules, maxHoldMs: 1_000 }));
      await store.settle('ns', 'k', [{ member: first.members[0]!, releaseAt: null }]);
      const next = await store.reserve(request({ rules, maxDelayMs: 0 }));
      expect(next.status).to.equal('booked');
      // Members unknown to the store (another key's, or given back already) change nothing.
      await store.settle('ns', 'k', [
        { member: first.members[0]!, releaseAt: null },
        { member: 'nobody', releaseAt: null },
      ]);
      expect((await store.reserve(request({ rules, maxDelayMs: 0 }))).status).to.equal('refused');
    });

    it('restore adds calls it did not decide, and its next decisions count them', async () => {
      const { store } = make();
      const rules = [{ limit: 3, windowMs: 60_000 }];
      await store.reserve(request({ rules }));
      // Two calls made elsewhere (decided locally while the store was down), completed 1 s ago.
      await store.restore('ns', 'k', [{ releaseInMs: -1_000, cost: 2 }], 60_000);
      expect((await store.inspect('ns', 'k', rules)).rules[0]!.used).to.equal(3);
      const next = await store.reserve(request({ rules, maxDelayMs: 0 }));
      expect(next.status).to.equal('refused');
      // The window frees one window after the oldest slot, a restored one.
      // (Restored 1 s before the restore's own clock reading, rounded up, a little before this
      // decision's; the wait is counted from this decision's reading as is, and rounded up: up to
      // 1 ms more when both fall in one millisecond.)
      expect(next.startAt).to.be.within(next.now - 1_000 + 60_000 - 500, next.now - 1_000 + 60_000);
      expect(next.waitMs).to.be.within(58_500, 59_001);
      // A restored call still in flight (its bound 1 s from now) defers until then.
      await store.restore('ns', 'flying', [{ releaseInMs: 1_000, cost: 3 }], 60_000);
      const deferred = await store.reserve(request({ rules, key: 'flying' }));
      expect(deferred.status).to.equal('deferred');
      expect(deferred.retryMs).to.be.within(500, 1_001);
      // A call that no longer counts anywhere is not put back (one released exactly a window before
      // the clock reading rounded up may still count until that reading's next whole ms: kept).
      await store.restore('ns', 'old', [{ releaseInMs: -60_001, cost: 3 }], 60_000);
      expect((await store.inspect('ns', 'old', rules)).rules[0]!.used).to.equal(0);
      expect((await store.reserve(request({ rules, key: 'old', cost: 3, maxDelayMs: 0 }))).status).to.equal('booked');
    });

    it('keeps keys apart', async () => {
      const { store } = make();
      const rules = [{ limit: 1, windowMs: 60_000 }];
      for (const key of ['a', 'b', '%7B', '{', '']) {
        const result = await store.reserve(request({ rules, key, maxDelayMs: 0 }));
        expect(result.status, key).to.equal('booked');
      }
      for (const key of ['a', 'b', '%7B', '{', '']) {
        expect((await store.reserve(request({ rules, key, maxDelayMs: 0 }))).status, key).to.equal('refused');
      }
    });

    it('reports usage, reset and the next free slot without booking', async () => {
      const { store, advance } = make();
      const rules = [
        { limit: 2, windowMs: 200 },
        { limit: 10, windowMs: 60_000 },
      ];
      expect(await store.inspect('ns', 'k', rules)).to.deep.include({ nextFreeInMs: 0 });
      await store.reserve(request({ rules }));
      await advance(20);
      await store.reserve(request({ rules }));
      const usage = await store.inspect('ns', 'k', rules);
      expect(usage.rules.map((r) => r.used)).to.deep.equal([2, 2]);
      expect(usage.rules[0]!.resetInMs).to.be.within(1, 200);
      expect(usage.nextFreeInMs).to.equal(usage.rules[0]!.resetInMs);
      expect((await store.inspect('ns', 'k', rules)).rules[0]!.used).to.equal(2);
    });

    it('takes a call in flight to end now for inspect, the soonest it can', async () => {
      const { store } = make();
      const rules = [{ limit: 1, windowMs: 1_000 }];
      await store.reserve(request({ rules, maxHoldMs: 30_000 }));
      const usage = await store.inspect('ns', 'k', rules);
      expect(usage.rules[0]!.used).to.equal(1);
      expect(usage.rules[0]!.resetInMs).to.be.within(990, 1_001);
      expect(usage.nextFreeInMs).to.be.within(990, 1_001);
    });

    it('defers a booking that waits for a call still in flight, until its bound or its completion', async () => {
      const { store, advance } = make();
      const rules = [{ limit: 1, windowMs: 60_000 }];
      const first = await store.reserve(request({ rules, maxHoldMs: 5_000 }));
      const deferred = await store.reserve(request({ rules, maxHoldMs: 5_000 }));
      expect(deferred).to.deep.include({ status: 'deferred', members: [] });
      // Ask again when the call's bound is reached (its completion is then known), not in small steps before: 5 s from now.
      expect(deferred.retryMs).to.be.within(4_900, 5_001);
      expect((await store.inspect('ns', 'k', rules)).rules[0]!.used).to.equal(1);
      // The same with a bound that is near.
      const soon = await store.reserve(request({ rules, key: 'soon', maxHoldMs: 45 }));
      expect(soon.status).to.equal('booked');
      const nearly = await store.reserve(request({ rules, key: 'soon', maxHoldMs: 45 }));
      expect(nearly.status).to.equal('deferred');
      // (The bound is the slot's start, the clock reading rounded up, plus the 45 ms: up to 46 ms away.)
      expect(nearly.retryMs).to.be.within(20, 46);
      // A completion lowers the bound, but while it still lies ahead the answer is the same.
      await store.settle('ns', 'k', [{ member: first.members[0]!, releaseAt: first.startAt + 30 }]);
      // (A store reached over HTTP may answer after the completion's time: then booked at once.)
      let booked = await store.reserve(request({ rules, maxHoldMs: 5_000 }));
      if (booked.status === 'deferred') {
        expect(booked.retryMs).to.be.within(1, 31);
        await advance(35);
        booked = await store.reserve(request({ rules, maxHoldMs: 5_000 }));
      }
      expect(booked).to.deep.include({ status: 'booked', startAt: first.startAt + 30 + 60_000, ruleIndex: 0 });
      // The slot just booked lies ahead: the next call defers again, on its bound.
      const next = await store.reserve(request({ rules, maxHoldMs: 5_000 }));
      expect(next.status).to.equal('deferred');
      expect(next.retryMs).to.be.within(60_000 + 4_900, 65_031);
    });

    it('counts a call without a completion until its bound, start + maxHoldMs', async () => {
      const { store, advance } = make();
      // Times long enough for a store reached over HTTP under load: each decision is a round trip.
      const rules = [{ limit: 1, windowMs: 1_000 }];
      const first = await store.reserve(request({ rules, maxHoldMs: 600 }));
      await advance(300);
      const waiting = await store.reserve(request({ rules, maxHoldMs: 600 }));
      expect(waiting.status).to.equal('deferred');
      expect(waiting.retryMs).to.be.within(1, 301);
      await advance(350);
      // Never settled: its bound is its release.
      const second = await store.reserve(request({ rules, maxHoldMs: 600 }));
      expect(second).to.deep.include({ status: 'booked', ruleIndex: 0, startAt: first.startAt + 600 + 1_000 });
      // Once it reports its completion, it counts from that time only.
      await store.settle('ns', 'k', [{ member: first.members[0]!, releaseAt: first.startAt + 5 }]);
      await store.settle('ns', 'k', [{ member: second.members[0]!, releaseAt: null }]);
      const third = await store.reserve(request({ rules, maxHoldMs: 600 }));
      expect(third).to.deep.include({ status: 'booked', ruleIndex: 0, startAt: first.startAt + 5 + 1_000 });
    });

    if (announces) {
      it('announces a settle on a key whose decision was deferred to the process that waits, and to no other namespace', async () => {
        const { store, advance } = make();
        const rules = [{ limit: 1, windowMs: 60_000 }];
        const heard = collect();
        const stop = await store.listen!('ns', heard.listener);
        const other = collect();
        const stopOther = await store.listen!('other-ns', other.listener);
        const first = await store.reserve(request({ rules, key: 'k:1', maxHoldMs: 5_000 }));
        // A settle on a key no decision waits for announces nothing.
        await store.settle('ns', 'k:1', [{ member: first.members[0]!, releaseAt: null }]);
        const again = await store.reserve(request({ rules, key: 'k:1', maxHoldMs: 5_000 }));
        expect(await heard.settled(30)).to.deep.equal([]);
        expect((await store.reserve(request({ rules, key: 'k:1', maxHoldMs: 5_000 }))).status).to.equal('deferred');
        await advance(5);
        await store.settle('ns', 'k:1', [{ member: again.members[0]!, releaseAt: again.startAt + 1 }]);
        expect(await heard.settled(50)).to.deep.equal(['k:1']);
        expect(other.seen).to.deep.equal([]);
        // Once the waiting decision is answered (booked), settles announce nothing more.
        expect((await store.reserve(request({ rules, key: 'k:1', maxDelayMs: Infinity, maxHoldMs: 5_000 }))).status).to.equal('booked');
        await store.settle('ns', 'k:1', [{ member: again.members[0]!, releaseAt: again.startAt }]);
        expect(await heard.settled(30)).to.deep.equal(['k:1']);
        // A listener that stopped hears nothing.
        stop();
        stopOther();
        const third = await store.reserve(request({ rules, key: 'k2', maxHoldMs: 5_000 }));
        expect((await store.reserve(request({ rules, key: 'k2', maxHoldMs: 5_000 }))).status).to.equal('deferred');
        await store.settle('ns', 'k2', [{ member: third.members[0]!, releaseAt: null }]);
        expect(await heard.settled(30)).to.deep.equal(['k:1']);
      });

      it('announces a slot given back (a call that never started) to the process that waits', async () => {
        const { store } = make();
        const rules = [{ limit: 1, windowMs: 60_000 }];
        const heard = collect();
        const stop = await store.listen!('ns', heard.listener);
        const first = await store.reserve(request({ rules, key: 'given', maxHoldMs: 5_000 }));
        expect((await store.reserve(request({ rules, key: 'given', maxHoldMs: 5_000 }))).status).to.equal('deferred');
        await store.settle('ns', 'given', [{ member: first.members[0]!, releaseAt: null }]);
        expect(await heard.settled(50)).to.deep.equal(['given']);
        stop();
      });
    } else {
      it('announces nothing (no pub/sub): a decision deferred on a call in flight is asked again by its bound, the end of that call at the latest', async () => {
        const { store } = make();
        const rules = [{ limit: 1, windowMs: 60_000 }];
        const heard = collect();
        const stop = await store.listen!('ns', heard.listener);
        const first = await store.reserve(request({ rules, key: 'k', maxHoldMs: 400 }));
        const deferred = await store.reserve(request({ rules, key: 'k', maxHoldMs: 400 }));
        expect(deferred.status).to.equal('deferred');
        expect(deferred.retryMs).to.be.within(1, 400);
        await store.settle('ns', 'k', [{ member: first.members[0]!, releaseAt: null }]);
        expect(await heard.settled(50)).to.deep.equal([]);
        expect((await store.reserve(request({ rules, key: 'k', maxHoldMs: 400 }))).status).to.equal('booked');
        stop();
      });
    }

    it('orders slots with equal scores by member bytes, as a Redis sorted set does', async () => {
      const { store, advance } = make();
      const rules = [{ limit: 1, windowMs: 1_000 }];
      // Slot numbers 1 to 8 taken and given back: the pairs below are 9 and 10 ('10' sorts before '9'), then 11 and 12.
      const gone = await store.reserve(request({ rules: [{ limit: 8, windowMs: 1_000 }], key: 'gone', cost: 8 }));
      await store.settle(
        'ns',
        'gone',
        gone.members.map((member) => ({ member, releaseAt: null })),
      );
      for (const [key, kept] of [
        ['ten', 0],
        ['nine', 1],
        ['eleven', 0],
        ['twelve', 1],
      ] as const) {
        const pair = await store.reserve(request({ rules: [{ limit: 2, windowMs: 1_000 }], key, cost: 2, maxHoldMs: 100 }));
        if (key === 'ten') expect(pair.members.map((member) => Number.parseInt(member, 10))).to.deep.equal([9, 10]);
        // Equal scores: one slot completes early, the other is given back. The store must change
        // the slots it was asked to, whatever their order.
        await advance(5);
        await store.settle('ns', key, [{ member: pair.members[kept]!, releaseAt: pair.startAt + 1 }]);
        await store.settle('ns', key, [{ member: pair.members[1 - kept]!, releaseAt: null }]);
        const head = await store.reserve(request({ rules, key, maxHoldMs: 100 }));
        expect(head, key).to.deep.include({ status: 'booked', startAt: pair.startAt + 1 + 1_000 });
      }
    });

    it('books a call whose cost is a large limit (5,000 slots) in one decision', async () => {
      const { store } = make();
      const rules = [{ limit: 5_000, windowMs: 60_000 }];
      const big = await store.reserve(request({ rules, cost: 5_000 }));
      expect(big.status).to.equal('booked');
      expect(new Set(big.members).size).to.equal(5_000);
      expect((await store.inspect('ns', 'k', rules)).rules[0]!.used).to.equal(5_000);
      expect((await store.reserve(request({ rules, maxDelayMs: 0 }))).status).to.equal('refused');
    });

    it('counts every slot of a long log exactly while trimming what no longer counts', async () => {
      const { store, advance } = make();
      const rules = [{ limit: 5, windowMs: 50 }];
      // Far more entries than the trimming threshold (2 × 5 + 32), spread over several windows.
      const starts: number[] = [];
      for (let round = 0; round < 12; round++) {
        for (let i = 0; i < 5; i++) {
          const booked = await store.reserve(request({ rules, maxDelayMs: 0 }));
          expect(booked.status, `round ${round} call ${i}`).to.equal('booked');
          starts.push(booked.startAt);
        }
        // Refused while the round's first slot still counts (the store decides the sixth call within
        // 50 ms of it, unless the machine is too slow for that: then it may book it, in a new window).
        const sixth = await store.reserve(request({ rules, maxDelayMs: 0 }));
        if (sixth.now < starts[starts.length - 5]! + 50) expect(sixth.status).to.equal('refused');
        if (sixth.status === 'booked') starts.push(sixth.startAt);
        await advance(51);
      }
      expect(maxInWindow(starts, 50)).to.equal(5);
    });

    it('a bucketed rule never lets a call through early and holds it back by less than one bucket', async () => {
      const { store, advance } = make();
      const exact = [{ limit: 3, windowMs: 1_000 }];
      const bucketed = [{ limit: 3, windowMs: 1_000, bucketMs: 100 }];
      const releases: number[] = [];
      for (const rules of [exact, bucketed]) {
        const key = rules === exact ? 'exact' : 'bucketed';
        for (const extra of [7, 23, 41]) {
          const booked = await store.reserve(request({ rules, key, maxHoldMs: 50 }));
          const releaseAt = booked.startAt + extra;
          if (rules === exact) releases.push(releaseAt);
          await store.settle('ns', key, [
            { member: booked.members[0]!, releaseAt: rules === exact ? releaseAt : releases[releases.length - 3 + [7, 23, 41].indexOf(extra)]! },
          ]);
        }
      }
      await advance(60);
      const exactAnswer = await store.reserve(request({ rules: exact, key: 'exact', maxDelayMs: 0 }));
      const askedAt = performance.now();
      const bucketedAnswer = await store.reserve(request({ rules: bucketed, key: 'bucketed', maxDelayMs: 0 }));
      expect(exactAnswer.status).to.equal('refused');
      expect(bucketedAnswer.status).to.equal('refused');
      expect(exactAnswer.startAt).to.equal(Math.min(...releases) + 1_000);
      // Folded into its bucket, the oldest call counts until its bucket's end + the window.
      expect(bucketedAnswer.startAt).to.equal(Math.ceil(Math.min(...releases) / 100) * 100 + 1_000);
      expect(bucketedAnswer.startAt - exactAnswer.startAt).to.be.within(0, 99);
      const usage = await store.inspect('ns', 'bucketed', bucketed);
      expect(usage.rules[0]!.used).to.equal(3);
      // Read at most the time between the decision's ask and the inspect's answer later.
      const apart = Math.ceil(performance.now() - askedAt);
      expect(usage.nextFreeInMs).to.be.within(bucketedAnswer.waitMs - apart, bucketedAnswer.waitMs);
    });

    it('a bucketed rule never folds a call still in flight: it defers on it like an exact rule', async () => {
      const { store } = make();
      const rules = [{ limit: 2, windowMs: 1_000, bucketMs: 100 }];
      await store.reserve(request({ rules, cost: 2, maxHoldMs: 5_000 }));
      const deferred = await store.reserve(request({ rules, maxHoldMs: 5_000 }));
      expect(deferred.status).to.equal('deferred');
      expect(deferred.retryMs).to.be.within(4_900, 5_001);
      expect((await store.inspect('ns', 'k', rules)).rules[0]!.used).to.equal(2);
    });

    it('a bucketed rule combines with an exact short rule, which stays exact', async () => {
      const { store, advance } = make();
      const rules = [
        { limit: 2, windowMs: 200 },
        { limit: 4, windowMs: 5_000, bucketMs: 500 },
      ];
      const first = await store.reserve(request({ rules, maxHoldMs: 10 }));
      const second = await store.reserve(request({ rules, maxHoldMs: 10 }));
      await advance(10);
      await store.settle('ns', 'k', [
        { member: first.members[0]!, releaseAt: first.startAt + 3 },
        { member: second.members[0]!, releaseAt: second.startAt + 4 },
      ]);
      // The short rule: exactly 200 ms after the first completion.
      const third = await store.reserve(request({ rules, maxHoldMs: 10 }));
      expect(third.status).to.equal('booked');
      expect(third.startAt).to.equal(first.startAt + 3 + 200);
      expect(third.ruleIndex).to.equal(0);
      const fourth = await store.reserve(request({ rules, maxHoldMs: 10 }));
      expect(fourth.status).to.equal('booked');
      expect(fourth.startAt).to.equal(second.startAt + 4 + 200);
      // The long rule is full after 4: the fifth waits for the oldest bucket to leave the 5 s window.
      const fifth = await store.reserve(request({ rules, maxHoldMs: 10, maxDelayMs: 0 }));
      expect(fifth.status).to.equal('refused');
      expect(fifth.ruleIndex).to.equal(1);
      expect(fifth.startAt).to.be.at.least(first.startAt + 3 + 5_000);
      expect(fifth.startAt).to.be.below(first.startAt + 3 + 5_000 + 500);
    });

    it('a pause or a restore never shortens how long folded buckets count, even with the log empty', async () => {
      const { store, advance } = make();
      const rules = [{ limit: 3, windowMs: 2_000, bucketMs: 200 }];
      const refusedAt: number[] = [];
      for (const key of ['paused', 'restored']) {
        const booked = await store.reserve(request({ rules, key, cost: 3, maxHoldMs: 10 }));
        await store.settle(
          'ns',
          key,
          booked.members.map((member) => ({ member, releaseAt: booked.startAt + 1 })),
        );
        await advance(5);
        // The next decision folds the three calls into their bucket: the log is empty, meta holds the window.
        const refused = await store.reserve(request({ rules, key, maxDelayMs: 0 }));
        expect(refused.status).to.equal('refused');
        expect(refused.startAt).to.equal(Math.ceil((booked.startAt + 1) / 200) * 200 + 2_000);
        refusedAt.push(refused.startAt);
      }
      await store.pause('ns', 'paused', 50);
      // A call made elsewhere that counts for 10 ms more (its bucket for at most 210): the log's own
      // lifetime is that short.
      await store.restore('ns', 'restored', [{ releaseInMs: -1_990, cost: 1 }], 2_000);
      await advance(250);
      for (const [i, key] of ['paused', 'restored'].entries()) {
        const again = await store.reserve(request({ rules, key, maxDelayMs: 0 }));
        expect(again.status, key).to.equal('refused');
        expect(again.startAt, key).to.equal(refusedAt[i]);
        expect((await store.inspect('ns', key, rules)).rules[0]!.used, key).to.equal(3);
      }
    });

    it('a bucketed rule with many narrow buckets still counts calls folded more than 64 buckets ago', async () => {
      const { store, advance } = make();
      // 100 buckets of 10 ms; the three calls fold into one, then no decision for 70 bucket widths.
      const rules = [{ limit: 3, windowMs: 1_000, bucketMs: 10 }];
      const booked = await store.reserve(request({ rules, cost: 3, maxHoldMs: 10 }));
      await store.settle(
        'ns',
        'k',
        booked.members.map((member) => ({ member, releaseAt: booked.startAt + 1 })),
      );
      await advance(5);
      const folded = await store.reserve(request({ rules, maxDelayMs: 0 }));
      expect(folded.status).to.equal('refused');
      await advance(700);
      const later = await store.reserve(request({ rules, maxDelayMs: 0 }));
      expect(later.status).to.equal('refused');
      expect(later.startAt).to.equal(folded.startAt);
      expect(later.startAt).to.equal(Math.ceil((booked.startAt + 1) / 10) * 10 + 1_000);
    });

    it('bucketed rules with the same window and bucket width count each call once', async () => {
      const { store, advance } = make();
      // A duplicate, and a second limit over the same window ('1500/day' with '3000/day').
      const rules = [
        { limit: 3, windowMs: 1_000, bucketMs: 100 },
        { limit: 3, windowMs: 1_000, bucketMs: 100 },
        { limit: 6, windowMs: 1_000, bucketMs: 100 },
      ];
      const booked = await store.reserve(request({ rules, cost: 2, maxHoldMs: 10 }));
      await store.settle(
        'ns',
        'k',
        booked.members.map((member) => ({ member, releaseAt: booked.startAt + 1 })),
      );
      await advance(5);
      // Folded once, the two calls leave room for a third under 3 per window.
      const third = await store.reserve(request({ rules, maxDelayMs: 0, maxHoldMs: 10 }));
      expect(third.status).to.equal('booked');
      expect((await store.inspect('ns', 'k', rules)).rules.map((rule) => rule.used)).to.deep.equal([3, 3, 3]);
      await store.settle('ns', 'k', [{ member: third.members[0]!, releaseAt: third.startAt + 1 }]);
      await advance(5);
      const fourth = await store.reserve(request({ rules, maxDelayMs: 0 }));
      expect(fourth.status).to.equal('refused');
      expect(fourth.startAt).to.equal(Math.ceil((booked.startAt + 1) / 100) * 100 + 1_000);
    });

    it('starts nothing during a vendor pause, keeps the longer pause, and reports it', async () => {
      const { store } = make();
      const rules = [{ limit: 5, windowMs: 1_000 }];
      const first = await store.reserve(request({ rules }));
      const end = await store.pause('ns', 'k', 3_000);
      expect(end - first.now).to.be.within(2_995, 3_050);
      expect(await store.pause('ns', 'k', 100)).to.equal(end);
      const refused = await store.reserve(request({ rules, maxDelayMs: 0 }));
      expect(refused.status).to.equal('refused');
      expect(refused.ruleIndex).to.equal(-2);
      expect(refused.startAt).to.equal(end);
      const usage = await store.inspect('ns', 'k', rules);
      expect(usage.pausedForMs).to.be.within(2_900, 3_001);
      expect(usage.nextFreeInMs).to.equal(usage.pausedForMs);
      const other = await store.reserve(request({ rules, key: 'other', maxDelayMs: 0 }));
      expect(other.status).to.equal('booked');
      // One that may wait is booked at the pause's end.
      const later = await store.reserve(request({ rules }));
      expect(later).to.deep.include({ status: 'booked', startAt: end, ruleIndex: -2 });
    });

    it('counts a key under a limit it learned, for every process, with the calls already in the window', async () => {
      const { store, peer } = make();
      if (store.learn === undefined) throw new Error('Expected the store to learn limits');
      const rules = [{ limit: 10, windowMs: 60_000 }];
      for (let i = 0; i < 5; i++) expect((await store.reserve(request({ rules }))).status).to.equal('booked');
      const learned = await store.learn('ns', 'k', [{ limit: 6, windowMs: 60_000, source: 'policy', lapseMs: 30_000 }], 0);
      expect(learned.changed).to.equal(true);
      expect(learned.pausedUntil).to.equal(0);
      expect(learned.learned).to.have.length(1);
      expect(learned.learned[0]).to.deep.include({ limit: 6, windowMs: 60_000, source: 'policy' });
      expect(learned.learned[0]!.lapsesInMs).to.be.within(29_900, 30_000);
      // Learning the same again changes nothing.
      expect((await store.learn('ns', 'k', [{ limit: 6, windowMs: 60_000, source: 'policy', lapseMs: 30_000 }], 0)).changed).to.equal(false);
      // The five calls made count: one more fits under 6, in this process and in another.
      const other = peer?.() ?? store;
      expect((await other.reserve(request({ rules, maxDelayMs: 0 }))).status).to.equal('booked');
      const refused = await store.reserve(request({ rules, maxDelayMs: 0 }));
      expect(refused).to.deep.include({ status: 'refused', ruleIndex: 0 });
      expect(refused.waitMs).to.be.within(59_000, 60_000);
      const usage = await store.inspect('ns', 'k', rules);
      expect(usage.rules[0]).to.deep.include({ limit: 6, windowMs: 60_000, used: 6 });
      expect(usage.learned?.map(({ limit, windowMs, source }) => ({ limit, windowMs, source }))).to.deep.equal([
        { limit: 6, windowMs: 60_000, source: 'policy' },
      ]);
      // Another key, and the key of another namespace, learned nothing.
      expect((await store.inspect('ns', 'other', rules)).learned).to.deep.equal([]);
      // Forgotten by the source that taught it (the vendor says the configured limit again): 10 again.
      await store.learn('ns', 'k', [{ limit: 0, windowMs: 60_000, source: 'limit', lapseMs: 30_000 }], 0);
      expect((await store.inspect('ns', 'k', rules)).learned).to.have.length(1);
      expect((await store.learn('ns', 'k', [{ limit: 0, windowMs: 60_000, source: 'policy', lapseMs: 30_000 }], 0)).changed).to.equal(true);
      expect((await store.reserve(request({ rules, maxDelayMs: 0 }))).status).to.equal('booked');
      expect((await store.inspect('ns', 'k', rules)).rules[0]).to.deep.include({ limit: 10, used: 7 });
    });

    it('books a reservation of several keys in each, and its claim starts the call in all of them at once', async () => {
      const { store } = make();
      const rules = [{ limit: 1, windowMs: 1_000 }];
      const also = [{ key: 'k2', rules, retainMs: 1_000 }];
      const reserved = await store.reserve(request({ rules, reserved: true, graceMs: 10_000, maxHoldMs: 20_000, also }));
      expect(reserved).to.deep.include({ status: 'booked', waitMs: 0 });
      // Counted in both keys before its claim.
      for (const key of ['k', 'k2']) expect((await store.reserve(request({ key, rules, maxDelayMs: 0 }))).status, key).to.equal('refused');
      const claim = {
        namespace: 'ns',
        key: 'k',
        also: [{ key: 'k2', retainMs: 1_000 }],
        members: reserved.members,
        deps: reserved.deps ?? [],
        bound: reserved.startAt + 20_000,
        startAt: reserved.startAt,
        graceMs: 10_000,
        maxHoldMs: 10_000,
        retainMs: 1_000,
      };
      const started = await store.claim!(claim);
      expect(started.status).to.equal('started');
      // The call's slots took the reservation's place in both keys: its completion frees both a window later.
      for (const key of ['k', 'k2']) {
        expect((await store.inspect('ns', key, rules)).rules[0]!.used, key).to.equal(1);
        await store.settle(
          'ns',
          key,
          started.members.map((member) => ({ member, releaseAt: started.now })),
        );
        const after = await store.reserve(request({ key, rules, maxDelayMs: 0 }));
        expect(after).to.deep.include({ status: 'refused' });
        // The release is the claim's reading rounded up; this reading may lie in the same ms, before it.
        expect(after.waitMs, key).to.be.within(1, 1_001);
      }
      expect((await store.claim!(claim)).status).to.equal('used');
    });

    it('counts a learned limit of another window as a rule of its own, within the history kept, until it lapses or the key is reset', async () => {
      const { store, advance } = make();
      if (store.learn === undefined || store.reset === undefined) throw new Error('Expected the store to learn limits and reset keys');
      const rules = [{ limit: 5, windowMs: 200 }];
      // Within 2 s of history kept: 3 calls per 1 s binds; one of 10 s is beyond it, and does not count.
      await store.learn(
        'ns',
        'k',
        [
          { limit: 3, windowMs: 1_000, source: 'policy', lapseMs: 60_000 },
          { limit: 1, windowMs: 10_000, source: 'policy', lapseMs: 60_000 },
        ],
        0,
      );
      const firstAt = performance.now();
      for (let i = 0; i < 3; i++) expect((await store.reserve(request({ rules, retainMs: 2_000 }))).status).to.equal('booked');
      const fourth = await store.reserve(request({ rules, retainMs: 2_000, maxDelayMs: 0 }));
      // The first call read the store's clock after firstAt, the fourth before now.
      const apart = Math.ceil(performance.now() - firstAt);
      expect(fourth).to.deep.include({ status: 'refused', ruleIndex: LEARNED });
      // At most a window and the part of a ms the first start was rounded up by (its slot's score is
      // a whole ms), counted from a reading of the same ms: rounded up, 1,001.
      expect(fourth.waitMs).to.be.within(1_000 - apart, 1_001);
      const usage = await store.inspect('ns', 'k', rules);
      expect(usage.rules.map(({ limit, windowMs, used }) => ({ limit, windowMs, used }))).to.deep.equal([
        { limit: 5, windowMs: 200, used: 3 },
        { limit: 3, windowMs: 1_000, used: 3 },
        { limit: 1, windowMs: 10_000, used: 3 },
      ]);
      // A learned limit below a call's cost holds it to its cost, never forever.
      const wide = await store.reserve(request({ rules, retainMs: 2_000, cost: 4, key: 'wide' }));
      expect(wide.status).to.equal('booked');
      await store.reset('ns', 'k', 2_000, 0);
      expect((await store.inspect('ns', 'k', rules)).learned).to.deep.equal([]);
      // A lapse: learned for 300 ms, gone after.
      await store.learn('ns', 'k', [{ limit: 1, windowMs: 200, source: 'limit', lapseMs: 300 }], 0);
      expect((await store.reserve(request({ rules }))).status).to.equal('booked');
      expect((await store.reserve(request({ rules, maxDelayMs: 0 }))).status).to.equal('refused');
      await advance(320);
      expect((await store.inspect('ns', 'k', rules)).learned).to.deep.equal([]);
      for (let i = 0; i < 5; i++) expect((await store.reserve(request({ rules, maxDelayMs: 0 }))).status).to.equal('booked');
    });

    it('learns from refusals: one less a refusal within a window, down to what the window took, and a tenth more a window without one (two after a refusal)', async () => {
      const { store, advance } = make();
      if (store.learn === undefined) throw new Error('Expected the store to learn limits');
      // A window long enough for a store reached over HTTP under load: each step below is a round trip.
      const windowMs = 600;
      const rules = [{ limit: 10, windowMs }];
      const down = { mode: 'down' as const, limit: 10, windowMs, source: 'refusals' as const, lapseMs: 60_000 };
      const up = { ...down, mode: 'up' as const };
      const limitNow = async () => (await store.inspect('ns', 'k', rules)).rules[0]!.limit;
      // Ten calls, completed together: the window that took them holds them all whatever the round trips took.
      const booked = [];
      for (let i = 0; i < 10; i++) booked.push(await store.reserve(request({ rules, maxHoldMs: 10_000 })));
      const completedAt = booked.at(-1)!.now;
      for (const call of booked) await store.settle('ns', 'k', [{ member: call.members[0]!, releaseAt: completedAt }]);
      // Four of the ten refused: 9, 8, 7, 6.
      const limits = [];
      for (let i = 0; i < 4; i++) {
        const result = await store.learn('ns', 'k', [down], 0);
        expect(result.changed).to.equal(true);
        limits.push(result.learned[0]!.limit);
      }
      expect(limits).to.deep.equal([9, 8, 7, 6]);
      expect((await store.inspect('ns', 'k', rules)).learned?.[0]).to.deep.include({ limit: 6, windowMs, source: 'refusals' });
      // No probe up within two windows of the refusals.
      expect((await store.learn('ns', 'k', [up], 0)).changed).to.equal(false);
      await advance(windowMs + 40);
      expect((await store.learn('ns', 'k', [up], 0)).changed).to.equal(false);
      await advance(windowMs + 40);
      expect((await store.learn('ns', 'k', [up], 0)).changed).to.equal(true);
      expect(await limitNow()).to.equal(7);
      // The next a window after a rise.
      expect((await store.learn('ns', 'k', [up], 0)).changed).to.equal(false);
      await advance(windowMs + 40);
      expect((await store.learn('ns', 'k', [up], 0)).changed).to.equal(true);
      expect(await limitNow()).to.equal(8);
      // A refusal in the new window: one less than in force (no call of the window to measure by).
      expect((await store.learn('ns', 'k', [down], 0)).learned[0]!.limit).to.equal(7);
      // Never below 1.
      for (let i = 0; i < 10; i++) await store.learn('ns', 'k', [down], 0);
      expect(await limitNow()).to.equal(1);
      // Back up by a tenth (at least 1) a window, and forgotten at the configured limit.
      for (let i = 0; i < 11; i++) {
        await advance(windowMs + 40);
        await store.learn('ns', 'k', [up], 0);
      }
      expect((await store.inspect('ns', 'k', rules)).learned).to.deep.equal([]);
      expect(await limitNow()).to.equal(10);
    });

    it('learns from refusals down to the floor asked, and nothing with a floor at the rule', async () => {
      const { store } = make();
      if (store.learn === undefined) throw new Error('Expected the store to learn limits');
      const rules = [{ limit: 10, windowMs: 60_000 }];
      const down = { mode: 'down' as const, limit: 10, windowMs: 60_000, source: 'refusals' as const, lapseMs: 60_000, floor: 4 };
      for (let i = 0; i < 10; i++) await store.learn('ns', 'k', [down], 0);
      expect((await store.inspect('ns', 'k', rules)).rules[0]).to.deep.include({ limit: 4 });
      for (let i = 0; i < 4; i++) expect((await store.reserve(request({ rules, maxDelayMs: 0 }))).status).to.equal('booked');
      expect((await store.reserve(request({ rules, maxDelayMs: 0 }))).status).to.equal('refused');
      const at = await store.learn('ns', 'other', [{ ...down, floor: 10 }], 0);
      expect(at).to.deep.include({ changed: false, learned: [] });
      // Learned under a floor of 1 (another process, an earlier deploy): a refusal under a floor of 4 brings it up to 4.
      for (let i = 0; i < 12; i++) await store.learn('ns', 'low', [{ ...down, floor: 1 }], 0);
      expect((await store.inspect('ns', 'low', rules)).rules[0]).to.deep.include({ limit: 1 });
      expect((await store.learn('ns', 'low', [down], 0)).changed).to.equal(true);
      expect((await store.inspect('ns', 'low', rules)).rules[0]).to.deep.include({ limit: 4 });
    });

    it('applies a published limit above the rule when asked to (aboveRules), for every process, and refusals bring it down from there', async () => {
      const { store, peer } = make();
      if (store.learn === undefined) throw new Error('Expected the store to learn limits');
      const rules = [{ limit: 3, windowMs: 60_000 }];
      const above = { limit: 5, windowMs: 60_000, source: 'policy' as const, lapseMs: 60_000, aboveRules: true, configured: 3 };
      const result = await store.learn('ns', 'k', [above], 0);
      expect(result.changed).to.equal(true);
      expect(result.learned.map(({ limit, source }) => ({ limit, source }))).to.deep.equal([{ limit: 5, source: 'policy' }]);
      const other = peer?.() ?? store;
      for (let i = 0; i < 5; i++) expect((await (i % 2 === 0 ? store : other).reserve(request({ rules, maxDelayMs: 0 }))).status).to.equal('booked');
      expect(await other.reserve(request({ rules, maxDelayMs: 0 }))).to.deep.include({ status: 'refused', ruleIndex: 0 });
      expect((await store.inspect('ns', 'k', rules)).rules[0]).to.deep.include({ limit: 5, used: 5 });
      // A refusal lowers from the limit in force (5 calls taken, the first refusal: 4), which stays above the rule's 3.
      const down = { mode: 'down' as const, limit: 3, windowMs: 60_000, source: 'refusals' as const, lapseMs: 60_000 };
      expect((await store.learn('ns', 'k', [down], 0)).learned[0]).to.deep.include({ limit: 4, source: 'refusals' });
      expect((await store.inspect('ns', 'k', rules)).rules[0]).to.deep.include({ limit: 4 });
      // Said again, the vendor's word wins. A forget of a process without aboveRules leaves it; one with it forgets.
      await store.learn('ns', 'k', [above], 0);
      expect((await store.learn('ns', 'k', [{ ...above, limit: 0, aboveRules: false }], 0)).changed).to.equal(false);
      expect((await store.inspect('ns', 'k', rules)).rules[0]).to.deep.include({ limit: 5 });
      expect((await store.learn('ns', 'k', [{ ...above, limit: 0 }], 0)).changed).to.equal(true);
      expect((await store.inspect('ns', 'k', rules)).rules[0]).to.deep.include({ limit: 3 });
      // Without it, the same limit is capped at the rule.
      await store.learn('ns', 'k2', [{ ...above, aboveRules: false }], 0);
      expect((await store.inspect('ns', 'k2', rules)).rules[0]).to.deep.include({ limit: 3 });
    });

    it('takes slots booked ahead out when the limit in force goes down, not when a limit above the rule raises it', async () => {
      const { store } = make();
      if (store.learn === undefined) throw new Error('Expected the store to learn limits');
      const rules = [{ limit: 2, windowMs: 60_000 }];
      const maxHoldMs = 200;
      // Four calls: two now (done at once), two booked ahead a window later.
      for (let i = 0; i < 4; i++) {
        const booked = await store.reserve(request({ rules, maxHoldMs }));
        expect(booked.status).to.equal('booked');
        if (i < 2) await store.settle('ns', 'k', [{ member: booked.members[0]!, releaseAt: booked.now }]);
      }
      const raise = { limit: 8, windowMs: 60_000, source: 'policy' as const, lapseMs: 120_000, aboveRules: true, configured: 2 };
      expect(await store.learn('ns', 'k', [raise], maxHoldMs)).to.deep.include({ changed: true, pausedUntil: 0 });
      expect((await store.inspect('ns', 'k', rules, maxHoldMs)).bookedAhead).to.equal(2);
      // Forgotten (the vendor says the rule's 2 again): from 8 back to 2, the slots booked ahead leave.
      const forgotten = await store.learn('ns', 'k', [{ ...raise, limit: 0 }], maxHoldMs);
      expect(forgotten.changed).to.equal(true);
      expect(forgotten.pausedUntil).to.be.above(0);
      expect((await store.inspect('ns', 'k', rules, maxHoldMs)).bookedAhead).to.equal(0);
    });

    it('holds the room the log leaves beyond what the vendor says remains, until its reset', async () => {
      const { store, peer } = make();
      if (store.learn === undefined) throw new Error('Expected the store to learn limits');
      const rules = [{ limit: 10, windowMs: 1_000 }];
      for (let i = 0; i < 2; i++) expect((await store.reserve(request({ rules }))).status).to.equal('booked');
      const hold = { mode: 'hold' as const, source: 'limit' as const, limit: 10, windowMs: 1_000, remaining: 3, lapseMs: 800 };
      // The vendor counted 7 (another client's 5 besides these 2): 5 held.
      const heldAt = performance.now();
      const result = await store.learn('ns', 'k', [hold], 0);
      expect(result).to.deep.include({ held: 5, changed: false, pausedUntil: 0 });
      expect(result.learned).to.deep.equal([]);
      expect((await store.inspect('ns', 'k', rules)).rules[0]).to.deep.include({ used: 7 });
      // Said again, nothing more to hold.
      expect((await store.learn('ns', 'k', [hold], 0)).held).to.equal(0);
      const other = peer?.() ?? store;
      for (let i = 0; i < 3; i++) expect((await other.reserve(request({ rules, maxDelayMs: 0 }))).status).to.equal('booked');
      const refused = await store.reserve(request({ rules, maxDelayMs: 0 }));
      // The hold read the store's clock after heldAt, the refusal before now: at most this much apart.
      const apart = Math.ceil(performance.now() - heldAt);
      expect(refused.status).to.equal('refused');
      // The held slots stop counting at the vendor's reset (800 ms after the hold), before the calls made here (1 s).
      expect(refused.waitMs).to.be.within(800 - apart, 800);
      // A large limit holds in one step too.
      const large = await store.learn('ns', 'large', [{ ...hold, limit: 5_000, windowMs: 60_000, remaining: 0, lapseMs: 60_000 }], 0);
      expect(large.held).to.equal(5_000);
      expect((await store.inspect('ns', 'large', [{ limit: 5_000, windowMs: 60_000 }])).rules[0]).to.deep.include({ used: 5_000 });
    });

    it('takes slots booked ahead under a limit learned lower out of the log, and pauses the key until the last of them would have started', async () => {
      const { store } = make();
      if (store.learn === undefined || store.pausedUntil === undefined) throw new Error('Expected the store to learn limits and answer pauses');
      const rules = [{ limit: 4, windowMs: 1_000 }];
      const hold = 50;
      const booked: ReserveResult[] = [];
      for (let i = 0; i < 8; i++) {
        const result = await store.reserve(request({ rules, maxHoldMs: hold }));
        booked.push(result);
        if (i < 4) await store.settle('ns', 'k', [{ member: result.members[0]!, releaseAt: result.now }]);
      }
      expect(booked.map((r) => r.status)).to.deep.equal(Array(8).fill('booked'));
      const ahead = booked.slice(4);
      expect(ahead.every((r) => r.waitMs > 800)).to.equal(true);
      const { pausedUntil, changed } = await store.learn('ns', 'k', [{ limit: 2, windowMs: 1_000, source: 'policy', lapseMs: 60_000 }], hold);
      expect(changed).to.equal(true);
      const last = Math.max(...ahead.map((r) => r.startAt));
      expect(pausedUntil).to.equal(last + 1);
      expect(await store.pausedUntil('ns', 'k', -Infinity)).to.equal(pausedUntil);
      const usage = await store.inspect('ns', 'k', rules, hold);
      expect(usage.bookedAhead).to.equal(0);
      expect(usage.rules[0]).to.deep.include({ limit: 2, used: 4 });
      // Raising it back changes nothing booked; nothing is paused for a raise.
      const raised = await store.learn('ns', 'k', [{ limit: 3, windowMs: 1_000, source: 'policy', lapseMs: 60_000 }], hold);
      expect(raised).to.deep.include({ changed: true, pausedUntil: 0 });
    });

    it('matches the reference model on random sequences, and no window ever holds more than its limit', async function () {
      this.timeout(90_000);
      const subjectClock = make().clock !== undefined;
      const ruleSets: Rule[][] = [
        [{ limit: 3, windowMs: 40 }],
        [
          { limit: 2, windowMs: 15 },
          { limit: 5, windowMs: 60 },
        ],
        [{ limit: 4, windowMs: 30 }],
        // Caps on calls in flight (window 0), alone and beside a rate rule.
        [{ limit: 2, windowMs: 0 }],
        [
          { limit: 2, windowMs: 0 },
          { limit: 4, windowMs: 30 },
        ],
      ];
      const maxHoldMs = 8;
      /** A reservation's grace (`reservationGraceMs`). */
      const GRACE_MS = 20;
      const retainMs = 60;
      const delays = [0, 15, Infinity];
      const op = fc.oneof(
        {
          weight: 6,
          arbitrary: fc.record({
            kind: fc.constant('reserve' as const),
            key: fc.constantFrom('a', 'b'),
            cost: fc.integer({ min: 1, max: 2 }),
            delay: fc.nat(delays.length - 1),
            rules: fc.nat(ruleSets.length - 1),
            // A reservation (`Throttle.reserve`), one in three: never deferred, its slot held a grace longer.
            reserved: fc.nat(2).map((n) => n === 0),
          }),
        },
        // A completion may come after the bound (a call slower than maxHoldMs): the store keeps the bound.
        { weight: 2, arbitrary: fc.record({ kind: fc.constant('complete' as const), pick: fc.nat(), after: fc.nat(maxHoldMs + 4) }) },
        { weight: 1, arbitrary: fc.record({ kind: fc.constant('release' as const), pick: fc.nat() }) },
        // A reservation's call, made with its token: a claim.
        // `settle`: the calls it depends on complete first; `wait`: told to wait, it waits and claims again, as a throttle does.
        {
          weight: 2,
          arbitrary: fc.record({ kind: fc.constant('claim' as const), pick: fc.nat(), settle: fc.boolean(), wait: fc.boolean() }),
        },
        { weight: 3, arbitrary: fc.record({ kind: fc.constant('wait' as const), ms: fc.integer({ min: 1, max: 12 }), half: fc.boolean() }) },
        { weight: 1, arbitrary: fc.record({ kind: fc.constant('pause' as const), key: fc.constantFrom('a', 'b'), ms: fc.integer({ min: 1, max: 20 }) }) },
        // A limit learned from the vendor (0 forgets it; aboveRules: it may raise a rule); a window of 120 ms lies beyond the history kept.
        {
          weight: 1,
          arbitrary: fc.record({
            kind: fc.constant('learn' as const),
            key: fc.constantFrom('a', 'b'),
            windowMs: fc.constantFrom(15, 30, 40, 60, 120),
            limit: fc.integer({ min: 0, max: 3 }),
            source: fc.constantFrom('policy' as const, 'limit' as const),
            aboveRules: fc.boolean(),
            configured: fc.integer({ min: 0, max: 5 }),
          }),
        },
      );
      // Half the runs keep one rule set per key, so that the window check below applies to every key.
      const plan = fc.record({
        ops: fc.array(op, { minLength: 5, maxLength: 40 }),
        fixed: fc.option(fc.record({ a: fc.nat(ruleSets.length - 1), b: fc.nat(ruleSets.length - 1) }), { nil: undefined }),
      });
      const counts = { booked: 0, deferred: 0, refused: 0 };
      await fc.assert(
        fc.asyncProperty(plan, async ({ ops, fixed }) => {
          const subject = make();
          const { store, namespace } = subject;
          const model = new ReferenceModel(retainMs);
          const booked: Array<BookedSlot & { key: string; ruleSet: number }> = [];
          const seenMembers = new Set<string>();
          // Keys a limit above their rules was learned for: their calls go past the configured rules (the model pins them).
          const raised = new Set<string>();
          for (const step of ops) {
            if (step.kind === 'wait') {
              await subject.advance(step.ms + (step.half && subjectClock ? 0.5 : 0));
            } else if (step.kind === 'pause') {
              const until = await store.pause(namespace, step.key, step.ms);
              expect(until, 'pause end').to.equal(model.pause(step.key, until));
            } else if (step.kind === 'learn') {
              if (step.aboveRules && step.limit > 0) raised.add(step.key);
              // Slots booked ahead leave under a lowered limit where the model can tell which (a clock the test reads).
              const hold = subject.clock ? maxHoldMs : 0;
              const entries = [
                { limit: step.limit, windowMs: step.windowMs, source: step.source, lapseMs: 60_000, aboveRules: step.aboveRules, configured: step.configured },
              ];
              const learned = await store.learn!(namespace, step.key, entries, hold);
              const expected = model.learn(step.key, subject.clock?.() ?? 0, entries, hold);
              expect({ changed: learned.changed, pausedUntil: learned.pausedUntil }, 'learn').to.deep.equal({
                changed: expected.changed,
                pausedUntil: expected.pausedUntil,
              });
              // Those calls never start on their slots: they book again.
              for (const call of booked.filter((b) => b.key === step.key && b.members.some((member) => expected.removed.includes(member)))) {
                booked.splice(booked.indexOf(call), 1);
              }
            } else if (step.kind === 'reserve') {
              const ruleSet = fixed ? fixed[step.key] : step.rules;
              const rules = ruleSets[ruleSet]!;
              const hold = step.reserved ? maxHoldMs + GRACE_MS : maxHoldMs;
              const modelRequest: ModelRequest = {
                rules,
                cost: step.cost,
                maxDelayMs: delays[step.delay]!,
                maxHoldMs: hold,
                ...(step.reserved ? { reserved: true, graceMs: GRACE_MS } : {}),
              };
              const exact = subject.clock?.();
              const result = await store.reserve(request({ key: step.key, ...modelRequest, retainMs }));
              const got: ModelDecision = {
                status: result.status,
                startAt: result.startAt,
                waitMs: result.waitMs,
                retryMs: result.retryMs,
                ruleIndex: result.ruleIndex,
              };
              // Redis reads a fractional clock the answer does not show: its rounding may go either way.
              const nows = exact !== undefined ? [exact] : [result.now, result.now - 0.5];
              if (exact !== undefined) expect(result.now, 'now').to.equal(Math.ceil(exact));
              const candidates = nows.map((now) => model.decide(step.key, now, modelRequest));
              const expected = candidates.find((candidate) => JSON.stringify(candidate) === JSON.stringify(got)) ?? candidates[0]!;
              expect(got, `decision for ${step.key}`).to.deep.equal(expected);
              model.apply(step.key, expected, modelRequest, result.members);
              counts[result.status] += 1;
              expect(result.members, 'members').to.have.length(result.status === 'booked' ? step.cost : 0);
              for (const member of result.members) {
                expect(seenMembers.has(member), 'member reused').to.equal(false);
                seenMembers.add(member);
              }
              if (result.status === 'booked') {
                booked.push({ key: step.key, ruleSet, ...bookedSlot(result, hold, step.cost, step.reserved === true) });
              }
            } else if (step.kind === 'claim') {
              const claimable = booked.filter((b) => b.reserved?.claimable === true);
              const target = claimable[step.pick % Math.max(1, claimable.length)];
              if (!target) continue;
              const claim = {
                members: target.members,
                bound: target.reserved!.bound,
                startAt: target.start,
                graceMs: GRACE_MS,
                maxHoldMs,
                retainMs,
                deps: target.reserved!.deps,
              };
              if (step.settle) {
                const now = (await store.inspect(namespace, 'probe', ruleSets[0]!)).now;
                for (const dep of booked.filter(
                  (b) => b.open && b.reserved === undefined && b.start <= now && b.members.some((m) => claim.deps.some(([d]) => d === m)),
                )) {
                  dep.open = false;
                  dep.release = Math.min(dep.release, now);
                  await store.settle(
                    namespace,
                    dep.key,
                    dep.members.map((member) => ({ member, releaseAt: now })),
                  );
                  for (const member of dep.members) model.settle(dep.key, member, now);
                }
              }
              const result = await claimPinned(subject, store, model, [target.key], { namespace, key: target.key, ...claim }, claim, step.wait);
              claimed(result, target, booked, seenMembers, maxHoldMs);
            } else {
              // Completions come from calls that started; releases from calls that never will.
              const now = (await store.inspect(namespace, 'probe', ruleSets[0]!)).now;
              const open = booked.filter((b) => b.open && b.reserved === undefined && (step.kind === 'release' || b.start <= now));
              const target = open[step.pick % Math.max(1, open.length)];
              if (!target) continue;
              target.open = false;
              const releaseAt = step.kind === 'release' ? null : Math.min(target.start + step.after, now);
              await store.settle(
                namespace,
                target.key,
                target.members.map((member) => ({ member, releaseAt })),
              );
              for (const member of target.members) model.settle(target.key, member, releaseAt);
              if (releaseAt === null) booked.splice(booked.indexOf(target), 1);
              else target.release = Math.min(target.release, releaseAt);
            }
          }
          for (const key of ['a', 'b']) {
            if (raised.has(key)) continue;
            const calls = booked.filter((b) => b.key === key);
            // Each call was placed under its own rule set: the calls booked before it still counting
            // at its start (with their final, lowest releases) left room for it. A reservation not
            // claimed is a slot that counts, not a call.
            calls.forEach((call, index) => {
              if (call.reserved !== undefined) return;
              for (const rule of ruleSets[call.ruleSet]!) {
                const counting = calls
                  .slice(0, index)
                  .filter((b) => b.release + rule.windowMs > call.start)
                  .reduce((sum, b) => sum + b.cost, 0);
                expect(counting, `call ${index} under ${rule.limit}/${rule.windowMs}`).to.be.at.most(rule.limit - call.cost);
              }
            });
            // Whatever the order of the bookings: no window of a rule every call of the key kept
            // holds more than its limit of starts.
            const starts = calls.flatMap((call) => (call.reserved === undefined ? Array.from({ length: call.cost }, () => call.start) : []));
            for (const rule of ruleSets.flat()) {
              if (rule.windowMs === 0) {
                // A cap in flight: at no start are more than its limit of slots started and not yet released.
                const kept = calls.every((call) => ruleSets[call.ruleSet]!.some((r) => r.windowMs === 0 && r.limit <= rule.limit));
                if (!kept) continue;
                for (const call of calls) {
                  if (call.reserved !== undefined) continue;
                  const inFlight = calls
                    .filter((b) => b.reserved === undefined && b.start <= call.start && b.release > call.start)
                    .reduce((sum, b) => sum + b.cost, 0);
                  expect(inFlight, `${key}: ${rule.limit} concurrent at ${call.start}`).to.be.at.most(rule.limit);
                }
                continue;
              }
              const kept = calls.every((call) => ruleSets[call.ruleSet]!.some((r) => r.windowMs > 0 && r.limit <= rule.limit && r.windowMs >= rule.windowMs));
              if (kept) expect(maxInWindow(starts, rule.windowMs), `${key}: ${rule.limit}/${rule.windowMs}`).to.be.at.most(rule.limit);
            }
            for (const call of calls) expect(call.release - call.start).to.be.within(0, call.hold);
          }
          await store.close();
        }),
        { numRuns: name.startsWith('RedisStore') ? 40 : 200 },
      );
      // The sequences reach every kind of answer.
      expect(counts.booked).to.be.above(0);
      expect(counts.deferred).to.be.above(0);
      expect(counts.refused).to.be.above(0);
    });
  });
}

describe('RedisStore specifics', () => {
  it('puts every key of a decision under one hash tag, whatever the user id', () => {
    for (const id of ['', '{', '}', 'a}b{c', 'x:y', '*', 'line\nbreak', 'é😀', 'k'.repeat(10_000)]) {
      const names = keyNames('vt', 'acme', encodeURIComponent(id).slice(0, 50));
      const tags = [names.log, names.meta].map((key) => key.slice(key.indexOf('{') + 1, key.indexOf('}')));
      expect(tags[0]).to.equal(tags[1]);
    }
  });

  it('recovers from SCRIPT FLUSH through EVALSHA fallback', async () => {
    const client = redisClient();
    const store = redisStore(client, { prefix: uniquePrefix() });
    const rules = [{ limit: 5, windowMs: 1_000 }];
    await store.reserve(request({ rules }));
    await client.script('FLUSH');
    const result = await store.reserve(request({ rules }));
    expect(result.status).to.equal('booked');
  });

  it('sends the batch written as one buffer on a standalone ioredis client, and as ioredis writes it with a keyPrefix or auto-pipelining', async () => {
    const rules = [{ limit: 5, windowMs: 1_000 }];
    for (const options of [{}, { keyPrefix: 'kp:' }, { enableAutoPipelining: true }]) {
      const client = redisClient(options);
      const sent: Array<{ readonly name: string; readonly args: readonly unknown[] }> = [];
      const sendCommand = client.sendCommand.bind(client);
      client.sendCommand = (command, stream) => {
        sent.push(command);
        return sendCommand(command, stream);
      };
      const prefix = uniquePrefix();
      const store = redisStore(client, { prefix });
      expect((await store.reserve(request({ rules }))).status).to.equal('booked');
      const batches = sent.filter((command) => command.name === 'evalsha' || command.name === 'eval');
      expect(batches).to.not.have.length(0);
      // Written: a command of no arguments of ioredis's own (its bytes are given); the other scripts go as ioredis writes them.
      const written = batches.some((command) => command.args.length === 0);
      expect(written).to.equal(Object.keys(options).length === 0);
      const names = keyNames(prefix, 'ns', 'k');
      expect(await redisClient().exists(`${'keyPrefix' in options ? options.keyPrefix : ''}${names.log}`)).to.equal(1);
    }
  });

  it('names members <number>.<tag>, one tag per store', async () => {
    const client = redisClient();
    const prefix = uniquePrefix();
    const [one, two] = [redisStore(client, { prefix }), redisStore(client, { prefix })];
    const rules = [{ limit: 5, windowMs: 1_000 }];
    const a = await one.reserve(request({ rules, cost: 2 }));
    const b = await two.reserve(request({ rules }));
    for (const member of [...a.members, ...b.members]) expect(member).to.match(/^\d+\.[A-Za-z0-9_-]+$/);
    expect(a.members.map((member) => Number.parseInt(member, 10))).to.deep.equal([1, 2]);
    expect(a.members[0]!.split('.')[1]).to.equal(a.members[1]!.split('.')[1]);
    expect(b.members[0]!.split('.')[1]).to.not.equal(a.members[0]!.split('.')[1]);
    expect(await client.zrange(keyNames(prefix, 'ns', 'k').log, '0', '-1')).to.have.members([...a.members, ...b.members]);
  });

  it('gives a log the life its slots need after a tidy shortened it: the next booking sets it again', async () => {
    const client = redisClient();
    const prefix = uniquePrefix();
    const store = redisStore(client, { prefix });
    const rules = [{ limit: 2, windowMs: 2_000 }];
    const first = await store.reserve(request({ rules, maxHoldMs: 100 }));
    await store.settle('ns', 'k', [{ member: first.members[0]!, releaseAt: first.now }]);
    // A throttle on the store closes: the log lives as long as its completed slot counts (2 s).
    await store.tidy('ns');
    await new Promise((resolve) => setTimeout(resolve, 500));
    const second = await store.reserve(request({ rules, maxHoldMs: 100 }));
    expect(second.status).to.equal('booked');
    // The new slot counts until its bound (100 ms) plus the window: the log must live that long.
    const { log } = keyNames(prefix, 'ns', 'k');
    expect(await client.pttl(log)).to.be.above(2_050);
  });

  it('lets idle keys expire after their longest window (and bound), and leaves no key without a time to live', async () => {
    const client = redisClient();
    const prefix = uniquePrefix();
    const store = redisStore(client, { prefix });
    const rules = [{ limit: 1, windowMs: 2_000 }];
    await store.reserve(request({ rules, maxHoldMs: 100 }));
    const { log, meta } = keyNames(prefix, 'ns', 'k');
    // Its bound (100 ms) and window (2 s), and a slack of a window (5 s to 10 s: 5 s here), so that
    // the process's next bookings need not set its life again.
    expect(await client.pttl(log)).to.be.within(6_900, 7_101);
    // A decision that waits lists its process in meta for as long as it waits (until the bound, 100 ms).
    expect((await store.reserve(request({ rules, maxHoldMs: 100 }))).status).to.equal('deferred');
    expect(await client.hget(meta, 'w')).to.match(/^\.[A-Za-z0-9_-]+=\d+$/);
    // meta names no Redis on a standalone Redis (the namespace's epoch names the Redis that created
    // it, for a failover), and lives as the log does.
    expect(await client.hget(meta, 'r')).to.equal(null);
    expect(await client.pttl(meta)).to.be.within(1, (await client.pttl(log)) + 5);
    for (const key of await client.keys(`${prefix}:*`)) {
      if (!key.endsWith(':epoch') && !key.endsWith(':mark')) expect(await client.pttl(key), key).to.be.above(0);
    }
    await new Promise((resolve) => setTimeout(resolve, 150));
    // Past the bound of the call it waited for, the waiting entry is passed over and goes.
    expect((await store.reserve(request({ rules, maxHoldMs: 100, maxDelayMs: 0 }))).status).to.equal('refused');
    expect(await client.hget(meta, 'w')).to.equal(null);
    expect(await client.exists(log)).to.equal(1);
  });

  it('gives every key a time to live of its own, meta included, after its waiting list emptied', async () => {
    const client = redisClient();
    const prefix = uniquePrefix();
    const store = redisStore(client, { prefix });
    const rules = [{ limit: 1, windowMs: 2_000 }];
    const { log, meta } = keyNames(prefix, 'ns', 'k');
    const first = await store.reserve(request({ rules, maxHoldMs: 1_000 }));
    expect((await store.reserve(request({ rules, maxHoldMs: 1_000 }))).status).to.equal('deferred');
    // The completion wakes the waiting process, which stays listed until it decides again; booked,
    // it leaves the list: meta was left empty, and Redis deleted it.
    await store.settle('ns', 'k', [{ member: first.members[0]!, releaseAt: null }]);
    expect(await client.hget(meta, 'w')).to.not.equal(null);
    expect((await store.reserve(request({ rules, maxHoldMs: 1_000 }))).status).to.equal('booked');
    expect(await client.hget(meta, 'w')).to.equal(null);
    expect((await store.reserve(request({ rules, maxHoldMs: 1_000 }))).status).to.equal('deferred');
    // Were the call never settled (its worker died), meta must still go away by itself.
    expect(await client.pttl(meta)).to.be.within(1, 3_001);
    // Its bound (1 s) and window (2 s), and a slack of a window (5 s at least).
    expect(await client.pttl(log)).to.be.within(7_900, 8_001);
  });

  it('deletes the buckets that no longer count and keeps n equal to the calls in the live ones', async () => {
    const client = redisClient();
    const prefix = uniquePrefix();
    const store = redisStore(client, { prefix });
    // 10 buckets of 20 ms per 200 ms window; the 2 s rule keeps meta alive through the idle spell below.
    const rules = [
      { limit: 1_000, windowMs: 200, bucketMs: 20 },
      { limit: 5_000, windowMs: 2_000, bucketMs: 1_000 },
    ];
    const { meta } = keyNames(prefix, 'ns', 'k');
    const bucketsOf = async (group: string) => {
      const all = await client.hgetall(meta);
      const fields = Object.keys(all).filter((field) => new RegExp(`^b:${group}:\\d+$`).test(field));
      return { fields: fields.length, calls: fields.reduce((sum, field) => sum + Number(all[field]), 0), n: Number(all[`b:${group}:n`]) };
    };
    let calls = 0;
    const started = performance.now();
    while (performance.now() - started < 600) {
      const booked = await store.reserve(request({ rules, maxHoldMs: 1 }));
      expect(booked.status).to.equal('booked');
      await store.settle('ns', 'k', [{ member: booked.members[0]!, releaseAt: booked.startAt + 1 }]);
      calls++;
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    // Folding waits until a bucketed rule could bind: a call of the whole limit folds (and is refused).
    const foldNow = () => store.reserve(request({ rules, cost: 1_000, maxDelayMs: 0, maxHoldMs: 1 }));
    expect((await foldNow()).status).to.equal('refused');
    // Three windows of steady use: at most the live buckets (10, or 11 across a bucket's end) remain.
    const steady = await bucketsOf('200:20');
    expect(steady.fields).to.be.within(1, 11);
    expect(steady.n).to.equal(steady.calls);
    expect(await client.pttl(meta)).to.be.above(0);
    // 25 bucket widths without a decision (more than meta has fields): one fold deletes them all.
    await new Promise((resolve) => setTimeout(resolve, 500));
    await foldNow();
    expect(await bucketsOf('200:20')).to.deep.equal({ fields: 0, calls: 0, n: 0 });
    const long = await bucketsOf('2000:1000');
    expect(long.n).to.equal(long.calls);
    expect(long.calls).to.equal(calls);
  });

  it('a fold that finds nothing to fold still leaves meta with a time to live', async () => {
    const client = redisClient();
    const prefix = uniquePrefix();
    const store = redisStore(client, { prefix });
    const rules = [{ limit: 100, windowMs: 1_000, bucketMs: 100 }];
    // 40 calls in flight: more than the log holds before folding (32 with no exact rule), none foldable.
    expect((await store.reserve(request({ rules, cost: 40, maxHoldMs: 10_000 }))).status).to.equal('booked');
    expect((await store.reserve(request({ rules, maxHoldMs: 10_000 }))).status).to.equal('booked');
    const { meta } = keyNames(prefix, 'ns', 'k');
    expect(await client.hget(meta, 'b:1000:100:n')).to.equal('0');
    expect(await client.pttl(meta)).to.be.within(1, 11_001);
  });

  it('a bucketed 100000/day key holds 20,000 completed calls in its window in under 4 KB', async () => {
    const client = redisClient();
    const prefix = uniquePrefix();
    const store = redisStore(client, { prefix });
    const rules = [{ limit: 100_000, windowMs: 86_400_000, bucketMs: 86_400_000 / 50 }];
    const members: string[] = [];
    for (let i = 0; i < 20; i++) members.push(...(await store.reserve(request({ rules, cost: 1_000, maxHoldMs: 10 }))).members);
    expect(members).to.have.length(20_000);
    // Completions spread over the last 20 hours, as a day of steady use would leave them.
    const now = Number((await client.time())[0]) * 1_000;
    for (let from = 0; from < members.length; from += 2_000) {
      const settle = members.slice(from, from + 2_000).map((member, i) => ({ member, releaseAt: now - (from + i) * 3_600 }));
      await store.settle('ns', 'k', settle);
    }
    // The next decision folds them into buckets.
    expect((await store.reserve(request({ rules, maxHoldMs: 10 }))).status).to.equal('booked');
    const { log, meta } = keyNames(prefix, 'ns', 'k');
    expect(await client.zcard(log)).to.equal(1);
    let bytes = 0;
    for (const key of [log, meta]) bytes += Number((await client.memory('USAGE', key)) ?? 0);
    expect(bytes).to.be.below(4_096);
    expect((await store.inspect('ns', 'k', rules)).rules[0]!.used).to.equal(20_001);
    for (const key of [log, meta]) expect(await client.pttl(key), key).to.be.above(0);
  });

  it('never leaves the prefix, and keeps the client open on close', async () => {
    const client = redisClient();
    const prefix = uniquePrefix();
    const store = redisStore(client, { prefix });
    await store.reserve(request({ rules: [{ limit: 5, windowMs: 1_000 }], key: 'x' }));
    await store.pause('ns', 'x', 100);
    await store.close();
    const keys = await client.keys(`${prefix}:*`);
    // An epoch and a mark per namespace (never expire, a few bytes each), two keys per user key.
    expect(keys.sort()).to.deep.equal([`${prefix}:ns:epoch`, `${prefix}:ns:mark`, `${prefix}:ns:{x}:log`, `${prefix}:ns:{x}:meta`]);
    expect(await client.ping()).to.equal('PONG');
  });
});

describe('MemoryStore: a clock read between two milliseconds', () => {
  // A call told to start at once starts at the clock reading itself, which may lie just before the
  // next whole ms: a slot whose window ends at that whole ms still counts then. Trimming, expiry
  // and folding judge what no longer counts by the reading rounded down, never up.
  function store(): { store: MemoryStore; at(ms: number): void } {
    let clock = 0;
    return {
      store: new MemoryStore({ now: () => clock }),
      at: (ms) => {
        clock = ms;
      },
    };
  }
  const settleNow = async (subject: MemoryStore, result: ReserveResult, releaseAt: number): Promise<void> => {
    await subject.settle(
      'ns',
      'k',
      result.members.map((member) => ({ member, releaseAt })),
    );
  };

  it('a trim leaves a slot that still counts at the reading', async () => {
    const { store: subject, at } = store();
    const rules = [{ limit: 3, windowMs: 1_000 }];
    const x = 1_100_000;
    // 36 earlier calls, 400 ms apart (3 in any window), the last at x − 800: with the 3 below, the
    // log first holds more than 38 slots, and is trimmed, at the decision that matters.
    for (let i = 0; i < 36; i++) {
      at(x - 800 - 400 * (35 - i));
      const old = await subject.reserve(request({ rules }));
      expect(old).to.deep.include({ status: 'booked', waitMs: 0 });
      await settleNow(subject, old, x - 800 - 400 * (35 - i));
    }
    const starts: number[] = [];
    for (const offset of [-0.4, 500, 800]) {
      at(x + offset);
      const result = await subject.reserve(request({ rules }));
      expect(result).to.deep.include({ status: 'booked', waitMs: 0 });
      starts.push(x + offset);
      await settleNow(subject, result, Math.ceil(x + offset));
    }
    // The first call (started at x − 0.4, released at x) counts until x + 1000.
    at(x + 999.4);
    const next = await subject.reserve(request({ rules }));
    expect(next.status).to.equal('booked');
    starts.push(x + 999.4 + next.waitMs);
    expect(maxInWindow(starts, 1_000)).to.equal(3);
  });

  it('an idle key does not expire while its last slot still counts at the reading', async () => {
    const { store: subject, at } = store();
    const rules = [{ limit: 1, windowMs: 1_000 }];
    at(5_000_000 - 0.4);
    const first = await subject.reserve(request({ rules }));
    await settleNow(subject, first, 5_000_000);
    at(5_000_999.4);
    const second = await subject.reserve(request({ rules }));
    expect(second.status).to.equal('booked');
    expect(maxInWindow([5_000_000 - 0.4, 5_000_999.4 + second.waitMs], 1_000)).to.equal(1);
  });

  it('inspect counts a slot that still counts at the reading, as a decision does', async () => {
    const { store: subject, at } = store();
    const rules = [{ limit: 1, windowMs: 1_000 }];
    at(5_000_000 - 0.4);
    await settleNow(subject, await subject.reserve(request({ rules })), 5_000_000);
    at(5_000_999.4);
    const usage = await subject.inspect('ns', 'k', rules);
    expect(usage.rules[0]).to.deep.include({ used: 1 });
    expect(usage.nextFreeInMs).to.equal(1);
    expect((await subject.reserve(request({ rules }))).waitMs).to.equal(1);
  });
});
