/**
 * A worker process for multi-process specs and the demo:
 *
 *     node --import tsx spec/support/worker.ts '<json WorkerConfig>'
 *
 * Builds a Throttle on a RedisStore (its own ioredis client, or node-redis with `client`), pushes `calls` calls per key through
 * `schedule()`, each a GET of the vendor URL with `?user=<key>`, prints ONE JSON line of results
 * (a {@link WorkerResult}) on stdout, closes the throttle and the store, quits the client and exits by itself,
 * with nothing left open.
 *
 * It first makes one uncounted `GET /healthz` (see `warmUp`). With `waitForGo`, it then prints
 * `{"ready":true}` and waits for a line on stdin before releasing its calls, so that a parent can
 * release several workers at the same moment.
 *
 * `spawnWorkers()` (exported) runs several of them from a parent and collects their results.
 *
 * `clockSkewMs` shifts this process's wall clock: `Date.now()` and `performance.timeOrigin` read
 * that much off (monotonic `performance.now()` is untouched, as it is with a real skewed clock).
 * Decisions must not change: the Redis store reads the time with `TIME`. Times in the result are
 * read from the unshifted clock, so the parent can compare them with the vendor's.
 */
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { RedisStore, Throttle, type RedisClientLike, type RuleInput, type StoreErrorPolicy, type ThrottleMode } from '../../lib/index.js';
import { runAsChild, waitForLine } from '../../scripts/support/child.js';

export interface WorkerConfig {
  /** Redis to share the limits through. */
  readonly redisUrl: string;
  /** The simulated vendor (scripts/sim-vendor.ts). */
  readonly vendorUrl: string;
  readonly rules: RuleInput | readonly RuleInput[];
  /** User keys; every key gets `calls` calls. */
  readonly keys: readonly string[];
  /** Calls per key. */
  readonly calls: number;
  /** Throttle name. @default 'vendor' */
  readonly name?: string;
  /** RedisStore prefix, so concurrent runs never share keys. @default 'vt' */
  readonly prefix?: string;
  readonly mode?: ThrottleMode;
  /** @default the throttle's default */
  readonly maxHoldMs?: number;
  /** Shift of this process's wall clock, in ms (e.g. ±300000). @default 0 */
  readonly clockSkewMs?: number;
  /** Print `{"ready":true}` and wait for a line on stdin before starting. @default false */
  readonly waitForGo?: boolean;
  /** Make one uncounted request (`GET /healthz`) first, so fetch is loaded and a connection open. @default true */
  readonly warmUp?: boolean;
  /** The throttle's `onStoreError`. @default 'fail' */
  readonly onStoreError?: StoreErrorPolicy;
  /** RedisStore `commandTimeoutMs`. @default the store's */
  readonly commandTimeoutMs?: number;
  /** RedisStore `recovery`. @default the store's */
  readonly recovery?: false;
  /** The throttle's `bucketAbove` (0 counts every rule with a bucketed log). @default the throttle's */
  readonly bucketAbove?: number;
  /** A key every call also counts in (an app-wide limit), with its own rules. @default none */
  readonly appKey?: string;
  readonly appRules?: RuleInput | readonly RuleInput[];
  /** The Redis client library of this process. @default 'ioredis' */
  readonly client?: 'ioredis' | 'node-redis';
  /** Each response teaches the throttle (`throttle.learn(key, response)`). @default false */
  readonly learn?: boolean;
}

export interface WorkerResult {
  readonly pid: number;
  /** Calls scheduled (keys × calls). */
  readonly scheduled: number;
  /** Per call, in schedule order (key-major interleaved: call j of every key, then call j+1): */
  readonly keys: string[];
  /** when `fn` started (wall-clock ms, unshifted); null if it never ran */
  readonly starts: Array<number | null>;
  /** when the vendor's response was read (wall-clock ms, unshifted); null on error */
  readonly completions: Array<number | null>;
  readonly errors: Array<{ key: string; message: string }>;
  /** The throttle's `maxHoldMs`. */
  readonly maxHoldMs: number;
  /** Date.now() − real wall clock seen in this process at the end (should equal clockSkewMs). */
  readonly observedSkewMs: number;
  /** Release of the calls to the last completion, in ms. */
  readonly elapsedMs: number;
}

const realTimeOrigin = performance.timeOrigin;
/** Unshifted wall clock, sub-ms. */
const now = (): number => realTimeOrigin + performance.now();

function applySkew(skewMs: number): void {
  if (skewMs === 0) return;
  const realDateNow = Date.now.bind(Date);
  Date.now = () => realDateNow() + skewMs;
  Object.defineProperty(performance, 'timeOrigin', { value: realTimeOrigin + skewMs, configurable: true });
}

/** The process's Redis client: `ready` resolves once it answers, `quit` closes it. */
async function connect(config: WorkerConfig): Promise<{ client: RedisClientLike; ready(): Promise<unknown>; quit(): Promise<unknown> }> {
  if (config.client === 'node-redis') {
    const client = createClient({ url: config.redisUrl });
    // Heard while the store is closed (node-redis throws an 'error' nobody listens to); the store reports its own.
    client.on('error', () => undefined);
    await client.connect();
    return { client, ready: () => client.ping(), quit: () => client.close() };
  }
  const client = new Redis(config.redisUrl, { enableAutoPipelining: true });
  return { client, ready: () => client.ping(), quit: () => client.quit() };
}

/** Runs the calls, hands the result to `report`, then closes the throttle and quits the client. */
async function runWorker(config: WorkerConfig, report: (result: WorkerResult) => void): Promise<void> {
  applySkew(config.clockSkewMs ?? 0);
  const redis = await connect(config);
  const store = new RedisStore(redis.client, { prefix: config.prefix ?? 'vt', commandTimeoutMs: config.commandTimeoutMs, recovery: config.recovery });
  const throttle = new Throttle({
    name: config.name ?? 'vendor',
    rules: config.appKey === undefined ? config.rules : (key: string) => (key === config.appKey ? config.appRules! : config.rules),
    store,
    mode: config.mode,
    onStoreError: config.onStoreError,
    bucketAbove: config.bucketAbove,
    maxHoldMs: config.maxHoldMs,
  });
  try {
    await redis.ready();
    if (config.warmUp ?? true) {
      // Loads fetch (undici loads lazily, ~50 ms) and opens a connection; the vendor does not count /healthz.
      await (await fetch(new URL('/healthz', config.vendorUrl))).text();
    }
    if (config.waitForGo) {
      process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
      await waitForLine();
    }

    const keys: string[] = [];
    for (let j = 0; j < config.calls; j++) keys.push(...config.keys);
    const starts: Array<number | null> = keys.map(() => null);
    const completions: Array<number | null> = keys.map(() => null);
    const errors: Array<{ key: string; message: string }> = [];
    const released = now();
    await Promise.all(
      keys.map(async (key, i) => {
        try {
          await throttle.schedule(config.appKey === undefined ? key : [key, config.appKey], async () => {
            starts[i] = now();
            const url = new URL(config.vendorUrl);
            url.searchParams.set('user', key);
            const response = await fetch(url);
            await response.text();
            if (config.learn === true) await throttle.learn(key, response);
            if (!response.ok) throw new Error(`vendor answered ${response.status}`);
            completions[i] = now();
          });
        } catch (error) {
          errors.push({ key, message: error instanceof Error ? `${error.name}: ${error.message}` : String(error) });
        }
      }),
    );
    const finished = Math.max(released, ...completions.map((c) => c ?? 0));
    report({
      pid: process.pid,
      scheduled: keys.length,
      keys,
      starts,
      completions,
      errors,
      maxHoldMs: throttle.maxHoldMs,
      observedSkewMs: Math.round(Date.now() - now()),
      elapsedMs: finished - released,
    });
  } finally {
    await throttle.close();
    // The store is ours, not the throttle's: closing it stops its heartbeat and the subscriber
    // connection it opened (duplicate()) to hear of completions, which would keep the process alive.
    await store.close();
    await redis.quit();
  }
}

/** A worker process started by {@link spawnWorkers}. */
export interface SpawnOptions {
  /** Called with each line the workers write on stderr (default: kept, shown if a worker fails). */
  readonly onStderr?: (line: string, index: number) => void;
  /** Kill every worker and reject if they are not all done after this long. @default 120_000 */
  readonly timeoutMs?: number;
}

/** Path of this file, to run with `node --import tsx`. */
export const WORKER_PATH = fileURLToPath(import.meta.url);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/**
 * Starts one worker per config, waits until all are ready, releases them at the same moment (one
 * line on each stdin) and resolves with their results, in config order, once every worker has
 * exited by itself. Rejects (and kills the workers it started, by pid) if one fails or hangs.
 */
export async function spawnWorkers(configs: readonly WorkerConfig[], options: SpawnOptions = {}): Promise<WorkerResult[]> {
  const children = configs.map((config, index) => {
    const child = spawn(process.execPath, ['--import', 'tsx', WORKER_PATH, JSON.stringify({ ...config, waitForGo: true })], {
      cwd: ROOT,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const stderr: string[] = [];
    createInterface({ input: child.stderr! }).on('line', (line) => {
      stderr.push(line);
      options.onStderr?.(line, index);
    });
    const lines: string[] = [];
    let onLine: (() => void) | undefined;
    createInterface({ input: child.stdout! }).on('line', (line) => {
      lines.push(line);
      onLine?.();
    });
    const exited = new Promise<number | string>((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal ?? -1)));
    const fail = (what: string): Error => new Error(`worker ${index} (pid ${child.pid}) ${what}${stderr.length > 0 ? `:\n${stderr.join('\n')}` : ''}`);
    const line = (n: number): Promise<string> =>
      new Promise((resolve, reject) => {
        const check = (): void => {
          if (lines.length > n) resolve(lines[n]!);
        };
        onLine = check;
        check();
        void exited.then((code) => {
          // Let the last stdout lines be read before deciding the worker said nothing.
          setImmediate(() => (lines.length > n ? resolve(lines[n]!) : reject(fail(`exited (${code}) without output line ${n + 1}`))));
        });
      });
    return { child, exited, line, fail };
  });
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`workers not done after ${options.timeoutMs ?? 120_000} ms`)), options.timeoutMs ?? 120_000);
  });
  try {
    return await Promise.race([
      timeout,
      (async () => {
        await Promise.all(children.map((worker) => worker.line(0)));
        for (const { child } of children) child.stdin!.end('go\n');
        const results = await Promise.all(children.map(async (worker) => JSON.parse(await worker.line(1)) as WorkerResult));
        const codes = await Promise.all(children.map((worker) => worker.exited));
        codes.forEach((code, index) => {
          if (code !== 0) throw children[index]!.fail(`exited with ${code}`);
        });
        return results;
      })(),
    ]);
  } finally {
    clearTimeout(timer);
    for (const { child } of children) {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  }
}

// No top-level await: spec files import this module (see runAsChild).
runAsChild<WorkerConfig>(import.meta.url, 'worker', (config) => runWorker(config, (result) => process.stdout.write(`${JSON.stringify(result)}\n`)));
