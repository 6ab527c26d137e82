/**
 * A quiet process is not a lost store: a long-running throttle whose key still has its log in Redis
 * serves a call after any silence at once, in both modes. (The namespace's epoch key once expired
 * while the keys' logs lived, and the next decision took the expiry for a loss: every call after a
 * few seconds of silence was held, and refused in `throw` mode as "a vendor pause".)
 */
import { expect } from 'chai';
import { RateLimitedError } from '../lib/errors.js';
import { keyNames, encodeKey } from '../lib/keys.js';
import type { ReserveResult } from '../lib/store.js';
import { Throttle } from '../lib/throttle.js';
import { delegatingStore } from './support/delegating-store.js';
import { redisClient, redisStore, uniquePrefix } from './support/hooks.js';

/** Silences between calls, ms: short and longer than the epoch used to live past its last touch. */
const SILENCES = [0, 300, 1_000, 1_300];

describe('a quiet process', function () {
  this.timeout(10_000);

  for (const mode of ['wait', 'throw'] as const) {
    it(`serves a call after every silence at once (${mode} mode)`, async () => {
      // A short grace period keeps the spec quick: the epoch's life was two of them past its last touch.
      const redis = redisStore(redisClient(), { prefix: uniquePrefix(), recovery: { heartbeatMs: 100, graceMs: 300 } });
      // Every answer of the store: a call served at once is booked to start now, at its first ask.
      const answers: ReserveResult[] = [];
      const store = delegatingStore(redis, { reserve: async (request) => answers[answers.push(await redis.reserve(request)) - 1]! });
      const throttle = new Throttle({ name: 'quiet', rules: ['5/200ms'], mode, store });
      try {
        for (const silence of SILENCES) {
          await new Promise((resolve) => setTimeout(resolve, silence));
          answers.length = 0;
          const outcome = await throttle.schedule('user', () => 'ran').catch((error: unknown) => error);
          if (outcome instanceof RateLimitedError) expect.fail(`refused after ${silence} ms of silence: ${outcome.message}`);
          expect(outcome, `after ${silence} ms of silence`).to.equal('ran');
          expect(
            answers.map(({ status, waitMs }) => ({ status, waitMs })),
            `after ${silence} ms of silence`,
          ).to.deep.equal([{ status: 'booked', waitMs: 0 }]);
        }
      } finally {
        await throttle.close();
      }
    });
  }

  it("a call held after a real loss says so: reason 'recovering', not a vendor pause", async () => {
    const prefix = uniquePrefix();
    const client = redisClient();
    const store = redisStore(client, { prefix, recovery: { heartbeatMs: 100, graceMs: 300 } });
    const throttle = new Throttle({ name: 'lost', rules: ['5/s'], mode: 'throw', store });
    try {
      expect(await throttle.schedule('user', () => 'ran')).to.equal('ran');
      // The namespace's data is lost (as a restart without persistence or FLUSHALL would do).
      const { log, meta } = keyNames(prefix, 'lost', encodeKey('user'));
      await client.del(`${prefix}:lost:epoch`, log, meta);
      const refused = await throttle.schedule('user', () => 'ran').catch((error: unknown) => error);
      expect(refused).to.be.instanceOf(RateLimitedError);
      expect(refused).to.have.property('reason', 'recovering');
      expect((refused as RateLimitedError).message).to.match(/putting back calls after it lost data/);
    } finally {
      await throttle.close();
    }
  });
});
