/**
 * vendor-throttle in BullMQ workers: two workers (as two processes would be: each its own throttle
 * and Redis clients) take jobs of one queue that each call a vendor allowing 5 calls per second per
 * user. A heavy user's 20 jobs are added first, then 2 jobs each of 3 light users.
 *
 *     npx tsx scripts/examples/bullmq.ts          # against redis://127.0.0.1:6379
 *     REDIS_URL=redis://host:port npx tsx scripts/examples/bullmq.ts
 *
 * Prints when each user's jobs ran (ms after the first job was added) and how many times jobs were
 * delayed: the light users' jobs run at once, between the heavy user's, whose jobs are delayed to
 * their places (5 a second) instead of holding the workers. The queue and keys live under a fresh
 * prefix, removed (queue) or expiring (throttle keys) at the end.
 */
import { Queue, Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { RedisStore, Throttle } from '../../lib/index.js';
import { throttleProcessor } from '../../lib/adapters/bullmq.js';

interface CallJob {
  readonly user: string;
}

const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const prefix = `example-bullmq-${process.pid}`;
const heavyJobs = Number(process.env.EXAMPLE_HEAVY_JOBS ?? 20);
const lightUsers = ['ann', 'ben', 'cal'];
const t0 = performance.now();
const ran = new Map<string, string[]>();

/** One worker "process": a throttle on its own Redis client, and a BullMQ worker on its own connection. */
async function startWorker(name: string, ended: () => void): Promise<() => Promise<void>> {
  const redis = new Redis(url);
  const throttle = new Throttle({ name: 'acme', rules: ['5/s'], store: new RedisStore(redis, { prefix }) });
  const processor = throttleProcessor(
    throttle,
    async (job: Job<CallJob, string>) => {
      // The vendor call would go here.
      ran.get(job.data.user)!.push(`${Math.round(performance.now() - t0)}`);
      return name;
    },
    { key: (job) => job.data.user },
  );
  // BullMQ's connection blocks on Redis: it needs maxRetriesPerRequest: null.
  const worker = new Worker<CallJob, string>('acme-calls', processor, { connection: { url, maxRetriesPerRequest: null }, prefix, concurrency: 4 });
  worker.on('completed', ended);
  worker.on('failed', ended);
  await worker.waitUntilReady();
  // The order to close in: the worker (its active jobs finish), the throttle, the client.
  return async () => {
    await worker.close();
    await throttle.close();
    await redis.quit();
  };
}

async function main(): Promise<void> {
  const queue = new Queue<CallJob, string>('acme-calls', { connection: { url }, prefix });
  const users = ['heavy', ...lightUsers];
  for (const user of users) ran.set(user, []);
  const total = heavyJobs + lightUsers.length * 2;
  let ended = 0;
  let allEnded!: () => void;
  const done = new Promise<void>((resolve) => (allEnded = resolve));
  const onEnded = (): void => {
    if (++ended === total) allEnded();
  };
  const closers = [await startWorker('worker 1', onEnded), await startWorker('worker 2', onEnded)];
  await queue.addBulk(Array.from({ length: heavyJobs }, () => ({ name: 'call', data: { user: 'heavy' } })));
  await queue.addBulk(lightUsers.flatMap((user) => [0, 1].map(() => ({ name: 'call', data: { user } }))));
  await done;
  const jobs = await queue.getJobs(['completed'], 0, -1);
  const delays = jobs.reduce((sum, job) => sum + job.attemptsStarted - 1, 0);
  for (const user of users) console.log(`${user}: ${ran.get(user)!.join(', ')} ms`);
  console.log(`${jobs.length} jobs completed, ${delays} delays`);
  for (const close of closers) await close();
  await queue.obliterate({ force: true });
  await queue.close();
}

await main();
