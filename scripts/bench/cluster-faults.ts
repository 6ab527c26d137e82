/**
 * A Redis Cluster with one replica per master loses one shard's data while calls arrive at twice
 * the limit, and the simulated vendor counts arrivals over its silent limit. The faults:
 *
 *   kill   the master serving the most users is SIGKILLed; its replica is promoted
 *   flush  FLUSHALL on that master (its replica follows)
 *   lag    its replica's link is cut (it misses every write after), then it is promoted with
 *          CLUSTER FAILOVER FORCE: the shard rolls back to what the replica had
 *
 * Each fault runs with the store's recovery (journal, per-key checks) and without it
 * (`recovery: false`), side by side. `spec/cluster-failover.spec.ts` runs the same with recovery and
 * asserts; this script prints the counts for docs/benchmarks.md:
 *
 *     npx tsx scripts/bench/cluster-faults.ts [--runs=1] [--faults=none,kill,flush,lag]
 */
import { RedisStore, Throttle } from '../../lib/index.js';
import { startRedisCluster, type ClusterNode, type RedisCluster } from '../../spec/support/redis-cluster.js';
import { failoverForce, flushMaster, killMaster, lagReplica } from '../../spec/support/redis-cluster-faults.js';
import { startVendor } from '../sim-vendor.js';
import { sendAtTwiceTheLimit, sleep } from './fault-load.js';

export type ClusterFault = 'none' | 'kill' | 'flush' | 'lag';

export interface FaultRunOptions {
  readonly fault: ClusterFault;
  /** The store's recovery (journal and checks) on, or `recovery: false`. */
  readonly recovery: boolean;
  /** Worker "processes": throttles, each on its own Cluster client and store. @default 4 */
  readonly processes?: number;
  /** @default 9 */
  readonly users?: number;
  /** The vendor's silent limit per user, and the throttle's rule. @default 10 per 2 s */
  readonly limit?: number;
  readonly windowMs?: number;
  /** Calls arrive evenly over this long, at twice the limit per user. @default 3_000 */
  readonly arrivalMs?: number;
  /** When the fault strikes, ms after the first arrival. @default 1_500 */
  readonly faultAtMs?: number;
  /**
   * The throttles' maxHoldMs. A slot whose call is still running counts until start + maxHoldMs and
   * no longer (maxHoldMs must exceed the vendor's request time). The simulated vendor runs in this
   * process, so each call's time, and the moment the vendor stamps its arrival, include this
   * process's event-loop lag: on a loaded machine during a failover (four Cluster clients
   * reconnecting, the calls held back released at once) calls took 1 to 4 s. With a maxHoldMs
   * below that, their slots stop counting before the vendor counts them, and arrivals go over the
   * limit on every shard, struck or not: not the fault's doing (`slowCalls` counts them).
   * @default 1_000
   */
  readonly maxHoldMs?: number;
}

export interface FaultRunResult {
  readonly fault: ClusterFault;
  readonly recovery: boolean;
  readonly scheduled: number;
  /** Calls whose fn ran once, more than once (must be 0), and not at all (an error reached the caller). */
  readonly ranOnce: number;
  readonly ranTwice: number;
  readonly errors: string[];
  /** Arrivals over the vendor's limit in their trailing window, summed over users. */
  readonly overLimit: number;
  /** Calls the vendor dropped silently. */
  readonly dropped: number;
  /**
   * Calls that took maxHoldMs or longer (the throttle's 'completed' event): their slots stopped
   * counting at their bound, so over-limit arrivals are then expected, whatever the fault did.
   */
  readonly slowCalls: number;
  /** Users whose keys live on the master the fault struck. */
  readonly usersStruck: number;
  /** Keys put back one by one, and whole-namespace put-backs, summed over the processes. */
  readonly keysRestored: number;
  readonly recoveries: number;
  /** The fault itself (a failover's promotion), ms; from the first arrival to the last call done, ms. */
  readonly faultMs: number;
  readonly totalMs: number;
}

/** Runs one fault on `cluster` (which it changes: use a fresh cluster per run). */
export async function runClusterFault(cluster: RedisCluster, options: FaultRunOptions): Promise<FaultRunResult> {
  const processes = options.processes ?? 4;
  const userCount = options.users ?? 9;
  const limit = options.limit ?? 10;
  const windowMs = options.windowMs ?? 2_000;
  const arrivalMs = options.arrivalMs ?? 3_000;
  const faultAtMs = options.faultAtMs ?? 1_500;
  const maxHoldMs = options.maxHoldMs ?? 1_000;
  const name = 'acme';
  const prefix = `vtf${process.pid}${Math.random().toString(36).slice(2, 8)}`;
  const vendor = await startVendor({ limit, windowMs, latencyMs: { min: 2, max: 15 } });
  const users = Array.from({ length: userCount }, (_, i) => `user-${i}`);
  const throttles: Throttle[] = [];
  const stores: RedisStore[] = [];
  let slowCalls = 0;
  for (let p = 0; p < processes; p++) {
    const store = new RedisStore(cluster.client({ retryDelayOnFailover: 50, retryDelayOnClusterDown: 50 }), {
      prefix,
      commandTimeoutMs: 1_000,
      recovery: options.recovery ? { heartbeatMs: 100, graceMs: 1_000 } : false,
    });
    stores.push(store);
    // maxHoldMs above a call's time by far, event-loop lag of a loaded machine included (see
    // FaultRunOptions.maxHoldMs), and still short: a call that waits for a wake that the fault
    // swallowed asks again at its bound, as calls of a real deployment would, only sooner.
    const throttle = new Throttle({ name, rules: [`${limit}/${windowMs}ms`], store, onStoreError: 'wait', maxDelayMs: 60_000, maxHoldMs });
    throttle.on('completed', (event) => {
      if (event.durationMs >= maxHoldMs) slowCalls += 1;
    });
    throttles.push(throttle);
  }
  // The master serving the most users is the one struck.
  const owners = new Map<string, { node: ClusterNode; users: number }>();
  for (const user of users) {
    const node = await cluster.ownerOf(`${prefix}:${name}:{${user}}:log`);
    const entry = owners.get(node.id) ?? { node, users: 0 };
    entry.users += 1;
    owners.set(node.id, entry);
  }
  const struck = [...owners.values()].sort((a, b) => b.users - a.users)[0]!;
  const startedAt = performance.now();
  let faultMs = 0;
  const fault = (async () => {
    if (options.fault === 'none') return;
    if (options.fault === 'lag') {
      // Cut well before the failover: the replica misses that stretch of writes.
      await sleep(faultAtMs - 400);
      const replica = await lagReplica(cluster, struck.node);
      await sleep(400);
      faultMs = (await failoverForce(cluster, replica)).durationMs;
      return;
    }
    await sleep(faultAtMs);
    const at = performance.now();
    if (options.fault === 'kill') faultMs = (await killMaster(cluster, struck.node)).durationMs;
    else {
      await flushMaster(cluster, struck.node);
      faultMs = performance.now() - at;
    }
  })();
  const load = await sendAtTwiceTheLimit({ throttles, users, vendorUrl: vendor.url, limit, windowMs, arrivalMs, startedAt });
  await fault;
  const totalMs = performance.now() - startedAt;
  const stats = vendor.stats();
  const result: FaultRunResult = {
    fault: options.fault,
    recovery: options.recovery,
    ...load,
    overLimit: vendor.violations(),
    dropped: stats.dropped,
    slowCalls,
    usersStruck: struck.users,
    keysRestored: stores.reduce((sum, store) => sum + store.keysRestored, 0),
    recoveries: stores.reduce((sum, store) => sum + store.recoveries, 0),
    faultMs: Math.round(faultMs),
    totalMs: Math.round(totalMs),
  };
  await Promise.all(throttles.map((throttle) => throttle.close()));
  await Promise.all(stores.map((store) => store.close()));
  await vendor.close();
  return result;
}

async function main(): Promise<void> {
  const runs = Number(process.argv.find((arg) => arg.startsWith('--runs='))?.slice(7) ?? 1);
  const only = process.argv
    .find((arg) => arg.startsWith('--faults='))
    ?.slice(9)
    .split(',') as ClusterFault[] | undefined;
  const rows: FaultRunResult[] = [];
  for (let run = 0; run < runs; run++) {
    for (const fault of only ?? (['none', 'kill', 'flush', 'lag'] as const)) {
      for (const recovery of [true, false]) {
        const cluster: RedisCluster = await startRedisCluster({ masters: 3, replicas: 1, nodeTimeoutMs: 500 });
        try {
          const result = await runClusterFault(cluster, { fault, recovery });
          rows.push(result);
          console.log(JSON.stringify({ ...result, errors: result.errors.length }));
        } finally {
          await cluster.stop();
        }
      }
    }
  }
  console.log('\n| fault | recovery | calls | over the limit | dropped | ran twice | errors | keys put back | fault ms | run ms |');
  console.log('|---|---|---|---|---|---|---|---|---|---|');
  for (const r of rows) {
    console.log(
      `| ${r.fault} | ${r.recovery ? 'on' : 'off'} | ${r.scheduled} | ${r.overLimit} | ${r.dropped} | ${r.ranTwice} | ${r.errors.length} | ${r.keysRestored} | ${r.faultMs} | ${r.totalMs} |`,
    );
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
