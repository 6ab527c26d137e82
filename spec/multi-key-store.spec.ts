/**
 * Calls that count in several keys at once (`ReserveRequest.also`), at the store: one atomic
 * decision over every key's rules, pinned to the reference model for the MemoryStore and the
 * RedisStore alike, and no key's window ever holding more than its limit, whether its calls came
 * alone or with other keys.
 */
import { expect } from 'chai';
import fc from 'fast-check';
import type { Rule } from '../lib/rules.js';
import type { KeyPart, ReserveRequest, Store } from '../lib/store.js';
import { MemoryStore } from '../lib/stores/memory-store.js';
import { maxInWindow } from '../scripts/sim-vendor.js';
import { redisClient, redisStore, uniquePrefix } from './support/hooks.js';
import { bookedSlot, claimed, claimPinned, type BookedSlot } from './support/claims.js';
import { ReferenceModel, type ModelDecision } from './support/model.js';

interface Subject {
  readonly store: Store;
  advance(ms: number): Promise<void>;
  /** The store's exact clock, where the test controls it (MemoryStore). */
  readonly clock?: () => number;
}

const subjects: Array<{ name: string; make: () => Subject }> = [
  {
    name: 'MemoryStore',
    make: () => {
      let clock = 1_000_000;
      return { store: new MemoryStore({ now: () => clock }), advance: async (ms) => void (clock += ms), clock: () => clock };
    },
  },
  {
    name: 'RedisStore',
    make: () => ({
      store: redisStore(redisClient(), { prefix: uniquePrefix() }),
      advance: (ms) => new Promise((resolve) => setTimeout(resolve, Math.ceil(ms) + 1)),
    }),
  },
  {
    name: "RedisStore, hashTag 'name'",
    make: () => ({
      store: redisStore(redisClient(), { prefix: uniquePrefix(), hashTag: 'name' }),
      advance: (ms) => new Promise((resolve) => setTimeout(resolve, Math.ceil(ms) + 1)),
    }),
  },
];

const USER: Rule[] = [{ limit: 2, windowMs: 40 }];
const APP: Rule[] = [{ limit: 3, windowMs: 30 }];

function part(key: string, rules: readonly Rule[]): KeyPart {
  return { key, rules, retainMs: Math.max(...rules.map((rule) => rule.windowMs)) };
}

function request(keys: readonly KeyPart[], overrides: Partial<ReserveRequest> = {}): ReserveRequest {
  const [first, ...also] = keys;
  return { namespace: 'ns', ...first!, also, cost: 1, maxDelayMs: Infinity, maxHoldMs: 0, ...overrides };
}

for (const { name, make } of subjects) {
  describe(`calls of several keys at the store: ${name}`, () => {
    it('books in every key or in none: a full app key holds back a free user, and the user key keeps nothing', async () => {
      const { store, advance } = make();
      const app = part('app', [{ limit: 2, windowMs: 60_000 }]);
      const user = part('u1', [{ limit: 5, windowMs: 60_000 }]);
      for (const other of ['u2', 'u3']) {
        expect((await store.reserve(request([part(other, USER), app], { maxHoldMs: 1 }))).status).to.equal('booked');
      }
      await advance(2);
      const refused = await store.reserve(request([user, app], { maxDelayMs: 1_000 }));
      // The app rule (index 1: the user's rules come first) binds; nothing is booked in u1.
      expect(refused).to.deep.include({ status: 'refused', ruleIndex: 1, members: [] });
      expect((await store.inspect('ns', 'u1', user.rules)).rules[0]!.used).to.equal(0);
      expect((await store.inspect('ns', 'app', app.rules)).rules[0]!.used).to.equal(2);
      // Waiting for it: booked in both at the app's time, with the same members.
      const booked = await store.reserve(request([user, app]));
      expect(booked.status).to.equal('booked');
      expect(booked.waitMs).to.be.within(59_000, 60_000);
      expect((await store.inspect('ns', 'u1', user.rules)).rules[0]!.used).to.equal(1);
      expect((await store.inspect('ns', 'app', app.rules)).rules[0]!.used).to.equal(3);
    });

    it('defers on the key whose binding call is in flight, and a completion there lets it book', async () => {
      const { store, advance } = make();
      const app = part('app', [{ limit: 1, windowMs: 0 }]);
      const first = await store.reserve(request([part('u1', USER), app], { maxHoldMs: 500 }));
      expect(first.status).to.equal('booked');
      const second = await store.reserve(request([part('u2', USER), app], { maxHoldMs: 500 }));
      expect(second).to.deep.include({ status: 'deferred', members: [] });
      await advance(3);
      for (const key of ['u1', 'app'])
        await store.settle(
          'ns',
          key,
          first.members.map((member) => ({ member, releaseAt: first.startAt + 2 })),
        );
      await advance(1);
      expect((await store.reserve(request([part('u2', USER), app], { maxHoldMs: 500 }))).status).to.equal('booked');
    });

    it('matches the reference model on random sequences, and no key ever holds more than its limit', async function () {
      this.timeout(90_000);
      const exactClock = make().clock !== undefined;
      // u2 also caps its calls in flight (window 0).
      const rulesOf: Record<string, readonly Rule[]> = {
        u1: USER,
        u2: [
          { limit: 3, windowMs: 30 },
          { limit: 2, windowMs: 0 },
        ],
        app: APP,
      };
      const keySets = [['u1'], ['u2'], ['app'], ['u1', 'app'], ['app', 'u2'], ['u1', 'u2', 'app']] as const;
      const maxHoldMs = 8;
      /** A reservation's grace (`reservationGraceMs`). */
      const GRACE_MS = 20;
      const delays = [0, 15, Infinity];
      const op = fc.oneof(
        {
          weight: 6,
          arbitrary: fc.record({
            kind: fc.constant('reserve' as const),
            keys: fc.nat(keySets.length - 1),
            cost: fc.integer({ min: 1, max: 2 }),
            delay: fc.nat(delays.length - 1),
            // A reservation (`Throttle.reserve`), one in two: never deferred, its slot held a grace longer.
            reserved: fc.boolean(),
          }),
        },
        { weight: 2, arbitrary: fc.record({ kind: fc.constant('complete' as const), pick: fc.nat(), after: fc.nat(maxHoldMs + 4) }) },
        { weight: 1, arbitrary: fc.record({ kind: fc.constant('release' as const), pick: fc.nat() }) },
        // A reservation's call, made with its token: a claim in every key at once.
        // `settle`: the calls it depends on complete first; `wait`: told to wait, it waits and claims again, as a throttle does.
        {
          weight: 3,
          arbitrary: fc.record({ kind: fc.constant('claim' as const), pick: fc.nat(), settle: fc.boolean(), wait: fc.boolean() }),
        },
        { weight: 3, arbitrary: fc.record({ kind: fc.constant('wait' as const), ms: fc.integer({ min: 1, max: 12 }), half: fc.boolean() }) },
        {
          weight: 1,
          arbitrary: fc.record({ kind: fc.constant('pause' as const), key: fc.constantFrom('u1', 'u2', 'app'), ms: fc.integer({ min: 1, max: 20 }) }),
        },
      );
      const counts = { booked: 0, deferred: 0, refused: 0, several: 0, claimedSeveral: 0 };
      await fc.assert(
        fc.asyncProperty(fc.array(op, { minLength: 5, maxLength: 40 }), async (ops) => {
          const subject = make();
          const { store } = subject;
          const model = new ReferenceModel();
          const booked: Array<BookedSlot & { keys: readonly string[] }> = [];
          const seenMembers = new Set<string>();
          for (const step of ops) {
            if (step.kind === 'wait') {
              await subject.advance(step.ms + (step.half && exactClock ? 0.5 : 0));
            } else if (step.kind === 'pause') {
              const until = await store.pause('ns', step.key, step.ms);
              expect(until, 'pause end').to.equal(model.pause(step.key, until));
            } else if (step.kind === 'reserve') {
              const keys = keySets[step.keys]!;
              const parts = keys.map((key) => part(key, rulesOf[key]!));
              const hold = step.reserved ? maxHoldMs + GRACE_MS : maxHoldMs;
              const modelRequest = {
                cost: step.cost,
                maxDelayMs: delays[step.delay]!,
                maxHoldMs: hold,
                ...(step.reserved ? { reserved: true, graceMs: GRACE_MS } : {}),
              };
              const exact = subject.clock?.();
              const result = await store.reserve(request(parts, modelRequest));
              const got: ModelDecision = {
                status: result.status,
                startAt: result.startAt,
                waitMs: result.waitMs,
                retryMs: result.retryMs,
                ruleIndex: result.ruleIndex,
              };
              // Redis reads a fractional clock the answer does not show: its rounding may go either way.
              const nows = exact !== undefined ? [exact] : [result.now, result.now - 0.5];
              const candidates = nows.map((now) => model.decideKeys(parts, now, modelRequest));
              const expected = candidates.find((candidate) => JSON.stringify(candidate) === JSON.stringify(got)) ?? candidates[0]!;
              expect(got, `decision for ${keys.join('+')}`).to.deep.equal(expected);
              for (const key of keys) model.apply(key, expected, modelRequest, result.members);
              counts[result.status] += 1;
              if (keys.length > 1 && result.status === 'booked') counts.several += 1;
              for (const member of result.members) {
                expect(seenMembers.has(member), 'member reused').to.equal(false);
                seenMembers.add(member);
              }
              if (result.status === 'booked') booked.push({ keys, ...bookedSlot(result, hold, step.cost, step.reserved === true) });
            } else if (step.kind === 'claim') {
              const claimable = booked.filter((b) => b.reserved?.claimable === true);
              const target = claimable[step.pick % Math.max(1, claimable.length)];
              if (!target) continue;
              const retains = target.keys.map((key) => part(key, rulesOf[key]!).retainMs);
              const claim = {
                members: target.members,
                bound: target.reserved!.bound,
                startAt: target.start,
                graceMs: GRACE_MS,
                maxHoldMs,
                deps: target.reserved!.deps,
              };
              const [first, ...also] = target.keys.map((key, k) => ({ key, retainMs: retains[k]! }));
              if (step.settle) {
                const now = (await store.inspect('ns', 'probe', USER)).now;
                const named = (b: (typeof booked)[number]) => claim.deps.some(([d, , p = 0]) => b.members.includes(d) && b.keys.includes(target.keys[p]!));
                for (const dep of booked.filter((b) => b.open && b.reserved === undefined && b.start <= now && named(b))) {
                  dep.open = false;
                  dep.release = Math.min(dep.release, now);
                  for (const key of dep.keys) {
                    await store.settle(
                      'ns',
                      key,
                      dep.members.map((member) => ({ member, releaseAt: now })),
                    );
                    for (const member of dep.members) model.settle(key, member, now);
                  }
                }
              }
              const request = { namespace: 'ns', ...first!, also, ...claim };
              const result = await claimPinned(subject, store, model, target.keys, request, { ...claim, retainMs: retains }, step.wait);
              if (result.status === 'started' && target.keys.length > 1) counts.claimedSeveral += 1;
              claimed(result, target, booked, seenMembers, maxHoldMs);
            } else {
              // Completions come from calls that started; releases from calls that never will.
              const now = (await store.inspect('ns', 'probe', USER)).now;
              const open = booked.filter((b) => b.open && b.reserved === undefined && (step.kind === 'release' || b.start <= now));
              const target = open[step.pick % Math.max(1, open.length)];
              if (!target) continue;
              target.open = false;
              const releaseAt = step.kind === 'release' ? null : Math.min(target.start + step.after, now);
              for (const key of target.keys) {
                await store.settle(
                  'ns',
                  key,
                  target.members.map((member) => ({ member, releaseAt })),
                );
                for (const member of target.members) model.settle(key, member, releaseAt);
              }
              if (releaseAt === null) booked.splice(booked.indexOf(target), 1);
              else target.release = Math.min(target.release, releaseAt);
            }
          }
          for (const key of ['u1', 'u2', 'app']) {
            const calls = booked.filter((b) => b.keys.includes(key));
            // A reservation not claimed is a slot that counts, not a call.
            calls.forEach((call, index) => {
              if (call.reserved !== undefined) return;
              for (const rule of rulesOf[key]!) {
                const counting = calls
                  .slice(0, index)
                  .filter((b) => b.release + rule.windowMs > call.start)
                  .reduce((sum, b) => sum + b.cost, 0);
                expect(counting, `${key}: call ${index} under ${rule.limit}/${rule.windowMs}`).to.be.at.most(rule.limit - call.cost);
              }
            });
            const started = calls.filter((call) => call.reserved === undefined);
            const starts = started.flatMap((call) => Array.from({ length: call.cost }, () => call.start));
            for (const rule of rulesOf[key]!) {
              if (rule.windowMs > 0) expect(maxInWindow(starts, rule.windowMs), `${key}: ${rule.limit}/${rule.windowMs}`).to.be.at.most(rule.limit);
              else
                for (const call of started) {
                  const inFlight = started.filter((b) => b.start <= call.start && b.release > call.start).reduce((sum, b) => sum + b.cost, 0);
                  expect(inFlight, `${key}: ${rule.limit} concurrent at ${call.start}`).to.be.at.most(rule.limit);
                }
            }
            for (const call of calls) expect(call.release - call.start).to.be.within(0, call.hold);
          }
          await store.close();
        }),
        { numRuns: name.startsWith('RedisStore') ? 100 : 200 },
      );
      expect(counts.booked).to.be.above(0);
      expect(counts.deferred).to.be.above(0);
      expect(counts.refused).to.be.above(0);
      expect(counts.several, 'calls of several keys booked').to.be.above(0);
      expect(counts.claimedSeveral, 'reservations of several keys claimed').to.be.above(0);
    });
  });
}
