import { setMaxListeners } from 'node:events';
import type { Throttle } from '../index.js';
import type { SendSettings } from './args.js';
import type { BatchRequest } from './input.js';
import type { ResultLine } from './results.js';
import { createSender, type StopSignals } from './send.js';

export interface BatchOutcome {
  /** Requests sent (each has a result, handed to `onResult`). */
  readonly done: number;
  /** The error that stopped the run early (the store failed, a result could not be written). */
  readonly fatal: unknown;
}

/**
 * Sends `requests` through `throttle`, `settings.concurrency` at a time, and hands each result to
 * `onResult` as it comes. Requests are taken one key after the other (the first request of every
 * key, then the second, …), so that a key with many requests does not hold every worker while
 * the others could go. Stops starting requests when `signals.stop` fires or on a fatal error; the
 * requests already sent finish and are handed over before it resolves.
 */
export async function runBatch(
  throttle: Throttle,
  requests: readonly BatchRequest[],
  settings: SendSettings,
  signals: StopSignals,
  onResult: (result: ResultLine) => void,
): Promise<BatchOutcome> {
  const stopping = new AbortController();
  // Every request waiting for a slot listens to these: their number is the concurrency, not a leak.
  setMaxListeners(0, stopping.signal, signals.abort);
  const stop = (): void => stopping.abort(signals.stop.reason);
  if (signals.stop.aborted) stop();
  else signals.stop.addEventListener('abort', stop, { once: true });
  let fatal: unknown;
  const fail = (error: unknown): void => {
    fatal ??= error;
    stopping.abort(error);
  };

  const send = createSender(throttle, settings, { stop: stopping.signal, abort: signals.abort });
  const order = interleave(requests);
  let next = 0;
  let done = 0;
  const runner = async (): Promise<void> => {
    while (!stopping.signal.aborted && next < order.length) {
      const sent = await send(order[next++]!);
      if (sent.result !== undefined) {
        done += 1;
        try {
          onResult(sent.result);
        } catch (error) {
          fail(error);
        }
      }
      if (sent.fatal !== undefined) fail(sent.fatal);
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.min(settings.concurrency, order.length) }, runner));
  } finally {
    signals.stop.removeEventListener('abort', stop);
  }
  return { done, fatal };
}

/** Round robin over keys, each key's requests in file order. */
export function interleave(requests: readonly BatchRequest[]): BatchRequest[] {
  const byKey = new Map<string, BatchRequest[]>();
  for (const request of requests) {
    const list = byKey.get(request.key);
    if (list === undefined) byKey.set(request.key, [request]);
    else list.push(request);
  }
  let lists = [...byKey.values()];
  const order: BatchRequest[] = [];
  for (let round = 0; lists.length > 0; round++) {
    for (const list of lists) order.push(list[round]!);
    lists = lists.filter((list) => list.length > round + 1);
  }
  return order;
}
