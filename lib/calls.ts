import { checkCount, checkDelay, checkKnown } from './check.js';
import type { Call } from './decisions.js';
import { ThrottleConfigError } from './errors.js';
import { encodeKey, normalizeKey, type KeyInput } from './keys.js';
import { SCHEDULE_OPTIONS, type ScheduleOptions } from './options.js';
import type { RuleSource } from './rule-source.js';
import { describe, longestWindow } from './rules.js';

/** What a throttle gives each call unless the call's options say otherwise. */
export interface CallDefaults {
  readonly mode: 'wait' | 'throw';
  readonly maxDelayMs: number;
  readonly timeoutMs: number;
  /** History kept per key at least (the longest window of the call's rules, if longer, wins). */
  readonly retainMs: number;
  readonly rules: RuleSource;
}

/**
 * One call of `schedule()`, `inspect()` or `pause()`, checked at the boundary: a bad key or option
 * is a `TypeError` or `ThrottleConfigError` before anything is asked or booked.
 */
export async function prepareCall(defaults: CallDefaults, key: KeyInput, options: ScheduleOptions): Promise<Call> {
  const userKey = normalizeKey(key);
  if (options === null || typeof options !== 'object') {
    throw new TypeError(`Expected schedule options to be an object, got ${describe(options)}`);
  }
  checkKnown('schedule', options, SCHEDULE_OPTIONS);
  const cost = checkCount('cost', options.cost ?? 1);
  const requested = options.maxDelayMs === undefined ? defaults.maxDelayMs : checkDelay('maxDelayMs', options.maxDelayMs);
  const maxDelayMs = defaults.mode === 'throw' ? 0 : requested;
  const timeoutMs = options.timeoutMs === undefined ? defaults.timeoutMs : checkDelay('timeoutMs', options.timeoutMs);
  const priority = options.priority ?? 0;
  if (typeof priority !== 'number' || !Number.isFinite(priority)) {
    throw new ThrottleConfigError(`Expected priority to be a finite number, got ${describe(priority)}`);
  }
  const signal = options.signal;
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new TypeError(`Expected signal to be an AbortSignal, got ${describe(signal)}`);
  }
  const rules = await defaults.rules(userKey);
  const smallest = Math.min(...rules.map((rule) => rule.limit));
  if (cost > smallest) {
    throw new ThrottleConfigError(`Expected cost to be at most ${smallest} (the smallest limit of key "${userKey}"), got ${cost}`);
  }
  const retainMs = Math.max(longestWindow(rules), defaults.retainMs);
  const deadline = performance.now() + maxDelayMs;
  const room = Math.floor(smallest / cost);
  return { key: userKey, encoded: encodeKey(userKey), rules, retainMs, cost, room, maxDelayMs, deadline, priority, timeoutMs, signal };
}
