/**
 * Measures Redis memory per key (MEMORY USAGE of its log and meta keys) for a key that is full
 * under a rule: `npx tsx scripts/memory-per-key.ts`. Starts its own redis-server on a free port.
 * Exact rules first (every call kept), then bucketed ones (ThrottleOptions.bucketAbove): a full day
 * of completed calls, spread over the window, folded into 50 buckets.
 */
import { Redis } from 'ioredis';
import { encodeKey, keyNames } from '../lib/keys.js';
import { parseRule } from '../lib/rules.js';
import { RedisStore } from '../lib/stores/redis-store.js';
import { startRedis } from './support/redis-server.js';

const server = await startRedis();
const client = new Redis(server.url);
const store = new RedisStore(client, { prefix: 'mem' });

console.log('rule        calls in log   bytes (all keys)     bytes per call');
for (const text of ['30/min', '100/min', '1000/h', '10000/day']) {
  const rule = parseRule(text);
  const key = encodeKey(`user-${text}`);
  const request = { namespace: 'acme', key, rules: [rule], cost: 1, maxDelayMs: Infinity, maxHoldMs: 10_000, retainMs: rule.windowMs };
  const batch = 500;
  for (let done = 0; done < rule.limit; done += batch) {
    await Promise.all(
      Array.from({ length: Math.min(batch, rule.limit - done) }, async () => {
        // Book a slot, then settle it as a completed call does: its score drops from its bound to its completion.
        const { startAt, members } = await store.reserve(request);
        await store.settle('acme', key, members.map((member) => ({ member, releaseAt: startAt + 50 })));
      }),
    );
  }
  const names = keyNames('mem', 'acme', key);
  let bytes = 0;
  for (const name of [names.log, names.meta]) bytes += (await client.memory('USAGE', name, 'SAMPLES', '0')) ?? 0;
  console.log(`${text.padEnd(12)}${String(rule.limit).padStart(12)}${String(bytes).padStart(21)}${(bytes / rule.limit).toFixed(1).padStart(17)}`);
}
console.log('\nbucketed (50 buckets per window), a full window of completed calls spread over it:');
console.log('rule        calls in window   bytes (all keys)');
for (const text of ['10000/day', '100000/day', '1000000/day']) {
  const parsed = parseRule(text);
  const rule = { ...parsed, bucketMs: Math.ceil(parsed.windowMs / 50) };
  const key = encodeKey(`bucketed-${text}`);
  const base = { namespace: 'acme', key, rules: [rule], maxDelayMs: Infinity, maxHoldMs: 10_000, retainMs: rule.windowMs };
  const now = Number((await client.time())[0]) * 1_000;
  const cost = Math.min(rule.limit - 1, 10_000);
  for (let done = 0; done < rule.limit - 1; done += cost) {
    const { members } = await store.reserve({ ...base, cost: Math.min(cost, rule.limit - 1 - done) });
    // Completions spread evenly over the past window, as steady use at the limit leaves them.
    const settle = members.map((member, i) => ({ member, releaseAt: now - Math.floor(((done + i) / rule.limit) * (rule.windowMs - 60_000)) }));
    await store.settle('acme', key, settle);
  }
  await store.reserve({ ...base, cost: 1 }); // folds the completed calls into their buckets
  const names = keyNames('mem', 'acme', key);
  let bytes = 0;
  for (const name of [names.log, names.meta]) bytes += (await client.memory('USAGE', name, 'SAMPLES', '0')) ?? 0;
  console.log(`${text.padEnd(12)}${String(rule.limit).padStart(15)}${String(bytes).padStart(19)}`);
}
await client.quit();
await server.stop();
