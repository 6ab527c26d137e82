/**
 * BullMQ workers calling a vendor that limits each user: `throttleProcessor()` beside
 * `throttle.schedule()` inside the processor, on a real BullMQ and a private Redis.
 *
 *     npx tsx scripts/bench/bullmq.ts [--runs=1] [--wait-ms=250] [--ways=schedule,processor] [--steady] [--app=6]
 *
 * One queue; 60 jobs of a heavy user (a nightly import) are added, then 3 jobs each of 10 light
 * users. Each job is one call to a simulated vendor that allows 5 calls per second per user
 * (scripts/sim-vendor.ts, 5–55 ms a call). Two worker processes, concurrency 4 each, one throttle
 * per process (rules '5/s', one RedisStore on the same Redis as the queue). Prints, per way:
 * when the light users' last job completed (from when they were added), when the queue emptied
 * against the heavy user's ideal (its 60 calls at 5 per second: the last starts 11 s after the
 * first), calls over the limit at the vendor, jobs whose call ran more than once, and how many
 * times jobs were delayed. --steady adds the heavy user's jobs one every 100 ms (twice its limit)
 * instead of all at once. --app=N makes every job count in an app-wide key too, N calls per second
 * over every user (jobs of two keys: `key: (job) => [job.data.user, 'app']`); the ideal is then the
 * later of the heavy user's and every job's at N a second, and calls over the app's limit are
 * counted from every user's arrivals at the vendor.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Queue, QueueEvents, Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { RedisStore, Throttle } from '../../lib/index.js';
import { throttleProcessor } from '../../lib/adapters/bullmq.js';
import { maxInWindow, startVendor } from '../sim-vendor.js';
import { startRedis } from '../support/redis-server.js';
import { runAsChild, waitForLine } from '../support/child.js';

type Way = 'processor' | 'schedule';

interface WorkerConfig {
  readonly redisUrl: string;
  readonly vendorUrl: string;
  readonly queue: string;
  readonly prefix: string;
  readonly way: Way;
  readonly waitMs: number;
  /** Calls per second over every user (an app-wide key), 0: none. */
  readonly app: number;
}

interface JobData {
  readonly user: string;
}

const HEAVY_JOBS = 60;
const LIGHT_USERS = 10;
const LIGHT_JOBS = 3;
const LIMIT = 5;
const WINDOW_MS = 1_000;
const WORKERS = 2;
const CONCURRENCY = 4;

/** One worker process: a BullMQ Worker whose processor sends the job's call through this process's throttle. */
async function workerProcess(config: WorkerConfig): Promise<void> {
  const connection = new Redis(config.redisUrl, { maxRetriesPerRequest: null });
  const redis = new Redis(config.redisUrl);
  const store = new RedisStore(redis, { prefix: config.prefix });
  const rules = (key: string): [`${number}/s`] => [`${key === 'app' ? config.app : LIMIT}/s`];
  const throttle = new Throttle({ name: 'vendor', rules, store, maxDelayMs: 600_000 });
  const keyOf = (job: Job<JobData>): string | string[] => (config.app > 0 ? [job.data.user, 'app'] : job.data.user);
  const call = async (job: Job<JobData>): Promise<void> => {
    // Counted before the call leaves: a job whose call runs twice shows here.
    await redis.hincrby(`${config.prefix}:runs`, job.id!, 1);
    const response = await fetch(`${config.vendorUrl}?user=${encodeURIComponent(job.data.user)}`);
    await response.arrayBuffer();
  };
  const processor =
    config.way === 'processor'
      ? throttleProcessor(throttle, call, { key: keyOf, waitMs: config.waitMs })
      : (job: Job<JobData>) => throttle.schedule(keyOf(job), () => call(job));
  const worker = new Worker<JobData, void>(config.queue, processor, { connection, concurrency: CONCURRENCY, prefix: config.prefix });
  await worker.waitUntilReady();
  process.stdout.write('ready\n');
  await waitForLine();
  // The parent sends SIGTERM once the queue is done: the worker, the throttle, then the clients.
  await new Promise<void>((resolve) => process.once('SIGTERM', () => resolve()));
  await worker.close();
  await throttle.close();
  await store.close();
  redis.disconnect();
  connection.disconnect();
}

if (process.argv[2]?.startsWith('{')) runAsChild<WorkerConfig>(import.meta.url, 'bullmq bench worker', workerProcess);

interface Outcome {
  readonly way: Way;
  readonly lightDoneMs: number;
  readonly queueDoneMs: number;
  readonly heavyFirstToLastMs: number;
  readonly over: number;
  /** Calls over the app-wide limit: most arrivals of every user in a window, above it. */
  readonly appOver: number;
  readonly runTwice: number;
  readonly delays: number;
  readonly mostStarts: number;
  /** Jobs that started once, twice, 3 times, more. */
  readonly byStarts: readonly number[];
  readonly failed: number;
}

async function runOnce(redisUrl: string, way: Way, waitMs: number, steady: boolean, app: number): Promise<Outcome> {
  const vendor = await startVendor({ limit: LIMIT, windowMs: WINDOW_MS, latencyMs: { min: 5, max: 55 } });
  const prefix = `bench-${way}-${process.pid}-${Date.now()}`;
  const queueName = 'imports';
  const connection = new Redis(redisUrl, { maxRetriesPerRequest: null });
  const queue = new Queue<JobData>(queueName, { connection, prefix });
  const events = new QueueEvents(queueName, { connection: { url: redisUrl }, prefix });
  await events.waitUntilReady();
  const config: WorkerConfig = { redisUrl, vendorUrl: vendor.url, queue: queueName, prefix, way, waitMs, app };
  const children = Array.from({ length: WORKERS }, () =>
    spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), JSON.stringify(config)], { stdio: ['pipe', 'pipe', 'inherit'] }),
  );
  await Promise.all(children.map((child) => new Promise<void>((resolve) => child.stdout!.once('data', () => resolve()))));
  const finished = new Map<string, number>();
  let failed = 0;
  const total = HEAVY_JOBS + LIGHT_USERS * LIGHT_JOBS;
  const done = new Promise<void>((resolve) => {
    const check = (): void => {
      if (finished.size + failed >= total) resolve();
    };
    events.on('completed', ({ jobId }) => {
      finished.set(jobId, performance.now());
      check();
    });
    events.on('failed', ({ jobId, failedReason }) => {
      failed++;
      console.error(`job ${jobId} failed: ${failedReason}`);
      check();
    });
  });
  for (const child of children) child.stdin!.write('go\n');
  const t0 = performance.now();
  const heavy = (i: number) => ({ name: 'call', data: { user: 'heavy' }, opts: { jobId: `heavy-${i}` } });
  if (steady) {
    // Twice the heavy user's limit, a job every 100 ms, while the light users' jobs come at once.
    void (async () => {
      for (let i = 0; i < HEAVY_JOBS; i++) {
        await queue.add(heavy(i).name, heavy(i).data, heavy(i).opts);
        await new Promise((resolve) => setTimeout(resolve, WINDOW_MS / LIMIT / 2));
      }
    })();
  } else {
    await queue.addBulk(Array.from({ length: HEAVY_JOBS }, (_, i) => heavy(i)));
  }
  const lightAt = performance.now();
  await queue.addBulk(
    Array.from({ length: LIGHT_USERS * LIGHT_JOBS }, (_, i) => ({ name: 'call', data: { user: `light-${i % LIGHT_USERS}` }, opts: { jobId: `light-${i}` } })),
  );
  await done;
  const lightDone = Math.max(...[...finished].filter(([id]) => id.startsWith('light')).map(([, at]) => at));
  const queueDone = Math.max(...finished.values());
  const stats = vendor.stats();
  const heavyArrivals = stats.perUser.get('heavy') ?? [];
  const runs = await connection.hgetall(`${prefix}:runs`);
  const completed = await queue.getJobs(['completed'], 0, -1);
  const starts = completed.map((job) => job.attemptsStarted);
  for (const child of children) child.kill('SIGTERM');
  await Promise.all(children.map((child) => new Promise((resolve) => child.once('exit', resolve))));
  await events.close();
  await queue.obliterate({ force: true });
  await queue.close();
  connection.disconnect();
  await vendor.close();
  return {
    way,
    lightDoneMs: lightDone - lightAt,
    queueDoneMs: queueDone - t0,
    heavyFirstToLastMs: heavyArrivals.length > 0 ? heavyArrivals[heavyArrivals.length - 1]! - heavyArrivals[0]! : NaN,
    over: stats.dropped + vendor.violations(),
    appOver: app > 0 ? Math.max(0, maxInWindow([...stats.perUser.values()].flat(), WINDOW_MS) - app) : 0,
    runTwice: Object.values(runs).filter((count) => Number(count) > 1).length,
    delays: starts.reduce((sum, count) => sum + count - 1, 0),
    mostStarts: Math.max(...starts),
    byStarts: [1, 2, 3].map((n) => starts.filter((count) => count === n).length).concat(starts.filter((count) => count > 3).length),
    failed,
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      runs: { type: 'string', default: '1' },
      'wait-ms': { type: 'string', default: '250' },
      ways: { type: 'string', default: 'schedule,processor' },
      steady: { type: 'boolean', default: false },
      app: { type: 'string', default: '0' },
    },
  });
  const app = Number(values.app);
  const runs = Number(values.runs);
  const waitMs = Number(values['wait-ms']);
  const server = await startRedis();
  const total = HEAVY_JOBS + LIGHT_USERS * LIGHT_JOBS;
  const idealMs = Math.max(HEAVY_JOBS / LIMIT - 1, app > 0 ? total / app - 1 : 0) * WINDOW_MS;
  const appRule = app > 0 ? `, and ${app}/s over every user (each job counts in its user's key and 'app')` : '';
  console.log(`BullMQ: ${HEAVY_JOBS} jobs of a heavy user, then ${LIGHT_JOBS} jobs each of ${LIGHT_USERS} light users; vendor ${LIMIT}/s per user${appRule};`);
  console.log(`${WORKERS} worker processes × concurrency ${CONCURRENCY}; the ideal: the last call ${idealMs / 1000} s after the first.`);
  console.log('');
  console.log(
    '| way | light users done | queue done (× ideal) | heavy user first→last call | over the limit (user, app) | jobs run twice | delays (most starts of a job) | jobs by starts, 1/2/3/more | failed |',
  );
  console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
  try {
    for (let run = 0; run < runs; run++) {
      for (const way of values.ways.split(',') as Way[]) {
        const o = await runOnce(server.url, way, waitMs, values.steady, app);
        const name = way === 'processor' ? `throttleProcessor (waitMs ${waitMs})` : 'schedule() inside the processor';
        console.log(
          `| ${name} | ${(o.lightDoneMs / 1000).toFixed(2)} s | ${(o.queueDoneMs / 1000).toFixed(2)} s (${(o.queueDoneMs / idealMs).toFixed(2)}×) | ${(o.heavyFirstToLastMs / 1000).toFixed(2)} s | ${o.over}, ${o.appOver} | ${o.runTwice} | ${o.delays} (${o.mostStarts}) | ${o.byStarts.join('/')} | ${o.failed} |`,
        );
      }
    }
  } finally {
    await server.stop();
  }
}

if (!process.argv[2]?.startsWith('{') && import.meta.url === `file://${process.argv[1]}`) await main();
