import type { KeyInput, KeysInput } from '../keys.js';
import type { ScheduleOptions, ThrottleEvents } from '../options.js';

/**
 * What the adapters use of a `Throttle`: scheduling a call, pausing a key, reporting an event.
 * Declared here so that the adapters do not import the throttle that imports them.
 */
export interface Scheduler {
  schedule<T>(key: KeysInput, fn: () => T | PromiseLike<T>, options?: ScheduleOptions): Promise<Awaited<T>>;
  pause(key: KeyInput, ms: number, source?: string): Promise<void>;
  notify<E extends keyof ThrottleEvents>(event: E, ...args: ThrottleEvents[E]): void;
}
