/**
 * Redis evicts the throttle's keys mid-run: a standalone Redis shared with a cache gets, once calls
 * are in full swing, a `maxmemory` just above its use under `volatile-ttl` (which evicts the keys
 * nearest their expiry first: every key of the throttle has a short time to live, the cache's keys
 * an hour), while the cache keeps writing. 4 processes send 3 users' calls at twice the limit; the
 * simulated vendor counts arrivals over its silent limit. Run with the store's recovery and without
 * (`recovery: false`), side by side. `spec/evictions.spec.ts` runs it with recovery and asserts;
 * this script prints the counts for docs/benchmarks.md:
 *
 *     npx tsx scripts/bench/evictions.ts [--runs=1] [--policy=volatile-ttl] [--pressure-ms=300]
 */
import { Redis } from 'ioredis';
import { RedisStore, Throttle } from '../../lib/index.js';
import { startVendor } from '../sim-vendor.js';
import { sendAtTwiceTheLimit, sleep } from './fault-load.js';
import { startRedis } from '../support/redis-server.js';

export interface EvictionRunOptions {
  readonly recovery: boolean;
  /** @default 'volatile-ttl' */
  readonly policy?: 'volatile-ttl' | 'volatile-lru' | 'allkeys-lru';
  /** @default 4 */
  readonly processes?: number;
  /** @default 3 */
  readonly users?: number;
  /** The vendor's silent limit per user, and the throttle's rule. @default 10 per 2 s */
  readonly limit?: number;
  readonly windowMs?: number;
  /** Calls arrive evenly over this long, at twice the limit per user. @default 3_000 */
  readonly arrivalMs?: number;
  /** When the cache starts filling the memory, ms after the first arrival. @default 1_000 */
  readonly evictAtMs?: number;
  /** The store's `recovery.graceMs`: how long a key found lost is held. @default 1_000 */
  readonly graceMs?: number;
  /**
   * How long the pressure lasts: then `maxmemory` is lifted, as an operator would on the alert.
   * @default Infinity (until the last call)
   */
  readonly pressureMs?: number;
}

export interface EvictionRunResult {
  readonly recovery: boolean;
  readonly policy: string;
  readonly pressureMs: number;
  readonly scheduled: number;
  readonly ranOnce: number;
  readonly ranTwice: number;
  readonly errors: string[];
  /** Arrivals over the vendor's limit in their trailing window, summed over users. */
  readonly overLimit: number;
  readonly dropped: number;
  /** `INFO stats` evicted_keys at the end (every key Redis evicted, the cache's and the throttle's). */
  readonly evictedKeys: number;
  /** Keys of the throttle found lost and put back one by one, summed over the processes. */
  readonly keysRestored: number;
  readonly totalMs: number;
}

export async function runEvictions(options: EvictionRunOptions): Promise<EvictionRunResult> {
  const policy = options.policy ?? 'volatile-ttl';
  const processes = options.processes ?? 4;
  const userCount = options.users ?? 3;
  const limit = options.limit ?? 10;
  const windowMs = options.windowMs ?? 2_000;
  const arrivalMs = options.arrivalMs ?? 3_000;
  const evictAtMs = options.evictAtMs ?? 1_000;
  const pressureMs = options.pressureMs ?? Infinity;
  const server = await startRedis();
  const admin = new Redis(server.url);
  const cache = new Redis(server.url);
  cache.on('error', () => {});
  const vendor = await startVendor({ limit, windowMs, latencyMs: { min: 2, max: 15 } });
  const users = Array.from({ length: userCount }, (_, i) => `user-${i}`);
  const throttles: Throttle[] = [];
  const stores: RedisStore[] = [];
  const clients: Redis[] = [];
  for (let p = 0; p < processes; p++) {
    const client = new Redis(server.url);
    clients.push(client);
    const store = new RedisStore(client, {
      prefix: 'vt',
      commandTimeoutMs: 1_000,
      recovery: options.recovery ? { heartbeatMs: 100, graceMs: options.graceMs ?? 1_000 } : false,
    });
    stores.push(store);
    throttles.push(new Throttle({ name: 'acme', rules: [`${limit}/${windowMs}ms`], store, onStoreError: 'wait', maxDelayMs: 60_000, maxHoldMs: 1_000 }));
  }
  const startedAt = performance.now();
  let filling = true;
  const fill = (async () => {
    await sleep(evictAtMs);
    const used = Number(/used_memory:(\d+)/.exec(await admin.info('memory'))?.[1]);
    await admin.config('SET', 'maxmemory-policy', policy);
    await admin.config('SET', 'maxmemory', String(used + 200_000));
    // The cache: keys of 1 KB with an hour to live, as fast as Redis takes them (OOM errors, once it
    // can evict nothing more, are the cache's problem and ignored).
    let n = 0;
    const value = 'x'.repeat(1_000);
    const until = performance.now() + pressureMs;
    while (filling && performance.now() < until) {
      const batch = cache.pipeline();
      for (let i = 0; i < 50; i++) batch.set(`cache:${n++}`, value, 'EX', 3_600);
      await batch.exec().catch(() => undefined);
      await sleep(5);
    }
    await admin.config('SET', 'maxmemory', '0');
  })();
  const load = await sendAtTwiceTheLimit({ throttles, users, vendorUrl: vendor.url, limit, windowMs, arrivalMs, startedAt });
  filling = false;
  await fill;
  const evictedKeys = Number(/evicted_keys:(\d+)/.exec(await admin.info('stats'))?.[1]);
  const stats = vendor.stats();
  const result: EvictionRunResult = {
    recovery: options.recovery,
    policy,
    pressureMs,
    ...load,
    overLimit: vendor.violations(),
    dropped: stats.dropped,
    evictedKeys,
    keysRestored: stores.reduce((sum, store) => sum + store.keysRestored, 0),
    totalMs: Math.round(performance.now() - startedAt),
  };
  await Promise.all(throttles.map((throttle) => throttle.close()));
  await Promise.all(stores.map((store) => store.close()));
  for (const client of [...clients, admin, cache]) client.disconnect();
  await vendor.close();
  await server.stop();
  return result;
}

async function main(): Promise<void> {
  const runs = Number(process.argv.find((arg) => arg.startsWith('--runs='))?.slice(7) ?? 1);
  const policy = (process.argv.find((arg) => arg.startsWith('--policy='))?.slice(9) ?? 'volatile-ttl') as EvictionRunOptions['policy'];
  const pressure = process.argv.find((arg) => arg.startsWith('--pressure-ms='))?.slice(14);
  const pressureMs = pressure === undefined ? undefined : Number(pressure);
  const rows: EvictionRunResult[] = [];
  for (let run = 0; run < runs; run++) {
    for (const recovery of [true, false]) {
      const result = await runEvictions({ recovery, policy, pressureMs });
      rows.push(result);
      console.log(JSON.stringify({ ...result, errors: result.errors.length }));
    }
  }
  console.log('\n| policy | pressure | recovery | calls | over the limit | dropped | ran twice | errors | keys evicted | keys put back | run ms |');
  console.log('|---|---|---|---|---|---|---|---|---|---|---|');
  for (const r of rows) {
    console.log(
      `| ${r.policy} | ${Number.isFinite(r.pressureMs) ? `${r.pressureMs} ms` : 'to the end'} | ${r.recovery ? 'on' : 'off'} | ${r.scheduled} | ${r.overLimit} | ${r.dropped} | ${r.ranTwice} | ${r.errors.length} | ${r.evictedKeys} | ${r.keysRestored} | ${r.totalMs} |`,
    );
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
