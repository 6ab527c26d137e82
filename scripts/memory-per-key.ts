/**
 * Measures Redis memory per key (MEMORY USAGE of its log and meta keys) for a key used at its limit:
 * `npx tsx scripts/memory-per-key.ts`. Starts its own redis-server on a free port.
 * Exact rules first (`bucketAbove: Infinity`: every call kept), at their largest, just before the
 * log is trimmed: a window of completed calls plus the window before it and 32 more. Then the
 * default, where a limit above `bucketAbove` (48) is bucketed: a full window of completed calls,
 * spread over it, folded into 50 buckets.
 */
import { Redis } from 'ioredis';
import { encodeKey, keyNames } from '../lib/keys.js';
import { parseRule, type Rule } from '../lib/rules.js';
import { RedisStore } from '../lib/stores/redis-store.js';
import { startRedis } from './support/redis-server.js';
import type { RuleString } from '../lib/rules.js';

const server = await startRedis();
const client = new Redis(server.url);
const store = new RedisStore(client, { prefix: 'mem' });
const storeNow = async (): Promise<number> => {
  const [seconds, micros] = await client.time();
  return Number(seconds) * 1_000 + Math.floor(Number(micros) / 1_000);
};

/** Books `calls` slots in chunks the rule allows at once and settles them as completed at `releaseAt(i)`. */
async function fill(key: string, rule: Rule, calls: number, releaseAt: (i: number) => number): Promise<void> {
  const base = { namespace: 'acme', key, rules: [rule], maxDelayMs: Infinity, maxHoldMs: 10_000, retainMs: rule.windowMs };
  const chunk = Math.max(1, Math.min(rule.limit - 1, 10_000));
  for (let done = 0; done < calls; done += chunk) {
    const result = await store.reserve({ ...base, cost: Math.min(chunk, calls - done) });
    if (result.status !== 'booked') throw new Error(`expected a booking, got ${result.status}`);
    await store.settle(
      'acme',
      key,
      result.members.map((member, i) => ({ member, releaseAt: releaseAt(done + i) })),
    );
  }
}

async function bytesOf(key: string): Promise<number> {
  const names = keyNames('mem', 'acme', key);
  let bytes = 0;
  for (const name of [names.log, names.meta]) bytes += (await client.memory('USAGE', name, 'SAMPLES', '0')) ?? 0;
  return bytes;
}

console.log('exact (bucketAbove: Infinity), the log at its largest before a trim (2 × limit + 32 calls):');
console.log('rule        calls in log   bytes (all keys)     bytes per call');
for (const text of ['30/min', '48/min', '100/min', '1000/h', '10000/day']) {
  const rule = parseRule(text as RuleString);
  const key = encodeKey(`exact-${text}`);
  const now = await storeNow();
  const window = rule.windowMs;
  // The window before, which no longer counts (not trimmed yet), then a full window that does.
  const old = rule.limit + 32;
  await fill(key, rule, old, (i) => now - 2 * window + Math.floor((i / old) * (window - 1)));
  await fill(key, rule, rule.limit, (i) => now - window + 1 + Math.floor((i / rule.limit) * (window - 1)));
  const calls = old + rule.limit;
  const bytes = await bytesOf(key);
  console.log(`${text.padEnd(12)}${String(calls).padStart(12)}${String(bytes).padStart(21)}${(bytes / calls).toFixed(1).padStart(17)}`);
}

console.log('\ndefault: limits above 48 bucketed (50 buckets per window), a full window of completed calls spread over it:');
console.log('rule        calls in window   bytes (all keys)');
for (const text of ['49/min', '100/min', '1000/h', '10000/day', '100000/day', '1000000/day']) {
  const parsed = parseRule(text as RuleString);
  const rule = { ...parsed, bucketMs: Math.ceil(parsed.windowMs / 50) };
  const key = encodeKey(`bucketed-${text}`);
  const now = await storeNow();
  const calls = rule.limit - 1;
  await fill(key, rule, calls, (i) => now - Math.floor((i / rule.limit) * (rule.windowMs - 1)));
  // One more decision folds the completed calls into their buckets.
  await fill(key, rule, 1, () => now);
  console.log(`${text.padEnd(12)}${String(rule.limit).padStart(15)}${String(await bytesOf(key)).padStart(19)}`);
}
await client.quit();
await server.stop();
