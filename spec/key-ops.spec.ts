/**
 * The habits users bring from other limiters, on both stores: `inspect()` with `remaining` and the
 * calls booked ahead apart, and whether the store holds anything for the key; `reset(key)` for
 * every process; the non-throwing `limit(key)` whose slot counts like a call's; one rule label in
 * errors.
 */
import { expect } from 'chai';
import { RateLimitedError, Throttle, ThrottleConfigError, type ThrottleOptions } from '../lib/index.js';
import { STORE_PAIRS } from './support/throttles.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const stores = STORE_PAIRS;

for (const [name, make] of stores) {
  describe(`inspect(), reset() and limit() on a ${name}`, function () {
    this.timeout(10_000);
    const throttles: Throttle[] = [];
    afterEach(async () => {
      await Promise.all(throttles.splice(0).map((throttle) => throttle.close()));
    });
    function pair(options: Partial<ThrottleOptions> = {}) {
      const { one, other } = make();
      const a = new Throttle({ name: 'acme', rules: ['2/400ms'], store: one, ...options });
      const b = new Throttle({ name: 'acme', rules: ['2/400ms'], store: other, ...options });
      throttles.push(a, b);
      return { a, b };
    }

    it('pause(): a call booked ahead before another process paused the key gives its slot up: it starts after the pause, behind calls asked since', async () => {
      const { a, b } = pair();
      const t0 = performance.now();
      const starts = [1, 2, 3].map(() => a.schedule('u', () => performance.now() - t0));
      // The third is booked to start a window (400 ms) later (once its store answered: a fresh
      // store reads its epoch first, which a loaded machine makes slow); then the vendor says wait 600 ms.
      const bookedBy = performance.now() + 300;
      while ((await b.inspect('u')).bookedAhead === 0 && performance.now() < bookedBy) await sleep(5);
      expect((await b.inspect('u')).bookedAhead).to.equal(1);
      await b.pause('u', 600);
      const pausedAt = performance.now() - t0;
      // The pause took the slot out of the log: the room goes to whoever asks first, here a call of
      // the other process asked right after the pause (a request the vendor refused, retried).
      expect((await b.inspect('u')).bookedAhead, 'booked ahead once paused').to.equal(0);
      // Two: the whole window after the pause.
      const retried = [1, 2].map(() => b.schedule('u', () => performance.now() - t0));
      const [, , third] = await Promise.all(starts);
      const after = await Promise.all(retried);
      for (const start of after) expect(start, 'start of a call asked after the pause, ms').to.be.at.least(pausedAt + 600 - 5);
      expect(third, 'start of the call booked ahead: the window after theirs').to.be.at.least(Math.min(...after) + 400 - 5);
      expect((await a.inspect('u')).bookedAhead).to.equal(0);
    });

    it('inspect(): calls booked ahead apart from used (never above the limit), remaining, and whether anything is stored', async () => {
      const { a, b } = pair();
      const empty = await b.inspect('u');
      expect(empty).to.include({ stored: false, bookedAhead: 0, nextFreeInMs: 0 });
      expect(empty.rules[0]).to.include({ used: 0, remaining: 2 });
      await a.schedule('u', () => 'one');
      expect((await b.inspect('u')).rules[0]).to.include({ used: 1, remaining: 1 });
      // Two more complete at once: the first takes the last room, the second is booked a window later.
      const calls = [a.schedule('u', () => 'two'), a.schedule('u', () => 'three')];
      await sleep(60);
      const usage = await b.inspect('u');
      expect(usage.stored).to.equal(true);
      expect(usage.rules[0]).to.include({ used: 2, remaining: 0, limit: 2 });
      expect(usage.bookedAhead).to.equal(1);
      expect(usage.nextFreeInMs).to.be.above(0);
      await Promise.all(calls);
    });

    it('reset(key) forgets the calls that started, for every process: the next call starts at once', async () => {
      const { a, b } = pair({ mode: 'throw', rules: ['2/5s'] });
      await a.schedule('u', () => 1);
      await b.schedule('u', () => 2);
      expect(await a.schedule('u', () => 3).catch((error: unknown) => error)).to.be.instanceOf(RateLimitedError);
      expect((await b.limit('u')).success).to.equal(false);
      expect(await b.schedule('u', () => 3).catch((error: unknown) => error)).to.be.instanceOf(RateLimitedError);
      await a.reset('u');
      expect((await b.inspect('u')).rules[0]).to.include({ used: 0, remaining: 2 });
      // b remembers its refusal for a second at most (it saves a round trip per refused call).
      await sleep(1_050);
      expect(await b.schedule('u', () => 'after reset')).to.equal('after reset');
      // The resetting process forgets the refusal it remembered.
      expect(await a.schedule('u', () => 'here too')).to.equal('here too');
      // Another key is untouched.
      await a.schedule('other', () => 1);
      await a.reset('u');
      expect((await b.inspect('other')).rules[0]!.used).to.equal(1);
    });

    it('reset(key) wakes the calls another process has waiting on the key', async () => {
      const { a, b } = pair({ rules: ['1/5s'] });
      let release = () => {};
      const running = a.schedule('u', () => new Promise<void>((resolve) => (release = resolve)));
      await sleep(30);
      // Its slot depends on the call in flight: it waits for that call's completion.
      const startedAt = performance.now();
      const waiting = b.schedule('u', () => performance.now() - startedAt);
      await sleep(50);
      await a.reset('u');
      expect(await waiting).to.be.below(1_000);
      release();
      await running;
    });

    if (name === 'RedisStore') {
      it('reset(key) is not taken for a data loss by a process with a call in flight there, folds after it included', async () => {
        // 30/h is bucketed (above bucketAbove): calls fold into buckets once the log is full.
        const { a, b } = pair({ rules: ['20/s', '30/h'], bucketAbove: 25, maxDelayMs: 5_000 });
        let release = () => {};
        const running = a.schedule('u', () => new Promise<void>((resolve) => (release = resolve)));
        await sleep(30);
        await b.reset('u');
        for (let i = 0; i < 21; i++) await b.schedule('u', () => i);
        release();
        await running;
        // a's witness is gone, but by a reset: its next call is not held for a grace period.
        const startedAt = performance.now();
        await a.schedule('u', () => 'next');
        expect(performance.now() - startedAt).to.be.below(1_500);
      });
    }

    it('limit(key) answers without throwing, books when it succeeds, and its slot counts like a call', async () => {
      const { a, b } = pair();
      const first = await a.limit('u');
      expect(first).to.include({ success: true, remaining: 1, retryAfterMs: 0 });
      const second = await b.limit('u');
      expect(second).to.include({ success: true, remaining: 0 });
      const third = await a.limit('u');
      expect(third.success).to.equal(false);
      expect(third.remaining).to.equal(0);
      expect(third.retryAfterMs).to.be.above(0);
      expect(third.resetInMs).to.be.above(0);
      // The slots count against schedule() too, in every process.
      expect(await b.schedule('u', () => 'x', { maxDelayMs: 0 }).catch((error: unknown) => error)).to.be.instanceOf(RateLimitedError);
      third.done();
      first.done();
      second.done();
      second.done();
      await sleep(450);
      expect((await a.limit('u')).success).to.equal(true);
    });

    it('limit(key): a slot whose call is not reported counts until its bound (start + maxHoldMs), then a window', async () => {
      const { a } = pair({ rules: ['1/100ms'], maxHoldMs: 300 });
      expect((await a.limit('u')).success).to.equal(true);
      await sleep(200);
      // Past a window after the start, but the call may still be on its way: still counted.
      expect((await a.limit('u')).success).to.equal(false);
      await sleep(250);
      expect((await a.limit('u')).success).to.equal(true);
    });

    it('limit(key, { cost }) takes cost slots; an unknown option or a cost above the limit is refused with nothing booked', async () => {
      const { a } = pair();
      const error = await a.limit('u', { costs: 2 } as never).catch((reason: unknown) => reason);
      expect(error).to.be.instanceOf(ThrottleConfigError);
      expect((error as Error).message).to.match(/costs.*cost/);
      expect(await a.limit('u', { cost: 3 }).catch((reason: unknown) => reason)).to.be.instanceOf(ThrottleConfigError);
      expect(await a.limit('u', { cost: 2 })).to.include({ success: true, remaining: 0 });
      expect((await a.limit('u')).success).to.equal(false);
    });
  });
}

describe('one rule label everywhere', () => {
  it('RateLimitedError names its rule as formatRule and the CLI do (5/s, not 5/1000ms)', async () => {
    const throttle = new Throttle({ name: 'acme', rules: ['1/s'], mode: 'throw' });
    await throttle.schedule('u', () => 1);
    const error = (await throttle.schedule('u', () => 2).catch((reason: unknown) => reason)) as RateLimitedError;
    await throttle.close();
    expect(error).to.be.instanceOf(RateLimitedError);
    expect(error.message).to.include('by rule 1/s:');
  });
});
