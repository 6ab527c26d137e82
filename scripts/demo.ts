/**
 * `npm run demo`: a batch of calls against a simulated vendor whose per-user limit is silent
 * (over-limit calls get 200 OK and are never performed), once through vendor-throttle and once
 * through a naive client (plain Promise.all), each against a fresh vendor. Ends with a report and
 * a chart (SVG) of calls per sliding window against the limit, for both runs.
 *
 * - No REDIS_URL: one process, MemoryStore.
 * - REDIS_URL=redis://host:port: RedisStore, the batch split over worker processes
 *   (spec/support/worker.ts) sharing the limits through that Redis (keys under a fresh prefix,
 *   which expire on their own).
 *
 *     npm run demo -- [--users 5] [--calls 60] [--workers 3] [--out tmp/demo.svg]
 *
 * Each flag can also be set in the environment: DEMO_USERS, DEMO_CALLS (calls per user),
 * DEMO_WORKERS (Redis mode), DEMO_OUT (chart path). Exits by itself; exit code 1 if the vendor
 * dropped any throttled call, 2 on a bad flag.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { MemoryStore, Throttle } from '../lib/index.js';
import { spawnWorkers } from '../spec/support/worker.js';
import { renderChart } from './demo/chart.js';
import { withProgress } from './demo/progress.js';
import { startVendor, type Vendor, type VendorStats } from './sim-vendor.js';

const LIMIT = 10;
const WINDOW_MS = 1000;
const LATENCY = { min: 10, max: 60 };

interface Settings {
  readonly users: readonly string[];
  readonly callsPerUser: number;
  readonly workers: number;
  readonly out: string;
  readonly redisUrl: string | undefined;
}

interface Row {
  readonly label: string;
  readonly sent: number;
  readonly accepted: number;
  readonly dropped: number;
  readonly batchMs: number;
  readonly perUser: ReadonlyMap<string, readonly number[]>;
}

class UsageError extends Error {}

function settings(): Settings {
  const { values } = parseArgs({
    options: {
      users: { type: 'string', default: process.env.DEMO_USERS ?? '5' },
      calls: { type: 'string', default: process.env.DEMO_CALLS ?? '60' },
      workers: { type: 'string', default: process.env.DEMO_WORKERS ?? '3' },
      out: { type: 'string', default: process.env.DEMO_OUT ?? 'tmp/demo.svg' },
    },
    strict: true,
  });
  const whole = (flag: string, text: string, max: number): number => {
    const value = Number(text);
    if (!Number.isInteger(value) || value < 1 || value > max) {
      throw new UsageError(`Expected --${flag} to be a whole number from 1 to ${max}, got '${text}'`);
    }
    return value;
  };
  const users = whole('users', values.users, 1_000);
  return {
    users: Array.from({ length: users }, (_, i) => `user-${i + 1}`),
    callsPerUser: whole('calls', values.calls, 10_000),
    workers: whole('workers', values.workers, 32),
    out: path.resolve(values.out),
    redisUrl: process.env.REDIS_URL || undefined,
  };
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

function row(label: string, stats: VendorStats): Row {
  return {
    label,
    sent: stats.received,
    accepted: stats.accepted,
    dropped: stats.dropped,
    batchMs: stats.lastArrival - stats.firstArrival,
    perUser: stats.perUser,
  };
}

async function throttledInProcess(vendor: Vendor, run: Settings): Promise<void> {
  // A batch job in the default mode ('wait'): each slot is booked on known completion times (docs/design.md §4).
  const throttle = new Throttle({ name: 'demo', rules: [{ limit: LIMIT, windowMs: WINDOW_MS }], store: new MemoryStore() });
  try {
    await Promise.all(batch(run.users, run.callsPerUser).map((user) => throttle.schedule(user, () => call(vendor, user))));
  } finally {
    await throttle.close();
  }
}

async function throttledInWorkers(vendor: Vendor, run: Settings, redisUrl: string): Promise<void> {
  const prefix = `demo-${process.pid}-${Date.now().toString(36)}`;
  const workers = Math.min(run.workers, run.callsPerUser);
  const results = await spawnWorkers(
    Array.from({ length: workers }, (_, w) => ({
      redisUrl,
      vendorUrl: vendor.url,
      prefix,
      name: 'demo',
      rules: [{ limit: LIMIT, windowMs: WINDOW_MS }],
      keys: run.users,
      // Each user's calls split over the workers.
      calls: Math.floor(run.callsPerUser / workers) + (w < run.callsPerUser % workers ? 1 : 0),
    })),
    { timeoutMs: 120_000 },
  );
  const errors = results.flatMap((result) => result.errors);
  if (errors.length > 0) throw new Error(`${errors.length} calls failed in the workers, e.g. ${errors[0]!.message}`);
}

async function naive(vendor: Vendor, run: Settings): Promise<void> {
  await Promise.all(batch(run.users, run.callsPerUser).map((user) => call(vendor, user)));
}

/** Starts a fresh vendor, runs `work` against it with progress shown, and returns what the vendor saw. */
async function measure(label: string, run: Settings, work: (vendor: Vendor) => Promise<void>): Promise<VendorStats> {
  const vendor = await startVendor({ limit: LIMIT, windowMs: WINDOW_MS, latencyMs: LATENCY });
  try {
    const total = run.users.length * run.callsPerUser;
    await withProgress(label, total, () => vendor.stats().received, work(vendor));
    return vendor.stats();
  } finally {
    await vendor.close();
  }
}

/** The Redis URL to print: without user name and password. */
function withoutPassword(url: string): string {
  try {
    const parsed = new URL(url);
    parsed.username = '';
    parsed.password = '';
    return parsed.href;
  } catch {
    return 'REDIS_URL';
  }
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(2)} s`;
}

function report(throttled: Row, plain: Row, run: Settings, setup: string, chart: string): string {
  const total = run.users.length * run.callsPerUser;
  // The fastest any client could go: each user's calls in windows of LIMIT, one window after another.
  const idealMs = (Math.ceil(run.callsPerUser / LIMIT) - 1) * WINDOW_MS;
  const lines = [
    '',
    `vendor-throttle demo: ${total} calls for ${run.users.length} users (${run.callsPerUser} each), vendor limit ${LIMIT} per ${WINDOW_MS} ms per user,`,
    `silent (over-limit calls get 200 OK and are never performed), latency ${LATENCY.min}-${LATENCY.max} ms.`,
    setup,
    '',
    `                      sent  accepted  silently dropped  batch time (first to last arrival)`,
  ];
  const format = (r: Row, extra: string): string =>
    `  ${r.label.padEnd(20)}${String(r.sent).padStart(4)}${String(r.accepted).padStart(10)}${String(r.dropped).padStart(18)}  ${seconds(r.batchMs)}${extra}`;
  const utilization =
    idealMs > 0 ? `, ideal ${seconds(idealMs)}: quota utilization ${((idealMs / throttled.batchMs) * 100).toFixed(0)}%` : ' (fits in one window)';
  lines.push(format(throttled, utilization));
  lines.push(format(plain, ''));
  lines.push('');
  lines.push(
    throttled.dropped === 0
      ? `Throttled: nothing lost. Naive: ${plain.dropped} of ${plain.sent} calls silently lost (${((plain.dropped / plain.sent) * 100).toFixed(0)}%).`
      : `!! The throttled batch lost ${throttled.dropped} calls: the limit was broken (see docs/design.md, maxHoldMs).`,
  );
  lines.push(`Chart (calls per ${WINDOW_MS} ms window against the limit, both runs): ${chart}`);
  return lines.join('\n');
}

function chartFile(throttled: Row, plain: Row, run: Settings, setup: string): string {
  const subtitle = (r: Row): string => `${r.sent} sent · ${r.accepted} performed · ${r.dropped} silently dropped · ${seconds(r.batchMs)}`;
  return renderChart({
    title: `Calls per user arriving at the vendor in any ${WINDOW_MS} ms, against its silent limit of ${LIMIT}`,
    footnote: `npm run demo: ${run.users.length} users × ${run.callsPerUser} calls, latency ${LATENCY.min}-${LATENCY.max} ms, ${setup}. Red: over the limit (answered 200 OK, never performed).`,
    limit: LIMIT,
    windowMs: WINDOW_MS,
    panels: [
      { title: 'with vendor-throttle (default mode)', subtitle: subtitle(throttled), arrivals: throttled.perUser, color: '#2563eb' },
      { title: 'naive client (Promise.all)', subtitle: subtitle(plain), arrivals: plain.perUser, color: '#d97706' },
    ],
  });
}

async function main(): Promise<void> {
  let run: Settings;
  try {
    run = settings();
  } catch (error) {
    if (!(error instanceof UsageError || (error as { code?: string }).code?.startsWith('ERR_PARSE_ARGS'))) throw error;
    console.error(`${(error as Error).message}\nusage: npm run demo -- [--users 5] [--calls 60] [--workers 3] [--out tmp/demo.svg]`);
    process.exitCode = 2;
    return;
  }
  const { redisUrl } = run;
  const setup = redisUrl
    ? `Throttle: RedisStore at ${withoutPassword(redisUrl)}, ${Math.min(run.workers, run.callsPerUser)} worker processes, default mode.`
    : `Throttle: MemoryStore, one process, default mode (set REDIS_URL to use Redis and ${run.workers} processes).`;

  const throttledStats = await measure('throttled', run, (vendor) => (redisUrl ? throttledInWorkers(vendor, run, redisUrl) : throttledInProcess(vendor, run)));
  const throttled = row('throttled', throttledStats);
  const plain = row('naive Promise.all', await measure('naive', run, (vendor) => naive(vendor, run)));

  mkdirSync(path.dirname(run.out), { recursive: true });
  const chartSetup = redisUrl ? `RedisStore, ${Math.min(run.workers, run.callsPerUser)} processes` : 'MemoryStore, one process';
  writeFileSync(run.out, chartFile(throttled, plain, run, chartSetup));
  console.log(report(throttled, plain, run, setup, run.out));
  if (throttled.dropped > 0) process.exitCode = 1;
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? (error.stack ?? error.message) : error);
  process.exitCode = 1;
});
