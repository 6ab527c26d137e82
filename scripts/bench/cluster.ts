/**
 * How decision throughput grows with Redis Cluster shards: the same load (unconstrained keys, nothing
 * waits, as in scenario 1 of scripts/bench.ts) through one standalone Redis, a 1-master cluster and a
 * 3-master cluster, with ioredis auto-pipelining on and off.
 *
 *   npx tsx scripts/bench/cluster.ts                 # ~1.5 min (3 rounds), prints tables
 *   npx tsx scripts/bench/cluster.ts --quick         # ~30 s (1 round)
 *   npx tsx scripts/bench/cluster.ts --processes=2   # load from 2 worker processes (default 1)
 *   npx tsx scripts/bench/cluster.ts --json
 *
 * Starts its own redis-servers on free ports (never the one on 6379; clusters through
 * spec/support/redis-cluster.ts) and stops them before exiting. The load runs in worker processes
 * (this file, `--worker`), each keeping `--concurrency` calls in flight (scripts/bench/load.ts) over
 * `--keys` keys; the parent only reads the servers. Per master it reports the scripts Redis ran
 * (`INFO commandstats`: EVALSHA + EVAL, decisions and completion writes) and its CPU (`INFO cpu`).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Cluster, Redis } from 'ioredis';
import { RedisStore, Throttle } from '../../lib/index.js';
import { startRedisCluster, type RedisCluster } from '../../spec/support/redis-cluster.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { Latencies, median, runLoad } from './load.js';
import { machineInfo, type MachineInfo } from './machine.js';
import { diffServer, serverSnapshot, type ServerSnapshot } from './redis-stats.js';
import { formatNumber, renderTable, type Cell, type Column } from './table.js';
import { cleanUpOnSignal, readFlags, settingsOrUsage, UsageError } from '../support/usage.js';

// ---------------------------------------------------------------------------------------------
// Options

interface Settings {
  readonly json: boolean;
  readonly quick: boolean;
  readonly warmMs: number;
  readonly measureMs: number;
  readonly keys: number;
  /** Calls in flight per worker process. */
  readonly concurrency: number;
  readonly processes: number;
  /** Runs of each variant; the table shows the fastest (least disturbed by other work on the machine). */
  readonly rounds: number;
  readonly topologies: readonly TopologyName[];
  /** ioredis enableAutoPipelining values to run. */
  readonly autoPipelining: readonly boolean[];
}

type TopologyName = 'standalone' | 'cluster-1' | 'cluster-3';
const TOPOLOGIES: readonly TopologyName[] = ['standalone', 'cluster-1', 'cluster-3'];

const USAGE = `Usage: npx tsx scripts/bench/cluster.ts [--quick] [--json] [--processes=N] [--concurrency=N]
                                         [--keys=N] [--warm-ms=N] [--measure-ms=N] [--only=standalone,cluster-1,cluster-3]
                                         [--autopipelining=off,on] [--rounds=N]
  --quick        shorter runs (1 round, warm-up 300 ms, 1500 ms measured per variant)
  --json         print the results as JSON on stdout instead of tables
  --processes    worker processes generating the load (default 1)
  --concurrency  calls in flight per worker process (default 256)
  --keys         distinct keys, used round-robin (default 10000)
  --warm-ms      unmeasured warm-up per variant and round (default 800)
  --measure-ms   measured time per variant and round (default 2500)
  --only         topologies to run (default all three)
  --autopipelining  ioredis enableAutoPipelining values to run (default off,on)
  --rounds       rounds; in each, every variant runs once in turn; the fastest is shown, all listed (default 3)`;

function parseSettings(argv: readonly string[]): Settings {
  const flags = readFlags(argv, ['json', 'quick', 'processes', 'concurrency', 'keys', 'warm-ms', 'measure-ms', 'only', 'autopipelining', 'rounds']);
  const quick = flags.get('quick') === 'true';
  const whole = (name: string, fallback: number): number => {
    const text = flags.get(name);
    if (text === undefined) return fallback;
    const value = Number(text);
    if (!Number.isInteger(value) || value < 1) throw new UsageError(`Expected --${name} to be a whole number ≥ 1, got '${text}'`);
    return value;
  };
  const only = (flags.get('only') ?? TOPOLOGIES.join(',')).split(',');
  for (const name of only) {
    if (!TOPOLOGIES.includes(name as TopologyName)) throw new UsageError(`Expected --only to list ${TOPOLOGIES.join(', ')}, got '${name}'`);
  }
  const pipelining = (flags.get('autopipelining') ?? 'off,on').split(',');
  if (pipelining.some((value) => value !== 'off' && value !== 'on')) {
    throw new UsageError(`Expected --autopipelining to list off and/or on, got '${flags.get('autopipelining')}'`);
  }
  return {
    json: flags.get('json') === 'true',
    quick,
    warmMs: whole('warm-ms', quick ? 300 : 800),
    measureMs: whole('measure-ms', quick ? 1500 : 2500),
    keys: whole('keys', 10_000),
    concurrency: whole('concurrency', 256),
    processes: whole('processes', 1),
    rounds: whole('rounds', quick ? 1 : 3),
    topologies: TOPOLOGIES.filter((name) => only.includes(name)),
    autoPipelining: [false, true].filter((on) => pipelining.includes(on ? 'on' : 'off')),
  };
}

// ---------------------------------------------------------------------------------------------
// Worker process: one throttle on its own client, driven by runLoad

/** What the parent tells a worker. */
interface WorkerJob {
  readonly id: string;
  /** Standalone: one address; cluster: its masters (seeds). */
  readonly nodes: ReadonlyArray<{ host: string; port: number }>;
  readonly cluster: boolean;
  readonly autoPipelining: boolean;
  readonly concurrency: number;
  readonly keys: number;
  /** This worker's first key index, so that workers spread over all keys. */
  readonly offset: number;
  readonly warmMs: number;
  readonly measureMs: number;
}

type ParentMessage = { readonly type: 'measure' } | { readonly type: 'stop' };

type WorkerMessage =
  { readonly type: 'warm' } | { readonly type: 'done'; readonly result: WorkerResult } | { readonly type: 'failed'; readonly message: string };

interface WorkerResult {
  readonly calls: number;
  readonly seconds: number;
  readonly cpuSeconds: number;
  /** Latency (schedule() call → fn start) at 1,000 evenly spaced quantiles, ms. */
  readonly latencies: number[];
}

async function worker(job: WorkerJob): Promise<void> {
  const send = (message: WorkerMessage): void => {
    process.send!(message);
  };
  const client: Redis | Cluster = job.cluster
    ? new Cluster([...job.nodes], { enableAutoPipelining: job.autoPipelining, redisOptions: { maxRetriesPerRequest: 1 } })
    : new Redis({ ...job.nodes[0]!, enableAutoPipelining: job.autoPipelining, maxRetriesPerRequest: 1 });
  const store = new RedisStore(client);
  const throttle = new Throttle({ name: `bench-${job.id}`, rules: ['1000000/min'], store });
  const latencies = new Latencies();
  const op = async (index: number): Promise<void> => {
    const calledAt = performance.now();
    await throttle.schedule(`user-${(job.offset + index) % job.keys}`, () => {
      latencies.add(performance.now() - calledAt);
    });
  };
  try {
    await runLoad(job.concurrency, job.warmMs, op);
    latencies.clear();
    const go = new Promise<void>((resolve) => process.once('message', () => resolve()));
    send({ type: 'warm' });
    await go;
    const load = await runLoad(job.concurrency, job.measureMs, op);
    if (latencies.count !== load.ops) throw new Error(`${load.ops} decisions but ${latencies.count} fn starts`);
    // 1,000 quantiles stand for the whole distribution (the parent merges the workers' ones).
    const samples = latencies.percentiles(Array.from({ length: 1_000 }, (_, i) => (i + 0.5) / 10));
    send({ type: 'done', result: { calls: load.ops, seconds: load.seconds, cpuSeconds: load.cpuSeconds, latencies: samples } });
  } catch (error) {
    send({ type: 'failed', message: error instanceof Error ? (error.stack ?? error.message) : String(error) });
  } finally {
    await throttle.close();
    await store.close();
    client.disconnect();
    process.disconnect();
  }
}

// ---------------------------------------------------------------------------------------------
// Parent: servers, variants, figures

interface Topology {
  readonly name: TopologyName;
  readonly title: string;
  readonly masters: number;
  readonly cluster: boolean;
  readonly nodes: ReadonlyArray<{ host: string; port: number }>;
  /** One admin connection per master. */
  readonly admins: readonly Redis[];
  stop(): Promise<void>;
}

interface MasterFigures {
  readonly port: number;
  /** EVALSHA + EVAL per second on this master. */
  readonly scriptsPerSec: number;
  /** Share of all scripts, %. */
  readonly sharePct: number;
  /** Server CPU over the measured run, % of one core. */
  readonly cpuPct: number;
}

interface Result {
  readonly id: string;
  readonly topology: TopologyName;
  readonly title: string;
  readonly masters: number;
  readonly autoPipelining: boolean;
  readonly processes: number;
  readonly concurrency: number;
  readonly calls: number;
  readonly seconds: number;
  /** schedule() calls decided and run per second (each is one decision here: nothing waits). */
  readonly callsPerSec: number;
  /** Scripts Redis ran per second over all masters (decisions, completion writes). */
  readonly scriptsPerSec: number;
  readonly latencyMs: { readonly p50: number; readonly p99: number };
  /** Node CPU summed over the worker processes, % of one core. */
  readonly nodeCpuPct: number;
  /** Redis CPU summed over the masters, % of one core. */
  readonly redisCpuPct: number;
  /** CPU per call, µs: the worker processes', and Redis' summed over the masters. */
  readonly nodeUsecPerCall: number;
  readonly redisUsecPerCall: number;
  readonly perMaster: readonly MasterFigures[];
  /** calls/s of every round of this variant (this result is the fastest). */
  readonly rounds: readonly number[];
  /** Median over rounds of calls/s ÷ the standalone Redis' calls/s in the same round (same auto-pipelining). */
  readonly ratio: number;
}

/** A variant that could not run: its error is reported in place of figures. */
interface Failure {
  readonly id: string;
  readonly topology: TopologyName;
  readonly title: string;
  readonly autoPipelining: boolean;
  readonly error: string;
}

interface Report {
  readonly machine: MachineInfo;
  readonly settings: Settings;
  readonly results: readonly Result[];
  readonly failures: readonly Failure[];
  readonly wallSeconds: number;
}

const log = (message: string): void => {
  process.stderr.write(`[bench:cluster] ${message}\n`);
};

async function startTopology(name: TopologyName): Promise<Topology> {
  if (name === 'standalone') {
    const server: RedisServer = await startRedis();
    const admin = new Redis({ host: '127.0.0.1', port: server.port, maxRetriesPerRequest: 1 });
    return {
      name,
      title: 'standalone Redis',
      masters: 1,
      cluster: false,
      nodes: [{ host: '127.0.0.1', port: server.port }],
      admins: [admin],
      async stop() {
        admin.disconnect();
        await server.stop();
      },
    };
  }
  const masters = name === 'cluster-1' ? 1 : 3;
  const cluster: RedisCluster = await startRedisCluster({ masters });
  return {
    name,
    title: `cluster, ${masters} master${masters === 1 ? '' : 's'}`,
    masters,
    cluster: true,
    nodes: cluster.startupNodes,
    admins: cluster.masters.map((node) => cluster.admin(node)),
    stop: () => cluster.stop(),
  };
}

/** Starts the workers, lets them warm up, measures all of them over the same interval. */
async function measure(topology: Topology, settings: Settings, id: string, autoPipelining: boolean): Promise<Result> {
  log(`${id} ${topology.title}, auto-pipelining ${autoPipelining ? 'on' : 'off'}, ${settings.processes} × ${settings.concurrency} in flight`);
  await Promise.all(topology.admins.map((admin) => admin.flushall()));
  // A FLUSHALL on purpose, no process running: RESETSTAT clears the count of it, which lib/lua/epoch.lua reads as a sign of a loss.
  await Promise.all(topology.admins.map((admin) => admin.config('RESETSTAT')));
  const script = fileURLToPath(import.meta.url);
  const children: ChildProcess[] = [];
  const exits: Array<Promise<void>> = [];
  try {
    const warm: Array<Promise<void>> = [];
    const done: Array<Promise<WorkerResult>> = [];
    for (let p = 0; p < settings.processes; p++) {
      const job: WorkerJob = {
        id,
        nodes: topology.nodes,
        cluster: topology.cluster,
        autoPipelining,
        concurrency: settings.concurrency,
        keys: settings.keys,
        offset: Math.floor((p * settings.keys) / settings.processes),
        warmMs: settings.warmMs,
        measureMs: settings.measureMs,
      };
      const child = fork(script, ['--worker', JSON.stringify(job)], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
      children.push(child);
      exits.push(new Promise((resolve) => child.once('exit', () => resolve())));
      const messages = (type: WorkerMessage['type']): Promise<WorkerMessage> =>
        new Promise((resolve, reject) => {
          const onMessage = (message: WorkerMessage): void => {
            if (message.type === 'failed') reject(new Error(`worker ${p}: ${message.message}`));
            else if (message.type === type) resolve(message);
            else return;
            child.off('message', onMessage);
          };
          child.on('message', onMessage);
          child.once('exit', (code) => reject(new Error(`worker ${p} exited with code ${code} before '${type}'`)));
        });
      warm.push(messages('warm').then(() => undefined));
      done.push(messages('done').then((message) => (message as Extract<WorkerMessage, { type: 'done' }>).result));
    }
    // A failing worker rejects both; the first await reports it, the other must not go unhandled.
    for (const promise of done) promise.catch(() => undefined);
    await Promise.all(warm);
    const before = await Promise.all(topology.admins.map((admin) => serverSnapshot(admin)));
    for (const child of children) child.send({ type: 'measure' } satisfies ParentMessage);
    const results = await Promise.all(done);
    const after = await Promise.all(topology.admins.map((admin) => serverSnapshot(admin)));
    return summarize(topology, settings, id, autoPipelining, results, before, after);
  } finally {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await Promise.all(exits);
  }
}

function summarize(
  topology: Topology,
  settings: Settings,
  id: string,
  autoPipelining: boolean,
  workers: readonly WorkerResult[],
  before: readonly ServerSnapshot[],
  after: readonly ServerSnapshot[],
): Result {
  const seconds = Math.max(...workers.map((w) => w.seconds));
  const calls = workers.reduce((sum, w) => sum + w.calls, 0);
  const latencies = new Latencies();
  for (const w of workers) for (const value of w.latencies) latencies.add(value);
  const [p50, p99] = latencies.percentiles([50, 99]) as [number, number];
  const deltas = topology.admins.map((_, i) => diffServer(before[i]!, after[i]!));
  const nodeCpuSeconds = workers.reduce((sum, w) => sum + w.cpuSeconds, 0);
  const redisCpuSeconds = deltas.reduce((sum, d) => sum + d.cpuSeconds, 0);
  const scripts = deltas.map((d) => d.evalsha + d.eval);
  const totalScripts = scripts.reduce((sum, n) => sum + n, 0);
  const perMaster = deltas.map((d, i) => ({
    port: topology.nodes[i]!.port,
    scriptsPerSec: scripts[i]! / seconds,
    sharePct: (scripts[i]! / totalScripts) * 100,
    cpuPct: (d.cpuSeconds / seconds) * 100,
  }));
  return {
    id,
    topology: topology.name,
    title: topology.title,
    masters: topology.masters,
    autoPipelining,
    processes: settings.processes,
    concurrency: settings.concurrency,
    calls,
    seconds,
    callsPerSec: calls / seconds,
    scriptsPerSec: totalScripts / seconds,
    latencyMs: { p50, p99 },
    nodeCpuPct: (nodeCpuSeconds / seconds) * 100,
    redisCpuPct: (redisCpuSeconds / seconds) * 100,
    nodeUsecPerCall: (nodeCpuSeconds / calls) * 1e6,
    redisUsecPerCall: (redisCpuSeconds / calls) * 1e6,
    perMaster,
    rounds: [],
    ratio: NaN,
  };
}

function render(report: Report): string {
  const { machine, settings, results } = report;
  const out: string[] = [];
  out.push('vendor-throttle cluster benchmark: unconstrained keys, default mode, rule 1000000/min');
  out.push(
    `  CPU     ${machine.cpuModel} (${machine.cores} logical cores${machine.physicalCores ? `, ${machine.physicalCores} physical` : ''}), ${machine.totalMemoryGiB} GiB`,
  );
  out.push(`  Node    ${machine.node}    redis-server ${machine.redis} (private, 127.0.0.1, no persistence)    ${machine.platform}`);
  out.push(
    `  Load    ${settings.processes} worker process${settings.processes === 1 ? '' : 'es'} × ${settings.concurrency} calls in flight, ` +
      `${formatNumber(settings.keys)} keys round-robin; warm-up ${settings.warmMs} ms + ${settings.measureMs} ms measured per variant` +
      `${settings.quick ? '  (--quick)' : ''}`,
  );
  out.push('  Every process of the machine shares its cores: workers, and every master of a cluster.');
  out.push('');
  const columns: Column[] = [
    { title: 'id', left: true },
    { title: 'Redis', left: true },
    { title: 'autopipe', left: true },
    { title: 'calls/s' },
    { title: 'vs standalone', digits: 2 },
    { title: 'scripts/call', digits: 2 },
    { title: 'p50 ms', digits: 1 },
    { title: 'p99 ms', digits: 1 },
    { title: 'node CPU%' },
    { title: 'node µs/call', digits: 1 },
    { title: 'redis CPU%' },
    { title: 'redis µs/call', digits: 1 },
    { title: 'per master: scripts/s (share) CPU%', left: true },
  ];
  const rows: Cell[][] = results.map((r) => {
    return [
      r.id,
      r.title,
      r.autoPipelining ? 'on' : 'off',
      r.callsPerSec,
      r.ratio,
      r.scriptsPerSec / r.callsPerSec,
      r.latencyMs.p50,
      r.latencyMs.p99,
      r.nodeCpuPct,
      r.nodeUsecPerCall,
      r.redisCpuPct,
      r.redisUsecPerCall,
      r.perMaster.map((m) => `${formatNumber(m.scriptsPerSec)} (${formatNumber(m.sharePct)}%) ${formatNumber(m.cpuPct)}%`).join(' | '),
    ];
  });
  out.push(renderTable(columns, rows));
  out.push('');
  for (const failure of report.failures) {
    out.push(`FAILED  ${failure.id}  ${failure.title}, auto-pipelining ${failure.autoPipelining ? 'on' : 'off'}: ${failure.error}`);
  }
  if (report.failures.length > 0) out.push('');
  if (settings.rounds > 1) {
    out.push(`Fastest of ${settings.rounds} rounds shown (the variants take turns in each round); calls/s of each round:`);
    for (const r of results) out.push(`  ${r.id}  ${r.rounds.map((value) => formatNumber(value)).join(', ')}`);
    out.push('');
  }
  out.push('calls/s: schedule() calls decided and run (one decision each: nothing waits); vs standalone: median over rounds');
  out.push('of calls/s ÷ the standalone Redis in the same round, same auto-pipelining. scripts: EVALSHA + EVAL that');
  out.push('Redis ran (decisions and completion writes), from INFO commandstats. CPU: process.cpuUsage() of the');
  out.push('workers and INFO cpu of each master, % of one core; µs/call = CPU time / calls. redis CPU% and µs/call sum the masters.');
  out.push('');
  out.push('Where Redis would be the limit: calls/s at which the busiest master reaches 100% of a core, at its measured CPU per');
  out.push('call (an estimate: a busier Redis spends less per call, batching reads; the load generator must keep up too).');
  for (const r of results) {
    const busiest = r.perMaster.reduce((top, m) => (m.cpuPct > top.cpuPct ? m : top));
    // The busiest master reaches a full core first: at its CPU per call, that is the cluster's ceiling.
    const ceiling = (r.callsPerSec * 100) / busiest.cpuPct;
    out.push(
      `  ${r.id}  ${r.title}, auto-pipelining ${r.autoPipelining ? 'on' : 'off'}: ${formatNumber(ceiling)} calls/s ` +
        `(busiest master ${formatNumber(busiest.cpuPct)}% CPU for ${formatNumber(busiest.sharePct)}% of the scripts)`,
    );
  }
  out.push('');
  out.push(`Total wall time ${formatNumber(report.wallSeconds, 1)} s`);
  return out.join('\n');
}

async function main(): Promise<void> {
  const settings = settingsOrUsage(() => parseSettings(process.argv.slice(2)), USAGE);
  if (settings === undefined) return;
  const startedAt = performance.now();
  const running: Topology[] = [];
  const stopAll = (): Promise<unknown> => Promise.allSettled(running.map((topology) => topology.stop()));
  const detachSignals = cleanUpOnSignal(stopAll);
  const results: Result[] = [];
  const failures: Failure[] = [];
  let machine: MachineInfo | undefined;
  try {
    // Every topology runs for the whole benchmark and the rounds take turns, so that other work on
    // the machine disturbs each of them alike; idle servers cost next to nothing.
    for (const name of settings.topologies) {
      log(`starting ${name}`);
      running.push(await startTopology(name));
    }
    machine = await machineInfo(running[0]!.admins[0]!);
    const variants = running.flatMap((topology) => settings.autoPipelining.map((autoPipelining) => ({ topology, autoPipelining })));
    const rounds = variants.map((): Result[] => []);
    const failed = new Set<number>();
    for (let round = 0; round < settings.rounds; round++) {
      for (const [v, { topology, autoPipelining }] of variants.entries()) {
        if (failed.has(v)) continue;
        const id = `${v + 1}`;
        try {
          rounds[v]!.push(await measure(topology, settings, id, autoPipelining));
        } catch (error) {
          const message = (error instanceof Error ? error.message : String(error)).split('\n')[0]!;
          log(`${id} failed: ${message}`);
          failed.add(v);
          failures.push({ id, topology: topology.name, title: topology.title, autoPipelining, error: message });
        }
      }
    }
    for (const [v, { topology, autoPipelining }] of variants.entries()) {
      const own = rounds[v]!;
      if (failed.has(v) || own.length === 0) continue;
      const fastest = own.reduce((best, r) => (r.callsPerSec > best.callsPerSec ? r : best));
      const base = variants.findIndex((other) => other.topology.name === 'standalone' && other.autoPipelining === autoPipelining);
      const ratios = base < 0 || failed.has(base) ? [] : own.map((r, i) => r.callsPerSec / rounds[base]![i]!.callsPerSec);
      results.push({ ...fastest, topology: topology.name, rounds: own.map((r) => r.callsPerSec), ratio: ratios.length > 0 ? median(ratios) : NaN });
    }
  } finally {
    await stopAll();
    detachSignals();
  }
  if (failures.length > 0) process.exitCode = 1;
  const report: Report = { machine: machine!, settings, results, failures, wallSeconds: (performance.now() - startedAt) / 1000 };
  process.stdout.write(settings.json ? `${JSON.stringify(report, null, 2)}\n` : `${render(report)}\n`);
}

// No top-level await: tsx may load this file as CommonJS.
if (process.argv[2] === '--worker') {
  worker(JSON.parse(process.argv[3]!) as WorkerJob).catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
} else {
  main().catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
}
