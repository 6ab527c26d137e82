import type { Booking, Call } from './decisions.js';
import { RateLimitedError, type WaitReason } from './errors.js';
import { MAX_TIMER_MS } from './sleep.js';
import type { ReserveResult } from './store.js';
import type { KeyLine, Outcome, Waiter } from './waiting.js';

/** What a call waiting in line needs from its throttle. */
export interface WaiterHooks {
  /** Why a slot is not free: the rule the store named, a vendor pause, or the calls booked before. */
  reason(result: ReserveResult): WaitReason;
  /** The `RateLimitedError` for a call the store refused, or that ran out of time after `result`. */
  limited(result: ReserveResult, retryAfterMs: number): RateLimitedError;
  /** The window of the rule the store named (1 when none). */
  windowOf(result: ReserveResult): number;
  /** The store refused the call: remember it for the calls after it. */
  refused(result: ReserveResult, booking: Booking): void;
  /** A slot was booked for a call that had already left the line: give it back. */
  release(result: ReserveResult, booking: Booking): void;
  /** The store's failure, while it has not answered since (onStoreError 'wait'). */
  failure(): Error | undefined;
}

/**
 * Puts `call` in `line` and resolves once the store books its slot; rejects when the store refuses
 * it, when its `maxDelayMs` runs out in line (`RateLimitedError`, or the store's failure), or with
 * its signal's reason when aborted. Nothing is left booked for a call that rejects. `first`: the
 * call asked before every call in line (it was deferred when asked alone), so it goes ahead of them.
 */
export function waitInLine(
  line: KeyLine<Call>,
  call: Call,
  hooks: WaiterHooks,
  first = false,
): Promise<{ readonly result: ReserveResult; readonly booking: Booking }> {
  return new Promise((resolve, reject) => {
    let last: { readonly result: ReserveResult; readonly at: number } | undefined;
    let timer: NodeJS.Timeout | undefined;
    let done = false;
    const finish = (): void => {
      done = true;
      clearTimeout(timer);
      call.signal?.removeEventListener('abort', onAbort);
    };
    const onAbort = function (this: AbortSignal): void {
      if (line.remove(waiter)) {
        finish();
        reject(this.reason);
      }
    };
    const waiter: Waiter<Call> = {
      call,
      priority: call.priority,
      cost: call.cost,
      room: call.room,
      narrow: call.also.length > 0,
      settle: (outcome: Outcome) => {
        if (done) {
          // Left the line (aborted, out of time) while its slot was being booked: give it back.
          if ('result' in outcome && outcome.result.status === 'booked') hooks.release(outcome.result, outcome.extra as Booking);
          return;
        }
        finish();
        if ('error' in outcome) return reject(outcome.error);
        const { result } = outcome;
        const booking = outcome.extra as Booking;
        last = { result, at: performance.now() };
        if (result.status === 'booked') return resolve({ result, booking });
        hooks.refused(result, booking);
        reject(hooks.limited(result, result.waitMs));
      },
      deferred: (result) => {
        last = { result, at: performance.now() };
      },
    };
    if (call.deadline - performance.now() <= MAX_TIMER_MS && call.maxDelayMs > 0) {
      // maxDelayMs bounds the whole wait: a call still in line when it runs out leaves it.
      timer = setTimeout(
        () => {
          if (!line.remove(waiter)) return;
          finish();
          const failure = hooks.failure();
          if (failure && !last) return reject(failure);
          // No slot before the store's answer, nor (a call it waits for may still be in flight)
          // before one window of the rule it named.
          const window = last ? hooks.windowOf(last.result) : 1;
          const leftMs = last ? Math.max(last.result.waitMs - (performance.now() - last.at), last.result.status === 'deferred' ? window : 1) : 0;
          const retryAfterMs = Math.max(1, Math.ceil(leftMs));
          reject(last ? hooks.limited(last.result, retryAfterMs) : new RateLimitedError(call.key, 'booked', retryAfterMs));
        },
        Math.max(0, call.deadline - performance.now()),
      );
    }
    // close() clears every line itself: only the call's own signal is listened to here (a listener
    // per waiting call on the throttle's signal would make each removal scan all of them).
    call.signal?.addEventListener('abort', onAbort, { once: true });
    line.add(waiter, first);
  });
}
