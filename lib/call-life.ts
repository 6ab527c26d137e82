import { alsoOf } from './calls.js';
import type { Call } from './store-client.js';
import { QueueFullError, RateLimitedError } from './errors.js';
import type { CallEvent, ThrottleEvents } from './options.js';

/**
 * A value `fn` resolved with that still reports a failed call: the HTTP adapters resolve with the
 * client's error (so that `schedule()` rejects only for the throttle's reasons) under this key.
 */
export const CALL_FAILED: unique symbol = Symbol('vendor-throttle: the call failed');

/** What a call's life is reported to: the throttle's events. */
export interface LifeEvents {
  listenerCount(event: keyof ThrottleEvents): number;
  notify<E extends keyof ThrottleEvents>(event: E, ...args: ThrottleEvents[E]): void;
}

/** The events of a call's life (`queued` … `completed`): a throttle that none of them is listened to skips the reporting. */
export const LIFE_EVENTS: ReadonlyArray<keyof ThrottleEvents> = ['queued', 'started', 'granted', 'completed', 'failed', 'refused'];

/**
 * The events of one call's life, with their timings: `queued` when it is accepted, then `refused`,
 * or `started` (and `granted`, its alias) and then `completed` or `failed`; `failed` with
 * `ran: false` when it ends without running otherwise (aborted, closed, the store failed). Made only
 * when someone listens to one of them: an event object is built only for an event listened to.
 */
export class CallLife {
  readonly #events: LifeEvents;
  readonly #event: CallEvent;
  readonly #queuedAt = performance.now();
  #waitedMs = 0;
  #startedAt = 0;

  constructor(events: LifeEvents, call: Call) {
    this.#events = events;
    this.#event = { key: call.key, cost: call.cost, ...alsoOf(call) };
    if (events.listenerCount('queued') > 0) events.notify('queued', this.#event);
  }

  /** The call got no slot: `refused` when it was turned away, else `failed` with `ran: false`. */
  notStarted(error: unknown): void {
    if (error instanceof RateLimitedError || error instanceof QueueFullError) this.refused(error);
    else this.ended(error);
  }

  /** The call's `fn` resolved with `value`: `completed`, or `failed` when an HTTP adapter says the client failed. */
  ran(value: unknown): void {
    const failure = typeof value === 'object' && value !== null && CALL_FAILED in value ? (value as { [CALL_FAILED]: unknown })[CALL_FAILED] : undefined;
    if (failure === undefined) this.completed();
    else this.threw(failure);
  }

  /** The call's `fn` threw or timed out. */
  threw(error: unknown): void {
    if (this.#events.listenerCount('failed') === 0) return;
    this.#events.notify('failed', { ...this.#event, waitedMs: this.#waitedMs, durationMs: performance.now() - this.#startedAt, error, ran: true });
  }

  /** The call ends without running for another reason than a refusal: aborted, closed, the store failed. */
  ended(error: unknown): void {
    if (this.#events.listenerCount('failed') === 0) return;
    this.#events.notify('failed', { ...this.#event, waitedMs: performance.now() - this.#queuedAt, durationMs: 0, error, ran: false });
  }

  refused(error: RateLimitedError | QueueFullError): void {
    if (this.#events.listenerCount('refused') === 0) return;
    this.#events.notify('refused', { ...this.#event, error });
  }

  started(): void {
    this.#startedAt = performance.now();
    this.#waitedMs = this.#startedAt - this.#queuedAt;
    if (this.#events.listenerCount('granted') + this.#events.listenerCount('started') === 0) return;
    const started = { ...this.#event, waitedMs: this.#waitedMs };
    this.#events.notify('granted', started);
    this.#events.notify('started', started);
  }

  completed(): void {
    if (this.#events.listenerCount('completed') === 0) return;
    this.#events.notify('completed', { ...this.#event, waitedMs: this.#waitedMs, durationMs: performance.now() - this.#startedAt });
  }
}
