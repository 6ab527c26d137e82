/**
 * A worker process for the fault specs (spec/faults.spec.ts), one that a parent may `kill -9`:
 *
 *     node --import tsx spec/support/fault-worker.ts '<json FaultWorkerConfig>'
 *
 * Builds a Throttle on a RedisStore (its own ioredis client), prints `{"type":"ready"}`, waits for a
 * line on stdin, then releases `calls` calls on one key at once, each a GET of the vendor URL with
 * `?user=<key>`. While they run it prints a `progress` line whenever its local state changes (calls
 * started, sleeping for a booked slot, queued), so that a parent can kill it while it holds booked
 * slots and queued work. At the end it prints one `done` line, closes the throttle and the store, quits the client
 * and exits by itself.
 *
 * `startFaultWorker()` (exported) runs one from a parent.
 */
import { Redis } from 'ioredis';
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { RedisStore, Throttle, type RuleInput, type ThrottleMode } from '../../lib/index.js';
import { runAsChild, waitForLine } from '../../scripts/support/child.js';

export interface FaultWorkerConfig {
  readonly redisUrl: string;
  /** The simulated vendor (scripts/sim-vendor.ts). */
  readonly vendorUrl: string;
  readonly prefix: string;
  readonly name: string;
  readonly rules: readonly RuleInput[];
  readonly mode: ThrottleMode;
  readonly maxHoldMs: number;
  readonly key: string;
  readonly calls: number;
  /**
   * Once its calls have completed some and sleep until slots booked ahead, blocks its event loop for
   * this many ms (a stalled process: no timer, no stamp, no answer read). @default none
   */
  readonly stallMs?: number;
  /**
   * Once its calls have completed some and sleep until slots booked ahead, kills itself (SIGKILL) the
   * first time it has calls asleep this many ms later, its last `progress` line printed first. It
   * dies in the state the spec needs however late its parent would read the lines. @default never
   */
  readonly dieAsleepAfterMs?: number;
}

/** What the worker has locally, as its `progress` lines report it. */
export interface FaultWorkerProgress {
  readonly type: 'progress';
  /** Calls whose `fn` has started. */
  readonly started: number;
  /** Calls whose response was read. */
  readonly completed: number;
  /** Calls sleeping until a slot they booked (`throttle.stats.sleeping`). */
  readonly sleeping: number;
  /** Calls waiting in the local queue, not booking yet (`throttle.stats.queued`). */
  readonly queued: number;
}

export interface FaultWorkerDone {
  readonly type: 'done';
  /** When each `fn` started (wall-clock ms); the run's calls in any order. */
  readonly starts: number[];
  /** When each response was read (wall-clock ms). */
  readonly completions: number[];
  readonly errors: string[];
  /** The throttle's `debug` messages. */
  readonly debug: string[];
}

type Message = { readonly type: 'ready' } | { readonly type: 'stalled'; readonly ms: number } | FaultWorkerProgress | FaultWorkerDone;

const now = (): number => performance.timeOrigin + performance.now();

function print(message: Message): void {
  process.stdout.write(`${JSON.stringify(message)}\n`);
}

async function runWorker(config: FaultWorkerConfig): Promise<void> {
  const redis = new Redis(config.redisUrl);
  const store = new RedisStore(redis, { prefix: config.prefix });
  const throttle = new Throttle({
    name: config.name,
    rules: config.rules,
    store,
    mode: config.mode,
    maxHoldMs: config.maxHoldMs,
  });
  let progress: NodeJS.Timeout | undefined;
  try {
    await redis.ping();
    // Loads fetch and opens a connection; the vendor does not count /healthz.
    await (await fetch(new URL('/healthz', config.vendorUrl))).text();
    print({ type: 'ready' });
    await waitForLine();

    const starts: number[] = [];
    const completions: number[] = [];
    const errors: string[] = [];
    const debug: string[] = [];
    throttle.on('debug', ({ message }) => debug.push(message));
    let stall = config.stallMs ?? 0;
    let firstAsleep: number | undefined;
    let last = '';
    const report = (): void => {
      const { sleeping, queued } = throttle.stats;
      const asleep = sleeping > 0 && completions.length > 0;
      if (asleep) firstAsleep ??= performance.now();
      if (stall > 0 && asleep) {
        print({ type: 'stalled', ms: stall });
        const until = performance.now() + stall;
        stall = 0;
        while (performance.now() < until);
      }
      const line = `${starts.length}/${completions.length}/${sleeping}/${queued}`;
      const dies = asleep && config.dieAsleepAfterMs !== undefined && performance.now() - firstAsleep! >= config.dieAsleepAfterMs;
      if (line !== last || dies) print({ type: 'progress', started: starts.length, completed: completions.length, sleeping, queued });
      last = line;
      // Writes to a pipe are synchronous: the parent reads the line above before the exit.
      if (dies) process.kill(process.pid, 'SIGKILL');
    };
    progress = setInterval(report, 2);
    const url = new URL(config.vendorUrl);
    url.searchParams.set('user', config.key);
    await Promise.all(
      Array.from({ length: config.calls }, () =>
        throttle
          .schedule(config.key, async () => {
            starts.push(now());
            report();
            const response = await fetch(url);
            await response.text();
            completions.push(now());
            report();
          })
          .catch((error: unknown) => {
            errors.push(error instanceof Error ? `${error.name}: ${error.message}` : String(error));
          }),
      ),
    );
    clearInterval(progress);
    print({ type: 'done', starts, completions, errors, debug });
  } finally {
    clearInterval(progress);
    await throttle.close();
    // The store is ours: closing it stops its subscriber connection, which would keep the process alive.
    await store.close();
    await redis.quit();
  }
}

/** A fault worker running under a parent. */
export interface FaultWorker {
  readonly child: ChildProcess;
  /** Every message printed so far. */
  readonly messages: Message[];
  /** Resolves with the first message (printed so far or later) that `match` accepts; rejects if the worker exits first. */
  waitFor<M extends Message>(match: (message: Message) => message is M): Promise<M>;
  waitFor(match: (message: Message) => boolean): Promise<Message>;
  /** Releases the calls. */
  go(): void;
  /** Resolves with the exit code, or the signal that ended the worker. */
  readonly exited: Promise<number | string>;
  /** Lines the worker wrote on stderr. */
  readonly stderr: string[];
}

/** Path of this file, to run with `node --import tsx`. */
export const FAULT_WORKER_PATH = fileURLToPath(import.meta.url);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** Starts one fault worker; it prints `ready` and waits for `go()`. */
export function startFaultWorker(config: FaultWorkerConfig): FaultWorker {
  const child = spawn(process.execPath, ['--import', 'tsx', FAULT_WORKER_PATH, JSON.stringify(config)], {
    cwd: ROOT,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const messages: Message[] = [];
  const stderr: string[] = [];
  const listeners = new Set<() => void>();
  createInterface({ input: child.stderr! }).on('line', (line) => stderr.push(line));
  createInterface({ input: child.stdout! }).on('line', (line) => {
    messages.push(JSON.parse(line) as Message);
    for (const listener of listeners) listener();
  });
  const exited = new Promise<number | string>((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal ?? -1)));
  const waitFor = (match: (message: Message) => boolean): Promise<Message> =>
    new Promise((resolve, reject) => {
      const check = (): void => {
        const found = messages.find(match);
        if (found) {
          listeners.delete(check);
          resolve(found);
        }
      };
      listeners.add(check);
      check();
      void exited.then((code) =>
        // Let the last stdout lines be read before deciding the worker never said it.
        setImmediate(() => {
          check();
          if (listeners.delete(check)) {
            reject(new Error(`fault worker ${child.pid} exited (${code}) first${stderr.length > 0 ? `:\n${stderr.join('\n')}` : ''}`));
          }
        }),
      );
    });
  return {
    child,
    messages,
    waitFor: waitFor as FaultWorker['waitFor'],
    go: () => child.stdin!.end('go\n'),
    exited,
    stderr,
  };
}

// No top-level await: spec files import this module (see runAsChild).
runAsChild<FaultWorkerConfig>(import.meta.url, 'fault worker', runWorker);
