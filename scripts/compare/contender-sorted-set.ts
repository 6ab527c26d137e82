/**
 * The common recipe: a sorted-set sliding log per user. One small Lua script trims entries older
 * than the longest window (ZREMRANGEBYSCORE), counts the entries of each window (ZCOUNT; ZCARD
 * when there is one rule) and, when every rule has room, adds the call (ZADD) and refreshes the
 * key's TTL; otherwise it answers how long until the oldest entry in the way leaves its window, and
 * the caller sleeps that long and asks again. The time is the caller's clock (`Date.now()`).
 */
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Contender } from './contender.js';

const SLIDING_LOG = `
-- KEYS[1]: the user's log: member = call id, score = start time (ms)
-- ARGV[1]: now (ms), ARGV[2]: call id, ARGV[3]: longest window (ms), ARGV[4..]: limit, window pairs
-- Returns 0 when the call is added, else the ms until it may be asked again.
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
local wait = 0
for i = 4, #ARGV, 2 do
  local limit, window = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  local count
  if #ARGV == 5 then count = redis.call('ZCARD', KEYS[1])
  else count = redis.call('ZCOUNT', KEYS[1], '(' .. (now - window), '+inf') end
  if count >= limit then
    local oldest = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. (now - window), '+inf', 'WITHSCORES', 'LIMIT', count - limit, 1)
    wait = math.max(wait, tonumber(oldest[2]) + window - now)
  end
end
if wait > 0 then return math.ceil(wait) end
redis.call('ZADD', KEYS[1], now, ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 0
`;

type SlidingLogClient = Redis & { cmpSlidingLog(key: string, ...args: Array<string | number>): Promise<number> };

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export function sortedSet(): Contender {
  return {
    id: 'zset',
    label: 'sorted-set log',
    describe: (rules) =>
      `Lua: ZREMRANGEBYSCORE + ${rules.length === 1 ? 'ZCARD' : 'ZCOUNT per rule'} + ZADD + PEXPIRE, client clock, on refusal sleep until the oldest entry leaves the window and retry`,
    async create(context) {
      const redis = (await context.connect()) as SlidingLogClient;
      redis.defineCommand('cmpSlidingLog', { numberOfKeys: 1, lua: SLIDING_LOG });
      const longest = Math.max(...context.rules.map((rule) => rule.windowMs));
      const ruleArgs = context.rules.flatMap((rule) => [rule.limit, rule.windowMs]);
      return {
        async schedule(user, fn) {
          const id = randomUUID();
          for (;;) {
            const wait = await redis.cmpSlidingLog(`${context.runId}:${user}`, Date.now(), id, longest, ...ruleArgs);
            if (wait === 0) break;
            await sleep(wait);
          }
          await fn();
        },
        async close() {},
      };
    },
  };
}
