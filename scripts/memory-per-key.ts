/**
 * Measures Redis memory per key (MEMORY USAGE of its log, meta and flight keys) for a key that is full
 * under a rule: `npx tsx scripts/memory-per-key.ts`. Starts its own redis-server on a free port.
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
  const request = { namespace: 'acme', key, rules: [rule], cost: 1, maxDelayMs: Infinity, holdMs: 100, retainMs: rule.windowMs, defer: false, maxHoldMs: 10_000, settle: [] };
  const batch = 500;
  for (let done = 0; done < rule.limit; done += batch) {
    await Promise.all(
      Array.from({ length: Math.min(batch, rule.limit - done) }, async () => {
        // Book a slot, then settle it as a completed call does: its `flight` entry goes away.
        const { startAt, members } = await store.reserve(request);
        await store.settle('acme', key, members.map((member) => ({ member, releaseAt: startAt + 50 })), rule.windowMs);
      }),
    );
  }
  const names = keyNames('mem', 'acme', key);
  let bytes = 0;
  for (const name of [names.log, names.meta, names.flight]) bytes += (await client.memory('USAGE', name, 'SAMPLES', '0')) ?? 0;
  console.log(`${text.padEnd(12)}${String(rule.limit).padStart(12)}${String(bytes).padStart(21)}${(bytes / rule.limit).toFixed(1).padStart(17)}`);
}
await client.quit();
await server.stop();
