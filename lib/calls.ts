import { checkCount, checkDelay, checkKnown } from './validate.js';
import { LEARNED, PAUSED, RECOVERING } from './slot-plan.js';
import type { Call, CallKey } from './store-client.js';
import { RateLimitedError, ThrottleConfigError, type WaitReason } from './errors.js';
import { encodeKey, normalizeKey, type KeyInput, type KeysInput } from './keys.js';
import { SCHEDULE_OPTIONS, type ScheduleOptions } from './options.js';
import type { RuleSource } from './rule-source.js';
import { describe, longestWindow, type Rule } from './rules.js';
import type { ReserveResult } from './store.js';

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
 * is a `ThrottleConfigError` before anything is asked or booked. `keys` may name
 * several keys (a per-user and an app-wide limit): the call counts in each, once (a key named twice
 * counts once), whatever their order.
 */
export function prepareCall(defaults: CallDefaults, keys: KeysInput, options: ScheduleOptions | undefined): Call | Promise<Call> {
  const userKeys = callKeys(keys);
  // No options (the usual call): the throttle's defaults, with nothing to check.
  const checked = options === undefined ? defaultsOf(defaults) : checkOptions(defaults, options);
  // Fixed rules (the usual case) come back at once: the call is prepared without a promise.
  const sources = userKeys.map((userKey) => defaults.rules(userKey));
  for (const rules of sources) {
    if (rules instanceof Promise) return Promise.all(sources).then((all) => callOf(defaults, userKeys, all, checked));
  }
  return callOf(defaults, userKeys, sources as ReadonlyArray<readonly Rule[]>, checked);
}

/** What a call without options gets, worked out once per throttle. */
const defaultCalls = new WeakMap<CallDefaults, Checked>();

function defaultsOf(defaults: CallDefaults): Checked {
  let checked = defaultCalls.get(defaults);
  if (checked === undefined) {
    checked = { cost: 1, maxDelayMs: defaults.mode === 'throw' ? 0 : defaults.maxDelayMs, timeoutMs: defaults.timeoutMs, priority: 0, signal: undefined };
    defaultCalls.set(defaults, checked);
  }
  return checked;
}

function checkOptions(defaults: CallDefaults, options: ScheduleOptions): Checked {
  if (options === null || typeof options !== 'object') {
    throw new ThrottleConfigError(`Expected schedule options to be an object, got ${describe(options)}`, 'options');
  }
  checkKnown('schedule', options, SCHEDULE_OPTIONS);
  const cost = checkCount('cost', options.cost ?? 1);
  const requested = options.maxDelayMs === undefined ? defaults.maxDelayMs : checkDelay('maxDelayMs', options.maxDelayMs);
  const maxDelayMs = defaults.mode === 'throw' ? 0 : requested;
  const timeoutMs = options.timeoutMs === undefined ? defaults.timeoutMs : checkDelay('timeoutMs', options.timeoutMs);
  const priority = options.priority ?? 0;
  if (typeof priority !== 'number' || !Number.isFinite(priority)) {
    throw new ThrottleConfigError(`Expected priority to be a finite number, got ${describe(priority)}`, 'priority');
  }
  const signal = options.signal;
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new ThrottleConfigError(`Expected signal to be an AbortSignal, got ${describe(signal)}`, 'signal');
  }
  return { cost, maxDelayMs, timeoutMs, priority, signal };
}

/** A call's options, checked. */
interface Checked {
  readonly cost: number;
  readonly maxDelayMs: number;
  readonly timeoutMs: number;
  readonly priority: number;
  readonly signal: AbortSignal | undefined;
}

/** What a rule set implies, worked out once per set (fixed rules: once per throttle). */
interface RuleFacts {
  readonly least: number;
  readonly longest: number;
}

const ruleFacts = new WeakMap<readonly Rule[], RuleFacts>();

function factsOf(rules: readonly Rule[]): RuleFacts {
  let facts = ruleFacts.get(rules);
  if (facts === undefined) {
    facts = { least: Math.min(...rules.map((rule) => rule.limit)), longest: longestWindow(rules) };
    ruleFacts.set(rules, facts);
  }
  return facts;
}

function callOf(defaults: CallDefaults, userKeys: readonly string[], keyRules: ReadonlyArray<readonly Rule[]>, checked: Checked): Call {
  const { cost, maxDelayMs, timeoutMs, priority, signal } = checked;
  // An array of the parts' number (an empty one that grows reserves room for 17).
  const parts = userKeys.map((userKey, i): CallKey => {
    const rules = keyRules[i]!;
    const { least, longest } = factsOf(rules);
    if (cost > least) {
      throw new ThrottleConfigError(`Expected cost to be at most ${least} (the smallest limit of key "${userKey}"), got ${cost}`, 'cost');
    }
    return { key: userKey, encoded: encodeKey(userKey), rules, retainMs: Math.max(longest, defaults.retainMs) };
  });
  let smallest = Infinity;
  for (const part of parts) smallest = Math.min(smallest, factsOf(part.rules).least);
  const first = parts[0]!;
  const also = parts.length === 1 ? NO_PARTS : parts.slice(1);
  const deadline = performance.now() + maxDelayMs;
  // A call of several keys shares its keys with other lines (a user's and the app's): a line asks
  // for one call at a time beyond the head, so that the lines that wait on a shared key take turns.
  const room = also.length === 0 ? Math.floor(smallest / cost) : 1;
  // One line per set of keys, whatever their order.
  const line =
    also.length === 0
      ? first.encoded
      : parts
          .map((part) => part.encoded)
          .sort()
          .join(' ');
  // Written out, not spread: one object shape for every call keeps property reads fast downstream.
  return {
    key: first.key,
    encoded: first.encoded,
    rules: first.rules,
    retainMs: first.retainMs,
    also,
    line,
    cost,
    room,
    maxDelayMs,
    deadline,
    priority,
    timeoutMs,
    signal,
  };
}

const NO_PARTS: readonly CallKey[] = [];

/** The call's keys, normalized, each once, in the order given. */
function callKeys(keys: unknown): string[] {
  if (!Array.isArray(keys)) return [normalizeKey(keys)];
  if (keys.length === 1) return [normalizeKey(keys[0])];
  if (keys.length === 0) throw new ThrottleConfigError('Expected at least one key, got an empty list', 'key');
  const seen = new Set<string>();
  for (const key of keys) seen.add(normalizeKey(key));
  return [...seen];
}

/** `inspect()` and `pause()` take one key. */
export function oneKey(what: string, key: KeyInput): KeyInput {
  if (Array.isArray(key)) throw new ThrottleConfigError(`Expected ${what}() to be given one key, got a list`, 'key');
  return key;
}

/**
 * The priority of an HTTP adapter's retry of a request the vendor refused: the highest, and the
 * throttle lets such calls go out first when a vendor pause ends.
 */
export const RETRY_PRIORITY = Number.MAX_VALUE;

/** The tightest spacing of the call's rules (window ÷ limit, ms): one slot's room at a steady pace. */
export function spacingOf(call: Call): number {
  let spacing = Infinity;
  for (const part of [call, ...call.also]) for (const rule of part.rules) spacing = Math.min(spacing, rule.windowMs / rule.limit);
  return Number.isFinite(spacing) ? spacing : 0;
}

/** The encoded keys a call counts in. */
export function keysOf(call: Call): string[] {
  return call.also.length === 0 ? [call.encoded] : [call.encoded, ...call.also.map((part) => part.encoded)];
}

/** The rule at `index` of the call's rules, counted on from key to key (`ReserveResult.ruleIndex`), and its user key. */
export function ruleAt(call: Call, index: number): { readonly key: string; readonly rule: Rule } {
  let at = index;
  for (const part of [call, ...call.also]) {
    if (at < part.rules.length) return { key: part.key, rule: part.rules[at]! };
    at -= part.rules.length;
  }
  throw new RangeError(`No rule ${index} in the call's rules`);
}

/** Why the store put the call's start where it did: a rule, a pause, a hold after a loss, or calls booked before it. */
export function reasonOf(call: Call, result: ReserveResult): WaitReason {
  if (result.ruleIndex >= 0) return ruleAt(call, result.ruleIndex).rule;
  return result.ruleIndex === PAUSED ? 'paused' : result.ruleIndex === RECOVERING ? 'recovering' : result.ruleIndex === LEARNED ? 'learned' : 'booked';
}

/** The user key whose rule the store named (the call's first key when none did). */
export function bindingKey(call: Call, result: ReserveResult): string {
  return result.ruleIndex >= 0 ? ruleAt(call, result.ruleIndex).key : call.key;
}

/** The refusal of a call: named after the key whose rule binds. */
export function limitedError(call: Call, result: ReserveResult, waitMs: number): RateLimitedError {
  return new RateLimitedError(bindingKey(call, result), reasonOf(call, result), waitMs);
}

/** The `also` of an event: the other keys of a call of several, none for a call of one key. */
export function alsoOf(call: Call): { also?: readonly string[] } {
  return call.also.length === 0 ? {} : { also: call.also.map((part) => part.key) };
}
