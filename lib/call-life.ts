import { alsoOf } from './calls.js';
import type { Call } from './decisions.js';
import { QueueFullError, RateLimitedError } from './errors.js';
import type { CallEvent, ThrottleEvents } from './options.js';

type Notify = <E extends keyof ThrottleEvents>(event: E, ...args: ThrottleEvents[E]) => void;

/**
 * A value `fn` resolved with that still reports a failed call: the HTTP adapters resolve with the
 * client's error (so that `schedule()` rejects only for the throttle's reasons) under this key.
 */
export const CALL_FAILED: unique symbol = Symbol('vendor-throttle: the call failed');

/**
 * The events of one call's life, with their timings: `queued` when it is accepted, then `refused`,
 * or `started` (and `granted`, its earlier name) and then `completed` or `failed`; `failed` with
 * `ran: false` when it ends without running otherwise (aborted, closed, the store failed).
 */
export class CallLife {
  readonly #notify: Notify;
  readonly #event: CallEvent;
  readonly #queuedAt = performance.now();
  #waitedMs = 0;
  #startedAt = 0;

  constructor(notify: Notify, call: Call) {
    this.#notify = notify;
    this.#event = { key: call.key, cost: call.cost, ...alsoOf(call) };
    notify('queued', this.#event);
  }

  /** The wait for the call's slot: `refused` when it is turned away, `started` when its slot comes. */
  async waiting<G>(slot: Promise<G>): Promise<G> {
    let grant: G;
    try {
      grant = await slot;
    } catch (error) {
      if (error instanceof RateLimitedError || error instanceof QueueFullError) this.refused(error);
      else this.ended(error);
      throw error;
    }
    this.started();
    return grant;
  }

  /** The call's `fn` running: `completed` when it resolves, `failed` when it throws or times out. */
  async running<T>(run: Promise<T>): Promise<T> {
    let value: T;
    try {
      value = await run;
    } catch (error) {
      this.#failed(error);
      throw error;
    }
    const failure = typeof value === 'object' && value !== null && CALL_FAILED in value ? (value as { [CALL_FAILED]: unknown })[CALL_FAILED] : undefined;
    if (failure === undefined) this.completed();
    else this.#failed(failure);
    return value;
  }

  #failed(error: unknown): void {
    this.#notify('failed', { ...this.#event, waitedMs: this.#waitedMs, durationMs: performance.now() - this.#startedAt, error, ran: true });
  }

  /** The call ends without running for another reason than a refusal: aborted, closed, the store failed. */
  ended(error: unknown): void {
    this.#notify('failed', { ...this.#event, waitedMs: performance.now() - this.#queuedAt, durationMs: 0, error, ran: false });
  }

  refused(error: RateLimitedError | QueueFullError): void {
    this.#notify('refused', { ...this.#event, error });
  }

  started(): void {
    this.#startedAt = performance.now();
    this.#waitedMs = this.#startedAt - this.#queuedAt;
    const started = { ...this.#event, waitedMs: this.#waitedMs };
    this.#notify('granted', started);
    this.#notify('started', started);
  }

  completed(): void {
    this.#notify('completed', { ...this.#event, waitedMs: this.#waitedMs, durationMs: performance.now() - this.#startedAt });
  }
}
