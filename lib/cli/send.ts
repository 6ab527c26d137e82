import { formatRule, RateLimitedError, StoreUnavailableError, type Throttle } from '../index.js';
import { sleep } from '../time.js';
import { readVendorSignal } from '../vendor-signals.js';
import type { SendSettings } from './args.js';
import { errorText } from './errors.js';
import type { BatchRequest } from './input.js';
import type { ResultLine } from './results.js';

/** How a run is told to stop. */
export interface StopSignals {
  /** First SIGINT/SIGTERM (or a fatal error): start nothing new; requests waiting for a slot or a retry give up. */
  readonly stop: AbortSignal;
  /** Second SIGINT/SIGTERM: requests in flight are cancelled too (and recorded as interrupted). */
  readonly abort: AbortSignal;
}

/** What sending one request gave: its result line (none when it was never sent), and an error that ends the run. */
export interface Sent {
  readonly result: ResultLine | undefined;
  readonly fatal?: unknown;
}

export type Sender = (request: BatchRequest) => Promise<Sent>;

/** The vendor's answer to one attempt, body read. */
interface Answer {
  readonly status: number;
  readonly headers: Headers;
  readonly text: string;
  readonly startedAt: number;
  readonly ms: number;
}

/** One attempt that got no answer. */
class NoAnswer extends Error {
  constructor(
    message: string,
    readonly startedAt: number,
    readonly ms: number,
    readonly retryable: boolean,
  ) {
    super(message);
  }
}

/** What `throttle.fetch()` passes to the fetch below: the request and its throttle key. */
interface SendInit {
  readonly key: string;
  /** More keys the request counts in. */
  readonly also: readonly string[];
  readonly cost: number;
  readonly method: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string | undefined;
  /** Cancels the wait for a slot (the throttle's fetch adapter follows `init.signal`), never a request in flight. */
  readonly signal: AbortSignal;
}

/** Longest wait between two retries after a 5xx or a network error. */
const MAX_RETRY_DELAY_MS = 30_000;

const INTERRUPTED = 'interrupted while in flight (second SIGINT/SIGTERM): the vendor may have received it';

/**
 * Sends requests through `throttle.fetch()`: each attempt waits for its slot, a vendor's refusal (a
 * 429, or a 403/503 with `Retry-After` or rate-limit headers saying the limit is used up) pauses the
 * key for every process sharing the store, and `retries` more attempts follow a refusal, a 5xx or a
 * network error, each through the throttle again (after `fallbackPauseMs`, doubled each time, for a 5xx
 * or a network error).
 *
 * With `maxDelayMs`, every attempt — a retry after a 429 too, whose wait includes the vendor's pause
 * — waits at most that long for its slot (the throttle's `maxDelayMs`). One that would wait longer
 * is not sent: the result says `refused` and when the slot would have come (`retryAfterMs`), with the
 * last answer if there was one; `--resume` sends such a request again.
 *
 * A request whose first slot wait is cut short by `stop` was never sent: no result. A request that
 * was sent at least once, or refused, always gets a result: its last answer, or why there was none.
 */
export function createSender(throttle: Throttle, settings: SendSettings, signals: StopSignals): Sender {
  const send = throttle.fetch({
    key: (_url: string, init: SendInit) => (init.also.length === 0 ? init.key : [init.key, ...init.also]),
    cost: (_url: string, init: SendInit) => init.cost,
    maxDelayMs: settings.maxDelayMs,
    retries: 0,
    fallbackPauseMs: settings.fallbackPauseMs,
    fetch: (url: string, init: SendInit) => attempt(url, init, settings.timeoutMs, signals.abort),
  });

  return async (request) => {
    let last: Answer | NoAnswer | undefined;
    let attempts = 0;
    let fatal: unknown;
    let refusal: RateLimitedError | undefined;
    for (let n = 0; n <= settings.retries; n++) {
      if (n > 0 && last !== undefined && backsOff(last)) {
        try {
          await sleep(Math.min(MAX_RETRY_DELAY_MS, settings.fallbackPauseMs * 2 ** (n - 1)), [signals.stop]);
        } catch {
          break;
        }
      }
      try {
        last = await send(request.url, {
          key: request.key,
          also: request.also,
          cost: request.cost,
          method: request.method,
          headers: request.headers,
          body: request.body,
          signal: signals.stop,
        });
      } catch (error) {
        if (error instanceof NoAnswer) last = error;
        else if (error instanceof RateLimitedError) {
          // No slot within --max-delay-ms: not sent this time.
          refusal = error;
          break;
        } else {
          // The throttle did not send it: stopped while waiting for the slot, or the store failed.
          if (error instanceof StoreUnavailableError || !signals.stop.aborted) fatal = error;
          break;
        }
      }
      attempts = n + 1;
      if (!shouldRetry(last)) break;
    }
    if (refusal !== undefined) return { result: refusedResult(request, last, attempts, refusal, settings), fatal };
    if (last === undefined) return { result: undefined, fatal };
    return { result: resultOf(request, last, attempts, settings.keepBody), fatal };
  };
}

/** An attempt the throttle refused (`--max-delay-ms`): the last answer, if any, and why the next one was not sent. */
function refusedResult(
  request: BatchRequest,
  last: Answer | NoAnswer | undefined,
  attempts: number,
  refusal: RateLimitedError,
  settings: SendSettings,
): ResultLine {
  const why =
    refusal.reason === 'paused'
      ? 'the key is paused (a vendor rate-limit answer)'
      : refusal.reason === 'recovering'
        ? 'Redis lost data and the processes put their calls back first'
        : refusal.reason === 'booked'
          ? 'calls booked before it for the key come first'
          : `rule ${formatRule(refusal.rule!)} is full`;
  const base: ResultLine =
    last === undefined
      ? { id: request.id, key: request.key, status: null, startedAt: null, ms: null, attempts: 0 }
      : resultOf(request, last, attempts, settings.keepBody);
  return { ...base, refused: `no slot within --max-delay-ms (${settings.maxDelayMs} ms): ${why}`, retryAfterMs: refusal.retryAfterMs };
}

/** A 5xx or no answer: wait before the next attempt (a 429 waits for the pause it set on the key instead). */
function backsOff(last: Answer | NoAnswer): boolean {
  return last instanceof NoAnswer || last.status >= 500;
}

function shouldRetry(last: Answer | NoAnswer): boolean {
  if (last instanceof NoAnswer) return last.retryable;
  // A refusal by the vendor's rules (a 429, or a 403 or 503 with Retry-After or a used-up limit, as
  // GitHub answers) is sent again once the pause it set on the key is over, as the adapters do.
  return last.status >= 500 || readVendorSignal({ status: last.status, headers: last.headers }).refused;
}

/** One attempt, inside its slot: sends, reads the whole body, gives up after `timeoutMs` or when `abort` fires. */
async function attempt(url: string, init: SendInit, timeoutMs: number, abort: AbortSignal): Promise<Answer> {
  const startedAt = Date.now();
  const began = performance.now();
  const timeout = AbortSignal.timeout(timeoutMs);
  try {
    const response = await fetch(url, { method: init.method, headers: init.headers, body: init.body, signal: AbortSignal.any([abort, timeout]) });
    const text = await response.text();
    return { status: response.status, headers: response.headers, text, startedAt, ms: performance.now() - began };
  } catch (error) {
    const ms = performance.now() - began;
    if (abort.aborted) throw new NoAnswer(INTERRUPTED, startedAt, ms, false);
    if (timeout.aborted) throw new NoAnswer(`timed out after ${timeoutMs} ms`, startedAt, ms, true);
    throw new NoAnswer(errorText(error), startedAt, ms, true);
  }
}

function resultOf(request: BatchRequest, last: Answer | NoAnswer, attempts: number, keepBody: boolean): ResultLine {
  const status = last instanceof NoAnswer ? null : last.status;
  const result = { id: request.id, key: request.key, status, startedAt: new Date(last.startedAt).toISOString(), ms: Math.round(last.ms * 10) / 10, attempts };
  if (last instanceof NoAnswer) return { ...result, error: last.message };
  return keepBody ? { ...result, body: bodyOf(last) } : result;
}

/** JSON bodies parsed, anything else as text. */
function bodyOf(answer: Answer): unknown {
  if (/json/i.test(answer.headers.get('content-type') ?? '')) {
    try {
      return JSON.parse(answer.text);
    } catch {
      // Not JSON after all: keep the text.
    }
  }
  return answer.text;
}
