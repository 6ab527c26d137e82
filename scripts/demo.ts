/**
 * `npm run demo`: a batch of calls against a simulated vendor whose per-user limit is silent
 * (over-limit calls get 200 OK and are never performed), once through vendor-throttle and once
 * through a naive client (plain Promise.all), each against a fresh vendor.
 *
 * - No REDIS_URL: one process, MemoryStore.
 * - REDIS_URL=redis://host:port: RedisStore, the batch split over 3 worker processes
 *   (spec/support/worker.ts) sharing the limits through that Redis (keys under a fresh prefix,
 *   which expire on their own).
 *
 * Exits by itself; exit code 1 if the vendor dropped any throttled call.
 */
import { MemoryStore, Throttle } from '../lib/index.js';
import { spawnWorkers } from '../spec/support/worker.js';
import { startVendor, type Vendor } from './sim-vendor.js';

const LIMIT = 10;
const WINDOW_MS = 1000;
const USERS = Array.from({ length: 5 }, (_, i) => `user-${i + 1}`);
const CALLS_PER_USER = 60;
const WORKERS = 3;
const LATENCY = { min: 10, max: 60 };
const TOTAL = USERS.length * CALLS_PER_USER;
const IDEAL_MS = (Math.ceil(CALLS_PER_USER / LIMIT) - 1) * WINDOW_MS;

interface Row {
  readonly label: string;
  readonly sent: number;
  readonly accepted: number;
  readonly dropped: number;
  readonly batchMs: number;
}

/** One request to the vendor for `user`, read to the end. */
async function call(vendor: Vendor, user: string): Promise<void> {
  const response = await fetch(`${vendor.url}?user=${encodeURIComponent(user)}`);
  await response.text();
}

/** Calls in the order a batch job would push them: every user's 1st call, then every 2nd, … */
function batch(users: readonly string[], perUser: number): string[] {
  const calls: string[] = [];
  for (let i = 0; i < perUser; i++) calls.push(...users);
  return calls;
}

/** Shows `label: n/total` on stderr while `work` runs, when stderr is a terminal. */
async function withProgress<T>(label: string, vendor: Vendor, work: Promise<T>): Promise<T> {
  if (!process.stderr.isTTY) return work;
  const started = performance.now();
  const draw = (): void => {
    const { received } = vendor.stats();
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    process.stderr.write(`\r  ${label}: ${received}/${TOTAL} calls sent, ${seconds} s\x1b[K`);
  };
  const ticker = setInterval(draw, 100);
  try {
    return await work;
  } finally {
    clearInterval(ticker);
    draw();
    process.stderr.write('\n');
  }
}

function row(label: string, vendor: Vendor): Row {
  const stats = vendor.stats();
  return { label, sent: stats.received, accepted: stats.accepted, dropped: stats.dropped, batchMs: stats.lastArrival - stats.firstArrival };
}

async function throttledInProcess(vendor: Vendor): Promise<void> {
  // A batch job: 'queue' mode books each slot on known completion times (docs/design.md §4).
  const throttle = new Throttle({ name: 'demo', rules: [{ limit: LIMIT, windowMs: WINDOW_MS }], mode: 'queue', store: new MemoryStore() });
  try {
    await Promise.all(batch(USERS, CALLS_PER_USER).map((user) => throttle.schedule(user, () => call(vendor, user))));
  } finally {
    await throttle.close();
  }
}

async function throttledInWorkers(vendor: Vendor, redisUrl: string): Promise<void> {
  const prefix = `demo-${process.pid}-${Date.now().toString(36)}`;
  const results = await spawnWorkers(
    Array.from({ length: WORKERS }, (_, w) => ({
      redisUrl,
      vendorUrl: vendor.url,
      prefix,
      name: 'demo',
      rules: [{ limit: LIMIT, windowMs: WINDOW_MS }],
      keys: USERS,
      mode: 'queue',
      // 60 calls per user split over 3 workers.
      calls: Math.floor(CALLS_PER_USER / WORKERS) + (w < CALLS_PER_USER % WORKERS ? 1 : 0),
    })),
    { timeoutMs: 60_000 },
  );
  const errors = results.flatMap((result) => result.errors);
  if (errors.length > 0) throw new Error(`${errors.length} calls failed in the workers, e.g. ${errors[0]!.message}`);
}

async function naive(vendor: Vendor): Promise<void> {
  await Promise.all(batch(USERS, CALLS_PER_USER).map((user) => call(vendor, user)));
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(2)} s`;
}

function report(throttled: Row, plain: Row, setup: string): void {
  const lines = [
    '',
    `vendor-throttle demo: ${TOTAL} calls for ${USERS.length} users (${CALLS_PER_USER} each), vendor limit ${LIMIT} per ${WINDOW_MS} ms per user,`,
    `silent (over-limit calls get 200 OK and are never performed), latency ${LATENCY.min}-${LATENCY.max} ms.`,
    setup,
    '',
    `                      sent  accepted  silently dropped  batch time (first to last arrival)`,
  ];
  const format = (r: Row, extra: string): string =>
    `  ${r.label.padEnd(20)}${String(r.sent).padStart(4)}${String(r.accepted).padStart(10)}${String(r.dropped).padStart(18)}  ${seconds(r.batchMs)}${extra}`;
  const utilization = (IDEAL_MS / throttled.batchMs) * 100;
  lines.push(format(throttled, `, ideal ${seconds(IDEAL_MS)}: quota utilization ${utilization.toFixed(0)}%`));
  lines.push(format(plain, ''));
  lines.push('');
  lines.push(
    throttled.dropped === 0
      ? `Throttled: nothing lost. Naive: ${plain.dropped} of ${plain.sent} calls silently lost (${((plain.dropped / plain.sent) * 100).toFixed(0)}%).`
      : `!! The throttled batch lost ${throttled.dropped} calls: the limit was broken (see docs/design.md, safetyMarginMs).`,
  );
  console.log(lines.join('\n'));
}

async function main(): Promise<void> {
  const redisUrl = process.env.REDIS_URL;
  const setup = redisUrl
    ? `Throttle: RedisStore at ${redisUrl}, ${WORKERS} worker processes, queue mode.`
    : `Throttle: MemoryStore, one process, queue mode (set REDIS_URL to use Redis and ${WORKERS} processes).`;

  const vendor = await startVendor({ limit: LIMIT, windowMs: WINDOW_MS, latencyMs: LATENCY });
  let throttled: Row;
  try {
    const work = redisUrl ? throttledInWorkers(vendor, redisUrl) : throttledInProcess(vendor);
    await withProgress('throttled', vendor, work);
    throttled = row('throttled', vendor);
  } finally {
    await vendor.close();
  }

  const fresh = await startVendor({ limit: LIMIT, windowMs: WINDOW_MS, latencyMs: LATENCY });
  let plain: Row;
  try {
    await withProgress('naive    ', fresh, naive(fresh));
    plain = row('naive Promise.all', fresh);
  } finally {
    await fresh.close();
  }

  report(throttled, plain, setup);
  if (throttled.dropped > 0) process.exitCode = 1;
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? (error.stack ?? error.message) : error);
  process.exitCode = 1;
});
