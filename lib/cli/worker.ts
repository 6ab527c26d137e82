/**
 * One worker process of `vendor-throttle run --workers N` (started by workers.ts with `fork`):
 * receives its share of the requests, sends them through its own throttle, and reports each result
 * to the parent, which writes the results file. Stops on the parent's `stop` (or its own
 * SIGINT/SIGTERM), cancels requests in flight on `abort` (or a second signal), and cancels
 * everything when the parent goes away.
 */
import { runBatch } from './batch.js';
import { CliError, errorText } from './errors.js';
import { openThrottle } from './setup.js';
import type { FromWorker, ToWorker } from './workers.js';

const stop = new AbortController();
const abort = new AbortController();
let level = 0;

function escalate(to: 1 | 2): void {
  if (to >= 1) stop.abort(new Error('stopped'));
  if (to >= 2) abort.abort(new Error('aborted'));
  level = Math.max(level, to);
}

/** Sends a message and resolves once it is handed to the channel (so that nothing is lost on exit). */
function tell(message: FromWorker): Promise<void> {
  return new Promise((resolve) => {
    if (!process.connected) return resolve();
    process.send!(message, undefined, {}, () => resolve());
  });
}

async function work(start: Extract<ToWorker, { type: 'start' }>): Promise<void> {
  let fatal: string | undefined;
  const sends: Array<Promise<void>> = [];
  try {
    const opened = await openThrottle(start.throttle, start.send, start.recent);
    try {
      const outcome = await runBatch(opened.throttle, start.requests, start.send, { stop: stop.signal, abort: abort.signal }, (result) => {
        sends.push(tell({ type: 'result', result }));
      });
      if (outcome.fatal !== undefined) fatal = outcome.fatal instanceof CliError ? outcome.fatal.message : `the run stopped: ${errorText(outcome.fatal)}`;
    } finally {
      await opened.close();
    }
  } catch (error) {
    fatal = error instanceof CliError ? error.message : `worker ${process.pid}: ${errorText(error)}`;
  }
  await Promise.all(sends);
  await tell(fatal === undefined ? { type: 'done' } : { type: 'done', fatal });
  process.disconnect();
}

process.on('message', (message: ToWorker) => {
  if (message.type === 'start') void work(message);
  else if (message.type === 'stop') escalate(1);
  else if (message.type === 'abort') escalate(2);
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => escalate(level === 0 ? 1 : 2));
// The parent is gone: nobody can record results any more.
process.on('disconnect', () => escalate(2));
