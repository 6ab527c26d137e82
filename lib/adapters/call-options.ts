import { checkKnown } from '../validate.js';
import { ThrottleConfigError } from '../errors.js';
import type { ScheduleOptions } from '../options.js';
import { describe } from '../rules.js';
import type { CallOptions, PerCall } from './options.js';

const PER_CALL = ['cost', 'maxDelayMs', 'priority'] as const;

/** The vendor-signal options of the axios and fetch adapters (`VendorSignalOptions`). */
export const VENDOR_SIGNAL_OPTIONS = ['retries', 'isThrottled', 'fallbackPauseMs', 'maxRetryAfterMs', 'maxPauseMs', 'learn'] as const;

/**
 * Checks the adapter-level parts every adapter shares: an options object whose every name is one of
 * `known` (besides `key` and the per-call values), a `key` function, per-call values.
 */
export function checkCallOptions(options: unknown, what: string, known: readonly string[]): void {
  if (options === null || typeof options !== 'object') {
    throw new ThrottleConfigError(`Expected ${what} options to be an object, got ${describe(options)}`, 'options');
  }
  checkKnown(what, options, ['key', ...PER_CALL, ...known]);
  const { key } = options as { key?: unknown };
  if (typeof key !== 'function') throw new ThrottleConfigError(`Expected ${what} option key to be a function, got ${describe(key)}`, 'key');
  for (const name of PER_CALL) {
    const value = (options as Record<string, unknown>)[name];
    if (value !== undefined && typeof value !== 'number' && typeof value !== 'function') {
      throw new ThrottleConfigError(`Expected ${what} option ${name} to be a number or a function, got ${describe(value)}`, name);
    }
  }
}

/** The schedule options of one call: each per-call option fixed or picked from the call's arguments (validated by `schedule()`). */
export function pickCallOptions<A extends readonly unknown[]>(options: CallOptions<A>, args: A): { cost?: number; maxDelayMs?: number; priority?: number } {
  return { cost: pick(options.cost, args), maxDelayMs: pick(options.maxDelayMs, args), priority: pick(options.priority, args) };
}

function pick<A extends readonly unknown[], T>(value: PerCall<A, T> | undefined, args: A): T | undefined {
  return typeof value === 'function' ? (value as (...args: A) => T)(...args) : value;
}

/** The parts of an abort signal other libraries hand out (axios' `GenericAbortSignal`, polyfills). */
export interface SignalLike {
  readonly aborted: boolean;
  readonly reason?: unknown;
  addEventListener?: (type: 'abort', listener: () => void, options?: { once?: boolean }) => unknown;
  removeEventListener?: (type: 'abort', listener: () => void) => unknown;
}

/**
 * A real `AbortSignal` following `signals` (any of them aborting aborts it), for `schedule()`, and a
 * function that stops listening. Signals that are not `AbortSignal`s are followed through
 * `addEventListener` when they have it.
 */
export function followSignals(signals: ReadonlyArray<SignalLike | null | undefined>): { signal: ScheduleOptions['signal']; stop: () => void } {
  const native: AbortSignal[] = [];
  const stops: Array<() => void> = [];
  for (const signal of signals) {
    if (signal === null || signal === undefined) continue;
    if (signal instanceof AbortSignal) {
      native.push(signal);
      continue;
    }
    const controller = new AbortController();
    const onAbort = (): void => controller.abort(signal.reason);
    if (signal.aborted) onAbort();
    else if (typeof signal.addEventListener === 'function') {
      signal.addEventListener('abort', onAbort, { once: true });
      stops.push(() => signal.removeEventListener?.('abort', onAbort));
    }
    native.push(controller.signal);
  }
  const signal = native.length === 0 ? undefined : native.length === 1 ? native[0] : AbortSignal.any(native);
  return { signal, stop: () => stops.forEach((stop) => stop()) };
}
