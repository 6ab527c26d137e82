import { expect } from 'chai';
import { CallTimeoutError, RateLimitedError, StoreUnavailableError, ThrottleClosedError, ThrottleConfigError } from '../lib/errors.js';
import { Throttle } from '../lib/throttle.js';
import { MemoryStore } from '../lib/stores/memory-store.js';
import type { ThrottleOptions } from '../lib/options.js';
import type { Store } from '../lib/store.js';
import { delegatingStore } from './support/delegating-store.js';
import { mostInWindow } from './support/http-vendor.js';
import { useFakeClock } from './support/fake-clock.js';
import type { RuleString } from '../lib/rules.js';

/** A MemoryStore that counts the decisions asked of it. */
function countingReserves() {
  const memory = new MemoryStore();
  let count = 0;
  const store = delegatingStore(memory, {
    reserve: (request) => {
      count += 1;
      return memory.reserve(request);
    },
  });
  return { store, reserves: () => count };
}

/** Starts `count` calls on `key` and records when each fn ran (fake ms since the test began). */
function burst(throttle: Throttle, key: string, count: number, t0: number) {
  const starts: number[] = [];
  const done = Promise.all(
    Array.from({ length: count }, (_, i) =>
      throttle.schedule(key, () => {
        starts.push(Date.now() - t0);
        return i;
      }),
    ),
  );
  return { starts, done };
}

describe('Throttle: delay mode', () => {
  const fake = useFakeClock();

  function make(options: Partial<ThrottleOptions> = {}) {
    return new Throttle({ rules: ['3/s'], ...options });
  }

  it('runs calls at once while the window has room, then each as soon as it frees', async () => {
    const throttle = make();
    const t0 = Date.now();
    const { starts, done } = burst(throttle, 'u1', 7, t0);
    await fake.clock.tickAsync(2_500);
    expect(await done).to.deep.equal([0, 1, 2, 3, 4, 5, 6]);
    // Completions are read late, never early (lib/time.ts: by the clock drift allowed since the
    // store's latest answer, under 1 ms here): the last call starts at 2,000 or 1 ms after.
    expect(starts.slice(0, 6)).to.deep.equal([0, 0, 0, 1_000, 1_000, 1_000]);
    expect(starts[6]).to.be.within(2_000, 2_001);
    await throttle.close();
  });

  it('keeps keys independent', async () => {
    const throttle = make();
    const t0 = Date.now();
    const a = burst(throttle, 'a', 3, t0);
    const b = burst(throttle, 'b', 3, t0);
    await fake.clock.tickAsync(10);
    await Promise.all([a.done, b.done]);
    expect([...a.starts, ...b.starts]).to.deep.equal([0, 0, 0, 0, 0, 0]);
    await throttle.close();
  });

  it('returns what fn returns and rejects with the very error fn threw, sync or async', async () => {
    const throttle = make();
    const sync = new Error('sync');
    const async = new Error('async');
    expect(await throttle.schedule('u', () => 'value')).to.equal('value');
    expect(await throttle.schedule('u', async () => ({ n: 1 }))).to.deep.equal({ n: 1 });
    const caught = await throttle
      .schedule('u', () => {
        throw sync;
      })
      .catch((error: unknown) => error);
    expect(caught).to.equal(sync);
    await fake.clock.tickAsync(1_000);
    const caughtAsync = await throttle.schedule('u', () => Promise.reject(async)).catch((error: unknown) => error);
    expect(caughtAsync).to.equal(async);
    await throttle.close();
  });

  it('spends the slot when fn starts, whether fn succeeds or fails', async () => {
    const throttle = make({ rules: ['2/s'] });
    await throttle
      .schedule('u', () => {
        throw new Error('x');
      })
      .catch(() => {});
    await throttle.schedule('u', () => Promise.reject(new Error('y'))).catch(() => {});
    const usage = await throttle.inspect('u');
    expect(usage.rules[0]!.used).to.equal(2);
    expect(usage.nextFreeInMs).to.be.within(999, 1_000);
    await throttle.close();
  });

  it('turns a wait longer than maxDelayMs into RateLimitedError, and books nothing', async () => {
    const throttle = make({ maxDelayMs: 500 });
    await Promise.all([1, 2, 3].map(() => throttle.schedule('u', () => {})));
    let called = false;
    const error = await throttle
      .schedule('u', () => {
        called = true;
      })
      .catch((e: unknown) => e);
    expect(error).to.be.instanceOf(RateLimitedError);
    const limited = error as RateLimitedError;
    expect(limited.retryAfterMs).to.be.within(999, 1_000);
    expect(limited.key).to.equal('u');
    expect(limited.rule).to.deep.equal({ limit: 3, windowMs: 1_000 });
    expect(limited.code).to.equal('ERR_RATE_LIMITED');
    expect(called).to.equal(false);
    expect((await throttle.inspect('u')).rules[0]!.used).to.equal(3);
    // A per-call maxDelayMs overrides the throttle's.
    const waited = throttle.schedule('u', () => 'late', { maxDelayMs: 2_000 });
    await fake.clock.tickAsync(1_000);
    expect(await waited).to.equal('late');
    await throttle.close();
  });

  it('applies several rules at once and reports the one that binds', async () => {
    const throttle = make({ rules: ['2/s', '3/min'], maxDelayMs: 5_000 });
    const t0 = Date.now();
    const { starts, done } = burst(throttle, 'u', 3, t0);
    await fake.clock.tickAsync(1_000);
    await done;
    expect(starts).to.deep.equal([0, 0, 1_000]);
    const error = (await throttle.schedule('u', () => {}).catch((e: unknown) => e)) as RateLimitedError;
    expect(error.rule).to.deep.equal({ limit: 3, windowMs: 60_000 });
    await throttle.close();
  });

  it('chooses rules per key, also asynchronously (plan tiers)', async () => {
    const tiers: Record<string, RuleString[]> = { gold: ['5/s'], free: ['1/s'] };
    const throttle = make({ rules: async (key) => tiers[key.split(':')[0]!]!, maxDelayMs: 0 });
    const gold = await Promise.allSettled(Array.from({ length: 6 }, () => throttle.schedule('gold:1', () => {})));
    const free = await Promise.allSettled(Array.from({ length: 2 }, () => throttle.schedule('free:1', () => {})));
    expect(gold.map((r) => r.status)).to.deep.equal(['fulfilled', 'fulfilled', 'fulfilled', 'fulfilled', 'fulfilled', 'rejected']);
    expect(free.map((r) => r.status)).to.deep.equal(['fulfilled', 'rejected']);
    await throttle.close();
  });

  it('keeps a live key history when its rules change, and is exact from that moment', async () => {
    const store = new MemoryStore();
    const before = new Throttle({ rules: ['3/min'], store, maxDelayMs: 0 });
    for (let i = 0; i < 3; i++) await before.schedule('u', () => {});
    await fake.clock.tickAsync(10_000);
    const doubled = new Throttle({ rules: ['6/min'], store, maxDelayMs: 0 });
    const results = await Promise.allSettled(Array.from({ length: 4 }, () => doubled.schedule('u', () => {})));
    expect(results.map((r) => r.status)).to.deep.equal(['fulfilled', 'fulfilled', 'fulfilled', 'rejected']);
    const withDaily = new Throttle({ rules: ['6/min', '7/day'], store, maxDelayMs: 0, retainMs: 86_400_000 });
    await fake.clock.tickAsync(50_000);
    const day = await Promise.allSettled(Array.from({ length: 3 }, () => withDaily.schedule('u', () => {})));
    expect(day.map((r) => r.status)).to.deep.equal(['fulfilled', 'rejected', 'rejected']);
    await Promise.all([before.close(), doubled.close(), withDaily.close()]);
  });

  it('counts a call until its response plus the window: a slow call holds its slot longer', async () => {
    const throttle = new Throttle({ rules: ['1/s'] });
    const t0 = Date.now();
    const slow = throttle.schedule('u', () => new Promise((resolve) => setTimeout(resolve, 400)));
    await fake.clock.tickAsync(400);
    await slow;
    const starts: number[] = [];
    const next = throttle.schedule('u', () => starts.push(Date.now() - t0));
    await fake.clock.tickAsync(2_000);
    await next;
    expect(starts).to.deep.equal([1_400]);
    await throttle.close();
  });

  it('a call that asks while the binding call is in flight waits for its completion, not for maxHoldMs', async () => {
    const { store, reserves } = countingReserves();
    const throttle = new Throttle({ rules: ['1/s'], store, maxHoldMs: 5_000 });
    const t0 = Date.now();
    const first = throttle.schedule('u', () => new Promise((resolve) => setTimeout(resolve, 300)));
    await fake.clock.tickAsync(10);
    const starts: number[] = [];
    const next = throttle.schedule('u', () => starts.push(Date.now() - t0));
    // Deferred: nothing booked, one timer for its bound (start + maxHoldMs) besides the call's own.
    await fake.clock.tickAsync(100);
    expect(starts).to.deep.equal([]);
    expect(throttle.stats).to.deep.equal({ queues: 1, queued: 1, sleeping: 0 });
    const asked = reserves();
    // The completion at 300 ms wakes the line: one more ask books the slot at 300 + 1,000 ms.
    await fake.clock.tickAsync(200);
    await first;
    expect(reserves()).to.equal(asked + 1);
    expect(throttle.stats).to.deep.equal({ queues: 0, queued: 0, sleeping: 1 });
    await fake.clock.tickAsync(1_100);
    await next;
    expect(starts).to.have.length(1);
    expect(starts[0]).to.be.within(1_300, 1_301);
    await throttle.close();
  });

  it('maxHoldMs: 10 s by default, or timeoutMs when that is longer', async () => {
    const throttles = [
      new Throttle({ rules: ['1/s'] }),
      new Throttle({ rules: ['1/s'], timeoutMs: 30_000.5 }),
      new Throttle({ rules: ['1/s'], timeoutMs: 30_000, maxHoldMs: 500 }),
    ];
    expect(throttles.map((throttle) => throttle.maxHoldMs)).to.deep.equal([10_000, 30_001, 500]);
    await Promise.all(throttles.map((throttle) => throttle.close()));
  });

  it('timeoutMs: a fn that does not settle in time rejects with CallTimeoutError; its slot keeps counting until it completes', async () => {
    const throttle = new Throttle({ rules: ['1/s'], timeoutMs: 200 });
    const t0 = Date.now();
    let finish: (value: string) => void = () => {};
    const hung = throttle.schedule('u', () => new Promise<string>((resolve) => (finish = resolve))).catch((error: unknown) => error);
    await fake.clock.tickAsync(200);
    const error = (await hung) as CallTimeoutError;
    expect(error).to.be.instanceOf(CallTimeoutError);
    expect(error.code).to.equal('ERR_CALL_TIMEOUT');
    expect(error.key).to.equal('u');
    expect(error.timeoutMs).to.equal(200);
    // Still in flight: the next call waits for it.
    const starts: number[] = [];
    const next = throttle.schedule('u', () => starts.push(Date.now() - t0));
    await fake.clock.tickAsync(300);
    expect(starts).to.deep.equal([]);
    finish('late');
    await fake.clock.tickAsync(1_100);
    await next;
    expect(starts[0]).to.be.within(1_500, 1_501);
    // A per-call timeoutMs overrides the throttle's; a fn that settles in time leaves no timer behind.
    expect(await throttle.schedule('v', () => 'quick', { timeoutMs: 50 })).to.equal('quick');
    expect(fake.clock.countTimers()).to.equal(0);
    await throttle.close();
  });

  it('forgets idle keys: memory follows active keys, not every key ever seen', async function () {
    this.timeout(60_000);
    const store = new MemoryStore();
    const throttle = new Throttle({ rules: ['5/s'], store });
    for (let round = 0; round < 4; round++) {
      for (let batch = 0; batch < 25; batch++) {
        await Promise.all(Array.from({ length: 1_000 }, (_, i) => throttle.schedule(`r${round}-${batch}-${i}`, () => {})));
      }
      // A key lasts its longest window after its last slot, plus maxHoldMs (10 s) in case that call
      // was still in flight.
      await fake.clock.tickAsync(11_001);
    }
    // 100,000 keys were used, 25,000 per round; only the last round's keys (and a few stragglers) remain.
    expect(store.size).to.be.at.most(30_000);
    await throttle.close();
  });

  it('pauses a key when asked: waiting calls start one slot after the pause (its end goes to retries), throw-mode calls say why', async () => {
    const store = new MemoryStore();
    const throttle = new Throttle({ rules: ['10/s'], store });
    const strict = new Throttle({ rules: ['10/s'], store, mode: 'throw' });
    const t0 = Date.now();
    await throttle.pause('u', 2_000);
    const starts: number[] = [];
    const waiting = throttle.schedule('u', () => starts.push(Date.now() - t0));
    const refused = (await strict.schedule('u', () => {}).catch((e: unknown) => e)) as RateLimitedError;
    expect(refused.reason).to.equal('paused');
    expect(refused.rule).to.equal(undefined);
    expect(refused.retryAfterMs).to.equal(2_000);
    expect((await throttle.inspect('u')).pausedForMs).to.equal(2_000);
    // 10/s: one slot is 100 ms. A retry of a request the vendor refused would start at 2,000.
    await fake.clock.tickAsync(2_099);
    expect(starts).to.deep.equal([]);
    await fake.clock.tickAsync(1);
    await waiting;
    expect(starts).to.deep.equal([2_100]);
    await Promise.all([throttle.close(), strict.close()]);
  });

  it('books again when a call wakes too late for maxHoldMs to cover it, giving the old slot back', async () => {
    const memory = new MemoryStore();
    let reserves = 0;
    // A store whose answers take 150 ms to arrive: the call is 150 ms late, more than half of the
    // 120 ms (maxHoldMs) a call without a completion counts for after its start.
    const slow = delegatingStore(memory, {
      reserve: async (request) => {
        reserves += 1;
        const result = await memory.reserve(request);
        await new Promise((resolve) => setTimeout(resolve, reserves <= 2 ? 150 : 0));
        return result;
      },
    });
    const throttle = new Throttle({ rules: ['5/s'], store: slow, maxHoldMs: 120 });
    const debug: string[] = [];
    throttle.on('debug', (event) => debug.push(event.message));
    const call = throttle.schedule('u', () => 'ran');
    await fake.clock.tickAsync(400);
    expect(await call).to.equal('ran');
    expect(reserves).to.equal(3);
    expect(debug).to.have.length(2);
    expect(debug[0]).to.match(/woke 14\d ms after its slot, over half of maxHoldMs \(120 ms\): booking again/);
    // The two abandoned slots were given back: only the slot the call ran in counts.
    expect((await throttle.inspect('u')).rules[0]!.used).to.equal(1);
    await throttle.close();
  });

  it('close() resolves only once the slots of the calls it rejects are given back', async () => {
    const memory = new MemoryStore();
    const events: string[] = [];
    const store = delegatingStore(memory, {
      settle: async (...args) => {
        await new Promise((resolve) => setTimeout(resolve, 20));
        await memory.settle(...args);
        if (args[2].some((settlement) => settlement.releaseAt === null)) events.push('slot given back');
      },
    });
    const throttle = make({ rules: ['1/10s'], store });
    await throttle.schedule('u', () => {});
    const waiting = throttle.schedule('u', () => {}).catch((error: unknown) => events.push((error as Error).name));
    await fake.clock.tickAsync(30);
    const closed = throttle.close().then(() => events.push('closed'));
    await fake.clock.tickAsync(50);
    await Promise.all([closed, waiting]);
    expect(events).to.deep.equal(['ThrottleClosedError', 'slot given back', 'closed']);
  });

  it('after a response of maxHoldMs or more, says so once and does not make every late call book again', async () => {
    const { store, reserves } = countingReserves();
    const throttle = new Throttle({ rules: ['5/s'], store, maxHoldMs: 100 });
    const debug: string[] = [];
    throttle.on('debug', (event) => debug.push(event.message));
    const slow = throttle.schedule('u', () => new Promise((resolve) => setTimeout(resolve, 150)));
    await fake.clock.tickAsync(150);
    await slow;
    await Promise.all(Array.from({ length: 4 }, () => throttle.schedule('u', () => {})));
    expect(reserves()).to.equal(5);
    expect(debug).to.have.length(1);
    expect(debug[0]).to.match(/a call took 150 ms, not less than maxHoldMs \(100 ms\)/);
    await throttle.close();
  });

  it('rejects waiting calls on close, gives their slots back, and leaves no timer', async () => {
    const throttle = make({ rules: ['1/min'] });
    await throttle.schedule('u', () => {});
    let called = false;
    const waiting = throttle.schedule('u', () => {
      called = true;
    });
    await fake.clock.tickAsync(10);
    expect(fake.clock.countTimers()).to.equal(1);
    await throttle.close();
    const error = await waiting.catch((e: unknown) => e);
    expect(error).to.be.instanceOf(ThrottleClosedError);
    expect(called).to.equal(false);
    expect(fake.clock.countTimers()).to.equal(0);
    const after = await throttle.schedule('u', () => {}).catch((e: unknown) => e);
    expect(after).to.be.instanceOf(ThrottleClosedError);
  });
});

describe('Throttle: throw mode', () => {
  const fake = useFakeClock();

  it('never waits: a call over the limit rejects at once with retryAfterMs', async () => {
    const throttle = new Throttle({ rules: ['2/s'], mode: 'throw', maxDelayMs: 10_000 });
    await throttle.schedule('u', () => {});
    await fake.clock.tickAsync(300);
    await throttle.schedule('u', () => {});
    const error = (await throttle.schedule('u', () => {}).catch((e: unknown) => e)) as RateLimitedError;
    expect(error).to.be.instanceOf(RateLimitedError);
    expect(error.retryAfterMs).to.equal(700);
    await fake.clock.tickAsync(700);
    expect(await throttle.schedule('u', () => 'ok')).to.equal('ok');
    await throttle.close();
  });

  it('refuses calls on a key known to be full without asking the store, until the slot it was told of', async () => {
    const { store, reserves } = countingReserves();
    const throttle = new Throttle({ rules: ['2/s'], mode: 'throw', store });
    await throttle.schedule('u', () => {}, { cost: 2 });
    // The first refusal asks the store; it names the slot, and the next four are refused locally.
    const refusals: unknown[] = [];
    for (let i = 0; i < 5; i++) refusals.push(await throttle.schedule('u', () => {}).catch((e: unknown) => e));
    expect(refusals.every((error) => error instanceof RateLimitedError)).to.equal(true);
    expect(reserves()).to.equal(2);
    expect(refusals.map((error) => (error as RateLimitedError).retryAfterMs)).to.deep.equal([1_000, 1_000, 1_000, 1_000, 1_000]);
    // The local answer counts down with the clock, still without a round trip.
    await fake.clock.tickAsync(400);
    const later = (await throttle.schedule('u', () => {}).catch((e: unknown) => e)) as RateLimitedError;
    expect(later.retryAfterMs).to.equal(600);
    expect(reserves()).to.equal(2);
    // Other keys are not affected.
    expect(await throttle.schedule('v', () => 'other')).to.equal('other');
    // Once the slot is due, the store is asked again.
    await fake.clock.tickAsync(600);
    expect(await throttle.schedule('u', () => 'ok')).to.equal('ok');
    expect(reserves()).to.equal(4);
    await throttle.close();
  });
});

describe('Throttle: cancellation', () => {
  const fake = useFakeClock();

  it('aborting a waiting call rejects with signal.reason, never runs fn, and frees its slot', async () => {
    const throttle = new Throttle({ rules: ['1/s'] });
    const t0 = Date.now();
    await throttle.schedule('u', () => {});
    const controller = new AbortController();
    let called = false;
    const cancelled = throttle.schedule(
      'u',
      () => {
        called = true;
      },
      { signal: controller.signal },
    );
    const starts: number[] = [];
    const third = throttle.schedule('u', () => starts.push(Date.now() - t0));
    await fake.clock.tickAsync(100);
    // The second call is booked at 1 s and sleeps; the third waits in line for the second's completion.
    expect(throttle.stats).to.deep.equal({ queues: 1, queued: 1, sleeping: 1 });
    expect(await throttle.inspect('u'))
      .to.deep.include({ bookedAhead: 1 })
      .and.to.have.nested.property('rules[0].used', 1);
    const reason = new Error('user went away');
    controller.abort(reason);
    expect(await cancelled.catch((e: unknown) => e)).to.equal(reason);
    await fake.clock.tickAsync(0);
    // The second's slot was given back, and the release woke the third, which booked that slot.
    expect(throttle.stats).to.deep.equal({ queues: 0, queued: 0, sleeping: 1 });
    expect(await throttle.inspect('u'))
      .to.deep.include({ bookedAhead: 1 })
      .and.to.have.nested.property('rules[0].used', 1);
    await fake.clock.tickAsync(3_000);
    await third;
    expect(called).to.equal(false);
    expect(starts).to.deep.equal([1_000]);
    await throttle.close();
  });

  it('an already aborted signal rejects before anything is booked', async () => {
    const throttle = new Throttle({ rules: ['1/s'] });
    const reason = new Error('no');
    const error = await throttle.schedule('u', () => {}, { signal: AbortSignal.abort(reason) }).catch((e: unknown) => e);
    expect(error).to.equal(reason);
    expect((await throttle.inspect('u')).rules[0]!.used).to.equal(0);
    await throttle.close();
  });
});

describe('Throttle: when the store comes and goes', () => {
  const fake = useFakeClock();

  /** A MemoryStore behind a switch: while `down`, every method fails as an unreachable Redis would. */
  function flakyStore(options: { restoreDelayMs?: number } = {}) {
    const inner = new MemoryStore();
    const state = { down: false };
    const guard =
      <A extends unknown[], R>(method: (...args: A) => Promise<R>) =>
      async (...args: A): Promise<R> => {
        if (state.down) throw new Error('connect ECONNREFUSED 127.0.0.1:6379');
        return method(...args);
      };
    const store = delegatingStore(inner, {
      reserve: guard((request) => inner.reserve(request)),
      settle: guard((...args: Parameters<Store['settle']>) => inner.settle(...args)),
      restore: guard(async (...args: Parameters<Store['restore']>) => {
        await new Promise((resolve) => setTimeout(resolve, options.restoreDelayMs ?? 0));
        if (state.down) throw new Error('connection lost');
        return inner.restore(...args);
      }),
    });
    return { store, state };
  }

  it('puts a slot booked ahead locally into the store as in flight from its start, not as done by now', async () => {
    const { store, state } = flakyStore();
    const throttle = new Throttle({ rules: ['2/2s'], store, onStoreError: 'local', localShare: 1, maxHoldMs: 100 });
    const t0 = Date.now();
    const starts: number[] = [];
    const call = () => throttle.schedule('u', () => void starts.push(Date.now() - t0));
    state.down = true;
    // Decided locally: two now; two once those completed (at 0), booked at 2 s.
    const local = [call(), call(), call(), call()];
    await fake.clock.tickAsync(1_200);
    state.down = false;
    await fake.clock.tickAsync(100);
    const remote = [call(), call()];
    await fake.clock.tickAsync(6_000);
    await Promise.all([...local, ...remote]);
    expect(starts.slice(0, 4)).to.deep.equal([0, 0, 2_000, 2_000]);
    expect(starts).to.have.length(6);
    // The store counted the two calls booked ahead from their start: no 2 s window holds more than 2.
    expect(mostInWindow(starts, 2_000)).to.equal(2);
    await throttle.close();
  });

  it("onStoreError 'wait': a call keeps asking while the store is down, starts once it is back, and gives up at maxDelayMs", async () => {
    const { store, state } = flakyStore();
    const throttle = new Throttle({ rules: ['1/s'], store, onStoreError: 'wait' });
    const errors: string[] = [];
    throttle.on('storeError', (event) => errors.push(event.policy));
    const t0 = Date.now();
    state.down = true;
    let startedAt = -1;
    const call = throttle.schedule('u', () => (startedAt = Date.now() - t0));
    await fake.clock.tickAsync(1_500);
    expect(startedAt).to.equal(-1);
    // Asked at 0, 25, 75, 175, 375 and 775 ms (backoff doubling from 25 ms, at most 1 s).
    expect(errors).to.deep.equal(['wait', 'wait', 'wait', 'wait', 'wait', 'wait']);
    state.down = false;
    await fake.clock.tickAsync(1_000);
    await call;
    // The next ask, at 1,575 ms, books at once.
    expect(startedAt).to.equal(1_575);
    // maxDelayMs bounds the asking: the next backoff would end past it.
    state.down = true;
    let called = false;
    const bounded = throttle.schedule('v', () => (called = true), { maxDelayMs: 300 }).catch((error: unknown) => error);
    await fake.clock.tickAsync(400);
    expect(await bounded).to.be.instanceOf(StoreUnavailableError);
    expect(called).to.equal(false);
    state.down = false;
    await throttle.close();
  });

  it("onStoreError 'wait': a slot the store books after the call's maxDelayMs ran out is given back", async () => {
    const memory = new MemoryStore();
    let reserves = 0;
    // The first ask fails; the second is answered 500 ms later, after the call gave up at 300 ms.
    const store = delegatingStore(memory, {
      reserve: async (request) => {
        reserves += 1;
        if (reserves === 1) throw new Error('read ECONNRESET');
        await new Promise((resolve) => setTimeout(resolve, 500));
        return memory.reserve(request);
      },
    });
    const throttle = new Throttle({ rules: ['5/s'], store, onStoreError: 'wait', maxDelayMs: 300 });
    let called = false;
    const call = throttle.schedule('u', () => (called = true)).catch((error: unknown) => error);
    await fake.clock.tickAsync(1_000);
    expect(await call).to.be.instanceOf(StoreUnavailableError);
    expect(called).to.equal(false);
    expect(reserves).to.equal(2);
    // The store booked the second ask's slot at 525 ms; nothing runs in it.
    expect((await throttle.inspect('u')).rules[0]!.used).to.equal(0);
    await throttle.close();
  });

  it('sends a completion the store failed to take again, so that its slot stops counting a window after the response, not after the bound', async () => {
    const memory = new MemoryStore();
    let failures = 1;
    const store = delegatingStore(memory, {
      settle: async (...args) => {
        if (failures-- > 0) throw new Error('connect ECONNREFUSED 127.0.0.1:6379');
        return memory.settle(...args);
      },
    });
    const throttle = new Throttle({ rules: ['1/2s'], store, maxHoldMs: 1_000 });
    const debug: string[] = [];
    throttle.on('debug', (event) => debug.push(event.message));
    const t0 = Date.now();
    // The call takes 143 ms, and its completion is lost once.
    const first = throttle.schedule('u', () => new Promise((resolve) => setTimeout(resolve, 143)));
    await fake.clock.tickAsync(400);
    await first;
    expect(debug).to.have.length(1);
    expect(debug[0]).to.match(/did not reach the store/);
    // Until it is sent again (1 s later), the slot counts to its bound (1,000 ms): a call booked then
    // would start at 3,000 ms. Sent again, it counts to 143 ms + the window.
    await fake.clock.tickAsync(1_000);
    let startedAt = -1;
    const second = throttle.schedule('u', () => (startedAt = Date.now() - t0));
    await fake.clock.tickAsync(3_000);
    await second;
    expect(startedAt).to.be.within(2_143, 2_144);
    await throttle.close();
  });

  it('fails a call booked ahead with the store error once its pause read failed 3 times in a row, while another process keeps the key busy', async () => {
    const memory = new MemoryStore();
    let reads = 0;
    const denied = new Error("NOPERM User vt has no permissions to run the 'hget' command");
    // Bookings succeed, the pause read is denied (an ACL without HGET).
    const store = delegatingStore(memory, {
      pausedUntil: async () => {
        reads += 1;
        throw denied;
      },
    });
    const throttle = new Throttle({ name: 'v', rules: ['1/s'], store });
    // Another process on the same store asks at the key's rate: the key stays booked ahead, and a
    // call booked again goes behind its calls (without a bound, it did so every second, for ever).
    const other = new Throttle({ name: 'v', rules: ['1/s'], store: memory });
    const busy = setInterval(() => void other.schedule('u', () => {}).catch(() => undefined), 1_000);
    const storeErrors: string[] = [];
    const debug: string[] = [];
    throttle.on('storeError', (event) => storeErrors.push(`${event.policy}: ${event.error.message}`));
    throttle.on('debug', (event) => debug.push(event.message));
    await throttle.schedule('u', () => {});
    let called = false;
    let outcome: unknown = 'still waiting';
    void throttle
      .schedule('u', () => (called = true))
      .then(
        () => (outcome = 'ran'),
        (error: unknown) => (outcome = error),
      );
    await fake.clock.tickAsync(30_000);
    clearInterval(busy);
    expect(outcome).to.be.instanceOf(StoreUnavailableError);
    expect((outcome as StoreUnavailableError).cause).to.equal(denied);
    expect(called).to.equal(false);
    expect(reads).to.equal(3);
    expect(debug.filter((message) => /cannot read the vendor pause/.test(message))).to.have.length(2);
    expect(storeErrors).to.deep.equal([`fail: Throttle store failed: ${denied.message}`]);
    await Promise.all([throttle.close(), other.close()]);
  });

  it('keeps a slot decided locally while a put-back is on its way, for the next put-back', async () => {
    const { store, state } = flakyStore({ restoreDelayMs: 300 });
    const throttle = new Throttle({ rules: ['3/5s'], store, onStoreError: 'local', localShare: 1 });
    const t0 = Date.now();
    const starts: number[] = [];
    const call = () => throttle.schedule('u', () => void starts.push(Date.now() - t0));
    const at = (ms: number) => fake.clock.tickAsync(Math.max(0, ms - (Date.now() - t0)));
    state.down = true;
    await call();
    await at(1_400);
    const second = call();
    await at(1_401);
    await second;
    await at(1_500);
    state.down = false;
    // The put-back that starts at 2 s takes 300 ms; a call at 2.1 s is still decided locally.
    await at(2_100);
    const third = call();
    await at(2_101);
    await third;
    await at(2_500);
    const fourth = call();
    await at(9_000);
    await fourth;
    expect(starts.slice(0, 3)).to.deep.equal([0, 1_400, 2_100]);
    expect(mostInWindow(starts, 5_000)).to.equal(3);
    await throttle.close();
  });
});

describe('Throttle: bad input', () => {
  const throttle = new Throttle({ rules: ['3/s'] });
  after(() => throttle.close());

  const cases: Array<[string, () => Promise<unknown>, new (...args: never[]) => Error, RegExp]> = [
    ['fn not a function', () => throttle.schedule('u', 'nope' as never), ThrottleConfigError, /Expected fn to be a function, got 'nope'/],
    ['key an object', () => throttle.schedule({} as never, () => {}), ThrottleConfigError, /Expected key to be a string or a finite number, got \{\}/],
    ['key NaN', () => throttle.schedule(NaN, () => {}), ThrottleConfigError, /got NaN/],
    ['key empty', () => throttle.schedule('', () => {}), ThrottleConfigError, /Expected key to be a non-empty string or a finite number, got ''/],
    ['key empty, to inspect()', () => throttle.inspect(''), ThrottleConfigError, /non-empty/],
    ['key empty, to pause()', () => throttle.pause('', 1_000), ThrottleConfigError, /non-empty/],
    ['negative maxDelayMs', () => throttle.schedule('u', () => {}, { maxDelayMs: -1 }), ThrottleConfigError, /maxDelayMs .* got -1/],
    ['NaN maxDelayMs', () => throttle.schedule('u', () => {}, { maxDelayMs: NaN }), ThrottleConfigError, /maxDelayMs/],
    ['cost above the limit', () => throttle.schedule('u', () => {}, { cost: 4 }), ThrottleConfigError, /cost to be at most 3 .* got 4/],
    ['fractional cost', () => throttle.schedule('u', () => {}, { cost: 1.5 }), ThrottleConfigError, /cost .* got 1.5/],
    ['zero cost', () => throttle.schedule('u', () => {}, { cost: 0 }), ThrottleConfigError, /cost/],
    ['signal not a signal', () => throttle.schedule('u', () => {}, { signal: {} as never }), ThrottleConfigError, /AbortSignal/],
    ['options not an object', () => throttle.schedule('u', () => {}, 5 as never), ThrottleConfigError, /schedule options to be an object/],
    ['negative timeoutMs', () => throttle.schedule('u', () => {}, { timeoutMs: -1 }), ThrottleConfigError, /timeoutMs .* got -1/],
    ['priority not finite', () => throttle.schedule('u', () => {}, { priority: Infinity }), ThrottleConfigError, /priority/],
    [
      'misspelt option maxDelay',
      () => throttle.schedule('u', () => {}, { maxDelay: 5 } as never),
      ThrottleConfigError,
      /Unknown schedule option 'maxDelay' \(did you mean 'maxDelayMs'\?\)/,
    ],
    ['an option of the throttle', () => throttle.schedule('u', () => {}, { mode: 'throw' } as never), ThrottleConfigError, /Unknown schedule option 'mode'/],
  ];
  for (const [what, run, type, message] of cases) {
    it(`${what}: typed error, nothing booked`, async () => {
      const error = await run().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).to.be.instanceOf(type);
      expect((error as Error).message).to.match(message);
      expect((await throttle.inspect('u')).rules[0]!.used).to.equal(0);
    });
  }

  const configs: Array<[string, Partial<ThrottleOptions>, RegExp]> = [
    ['no rules', { rules: undefined as never }, /Expected rules/],
    ['limit 0', { rules: [{ limit: 0, windowMs: 1_000 }] }, /limit/],
    ['unknown unit', { rules: ['30/fortnight' as RuleString] }, /30\/fortnight/],
    ['mode', { mode: 'fast' as never }, /mode .* got 'fast'/],
    ['negative maxDelayMs', { maxDelayMs: -5 }, /maxDelayMs/],
    ['negative timeoutMs', { timeoutMs: -1 }, /timeoutMs .* got -1/],
    ['maxHoldMs 0', { maxHoldMs: 0 }, /maxHoldMs .* got 0/],
    ['misspelt maxDelay', { maxDelay: 500 } as never, /Unknown Throttle option 'maxDelay' \(did you mean 'maxDelayMs'\?\)/],
    ['misspelt maxHold', { maxHold: 500 } as never, /Unknown Throttle option 'maxHold' \(did you mean 'maxHoldMs'\?\)/],
    ['removed safetyMarginMs', { safetyMarginMs: 100 } as never, /Unknown Throttle option 'safetyMarginMs'/],
    ['removed adaptiveMargin', { adaptiveMargin: false } as never, /Unknown Throttle option 'adaptiveMargin'/],
    ['removed concurrency', { concurrency: 2 } as never, /Unknown Throttle option 'concurrency'/],
    ['unrelated option', { zzzzzzzzzzzz: 1 } as never, /^Unknown Throttle option 'zzzzzzzzzzzz'; known: name, rules, /],
    ['name', { name: 'a{b}' }, /name/],
    ['store', { store: {} as never }, /store/],
  ];
  for (const [what, options, message] of configs) {
    it(`constructor rejects bad ${what}`, () => {
      expect(() => new Throttle({ rules: ['1/s'], ...options })).to.throw(ThrottleConfigError, message);
    });
  }

  it('rules from a function are checked at the call', async () => {
    const bad = new Throttle({ rules: () => ['30/fortnight' as RuleString] });
    const error = await bad.schedule('u', () => {}).catch((e: unknown) => e);
    expect(error).to.be.instanceOf(ThrottleConfigError);
    await bad.close();
  });
});

describe('Throttle: where completions land on the store clock (real time)', () => {
  it('never writes a release before the store clock, even when thousands of calls are decided in one turn on one clock reading', async () => {
    // The MemoryStore reads its clock once per turn of the event loop: the later calls of a big
    // turn are answered with a reading older than their ask. Their releases must still not be early.
    const clock = () => performance.timeOrigin + performance.now();
    const memory = new MemoryStore({ now: clock });
    const early: number[] = [];
    /** Per key, the store clock as its call returned: its completion comes after. */
    const ends = new Map<string, number>();
    const store = delegatingStore(memory, {
      settle: (namespace, key, settle, coalesceMs) => {
        const end = ends.get(key)!;
        for (const { releaseAt } of settle) if (releaseAt !== null && releaseAt < end) early.push(end - releaseAt);
        return memory.settle(namespace, key, settle, coalesceMs);
      },
    });
    const throttle = new Throttle({ rules: ['1000/s'], store });
    await Promise.all(Array.from({ length: 3_000 }, (_, i) => throttle.schedule(`u${i}`, () => void ends.set(`u${i}`, clock()))));
    await throttle.close();
    expect(early, 'ms early').to.deep.equal([]);
  });
});
