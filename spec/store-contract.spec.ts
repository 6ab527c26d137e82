import { expect } from 'chai';
import fc from 'fast-check';
import { keyNames } from '../lib/keys.js';
import type { Rule } from '../lib/rules.js';
import type { ReserveRequest, Store } from '../lib/store.js';
import { MemoryStore } from '../lib/stores/memory-store.js';
import { redisClient, redisStore, uniquePrefix } from './support/hooks.js';
import { maxInWindow } from '../scripts/sim-vendor.js';
import { ReferenceModel } from './support/model.js';

/** A store under test, with a way to move its clock (or let real time pass, for Redis). */
interface Subject {
  readonly store: Store;
  readonly namespace: string;
  /** Lets at least `ms` pass on the store's clock. */
  advance(ms: number): Promise<void>;
}

const subjects: Array<{ name: string; make: () => Subject }> = [
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
      };
    },
  },
  {
    name: 'RedisStore',
    make: () => ({
      store: redisStore(redisClient(), { prefix: uniquePrefix() }),
      namespace: 'ns',
      advance: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
    }),
  },
];

function request(overrides: Partial<ReserveRequest> & { rules: readonly Rule[] }): ReserveRequest {
  return { namespace: 'ns', key: 'k', cost: 1, maxDelayMs: Infinity, holdMs: 0, retainMs: longest(overrides.rules), defer: false, maxHoldMs: 0, settle: [], ...overrides };
}

function longest(rules: readonly Rule[]): number {
  return Math.max(...rules.map((rule) => rule.windowMs));
}

for (const { name, make } of subjects) {
  describe(`store contract: ${name}`, () => {
    it('grants up to the limit at once, then books the next slot one window after the oldest', async () => {
      const { store } = make();
      const rules = [{ limit: 3, windowMs: 60_000 }];
      const results = [];
      for (let i = 0; i < 4; i++) results.push(await store.reserve(request({ rules, holdMs: 10 })));
      expect(results.slice(0, 3).map((r) => r.waitMs)).to.deep.equal([0, 0, 0]);
      expect(results.every((r) => r.granted)).to.equal(true);
      const first = results[0]!;
      expect(results[3]!.startAt).to.equal(first.startAt + 10 + 60_000);
      expect(results[3]!.ruleIndex).to.equal(0);
      expect(results[3]!.waitMs).to.be.within(59_990, 60_011);
      expect(new Set(results.flatMap((r) => r.members)).size).to.equal(4);
    });

    it('refuses a slot further than maxDelayMs, books nothing, and says when to retry', async () => {
      const { store } = make();
      const rules = [{ limit: 2, windowMs: 60_000 }];
      await store.reserve(request({ rules }));
      await store.reserve(request({ rules }));
      const refused = await store.reserve(request({ rules, maxDelayMs: 0 }));
      expect(refused.granted).to.equal(false);
      expect(refused.members).to.deep.equal([]);
      expect(refused.waitMs).to.be.within(59_990, 60_001);
      const again = await store.reserve(request({ rules, maxDelayMs: 0 }));
      expect(again.startAt).to.equal(refused.startAt);
      const usage = await store.inspect('ns', 'k', rules);
      expect(usage.rules[0]!.used).to.equal(2);
    });

    it('books cost slots in one step and never splits them', async () => {
      const { store } = make();
      const rules = [{ limit: 5, windowMs: 60_000 }];
      const a = await store.reserve(request({ rules, cost: 3 }));
      const b = await store.reserve(request({ rules, cost: 3, maxDelayMs: 0 }));
      const c = await store.reserve(request({ rules, cost: 2, maxDelayMs: 0 }));
      expect(a.members).to.have.length(3);
      expect(b.granted).to.equal(false);
      expect(c.granted).to.equal(true);
      expect((await store.inspect('ns', 'k', rules)).rules[0]!.used).to.equal(5);
    });

    it('applies the rule that binds last, across several rules', async () => {
      const { store } = make();
      const rules = [{ limit: 2, windowMs: 1_000 }, { limit: 3, windowMs: 60_000 }];
      const starts = [];
      for (let i = 0; i < 4; i++) starts.push(await store.reserve(request({ rules })));
      expect(starts[2]!.ruleIndex).to.equal(0);
      expect(starts[2]!.startAt).to.equal(starts[0]!.startAt + 1_000);
      expect(starts[3]!.ruleIndex).to.equal(1);
      expect(starts[3]!.startAt).to.equal(starts[0]!.startAt + 60_000);
    });

    it('serves callers in the order they asked, even when a later call would fit earlier', async () => {
      const { store } = make();
      const rules = [{ limit: 1, windowMs: 60_000 }];
      const first = await store.reserve(request({ rules }));
      const second = await store.reserve(request({ rules }));
      const small = await store.reserve(request({ rules: [{ limit: 5, windowMs: 60_000 }] }));
      expect(second.startAt).to.equal(first.startAt + 60_000);
      expect(small.startAt).to.equal(second.startAt);
    });

    it('frees capacity when a completion earlier than the hold is settled', async () => {
      const { store } = make();
      const rules = [{ limit: 1, windowMs: 60_000 }];
      const first = await store.reserve(request({ rules, holdMs: 5_000 }));
      const settle = [{ member: first.members[0]!, releaseAt: first.startAt + 20 }];
      const next = await store.reserve(request({ rules, holdMs: 5_000, maxDelayMs: 0, settle }));
      expect(next.granted).to.equal(false);
      expect(next.startAt).to.equal(first.startAt + 20 + 60_000);
    });

    it('counts a slot longer when its call completes after the hold', async () => {
      const { store } = make();
      const rules = [{ limit: 1, windowMs: 60_000 }];
      const first = await store.reserve(request({ rules, holdMs: 10 }));
      await store.settle('ns', 'k', [{ member: first.members[0]!, releaseAt: first.startAt + 3_000 }], 60_000);
      const next = await store.reserve(request({ rules, maxDelayMs: 0 }));
      expect(next.startAt).to.equal(first.startAt + 3_000 + 60_000);
    });

    it('removes a released slot, so the capacity is free again', async () => {
      const { store } = make();
      const rules = [{ limit: 1, windowMs: 60_000 }];
      const first = await store.reserve(request({ rules }));
      await store.settle('ns', 'k', [{ member: first.members[0]!, releaseAt: null }], 60_000);
      const next = await store.reserve(request({ rules, maxDelayMs: 0 }));
      expect(next.granted).to.equal(true);
    });

    it('restore adds calls it did not decide as completed slots, and its next decisions count them', async () => {
      const { store } = make();
      const rules = [{ limit: 3, windowMs: 60_000 }];
      await store.reserve(request({ rules, holdMs: 10 }));
      // Two calls made elsewhere (decided locally while the store was down), completed 1 s from now.
      await store.restore('ns', 'k', [{ releaseInMs: 1_000, cost: 2 }], 60_000, 0);
      expect((await store.inspect('ns', 'k', rules)).rules[0]!.used).to.equal(3);
      const next = await store.reserve(request({ rules, maxDelayMs: 0 }));
      expect(next.granted).to.equal(false);
      // The window frees one window after the oldest slot, the call this store decided (in flight
      // until its 10 ms estimate; its start is the clock reading rounded up: at most 60,011 ms).
      expect(next.waitMs).to.be.within(59_000, 60_011);
    });

    it('keeps keys apart', async () => {
      const { store } = make();
      const rules = [{ limit: 1, windowMs: 60_000 }];
      for (const key of ['a', 'b', '%7B', '{', '']) {
        const result = await store.reserve(request({ rules, key, maxDelayMs: 0 }));
        expect(result.granted, key).to.equal(true);
      }
    });

    it('reports usage, reset and the next free slot without booking', async () => {
      const { store, advance } = make();
      const rules = [{ limit: 2, windowMs: 200 }, { limit: 10, windowMs: 60_000 }];
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

    it('defers a booking that waits for a call still in flight, and books on its completion once known', async () => {
      const { store } = make();
      const rules = [{ limit: 1, windowMs: 60_000 }];
      const first = await store.reserve(request({ rules, holdMs: 5_000 }));
      const deferred = await store.reserve(request({ rules, holdMs: 5_000, defer: true }));
      expect(deferred).to.deep.include({ granted: false, deferred: true, members: [] });
      // Ask again when the call's estimate is reached (its completion is then likely known), not in
      // small steps before: 5 s from now.
      expect(deferred.retryMs).to.be.within(4_900, 5_001);
      expect(deferred.startAt).to.equal(first.startAt + 5_000 + 60_000);
      // The same with an estimate that is near.
      const soon = await store.reserve(request({ rules, key: 'soon', holdMs: 45 }));
      expect(soon.granted).to.equal(true);
      const nearly = await store.reserve(request({ rules, key: 'soon', holdMs: 45, defer: true }));
      expect(nearly.deferred).to.equal(true);
      // (The estimate is the slot's start, the clock reading rounded up, plus the 45 ms hold: up to 46 ms away.)
      expect(nearly.retryMs).to.be.within(20, 46);
      const settle = [{ member: first.members[0]!, releaseAt: first.startAt + 30 }];
      const booked = await store.reserve(request({ rules, holdMs: 5_000, defer: true, settle }));
      expect(booked).to.deep.include({ granted: true, deferred: false, startAt: first.startAt + 30 + 60_000 });
      // Without defer the same situation books at once, on the estimate.
      const plain = await store.reserve(request({ rules, holdMs: 5_000 }));
      expect(plain.granted).to.equal(true);
      expect(plain.startAt).to.equal(booked.startAt + 5_000 + 60_000);
    });

    it('counts a call past its estimate without a completion as still in flight, for up to maxHoldMs', async () => {
      const { store, advance } = make();
      const rules = [{ limit: 1, windowMs: 100 }];
      const first = await store.reserve(request({ rules, holdMs: 10, maxHoldMs: 60_000 }));
      await advance(30);
      // Its estimate (start + 10 ms) has passed and it never reported: it counts from now.
      const second = await store.reserve(request({ rules, holdMs: 10, maxHoldMs: 60_000 }));
      expect(second.startAt - second.now).to.be.within(99, 101);
      expect(second.startAt).to.be.above(first.startAt + 10 + 100);
      // Once it reports its completion, it counts from that time only: nothing but booking order
      // (first asked, first served) holds the next call back.
      await store.settle('ns', 'k', [{ member: first.members[0]!, releaseAt: first.startAt + 5 }], 100);
      await store.settle('ns', 'k', [{ member: second.members[0]!, releaseAt: null }], 100);
      const third = await store.reserve(request({ rules, holdMs: 10, maxHoldMs: 60_000 }));
      expect(third.ruleIndex).to.equal(-1);
      expect(third.startAt).to.equal(second.startAt);
    });

    it('neither defers on nor calls tentative a slot whose call left the flight set unsettled (maxHoldMs after its estimate)', async () => {
      const { store, advance } = make();
      const rules = [{ limit: 1, windowMs: 2_000 }];
      // Two calls that never report: one past estimate + maxHoldMs at the next decision, one not.
      const orphan = await store.reserve(request({ rules, holdMs: 10, maxHoldMs: 20 }));
      await store.reserve(request({ rules, key: 'alive', holdMs: 10, maxHoldMs: 60_000 }));
      await advance(50);
      const head = await store.reserve(request({ rules, holdMs: 10, maxHoldMs: 20, defer: true }));
      expect(head).to.deep.include({ granted: true, deferred: false, tentative: false });
      expect(head.startAt).to.equal(orphan.startAt + 10 + 2_000);
      const waiting = await store.reserve(request({ rules, key: 'alive', holdMs: 10, maxHoldMs: 60_000, defer: true }));
      expect(waiting).to.deep.include({ granted: false, deferred: true });
    });

    it('orders slots with equal scores by member bytes, as a Redis sorted set does', async () => {
      const { store } = make();
      const rules = [{ limit: 2, windowMs: 1_000 }];
      for (const [key, settled] of [['one', 0], ['ten', 1]] as const) {
        if (key === 'ten') {
          // Slot numbers 1 to 8 taken and given back: the pair below is 9 and 10.
          const gone = await store.reserve(request({ rules: [{ limit: 8, windowMs: 1_000 }], key, cost: 8 }));
          await store.settle('ns', key, gone.members.map((member) => ({ member, releaseAt: null })), 1_000);
        }
        const pair = await store.reserve(request({ rules, key, cost: 2, holdMs: 100, maxHoldMs: 10_000 }));
        // A completion on the other slot's estimate: equal scores, '1!' with '2' in flight, '10!' with '9'.
        // The settled one sorts first ('1!' < '2', '10!' < '9'), binds, and the head books on it.
        await store.settle('ns', key, [{ member: pair.members[settled]!, releaseAt: pair.startAt + 100 }], 1_000);
        const head = await store.reserve(request({ rules, key, holdMs: 100, maxHoldMs: 10_000, defer: true }));
        expect(head, key).to.deep.include({ granted: true, deferred: false, startAt: pair.startAt + 100 + 1_000 });
      }
    });

    it('confirms a tentative slot only while the calls booked before it keep to their estimates', async () => {
      const { store, advance } = make();
      const rules = [{ limit: 1, windowMs: 50 }];
      const first = await store.reserve(request({ rules, holdMs: 10, maxHoldMs: 60_000 }));
      const second = await store.reserve(request({ rules, holdMs: 10, maxHoldMs: 60_000 }));
      expect(second.tentative).to.equal(true);
      expect(second.startAt).to.equal(first.startAt + 10 + 50);
      // The first call is still on its way at the second's start: the slot no longer fits.
      await advance(65);
      expect(await store.confirm('ns', 'k', second.startAt, second.members, rules, 60_000)).to.equal(false);
      // Had it reported a completion within its estimate, the slot would still fit.
      await store.settle('ns', 'k', [{ member: first.members[0]!, releaseAt: first.startAt + 8 }], 50);
      expect(await store.confirm('ns', 'k', second.startAt, second.members, rules, 60_000)).to.equal(true);
      // A booking set by a known completion is not tentative.
      const third = await store.reserve(request({ rules, holdMs: 10, maxHoldMs: 60_000, settle: [{ member: second.members[0]!, releaseAt: second.startAt + 3 }] }));
      expect(third.tentative).to.equal(false);
    });

    it('books a call whose cost is a large limit (5,000 slots) in one decision', async () => {
      const { store } = make();
      const rules = [{ limit: 5_000, windowMs: 60_000 }];
      const big = await store.reserve(request({ rules, cost: 5_000 }));
      expect(big.granted).to.equal(true);
      expect(new Set(big.members).size).to.equal(5_000);
      expect((await store.inspect('ns', 'k', rules)).rules[0]!.used).to.equal(5_000);
    });

    it('a bucketed rule never lets a call through early and holds it back by less than one bucket', async () => {
      const { store, advance } = make();
      const exact = [{ limit: 3, windowMs: 1_000 }];
      const bucketed = [{ limit: 3, windowMs: 1_000, bucketMs: 100 }];
      const releases: number[] = [];
      for (const rules of [exact, bucketed]) {
        const key = rules === exact ? 'exact' : 'bucketed';
        for (const extra of [7, 23, 41]) {
          const booked = await store.reserve(request({ rules, key, holdMs: 50 }));
          const releaseAt = booked.startAt + extra;
          if (rules === exact) releases.push(releaseAt);
          await store.settle('ns', key, [{ member: booked.members[0]!, releaseAt: rules === exact ? releaseAt : releases[releases.length - 3 + [7, 23, 41].indexOf(extra)]! }], 1_000);
        }
      }
      await advance(60);
      const exactAnswer = await store.reserve(request({ rules: exact, key: 'exact', maxDelayMs: 0 }));
      const bucketedAnswer = await store.reserve(request({ rules: bucketed, key: 'bucketed', maxDelayMs: 0 }));
      expect(exactAnswer.granted).to.equal(false);
      expect(bucketedAnswer.granted).to.equal(false);
      expect(exactAnswer.startAt).to.equal(Math.min(...releases) + 1_000);
      // Folded into its bucket, the oldest call counts until its bucket's end + the window.
      expect(bucketedAnswer.startAt).to.equal(Math.ceil(Math.min(...releases) / 100) * 100 + 1_000);
      expect(bucketedAnswer.startAt - exactAnswer.startAt).to.be.within(0, 99);
      const usage = await store.inspect('ns', 'bucketed', bucketed);
      expect(usage.rules[0]!.used).to.equal(3);
      expect(usage.nextFreeInMs).to.be.within(bucketedAnswer.waitMs - 5, bucketedAnswer.waitMs);
    });

    it('a bucketed rule combines with an exact short rule, which stays exact', async () => {
      const { store } = make();
      const rules = [{ limit: 2, windowMs: 200 }, { limit: 4, windowMs: 5_000, bucketMs: 500 }];
      const first = await store.reserve(request({ rules, holdMs: 10 }));
      const second = await store.reserve(request({ rules, holdMs: 10 }));
      await store.settle('ns', 'k', [{ member: first.members[0]!, releaseAt: first.startAt + 3 }, { member: second.members[0]!, releaseAt: second.startAt + 4 }], 5_000);
      // The short rule: exactly 200 ms after the first completion.
      const third = await store.reserve(request({ rules, holdMs: 10 }));
      expect(third.startAt).to.equal(first.startAt + 3 + 200);
      expect(third.ruleIndex).to.equal(0);
      const fourth = await store.reserve(request({ rules, holdMs: 10 }));
      expect(fourth.startAt).to.equal(second.startAt + 4 + 200);
      // The long rule is full after 4: the fifth waits for the oldest bucket to leave the 5 s window.
      const fifth = await store.reserve(request({ rules, holdMs: 10, maxDelayMs: 0 }));
      expect(fifth.granted).to.equal(false);
      expect(fifth.ruleIndex).to.equal(1);
      expect(fifth.startAt).to.be.at.least(first.startAt + 3 + 5_000);
      expect(fifth.startAt).to.be.below(first.startAt + 3 + 5_000 + 500);
    });

    it('a pause or a restore never shortens how long folded buckets count, even with the log empty', async () => {
      const { store, advance } = make();
      const rules = [{ limit: 3, windowMs: 2_000, bucketMs: 200 }];
      const refusedAt: number[] = [];
      for (const key of ['paused', 'restored']) {
        const booked = await store.reserve(request({ rules, key, cost: 3, holdMs: 10 }));
        await store.settle('ns', key, booked.members.map((member) => ({ member, releaseAt: booked.startAt + 1 })), 2_000);
        await advance(5);
        // The next decision folds the three calls into their bucket: the log is empty, meta holds the window.
        const refused = await store.reserve(request({ rules, key, maxDelayMs: 0 }));
        expect(refused.granted).to.equal(false);
        expect(refused.startAt).to.equal(Math.ceil((booked.startAt + 1) / 200) * 200 + 2_000);
        refusedAt.push(refused.startAt);
      }
      await store.pause('ns', 'paused', 50, 2_000);
      // A call made elsewhere that counts for 10 ms more (its bucket for at most 210): the log's own
      // lifetime is that short.
      await store.restore('ns', 'restored', [{ releaseInMs: -1_990, cost: 1 }], 2_000, 0);
      await advance(250);
      for (const [i, key] of ['paused', 'restored'].entries()) {
        const again = await store.reserve(request({ rules, key, maxDelayMs: 0 }));
        expect(again.granted, key).to.equal(false);
        expect(again.startAt, key).to.equal(refusedAt[i]);
        expect((await store.inspect('ns', key, rules)).rules[0]!.used, key).to.equal(3);
      }
    });

    it('a bucketed rule with many narrow buckets still counts calls folded more than 64 buckets ago', async () => {
      const { store, advance } = make();
      // 100 buckets of 10 ms; the three calls fold into one, then no decision for 70 bucket widths.
      const rules = [{ limit: 3, windowMs: 1_000, bucketMs: 10 }];
      const booked = await store.reserve(request({ rules, cost: 3, holdMs: 10 }));
      await store.settle('ns', 'k', booked.members.map((member) => ({ member, releaseAt: booked.startAt + 1 })), 1_000);
      await advance(5);
      const folded = await store.reserve(request({ rules, maxDelayMs: 0 }));
      expect(folded.granted).to.equal(false);
      await advance(700);
      const later = await store.reserve(request({ rules, maxDelayMs: 0 }));
      expect(later.granted).to.equal(false);
      expect(later.startAt).to.equal(folded.startAt);
      expect(later.startAt).to.equal(Math.ceil((booked.startAt + 1) / 10) * 10 + 1_000);
    });

    it('bucketed rules with the same window and bucket width count each call once', async () => {
      const { store, advance } = make();
      // A duplicate, and a second limit over the same window ('1500/day' with '3000/day').
      const rules = [{ limit: 3, windowMs: 1_000, bucketMs: 100 }, { limit: 3, windowMs: 1_000, bucketMs: 100 }, { limit: 6, windowMs: 1_000, bucketMs: 100 }];
      const booked = await store.reserve(request({ rules, cost: 2, holdMs: 10 }));
      await store.settle('ns', 'k', booked.members.map((member) => ({ member, releaseAt: booked.startAt + 1 })), 1_000);
      await advance(5);
      // Folded once, the two calls leave room for a third under 3 per window.
      const third = await store.reserve(request({ rules, maxDelayMs: 0, holdMs: 10 }));
      expect(third.granted).to.equal(true);
      expect((await store.inspect('ns', 'k', rules)).rules.map((rule) => rule.used)).to.deep.equal([3, 3, 3]);
      await store.settle('ns', 'k', [{ member: third.members[0]!, releaseAt: third.startAt + 1 }], 1_000);
      await advance(5);
      const fourth = await store.reserve(request({ rules, maxDelayMs: 0 }));
      expect(fourth.granted).to.equal(false);
      expect(fourth.startAt).to.equal(Math.ceil((booked.startAt + 1) / 100) * 100 + 1_000);
    });

    it('starts nothing during a vendor pause, keeps the longer pause, and reports it', async () => {
      const { store } = make();
      const rules = [{ limit: 5, windowMs: 1_000 }];
      const first = await store.reserve(request({ rules }));
      const end = await store.pause('ns', 'k', 3_000, 1_000);
      expect(end - first.now).to.be.within(2_995, 3_050);
      expect(await store.pause('ns', 'k', 100, 1_000)).to.equal(end);
      const refused = await store.reserve(request({ rules, maxDelayMs: 0 }));
      expect(refused.granted).to.equal(false);
      expect(refused.ruleIndex).to.equal(-2);
      expect(refused.startAt).to.equal(end);
      const usage = await store.inspect('ns', 'k', rules);
      expect(usage.pausedForMs).to.be.within(2_900, 3_001);
      expect(usage.nextFreeInMs).to.equal(usage.pausedForMs);
      const other = await store.reserve(request({ rules, key: 'other', maxDelayMs: 0 }));
      expect(other.granted).to.equal(true);
    });

    it('matches the reference model on random sequences, and no window ever holds more than its limit', async function () {
      this.timeout(60_000);
      const ruleSets: Rule[][] = [
        [{ limit: 3, windowMs: 40 }],
        [{ limit: 2, windowMs: 15 }, { limit: 5, windowMs: 60 }],
        [{ limit: 4, windowMs: 30 }],
      ];
      const op = fc.oneof(
        fc.record({ kind: fc.constant('reserve' as const), key: fc.constantFrom('a', 'b'), cost: fc.integer({ min: 1, max: 2 }), throw: fc.boolean(), rules: fc.nat(ruleSets.length - 1) }),
        fc.record({ kind: fc.constant('complete' as const), pick: fc.nat(), after: fc.nat(8) }),
        fc.record({ kind: fc.constant('release' as const), pick: fc.nat() }),
        fc.record({ kind: fc.constant('wait' as const), ms: fc.integer({ min: 1, max: 12 }) }),
      );
      await fc.assert(
        fc.asyncProperty(fc.array(op, { minLength: 5, maxLength: 40 }), async (ops) => {
          const subject = make();
          const model = new ReferenceModel();
          const holdMs = 8;
          const granted: Array<{ key: string; member: string; start: number; release: number; cost: number; settled: boolean; ruleSet: number }> = [];
          for (const step of ops) {
            if (step.kind === 'wait') {
              await subject.advance(step.ms);
            } else if (step.kind === 'reserve') {
              const rules = ruleSets[step.rules]!;
              const retainMs = 60;
              const result = await subject.store.reserve(request({ key: step.key, rules, cost: step.cost, maxDelayMs: step.throw ? 0 : Infinity, holdMs, retainMs }));
              const expected = model.reserve(step.key, result.now, { rules, cost: step.cost, maxDelayMs: step.throw ? 0 : Infinity, holdMs, retainMs });
              expect(result.startAt, 'startAt').to.equal(expected.startAt);
              expect(result.granted, 'granted').to.equal(expected.granted);
              expect(result.members).to.deep.equal(expected.members);
              if (result.granted) {
                for (const member of result.members) granted.push({ key: step.key, member, start: result.startAt, release: result.startAt + holdMs, cost: 1, settled: false, ruleSet: step.rules });
              }
            } else {
              const open = granted.filter((g) => !g.settled);
              const target = open[step.pick % Math.max(1, open.length)];
              if (!target) continue;
              target.settled = true;
              const releaseAt = step.kind === 'release' ? null : target.start + Math.min(step.after, holdMs);
              const now = (await subject.store.inspect(subject.namespace, target.key, ruleSets[0]!)).now;
              await subject.store.settle(subject.namespace, target.key, [{ member: target.member, releaseAt }], 60);
              model.settle(target.key, now, target.member, releaseAt, 60);
              if (releaseAt === null) granted.splice(granted.indexOf(target), 1);
              else target.release = releaseAt;
            }
          }
          for (const key of ['a', 'b']) {
            const calls = granted.filter((g) => g.key === key);
            for (const [index, rules] of ruleSets.entries()) {
              // Each call was placed under its own rule set: check it against the calls booked before it.
              calls.forEach((call, booked) => {
                if (call.ruleSet !== index) return;
                const earlier = calls.slice(0, booked);
                for (const rule of rules) {
                  const inWindow = earlier.filter((g) => g.release + rule.windowMs > call.start).length;
                  expect(inWindow, `call ${booked} under ${rule.limit}/${rule.windowMs}`).to.be.at.most(rule.limit - 1);
                }
              });
            }
            for (const rules of ruleSets.slice(0, 1)) {
              if (calls.every((g) => g.ruleSet === 0)) expect(maxInWindow(calls.map((g) => g.start), rules[0]!.windowMs)).to.be.at.most(rules[0]!.limit);
            }
          }
          await subject.store.close();
        }),
        { numRuns: name === 'RedisStore' ? 40 : 150 },
      );
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
    expect(result.granted).to.equal(true);
  });

  it('lets idle keys expire after their longest window', async () => {
    const client = redisClient();
    const prefix = uniquePrefix();
    const store = redisStore(client, { prefix });
    await store.reserve(request({ rules: [{ limit: 5, windowMs: 2_000 }], holdMs: 100 }));
    const { log, meta, flight } = keyNames(prefix, 'ns', 'k');
    for (const key of [log, meta, flight]) expect(await client.pttl(key)).to.be.within(1_900, 2_100);
  });

  it('gives every key a time to live of its own: a flight set that comes back after its last completion', async () => {
    const client = redisClient();
    const prefix = uniquePrefix();
    const store = redisStore(client, { prefix });
    const rules = [{ limit: 5, windowMs: 2_000 }];
    const first = await store.reserve(request({ rules, holdMs: 10, maxHoldMs: 1_000 }));
    await store.settle('ns', 'k', [{ member: first.members[0]!, releaseAt: first.startAt + 5 }], 2_000);
    const { log, meta, flight } = keyNames(prefix, 'ns', 'k');
    // The completion emptied the flight set (Redis deleted it); the next booking writes it again.
    expect(await client.exists(flight)).to.equal(0);
    await store.reserve(request({ rules, holdMs: 10, maxHoldMs: 1_000 }));
    // Were it never settled (its worker died), the flight set must still go away by itself.
    for (const key of [log, meta, flight]) expect(await client.pttl(key), key).to.be.within(1_900, 4_100);
  });

  it('deletes the buckets that no longer count and keeps n equal to the calls in the live ones', async () => {
    const client = redisClient();
    const prefix = uniquePrefix();
    const store = redisStore(client, { prefix });
    // 10 buckets of 20 ms per 200 ms window; the 2 s rule keeps meta alive through the idle spell below.
    const rules = [{ limit: 1_000, windowMs: 200, bucketMs: 20 }, { limit: 5_000, windowMs: 2_000, bucketMs: 1_000 }];
    const { meta } = keyNames(prefix, 'ns', 'k');
    const bucketsOf = async (group: string) => {
      const all = await client.hgetall(meta);
      const fields = Object.keys(all).filter((field) => new RegExp(`^b:${group}:\\d+$`).test(field));
      return { fields: fields.length, calls: fields.reduce((sum, field) => sum + Number(all[field]), 0), n: Number(all[`b:${group}:n`]) };
    };
    let calls = 0;
    const started = performance.now();
    while (performance.now() - started < 600) {
      const booked = await store.reserve(request({ rules, holdMs: 1 }));
      await store.settle('ns', 'k', [{ member: booked.members[0]!, releaseAt: booked.startAt + 1 }], 2_000);
      calls++;
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    // Three windows of steady use: at most the live buckets (10, or 11 across a bucket's end) remain.
    const steady = await bucketsOf('200:20');
    expect(steady.fields).to.be.within(1, 11);
    expect(steady.n).to.equal(steady.calls);
    // 25 bucket widths without a decision (more than meta has fields): one decision deletes them all.
    await new Promise((resolve) => setTimeout(resolve, 500));
    await store.reserve(request({ rules, holdMs: 1 }));
    expect(await bucketsOf('200:20')).to.deep.equal({ fields: 0, calls: 0, n: 0 });
    const long = await bucketsOf('2000:1000');
    expect(long.n).to.equal(long.calls);
    expect(long.calls).to.equal(calls);
  });

  it('a bucketed 100000/day key holds 20,000 completed calls in its window in under 4 KB', async () => {
    const client = redisClient();
    const prefix = uniquePrefix();
    const store = redisStore(client, { prefix });
    const rules = [{ limit: 100_000, windowMs: 86_400_000, bucketMs: 86_400_000 / 50 }];
    const members: string[] = [];
    for (let i = 0; i < 20; i++) members.push(...(await store.reserve(request({ rules, cost: 1_000, holdMs: 10 }))).members);
    // Completions spread over the last 20 hours, as a day of steady use would leave them.
    const now = Number((await client.time())[0]) * 1_000;
    for (let from = 0; from < members.length; from += 2_000) {
      const settle = members.slice(from, from + 2_000).map((member, i) => ({ member, releaseAt: now - (from + i) * 3_600 }));
      await store.settle('ns', 'k', settle, 86_400_000);
    }
    // The next decision folds them into buckets.
    expect((await store.reserve(request({ rules, holdMs: 10 }))).granted).to.equal(true);
    const { log, meta, flight } = keyNames(prefix, 'ns', 'k');
    let bytes = 0;
    for (const key of [log, meta, flight]) bytes += Number((await client.memory('USAGE', key)) ?? 0);
    expect(bytes).to.be.below(4_096);
    expect((await store.inspect('ns', 'k', rules)).rules[0]!.used).to.equal(20_001);
  });

  it('never leaves the prefix, and keeps the client open on close', async () => {
    const client = redisClient();
    const prefix = uniquePrefix();
    const store = redisStore(client, { prefix });
    await store.reserve(request({ rules: [{ limit: 5, windowMs: 1_000 }], key: 'x' }));
    await store.close();
    const keys = await client.keys(`${prefix}:*`);
    // One epoch key per namespace (never expires, a few bytes), three keys per user key.
    expect(keys.sort()).to.deep.equal([`${prefix}:ns:epoch`, `${prefix}:ns:{x}:flight`, `${prefix}:ns:{x}:log`, `${prefix}:ns:{x}:meta`]);
    expect(await client.ping()).to.equal('PONG');
  });
});
