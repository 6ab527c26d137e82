import { fork, type ChildProcess } from 'node:child_process';
import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { SendSettings, ThrottleConfig } from './args.js';
import type { BatchOutcome } from './batch.js';
import { CliError, EXIT } from './errors.js';
import type { BatchRequest } from './input.js';
import type { ResultLine } from './results.js';
import type { StopSignals } from './send.js';
import type { RecentCall } from './setup.js';

/** Parent → worker. */
export type ToWorker =
  | {
      readonly type: 'start';
      readonly throttle: ThrottleConfig;
      readonly send: SendSettings;
      readonly requests: readonly BatchRequest[];
      readonly recent: readonly RecentCall[];
    }
  | { readonly type: 'stop' }
  | { readonly type: 'abort' };

/** Worker → parent. `done` comes last, after every result. */
export type FromWorker = { readonly type: 'result'; readonly result: ResultLine } | { readonly type: 'done'; readonly fatal?: string };

/** The worker entry next to this file: `worker.js` once built, `worker.ts` under tsx. */
const WORKER_PATH = fileURLToPath(new URL(`./worker${extname(fileURLToPath(import.meta.url))}`, import.meta.url));

/**
 * Splits `requests` over `count` worker processes by key — every request of a key goes to the same
 * worker, so a key's calls stay in one process and its limits hold even without Redis — balancing
 * the number of requests per worker. Each worker runs its share with its own throttle (and Redis
 * client) and `settings.concurrency`; results come back here, in the order they finish, through
 * `onResult`. `signals` are passed on: `stop`, then `abort`. Workers run in their own process
 * group, so a Ctrl-C reaches this process only, which tells them.
 */
export async function runWorkers(
  count: number,
  requests: readonly BatchRequest[],
  throttle: ThrottleConfig,
  send: SendSettings,
  recent: readonly RecentCall[],
  signals: StopSignals,
  onResult: (result: ResultLine) => void,
): Promise<BatchOutcome> {
  const shares = splitByKey(requests, count).filter((share) => share.length > 0);
  let done = 0;
  let fatal: unknown;
  const children: ChildProcess[] = [];
  const tellAll = (message: ToWorker): void => {
    for (const child of children) if (child.connected) child.send(message, () => undefined);
  };
  const fail = (error: unknown): void => {
    fatal ??= error;
    tellAll({ type: 'stop' });
  };
  const onStop = (): void => tellAll({ type: 'stop' });
  const onAbort = (): void => tellAll({ type: 'abort' });
  signals.stop.addEventListener('abort', onStop, { once: true });
  signals.abort.addEventListener('abort', onAbort, { once: true });

  const runs = shares.map(
    (share, index) =>
      new Promise<void>((resolve) => {
        const child = fork(WORKER_PATH, [], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'], detached: true });
        children.push(child);
        let finished = false;
        child.on('message', (message: FromWorker) => {
          if (message.type === 'result') {
            done += 1;
            try {
              onResult(message.result);
            } catch (error) {
              fail(error);
            }
          } else if (message.type === 'done') {
            finished = true;
            if (message.fatal !== undefined) fail(new CliError(message.fatal, EXIT.fatal));
          }
        });
        child.on('error', (error) => {
          fail(new CliError(`worker ${index + 1} failed: ${error.message}`, EXIT.fatal));
          // A process that could not start emits no 'exit'.
          if (child.pid === undefined) resolve();
        });
        child.on('exit', (code, signal) => {
          if (!finished) {
            fail(
              new CliError(
                `worker ${index + 1} (pid ${child.pid}) exited (${signal ?? code}) before it finished; its requests in flight are not recorded and may be sent again by --resume`,
                EXIT.fatal,
              ),
            );
          }
          resolve();
        });
        const keys = recentOf(share, recent);
        child.send({ type: 'start', throttle, send, requests: share, recent: keys } satisfies ToWorker);
        if (signals.stop.aborted) child.send({ type: 'stop' } satisfies ToWorker);
      }),
  );
  try {
    await Promise.all(runs);
  } finally {
    signals.stop.removeEventListener('abort', onStop);
    signals.abort.removeEventListener('abort', onAbort);
  }
  return { done, fatal };
}

/** Keys to workers, biggest key first to the least loaded worker. */
export function splitByKey(requests: readonly BatchRequest[], count: number): BatchRequest[][] {
  const byKey = new Map<string, BatchRequest[]>();
  for (const request of requests) {
    const list = byKey.get(request.key);
    if (list === undefined) byKey.set(request.key, [request]);
    else list.push(request);
  }
  const shares: BatchRequest[][] = Array.from({ length: count }, () => []);
  for (const list of [...byKey.values()].sort((a, b) => b.length - a.length)) {
    let least = shares[0]!;
    for (const share of shares) if (share.length < least.length) least = share;
    least.push(...list);
  }
  // Back to file order within each worker.
  for (const share of shares) share.sort((a, b) => a.line - b.line);
  return shares;
}

function recentOf(share: readonly BatchRequest[], recent: readonly RecentCall[]): RecentCall[] {
  if (recent.length === 0) return [];
  const keys = new Set(share.map((request) => request.key));
  return recent.filter((call) => keys.has(call.key));
}
