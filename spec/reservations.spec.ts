/**
 * Reserve now, call later (`Throttle.reserve`, `schedule(key, fn, { token })`): a slot booked in the
 * key's log for a call another process makes, at its time, once. On every store: the in-process
 * one, Redis on ioredis, and Redis over HTTP (@upstash/redis through scripts/support/upstash-rest.ts).
 */
import { Redis as UpstashRedis } from '@upstash/redis';
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { MemoryStore, RedisStore, RateLimitedError, ReservationError, Throttle, ThrottleConfigError, type Store, type ThrottleOptions } from '../lib/index.js';
import { startRedis, type RedisServer } from '../scripts/support/redis-server.js';
import { startUpstashRest, type UpstashRest } from '../scripts/support/upstash-rest.js';
import { delegatingStore } from './support/delegating-store.js';
import { redisClient, redisServer, redisStore, uniquePrefix } from './support/hooks.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/**
 * A process that books a call of `u1` to start a window later (it sleeps until then), then reserves
 * a slot after it, on ioredis with its liveness stamps; prints the reservation and stays until killed.
 */
const RESERVER = [
  "const { Redis } = await import('ioredis');",
  "const { RedisStore, Throttle } = await import('./lib/index.ts');",
  'const store = new RedisStore(new Redis(process.env.REDIS_URL), { prefix: process.env.PREFIX });',
  "const throttle = new Throttle({ name: 'acme', rules: ['1/s'], store, maxHoldMs: 500, reservationGraceMs: 2000 });",
  "await throttle.schedule('u1', () => undefined);",
  "void throttle.schedule('u1', () => undefined).catch(() => undefined);",
  'await new Promise((resolve) => setTimeout(resolve, 100));',
  "const reservation = await throttle.reserve('u1');",
  'console.log(JSON.stringify(reservation));',
  'setInterval(() => undefined, 1_000);',
].join('\n');

/** A token's content, as `lib/reservations.ts` writes it (what a hostile caller could read and alter). */
function contentOf(token: string): TokenFields {
  return JSON.parse(Buffer.from(token.slice('vt1.'.length), 'base64url').toString('utf8')) as TokenFields;
}

/** The fields of a token: throttle, key, members, bound, start, dependencies. */
interface TokenFields {
  n: string;
  k: string;
  a?: string[];
  m: string[];
  b: number;
  s: number;
  d?: Array<[string, number, number?]>;
}

function tokenOf(content: object): string {
  return `vt1.${Buffer.from(JSON.stringify(content)).toString('base64url')}`;
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  return expect.fail('expected a rejection');
}

interface Subject {
  readonly name: string;
  /** A store of the subject: for a shared subject, each one as another process's. */
  readonly store: () => Store;
  /** Stores of one subject share their keys (a Redis). */
  readonly shared: boolean;
}

let rest: UpstashRest | undefined;
let prefix = '';

const SUBJECTS: readonly Subject[] = [
  { name: 'MemoryStore', store: () => new MemoryStore(), shared: false },
  { name: 'RedisStore (ioredis)', store: () => redisStore(redisClient(), { prefix }), shared: true },
  {
    name: 'RedisStore (@upstash/redis, over HTTP)',
    store: () => redisStore(new UpstashRedis({ url: rest!.url, token: rest!.token, retry: false }), { prefix }),
    shared: true,
  },
];

describe('Reservations: reserve now, call later', function () {
  this.timeout(20_000);
  const throttles: Throttle[] = [];

  before(async () => {
    rest = await startUpstashRest(redisServer().url);
  });
  after(async () => {
    await rest?.close();
  });
  afterEach(async () => {
    await Promise.all(throttles.splice(0).map((throttle) => throttle.close()));
  });

  for (const subject of SUBJECTS) {
    describe(subject.name, () => {
      let memory: MemoryStore;
      beforeEach(() => {
        prefix = uniquePrefix();
        memory = new MemoryStore();
      });
      /** A throttle as one process's: on Redis, with a store of its own. */
      const open = (options: Partial<ThrottleOptions> = {}): Throttle => {
        const store = subject.shared ? subject.store() : memory;
        const throttle = new Throttle({ name: 'acme', rules: ['2/300ms'], maxHoldMs: 200, reservationGraceMs: 1_000, ...options, store });
        throttles.push(throttle);
        return throttle;
      };

      it('books the slot in the log for every process, and a call made with the token starts on it, at its time', async () => {
        const reserver = open();
        const caller = open();
        const askedAt = performance.now();
        const first = await reserver.reserve('u1');
        expect(first.waitMs).to.equal(0);
        // The grace from the start, less the round trip (the store decided somewhere in it).
        expect(first.claimBy - first.startAt).to.be.within(1, 1_000);
        const second = await reserver.reserve('u1');
        // A third is not deferred behind the two not yet claimed: it starts a window after the
        // first could release (at its start, or now if later), and depends on it.
        const third = await reserver.reserve('u1');
        const elapsed = performance.now() - askedAt;
        expect(contentOf(third.token).s - contentOf(first.token).s).to.be.within(300, 300 + Math.ceil(elapsed) + 1);
        expect(contentOf(third.token).d).to.deep.equal([[contentOf(first.token).m[0], 300]]);
        expect((await caller.inspect('u1')).bookedAhead).to.be.at.least(1);
        // A call of another process finds the window full.
        expect(await rejection(caller.schedule('u1', () => 'x', { maxDelayMs: 0 }))).to.be.instanceOf(RateLimitedError);
        expect(await caller.schedule('u1', () => 'first', { token: first.token })).to.equal('first');
        expect(await caller.schedule('u1', () => 'second', { token: second.token })).to.equal('second');
        let startedAt = 0;
        await caller.schedule('u1', () => (startedAt = Date.now()), { token: third.token });
        expect(startedAt).to.be.within(third.startAt - 5, third.claimBy);
      });

      it('refuses a token used twice, for another key, or of another throttle, with nothing called', async () => {
        const throttle = open();
        const { token } = await throttle.reserve('u1');
        let calls = 0;
        await throttle.schedule('u1', () => calls++, { token });
        const used = await rejection(throttle.schedule('u1', () => calls++, { token }));
        expect(used).to.be.instanceOf(ReservationError).with.property('reason', 'used');
        const other = await throttle.reserve('u2');
        const otherKey = await rejection(throttle.schedule('u1', () => calls++, { token: other.token }));
        expect(otherKey).to.be.instanceOf(ReservationError).with.property('reason', 'otherKey');
        const otherName = await rejection(open({ name: 'globex' }).schedule('u2', () => calls++, { token: other.token }));
        expect(otherName).to.be.instanceOf(ReservationError).with.property('reason', 'otherThrottle');
        expect(calls).to.equal(1);
        // The token refused for another key is still good for its own.
        await throttle.schedule('u2', () => calls++, { token: other.token });
        expect(calls).to.equal(2);
      });

      it('refuses a token past its grace; its slot counts to its bound', async () => {
        const throttle = open({ reservationGraceMs: 0 });
        const { token } = await throttle.reserve('u1');
        await new Promise((resolve) => setTimeout(resolve, 30));
        const late = await rejection(throttle.schedule('u1', () => 'late', { token }));
        expect(late).to.be.instanceOf(ReservationError).with.property('reason', 'late');
        const usage = await throttle.inspect('u1');
        expect(usage.rules[0]!.used + usage.bookedAhead).to.equal(1);
      });

      it('waits for a slot not yet started, within maxDelayMs; further, refuses it as early', async () => {
        const throttle = open();
        await throttle.reserve('u1');
        await throttle.reserve('u1');
        const later = await throttle.reserve('u1');
        const early = await rejection(throttle.schedule('u1', () => 'early', { token: later.token, maxDelayMs: 100 }));
        expect(early).to.be.instanceOf(ReservationError).with.property('reason', 'early');
        // Further than the call's maxDelayMs, and no further than the slot's start (its ms rounded up).
        expect((early as ReservationError).retryAfterMs).to.be.within(101, 1_501);
        let startedAt = 0;
        await throttle.schedule('u1', () => (startedAt = Date.now()), { token: later.token });
        expect(startedAt).to.be.at.least(later.startAt - 5);
      });

      it('books again when the slot moved (a vendor pause since): the call starts after the pause', async () => {
        const throttle = open();
        await throttle.reserve('u1');
        await throttle.reserve('u1');
        const later = await throttle.reserve('u1');
        await throttle.pause('u1', later.waitMs + 100);
        const pausedUntil = Date.now() + later.waitMs + 100;
        let startedAt = 0;
        await throttle.schedule('u1', () => (startedAt = Date.now()), { token: later.token });
        expect(startedAt).to.be.at.least(pausedUntil - 15);
        // Used (or, its mark gone with its grace, late): never a second call on it.
        const again = await rejection(throttle.schedule('u1', () => 'again', { token: later.token }));
        expect(again).to.be.instanceOf(ReservationError);
        expect((again as ReservationError).reason).to.be.oneOf(['used', 'late']);
      });

      it('refuses malformed and altered tokens, and never takes a slot a call booked for itself', async () => {
        const throttle = open({ rules: ['1/300ms'] });
        const { token } = await throttle.reserve('u1');
        const content = contentOf(token);
        for (const bad of [
          '',
          'vt1.',
          'vt1.e30',
          'vt1.!!',
          `vt1.${'A'.repeat(70_000)}`,
          tokenOf({ ...content, x: 1 }),
          tokenOf({ ...content, m: [] }),
          tokenOf({ ...content, b: -1 }),
          // Keys named twice; a dependency in a key the token does not name.
          tokenOf({ ...content, a: [content.k] }),
          tokenOf({ ...content, d: [['1', 300, 1]] }),
        ]) {
          const error = await rejection(throttle.schedule('u1', () => 'bad', { token: bad }));
          expect(error, bad.slice(0, 20)).to.be.instanceOf(ReservationError).with.property('reason', 'malformed');
        }
        expect(await rejection(throttle.schedule('u1', () => 'bad', { token: 42 as never }))).to.be.instanceOf(ThrottleConfigError);
        expect(await rejection(throttle.schedule('u1', () => 'bad', { token, cost: 2 }))).to.be.instanceOf(ThrottleConfigError);
        // A token altered to name the slot of a call booked ahead by a process for itself: the call
        // books a slot of its own (after the reserved one and the sleeper), and the sleeper keeps its slot.
        const sleeper = throttle.schedule('u1', () => Date.now());
        await new Promise((resolve) => setTimeout(resolve, 20));
        const usage = await throttle.inspect('u1');
        // Over HTTP the sleeper holds a reservation of its own (a store that announces nothing), counted beside the first.
        const http = subject.name.includes('HTTP');
        expect(usage.bookedAhead).to.equal(http ? 2 : 1);
        // The sleeper's member: the store's next number after the reservation's (MemoryStore), the
        // first of the process's own (RedisStore), or over HTTP its reservation's, the next.
        const reserved = content.m[0]!;
        let regular = reserved.startsWith('r') ? String(Number(reserved.slice(1)) + 1) : reserved.replace(/^\d+/, '1');
        if (http) regular = reserved.replace(/^\d+/, (number) => String(Number(number) + 1));
        const forged = await throttle.schedule('u1', () => Date.now(), { token: tokenOf({ ...content, m: [regular] }) }).catch((error: unknown) => error);
        const sleptUntil = await sleeper;
        if (typeof forged === 'number') expect(Math.abs(forged - sleptUntil)).to.be.at.least(250);
        else expect(forged).to.be.instanceOf(ReservationError);
      });

      it('marks a reservation used only once its slots are found: an altered token books as any call, and leaves the real one good', async () => {
        const throttle = open({ rules: ['4/300ms'] });
        const { token } = await throttle.reserve('u1', { cost: 2 });
        const content = contentOf(token);
        let calls = 0;
        // Its bound altered: no slot of it is found, nothing is marked, the call books a slot of its own.
        await throttle.schedule('u1', () => calls++, { token: tokenOf({ ...content, b: content.b + 1 }) });
        expect(calls).to.equal(1);
        await throttle.schedule('u1', () => calls++, { token });
        expect(calls).to.equal(2);
        // Its members in another order: the same reservation, used.
        const reordered = await rejection(throttle.schedule('u1', () => calls++, { token: tokenOf({ ...content, m: [...content.m].reverse() }) }));
        expect(reordered).to.be.instanceOf(ReservationError).with.property('reason', 'used');
        // A start altered earlier: the call still waits for the slot's own (its bound less this process's hold and grace).
        const later = await throttle.reserve('u1', { cost: 2 });
        const altered = contentOf(later.token);
        let startedAt = 0;
        await throttle.schedule('u1', () => (startedAt = Date.now()), { token: tokenOf({ ...altered, s: altered.s - 10_000 }) });
        expect(startedAt).to.be.at.least(later.startAt - 5);
        expect(calls).to.equal(2);
      });

      it('reserves behind calls in flight without waiting for them: the call starts a window after the one it depends on released', async () => {
        const throttle = open();
        let release!: () => void;
        const gate = new Promise<void>((resolve) => (release = resolve));
        let started = 0;
        const flying = [1, 2].map(() => throttle.schedule('u1', () => (started++, gate)));
        while (started < 2) await new Promise((resolve) => setTimeout(resolve, 5));
        const askedAt = Date.now();
        const reservation = await throttle.reserve('u1');
        // Not deferred: booked a window after now, on the first call's release by then.
        expect(reservation.startAt - askedAt).to.be.within(295, 300 + (Date.now() - askedAt) + 1);
        expect(contentOf(reservation.token).d).to.have.length(1);
        await new Promise((resolve) => setTimeout(resolve, 100));
        release();
        await Promise.all(flying);
        const releasedAt = Date.now();
        let startedAt = 0;
        await throttle.schedule('u1', () => (startedAt = Date.now()), { token: reservation.token });
        // At its time it waits until that call released a window before, and no longer.
        expect(startedAt).to.be.at.least(releasedAt + 300 - 5);
        expect(startedAt).to.be.at.most(reservation.claimBy);
      });

      it('reserves behind a cap on calls in flight: its dependency counts for a window of 0, and its call starts once that call completed', async () => {
        const throttle = open({ rules: ['1 concurrent'] });
        let release!: () => void;
        let completedAt = 0;
        const running = throttle.schedule('u1', () => new Promise<void>((resolve) => (release = resolve)).then(() => (completedAt = Date.now())));
        while (release === undefined) await new Promise((resolve) => setTimeout(resolve, 5));
        const reservation = await throttle.reserve('u1');
        expect(contentOf(reservation.token).d).to.deep.equal([[contentOf(reservation.token).d![0]![0], 0]]);
        setTimeout(release, 100);
        let startedAt = 0;
        await throttle.schedule('u1', () => (startedAt = Date.now()), { token: reservation.token });
        await running;
        expect(startedAt).to.be.at.least(completedAt);
      });

      it('reserves a slot in several keys at once: it counts in each, depends on calls in either, and its call starts on it with the keys in any order', async () => {
        const throttle = open({ rules: (key) => (key === 'app' ? ['2/300ms'] : ['5/300ms']) });
        let release!: () => void;
        const gate = new Promise<void>((resolve) => (release = resolve));
        let started = 0;
        // The app key is full of calls of another user, in flight.
        const flying = [1, 2].map(() => throttle.schedule(['u2', 'app'], () => (started++, gate)));
        while (started < 2) await new Promise((resolve) => setTimeout(resolve, 5));
        // Over HTTP the calls in flight hold reservations of their own: booked ahead too.
        const ahead = (await throttle.inspect('app')).bookedAhead;
        const reservation = await throttle.reserve(['u1', 'app']);
        expect(reservation.keys).to.deep.equal(['u1', 'app']);
        // Its dependency is in the app key (the second: part 1).
        expect(contentOf(reservation.token).d).to.have.length(1);
        expect(contentOf(reservation.token).d![0]![2]).to.equal(1);
        expect((await throttle.inspect('u1')).bookedAhead).to.equal(1);
        expect((await throttle.inspect('app')).bookedAhead).to.equal(ahead + 1);
        const otherKeys = await rejection(throttle.schedule(['u1', 'u2'], () => 'x', { token: reservation.token }));
        expect(otherKeys).to.be.instanceOf(ReservationError).with.property('reason', 'otherKey');
        const oneKey = await rejection(throttle.schedule('u1', () => 'x', { token: reservation.token }));
        expect(oneKey).to.be.instanceOf(ReservationError).with.property('reason', 'otherKey');
        setTimeout(release, 50);
        let startedAt = 0;
        await throttle.schedule(['app', 'u1'], () => (startedAt = Date.now()), { token: reservation.token });
        await Promise.all(flying);
        expect(startedAt).to.be.within(reservation.startAt - 5, reservation.claimBy);
        // Its call counts in both keys, as any call of both (the calls it depended on released a window before it).
        expect((await throttle.inspect('u1')).rules[0]!.used).to.equal(1);
        expect((await throttle.inspect('app')).rules[0]!.used).to.equal(1);
        expect((await throttle.inspect('u1')).bookedAhead).to.equal(0);
      });

      it('a token of several keys with its keys reordered names no slot: its call books as any call, never before the call it would depend on released a window before', async () => {
        const throttle = open({ rules: (key) => (key === 'app' ? ['1/300ms'] : ['5/300ms']) });
        let endedAt = 0;
        const flying = throttle.schedule(['u2', 'app'], () => new Promise((resolve) => setTimeout(resolve, 150)).then(() => (endedAt = Date.now())));
        await new Promise((resolve) => setTimeout(resolve, 10));
        const reservation = await throttle.reserve(['u1', 'app']);
        const content = contentOf(reservation.token);
        expect(content.d).to.have.length(1);
        // The dependency names its key by place (1: 'app'); swapped, it would be looked up in u1.
        const forged = tokenOf({ ...content, k: content.a![0], a: [content.k] });
        let startedAt = 0;
        await throttle.schedule(['u1', 'app'], () => (startedAt = Date.now()), { token: forged });
        await flying;
        expect(startedAt - endedAt).to.be.at.least(300 - 5);
      });

      it('release() gives a reservation back: its slots leave each of its keys at once, and its token starts no call after', async () => {
        const throttle = open({ rules: ['1/300ms'] });
        const reservation = await throttle.reserve(['u1', 'app']);
        for (const key of ['u1', 'app']) expect((await throttle.inspect(key)).bookedAhead, key).to.equal(1);
        expect(await rejection(open({ name: 'globex' }).release(['u1', 'app'], reservation.token)))
          .to.be.instanceOf(ReservationError)
          .with.property('reason', 'otherThrottle');
        expect(await rejection(throttle.release('u1', reservation.token)))
          .to.be.instanceOf(ReservationError)
          .with.property('reason', 'otherKey');
        await throttle.release(['app', 'u1'], reservation.token);
        for (const key of ['u1', 'app']) expect((await throttle.inspect(key)).bookedAhead, key).to.equal(0);
        // Its keys are free at once, and the token is spent; a second release has nothing to give back.
        expect(await throttle.schedule(['u1', 'app'], () => 'now', { maxDelayMs: 0 })).to.equal('now');
        expect(await rejection(throttle.schedule(['u1', 'app'], () => 'x', { token: reservation.token })))
          .to.be.instanceOf(ReservationError)
          .with.property('reason', 'used');
        await throttle.release(['u1', 'app'], reservation.token);
      });

      it('follows a dependency claimed since to the call that took its place', async () => {
        const throttle = open({ rules: ['1/300ms'] });
        const debug: string[] = [];
        throttle.on('debug', ({ message }) => debug.push(message));
        const askedAt = performance.now();
        const first = await throttle.reserve('u1');
        const second = await throttle.reserve('u1');
        expect(contentOf(second.token).d).to.deep.equal([[contentOf(first.token).m[0], 300]]);
        expect(contentOf(second.token).s - contentOf(first.token).s).to.be.within(300, 300 + Math.ceil(performance.now() - askedAt) + 1);
        let firstEnded = 0;
        await throttle.schedule(
          'u1',
          async () => {
            await new Promise((resolve) => setTimeout(resolve, 60));
            firstEnded = Date.now();
          },
          { token: first.token },
        );
        let secondAt = 0;
        await throttle.schedule('u1', () => (secondAt = Date.now()), { token: second.token });
        // A window after the first call completed, not after its start: its slot was followed.
        expect(secondAt - firstEnded).to.be.at.least(300 - 5);
        expect(debug.filter((message) => message.includes('moved'))).to.deep.equal([]);
      });

      it('a token with its dependencies altered names no reservation: the call books as any call, and the real token stays good', async () => {
        const throttle = open();
        const earlier = [await throttle.reserve('u1'), await throttle.reserve('u1')];
        const { token } = await throttle.reserve('u1');
        const content = contentOf(token);
        expect(content.d).to.have.length(1);
        let calls = 0;
        for (const reservation of earlier) await throttle.schedule('u1', () => calls++, { token: reservation.token });
        for (const d of [[], [[content.d![0]![0], 1]]]) await throttle.schedule('u1', () => calls++, { token: tokenOf({ ...content, d }) });
        expect(calls).to.equal(4);
        await throttle.schedule('u1', () => calls++, { token });
        expect(calls).to.equal(5);
        const used = await rejection(throttle.schedule('u1', () => calls++, { token }));
        expect(used).to.be.instanceOf(ReservationError).with.property('reason', 'used');
      });

      it('a process with a longer grace than the reserving one still starts the call at its slot, not before', async () => {
        const reserver = open({ rules: ['1/1s'], reservationGraceMs: 1_000 });
        const claimer = open({ rules: ['1/1s'], reservationGraceMs: 5_000 });
        const debug: string[] = [];
        claimer.on('debug', ({ message }) => debug.push(message));
        const first = await reserver.reserve('u1');
        const second = await reserver.reserve('u1');
        expect(second.waitMs).to.be.at.least(1_000);
        // The first called on its slot: the second, which depends on it, is claimed on its own slot.
        await reserver.schedule('u1', () => undefined, { token: first.token });
        let startedAt = 0;
        await claimer.schedule('u1', () => (startedAt = Date.now()), { token: second.token });
        expect(startedAt).to.be.at.least(second.startAt - 5);
        expect(debug.filter((message) => message.includes('moved'))).to.deep.equal([]);
      });

      it('a refused reservation refuses no call: a call that can wait for completions still gets its slot', async () => {
        const throttle = open({ rules: ['2/300ms'], maxHoldMs: 600, reservationGraceMs: 300 });
        const running = [0, 1].map(() => throttle.schedule('u1', () => new Promise((resolve) => setTimeout(resolve, 50))));
        await new Promise((resolve) => setTimeout(resolve, 10));
        // Counting the calls in flight at their bounds, the reservation would start 1.2 s away.
        expect(await rejection(throttle.reserve('u1', { maxDelayMs: 200 }))).to.be.instanceOf(RateLimitedError);
        // A call's slot comes a window after their completions, about 340 ms away.
        const started = performance.now();
        await throttle.schedule('u1', () => undefined, { maxDelayMs: 900 });
        expect(performance.now() - started).to.be.below(900);
        await Promise.all(running);
      });

      if (subject.shared) {
        it('a claim on a quiet key leaves its log with a time to live', async () => {
          const throttle = open();
          const { token } = await throttle.reserve('u1');
          await throttle.schedule('u1', () => undefined, { token });
          await new Promise((resolve) => setTimeout(resolve, 50));
          const ttl = await redisClient().pttl(`${prefix}:acme:{u1}:log`);
          expect(ttl).to.be.within(1, 20_000);
        });
      }
    });
  }

  it('a claim answered too late for its slot books again (as a late booking does): no window over the limit', async () => {
    const inner = new MemoryStore();
    let slow = 0;
    const store = delegatingStore(inner, {
      claim: async (request) => {
        const result = await inner.claim(request);
        // The answer of the first claim arrives 500 ms late (a stalled link).
        if (slow++ === 0) await new Promise((resolve) => setTimeout(resolve, 500));
        return result;
      },
    });
    // The grace leaves the claim a second to reach the store (a stall of the suite's load before it
    // made it 'late': a failure of one run); its answer, 500 ms late, is past half of maxHoldMs.
    const throttle = new Throttle({ name: 'acme', rules: ['1/1s'], store, maxHoldMs: 200, reservationGraceMs: 1_000 });
    throttles.push(throttle);
    const { token } = await throttle.reserve('u1');
    const other = new Throttle({ name: 'acme', rules: ['1/1s'], store: inner, maxHoldMs: 200 });
    throttles.push(other);
    const starts: number[] = [];
    const claimed = throttle.schedule('u1', () => starts.push(Date.now()), { token });
    await new Promise((resolve) => setTimeout(resolve, 300));
    await Promise.all([claimed, other.schedule('u1', () => starts.push(Date.now()))]);
    starts.sort((a, b) => a - b);
    expect(starts[1]! - starts[0]!).to.be.at.least(1_000 - 15);
  });

  it('over HTTP, a reservation lost with a Redis restarted empty: at its time, its call books a slot as any call, on the Redis as it is now', async () => {
    let server: RedisServer | undefined = await startRedis();
    const own = await startUpstashRest(server.url);
    try {
      const open = (): Throttle => {
        const throttle = new Throttle({
          name: 'acme',
          rules: ['1/1s'],
          store: redisStore(new UpstashRedis({ url: own.url, token: own.token, retry: false }), { prefix }),
          maxHoldMs: 200,
          reservationGraceMs: 1_000,
        });
        throttles.push(throttle);
        return throttle;
      };
      prefix = uniquePrefix();
      const reserver = open();
      await reserver.reserve('u1');
      const { token, startAt } = await reserver.reserve('u1');
      const port = server.port;
      await server.stop();
      server = undefined;
      server = await startRedis({ port });
      const caller = open();
      const debug: string[] = [];
      caller.on('debug', ({ message }) => debug.push(message));
      let calledAt = 0;
      // It waits for its start as any token (the claim looks no further before it); its slot is gone
      // with the data, and it books one on the log as it is then.
      await caller.schedule('u1', () => (calledAt = Date.now()), { token });
      expect(calledAt).to.be.within(startAt - 5, startAt + 1_000);
      expect(debug.some((message) => message.includes('moved'))).to.equal(true);
      // The window the call took holds: another call waits a window for it.
      expect(await rejection(caller.schedule('u1', () => 'x', { maxDelayMs: 0 }))).to.be.instanceOf(RateLimitedError);
    } finally {
      await own.close();
      await server?.stop();
    }
  });

  describe('across processes', () => {
    it('a reservation outlives the process that made it: a process that died leaves its sleeping call to be given back, and its reservation to be claimed', async () => {
      const prefix = uniquePrefix();
      const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', RESERVER], {
        cwd: ROOT,
        env: { ...process.env, REDIS_URL: redisServer().url, PREFIX: prefix },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      let output = '';
      child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
      while (!output.includes('\n')) await once(child.stdout, 'data');
      const reservation = JSON.parse(output) as { token: string; startAt: number; claimBy: number };
      child.kill('SIGKILL');
      await once(child, 'exit');
      const store = redisStore(redisClient(), { prefix });
      expect(store).to.be.instanceOf(RedisStore);
      const throttle = new Throttle({ name: 'acme', rules: ['1/s'], store, maxHoldMs: 500, reservationGraceMs: 2000 });
      throttles.push(throttle);
      const debug: string[] = [];
      throttle.on('debug', ({ message }) => debug.push(message));
      // A call of this process waits behind both: the dead process's sleeping call is given back
      // (its stamps went stale), the reservation is not.
      const waiting = throttle.schedule('u1', () => Date.now());
      let claimedAt = 0;
      await throttle.schedule('u1', () => (claimedAt = Date.now()), { token: reservation.token });
      expect(claimedAt).to.be.within(reservation.startAt - 5, reservation.claimBy);
      // Started on the reserved slot itself, not booked again.
      expect(debug.filter((message) => message.includes('moved'))).to.deep.equal([]);
      const waited = await waiting;
      // One call a second: the waiting call is a window away from the claimed one.
      expect(Math.abs(waited - claimedAt)).to.be.at.least(1_000 - 15);
    });
  });
});
