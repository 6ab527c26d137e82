/**
 * One run: one contender in every worker process, one scenario, a fresh simulated vendor, the
 * shared Redis emptied first. Collects the workers' results and turns them into the measures of
 * the report.
 */
import type { Redis } from 'ioredis';
import { contenderById } from './contenders.js';
import type { ContenderId } from './contender.js';
import { startDelayProxy, type DelayProxy } from './delay-proxy.js';
import { dropsUnderRules, exactReplayMs, idealOffsets, percentile, processSpread } from './metrics.js';
import type { WorkerPool } from './pool.js';
import type { BurstLoad, BurstResult, ClosedLoad, ClosedResult, Reply, RunSpec } from './protocol.js';
import { keyMemory, readServer, serverCost, type ServerCost } from './redis-usage.js';
import { burstCount, callsOfWorker, type Scenario } from './scenarios.js';
import { startCompareVendor } from './vendor.js';

export interface RunOutcome {
  readonly scenario: Scenario['id'];
  readonly contender: ContenderId;
  readonly config: string;
  /** Why the run produced no numbers (setup error, timeout). */
  readonly failure?: string;
  /** Calls asked for, and calls whose `fn` ran. */
  readonly scheduled: number;
  readonly calls: number;
  readonly errors: number;
  readonly firstErrors: readonly string[];
  /** Burst runs: calls the vendor answered 200 OK but did not perform. */
  readonly dropped?: number;
  /** Burst runs: Σ ideal batch time / Σ actual (first to last arrival at the vendor), over users. */
  readonly utilization?: number;
  readonly idealSeconds?: number;
  /**
   * Burst runs with HTTP, both on calls' start times (first to last), Σ ideal ÷ Σ actual over users:
   * the contender's (`startQuota`), and that of an exact limiter with perfect knowledge given the
   * same calls' durations (`exactCeiling`, scripts/compare/metrics.ts `exactReplayMs`).
   */
  readonly startQuota?: number;
  readonly exactCeiling?: number;
  /**
   * Burst runs where several processes call for one user: the processes' spread (scripts/compare/
   * metrics.ts `processSpread`), the mean and the largest over such users. 0: evenly served.
   */
  readonly processSpread?: { readonly mean: number; readonly max: number };
  /** Burst runs: the slowest user's first to last arrival. */
  readonly batchSeconds?: number;
  /** Calls started per second: from the release to the last start (burst), or over the measured time (closed). */
  readonly decisionsPerSec: number;
  /** `fn` start minus its ideal start (release + ideal offset of its rank), ms. */
  readonly addedP50Ms: number;
  readonly addedP99Ms: number;
  /** Commands the workers' clients sent, per call. */
  readonly sentPerCall: number;
  /** Commands Redis ran (inside scripts included), per call. */
  readonly redisCommandsPerCall: number;
  /**
   * Commands run inside Redis per call: every command `INFO commandstats` counts (a script's
   * `redis.call`s are counted under their own names) except the script calls themselves
   * (EVALSHA, EVAL, FCALL and their _RO forms).
   */
  readonly innerCommandsPerCall: number;
  /** Worker processes that took part. */
  readonly processes: number;
  /** Burst runs with skewed clocks: `Date.now()` minus the real clock in each worker, ms. */
  readonly observedSkewsMs?: readonly number[];
  /** Burst runs with a heavy tail: vendor calls that took the tail's latency. */
  readonly tailCalls?: number;
  readonly redisCpuUsPerCall: number;
  /** µs Redis spent executing commands (`INFO commandstats`; wall time, inner script commands counted twice), per call. */
  readonly redisCommandUsPerCall: number;
  /** CPU of the worker processes (user + sys), µs per call: the limiter's client side, plus the HTTP calls in bursts. */
  readonly workerCpuUsPerCall: number;
  readonly byCommand: Readonly<Record<string, number>>;
  /** Memory of every key in Redis during the run (`MEMORY USAGE`, largest of 3 samples), per user, and keys per user. */
  readonly redisBytesPerUser: number;
  readonly redisKeysPerUser: number;
  readonly wallSeconds: number;
}

export interface RunContext {
  readonly pool: WorkerPool;
  readonly control: Redis;
  readonly redisPort: number;
  /** Redis CPU s/s when idle, taken out of each run's CPU. */
  readonly idleCpuPerSecond: number;
  /** Runs so far, for unique Redis prefixes. */
  sequence: number;
}

const SETUP_TIMEOUT_MS = 60_000;
/** A burst may take 3 × its ideal time plus this before it is called off. */
const BURST_GRACE_MS = 30_000;

function failed(scenario: Scenario, contender: ContenderId, config: string, failure: string, wallSeconds: number): RunOutcome {
  return {
    scenario: scenario.id,
    contender,
    config,
    failure,
    scheduled: 0,
    calls: 0,
    errors: 0,
    firstErrors: [],
    decisionsPerSec: NaN,
    addedP50Ms: NaN,
    addedP99Ms: NaN,
    sentPerCall: NaN,
    redisCommandsPerCall: NaN,
    innerCommandsPerCall: NaN,
    processes: 0,
    redisCpuUsPerCall: NaN,
    redisCommandUsPerCall: NaN,
    workerCpuUsPerCall: NaN,
    byCommand: {},
    redisBytesPerUser: NaN,
    redisKeysPerUser: NaN,
    wallSeconds,
  };
}

function failureOf(replies: readonly Reply[]): string | undefined {
  const failure = replies.find((reply) => reply.type === 'failed');
  return failure?.type === 'failed' ? failure.message : undefined;
}

export function userNames(scenario: Scenario): string[] {
  const { users } = scenario.shape;
  if (scenario.shape.kind === 'closed') return Array.from({ length: users }, (_, i) => `u${i}`);
  return users === 1 ? ['hot-user'] : Array.from({ length: users }, (_, i) => `user-${i}`);
}

export async function runOne(ctx: RunContext, scenario: Scenario, contenderId: ContenderId): Promise<RunOutcome> {
  const startedAt = performance.now();
  const { pool, control } = ctx;
  const contender = contenderById(contenderId);
  const burst = scenario.shape.kind === 'burst';
  const workers = Math.min(pool.size, scenario.processes ?? pool.size);
  const active = Array.from({ length: workers }, (_, i) => i);
  const config = contender.describe(scenario.rules, workers);
  // Scripts stay cached (as in production): a warm-up round has loaded every contender's.
  await control.flushall();
  // A FLUSHALL on purpose, no process running: RESETSTAT clears the count of it, which lib/lua/epoch.lua reads as a sign of a loss.
  await control.config('RESETSTAT');
  const vendor = burst || scenario.shape.http ? await startCompareVendor({ latencyMs: scenario.vendorLatencyMs, tail: scenario.vendorTail }) : undefined;
  const broadcast = (command: Parameters<WorkerPool['send']>[1]): void => {
    for (const index of active) pool.send(index, command);
  };
  let proxy: DelayProxy | undefined;
  const seconds = (): number => (performance.now() - startedAt) / 1000;
  try {
    if (scenario.redisDelayMs) proxy = await startDelayProxy(ctx.redisPort, scenario.redisDelayMs);
    const redisUrl = `redis://127.0.0.1:${proxy?.port ?? ctx.redisPort}`;
    const users = userNames(scenario);
    const runId = `r${++ctx.sequence}-${contenderId}`;
    const shape = scenario.shape;
    for (const index of active) {
      const load: BurstLoad | ClosedLoad =
        shape.kind === 'burst'
          ? {
              kind: 'burst',
              users,
              callsPerUser: callsOfWorker(shape, workers, index),
              vendorUrl: vendor!.url,
              sendDelayMs: scenario.sendDelayMs,
              noHttp: scenario.noHttp,
            }
          : {
              kind: 'closed',
              users: users.length,
              concurrency: shape.concurrency,
              warmMs: shape.warmMs,
              measureMs: shape.measureMs,
              vendorUrl: shape.http ? vendor!.url : undefined,
            };
      const clockSkewMs = scenario.clockSkewMs === undefined ? undefined : index % 2 === 0 ? scenario.clockSkewMs : -scenario.clockSkewMs;
      const run: RunSpec = { runId, contender: contenderId, rules: scenario.rules, workers, index, redisUrl, clockSkewMs, load };
      pool.send(index, { type: 'prepare', run });
    }
    const teardown = async (): Promise<void> => {
      broadcast({ type: 'teardown' });
      const torn = await pool.collect(['torn'], 15_000, active);
      if (failureOf(torn) !== undefined) pool.restart();
    };
    const setup = failureOf(await pool.collect(['ready'], SETUP_TIMEOUT_MS, active));
    if (setup !== undefined) {
      await teardown();
      return failed(scenario, contenderId, config, setup, seconds());
    }
    let before = await readServer(control);
    broadcast({ type: 'go' });
    let timeoutMs: number;
    /** How long the measured part should take: memory is sampled during it. */
    let spanMs: number;
    if (scenario.shape.kind === 'closed') {
      const warm = failureOf(await pool.collect(['warm'], scenario.shape.warmMs + SETUP_TIMEOUT_MS, active));
      if (warm !== undefined) {
        await teardown();
        return failed(scenario, contenderId, config, warm, seconds());
      }
      before = await readServer(control);
      broadcast({ type: 'measure' });
      timeoutMs = scenario.shape.measureMs + SETUP_TIMEOUT_MS;
      spanMs = scenario.shape.measureMs;
    } else {
      const idealMs = idealOffsets(burstCount(scenario.shape, workers), scenario.rules).at(-1)!;
      timeoutMs = 3 * idealMs + BURST_GRACE_MS + (scenario.vendorTail?.ms ?? 0);
      spanMs = Math.max(400, idealMs);
    }
    // Memory is read while every user's keys are in use (some expire within a window of the last
    // call), three times at 30, 55 and 80 % of the run, off the window boundaries; the largest counts.
    const memorySample = sampleMemory(
      control,
      [0.3, 0.55, 0.8].map((f) => f * spanMs),
    );
    let replies = await pool.collect(['result'], timeoutMs, active);
    let stalled: string | undefined;
    if (scenario.shape.kind === 'burst' && failureOf(replies)?.includes('in time')) {
      // Call the run off: the workers report what they have, and the run is shown as stalled.
      broadcast({ type: 'abort' });
      const late = replies.flatMap((reply, index) => (reply.type === 'result' ? [] : [index]));
      const more = await pool.collect(['result'], 15_000, late);
      replies = replies.map((reply, index) => (late.includes(index) ? more[late.indexOf(index)]! : reply));
      const results = replies.flatMap((reply) => (reply.type === 'result' && reply.result.kind === 'burst' ? [reply.result] : []));
      const unfinished = results.reduce((sum, r) => sum + r.unfinished, 0);
      const total = results.reduce((sum, r) => sum + r.user.length, 0);
      stalled = `stalled: ${unfinished} of ${total} calls not done after ${Math.round(timeoutMs / 1000)} s`;
    }
    const memory = await memorySample;
    const after = await readServer(control);
    const failure = stalled ?? failureOf(replies);
    if (failure !== undefined) {
      await teardown();
      return failed(scenario, contenderId, config, failure, seconds());
    }
    await teardown();
    const results = replies.map((reply) => (reply as Extract<Reply, { type: 'result' }>).result);
    const cost = serverCost(before, after, ctx.idleCpuPerSecond);
    const common = { scenario: scenario.id, contender: contenderId, config, byCommand: cost.byCommand, processes: workers };
    const bursts = results as BurstResult[];
    const measured =
      scenario.shape.kind === 'burst'
        ? {
            ...analyseBurst(scenario, users, bursts, scenario.noHttp ? startsPerUser(users, bursts) : vendor!.arrivals(), cost),
            ...(scenario.vendorTail ? { tailCalls: vendor!.tailCalls } : {}),
            ...(scenario.clockSkewMs !== undefined ? { observedSkewsMs: bursts.map((r) => r.observedSkewMs) } : {}),
          }
        : analyseClosed(results as ClosedResult[], cost);
    return {
      ...common,
      ...measured,
      redisBytesPerUser: memory.bytes / users.length,
      redisKeysPerUser: memory.keys / users.length,
      wallSeconds: seconds(),
    };
  } finally {
    await vendor?.close();
    await proxy?.close();
  }
}

async function sampleMemory(control: Redis, atMs: readonly number[]): Promise<{ keys: number; bytes: number }> {
  const startedAt = performance.now();
  let best = { keys: NaN, bytes: NaN };
  for (const at of atMs) {
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, at - (performance.now() - startedAt))));
    try {
      const sample = await keyMemory(control);
      if (!(sample.bytes <= best.bytes)) best = sample;
    } catch {
      // the run is over or Redis is gone: keep what we have
    }
  }
  return best;
}

type Measured = Omit<RunOutcome, 'scenario' | 'contender' | 'config' | 'byCommand' | 'processes' | 'redisBytesPerUser' | 'redisKeysPerUser' | 'wallSeconds'>;

/** The commands that run a script; what they run inside is counted under its own names. */
const SCRIPT_COMMANDS = new Set(['eval', 'evalsha', 'eval_ro', 'evalsha_ro', 'fcall', 'fcall_ro']);

function redisPerCall(
  cost: ServerCost,
  calls: number,
): Pick<Measured, 'redisCommandsPerCall' | 'innerCommandsPerCall' | 'redisCpuUsPerCall' | 'redisCommandUsPerCall'> {
  let scripts = 0;
  for (const [name, count] of Object.entries(cost.byCommand)) if (SCRIPT_COMMANDS.has(name)) scripts += count;
  return {
    redisCommandsPerCall: cost.commands / calls,
    innerCommandsPerCall: (cost.commands - scripts) / calls,
    redisCpuUsPerCall: (cost.cpuSeconds * 1e6) / calls,
    redisCommandUsPerCall: cost.usec / calls,
  };
}

function errorsOf(results: ReadonlyArray<BurstResult | ClosedResult>): Pick<Measured, 'errors' | 'firstErrors'> {
  return { errors: results.reduce((sum, r) => sum + r.errors, 0), firstErrors: results.flatMap((r) => r.firstErrors).slice(0, 3) };
}

/** Without HTTP the calls' start times stand for the arrivals: per user, ascending. */
function startsPerUser(users: readonly string[], results: readonly BurstResult[]): Map<string, number[]> {
  const starts = users.map((): number[] => []);
  for (const result of results) {
    result.user.forEach((u, i) => {
      if (result.start[i]! >= 0) starts[u]!.push(result.start[i]!);
    });
  }
  return new Map(users.map((user, u) => [user, starts[u]!.sort((a, b) => a - b)]));
}

function spreadOf(byProcess: ReadonlyArray<ReadonlyArray<readonly number[]>>): Pick<Measured, 'processSpread'> {
  const spreads = byProcess.map(processSpread).filter((spread): spread is number => spread !== undefined);
  if (spreads.length === 0) return {};
  return { processSpread: { mean: spreads.reduce((a, b) => a + b, 0) / spreads.length, max: Math.max(...spreads) } };
}

function analyseBurst(
  scenario: Scenario,
  users: readonly string[],
  results: readonly BurstResult[],
  perUser: ReadonlyMap<string, number[]>,
  cost: ServerCost,
): Measured {
  const asks = users.map((): number[] => []);
  const starts = users.map((): number[] => []);
  const durations = users.map((): Array<[number, number]> => []);
  const byProcess = users.map(() => results.map((): number[] => []));
  let scheduled = 0;
  let sent = 0;
  for (const [worker, result] of results.entries()) {
    sent += result.sent;
    result.user.forEach((u, i) => {
      if (result.start[i]! >= 0) byProcess[u]![worker]!.push(result.start[i]!);
      scheduled++;
      asks[u]!.push(result.ask[i]!);
      if (result.start[i]! >= 0) starts[u]!.push(result.start[i]!);
      if (result.start[i]! >= 0 && result.end[i]! >= 0) durations[u]!.push([result.start[i]!, result.end[i]! - result.start[i]!]);
    });
  }
  let startIdeal = 0;
  let startActual = 0;
  let startCeiling = 0;
  const added: number[] = [];
  let idealSum = 0;
  let actualSum = 0;
  let idealMax = 0;
  let batchMax = 0;
  let dropped = 0;
  let calls = 0;
  let firstAsk = Infinity;
  let lastStart = -Infinity;
  users.forEach((user, u) => {
    const released = Math.min(...asks[u]!);
    firstAsk = Math.min(firstAsk, released);
    const ideal = idealOffsets(asks[u]!.length, scenario.rules);
    const sorted = starts[u]!.sort((a, b) => a - b);
    calls += sorted.length;
    sorted.forEach((start, k) => added.push(start - released - ideal[k]!));
    if (sorted.length > 0) lastStart = Math.max(lastStart, sorted.at(-1)!);
    const arrivals = perUser.get(user) ?? [];
    dropped += dropsUnderRules(arrivals, scenario.rules);
    const timed = durations[u]!.sort((a, b) => a[0] - b[0]);
    if (!scenario.noHttp && timed.length > 1 && timed.length === sorted.length) {
      startIdeal += ideal.at(-1)!;
      startActual += sorted.at(-1)! - sorted[0]!;
      startCeiling += exactReplayMs(
        timed.map(([, ms]) => ms),
        scenario.rules,
      );
    }
    if (arrivals.length > 1) {
      const idealMs = ideal.at(-1)!;
      const actualMs = arrivals.at(-1)! - arrivals[0]!;
      idealSum += idealMs;
      actualSum += actualMs;
      idealMax = Math.max(idealMax, idealMs);
      batchMax = Math.max(batchMax, actualMs);
    }
  });
  added.sort((a, b) => a - b);
  return {
    scheduled,
    calls,
    ...errorsOf(results),
    dropped,
    utilization: actualSum > 0 && idealSum > 0 ? idealSum / actualSum : NaN,
    idealSeconds: idealMax / 1000,
    ...(startActual > 0 ? { startQuota: startIdeal / startActual, exactCeiling: startIdeal / startCeiling } : {}),
    ...spreadOf(byProcess),
    batchSeconds: batchMax / 1000,
    decisionsPerSec: calls / ((lastStart - firstAsk) / 1000),
    addedP50Ms: percentile(added, 50),
    addedP99Ms: percentile(added, 99),
    sentPerCall: sent / calls,
    workerCpuUsPerCall: results.reduce((sum, r) => sum + r.cpuUs, 0) / calls,
    ...redisPerCall(cost, calls),
  };
}

function analyseClosed(results: readonly ClosedResult[], cost: ServerCost): Measured {
  const calls = results.reduce((sum, r) => sum + r.ops, 0);
  const seconds = Math.max(...results.map((r) => r.seconds));
  const latencies = results.flatMap((r) => r.latencies).sort((a, b) => a - b);
  return {
    scheduled: calls + results.reduce((sum, r) => sum + r.errors, 0),
    calls,
    ...errorsOf(results),
    decisionsPerSec: calls / seconds,
    addedP50Ms: percentile(latencies, 50),
    addedP99Ms: percentile(latencies, 99),
    sentPerCall: results.reduce((sum, r) => sum + r.sent, 0) / calls,
    workerCpuUsPerCall: results.reduce((sum, r) => sum + r.cpuUs, 0) / calls,
    ...redisPerCall(cost, calls),
  };
}
