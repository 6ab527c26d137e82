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
 *     npx tsx scripts/bench/evictions.ts --sustained   # every policy, evicting to the end, default configuration
 */
import { Redis } from 'ioredis';
import { RedisStore, Throttle } from '../../lib/index.js';
import { startVendor } from '../sim-vendor.js';
import { sendAtTwiceTheLimit, sleep } from './fault-load.js';
import { startRedis } from '../support/redis-server.js';

export interface EvictionRunOptions {
  readonly recovery: boolean;
  /** @default 'volatile-ttl' */
  readonly policy?: EvictionPolicy;
  /**
   * The store and the throttle as a user leaves them (`new RedisStore(client)`, no
   * `onStoreError`, `maxDelayMs` or `maxHoldMs`) instead of the bench's quick recovery and
   * `onStoreError: 'wait'`. @default false
   */
  readonly defaults?: boolean;
  /**
   * After the calls, wait up to this long for the first process's `evictionsStopped` warning (a
   * pressure that ends before the calls do: the warning comes a quiet period after the last eviction).
   * @default 0
   */
  readonly awaitStoppedMs?: number;
  /** The cache's values, bytes, and the pause between its writes (one value each). @default 1_000 B, 50 at once every 5 ms */
  readonly cacheValueBytes?: number;
  readonly cacheEveryMs?: number;
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

export type EvictionPolicy = 'volatile-ttl' | 'volatile-lru' | 'volatile-random' | 'allkeys-lru' | 'allkeys-random' | 'noeviction';

export interface EvictionRunResult {
  readonly recovery: boolean;
  /** `storeWarning` events of the first process, in order (kind, and ms after the first arrival). */
  readonly warnings: ReadonlyArray<{ readonly kind: string; readonly atMs: number; readonly message: string }>;
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
    const store = options.defaults
      ? new RedisStore(client, options.recovery ? {} : { recovery: false })
      : new RedisStore(client, {
          prefix: 'vt',
          commandTimeoutMs: 1_000,
          recovery: options.recovery ? { heartbeatMs: 100, graceMs: options.graceMs ?? 1_000 } : false,
        });
    stores.push(store);
    const rules = [{ limit, windowMs }];
    throttles.push(
      options.defaults
        ? new Throttle({ name: 'acme', rules, store })
        : new Throttle({ name: 'acme', rules, store, onStoreError: 'wait', maxDelayMs: 60_000, maxHoldMs: 1_000 }),
    );
  }
  const startedAt = performance.now();
  const warnings: Array<{ kind: string; atMs: number; message: string }> = [];
  throttles[0]!.on('storeWarning', ({ kind, message }) => warnings.push({ kind, atMs: Math.round(performance.now() - startedAt), message }));
  let filling = true;
  const fill = (async () => {
    await sleep(evictAtMs);
    const used = Number(/used_memory:(\d+)/.exec(await admin.info('memory'))?.[1]);
    await admin.config('SET', 'maxmemory-policy', policy);
    await admin.config('SET', 'maxmemory', String(used + 200_000));
    // The cache: keys of 1 KB with an hour to live, as fast as Redis takes them (OOM errors, once it
    // can evict nothing more, are the cache's problem and ignored).
    let n = 0;
    const value = 'x'.repeat(options.cacheValueBytes ?? 1_000);
    const perWrite = options.cacheEveryMs === undefined ? 50 : 1;
    const until = performance.now() + pressureMs;
    while (filling && performance.now() < until) {
      const batch = cache.pipeline();
      for (let i = 0; i < perWrite; i++) batch.set(`cache:${n++}`, value, 'EX', 3_600);
      await batch.exec().catch(() => undefined);
      await sleep(options.cacheEveryMs ?? 5);
    }
    await admin.config('SET', 'maxmemory', '0');
  })();
  const load = await sendAtTwiceTheLimit({ throttles, users, vendorUrl: vendor.url, limit, windowMs, arrivalMs, startedAt });
  filling = false;
  await fill;
  if ((options.awaitStoppedMs ?? 0) > 0 && !warnings.some((warning) => warning.kind === 'evictionsStopped')) {
    await new Promise<void>((resolve) => {
      const onWarning = ({ kind }: { kind: string }): void => {
        if (kind === 'evictionsStopped') done();
      };
      const timer = setTimeout(() => done(), options.awaitStoppedMs);
      function done(): void {
        clearTimeout(timer);
        throttles[0]!.off('storeWarning', onWarning);
        resolve();
      }
      throttles[0]!.on('storeWarning', onWarning);
    });
  }
  const evictedKeys = Number(/evicted_keys:(\d+)/.exec(await admin.info('stats'))?.[1]);
  const stats = vendor.stats();
  const result: EvictionRunResult = {
    recovery: options.recovery,
    warnings,
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

/** The sustained case, under each policy: Redis keeps evicting from mid-run to the end, in the default configuration. */
const SUSTAINED_POLICIES: readonly EvictionPolicy[] = ['volatile-ttl', 'volatile-lru', 'volatile-random', 'allkeys-lru', 'allkeys-random', 'noeviction'];

/**
 * One user, 240 calls arriving evenly over 6 s at twice a 20/s limit, 4 processes; at 3 s Redis
 * gets a `maxmemory` just above its use while a cache sharing it writes 4 KB every 25 ms with an
 * hour to live, to the end. The store and the throttle in their default configuration.
 */
async function sustained(): Promise<void> {
  const limit = 20;
  const calls = 240;
  const idealMs = ((calls - limit) / limit) * 1_000;
  console.log(`## Sustained eviction, default configuration (ideal: the last call starts ${idealMs} ms after the first)\n`);
  console.log('| policy | calls | done | failed | over the limit | ran twice | run ms | × ideal | what the throttle said (ms after the first arrival) |');
  console.log('|---|---:|---:|---:|---:|---:|---:|---:|---|');
  const said: string[] = [];
  for (const policy of SUSTAINED_POLICIES) {
    const r = await runEvictions({
      recovery: true,
      defaults: true,
      policy,
      users: 1,
      limit,
      windowMs: 1_000,
      arrivalMs: 6_000,
      evictAtMs: 3_000,
      cacheValueBytes: 4_000,
      cacheEveryMs: 25,
    });
    const warnings = r.warnings.map((w) => `${w.kind} ${w.atMs}`).join(', ') || 'nothing';
    const failures = [...new Set(r.errors.map((e) => e.replace(/^[^:]*: /, '').slice(0, 60)))];
    console.log(
      `| ${policy} | ${r.scheduled} | ${r.ranOnce} | ${r.errors.length} | ${r.overLimit} | ${r.ranTwice} | ${r.totalMs} | ${(r.totalMs / idealMs).toFixed(2)} | ${warnings} |`,
    );
    said.push(`- ${policy}: ${r.warnings[0]?.message ?? 'no storeWarning'}${failures.length ? `; calls failed with: ${failures.join(' / ')}` : ''}`);
  }
  console.log(`\n${said.join('\n')}\n`);
}

async function main(): Promise<void> {
  if (process.argv.includes('--sustained')) {
    await sustained();
    return;
  }
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
