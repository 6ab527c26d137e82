import { checkCount, checkDelay, checkKnown, checkWhole } from './validate.js';
import { ThrottleConfigError } from './errors.js';
import { checkNamespace } from './keys.js';
import { THROTTLE_OPTIONS, type StoreErrorPolicy, type ThrottleOptions } from './options.js';
import { compileRules, type RuleSource } from './rule-source.js';
import { describe, MAX_WINDOW_MS } from './rules.js';
import type { Store } from './store.js';

/** `maxHoldMs` unless `timeoutMs` asks for more: a request to a vendor is over by then. */
export const DEFAULT_MAX_HOLD_MS = 10_000;

/** `ThrottleOptions` checked, with every default filled in. */
export interface ThrottleSettings {
  readonly name: string;
  readonly mode: 'wait' | 'throw';
  readonly rules: RuleSource;
  readonly store: Store | undefined;
  readonly maxDelayMs: number;
  readonly timeoutMs: number;
  readonly maxHoldMs: number;
  readonly retainMs: number;
  readonly maxQueued: number;
  readonly onStoreError: StoreErrorPolicy;
  readonly localShare: number;
}

const POLICIES: readonly StoreErrorPolicy[] = ['fail', 'wait', 'local'];

/**
 * Rules above this limit are bucketed by default. An exact log is trimmed once it holds twice its
 * limit plus 32 slots (lua/batch.lua): up to 48 that stays within Redis's 128-entry compact
 * encoding of a sorted set (about 26 bytes a slot); above it, about 100 bytes a slot.
 */
const DEFAULT_BUCKET_ABOVE = 48;

/** Checks `new Throttle()`'s options: a `ThrottleConfigError` that says what was expected, or the settings. */
export function throttleSettings(options: ThrottleOptions): ThrottleSettings {
  if (options === null || typeof options !== 'object') {
    throw new ThrottleConfigError(`Expected Throttle options to be an object, got ${describe(options)}`);
  }
  checkKnown('Throttle', options, THROTTLE_OPTIONS);
  const name = checkNamespace('name', options.name ?? 'default');
  const given = options.mode ?? 'wait';
  if (given !== 'wait' && given !== 'throw' && given !== 'delay' && given !== 'queue') {
    throw new ThrottleConfigError(`Expected mode to be 'wait' or 'throw', got ${describe(options.mode)}`);
  }
  const mode = given === 'throw' ? 'throw' : 'wait';
  const bucketAbove = checkCount('bucketAbove', options.bucketAbove ?? DEFAULT_BUCKET_ABOVE, 0);
  const buckets = checkWhole('buckets', options.buckets ?? 50, 2, 1_000);
  const rules = compileRules(options.rules, bucketAbove, buckets);
  const maxDelayMs = checkDelay('maxDelayMs', options.maxDelayMs ?? Infinity);
  const timeoutMs = checkDelay('timeoutMs', options.timeoutMs ?? Infinity);
  const timeoutHold = Number.isFinite(timeoutMs) ? Math.ceil(Math.min(timeoutMs, MAX_WINDOW_MS)) : 0;
  const maxHoldMs = checkWhole('maxHoldMs', options.maxHoldMs ?? Math.max(DEFAULT_MAX_HOLD_MS, timeoutHold), 1, MAX_WINDOW_MS);
  const retainMs = checkWhole('retainMs', options.retainMs ?? 0, 0, MAX_WINDOW_MS);
  const maxQueued = checkCount('maxQueued', options.maxQueued ?? Infinity, 0);
  const onStoreError = options.onStoreError ?? 'fail';
  if (!POLICIES.includes(onStoreError)) {
    throw new ThrottleConfigError(`Expected onStoreError to be 'fail', 'wait' or 'local', got ${describe(options.onStoreError)}`);
  }
  const localShare = options.localShare ?? 1 / 4;
  if (typeof localShare !== 'number' || !(localShare > 0 && localShare <= 1)) {
    throw new ThrottleConfigError(`Expected localShare to be a number in (0, 1], got ${describe(localShare)}`);
  }
  if (options.store !== undefined && !isStore(options.store)) {
    throw new ThrottleConfigError(`Expected store to be a MemoryStore, a RedisStore or another Store, got ${describe(options.store)}`);
  }
  return {
    name,
    mode,
    rules,
    store: options.store,
    maxDelayMs: mode === 'throw' ? 0 : maxDelayMs,
    timeoutMs,
    maxHoldMs,
    retainMs,
    maxQueued,
    onStoreError,
    localShare,
  };
}

function isStore(value: unknown): value is Store {
  const store = value as Partial<Store> | null;
  return (
    typeof store === 'object' &&
    store !== null &&
    (['reserve', 'settle', 'inspect', 'pause', 'restore', 'close'] as const).every((method) => typeof store[method] === 'function')
  );
}
