/**
 * vendor-throttle on the official node-redis client: two "workers" (two clients, two throttles,
 * as two processes would be) share one limit of 5 calls per second per user through Redis.
 *
 *     npx tsx scripts/examples/node-redis.ts          # against redis://127.0.0.1:6379
 *     REDIS_URL=redis://host:port npx tsx scripts/examples/node-redis.ts
 *
 * Prints when each call started, per user: never more than 5 in any second, over both workers.
 * Its keys live under a fresh prefix and expire on their own.
 */
import { createClient } from 'redis';
import { RedisStore, Throttle } from '../../lib/index.js';

const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const prefix = `example-${process.pid}`;
const users = ['alice', 'bob'];
const callsPerWorker = Number(process.env.EXAMPLE_CALLS ?? 6);

async function worker(name: string, started: Map<string, string[]>, t0: number): Promise<void> {
  // The user connects the client; the store uses it as it is, and leaves it open on close().
  const client = createClient({ url });
  client.on('error', (error: unknown) => console.error(`${name}: Redis`, error));
  await client.connect();
  const store = new RedisStore(client, { prefix });
  const throttle = new Throttle({ name: 'acme', rules: ['5/s'], store });
  try {
    const calls = users.flatMap((user) =>
      Array.from({ length: callsPerWorker }, () =>
        throttle.schedule(user, async () => {
          // The vendor call would go here.
          started.get(user)!.push(`${Math.round(performance.now() - t0)} ms (${name})`);
        }),
      ),
    );
    await Promise.all(calls);
  } finally {
    await throttle.close();
    await store.close();
    await client.quit();
  }
}

async function main(): Promise<void> {
  const started = new Map(users.map((user) => [user, [] as string[]]));
  const t0 = performance.now();
  await Promise.all([worker('worker 1', started, t0), worker('worker 2', started, t0)]);
  for (const [user, times] of started) console.log(`${user}: ${times.join(', ')}`);
}

await main();
