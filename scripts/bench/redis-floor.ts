/**
 * What a call costs inside Redis, at the floor: a counter against the fewest commands an exact log
 * of calls needs, side by side on one private redis-server.
 *
 *   npx tsx scripts/bench/redis-floor.ts [--calls=50000] [--runs=3]
 *
 * Each contender books `--calls` calls over 10,000 keys (a rule that never binds) and completes
 * them; µs per call are `INFO commandstats` (time inside EVALSHA) and `INFO cpu` (the whole server:
 * parsing and replies too), median of `--runs` runs, taken in turn:
 *
 * - counter: rate-limiter-flexible's script (SET NX, INCRBY, PTTL), one EVALSHA per call, as it runs.
 * - log, 4 commands: a batch script doing only what an exact log of calls must: book (ZCARD, ZADD,
 *   PEXPIRE GT) and complete (ZADD XX LT), 200 calls a script, no other logic.
 * - log, 6 commands: the same, and the key's state read (HMGET: its pause, hold, waiting processes)
 *   and the waiting processes read at a completion (HGET): what wakes and vendor pauses need.
 * - vendor-throttle: lua/batch.lua as the RedisStore sends it on a standalone Redis
 *   (lib/stores/redis-batch.ts: the namespace's index of kept keys and its mark, made as a new
 *   epoch makes it), 200 calls a script, without the journal of recovery (no witness rides on the
 *   bookings, and each booking sets the log's life); and as a store with recovery sends it: under
 *   the epoch, each booking carrying the key's witness from the journal.
 */
import { Redis } from 'ioredis';
import { batchKeys, encodeBatch, groupByKey, type CompleteOp, type DecideOp, type Op } from '../../lib/stores/redis-batch.js';
import { Journal } from '../../lib/journal.js';
import { scripts } from '../../lib/stores/redis-scripts.js';
import type { Rule } from '../../lib/rules.js';
import { keyNameParts } from '../../lib/keys.js';
import { diffServer, serverSnapshot } from './redis-stats.js';
import { startRedis } from '../support/redis-server.js';
import { cleanUpOnSignal, readFlags, settingsOrUsage, UsageError } from '../support/usage.js';

const KEYS = 10_000;
const BATCH = 200;

/** rate-limiter-flexible's RateLimiterRedis script (lib/RateLimiterRedis.js), as it sends it per call. */
const COUNTER = `redis.call('set', KEYS[1], 0, 'EX', ARGV[2], 'NX')
local consumed = redis.call('incrby', KEYS[1], ARGV[1])
local ttl = redis.call('pttl', KEYS[1])
if ttl == -1 then
  redis.call('expire', KEYS[1], ARGV[2])
  ttl = 1000 * ARGV[2]
end
return {consumed, ttl}`;

/** The floor of a log of calls: ARGV[1] 'book' or 'complete', ARGV[2] '1' to read the key's state too, then one member number per key. */
const LOG = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local state = ARGV[2] == '1'
for k = 1, #KEYS / 2 do
  local log, meta, member = KEYS[2 * k - 1], KEYS[2 * k], ARGV[k + 2] .. ':t'
  if ARGV[1] == 'book' then
    if state then redis.call('HMGET', meta, 'pause', 'w', 'h', 'r') end
    redis.call('ZCARD', log)
    redis.call('ZADD', log, now + 30000, member)
    redis.call('PEXPIRE', log, 31000, 'GT')
  else
    redis.call('ZADD', log, 'XX', 'LT', now, member)
    if state then redis.call('HGET', meta, 'w') end
  end
end
return #KEYS`;

interface Settings {
  readonly calls: number;
  readonly runs: number;
}

const USAGE = 'Usage: npx tsx scripts/bench/redis-floor.ts [--calls=50000] [--runs=3]';

function parseSettings(argv: readonly string[]): Settings {
  const flags = readFlags(argv, ['calls', 'runs']);
  const calls = Number(flags.get('calls') ?? '50000');
  const runs = Number(flags.get('runs') ?? '3');
  if (!Number.isInteger(calls) || calls < BATCH || calls % BATCH !== 0)
    throw new UsageError(`Expected --calls to be a multiple of ${BATCH}, got '${flags.get('calls')}'`);
  if (!Number.isInteger(runs) || runs < 1) throw new UsageError(`Expected --runs to be a whole number ≥ 1, got '${flags.get('runs')}'`);
  return { calls, runs };
}

type Contender = (redis: Redis, calls: number, run: number) => Promise<void>;

const counter: Contender = async (redis, calls, run) => {
  const sha = (await redis.script('LOAD', COUNTER)) as string;
  for (let sent = 0; sent < calls; sent += BATCH) {
    const asks: Array<Promise<unknown>> = [];
    for (let i = 0; i < BATCH; i++) asks.push(redis.evalsha(sha, 1, `counter:${run}:u${(sent + i) % KEYS}`, 1, 1));
    await Promise.all(asks);
  }
};

function logFloor(state: boolean): Contender {
  return async (redis, calls, run) => {
    const sha = (await redis.script('LOAD', LOG)) as string;
    for (let sent = 0; sent < calls; sent += BATCH) {
      const keys: string[] = [];
      const members: number[] = [];
      for (let i = 0; i < BATCH; i++) {
        const key = `log${state ? 6 : 4}:${run}:{u${(sent + i) % KEYS}}`;
        keys.push(`${key}:log`, `${key}:meta`);
        members.push(sent + i);
      }
      await redis.evalsha(sha, keys.length, ...keys, 'book', state ? 1 : 0, ...members);
      await redis.evalsha(sha, keys.length, ...keys, 'complete', state ? 1 : 0, ...members);
    }
  };
}

const RULES: readonly Rule[] = [{ limit: 1000, windowMs: 1000 }];
const noop = (): void => {};

function decide(key: string, first: number): DecideOp {
  return {
    type: 'decide',
    namespace: 'floor',
    key,
    cost: 1,
    maxHoldMs: 30_000,
    retainMs: 1000,
    rules: RULES,
    maxDelayMs: Infinity,
    first,
    also: [],
    stay: false,
    graceMs: -1,
    resolve: noop,
    reject: noop,
    tries: 0,
  };
}

function complete(key: string, pairs: readonly number[]): CompleteOp {
  return { type: 'complete', namespace: 'floor', key, pairs, resolve: noop, reject: noop, tries: 0 };
}

const vendorThrottle: Contender = async (redis, calls, run) => {
  const sha = (await redis.script('LOAD', scripts.batch.lua)) as string;
  const namespaceKeys = [`vt${run}:floor:kept`, `vt${run}:floor:mark`];
  await redis.hset(namespaceKeys[1]!, 'm', 0, 'b', 0);
  const send = async (ops: readonly Op[]): Promise<number[]> => {
    const { users, fields } = encodeBatch(groupByKey(ops));
    const keys = batchKeys(keyNameParts(`vt${run}`, 'floor'), users, namespaceKeys).list();
    return (await redis.evalsha(sha, keys.length, ...keys, '', ':t', 'vt:', 0, fields, '1')) as number[];
  };
  for (let sent = 0; sent < calls; sent += BATCH) {
    const decisions = Array.from({ length: BATCH }, (_, i) => decide(`u${(sent + i) % KEYS}`, sent + i));
    const now = (await send(decisions))[1]!;
    await send(decisions.map((d) => complete(d.key, [d.first, now])));
  }
};

/**
 * lua/batch.lua as a store with recovery sends it (the default): under the namespace's epoch (which
 * names this Redis), each key's witness from this process's journal riding on its booking, the
 * log's life set only when it must grow.
 */
const vendorThrottleJournaled: Contender = async (redis, calls, run) => {
  const sha = (await redis.script('LOAD', scripts.batch.lua)) as string;
  const prefix = `vj${run}`;
  const namespaceKeys = [`${prefix}:floor:kept`, `${prefix}:floor:mark`];
  await redis.hset(namespaceKeys[1]!, 'm', 0, 'b', 0);
  const replid = /master_replid:(\w+)/.exec(await redis.info('replication'))![1]!;
  const epoch = `floor${run}@${replid}:0`;
  const epochKey = `${prefix}:floor:epoch`;
  await redis.set(epochKey, epoch);
  const journal = new Journal((number) => `${number}:t`);
  let now = 0;
  const send = async (ops: readonly Op[]): Promise<number[]> => {
    const { users, fields } = encodeBatch(groupByKey(ops), { witness: (key) => journal.witness('floor', key, now) });
    const keys = batchKeys(keyNameParts(prefix, 'floor'), users, [epochKey, ...namespaceKeys]).list();
    return (await redis.evalsha(sha, keys.length, ...keys, epoch, ':t', 'vt:', 3000, fields, '1', '0')) as number[];
  };
  for (let sent = 0; sent < calls; sent += BATCH) {
    const decisions = Array.from({ length: BATCH }, (_, i) => decide(`u${(sent + i) % KEYS}`, sent + i));
    now = (await send(decisions))[1]!;
    for (const d of decisions) journal.book('floor', d.key, d.first, 1, now + d.maxHoldMs, d.retainMs);
    await send(decisions.map((d) => complete(d.key, [d.first, now])));
    for (const d of decisions) journal.settle('floor', d.key, [d.first, now]);
  }
};

const CONTENDERS: ReadonlyArray<[string, Contender]> = [
  ['counter (rate-limiter-flexible: SET NX, INCRBY, PTTL)', counter],
  ['log, 4 commands (ZCARD, ZADD, PEXPIRE; ZADD)', logFloor(false)],
  ['log, 6 commands (and HMGET; HGET)', logFloor(true)],
  ['vendor-throttle (lua/batch.lua, no journal)', vendorThrottle],
  ['vendor-throttle (lua/batch.lua with its journal: the epoch, a witness on each booking)', vendorThrottleJournaled],
];

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

async function main(): Promise<void> {
  const settings = settingsOrUsage(() => parseSettings(process.argv.slice(2)), USAGE);
  if (!settings) return;
  const server = await startRedis();
  const stopCleanUp = cleanUpOnSignal(() => server.stop());
  const redis = new Redis({ port: server.port });
  try {
    const results = CONTENDERS.map(() => ({ script: [] as number[], cpu: [] as number[], commands: [] as number[] }));
    // Warm: each contender once, on keys of its own.
    for (const [, run] of CONTENDERS) await run(redis, 10 * BATCH, -1);
    for (let r = 0; r < settings.runs; r++) {
      for (const [c, [, run]] of CONTENDERS.entries()) {
        const before = await serverSnapshot(redis);
        await run(redis, settings.calls, r);
        const delta = diffServer(before, await serverSnapshot(redis));
        results[c]!.script.push(delta.scriptUsec / settings.calls);
        results[c]!.cpu.push((delta.cpuSeconds * 1e6) / settings.calls);
        results[c]!.commands.push(delta.other / settings.calls);
      }
    }
    console.log(
      `## Redis's own cost per call: ${settings.calls.toLocaleString('en')} calls over ${KEYS.toLocaleString('en')} keys, median of ${settings.runs} runs\n`,
    );
    console.log('| per call | commands inside Redis | µs in scripts | Redis CPU µs | ÷ counter (CPU) |\n| --- | ---: | ---: | ---: | ---: |');
    const base = median(results[0]!.cpu);
    for (const [c, [name]] of CONTENDERS.entries()) {
      const { script, cpu, commands } = results[c]!;
      console.log(
        `| ${name} | ${median(commands).toFixed(1)} | ${median(script).toFixed(2)} | ${median(cpu).toFixed(2)} | ${(median(cpu) / base).toFixed(1)}× |`,
      );
    }
  } finally {
    redis.disconnect();
    await server.stop();
    stopCleanUp();
  }
}

await main();
