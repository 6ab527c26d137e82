/**
 * The soak run shared by `npm run soak` (scripts/soak.ts) and spec/soak.spec.ts: starts its own
 * redis-server on a free port and a simulated vendor with a silent per-user limit, runs the calls in
 * worker processes (scripts/soak/worker.ts) that share the Redis, then watches the workers go idle,
 * close and exit by themselves, and the throttle's keys expire.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { startVendor } from '../sim-vendor.js';
import { startRedis } from '../support/redis-server.js';
import type { SoakOptions, SoakReport, SoakWorkerConfig, SoakWorkerMessage, SoakWorkerReport } from './types.js';

const WORKER_PATH = fileURLToPath(new URL('./worker.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const PREFIX = 'soak';
const NAME = 'vendor';

type MessageOf<T extends SoakWorkerMessage['type']> = Extract<SoakWorkerMessage, { type: T }>;

/** A worker process seen from the parent. */
class WorkerProcess {
  readonly child: ChildProcess;
  readonly stderr: string[] = [];
  readonly exited: Promise<number | string>;
  exitedAt = 0;
  done = 0;
  readonly #messages: SoakWorkerMessage[] = [];
  readonly #arrivedAt: number[] = [];
  readonly #listeners = new Set<() => void>();

  constructor(config: SoakWorkerConfig) {
    this.child = spawn(process.execPath, ['--expose-gc', '--import', 'tsx', WORKER_PATH, JSON.stringify(config)], {
      cwd: ROOT,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    createInterface({ input: this.child.stderr! }).on('line', (line) => this.stderr.push(line));
    createInterface({ input: this.child.stdout! }).on('line', (line) => {
      const message = JSON.parse(line) as SoakWorkerMessage;
      if (message.type === 'progress') this.done = message.done;
      this.#messages.push(message);
      this.#arrivedAt.push(performance.now());
      for (const listener of this.#listeners) listener();
    });
    this.exited = new Promise((resolve) =>
      this.child.once('exit', (code, signal) => {
        this.exitedAt = performance.now();
        resolve(code ?? signal ?? -1);
      }),
    );
  }

  /** The worker's `type` message and when it arrived; rejects if the worker exits without it. */
  message<T extends SoakWorkerMessage['type']>(type: T): Promise<{ message: MessageOf<T>; at: number }> {
    return new Promise((resolve, reject) => {
      const check = (): boolean => {
        const index = this.#messages.findIndex((message) => message.type === type);
        if (index < 0) return false;
        this.#listeners.delete(check);
        resolve({ message: this.#messages[index] as MessageOf<T>, at: this.#arrivedAt[index]! });
        return true;
      };
      if (check()) return;
      this.#listeners.add(check);
      void this.exited.then((code) =>
        // Let the last lines be read before deciding the worker never printed it.
        setImmediate(() => {
          if (check()) return;
          this.#listeners.delete(check);
          reject(new Error(`soak worker ${this.child.pid} exited (${code}) before '${type}'${this.stderr.length > 0 ? `:\n${this.stderr.join('\n')}` : ''}`));
        }),
      );
    });
  }
}

/** A number from `INFO memory`. */
async function memoryInfo(control: Redis, field: string): Promise<number> {
  const text = await control.info('memory');
  return Number(new RegExp(`^${field}:(\\d+)`, 'm').exec(text)?.[1] ?? 0);
}

/** EVALSHA and EVAL calls so far (INFO commandstats). */
async function scriptCalls(control: Redis): Promise<number> {
  const text = await control.info('commandstats');
  let calls = 0;
  for (const match of text.matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm)) calls += Number(match[1]);
  return calls;
}

async function scanKeys(control: Redis): Promise<string[]> {
  const keys: string[] = [];
  for (let cursor = '0'; ;) {
    const [next, batch] = await control.scan(cursor, 'COUNT', 1000);
    keys.push(...batch);
    cursor = next;
    if (cursor === '0') return keys;
  }
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs one soak and reports what it measured. Rejects if a worker fails; never leaves a process or server behind. */
export async function runSoak(options: SoakOptions): Promise<SoakReport> {
  const callsPerKey = Math.max(1, Math.ceil(options.calls / options.keys));
  const server = await startRedis();
  const control = new Redis(server.url);
  const vendor = await startVendor({ limit: options.limit, windowMs: options.windowMs, latencyMs: options.latencyMs });
  const workers: WorkerProcess[] = [];
  let monitor: NodeJS.Timeout | undefined;
  try {
    const usedMemoryBaseline = await memoryInfo(control, 'used_memory');
    // Long enough for every key to be idle: past its window, past maxHoldMs, and past a journal heartbeat (500 ms).
    const idleMs = options.windowMs + options.maxHoldMs + 1_000;
    for (let index = 0; index < options.workers; index++) {
      const mode = options.mode;
      workers.push(
        new WorkerProcess({
          index,
          redisUrl: server.url,
          vendorUrl: vendor.url,
          prefix: PREFIX,
          name: NAME,
          rules: [`${options.limit}/${options.windowMs}ms`],
          mode,
          maxHoldMs: options.maxHoldMs,
          concurrency: options.concurrency,
          calls: options.calls,
          callsPerKey,
          workers: options.workers,
          idleMs,
        }),
      );
    }
    const ready = await Promise.all(workers.map((worker) => worker.message('ready')));
    const scriptsBefore = await scriptCalls(control);
    const started = performance.now();
    for (const worker of workers) worker.child.stdin!.end('go\n');

    let keysPeak = 0;
    let sampling = false;
    monitor = setInterval(() => {
      if (sampling) return;
      sampling = true;
      void Promise.all([memoryInfo(control, 'used_memory'), control.dbsize()])
        .then(([usedMemory, keys]) => {
          keysPeak = Math.max(keysPeak, keys);
          const done = workers.reduce((sum, worker) => sum + worker.done, 0);
          options.onProgress?.({ elapsedMs: performance.now() - started, done, calls: options.calls, redisUsedMemory: usedMemory, redisKeys: keys });
        })
        .catch(() => undefined)
        .finally(() => (sampling = false));
    }, 1_000);

    const done = await Promise.all(workers.map((worker) => worker.message('done')));
    const lastCallAt = Math.max(...done.map(({ at }) => at));
    const durationMs = lastCallAt - started;
    const idle = await Promise.all(workers.map((worker) => worker.message('idle')));
    const closing = await Promise.all(workers.map((worker) => worker.message('closing')));
    const exitCodes = await Promise.all(workers.map((worker) => worker.exited));
    const scriptsPerCall = ((await scriptCalls(control)) - scriptsBefore) / options.calls;

    // The throttle's keys expire by themselves: wait for the per-user ones to be gone. A key lives at
    // most its last start + hold (up to maxHoldMs) + maxHoldMs in flight + the window, plus up to
    // maxHoldMs of slack the scripts add so that later bookings need no PEXPIRE; 15 s more for a
    // loaded machine.
    const deadline = performance.now() + 3 * options.maxHoldMs + options.windowMs + 15_000;
    let keys = await scanKeys(control);
    while (keys.some((key) => key.includes('{')) && performance.now() < deadline) {
      await sleep(250);
      keys = await scanKeys(control);
    }
    const expiredAfterMs = performance.now() - lastCallAt;
    clearInterval(monitor);
    const left = keys.filter((key) => key.includes('{'));
    const userKeysLeftSample = await Promise.all(
      left.slice(0, 5).map(async (key) => {
        const type = await control.type(key);
        const content =
          type === 'zset'
            ? ((await control.call('ZRANGE', key, '0', '5', 'WITHSCORES')) as string[])
            : type === 'hash'
              ? Object.entries(await control.hgetall(key)).flat()
              : [];
        return { key, pttl: await control.pttl(key), content: `${type} ${content.join(' ')}` };
      }),
    );
    const usedMemoryAfterExpiry = await memoryInfo(control, 'used_memory');
    const usedMemoryPeak = await memoryInfo(control, 'used_memory_peak');
    const scriptsMemory = await memoryInfo(control, 'used_memory_scripts_eval');

    const stats = vendor.stats();
    const reports: SoakWorkerReport[] = workers.map((worker, i) => ({
      index: i,
      pid: worker.child.pid!,
      mode: options.mode,
      calls: done[i]!.message.calls,
      errors: done[i]!.message.errors,
      errorSamples: done[i]!.message.errorSamples,
      heapStart: ready[i]!.message.heapUsed,
      heapPeak: done[i]!.message.heapPeak,
      heapAfterIdle: idle[i]!.message.heapUsed,
      idleStats: idle[i]!.message.stats,
      elapsedMs: done[i]!.message.elapsedMs,
      notes: done[i]!.message.notes,
      activeResources: closing[i]!.message.activeResources,
      stuck: closing[i]!.message.stuck,
      exitCode: exitCodes[i]!,
      exitAfterMs: worker.exitedAt - closing[i]!.at,
    }));
    const { onProgress: _onProgress, ...settings } = options;
    return {
      options: settings,
      durationMs,
      received: stats.received,
      dropped: stats.dropped,
      violations: vendor.violations(),
      maxInWindow: vendor.maxInWindow(),
      workers: reports,
      redis: {
        usedMemoryBaseline,
        usedMemoryPeak,
        usedMemoryAfterExpiry,
        scriptsMemory,
        userKeysLeft: left.length,
        userKeysLeftSample,
        keysPeak,
        otherKeys: keys.filter((key) => !key.includes('{')),
        expiredAfterMs,
        scriptsPerCall,
      },
    };
  } finally {
    clearInterval(monitor);
    for (const { child } of workers) {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
    await vendor.close();
    await control.quit().catch(() => undefined);
    await server.stop();
  }
}
