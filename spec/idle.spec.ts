/**
 * The p-queue habits: `size` (calls waiting for a slot), `pending` (calls whose fn runs),
 * `onEmpty()` (nothing waits for a slot) and `onIdle()` (nothing waits or runs). In-process, on a
 * fake clock.
 */
import { expect } from 'chai';
import { Throttle } from '../lib/index.js';
import { useFakeClock } from './support/fake-clock.js';

describe('size, pending, onEmpty() and onIdle()', () => {
  const fake = useFakeClock();

  it('count the calls waiting for a slot and running, and resolve when each drops to 0', async () => {
    const throttle = new Throttle({ rules: ['2/s'] });
    expect([throttle.size, throttle.pending]).to.deep.equal([0, 0]);
    await throttle.onIdle();
    await throttle.onEmpty();
    const log: string[] = [];
    const calls = Array.from({ length: 5 }, (_, i) =>
      throttle.schedule('u', async () => {
        await new Promise((resolve) => setTimeout(resolve, 300));
        return i;
      }),
    );
    void throttle.onEmpty().then(() => log.push(`empty at ${Date.now()}`));
    void throttle.onIdle().then(() => log.push(`idle at ${Date.now()}`));
    const t0 = Date.now();
    await fake.clock.tickAsync(10);
    // 2 started at once, 3 wait for the next window.
    expect([throttle.size, throttle.pending]).to.deep.equal([3, 2]);
    await fake.clock.tickAsync(3_000);
    expect(await Promise.all(calls)).to.deep.equal([0, 1, 2, 3, 4]);
    expect([throttle.size, throttle.pending]).to.deep.equal([0, 0]);
    const [empty, idle] = log.map((line) => Number(line.split(' at ')[1]) - t0);
    expect(log.map((line) => line.split(' at ')[0])).to.deep.equal(['empty', 'idle']);
    // Empty when the fifth call started (a window after the third and fourth ended: 2.6 s), idle
    // when it ended, 300 ms later.
    expect(empty).to.be.within(2_000, 3_000);
    expect(idle! - empty!).to.be.within(300, 310);
    await throttle.close();
  });

  it('a call that is refused or fails leaves the counts as well', async () => {
    const throttle = new Throttle({ rules: ['1/s'], maxDelayMs: 0 });
    await throttle.schedule('u', () => 'first');
    const refused = throttle.schedule('u', () => 'second').catch((error: unknown) => error);
    const failed = throttle.schedule('v', () => Promise.reject(new Error('boom'))).catch((error: unknown) => error);
    await fake.clock.tickAsync(10);
    expect((await failed) as Error).to.have.property('message', 'boom');
    expect((await refused) as Error).to.have.property('name', 'RateLimitedError');
    expect([throttle.size, throttle.pending]).to.deep.equal([0, 0]);
    await throttle.onIdle();
    await throttle.close();
  });
});
