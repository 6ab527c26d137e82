import { MemoryStore, parseRules, RedisStore, Throttle } from '../index.js';
import { encodeKey } from '../keys.js';
import { longestWindow } from '../rules.js';
import { ruleSource, splitRule, type SendSettings, type ThrottleConfig } from './args.js';
import { closeRedis, connectRedis } from './redis.js';
import type { RuleString } from '../rules.js';
import type { RulesOption } from '../options.js';

/** A call an earlier run made, still counting against the rules: for the in-memory store of a resumed run. */
export interface RecentCall {
  readonly key: string;
  /** More keys it counted in. */
  readonly also?: readonly string[];
  /** When its response was read (epoch ms). */
  readonly completedAt: number;
  /** Slots it took: attempts × cost. */
  readonly slots: number;
}

export interface OpenThrottle {
  readonly throttle: Throttle;
  /** True when the limits live in Redis, shared with other processes. */
  readonly shared: boolean;
  /** Closes the throttle, then the Redis client (if any). */
  close(): Promise<void>;
}

/** The library's default `maxHoldMs`: the least the command runs with. */
const MIN_HOLD_MS = 10_000;

/**
 * Builds the throttle of a run: on a `RedisStore` when `--redis` is given (connecting first, exit 3
 * when Redis cannot be reached), else on a `MemoryStore` of this process. For the in-memory store,
 * `recent` puts back the calls an interrupted run made that still count, so that a resumed run keeps
 * the rules across the restart (Redis keeps them by itself). `maxHoldMs` is at least `--timeout-ms`,
 * as docs/api.md advises, so a slow request keeps counting as in flight until it times out.
 */
export async function openThrottle(config: ThrottleConfig, send: SendSettings, recent: readonly RecentCall[] = []): Promise<OpenThrottle> {
  const redis = config.redis === undefined ? undefined : await connectRedis(config.redis, config.cluster);
  const store = redis === undefined ? new MemoryStore() : new RedisStore(redis, { prefix: config.prefix, hashTag: config.hashTag });
  // A call without a completion counts as in flight this long after its estimate: at least the request timeout.
  const maxHoldMs = Math.max(MIN_HOLD_MS, send.timeoutMs);
  const throttle = new Throttle({ name: config.name, rules: ruleSource(config.rules) as RulesOption, mode: config.mode, store, maxHoldMs });
  if (redis === undefined && recent.length > 0) {
    const retainMs = longestWindow(parseRules(config.rules.map((given) => splitRule(given).rule as RuleString)));
    const now = Date.now();
    const byKey = new Map<string, RecentCall[]>();
    for (const call of recent) {
      if (call.completedAt + retainMs <= now) continue;
      for (const key of [call.key, ...(call.also ?? [])]) {
        const calls = byKey.get(key);
        if (calls === undefined) byKey.set(key, [call]);
        else calls.push(call);
      }
    }
    for (const [key, calls] of byKey) {
      const slots = calls.map((call) => ({ releaseInMs: call.completedAt - now, cost: call.slots }));
      await store.restore(config.name, encodeKey(key), slots, retainMs);
    }
  }
  return {
    throttle,
    shared: redis !== undefined,
    async close() {
      await throttle.close();
      await store.close();
      if (redis !== undefined) await closeRedis(redis);
    },
  };
}
