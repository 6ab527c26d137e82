/**
 * The store's wake channels (lib/stores/redis-wakes.ts), against a subscriber by hand: a channel
 * subscribed again after a reconnection that fails is said (`subscribeFailed`), once until a
 * subscription succeeds.
 */
import { expect } from 'chai';
import type { StoreNotice } from '../lib/store.js';
import type { ClientDriver, Subscriber } from '../lib/stores/redis-client.js';
import { Wakes } from '../lib/stores/redis-wakes.js';

describe('RedisStore wakes: a channel not subscribed again is said (storeWarning subscribeFailed)', () => {
  it('says once that a channel cannot be subscribed again after a reconnection, until a subscription succeeds', async () => {
    // The subscriptions' answers, in order: the first listen, then three after reconnections.
    const answers = [true, false, false, true, false];
    let reconnected = (): void => undefined;
    const subscriber: Subscriber = {
      subscribe: async () => {
        if (answers.shift() === false) throw new Error('NOPERM this user has no permissions to access one of the channels');
      },
      close: () => undefined,
    };
    const client = {
      subscriber: (_message: unknown, again: () => void) => {
        reconnected = again;
        return subscriber;
      },
      timed: <T>(promise: Promise<T>) => promise,
    } as unknown as ClientDriver;
    const notices: StoreNotice[] = [];
    const wakes = new Wakes(client, (notice) => notices.push(notice));
    const woken: string[] = [];
    await wakes.listen('channel', (key) => woken.push(key));
    const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
    for (let i = 0; i < 4; i++) {
      reconnected();
      await settle();
    }
    expect(notices.map((notice) => notice.kind)).to.deep.equal(['subscribeFailed', 'subscribeFailed']);
    expect(notices[0]!.message).to.match(/^The store cannot subscribe again to its wake channels after a reconnection \(NOPERM/);
    expect(notices[0]!.error).to.be.instanceOf(Error);
    // Every reconnection woke the waiting calls: they ask again.
    expect(woken).to.have.length(4);
    wakes.close();
  });
});
