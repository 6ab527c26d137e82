import type { ThrottleOptions } from '../../lib/options.js';
import { Throttle } from '../../lib/throttle.js';
import type { Store } from '../../lib/store.js';
import { MemoryStore } from '../../lib/stores/memory-store.js';
import { redisClient, redisStore, uniquePrefix } from './hooks.js';

/**
 * For the suite it is called in: a `make(options)` that builds a Throttle (rule 10/s unless given)
 * and closes every one it built after each test.
 */
export function useThrottles(): (options?: Partial<ThrottleOptions>) => Throttle {
  let throttles: Throttle[] = [];
  afterEach(async () => {
    await Promise.all(throttles.map((throttle) => throttle.close()));
    throttles = [];
  });
  return (options = {}) => {
    const throttle = new Throttle({ rules: ['10/s'], ...options });
    throttles.push(throttle);
    return throttle;
  };
}

/**
 * The stores a spec runs on twice, each as two processes see it: one `MemoryStore` (one process,
 * both sides), and two `RedisStore`s on their own clients sharing a prefix (two processes).
 */
export const STORE_PAIRS: ReadonlyArray<[string, () => { one: Store; other: Store }]> = [
  [
    'MemoryStore',
    () => {
      const store = new MemoryStore();
      return { one: store, other: store };
    },
  ],
  [
    'RedisStore',
    () => {
      const prefix = uniquePrefix();
      return { one: redisStore(redisClient(), { prefix }), other: redisStore(redisClient(), { prefix }) };
    },
  ],
];
