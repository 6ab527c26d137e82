import { CALL_FAILED } from '../call-life.js';
import { RETRY_PRIORITY } from '../calls.js';
import { ThrottleConfigError } from '../errors.js';
import type { KeyInput, KeysInput } from '../keys.js';
import type { ScheduleOptions } from '../options.js';
import { describe } from '../rules.js';
import { argumentOf } from '../validate.js';
import { internalsOf, type Scheduler } from './scheduler.js';
import { readVendorSignal, type HeaderSource } from '../vendor-signals.js';
import type { VendorSignalOptions } from './options.js';

/** `VendorSignalOptions` with every default filled in, validated. */
export interface VendorSettings<R> {
  readonly retries: number;
  readonly isThrottled: ((response: R) => boolean | PromiseLike<boolean>) | undefined;
  readonly fallbackPauseMs: number;
  readonly maxRetryAfterMs: number;
  readonly maxPauseMs: number;
  readonly learn: boolean;
}

/** Validates the vendor-signal options of an adapter (`what`: `'axios'`, `'fetch'`) and fills in the defaults. */
export function vendorSettings<R>(options: VendorSignalOptions<R>, what: string): VendorSettings<R> {
  const { isThrottled } = options;
  if (isThrottled !== undefined && typeof isThrottled !== 'function') {
    throw new ThrottleConfigError(`Expected ${what} option isThrottled to be a function, got ${describe(isThrottled)}`, 'isThrottled');
  }
  return {
    retries: checkRetries(options.retries ?? 2, `${what} option retries`),
    isThrottled,
    fallbackPauseMs: checkMs(options.fallbackPauseMs ?? 1_000, `${what} option fallbackPauseMs`, false),
    maxRetryAfterMs: checkMs(options.maxRetryAfterMs ?? 60_000, `${what} option maxRetryAfterMs`, true),
    maxPauseMs: checkMs(options.maxPauseMs ?? 86_400_000, `${what} option maxPauseMs`, false),
    learn: checkFlag(options.learn ?? true, `${what} option learn`),
  };
}

export function checkRetries(value: unknown, what: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) {
    throw new ThrottleConfigError(`Expected ${what} to be a whole number from 0 up, got ${describe(value)}`, argumentOf(what));
  }
  return value;
}

function checkFlag(value: unknown, what: string): boolean {
  if (typeof value !== 'boolean') throw new ThrottleConfigError(`Expected ${what} to be true or false, got ${describe(value)}`, argumentOf(what));
  return value;
}

function checkMs(value: unknown, what: string, infinite: boolean): number {
  if (typeof value !== 'number' || Number.isNaN(value) || value < 0 || (!infinite && !Number.isFinite(value))) {
    throw new ThrottleConfigError(
      `Expected ${what} to be a number of ms from 0 up${infinite ? ' (Infinity allowed)' : ''}, got ${describe(value)}`,
      argumentOf(what),
    );
  }
  return value;
}

/** An attempt's outcome and what its answer said: refused, and the pause asked for. */
interface Reaction<R> {
  readonly outcome: Outcome<R>;
  readonly answer: { readonly status: number; readonly headers: HeaderSource } | undefined;
  readonly refused: boolean;
  readonly pauseMs: number | undefined;
}

/** What one attempt gave: the client's value, or what it threw. */
export type Outcome<R> = { readonly ok: true; readonly value: R } | { readonly ok: false; readonly error: unknown; readonly [CALL_FAILED]: unknown };

/** How one client sends a request and shows its answer; the rest is `sendThrottled`'s. */
export interface Exchange<R> {
  /** Sends the request once (attempt 0, then each retry). Runs inside the slot. */
  send(attempt: number): Promise<R>;
  /** Status and headers of the vendor's answer in `outcome`; `undefined` when there is none (a network error). */
  answer(outcome: Outcome<R>): { readonly status: number; readonly headers: HeaderSource } | undefined;
  /** Runs the user's `isThrottled` on the answer (called only when the option is set and there is an answer). */
  flagged(outcome: Outcome<R>): Promise<boolean>;
  /** False when the request cannot be sent again (a streamed body): a refusal is then not retried. */
  readonly replayable: boolean;
  /** Frees an answer that is given up for a retry (a fetch body). */
  discard?(outcome: Outcome<R>): void;
}

export interface ThrottledRequest {
  /** The request's key, or keys (a vendor pause applies to the first). */
  readonly key: KeysInput;
  readonly schedule: ScheduleOptions;
  readonly retries: number;
  /** `'axios'`, `'fetch'`: the start of the `paused` event's `source` and of `debug` messages. */
  readonly client: string;
}

/**
 * Sends a request through the throttle and listens to the vendor's answer: when it says its limit
 * was hit, pauses the key for every process sharing the store (`throttle.pause()`, the store's clock)
 * for as long as the vendor asks, and sends the request again through `throttle.schedule()` — a new
 * slot, never around the throttle — up to `retries` times. Resolves or rejects as the client did on
 * the last attempt that was sent.
 *
 * The first attempt's refusal by the throttle (`RateLimitedError`, …) rejects as is, nothing sent. A
 * retry the throttle refuses is not sent, and the vendor's last answer comes back instead (an abort
 * still rejects with its reason).
 */
export async function sendThrottled<R>(throttle: Scheduler, request: ThrottledRequest, settings: VendorSettings<R>, exchange: Exchange<R>): Promise<R> {
  const first = Array.isArray(request.key) ? (request.key as readonly unknown[])[0] : request.key;
  const key = String(first);
  const debug = (message: string, error?: unknown): void =>
    internalsOf(throttle).notify(
      'debug',
      error === undefined ? { message: `${request.client}: ${message}`, key } : { message: `${request.client}: ${message}`, key, error },
    );
  /** What the attempt's answer says, read within the attempt's span (never throws). */
  const react = async (outcome: Outcome<R>, attempt: number, defer: (work: Promise<unknown>) => void): Promise<Reaction<R>> => {
    const answer = exchange.answer(outcome);
    if (answer === undefined) return { outcome, answer, refused: false, pauseMs: undefined };
    let flagged = false;
    if (settings.isThrottled !== undefined) {
      try {
        flagged = await exchange.flagged(outcome);
      } catch (error) {
        debug('isThrottled threw; the response counts as not refused', error);
      }
    }
    const signal = readVendorSignal({ status: answer.status, headers: answer.headers, flagged, report: (problem) => debug(problem) });
    if (settings.learn) {
      const learning = throttle
        .learn(first as KeyInput, { ...answer, flagged })
        .catch((error: unknown) => debug('could not learn the vendor limits in the store', error));
      // A refusal's lesson is in the store before the retry asks for its slot; any other answer
      // comes back without waiting for it (the call's span waits).
      if (signal.refused) await learning;
      else defer(learning);
    }
    let pauseMs = signal.pauseMs ?? (signal.refused ? settings.fallbackPauseMs * 2 ** attempt : undefined);
    if (pauseMs !== undefined && pauseMs > settings.maxPauseMs) {
      debug(`vendor pause of ${pauseMs} ms cut to maxPauseMs (${settings.maxPauseMs} ms)`);
      pauseMs = settings.maxPauseMs;
    }
    if (pauseMs !== undefined && pauseMs > 0) {
      try {
        await throttle.pause(first as KeyInput, pauseMs, `${request.client} ${flagged ? 'isThrottled' : answer.status}`);
      } catch (error) {
        debug('could not pause the key in the store', error);
      }
    }
    return { outcome, answer, refused: signal.refused, pauseMs };
  };
  const internals = internalsOf(throttle);
  let last: Outcome<R> | undefined;
  for (let attempt = 0; ; attempt++) {
    let reaction: Reaction<R>;
    try {
      reaction = await internals.schedule(
        request.key,
        () => attemptOnce(exchange, attempt),
        attempt === 0 ? request.schedule : retryOptions(request.schedule),
        attempt > 0,
        (outcome, defer) => react(outcome, attempt, defer),
      );
    } catch (error) {
      if (last === undefined || request.schedule.signal?.aborted) throw error;
      debug(`retry ${attempt} was not sent (${error instanceof Error ? error.message : String(error)}); returning the vendor's last answer`, error);
      return settle(last);
    }
    const { outcome, answer, refused, pauseMs } = reaction;
    last = outcome;
    if (answer === undefined || !refused) return settle(outcome);
    if (attempt >= request.retries) {
      debug(`refused by the vendor; no retries left (${request.retries})`);
      return settle(outcome);
    }
    if (!exchange.replayable) {
      debug('refused by the vendor; not retried: the request body is a stream and cannot be sent again');
      return settle(outcome);
    }
    if (pauseMs !== undefined && pauseMs > settings.maxRetryAfterMs) {
      debug(`refused by the vendor for ${pauseMs} ms, more than maxRetryAfterMs (${settings.maxRetryAfterMs} ms); not retried`);
      return settle(outcome);
    }
    exchange.discard?.(outcome);
    internals.notify('retried', {
      key,
      client: request.client,
      attempt: attempt + 1,
      status: answer.status,
      ...(pauseMs === undefined ? {} : { pauseMs }),
    });
  }
}

/**
 * A retry waits ahead of this process's calls of the key that were never sent (highest priority):
 * the vendor refused it once already, and it must get its turn within its retries.
 */
function retryOptions(options: ScheduleOptions): ScheduleOptions {
  return { ...options, priority: RETRY_PRIORITY };
}

/** Sends once; the client's failure becomes an outcome, so that `schedule()` rejects only for the throttle's own reasons. */
async function attemptOnce<R>(exchange: Exchange<R>, attempt: number): Promise<Outcome<R>> {
  try {
    return { ok: true, value: await exchange.send(attempt) };
  } catch (error) {
    // Reported as a failed call (lib/call-life.ts), though schedule() resolves with it.
    return { ok: false, error, [CALL_FAILED]: error };
  }
}

function settle<R>(outcome: Outcome<R>): R {
  if (outcome.ok) return outcome.value;
  throw outcome.error;
}
