/**
 * Calls of several keys against a vendor that limits each user and the whole app, silently:
 * `npx tsx scripts/several-keys.ts [--runs=3]` (part of `npm run bench`). Starts its own
 * redis-server and simulated vendor; 4 worker processes (spec/support/worker.ts) each send every
 * user's calls, released at once, latency 1–3 ms.
 *
 * Side by side in one run: the same users and calls with the per-user key alone (`schedule(user)`)
 * and with both keys (`schedule([user, 'app'])`), where the app-wide limit binds. Printed per run:
 * calls over each limit at the vendor, quota of the binding limit used (ideal ÷ actual, first to
 * last arrival), Redis commands per call (client and inside Redis, from `INFO commandstats`), and
 * how fairly the users shared the app limit while every user still had calls waiting (Jain's index
 * over the calls each user had started when half of all calls had: 1 = equal shares).
 */
import { Redis } from 'ioredis';
import { spawnWorkers, type WorkerResult } from '../spec/support/worker.js';
import { diffServer, serverSnapshot } from './bench/redis-stats.js';
import { startVendor, vendorDrops } from './sim-vendor.js';
import { startRedis } from './support/redis-server.js';
import { readFlags } from './support/usage.js';

const USERS = Array.from({ length: 10 }, (_, i) => `user-${i}`);
const CALLS = 6; // per user and worker: 240 calls
const USER_RULE = { limit: 10, windowMs: 500 };
const APP_RULE = { limit: 20, windowMs: 500 };

const flags = readFlags(process.argv.slice(2), ['runs']);
const runs = Number(flags.get('runs') ?? 3);
const server = await startRedis();
const control = new Redis(server.url);

interface Row {
  readonly shape: string;
  readonly calls: number;
  readonly overUser: number;
  readonly overApp: number;
  readonly quota: number;
  readonly sentPerCall: number;
  readonly insidePerCall: number;
  readonly fairness: number;
}

async function measure(shape: 'user key alone' | 'user and app keys', run: number): Promise<Row> {
  const vendor = await startVendor({ limit: USER_RULE.limit, windowMs: USER_RULE.windowMs, latencyMs: { min: 1, max: 3 } });
  try {
    const both = shape === 'user and app keys';
    const before = await serverSnapshot(control);
    const results = await spawnWorkers(
      [0, 1, 2, 3].map(() => ({
        redisUrl: server.url,
        vendorUrl: vendor.url,
        prefix: `sk${run}${both ? 'b' : 'a'}`,
        rules: [`${USER_RULE.limit}/${USER_RULE.windowMs}ms`],
        ...(both ? { appKey: 'app', appRules: [`${APP_RULE.limit}/${APP_RULE.windowMs}ms`] } : {}),
        keys: USERS,
        calls: CALLS,
      })),
    );
    const delta = diffServer(before, await serverSnapshot(control));
    const stats = vendor.stats();
    const all = [...stats.perUser.values()].flat().sort((a, b) => a - b);
    // Ideal: the binding limit used to the full (per user with one key; over all with the app key).
    const ideal = both ? (Math.ceil(all.length / APP_RULE.limit) - 1) * APP_RULE.windowMs : (Math.ceil((CALLS * 4) / USER_RULE.limit) - 1) * USER_RULE.windowMs;
    const actual = both ? all.at(-1)! - all[0]! : Math.max(...[...stats.perUser.values()].map((list) => list.at(-1)! - list[0]!));
    const calls = results.reduce((sum, result) => sum + result.scheduled, 0);
    const errors = results.flatMap((result) => result.errors);
    if (errors.length > 0) throw new Error(`${errors.length} calls failed: ${errors[0]!.message}`);
    return {
      shape,
      calls,
      overUser: stats.dropped,
      overApp: both ? vendorDrops(all, APP_RULE.limit, APP_RULE.windowMs) : 0,
      quota: ideal / actual,
      // The bench's own INFO snapshots are taken out by diffServer; the workers also PING once each.
      sentPerCall: (delta.evalsha + delta.eval) / calls,
      insidePerCall: delta.other / calls,
      fairness: jain(results),
    };
  } finally {
    await vendor.close();
  }
}

/** Jain's index of the calls each user had started by the time half of all calls had. */
function jain(results: readonly WorkerResult[]): number {
  const starts = results.flatMap((result) => result.keys.map((key, i) => [key, result.starts[i] ?? Infinity] as const)).sort((a, b) => a[1] - b[1]);
  const half = starts.slice(0, Math.floor(starts.length / 2));
  const counts = USERS.map((user) => half.filter(([key]) => key === user).length);
  const sum = counts.reduce((a, b) => a + b, 0);
  const squares = counts.reduce((a, b) => a + b * b, 0);
  return (sum * sum) / (USERS.length * squares);
}

const rows: Row[] = [];
try {
  for (let run = 1; run <= runs; run++) {
    for (const shape of ['user key alone', 'user and app keys'] as const) rows.push(await measure(shape, run));
  }
} finally {
  await control.quit();
  await server.stop();
}

console.log(`## Several keys: ${USERS.length} users × ${CALLS} calls in each of 4 processes, released at once, vendor latency 1–3 ms`);
console.log(`Per user ${USER_RULE.limit}/${USER_RULE.windowMs}ms; app-wide ${APP_RULE.limit}/${APP_RULE.windowMs}ms (it binds). ${runs} runs, alternating.\n`);
console.log(
  '| run | keys per call | calls | over a user limit | over the app limit | quota of the binding limit | EVALSHA per call | commands inside Redis per call | fairness (Jain) |',
);
console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- |');
rows.forEach((row, i) => {
  console.log(
    `| ${Math.floor(i / 2) + 1} | ${row.shape} | ${row.calls} | ${row.overUser} | ${row.shape === 'user key alone' ? '–' : row.overApp} | ${row.quota.toFixed(3)} | ${row.sentPerCall.toFixed(2)} | ${row.insidePerCall.toFixed(1)} | ${row.fairness.toFixed(3)} |`,
  );
});
