/**
 * A process that ends its own Redis client (`quit()`, `disconnect()`) but forgets
 * `throttle.close()` exits by itself, as p-queue and ioredis users expect: the store's own
 * subscriber connection follows the client, and calls still waiting fail with
 * `StoreUnavailableError` instead of waiting for a wake that cannot come. Each case runs in a child
 * process (spec/support/quit-worker.ts) against the run's Redis.
 */
import { expect } from 'chai';
import { Redis } from 'ioredis';
import { once } from 'node:events';
import { StoreUnavailableError, Throttle, type StoreErrorPolicy } from '../lib/index.js';
import { redisClient, redisServer, redisStore, uniquePrefix } from './support/hooks.js';
import { runQuitWorker } from './support/quit-worker.js';

/** From the moment the worker ends its client to its exit, at most. */
const EXIT_WITHIN_MS = 3_000;

describe('a process that ends its Redis client without closing its throttle', function () {
  this.timeout(30_000);

  for (const end of ['quit', 'disconnect'] as const) {
    it(`exits by itself after ${end}(), the store's subscriber closed with the client`, async () => {
      const run = await runQuitWorker({ redisUrl: redisServer().url, prefix: uniquePrefix(), end, whileWaiting: false, calls: 4, callMs: 50 }, EXIT_WITHIN_MS);
      // The third and fourth calls waited for completions: the store had opened its subscriber.
      expect(run.ended.subscribers).to.equal(1);
      expect(run.done.outcomes).to.deep.equal(['ran', 'ran', 'ran', 'ran']);
      expect(run.code).to.equal(0);
    });
  }

  for (const onStoreError of ['fail', 'wait', 'local'] as StoreErrorPolicy[]) {
    it(`onStoreError '${onStoreError}': calls still waiting when the client quits fail with StoreUnavailableError, and the process exits`, async () => {
      const run = await runQuitWorker(
        { redisUrl: redisServer().url, prefix: uniquePrefix(), end: 'quit', whileWaiting: true, calls: 4, callMs: 300, onStoreError },
        EXIT_WITHIN_MS,
      );
      expect(run.ended.subscribers).to.equal(1);
      // The first two were running: they finish. The others were waiting for their completions.
      expect(run.done.outcomes.slice(0, 2)).to.deep.equal(['ran', 'ran']);
      for (const outcome of run.done.outcomes.slice(2))
        expect(outcome).to.match(/^StoreUnavailableError: The Redis client was closed \(quit\(\), disconnect\(\)/);
      expect(run.code).to.equal(0);
    });
  }
});

describe('a RedisStore whose client ended', function () {
  this.timeout(10_000);

  it('fails every call at once, then works again, subscriber and all, once the client connects again', async () => {
    const name = `client-end-${process.pid}`;
    const client = new Redis(redisServer().url, { connectionName: name });
    const store = redisStore(client, { prefix: uniquePrefix() });
    const throttle = new Throttle({ name: 'acme', rules: ['2/200ms'], store, onStoreError: 'wait' });
    const admin = redisClient();
    const subscribers = async (): Promise<number> =>
      ((await admin.call('CLIENT', 'LIST')) as string).split('\n').filter((line) => line.includes(` name=${name} `) && / sub=[1-9]/.test(line)).length;
    try {
      const three = () => Promise.all([1, 2, 3].map(() => throttle.schedule('u', () => new Promise((resolve) => setTimeout(() => resolve('ran'), 20)))));
      // The third call waits for a completion: the store subscribes.
      expect(await three()).to.deep.equal(['ran', 'ran', 'ran']);
      expect(await subscribers()).to.equal(1);

      client.disconnect();
      await once(client, 'end');
      expect(store.ended).to.equal(true);
      const startedAt = performance.now();
      const error = await throttle.schedule('u', () => 'ran').catch((reason: unknown) => reason);
      // At once, though onStoreError is 'wait' and maxDelayMs unbounded.
      expect(performance.now() - startedAt).to.be.below(100);
      expect(error).to.be.instanceOf(StoreUnavailableError);
      expect((error as Error).message).to.match(/^The Redis client was closed/);
      expect(await throttle.inspect('u').catch((reason: unknown) => reason)).to.be.instanceOf(StoreUnavailableError);

      await client.connect();
      expect(store.ended).to.equal(false);
      expect(await three()).to.deep.equal(['ran', 'ran', 'ran']);
      expect(await subscribers()).to.equal(1);
    } finally {
      await throttle.close();
      await store.close();
      client.disconnect();
    }
  });
});
