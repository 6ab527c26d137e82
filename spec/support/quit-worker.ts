/**
 * A process that ends its own Redis client and forgets `throttle.close()` (spec/client-end.spec.ts):
 *
 *     node --import tsx spec/support/quit-worker.ts '<json QuitWorkerConfig>'
 *
 * Builds a Throttle on a RedisStore with '2/s', so that the third call waits for a completion and
 * the store opens its subscriber connection, and schedules `calls` calls of `callMs` each. Then it
 * ends its client (`quit()` or `disconnect()`): once every call settled, or, with `whileWaiting`,
 * while calls still wait for a slot. It prints `{"type":"ended",...}` as it ends the client, and
 * `{"type":"done",...}` once every call settled. It closes neither the throttle nor the store: a
 * parent checks that it exits by itself.
 *
 * `runQuitWorker()` (exported) runs one from a parent.
 */
import { Redis } from 'ioredis';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { RedisStore, Throttle, type StoreErrorPolicy } from '../../lib/index.js';
import { runAsChild } from '../../scripts/support/child.js';

export interface QuitWorkerConfig {
  readonly redisUrl: string;
  readonly prefix: string;
  /** How the client ends. */
  readonly end: 'quit' | 'disconnect';
  /** End the client while calls still wait for a slot (else once every call settled). */
  readonly whileWaiting: boolean;
  readonly calls: number;
  /** How long each call's `fn` takes. */
  readonly callMs: number;
  readonly onStoreError?: StoreErrorPolicy;
}

export interface QuitWorkerEnded {
  readonly type: 'ended';
  /** The process's subscriber connections (`CLIENT LIST`) just before it ended the client. */
  readonly subscribers: number;
}

export interface QuitWorkerDone {
  readonly type: 'done';
  /** Each call's outcome: 'ran', or its error's class and message. */
  readonly outcomes: string[];
}

async function runQuitWorkerChild(config: QuitWorkerConfig): Promise<void> {
  const print = (message: QuitWorkerEnded | QuitWorkerDone): void => void process.stdout.write(`${JSON.stringify(message)}\n`);
  // The store's subscriber is a duplicate(): it has the same name.
  const name = `quit-worker-${process.pid}`;
  const client = new Redis(config.redisUrl, { connectionName: name });
  const store = new RedisStore(client, { prefix: config.prefix });
  const throttle = new Throttle({ name: 'acme', rules: ['2/s'], store, onStoreError: config.onStoreError });
  const calls = Array.from({ length: config.calls }, () =>
    throttle
      .schedule('u', () => new Promise((resolve) => setTimeout(resolve, config.callMs)))
      .then(
        () => 'ran',
        (error: unknown) => (error instanceof Error ? `${error.name}: ${error.message}` : String(error)),
      ),
  );
  if (config.whileWaiting) {
    // The first two run; the others wait for their completions.
    await new Promise((resolve) => setTimeout(resolve, config.callMs / 2));
    if (throttle.size === 0) throw new Error('no call was waiting');
  } else await Promise.all(calls);
  const list = (await client.call('CLIENT', 'LIST')) as string;
  const subscribers = list.split('\n').filter((line) => line.includes(` name=${name} `) && / sub=[1-9]/.test(line)).length;
  print({ type: 'ended', subscribers });
  if (config.end === 'quit') await client.quit();
  else client.disconnect();
  print({ type: 'done', outcomes: await Promise.all(calls) });
}

/** Path of this file, to run with `node --import tsx`. */
const WORKER_PATH = fileURLToPath(import.meta.url);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export interface QuitWorkerRun {
  readonly ended: QuitWorkerEnded;
  readonly done: QuitWorkerDone;
  /** From its `ended` line to its exit, in ms. */
  readonly exitMs: number;
  readonly code: number | null;
}

/**
 * Runs one worker; resolves once it has exited by itself. Rejects (after killing it, by pid) when it
 * is still running `exitWithinMs` after it ended its client, or `startWithinMs` after it started
 * without ending it.
 */
export async function runQuitWorker(config: QuitWorkerConfig, exitWithinMs: number, startWithinMs = 15_000): Promise<QuitWorkerRun> {
  const child = spawn(process.execPath, ['--import', 'tsx', WORKER_PATH, JSON.stringify(config)], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  const stderr: string[] = [];
  createInterface({ input: child.stderr }).on('line', (line) => stderr.push(line));
  const messages: Array<QuitWorkerEnded | QuitWorkerDone> = [];
  let endedAt: number | undefined;
  let timer: NodeJS.Timeout | undefined;
  const bound = (ms: number, what: string, reject: (error: Error) => void): void => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`worker ${child.pid} ${what}${stderr.length > 0 ? `:\n${stderr.join('\n')}` : ''}`));
    }, ms);
  };
  try {
    const code = await new Promise<number | null>((resolve, reject) => {
      bound(startWithinMs, `did not end its client within ${startWithinMs} ms`, reject);
      createInterface({ input: child.stdout }).on('line', (line) => {
        const message = JSON.parse(line) as QuitWorkerEnded | QuitWorkerDone;
        messages.push(message);
        if (message.type !== 'ended') return;
        endedAt = performance.now();
        bound(exitWithinMs, `still running ${exitWithinMs} ms after it ended its client`, reject);
      });
      child.once('exit', (exitCode) => resolve(exitCode));
    });
    const exitMs = performance.now() - (endedAt ?? Number.NaN);
    const ended = messages.find((message): message is QuitWorkerEnded => message.type === 'ended');
    const done = messages.find((message): message is QuitWorkerDone => message.type === 'done');
    if (!ended || !done) throw new Error(`worker ${child.pid} exited (${code}) before its last line${stderr.length > 0 ? `:\n${stderr.join('\n')}` : ''}`);
    return { ended, done, exitMs, code };
  } finally {
    clearTimeout(timer);
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
}

// No top-level await: spec files import this module (see runAsChild).
runAsChild<QuitWorkerConfig>(import.meta.url, 'quit worker', runQuitWorkerChild);
