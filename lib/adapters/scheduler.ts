import { ThrottleConfigError } from '../errors.js';
import { describe } from '../rules.js';
import type { KeyInput, KeysInput } from '../keys.js';
import type { ScheduleOptions, ThrottleEvents } from '../options.js';
import type { HeaderSource } from '../vendor-signals.js';

/**
 * What the adapters use of a `Throttle`'s public API: scheduling a call, pausing a key. Declared
 * here so that the adapters do not import the throttle that imports them.
 */
export interface Scheduler {
  schedule<T>(key: KeysInput, fn: () => T | PromiseLike<T>, options?: ScheduleOptions): Promise<Awaited<T>>;
  pause(key: KeyInput, ms: number, source?: string): Promise<void>;
  learn(key: KeyInput, response: { readonly status: number; readonly headers: HeaderSource; readonly flagged?: boolean }): Promise<void>;
}

/** What the adapters reach of a throttle beyond its public API; each throttle registers its own. */
export interface ThrottleInternals {
  /** Emits an event; a listener's error is thrown again on its own (a microtask), never into the caller. */
  notify<E extends keyof ThrottleEvents>(event: E, ...args: ThrottleEvents[E]): void;
  /**
   * `schedule()`, with `then` (what the adapter does with the answer: never throws) run once the
   * call's completion is written and before its span ends (work it passes to `defer` keeps the span
   * open without keeping the caller waiting), and `retry`: a request sent again after the vendor
   * refused it (a span attribute).
   */
  schedule<T, U>(
    key: KeysInput,
    fn: () => T | PromiseLike<T>,
    options: ScheduleOptions | undefined,
    retry: boolean,
    then: (value: Awaited<T>, defer: (work: Promise<unknown>) => void) => Promise<U>,
  ): Promise<U>;
  /** The shortest window of `key`'s rules, ms (0 for a key under caps on calls in flight alone). */
  shortestWindow(key: KeyInput): Promise<number>;
}

const registered = new WeakMap<object, ThrottleInternals>();

/** Called by a throttle as it is made. */
export function registerInternals(throttle: object, internals: ThrottleInternals): void {
  registered.set(throttle, internals);
}

/** The internals of a throttle made by this library. */
export function internalsOf(throttle: object): ThrottleInternals {
  const internals = registered.get(throttle);
  if (internals === undefined) throw new ThrottleConfigError(`Expected a Throttle made by vendor-throttle, got ${describe(throttle)}`, 'throttle');
  return internals;
}
