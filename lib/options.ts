import { ThrottleConfigError, type QueueFullError, type RateLimitedError, type StoreUnavailableError, type WaitReason } from './errors.js';
import { checkNamespace } from './keys.js';
import { compileRules, type RuleSource, type RulesOption } from './rule-source.js';
import { describe, MAX_WINDOW_MS } from './rules.js';
import type { LearnedLimit } from './learning.js';
import type { RuleUsage, Store, StoreNotice } from './store.js';
import { checkBoolean, checkCount, checkDelay, checkFunction, checkKnown, checkWhole } from './validate.js';

export type { RulesOption };

/**
 * What a call does when its slot is not free yet.
 * - `'wait'` (the default): wait in the key's line until the slot is free, then start. A slot whose
 *   time is known (every call it depends on has completed) is booked at once and slept to; one that
 *   depends on a call still in flight is asked for again when that call completes. Bounded by `maxDelayMs`.
 * - `'throw'`: never wait: a call whose slot is not free now rejects with `RateLimitedError`.
 *
 * `'delay'` and `'queue'` are accepted as aliases of `'wait'`.
 */
export type ThrottleMode = 'wait' | 'throw' | 'delay' | 'queue';

/**
 * What a call does when the shared store fails (refused connection, command timeout, Redis out of
 * memory, data lost and not yet restored). See docs/operations.md for each policy's risk.
 * - `'fail'`: reject with `StoreUnavailableError`; `fn` never runs. Nothing goes out unaccounted.
 * - `'wait'`: keep asking the store, with backoff, until the call's `maxDelayMs` (or its signal)
 *   runs out, then reject with `StoreUnavailableError`.
 * - `'local'`: decide in this process instead, with `localShare` of each limit (e.g. 1 / processes),
 *   and put those calls into the store once it answers again. Limits hold across processes only if
 *   the shares of all processes add up to at most 1.
 */
export type StoreErrorPolicy = 'fail' | 'wait' | 'local';

export interface ThrottleOptions {
  /**
   * Namespace of this vendor's limits: throttles with the same name and store share every key's log.
   * Letters, digits, `.`, `_`, `-`, `/`.
   * @default 'default'
   */
  readonly name?: string;
  /** Limits per key, e.g. `['30/min']`, `[{ limit: 30, windowMs: 60_000 }]`, `['5/s', '30/min', '10000/day']`. */
  readonly rules: RulesOption;
  /**
   * Where the shared log lives.
   * @default new MemoryStore() (this process only)
   */
  readonly store?: Store;
  /** @default 'wait' */
  readonly mode?: ThrottleMode;
  /**
   * Longest wait accepted, in ms, from `schedule()` to the start: a call that cannot start by then
   * rejects with `RateLimitedError` (and books nothing).
   * @default Infinity ('wait'); 0 in 'throw' mode, whatever is set
   */
  readonly maxDelayMs?: number;
  /**
   * Longest a call's `fn` may run, in ms: past it `schedule()` rejects with `CallTimeoutError` (the
   * call goes on; its slot keeps counting until it completes or its bound passes).
   * @default Infinity
   */
  readonly timeoutMs?: number;
  /**
   * How long after its start a call may still reach the vendor, in ms: the bound every decision
   * counts an unfinished call to (a crashed worker's slots stop counting then). It costs no quota
   * while calls complete (a completion replaces the bound), so set it above the vendor request
   * timeout, generously.
   * @default 10_000, or `timeoutMs` if that is longer
   */
  readonly maxHoldMs?: number;
  /**
   * History kept per key, in ms, at least the longest window. Set it to the longest window you may
   * switch a live key to, so that the new rule sees the calls made before the change.
   * @default the longest window of the key's rules
   */
  readonly retainMs?: number;
  /** Calls per key that may wait in this process behind a call waiting for a completion, before `QueueFullError`. @default Infinity */
  readonly maxQueued?: number;
  /**
   * Large limits in bounded memory: a rule whose limit is above this is counted with a bucketed log.
   * Completed calls older than the exact rules' longest window leave the per-call log and are counted
   * in `buckets` buckets per window, each as if it ended at its bucket's end. Such a rule may hold a
   * call back by less than one bucket width (`windowMs / buckets`), never let one through early, and
   * a key needs a few KB whatever the limit (docs/design.md §10). `Infinity` keeps every rule exact,
   * at about 100 bytes of Redis per call in the window above 48.
   * @default 48
   */
  readonly bucketAbove?: number;
  /** Buckets per window of a bucketed rule (see `bucketAbove`), 2 to 1000. @default 50 */
  readonly buckets?: number;
  /** What a call does when the store fails. @default 'fail' */
  readonly onStoreError?: StoreErrorPolicy;
  /**
   * `onStoreError: 'local'`: the share of each limit this process may use on its own while the store
   * is down, in (0, 1], e.g. `1 / 4` with four processes. Each limit becomes `floor(limit × share)`, at least 1.
   * @default 1 / 4
   */
  readonly localShare?: number;
  /**
   * How long a limit a key learned from its vendor (`learn()`) holds, in ms, unless the vendor says
   * it again: long enough that a key quiet for a while does not forget it and burst at the
   * configured rate again, short enough that a vendor that stopped saying it (a plan upgraded) gets
   * the configured rate back within a quarter hour. A vendor that publishes its limit says it on
   * every response.
   * @default 900_000 (15 minutes)
   */
  readonly learnedForMs?: number;
  /**
   * Use a limit the vendor publishes for a configured rule's window (`RateLimit-Policy`, or
   * `RateLimit-Limit: 100;w=60`: a limit that names its window) even where it is above the rule:
   * the vendor's word becomes the limit. Off, the configured rules are the ceiling and learning only
   * lowers. A bare `X-RateLimit-Limit` names no window and never raises; refusals lower from the
   * limit in force and probe back up to the rule, never above it. A limit learned above the rules
   * applies to the key in every process sharing the throttle's name: set this alike in all of them.
   * @default false
   */
  readonly learnAboveRules?: boolean;
  /**
   * The fewest calls per window of the key's shortest rule that refusals can teach: a vendor that
   * refuses everything slows the key down to this, never to a stop (`maxDelayMs` and `timeoutMs`
   * still bound each call). At or above the rule's limit, refusals teach nothing.
   * @default 1
   */
  readonly learnedFloor?: number;
  /**
   * How long after its start a slot reserved with `reserve()` can still be claimed by a call made
   * with its token (a platform's delay that delivers late, a cold start). An unclaimed reservation
   * counts until its start + this + `maxHoldMs`, then a window. Set it alike in every process
   * sharing the throttle's name, as the rules.
   * @default 10000
   */
  readonly reservationGraceMs?: number;
  /**
   * OpenTelemetry spans and metrics of this throttle's calls, while a tracer or meter provider is
   * registered through `@opentelemetry/api` (docs/metrics.md). Without a provider nothing is
   * loaded or recorded; `false` turns it off with one.
   * @default true
   */
  readonly telemetry?: boolean;
  /**
   * The `vendor_throttle.key` attribute of a call's span: a label for its key that is safe to
   * export (a tenant's plan, a hash), or `undefined` for none. Without it, spans carry no key: a
   * key may be a customer's id.
   */
  readonly keyLabel?: (key: string) => string | undefined;
}

export interface ScheduleOptions {
  /** Aborting before `fn` starts rejects with `signal.reason`, gives the slot back, and `fn` never runs. */
  readonly signal?: AbortSignal;
  /** Slots this call takes: an endpoint the vendor counts as several calls. @default 1 */
  readonly cost?: number;
  /** Overrides the throttle's `maxDelayMs` for this call (ignored in `throw` mode). */
  readonly maxDelayMs?: number;
  /** Overrides the throttle's `timeoutMs` for this call. */
  readonly timeoutMs?: number;
  /** Higher goes first among this key's waiting calls in this process. @default 0 */
  readonly priority?: number;
  /**
   * A reservation's token (`reserve()`, in this process or another): the call starts on the slot
   * reserved, without a decision, once its start has come (waiting for it within `maxDelayMs`).
   * Where the slot moved since (a vendor pause, a lower learned limit, a store that lost it), the
   * call books a slot as any call. `ReservationError` for a token that is malformed, of another
   * throttle or key, already used, or past its grace. The call's cost is the reservation's.
   */
  readonly token?: string;
}

/** What `reserve()` takes. */
export interface ReserveOptions {
  /** Slots to reserve. @default 1 */
  readonly cost?: number;
  /** Reserve only a slot that starts within this many ms. @default the throttle's `maxDelayMs` (also in `throw` mode) */
  readonly maxDelayMs?: number;
  /** Aborting before the slot is booked rejects with `signal.reason`; nothing is booked. */
  readonly signal?: AbortSignal;
}

/** The names `reserve()` takes. */
export const RESERVE_OPTIONS = ['cost', 'maxDelayMs', 'signal'] as const satisfies ReadonlyArray<keyof ReserveOptions>;

/** The names `new Throttle()` takes; any other is a `ThrottleConfigError`. */
export const THROTTLE_OPTIONS = [
  'name',
  'rules',
  'store',
  'mode',
  'maxDelayMs',
  'timeoutMs',
  'maxHoldMs',
  'retainMs',
  'maxQueued',
  'bucketAbove',
  'buckets',
  'onStoreError',
  'localShare',
  'learnedForMs',
  'learnAboveRules',
  'learnedFloor',
  'reservationGraceMs',
  'telemetry',
  'keyLabel',
] as const satisfies ReadonlyArray<keyof ThrottleOptions>;

/** Options of `limit(key, options)`. */
export interface LimitOptions {
  /** Slots the call takes. @default 1 */
  readonly cost?: number;
}

/**
 * What `limit(key)` answers, never throwing for a full key. When `success`, a slot is booked now:
 * make the call, then report its response with `done()`; the slot counts until a window after it
 * (unreported, until the call's start + `maxHoldMs`, then a window).
 */
export interface LimitResult {
  /** A slot was booked: the call may go now. */
  readonly success: boolean;
  /** Calls that could still start now under the fullest rule (after this one, when booked). */
  readonly remaining: number;
  /** ms until the oldest call counted by the fullest rule stops counting (0 when none counts). */
  readonly resetInMs: number;
  /** ms until a call could start (0 when `success`). */
  readonly retryAfterMs: number;
  /** Reports the response of the call the slot was booked for (idempotent; nothing when not `success`). */
  done(): void;
}

/** The names `schedule()` takes; any other is a `ThrottleConfigError`. */
export const SCHEDULE_OPTIONS = ['signal', 'cost', 'maxDelayMs', 'timeoutMs', 'priority', 'token'] as const satisfies ReadonlyArray<keyof ScheduleOptions>;

/** What `inspect(key)` reports. */
export interface KeyUsage {
  readonly key: string;
  /** Per rule: `used` (calls that started and still count), `remaining` (calls that could start now), `resetInMs`. */
  readonly rules: readonly RuleUsage[];
  /** Calls booked to start later (sleeping until their slot), in every process: counted apart from `used`. */
  readonly bookedAhead: number;
  /** ms until one more call could start here (0 = now). */
  readonly nextFreeInMs: number;
  /** ms until a pause the vendor asked for ends (0 = not paused); see `Throttle.pause`. */
  readonly pausedForMs: number;
  /** False when the store holds nothing for the key: a new key, one idle past its windows, or another throttle `name`. */
  readonly stored: boolean;
  /**
   * Limits the key learned from its vendor (`learn()`), in force now: each with its source and when
   * it lapses. `rules` shows each rule with the tighter limit, then the learned limits of other windows.
   */
  readonly learned: readonly LearnedLimit[];
  /** Calls of this process waiting for this key: sleeping for their slot, or queued behind the head. */
  readonly waitingHere: number;
}

/** What every event of a call's life says of it. */
export interface CallEvent {
  readonly key: string;
  readonly cost: number;
  /** The call's other keys, for a call of several. */
  readonly also?: readonly string[];
}

/**
 * Events a throttle emits (`throttle.on(name, listener)`). Listeners run synchronously on the hot
 * path: keep them cheap. A throwing listener never breaks a call: its error is thrown again on its
 * own (a microtask), an uncaught exception, as the error of a listener of an I/O event is.
 */
export interface ThrottleEvents {
  /** Something worth a look that changed nothing: a malformed vendor header that was ignored, a background write that failed. */
  debug: [event: { readonly message: string; readonly key?: string; readonly error?: unknown }];
  /** A key was paused for every process sharing the store (`throttle.pause()`, or a vendor's 429). */
  paused: [event: { readonly key: string; readonly ms: number; readonly source: string }];
  /** A limit the key learned from its vendor changed (learned, lowered, raised back or forgotten), in every process's decisions: the limits now in force. */
  learned: [event: { readonly key: string; readonly learned: readonly LearnedLimit[] }];
  /**
   * A call was accepted by `schedule()` (its arguments are valid) and waits for its slot. `also`: the
   * call's other keys, for a call of several (`key` is its first); the same in every event of a call.
   */
  queued: [event: CallEvent];
  /** A call got its slot and `fn` starts. `waitedMs`: from `schedule()` to now (queued, booking and sleeping). */
  started: [event: CallEvent & { readonly waitedMs: number }];
  /** An alias of `started`, emitted with it. */
  granted: [event: CallEvent & { readonly waitedMs: number }];
  /** A call's `fn` resolved. `durationMs`: from its start; `waitedMs`: before it. */
  completed: [event: CallEvent & { readonly waitedMs: number; readonly durationMs: number }];
  /**
   * A call failed. `ran` true: its `fn` threw or rejected (`error`), outlasted `timeoutMs`
   * (`CallTimeoutError`), or, through an HTTP adapter, the client failed (no answer). `ran` false:
   * it ended without running, for another reason than a refusal (its signal, `close()`, the store).
   */
  failed: [event: CallEvent & { readonly waitedMs: number; readonly durationMs: number; readonly error: unknown; readonly ran: boolean }];
  /**
   * An HTTP adapter sends a request again, through the throttle, after the vendor refused it (a 429,
   * or `isThrottled`). `attempt`: 1 for the first retry; `status`: the refused response's status;
   * `pauseMs`: the pause the vendor asked for, if any.
   */
  retried: [event: { readonly key: string; readonly client: string; readonly attempt: number; readonly status: number; readonly pauseMs?: number }];
  /**
   * A call booked a slot that starts later (it sleeps until then). `reason`: the rule that set the
   * start, `'paused'` (a vendor pause), `'recovering'` (Redis lost data and the processes put their calls back first),
   * `'learned'` (a limit learned from the vendor, of a window no rule has) or `'booked'` (the slots before it were booked ahead).
   */
  delayed: [event: { readonly key: string; readonly cost: number; readonly delayMs: number; readonly reason: WaitReason; readonly also?: readonly string[] }];
  /** A call was turned away without running: `RateLimitedError` or `QueueFullError`. */
  refused: [event: { readonly key: string; readonly cost: number; readonly error: RateLimitedError | QueueFullError; readonly also?: readonly string[] }];
  /** The store failed (unreachable, timed out, out of memory); `onStoreError` says what the call did. */
  storeError: [event: { readonly key: string; readonly error: StoreUnavailableError; readonly policy: StoreErrorPolicy }];
  /**
   * The store says what its users should know while it happens: Redis evicting keys (`evicting`,
   * then `evictionsStopped`), what it cannot watch (`cannotWatch`), or background work that fails
   * (`evictionCheckFailed`, `heartbeatFailed`, `stampFailed`, `reapFailed`, `subscribeFailed`: once
   * until it succeeds; `claimFailed`: once per connection). `message` is a sentence for a log: the
   * cause, what the store does, and the fix.
   */
  storeWarning: [event: StoreNotice];
}

/** What a throttle holds in this process (see `Throttle.stats`). */
export interface ThrottleStats {
  /** Keys with calls waiting in line in this process; idle lines are dropped. */
  readonly queues: number;
  /** Calls waiting in line for a slot. */
  readonly queued: number;
  /** Calls with a booked slot, sleeping until it starts. */
  readonly sleeping: number;
}

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
  readonly learnedForMs: number;
  readonly learnAboveRules: boolean;
  readonly learnedFloor: number;
  /** `maxDelayMs` as given: a reservation's bound in `throw` mode too. */
  readonly reserveMaxDelayMs: number;
  readonly reservationGraceMs: number;
  readonly telemetry: boolean;
  readonly keyLabel: ((key: string) => string | undefined) | undefined;
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
    throw new ThrottleConfigError(`Expected Throttle options to be an object, got ${describe(options)}`, 'options');
  }
  checkKnown('Throttle', options, THROTTLE_OPTIONS);
  const name = checkNamespace('name', options.name ?? 'default');
  const given = options.mode ?? 'wait';
  if (given !== 'wait' && given !== 'throw' && given !== 'delay' && given !== 'queue') {
    throw new ThrottleConfigError(`Expected mode to be 'wait' or 'throw', got ${describe(options.mode)}`, 'mode');
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
    throw new ThrottleConfigError(`Expected onStoreError to be 'fail', 'wait' or 'local', got ${describe(options.onStoreError)}`, 'onStoreError');
  }
  const localShare = options.localShare ?? 1 / 4;
  if (typeof localShare !== 'number' || !(localShare > 0 && localShare <= 1)) {
    throw new ThrottleConfigError(`Expected localShare to be a number in (0, 1], got ${describe(localShare)}`, 'localShare');
  }
  if (options.store !== undefined && !isStore(options.store)) {
    throw new ThrottleConfigError(`Expected store to be a MemoryStore, a RedisStore or another Store, got ${describe(options.store)}`, 'store');
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
    learnedForMs: checkWhole('learnedForMs', options.learnedForMs ?? 900_000, 1_000, MAX_WINDOW_MS),
    learnAboveRules: checkBoolean('learnAboveRules', options.learnAboveRules ?? false),
    learnedFloor: checkWhole('learnedFloor', options.learnedFloor ?? 1, 1),
    reserveMaxDelayMs: maxDelayMs,
    reservationGraceMs: checkWhole('reservationGraceMs', options.reservationGraceMs ?? 10_000, 0, MAX_WINDOW_MS),
    telemetry: checkBoolean('telemetry', options.telemetry ?? true),
    keyLabel: checkFunction('keyLabel', options.keyLabel),
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
