import type { QueueFullError, RateLimitedError, StoreUnavailableError } from './errors.js';
import type { Rule, RuleInput } from './rules.js';
import type { Store } from './store.js';

/**
 * What a call does when its slot is not free yet.
 * - `'delay'`: book the earliest slot in the shared log and sleep until it (one store round trip,
 *   no polling). Callers for one key are served in the order they asked, across processes.
 *   Costs: a burst books slots far ahead, so a process can hold much of a key's future capacity.
 * - `'queue'`: calls wait in a local queue per key (p-queue, with `priority`); only the head of the
 *   queue books a slot, so a process never hoards future capacity and bookings use the most recent
 *   completion times. Costs: order across processes is by head, not by arrival; `maxQueued` bounds memory.
 * - `'throw'`: never wait: a call whose slot is not free now rejects with `RateLimitedError`.
 */
export type ThrottleMode = 'delay' | 'queue' | 'throw';

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

/** Rules for a key: fixed, or chosen per key (plan tiers). A function may be async. */
export type RulesOption =
  | RuleInput
  | readonly RuleInput[]
  | ((key: string) => RuleInput | readonly RuleInput[] | PromiseLike<RuleInput | readonly RuleInput[]>);

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
  /** @default 'delay' */
  readonly mode?: ThrottleMode;
  /**
   * Longest wait accepted before a call rejects with `RateLimitedError` (and books nothing).
   * In `queue` mode it bounds the whole wait, the time spent queued included: a call still queued
   * when it runs out leaves the queue and rejects (`reason: 'booked'`), and a head books with what is left.
   * @default Infinity ('delay', 'queue'); 0 in 'throw' mode, whatever is set
   */
  readonly maxDelayMs?: number;
  /**
   * Floor, in ms, of the in-flight estimate: how long after its start a booked call is expected to
   * have completed. A call counts in each window until `windowMs` after its response; until then,
   * slots are placed on this estimate, a call past it counts as still on its way, and slots placed
   * on it are confirmed when due (docs/design.md §4). It decides how much re-booking a burst costs,
   * not whether the limit holds.
   * @default 100
   */
  readonly safetyMarginMs?: number;
  /**
   * Learn the in-flight estimate from this throttle's own calls: the longest recent time from a
   * slot's start to its call's completion (event-loop lag plus response time), never below
   * `safetyMarginMs` and never above `maxHoldMs`.
   * @default true
   */
  readonly adaptiveMargin?: boolean;
  /**
   * Cap of the learned in-flight estimate, in ms, and how long after its estimate a call without a
   * completion still counts as on its way (a crashed worker's slots stop counting then). Set it above
   * the vendor request timeout.
   * @default 10_000
   */
  readonly maxHoldMs?: number;
  /**
   * History kept per key, in ms, at least the longest window. Set it to the longest window you may
   * switch a live key to, so that the new rule sees the calls made before the change.
   * @default the longest window of the key's rules
   */
  readonly retainMs?: number;
  /**
   * `queue` mode: calls per key that may be booking a slot (or sleeping until it) at once in this
   * process. More heads fill a freed window faster; each asks the store again while its slot waits
   * for a call still in flight. @default 4
   */
  readonly concurrency?: number;
  /** `queue` mode: calls per key that may wait in this process before `QueueFullError`. @default Infinity */
  readonly maxQueued?: number;
  /**
   * Long windows in bounded memory: a rule whose limit is above this is counted with a bucketed log.
   * Completed calls older than the exact rules' longest window leave the per-call log and are counted
   * in `buckets` buckets per window, each as if it ended at its bucket's end. Such a rule may hold a
   * call back by less than one bucket width (`windowMs / buckets`), never let one through early, and
   * a key needs a few KB whatever the limit (docs/design.md §12). `Infinity` keeps every rule exact.
   * @default 1_000
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
}

export interface ScheduleOptions {
  /** Aborting before `fn` starts rejects with `signal.reason`, gives the slot back, and `fn` never runs. */
  readonly signal?: AbortSignal;
  /** Slots this call takes: an endpoint the vendor counts as several calls. @default 1 */
  readonly cost?: number;
  /** Overrides the throttle's `maxDelayMs` for this call (ignored in `throw` mode). */
  readonly maxDelayMs?: number;
  /** `queue` mode: higher runs first among this key's queued calls. @default 0 */
  readonly priority?: number;
}

/** What `inspect(key)` reports. */
export interface KeyUsage {
  readonly key: string;
  readonly rules: ReadonlyArray<{
    readonly limit: number;
    readonly windowMs: number;
    /** Calls that count against this rule now, booked future ones included. */
    readonly used: number;
    /** ms until the oldest counted call stops counting. */
    readonly resetInMs: number;
  }>;
  /** ms until one more call could start here (0 = now). */
  readonly nextFreeInMs: number;
  /** ms until a pause the vendor asked for ends (0 = not paused); see `Throttle.pause`. */
  readonly pausedForMs: number;
  /** Calls of this process waiting for this key: sleeping for their slot, or queued behind the head. */
  readonly waitingHere: number;
}

/**
 * Events a throttle emits (`throttle.on(name, listener)`). Listeners run synchronously on the hot
 * path: keep them cheap. A throwing listener never breaks a call: errors thrown by listeners are
 * caught and dropped.
 */
export interface ThrottleEvents {
  /** Something worth a look that changed nothing: a malformed vendor header that was ignored, a background write that failed. */
  debug: [event: { readonly message: string; readonly key?: string; readonly error?: unknown }];
  /** A key was paused for every process sharing the store (`throttle.pause()`, or a vendor's 429). */
  paused: [event: { readonly key: string; readonly ms: number; readonly source: string }];
  /** A call got its slot and `fn` is about to start. `waitedMs`: from `schedule()` to now (queued, booking and sleeping). */
  granted: [event: { readonly key: string; readonly cost: number; readonly waitedMs: number }];
  /**
   * A call booked a slot that starts later (it sleeps until then). `reason`: the rule that set the
   * start, `'paused'` (a vendor pause) or `'booked'` (the slots before it were booked ahead).
   */
  delayed: [event: { readonly key: string; readonly cost: number; readonly delayMs: number; readonly reason: Rule | 'paused' | 'booked' }];
  /** A call was turned away without running: `RateLimitedError` or `QueueFullError`. */
  refused: [event: { readonly key: string; readonly cost: number; readonly error: RateLimitedError | QueueFullError }];
  /** The store failed (unreachable, timed out, out of memory); `onStoreError` says what the call did. */
  storeError: [event: { readonly key: string; readonly error: StoreUnavailableError; readonly policy: StoreErrorPolicy }];
}

/** What a throttle holds in this process (see `Throttle.stats`). */
export interface ThrottleStats {
  /** Keys with a local queue (`queue` mode); idle queues are dropped. */
  readonly queues: number;
  /** Calls waiting in local queues, not yet at the head. */
  readonly queued: number;
  /** Calls with a booked slot, sleeping until it starts. */
  readonly sleeping: number;
}
