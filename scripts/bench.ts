/**
 * Throughput, latency and Redis cost of Throttle decisions.
 *
 *   npx tsx scripts/bench.ts            # ~45 s, prints tables
 *   npx tsx scripts/bench.ts --quick    # ~10 s
 *   npx tsx scripts/bench.ts --json     # the same numbers as JSON on stdout (progress goes to stderr)
 *
 * Starts its own redis-server on a free port (never the one on 6379) and stops it before exiting.
 * Scenarios:
 *   1. unconstrained keys, RedisStore: many keys, generous rule, nothing waits (autopipelining on/off)
 *   2. one saturated key, throw mode, RedisStore: every call rejects with RateLimitedError
 *   3. one saturated key, the default mode ('wait'), RedisStore: 1,000 concurrent calls that must wait a little
 *   4. unconstrained keys, MemoryStore, for comparison
 * "Commands per decision" is counted twice: client-side (every command the ioredis client writes,
 * scripts named by digest) and server-side (`INFO commandstats` deltas: EVALSHA, EVAL, and the
 * commands the scripts run inside, which Redis counts there too).
 */
import { Redis } from 'ioredis';
import { MemoryStore, RateLimitedError, RedisStore, Throttle, type ThrottleMode } from '../lib/index.js';
import { startRedis, type RedisServer } from './support/redis-server.js';
import { Latencies, median, runLoad } from './bench/load.js';
import { machineInfo, type MachineInfo } from './bench/machine.js';
import { CommandCounter, diffClient, diffServer, serverSnapshot, type ClientCounts, type ServerDelta } from './bench/redis-stats.js';
import { formatNumber, renderTable, type Cell, type Column } from './bench/table.js';
import { cleanUpOnSignal, readFlags, settingsOrUsage, UsageError } from './support/usage.js';
import type { RuleString } from '../lib/rules.js';

// ---------------------------------------------------------------------------------------------
// Options

interface Settings {
  readonly json: boolean;
  readonly quick: boolean;
  readonly only: ReadonlySet<number>;
  /** Warm-up of each timed variant, not measured (connections, script load, JIT). */
  readonly warmMs: number;
  /** Measured time of each timed variant. */
  readonly measureMs: number;
  /** Distinct keys of the unconstrained scenarios, used round-robin. */
  readonly keys: number;
  /** In-flight calls of the unconstrained scenarios. */
  readonly concurrency: readonly number[];
  /** In-flight calls of the saturated throw-mode scenario. */
  readonly throwConcurrency: number;
  /** Calls of one delay-mode round, their rule, and rounds per variant. */
  readonly delayCalls: number;
  readonly delayRule: string;
  readonly delayRounds: number;
}

const USAGE = `Usage: npx tsx scripts/bench.ts [--quick] [--json] [--only=1,2,3,4]
                                 [--warm-ms=N] [--measure-ms=N] [--keys=N] [--concurrency=256,1000]
  --quick        about 10 s instead of about 45 s (shorter runs, fewer delay rounds)
  --json         print the results as JSON on stdout instead of tables
  --only=LIST    run only these scenarios (1 redis unconstrained, 2 throw saturated,
                 3 wait saturated, 4 memory unconstrained)
  --warm-ms      unmeasured warm-up per variant (default 1000, quick 200)
  --measure-ms   measured time per variant (default 4000, quick 800)
  --keys         distinct keys in scenarios 1 and 4 (default 10000)
  --concurrency  in-flight calls in scenarios 1 and 4 (default 256,1000)`;

function parseSettings(argv: readonly string[]): Settings {
  const flags = readFlags(argv, ['json', 'quick', 'only', 'warm-ms', 'measure-ms', 'keys', 'concurrency']);
  const quick = flags.get('quick') === 'true';
  const whole = (name: string, fallback: number): number => {
    const text = flags.get(name);
    if (text === undefined) return fallback;
    const value = Number(text);
    if (!Number.isInteger(value) || value < 1) throw new UsageError(`Expected --${name} to be a whole number ≥ 1, got '${text}'`);
    return value;
  };
  const list = (name: string, fallback: readonly number[]): number[] => {
    const text = flags.get(name);
    if (text === undefined) return [...fallback];
    const values = text.split(',').map(Number);
    if (values.some((v) => !Number.isInteger(v) || v < 1)) throw new UsageError(`Expected --${name} to be a list of whole numbers, got '${text}'`);
    return values;
  };
  const only = list('only', [1, 2, 3, 4]);
  if (only.some((n) => n > 4)) throw new UsageError(`Scenarios are 1 to 4, got --only=${flags.get('only')}`);
  return {
    json: flags.get('json') === 'true',
    quick,
    only: new Set(only),
    warmMs: whole('warm-ms', quick ? 200 : 1000),
    measureMs: whole('measure-ms', quick ? 800 : 4000),
    keys: whole('keys', 10_000),
    concurrency: list('concurrency', [256, 1000]),
    throwConcurrency: 256,
    delayCalls: 1000,
    delayRule: '500/100ms',
    delayRounds: quick ? 2 : 5,
  };
}

// ---------------------------------------------------------------------------------------------
// Results

interface RedisCost {
  /** Commands the ioredis client wrote, per decision (all kinds), and the raw counts. */
  readonly clientPerDecision: number;
  readonly client: ClientCounts;
  /** Server-side `INFO commandstats` delta, per decision. */
  readonly evalshaPerDecision: number;
  readonly evalPerDecision: number;
  /** Commands run inside the scripts (plus any non-script command), per decision. */
  readonly insidePerDecision: number;
  readonly totalPerDecision: number;
  readonly server: Record<string, number>;
  /** µs the server spent in EVALSHA/EVAL per decision. */
  readonly scriptUsecPerDecision: number;
  /** Server CPU over the measured run, % of one core. */
  readonly redisCpuPct: number;
  /** Commands `throttle.close()` sent afterwards (buffered settlements written through), and its time. */
  readonly onClose: ClientCounts;
  readonly closeMs: number;
}

interface ThroughputResult {
  readonly id: string;
  readonly scenario: number;
  readonly title: string;
  readonly store: 'redis' | 'memory';
  readonly mode: ThrottleMode;
  readonly rule: string;
  readonly autoPipelining: boolean | undefined;
  readonly concurrency: number;
  readonly keys: number;
  readonly decisions: number;
  readonly seconds: number;
  readonly decisionsPerSec: number;
  /** Scenario 1/4: schedule() call → fn start. Scenario 2: schedule() call → RateLimitedError. */
  readonly latencyMs: { readonly p50: number; readonly p90: number; readonly p99: number; readonly max: number };
  /** Node CPU over the measured run, % of one core. */
  readonly nodeCpuPct: number;
  readonly redis: RedisCost | undefined;
}

interface DelayResult {
  readonly id: string;
  readonly scenario: 3;
  readonly title: string;
  readonly autoPipelining: boolean;
  readonly calls: number;
  readonly rule: string;
  readonly rounds: number;
  /** schedule() of the first call → start of the last call's fn, ms, per round. */
  readonly lastStartMs: readonly number[];
  readonly medianLastStartMs: number;
  /** Earliest fn start of the last wave (the call number limit × (waves - 1)), ms (median of rounds). */
  readonly medianLastWaveFirstStartMs: number;
  /** schedule() of the first call → every promise settled, ms (median of rounds). */
  readonly medianTotalMs: number;
  /** Rule alone: (waves - 1) × window. */
  readonly idealRuleMs: number;
  /** Most fn starts seen in any window-long interval (local clock), over all rounds. */
  readonly maxStartsInWindow: number;
  readonly clientPerCall: number;
  readonly client: ClientCounts;
  readonly evalshaPerCall: number;
  readonly evalPerCall: number;
  readonly insidePerCall: number;
  readonly totalPerCall: number;
  readonly server: Record<string, number>;
  readonly scriptUsecPerCall: number;
  readonly onClose: ClientCounts;
}

interface Report {
  readonly machine: MachineInfo;
  readonly settings: Omit<Settings, 'only'> & { only: number[] };
  readonly throughput: ThroughputResult[];
  readonly delay: DelayResult[];
  readonly aims: AimCheck[];
  readonly wallSeconds: number;
}

interface AimCheck {
  readonly id: string;
  readonly aim: string;
  readonly value: number;
  readonly met: boolean;
}

// ---------------------------------------------------------------------------------------------
// Helpers

const log = (message: string): void => {
  process.stderr.write(`[bench] ${message}\n`);
};

const noop = (): void => {};

/**
 * Closes a client with QUIT. ioredis may reject the QUIT itself with "Connection is closed" when
 * Redis closes the socket (as QUIT asks) before its reply is read: seen here about 1 run in 3 with
 * auto-pipelining off. The client is closed either way.
 */
async function quit(client: Redis): Promise<void> {
  await client.quit().catch((error: unknown) => {
    if (!(error instanceof Error && error.message === 'Connection is closed.')) throw error;
  });
}

async function connect(port: number, enableAutoPipelining: boolean): Promise<{ client: Redis; counter: CommandCounter }> {
  const client = new Redis({ host: '127.0.0.1', port, enableAutoPipelining, lazyConnect: true, maxRetriesPerRequest: 1 });
  const counter = new CommandCounter(client);
  await client.connect();
  return { client, counter };
}

function perDecision(count: number, decisions: number): number {
  return decisions === 0 ? NaN : count / decisions;
}

function latencySummary(latencies: Latencies): ThroughputResult['latencyMs'] {
  const [p50, p90, p99] = latencies.percentiles([50, 90, 99]) as [number, number, number];
  return { p50, p90, p99, max: latencies.max() };
}

function redisCost(decisions: number, seconds: number, client: ClientCounts, server: ServerDelta, onClose: ClientCounts, closeMs: number): RedisCost {
  return {
    clientPerDecision: perDecision(client.total, decisions),
    client,
    evalshaPerDecision: perDecision(server.evalsha, decisions),
    evalPerDecision: perDecision(server.eval, decisions),
    insidePerDecision: perDecision(server.other, decisions),
    totalPerDecision: perDecision(server.total, decisions),
    server: server.byCommand,
    scriptUsecPerDecision: perDecision(server.scriptUsec, decisions),
    redisCpuPct: (server.cpuSeconds / seconds) * 100,
    onClose,
    closeMs,
  };
}

/** Most values of ascending `sorted` inside any half-open interval of length `width`. */
function maxInWindow(sorted: readonly number[], width: number): number {
  let best = 0;
  let lo = 0;
  for (let hi = 0; hi < sorted.length; hi++) {
    while (sorted[hi]! - sorted[lo]! >= width) lo++;
    best = Math.max(best, hi - lo + 1);
  }
  return best;
}

// ---------------------------------------------------------------------------------------------
// Scenarios

interface Context {
  readonly settings: Settings;
  readonly server: RedisServer;
  readonly control: Redis;
}

/** Scenario 1 (RedisStore) and 4 (MemoryStore): distinct keys, generous rule, nothing waits. */
async function unconstrained(
  ctx: Context,
  id: string,
  store: 'redis' | 'memory',
  autoPipelining: boolean | undefined,
  concurrency: number,
): Promise<ThroughputResult> {
  const { settings, control } = ctx;
  const rule = '1000000/min';
  const label = `${id} unconstrained ${store}${autoPipelining === undefined ? '' : ` autopipelining=${autoPipelining ? 'on' : 'off'}`} concurrency=${concurrency}`;
  log(label);
  await control.flushall();
  // A FLUSHALL on purpose, no process running: RESETSTAT clears the count of it, which lib/lua/epoch.lua reads as a sign of a loss.
  await control.config('RESETSTAT');
  const redis = store === 'redis' ? await connect(ctx.server.port, autoPipelining ?? false) : undefined;
  const throttle = new Throttle({
    name: `bench-${id}`,
    rules: [rule],
    store: redis ? new RedisStore(redis.client) : new MemoryStore(),
  });
  const latencies = new Latencies();
  const op = async (index: number): Promise<void> => {
    const calledAt = performance.now();
    await throttle.schedule(`user-${index % settings.keys}`, () => {
      latencies.add(performance.now() - calledAt);
    });
  };
  try {
    await runLoad(concurrency, settings.warmMs, op);
    latencies.clear();
    const serverBefore = redis && (await serverSnapshot(control));
    const clientBefore = redis?.counter.snapshot();
    const load = await runLoad(concurrency, settings.measureMs, op);
    let cost: RedisCost | undefined;
    if (redis && serverBefore && clientBefore) {
      const serverAfter = await serverSnapshot(control);
      const clientAfter = redis.counter.snapshot();
      const closeStartedAt = performance.now();
      await throttle.close();
      const closeMs = performance.now() - closeStartedAt;
      const onClose = diffClient(clientAfter, redis.counter.snapshot());
      cost = redisCost(load.ops, load.seconds, diffClient(clientBefore, clientAfter), diffServer(serverBefore, serverAfter), onClose, closeMs);
    }
    if (latencies.count !== load.ops) throw new Error(`${id}: ${load.ops} decisions but ${latencies.count} fn starts`);
    return {
      id,
      scenario: store === 'redis' ? 1 : 4,
      title: `unconstrained keys, ${store === 'redis' ? 'RedisStore' : 'MemoryStore'}`,
      store,
      mode: 'wait',
      rule,
      autoPipelining,
      concurrency,
      keys: settings.keys,
      decisions: load.ops,
      seconds: load.seconds,
      decisionsPerSec: load.ops / load.seconds,
      latencyMs: latencySummary(latencies),
      nodeCpuPct: (load.cpuSeconds / load.seconds) * 100,
      redis: cost,
    };
  } finally {
    await throttle.close();
    await throttle.store.close();
    if (redis) await quit(redis.client);
  }
}

/** Scenario 2: one key whose rule is full; throw mode; every decision is a refusal. */
async function saturatedThrow(ctx: Context, id: string, autoPipelining: boolean): Promise<ThroughputResult> {
  const { settings, control } = ctx;
  const rule = '10/min';
  const concurrency = settings.throwConcurrency;
  log(`${id} saturated key, throw mode, autopipelining=${autoPipelining ? 'on' : 'off'} concurrency=${concurrency}`);
  await control.flushall();
  // A FLUSHALL on purpose, no process running: RESETSTAT clears the count of it, which lib/lua/epoch.lua reads as a sign of a loss.
  await control.config('RESETSTAT');
  const redis = await connect(ctx.server.port, autoPipelining);
  const throttle = new Throttle({ name: `bench-${id}`, rules: [rule], store: new RedisStore(redis.client), mode: 'throw' });
  const key = 'saturated-user';
  try {
    for (let i = 0; i < 10; i++) await throttle.schedule(key, noop);
    const latencies = new Latencies();
    let granted = 0;
    const op = async (): Promise<void> => {
      const calledAt = performance.now();
      try {
        await throttle.schedule(key, noop);
        granted++;
      } catch (error) {
        if (!(error instanceof RateLimitedError)) throw error;
        latencies.add(performance.now() - calledAt);
      }
    };
    await runLoad(concurrency, settings.warmMs, op);
    latencies.clear();
    const serverBefore = await serverSnapshot(control);
    const clientBefore = redis.counter.snapshot();
    const load = await runLoad(concurrency, settings.measureMs, op);
    const serverAfter = await serverSnapshot(control);
    const clientAfter = redis.counter.snapshot();
    const closeStartedAt = performance.now();
    await throttle.close();
    const closeMs = performance.now() - closeStartedAt;
    const onClose = diffClient(clientAfter, redis.counter.snapshot());
    if (granted > 0) throw new Error(`${id}: ${granted} calls were granted on a full key`);
    return {
      id,
      scenario: 2,
      title: 'one saturated key, throw mode, RedisStore',
      store: 'redis',
      mode: 'throw',
      rule,
      autoPipelining,
      concurrency,
      keys: 1,
      decisions: load.ops,
      seconds: load.seconds,
      decisionsPerSec: load.ops / load.seconds,
      latencyMs: latencySummary(latencies),
      nodeCpuPct: (load.cpuSeconds / load.seconds) * 100,
      redis: redisCost(load.ops, load.seconds, diffClient(clientBefore, clientAfter), diffServer(serverBefore, serverAfter), onClose, closeMs),
    };
  } finally {
    await throttle.close();
    await throttle.store.close();
    await quit(redis.client);
  }
}

/** Scenario 3: many concurrent calls on one key in the default mode ('wait'), under a rule that makes them wait a little. */
async function saturatedDelay(ctx: Context, id: string, autoPipelining: boolean): Promise<DelayResult> {
  const { settings, control } = ctx;
  const calls = settings.delayCalls;
  log(
    `${id} saturated key, default mode, ${calls} concurrent calls, rule ${settings.delayRule}, autopipelining=${autoPipelining ? 'on' : 'off'}, ${settings.delayRounds} rounds`,
  );
  await control.flushall();
  // A FLUSHALL on purpose, no process running: RESETSTAT clears the count of it, which lib/lua/epoch.lua reads as a sign of a loss.
  await control.config('RESETSTAT');
  const redis = await connect(ctx.server.port, autoPipelining);
  const store = new RedisStore(redis.client);
  const lastStarts: number[] = [];
  const lastWaveFirstStarts: number[] = [];
  const totals: number[] = [];
  const allStarts: number[][] = [];
  let client: ClientCounts = { byName: {}, total: 0 };
  let onClose: ClientCounts = { byName: {}, total: 0 };
  const server = { evalsha: 0, eval: 0, other: 0, total: 0, scriptUsec: 0, byCommand: {} as Record<string, number> };
  let windowMs = 0;
  let limit = 0;
  try {
    // One unmeasured round loads the scripts on the connection and warms the JIT.
    for (let round = -1; round < settings.delayRounds; round++) {
      const throttle = new Throttle({ name: `bench-${id}-${round + 1}`, rules: [settings.delayRule as RuleString], store });
      const starts = new Array<number>(calls).fill(NaN);
      const serverBefore = await serverSnapshot(control);
      const clientBefore = redis.counter.snapshot();
      const sentAt = performance.now();
      await Promise.all(
        Array.from({ length: calls }, (_, i) =>
          throttle.schedule('hot-user', () => {
            starts[i] = performance.now() - sentAt;
          }),
        ),
      );
      const total = performance.now() - sentAt;
      const serverAfter = await serverSnapshot(control);
      const clientAfter = redis.counter.snapshot();
      const usage = await throttle.inspect('hot-user');
      limit = usage.rules[0]!.limit;
      windowMs = usage.rules[0]!.windowMs;
      const beforeClose = redis.counter.snapshot();
      await throttle.close();
      if (round < 0) continue;
      const sorted = starts.sort((a, b) => a - b);
      allStarts.push(sorted);
      lastStarts.push(sorted[sorted.length - 1]!);
      lastWaveFirstStarts.push(sorted[limit * (Math.ceil(calls / limit) - 1)]!);
      totals.push(total);
      client = addCounts(client, diffClient(clientBefore, clientAfter));
      onClose = addCounts(onClose, diffClient(beforeClose, redis.counter.snapshot()));
      const delta = diffServer(serverBefore, serverAfter);
      server.evalsha += delta.evalsha;
      server.eval += delta.eval;
      server.other += delta.other;
      server.total += delta.total;
      server.scriptUsec += delta.scriptUsec;
      for (const [name, count] of Object.entries(delta.byCommand)) server.byCommand[name] = (server.byCommand[name] ?? 0) + count;
    }
  } finally {
    await store.close();
    await quit(redis.client);
  }
  const measured = calls * settings.delayRounds;
  const waves = Math.ceil(calls / limit);
  return {
    id,
    scenario: 3,
    title: 'one saturated key, default mode, RedisStore',
    autoPipelining,
    calls,
    rule: settings.delayRule,
    rounds: settings.delayRounds,
    lastStartMs: lastStarts,
    medianLastStartMs: median(lastStarts),
    medianLastWaveFirstStartMs: median(lastWaveFirstStarts),
    medianTotalMs: median(totals),
    idealRuleMs: (waves - 1) * windowMs,
    maxStartsInWindow: Math.max(...allStarts.map((starts) => maxInWindow(starts, windowMs))),
    clientPerCall: client.total / measured,
    client,
    evalshaPerCall: server.evalsha / measured,
    evalPerCall: server.eval / measured,
    insidePerCall: server.other / measured,
    totalPerCall: server.total / measured,
    server: server.byCommand,
    scriptUsecPerCall: server.scriptUsec / measured,
    onClose,
  };
}

function addCounts(a: ClientCounts, b: ClientCounts): ClientCounts {
  const byName = { ...a.byName };
  for (const [name, count] of Object.entries(b.byName)) byName[name] = (byName[name] ?? 0) + count;
  return { byName, total: a.total + b.total };
}

// ---------------------------------------------------------------------------------------------
// Output

function aims(throughput: readonly ThroughputResult[], delay: readonly DelayResult[]): AimCheck[] {
  const checks: AimCheck[] = [];
  for (const result of throughput.filter((r) => r.scenario === 1)) {
    checks.push({
      id: result.id,
      aim: '≥ 50,000 decisions/s from one process, unconstrained keys',
      value: result.decisionsPerSec,
      met: result.decisionsPerSec >= 50_000,
    });
  }
  for (const result of delay) {
    // Every EVALSHA or EVAL the client sent (batches of decisions and completions), per call.
    const commands = result.evalshaPerCall + result.evalPerCall;
    checks.push({
      id: result.id,
      aim: `< 0.2 Redis commands per call with ${result.calls.toLocaleString('en-US')} calls waiting on one key`,
      value: commands,
      met: commands < 0.2,
    });
  }
  return checks;
}

function describeCounts(counts: ClientCounts): string {
  const parts = Object.entries(counts.byName)
    .sort((a, b) => b[1] - a[1])
    .map(([name, count]) => `${name} ${formatNumber(count)}`);
  return parts.length === 0 ? 'none' : parts.join(', ');
}

function renderReport(report: Report): string {
  const { machine, throughput, delay } = report;
  const out: string[] = [];
  out.push('vendor-throttle benchmark');
  out.push(
    `  CPU     ${machine.cpuModel} (${machine.cores} logical cores${machine.physicalCores ? `, ${machine.physicalCores} physical` : ''}), ${machine.totalMemoryGiB} GiB`,
  );
  out.push(`  Node    ${machine.node}    redis-server ${machine.redis} (private, 127.0.0.1)    ${machine.platform}`);
  out.push(
    `  Runs    warm-up ${report.settings.warmMs} ms + ${report.settings.measureMs} ms measured per variant; ${report.settings.keys.toLocaleString('en-US')} keys round-robin in 1/4${report.settings.quick ? '  (--quick)' : ''}`,
  );
  out.push('');

  if (throughput.length > 0) {
    out.push('Throughput and latency  (latency: schedule() call → fn start; scenario 2: → RateLimitedError)');
    const columns: Column[] = [
      { title: 'id', left: true },
      { title: 'scenario', left: true },
      { title: 'mode', left: true },
      { title: 'autopipe', left: true },
      { title: 'conc' },
      { title: 'decisions' },
      { title: 'secs', digits: 2 },
      { title: 'decisions/s' },
      { title: 'p50 ms', digits: 2 },
      { title: 'p90 ms', digits: 2 },
      { title: 'p99 ms', digits: 2 },
      { title: 'max ms', digits: 1 },
      { title: 'node CPU%' },
      { title: 'redis CPU%' },
    ];
    const rows: Cell[][] = throughput.map((r) => [
      r.id,
      r.title,
      r.mode,
      r.autoPipelining === undefined ? '-' : r.autoPipelining ? 'on' : 'off',
      r.concurrency,
      r.decisions,
      r.seconds,
      r.decisionsPerSec,
      r.latencyMs.p50,
      r.latencyMs.p90,
      r.latencyMs.p99,
      r.latencyMs.max,
      r.nodeCpuPct,
      r.redis?.redisCpuPct,
    ]);
    out.push(renderTable(columns, rows));
    out.push('');

    const withRedis = throughput.filter((r) => r.redis !== undefined);
    if (withRedis.length > 0) {
      out.push('Redis commands per decision  (client: commands the ioredis client wrote; server: INFO commandstats deltas,');
      out.push('where "in scripts" are the commands the Lua scripts run through redis.call, which Redis counts too)');
      const costColumns: Column[] = [
        { title: 'id', left: true },
        { title: 'client sent', digits: 4 },
        { title: 'evalsha', digits: 4 },
        { title: 'eval', digits: 4 },
        { title: 'in scripts', digits: 2 },
        { title: 'server total', digits: 2 },
        { title: 'script µs', digits: 1 },
        { title: 'sent by close()', left: true },
      ];
      out.push(
        renderTable(
          costColumns,
          withRedis.map((r) => [
            r.id,
            r.redis!.clientPerDecision,
            r.redis!.evalshaPerDecision,
            r.redis!.evalPerDecision,
            r.redis!.insidePerDecision,
            r.redis!.totalPerDecision,
            r.redis!.scriptUsecPerDecision,
            `${describeCounts(r.redis!.onClose)} in ${formatNumber(r.redis!.closeMs, 0)} ms`,
          ]),
        ),
      );
      out.push('');
      for (const r of withRedis) {
        const inner = Object.entries(r.redis!.server)
          .filter(([name]) => name !== 'evalsha' && name !== 'eval')
          .sort((a, b) => b[1] - a[1])
          .map(([name, count]) => `${name} ${formatNumber(count / r.decisions, 2)}`)
          .join(', ');
        out.push(`  ${r.id}  sent: ${describeCounts(r.redis!.client)}`);
        out.push(`  ${' '.repeat(r.id.length)}  in scripts per decision: ${inner || 'none'}`);
      }
      out.push('');
    }
  }

  if (delay.length > 0) {
    const first = delay[0]!;
    out.push(
      `Scenario 3: one saturated key, default mode, ${first.calls} concurrent calls, rule ${first.rule}, fn does nothing  (times in ms, median of ${first.rounds} rounds)`,
    );
    const columns: Column[] = [
      { title: 'id', left: true },
      { title: 'autopipe', left: true },
      { title: 'last wave 1st start', digits: 1 },
      { title: 'last start', digits: 1 },
      { title: 'all settled', digits: 1 },
      { title: 'ideal (rule)', digits: 0 },
      { title: 'over ideal', digits: 1 },
      { title: 'max starts/window' },
      { title: 'sent/call', digits: 4 },
      { title: 'evalsha+eval/call', digits: 4 },
      { title: 'server total/call', digits: 2 },
      { title: 'script µs/call', digits: 1 },
      { title: 'sent by close()', left: true },
    ];
    out.push(
      renderTable(
        columns,
        delay.map((d) => [
          d.id,
          d.autoPipelining ? 'on' : 'off',
          d.medianLastWaveFirstStartMs,
          d.medianLastStartMs,
          d.medianTotalMs,
          d.idealRuleMs,
          d.medianLastStartMs - d.idealRuleMs,
          d.maxStartsInWindow,
          d.clientPerCall,
          d.evalshaPerCall + d.evalPerCall,
          d.totalPerCall,
          d.scriptUsecPerCall,
          `${describeCounts(d.onClose)} (${d.rounds} rounds)`,
        ]),
      ),
    );
    for (const d of delay) out.push(`  ${d.id}  last start per round: ${d.lastStartMs.map((ms) => formatNumber(ms, 1)).join(', ')}`);
    out.push('');
  }

  if (report.aims.length > 0) {
    out.push('Aims of one process (the side by side, scripts/compare.ts, has the rest): scenarios 1 and 3');
    for (const check of report.aims) {
      const digits = check.aim.includes('/s') ? 0 : 4;
      out.push(`  ${check.met ? 'MET   ' : 'MISSED'}  ${check.id}  ${check.aim}: ${formatNumber(check.value, digits)}`);
    }
    out.push('');
  }
  out.push(`Total wall time ${formatNumber(report.wallSeconds, 1)} s`);
  return out.join('\n');
}

// ---------------------------------------------------------------------------------------------
// Main

async function main(): Promise<void> {
  const settings = settingsOrUsage(() => parseSettings(process.argv.slice(2)), USAGE);
  if (settings === undefined) return;
  const startedAt = performance.now();
  log('starting a private redis-server');
  const server = await startRedis();
  const detachSignals = cleanUpOnSignal(() => server.stop());
  const control = new Redis({ host: '127.0.0.1', port: server.port, lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await control.connect();
    const ctx: Context = { settings, server, control };
    const machine = await machineInfo(control);
    log(`redis-server ${machine.redis} on port ${server.port} (pid ${server.pid})`);
    const throughput: ThroughputResult[] = [];
    const delay: DelayResult[] = [];
    const letters = 'abcdefghijklmnopqrstuvwxyz';
    if (settings.only.has(1)) {
      let n = 0;
      for (const autoPipelining of [true, false]) {
        for (const concurrency of settings.concurrency) {
          throughput.push(await unconstrained(ctx, `1${letters[n++]}`, 'redis', autoPipelining, concurrency));
        }
      }
    }
    if (settings.only.has(2)) {
      throughput.push(await saturatedThrow(ctx, '2a', true));
      throughput.push(await saturatedThrow(ctx, '2b', false));
    }
    if (settings.only.has(3)) {
      delay.push(await saturatedDelay(ctx, '3a', true));
      delay.push(await saturatedDelay(ctx, '3b', false));
    }
    if (settings.only.has(4)) {
      let n = 0;
      for (const concurrency of settings.concurrency) {
        throughput.push(await unconstrained(ctx, `4${letters[n++]}`, 'memory', undefined, concurrency));
      }
    }
    const report: Report = {
      machine,
      settings: { ...settings, only: [...settings.only].sort() },
      throughput,
      delay,
      aims: aims(throughput, delay),
      wallSeconds: (performance.now() - startedAt) / 1000,
    };
    process.stdout.write(settings.json ? `${JSON.stringify(report, null, 2)}\n` : `${renderReport(report)}\n`);
  } finally {
    control.disconnect();
    await server.stop();
    detachSignals();
    log('redis-server stopped');
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
