import { expect } from 'chai';
import { QueueFullError, RateLimitedError, ThrottleClosedError } from '../lib/errors.js';
import { Throttle } from '../lib/throttle.js';
import { MemoryStore } from '../lib/stores/memory-store.js';
import { useFakeClock } from './support/fake-clock.js';

// One head per key unless a spec says otherwise, so that who books when is easy to follow.
const exact = { safetyMarginMs: 0, adaptiveMargin: false, concurrency: 1 } as const;

describe('Throttle: queue mode', () => {
  const fake = useFakeClock();

  it('runs queued calls as slots free, and only the head holds a booked slot', async () => {
    const throttle = new Throttle({ rules: ['2/s'], mode: 'queue', ...exact });
    const t0 = Date.now();
    const starts: number[] = [];
    const calls = Array.from({ length: 6 }, () => throttle.schedule('u', () => starts.push(Date.now() - t0)));
    await fake.clock.tickAsync(10);
    expect(starts).to.deep.equal([0, 0]);
    const usage = await throttle.inspect('u');
    // Two slots started, one booked by the head; three more wait locally without booking anything.
    expect(usage.rules[0]!.used).to.equal(3);
    expect(throttle.stats).to.deep.include({ queues: 1, queued: 3, sleeping: 1 });
    expect(usage.waitingHere).to.equal(4);
    await fake.clock.tickAsync(2_000);
    await Promise.all(calls);
    // A slot that was waited for counts from 1 ms before its start (the wait is rounded up to whole
    // ms, so the local reading is taken early on purpose). Call 3 waited for 1000; call 4 asked at
    // 1000 and started at once. So call 5, bound by call 4's completion, starts at 2000, and
    // call 6, bound by call 3's, 1 ms later.
    expect(starts).to.deep.equal([0, 0, 1_000, 1_000, 2_000, 2_001]);
    await throttle.close();
  });

  it('estimates its calls in flight like delay mode, so a delay-mode throttle sharing the key is not held back', async () => {
    // Two throttles on one store and key, as two processes sharing Redis would be. The queue-mode
    // call takes 50 ms; the delay-mode call asks while it is in flight and books behind its estimate
    // (the 100 ms margin), then confirms the slot once the completion is known. With the queue's
    // slot counted until maxHoldMs (10 s), the delay-mode call used to wait 11 s.
    const store = new MemoryStore();
    const options = { rules: ['1/s'], store, safetyMarginMs: 100, adaptiveMargin: false } as const;
    const queued = new Throttle({ ...options, mode: 'queue' });
    const delayed = new Throttle({ ...options, mode: 'delay' });
    const t0 = Date.now();
    const first = queued.schedule('u', () => new Promise((resolve) => setTimeout(resolve, 50)));
    await fake.clock.tickAsync(10);
    let startedAt = -1;
    const second = delayed.schedule('u', () => (startedAt = Date.now() - t0));
    await fake.clock.tickAsync(1_200);
    await Promise.all([first, second]);
    expect(startedAt).to.equal(1_100);
    await Promise.all([queued.close(), delayed.close()]);
  });

  it('maxDelayMs bounds the whole wait, time queued included: a call that runs out while queued leaves the queue', async () => {
    const throttle = new Throttle({ rules: ['1/s'], mode: 'queue', ...exact });
    const t0 = Date.now();
    const starts: Record<string, number> = {};
    const call = (name: string, maxDelayMs?: number) =>
      throttle.schedule('u', () => (starts[name] = Date.now() - t0), maxDelayMs === undefined ? {} : { maxDelayMs }).catch((error: unknown) => error);
    const refusals: Array<{ at: number; error: unknown }> = [];
    throttle.on('refused', (event) => refusals.push({ at: Date.now() - t0, error: event.error }));
    // a runs at once, b is the head (its slot at 1 s); c, d and e wait in the queue behind b.
    const outcomes = [call('a'), call('b'), call('c', 500), call('d', 3_000), call('e', 1_500)];
    await fake.clock.tickAsync(5_000);
    const [, , c, , e] = await Promise.all(outcomes);
    expect(starts).to.deep.equal({ a: 0, b: 1_000, d: 2_001 });
    // c ran out queued at 500 ms, e at 1.5 s (d was the head then, with the slot at 2 s): each is
    // refused when its time is up, with the wait for the key's next free slot.
    expect(c).to.be.instanceOf(RateLimitedError);
    expect(e).to.be.instanceOf(RateLimitedError);
    expect(refusals.map((refusal) => refusal.at)).to.deep.equal([500, 1_500]);
    expect((c as RateLimitedError).reason).to.equal('booked');
    expect((c as RateLimitedError).retryAfterMs).to.equal(1_500);
    expect(fake.clock.countTimers()).to.equal(0);
    await throttle.close();
  });

  it('serves higher priority first among queued calls', async () => {
    const throttle = new Throttle({ rules: ['1/s'], mode: 'queue', ...exact });
    const order: string[] = [];
    const calls = [
      throttle.schedule('u', () => order.push('first')),
      throttle.schedule('u', () => order.push('low'), { priority: 0 }),
      throttle.schedule('u', () => order.push('high'), { priority: 10 }),
    ];
    await fake.clock.tickAsync(3_000);
    await Promise.all(calls);
    expect(order).to.deep.equal(['first', 'high', 'low']);
    await throttle.close();
  });

  it('rejects with QueueFullError past maxQueued, without queueing', async () => {
    const throttle = new Throttle({ rules: ['1/s'], mode: 'queue', maxQueued: 2, ...exact });
    // The first call is the head (booking its slot); two more wait behind it: the queue is full.
    const accepted = [1, 2, 3].map(() => throttle.schedule('u', () => {}));
    const error = (await throttle.schedule('u', () => {}).catch((e: unknown) => e)) as QueueFullError;
    expect(error).to.be.instanceOf(QueueFullError);
    expect(error.maxQueued).to.equal(2);
    expect(throttle.stats.queued).to.equal(2);
    await fake.clock.tickAsync(3_000);
    await Promise.all(accepted);
    await throttle.close();
  });

  it('with maxQueued 0 a call runs when the key has a free head, and is refused otherwise', async () => {
    const throttle = new Throttle({ rules: ['1/s'], mode: 'queue', maxQueued: 0, ...exact });
    const first = throttle.schedule('u', () => 'first');
    const second = throttle.schedule('u', () => 'second').catch((e: unknown) => e);
    expect(await first).to.equal('first');
    expect(await second).to.be.instanceOf(QueueFullError);
    await throttle.close();
  });

  it('aborting a queued call removes it; close rejects the rest and leaves no timer', async () => {
    const throttle = new Throttle({ rules: ['1/min'], mode: 'queue', ...exact });
    await throttle.schedule('u', () => {});
    const controller = new AbortController();
    const head = throttle.schedule('u', () => {});
    const aborted = throttle.schedule('u', () => {}, { signal: controller.signal });
    const rest = throttle.schedule('u', () => {});
    await fake.clock.tickAsync(5);
    controller.abort(new Error('stop'));
    expect(((await aborted.catch((e: unknown) => e)) as Error).message).to.equal('stop');
    await throttle.close();
    for (const call of [head, rest]) expect(await call.catch((e: unknown) => e)).to.be.instanceOf(ThrottleClosedError);
    expect(fake.clock.countTimers()).to.equal(0);
  });

  it('drops idle queues: 100,000 distinct keys leave nothing behind', async function () {
    this.timeout(60_000);
    const throttle = new Throttle({ rules: ['5/s'], mode: 'queue', ...exact });
    for (let batch = 0; batch < 100; batch++) {
      await Promise.all(Array.from({ length: 1_000 }, (_, i) => throttle.schedule(`user-${batch}-${i}`, () => {})));
    }
    await fake.clock.tickAsync(0);
    expect(throttle.stats).to.deep.include({ queues: 0, queued: 0, sleeping: 0 });
    await throttle.close();
  });
});
