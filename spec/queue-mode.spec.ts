import { expect } from 'chai';
import { QueueFullError, RateLimitedError, ThrottleClosedError } from '../lib/errors.js';
import { Throttle } from '../lib/throttle.js';
import { MemoryStore } from '../lib/stores/memory-store.js';
import { useFakeClock } from './support/fake-clock.js';
import { redisClient, redisStore, uniquePrefix } from './support/hooks.js';

/** A fn that runs until `finish()` is called: a call kept in flight for as long as a spec needs. */
function inFlight() {
  let finish: () => void = () => {};
  const fn = () => new Promise<void>((resolve) => (finish = resolve));
  return { fn, finish: () => finish() };
}

/** A MemoryStore that counts the most decisions asked of it at once. */
class CountingStore extends MemoryStore {
  inFlight = 0;
  most = 0;
  override async reserve(request: Parameters<MemoryStore['reserve']>[0]): ReturnType<MemoryStore['reserve']> {
    this.most = Math.max(this.most, ++this.inFlight);
    try {
      return await super.reserve(request);
    } finally {
      this.inFlight--;
    }
  }
}

describe("Throttle: the line of a key ('wait' mode; 'queue' and 'delay' read as 'wait')", () => {
  const fake = useFakeClock();

  it("reads the modes of version 0.1 as 'wait'", async () => {
    const throttles = (['queue', 'delay', 'wait', undefined] as const).map((mode) => new Throttle({ rules: ['1/s'], ...(mode ? { mode } : {}) }));
    expect(throttles.map((throttle) => throttle.mode)).to.deep.equal(['wait', 'wait', 'wait', 'wait']);
    await Promise.all(throttles.map((throttle) => throttle.close()));
  });

  it('books a slot once the calls it depends on have completed; calls behind it wait in line, booking nothing', async () => {
    const throttle = new Throttle({ rules: ['2/s'], mode: 'queue' });
    const t0 = Date.now();
    const starts: number[] = [];
    const calls = Array.from({ length: 6 }, () => throttle.schedule('u', () => starts.push(Date.now() - t0)));
    await fake.clock.tickAsync(10);
    expect(starts).to.deep.equal([0, 0]);
    const usage = await throttle.inspect('u');
    // Two slots started and completed at once, so two more are booked at 1 s; the last two depend on
    // those (still to come) and wait in line without booking anything.
    expect(usage.rules[0]!.used).to.equal(2);
    expect(usage.bookedAhead).to.equal(2);
    expect(throttle.stats).to.deep.equal({ queues: 1, queued: 2, sleeping: 2 });
    expect(usage.waitingHere).to.equal(4);
    await fake.clock.tickAsync(2_000);
    await Promise.all(calls);
    // Completion times are read late, never early (lib/time.ts: by the clock drift allowed since
    // the store's latest answer, under 1 ms here): calls 5 and 6 start at 2,000 or 1 ms after.
    expect(starts.slice(0, 4)).to.deep.equal([0, 0, 1_000, 1_000]);
    for (const start of starts.slice(4)) expect(start).to.be.within(2_000, 2_001);
    expect(starts).to.have.length(6);
    await throttle.close();
  });

  it('a line asks for at most one call more than one decision can book (the smallest limit over the cost)', async () => {
    // 20 calls at once on one key, 5/s, each 30 ms: asking for all that wait would send up to 19
    // decisions at once, 14 of which can only be told to wait.
    const store = new CountingStore();
    const throttle = new Throttle({ rules: ['5/s'], store });
    const t0 = Date.now();
    const starts: number[] = [];
    const calls = Array.from({ length: 20 }, () =>
      throttle.schedule(
        'u',
        () =>
          new Promise((resolve) => {
            starts.push(Date.now() - t0);
            setTimeout(resolve, 30);
          }),
      ),
    );
    await fake.clock.tickAsync(4_100);
    await Promise.all(calls);
    expect(store.most).to.equal(6);
    // Nothing later for it: 5 starts a window, each window a call's 30 ms after the one before.
    expect(starts.filter((start) => start < 1_000)).to.have.length(5);
    expect(starts).to.have.length(20);
    expect(Math.max(...starts)).to.be.within(3_090, 3_093);
    await throttle.close();
  });

  it('a line whose ask was booked whole asks wide next: a longer rule can let one decision book past the smallest limit', async () => {
    // 1/100ms and 6/10s, maxHoldMs 100: six calls one second apart fill the long rule; then 8 calls
    // at once. One decision can book six of them (10 s after each of the six, a second apart: the
    // slot booked just before is past its bound and window by then), though the smallest limit is 1.
    const store = new CountingStore();
    const throttle = new Throttle({ rules: ['1/100ms', '6/10s'], maxHoldMs: 100, store });
    const t0 = Date.now();
    for (let i = 0; i < 6; i++) {
      await throttle.schedule('u', () => undefined);
      await fake.clock.tickAsync(1_000);
    }
    store.most = 0;
    const starts: number[] = [];
    const calls = Array.from({ length: 8 }, () => throttle.schedule('u', () => void starts.push(Date.now() - t0)));
    await fake.clock.tickAsync(30_000);
    await Promise.all(calls);
    expect(starts.slice(0, 6)).to.deep.equal([10_000, 11_000, 12_000, 13_000, 14_000, 15_000]);
    // The first call is asked alone, then the line asks for 2 (both booked), then wide: the other 5
    // at once (3 booked, 2 told to wait). Capped at 2, it would take three asks to find that out.
    expect(store.most).to.equal(5);
    expect(starts.slice(6).every((start) => start >= 20_000)).to.equal(true);
    await throttle.close();
  });

  it('a call of another throttle sharing the store is woken by the completion it waits for, not held back to maxHoldMs', async () => {
    // Two throttles on one store and key, as two processes sharing Redis would be. The first call
    // takes 50 ms; the other throttle's call asks while it is in flight, and books once it completes.
    const store = new MemoryStore();
    const options = { rules: ['1/s'], store } as const;
    const one = new Throttle({ ...options, mode: 'queue' });
    const other = new Throttle({ ...options, mode: 'delay' });
    const t0 = Date.now();
    const first = one.schedule('u', () => new Promise((resolve) => setTimeout(resolve, 50)));
    await fake.clock.tickAsync(10);
    let startedAt = -1;
    const second = other.schedule('u', () => (startedAt = Date.now() - t0));
    await fake.clock.tickAsync(10);
    expect(other.stats).to.deep.equal({ queues: 1, queued: 1, sleeping: 0 });
    await fake.clock.tickAsync(1_200);
    await Promise.all([first, second]);
    expect(startedAt).to.be.within(1_050, 1_051);
    await Promise.all([one.close(), other.close()]);
  });

  it('maxDelayMs bounds the whole wait, time in line included: a call that runs out in line leaves it, booking nothing', async () => {
    const throttle = new Throttle({ rules: ['1/100ms'] });
    const t0 = Date.now();
    const starts: Record<string, number> = {};
    const call = (name: string, fn: () => unknown, maxDelayMs?: number) =>
      throttle.schedule('u', () => ((starts[name] = Date.now() - t0), fn()), maxDelayMs === undefined ? {} : { maxDelayMs }).catch((error: unknown) => error);
    const refusals: Array<{ at: number; error: unknown }> = [];
    throttle.on('refused', (event) => refusals.push({ at: Date.now() - t0, error: event.error }));
    // a stays in flight until 1.2 s; b, c and d wait in line for its completion (each could start
    // 100 ms after it, within its maxDelayMs).
    const flight = inFlight();
    const a = call('a', flight.fn);
    await fake.clock.tickAsync(10);
    const [b, c, d] = [call('b', () => 'b', 500), call('c', () => 'c', 3_000), call('d', () => 'd', 1_350)];
    await fake.clock.tickAsync(10);
    expect(throttle.stats).to.deep.equal({ queues: 1, queued: 3, sleeping: 0 });
    // b runs out in line at 510 ms (asked at 10 ms): refused then, with the rule that held it.
    await fake.clock.tickAsync(490);
    expect(refusals.map((refusal) => refusal.at)).to.deep.equal([510]);
    expect(await b).to.be.instanceOf(RateLimitedError);
    expect(refusals[0]!.error).to.equal(await b);
    expect(((await b) as RateLimitedError).rule).to.deep.equal({ limit: 1, windowMs: 100 });
    expect(((await b) as RateLimitedError).retryAfterMs).to.be.at.least(1);
    expect(throttle.stats).to.deep.equal({ queues: 1, queued: 2, sleeping: 0 });
    // a completes at 1.2 s: c books the next slot (1.3 s), and d, which could start only after c's
    // window (1.4 s, past its 1.36 s), is refused at once instead of waiting for nothing.
    await fake.clock.tickAsync(690);
    flight.finish();
    await fake.clock.tickAsync(0);
    expect(refusals.map((refusal) => refusal.at)).to.deep.equal([510, 1_200]);
    expect(await d).to.be.instanceOf(RateLimitedError);
    // Neither b nor d booked anything: only c, sleeping until its slot, counts besides a.
    const usage = await throttle.inspect('u');
    expect(usage.rules[0]!.used).to.equal(1);
    expect(usage.bookedAhead).to.equal(1);
    await fake.clock.tickAsync(1_000);
    await a;
    expect(await c).to.equal('c');
    expect(starts).to.deep.equal({ a: 0, c: 1_300 });
    expect(fake.clock.countTimers()).to.equal(0);
    await throttle.close();
  });

  it('serves higher priority first among waiting calls, then first come, first served', async () => {
    const throttle = new Throttle({ rules: ['1/s'], mode: 'queue' });
    const order: string[] = [];
    const calls = [
      throttle.schedule('u', () => order.push('first')),
      throttle.schedule('u', () => order.push('low')),
      throttle.schedule('u', () => order.push('low too'), { priority: 0 }),
      throttle.schedule('u', () => order.push('high'), { priority: 10 }),
      throttle.schedule('u', () => order.push('middle'), { priority: 5 }),
      throttle.schedule('u', () => order.push('negative'), { priority: -1 }),
    ];
    await fake.clock.tickAsync(6_000);
    await Promise.all(calls);
    expect(order).to.deep.equal(['first', 'high', 'middle', 'low', 'low too', 'negative']);
    await throttle.close();
  });

  it('rejects with QueueFullError a call that would join a line waiting for a completion that already holds maxQueued calls', async () => {
    const throttle = new Throttle({ rules: ['1/s'], maxQueued: 2 });
    const flight = inFlight();
    const first = throttle.schedule('u', flight.fn);
    await fake.clock.tickAsync(10);
    // The first call is in flight: the next ones wait in line for its completion.
    const accepted = [throttle.schedule('u', () => 'second')];
    await fake.clock.tickAsync(10);
    accepted.push(throttle.schedule('u', () => 'third'));
    await fake.clock.tickAsync(10);
    expect(throttle.stats.queued).to.equal(2);
    const refusals: unknown[] = [];
    throttle.on('refused', (event) => refusals.push(event.error));
    let called = false;
    const error = (await throttle.schedule('u', () => (called = true)).catch((e: unknown) => e)) as QueueFullError;
    expect(error).to.be.instanceOf(QueueFullError);
    expect(error.code).to.equal('ERR_QUEUE_FULL');
    expect(error.key).to.equal('u');
    expect(error.maxQueued).to.equal(2);
    expect(refusals).to.deep.equal([error]);
    expect(called).to.equal(false);
    expect(throttle.stats.queued).to.equal(2);
    // Other keys have lines of their own.
    expect(await throttle.schedule('v', () => 'other')).to.equal('other');
    flight.finish();
    await fake.clock.tickAsync(3_000);
    await first;
    expect(await Promise.all(accepted)).to.deep.equal(['second', 'third']);
    await throttle.close();
  });

  it('with maxQueued 0 a call may wait for a completion only when nothing else waits on its key', async () => {
    const throttle = new Throttle({ rules: ['1/s'], maxQueued: 0 });
    const flight = inFlight();
    const first = throttle.schedule('u', flight.fn);
    await fake.clock.tickAsync(10);
    const second = throttle.schedule('u', () => 'second');
    await fake.clock.tickAsync(10);
    expect(await throttle.schedule('u', () => 'third').catch((e: unknown) => e)).to.be.instanceOf(QueueFullError);
    flight.finish();
    await fake.clock.tickAsync(1_100);
    await first;
    expect(await second).to.equal('second');
    await throttle.close();
  });

  it('aborting a waiting call removes it; close rejects the rest and leaves no timer', async () => {
    const throttle = new Throttle({ rules: ['1/min'], mode: 'queue' });
    await throttle.schedule('u', () => {});
    const controller = new AbortController();
    const head = throttle.schedule('u', () => {});
    const aborted = throttle.schedule('u', () => {}, { signal: controller.signal });
    const rest = throttle.schedule('u', () => {});
    await fake.clock.tickAsync(5);
    expect(throttle.stats).to.deep.equal({ queues: 1, queued: 2, sleeping: 1 });
    controller.abort(new Error('stop'));
    expect(((await aborted.catch((e: unknown) => e)) as Error).message).to.equal('stop');
    expect(throttle.stats).to.deep.equal({ queues: 1, queued: 1, sleeping: 1 });
    await throttle.close();
    for (const call of [head, rest]) expect(await call.catch((e: unknown) => e)).to.be.instanceOf(ThrottleClosedError);
    expect(throttle.stats).to.deep.equal({ queues: 0, queued: 0, sleeping: 0 });
    expect(fake.clock.countTimers()).to.equal(0);
  });

  it('drops idle lines: 100,000 distinct keys leave nothing behind', async function () {
    this.timeout(60_000);
    const throttle = new Throttle({ rules: ['5/s'], mode: 'queue' });
    for (let batch = 0; batch < 100; batch++) {
      await Promise.all(Array.from({ length: 1_000 }, (_, i) => throttle.schedule(`user-${batch}-${i}`, () => {})));
    }
    await fake.clock.tickAsync(0);
    expect(throttle.stats).to.deep.equal({ queues: 0, queued: 0, sleeping: 0 });
    await throttle.close();
  });
});

describe('Throttle: processes waiting on one key take turns (RedisStore)', () => {
  it('a process with a long backlog does not keep every freed slot: after the opening window, processes alternate', async () => {
    // Two processes (two stores, so two tags) on one Redis and one key. A asks first for 8 calls,
    // B just after for 8; 2/150ms, each call 20 ms. A's first ask takes the opening window.
    const prefix = uniquePrefix();
    const client = redisClient();
    const make = () => new Throttle({ name: 'turns', rules: ['2/150ms'], store: redisStore(client, { prefix }) });
    const [a, b] = [make(), make()];
    const order: string[] = [];
    let opened!: () => void;
    const openingWindow = new Promise<void>((resolve) => (opened = resolve));
    const run = (throttle: Throttle, who: string) =>
      Array.from({ length: 8 }, () =>
        throttle.schedule(
          'u',
          () =>
            new Promise<void>((resolve) => {
              order.push(who);
              if (order.length === 2) opened();
              setTimeout(resolve, 20);
            }),
        ),
      );
    const calls = run(a, 'a');
    // B asks once A's first ask has taken the opening window (a fixed pause is too short on a busy machine).
    await openingWindow;
    await Promise.all([...calls, ...run(b, 'b')]);
    expect(order.slice(0, 2)).to.deep.equal(['a', 'a']);
    // After the opening window no process gets more than two freed slots in a row while the other waits.
    const rest = order.slice(2, order.lastIndexOf('a') < order.lastIndexOf('b') ? order.lastIndexOf('a') + 1 : order.lastIndexOf('b') + 1);
    expect(rest.join(''), order.join('')).to.not.match(/aaa|bbb/);
    expect(order.filter((who) => who === 'a')).to.have.length(8);
    await Promise.all([a.close(), b.close()]);
  });
});
