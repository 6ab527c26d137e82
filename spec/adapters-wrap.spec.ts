import { expect } from 'chai';
import { ThrottleConfigError } from '../lib/errors.js';
import { Throttle } from '../lib/throttle.js';
import { useFakeClock } from './support/fake-clock.js';

describe('throttle.wrap()', () => {
  const fake = useFakeClock();

  it("keeps fn's parameters, this and result, keyed and costed from the arguments", async () => {
    const throttle = new Throttle({ rules: ['2/s'] });
    const starts: Array<[string, number]> = [];
    const api = {
      base: 'https://api.acme.example',
      async order(this: { base: string }, userId: string, orderId: number): Promise<string> {
        starts.push([userId, Date.now() - t0]);
        return `${this.base}/users/${userId}/orders/${orderId}`;
      },
    };
    const order = throttle.wrap(api.order, { key: (userId) => userId, cost: (_userId, orderId) => (orderId === 0 ? 2 : 1) });
    const t0 = Date.now();
    const results = Promise.all([
      order.call(api, 'u1', 0), // costs both slots of the window
      order.call(api, 'u1', 1),
      order.call(api, 'u2', 7),
    ]);
    await fake.clock.tickAsync(1_000);
    expect(await results).to.deep.equal([
      'https://api.acme.example/users/u1/orders/0',
      'https://api.acme.example/users/u1/orders/1',
      'https://api.acme.example/users/u2/orders/7',
    ]);
    expect(starts).to.deep.equal([
      ['u1', 0],
      ['u2', 0],
      ['u1', 1_000],
    ]);
    await throttle.close();
  });

  it("rejects with fn's own error, and a signal from the arguments cancels the wait", async () => {
    const throttle = new Throttle({ rules: ['1/s'] });
    const failure = new Error('vendor down');
    let calls = 0;
    const send = throttle.wrap(
      async (_userId: string, _signal?: AbortSignal) => {
        calls += 1;
        throw failure;
      },
      { key: (userId) => userId, signal: (_userId, signal) => signal },
    );
    expect(await send('u1').catch((error: unknown) => error)).to.equal(failure);
    const controller = new AbortController();
    const waiting = send('u1', controller.signal).catch((error: unknown) => error);
    await fake.clock.tickAsync(100);
    controller.abort();
    expect(await waiting).to.equal(controller.signal.reason);
    expect(calls).to.equal(1);
    expect((await throttle.inspect('u1')).rules[0]!.used).to.equal(1);
    await throttle.close();
  });

  it('rejects what cannot work', async () => {
    const throttle = new Throttle({ rules: ['1/s'] });
    expect(() => throttle.wrap('fn' as unknown as () => void, { key: () => 'u' })).to.throw(ThrottleConfigError, /fn to be a function/);
    expect(() => throttle.wrap(() => 1, { key: 'u' as unknown as () => string })).to.throw(ThrottleConfigError, /key to be a function/);
    expect(() => throttle.wrap(() => 1, { key: () => 'u', signal: 1 as unknown as () => undefined })).to.throw(ThrottleConfigError, /signal/);
    const wrapped = throttle.wrap(() => 1, { key: () => ({}) as unknown as string });
    expect(await wrapped().catch((error: unknown) => error)).to.be.instanceOf(ThrottleConfigError);
    await throttle.close();
  });
});
