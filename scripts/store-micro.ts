/**
 * The RedisStore alone (or, with THROTTLE=1, through a Throttle): what one decision and its
 * completion cost Redis and this process. 10,000 keys round-robin, 256 decisions in flight, each
 * booked call completed at once; 1 s warm-up, then 3 s measured (`MS` to change it), rule 1000/1s
 * (`LIMIT` to change it).
 *
 *   npx tsx scripts/store-micro.ts
 *   THROTTLE=1 npx tsx scripts/store-micro.ts   # through Throttle.schedule(), fn does nothing
 *
 * Prints decisions per second, Redis CPU and worker CPU per decision and completion, and the
 * commands Redis ran per pair (`INFO commandstats`: the script call, and what the script ran).
 * Starts its own redis-server on a free port and stops it. Compare figures of runs taken side by
 * side only: this machine's speed varies between runs.
 */
import { Redis } from 'ioredis';
import { RedisStore, Throttle } from '../lib/index.js';
import { startRedis } from './support/redis-server.js';

const KEYS = 10_000;
const IN_FLIGHT = 256;
const server = await startRedis();
const client = new Redis({ port: server.port });
const admin = new Redis({ port: server.port });
const store = new RedisStore(client, { prefix: 'micro' });
const rules = [{ limit: Number(process.env.LIMIT ?? 1000), windowMs: 1000 }];
let next = 0;
let pairs = 0;
let stop = false;

// THROTTLE=1: the same load through Throttle.schedule() with a fn that does nothing.
const throttle = process.env.THROTTLE ? new Throttle({ name: 'n', rules, store }) : undefined;
const nothing = (): void => undefined;

async function loop(): Promise<void> {
  while (!stop && throttle) {
    await throttle.schedule(`u${next++ % KEYS}`, nothing);
    pairs++;
  }
  while (!stop) {
    const key = `u${next++ % KEYS}`;
    const result = await store.reserve({ namespace: 'n', key, rules, cost: 1, maxDelayMs: Infinity, maxHoldMs: 10_000, retainMs: 1000 });
    if (result.status === 'booked')
      await store.settle(
        'n',
        key,
        result.members.map((member) => ({ member, releaseAt: result.now + 1 })),
      );
    pairs++;
  }
}

async function redisCpuSeconds(): Promise<number> {
  const info = await admin.info('cpu');
  const field = (name: string): number => Number(new RegExp(`${name}:([\\d.]+)`).exec(info)![1]);
  return field('used_cpu_user') + field('used_cpu_sys');
}

try {
  const loops = Array.from({ length: IN_FLIGHT }, loop);
  await new Promise((resolve) => setTimeout(resolve, 1000));
  await admin.config('RESETSTAT');
  const cpuBefore = await redisCpuSeconds();
  const pairsBefore = pairs;
  const workerBefore = process.cpuUsage();
  const startedAt = performance.now();
  await new Promise((resolve) => setTimeout(resolve, Number(process.env.MS ?? 3000)));
  const redisCpu = (await redisCpuSeconds()) - cpuBefore;
  const worker = process.cpuUsage(workerBefore);
  const seconds = (performance.now() - startedAt) / 1000;
  const n = pairs - pairsBefore;
  const stats = await admin.info('commandstats');
  stop = true;
  await Promise.all(loops);
  console.log(
    `${Math.round(n / seconds)} decisions/s; per decision and completion: Redis CPU ${((redisCpu * 1e6) / n).toFixed(1)} µs, worker CPU ${((worker.user + worker.system) / n).toFixed(1)} µs`,
  );
  for (const line of stats.split('\n')) {
    const match = /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/.exec(line);
    if (match && !['info', 'config|resetstat'].includes(match[1]!)) {
      console.log(`  ${match[1]!.padEnd(8)} ${(Number(match[2]) / n).toFixed(2)} per pair, ${(Number(match[3]) / n).toFixed(2)} µs`);
    }
  }
} finally {
  await throttle?.close();
  await store.close();
  client.disconnect();
  admin.disconnect();
  await server.stop();
}
