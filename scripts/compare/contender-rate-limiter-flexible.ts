/**
 * rate-limiter-flexible: `RateLimiterRedis` (points N per duration T, a fixed window per key that
 * starts at its first call) wrapped in `RateLimiterQueue`, and `removeTokens(1, user)` before each
 * call, as its wiki page "RateLimiterQueue" shows for limiting calls to a third-party API. Several
 * rules are several queues taken one after the other, the longest window first, so that the
 * shortest one gates the start (RateLimiterUnion cannot be queued: it rejects with one result per
 * limiter, not the `msBeforeNext` the queue waits for).
 */
import { RateLimiterQueue, RateLimiterRedis } from 'rate-limiter-flexible';
import { longestFirst, type Contender } from './contender.js';

export function rateLimiterFlexible(): Contender {
  return {
    id: 'rlf',
    label: 'rate-limiter-flexible',
    describe: (rules) =>
      longestFirst(rules)
        .map((r) => `RateLimiterQueue(RateLimiterRedis({ points: ${r.limit}, duration: ${r.windowMs / 1000} }))`)
        .join(' then ') + ', removeTokens(1, user)',
    async create(context) {
      for (const rule of context.rules) {
        // RateLimiterRedis sets the key's TTL with EX in whole seconds.
        if (rule.windowMs % 1000 !== 0) throw new Error(`RateLimiterRedis needs whole-second durations, got ${rule.windowMs} ms`);
      }
      const redis = await context.connect();
      const queues = longestFirst(context.rules).map(
        (rule, i) =>
          new RateLimiterQueue(
            new RateLimiterRedis({ storeClient: redis, keyPrefix: `${context.runId}-${i}`, points: rule.limit, duration: rule.windowMs / 1000 }),
          ),
      );
      return {
        async schedule(user, fn) {
          for (const queue of queues) await queue.removeTokens(1, user);
          await fn();
        },
        async close() {},
      };
    },
  };
}
