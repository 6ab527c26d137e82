import type { Rule } from './rules.js';

/**
 * A change to slots already in a key's log, sent along with the next decision for that key
 * (or on its own when it must not wait):
 * - `releaseAt` a number: the slot's call completed; it stops counting `windowMs` after that time
 *   (store clock, ms);
 * - `releaseAt` null: the call never started (aborted, closed); the slot is removed.
 */
export interface Settlement {
  readonly member: string;
  readonly releaseAt: number | null;
}

/** One decision: find the earliest start time at which `cost` more calls keep every rule, and maybe book it. */
export interface ReserveRequest {
  /** The throttle's name: one namespace of keys per vendor. */
  readonly namespace: string;
  /** The encoded user key (see `encodeKey`). */
  readonly key: string;
  readonly rules: readonly Rule[];
  /** Slots to take at once; at most the smallest limit. */
  readonly cost: number;
  /** Book the slot only if it starts within this many ms; `Infinity` books any slot. 0 = now or never. */
  readonly maxDelayMs: number;
  /**
   * How long after its start a booked slot keeps counting as if the call were still in flight,
   * until a settlement tells its real completion time.
   */
  readonly holdMs: number;
  /** History to keep, at least the longest window. */
  readonly retainMs: number;
  /**
   * How long after its estimate a call that has not reported its completion may still be on its
   * way: until then it counts from the time of each decision, as in flight.
   */
  readonly maxHoldMs: number;
  /**
   * Do not book a slot that waits for a call still in flight (its completion unknown): answer
   * `deferred` instead, so the caller asks again once the completion is likely known and books with
   * it. Used by `queue` mode, where only the head of a queue books.
   */
  readonly defer: boolean;
  /** Earlier slots of this key to update first, in the same atomic step. */
  readonly settle: readonly Settlement[];
}

export interface ReserveResult {
  readonly granted: boolean;
  /** Not booked because the slot waits for a call still in flight (`defer`); ask again in `retryMs`. */
  readonly deferred: boolean;
  /** When deferred: ms after which asking again is likely to find the completion known. */
  readonly retryMs: number;
  /**
   * Granted: ms from the decision until the slot starts (0 = start now).
   * Refused: ms until a slot would be free (`retryAfterMs`).
   */
  readonly waitMs: number;
  /** Store-clock time (ms) the slot starts at, booked or not. */
  readonly startAt: number;
  /** Store-clock time (ms, rounded up) the decision was taken at. */
  readonly now: number;
  /** Index in `rules` of the rule that pushed the slot later, -2 for a vendor pause, -1 when neither did. */
  readonly ruleIndex: number;
  /** Members of the booked slots (`cost` of them), empty when refused. */
  readonly members: readonly string[];
  /**
   * Booked, and the start was set by an estimate: a slot whose call's completion was not known yet.
   * The caller checks the slot again with `confirm()` when it is due.
   */
  readonly tentative: boolean;
}

/** Calls to count in a key's log that the store did not decide: see `Store.restore`. */
export interface RestoredSlot {
  /** When the call stops counting, minus the window: ms from the store's now (negative = in the past). */
  readonly releaseInMs: number;
  /** Slots the call took. */
  readonly cost: number;
}

/** Usage of one key, read without booking anything. */
export interface InspectResult {
  /** Store-clock time of the reading (ms). */
  readonly now: number;
  readonly rules: ReadonlyArray<{
    readonly limit: number;
    readonly windowMs: number;
    /** Slots that count against this rule now, booked future ones included. */
    readonly used: number;
    /** ms until the oldest slot that counts stops counting (0 when none counts). */
    readonly resetInMs: number;
  }>;
  /** ms until one more call could start (0 = now). */
  readonly nextFreeInMs: number;
  /** ms until a pause the vendor asked for ends (0 = not paused). */
  readonly pausedForMs: number;
}

/**
 * Where the shared log of each key lives. One decision algorithm, several stores: every store must
 * give the same answers for the same sequence of requests and clock readings.
 */
export interface Store {
  reserve(request: ReserveRequest): Promise<ReserveResult>;
  /** Applies settlements without deciding anything: completions and releases. */
  settle(namespace: string, key: string, settle: readonly Settlement[], retainMs: number): Promise<void>;
  inspect(namespace: string, key: string, rules: readonly Rule[]): Promise<InspectResult>;
  /**
   * Checks a tentative slot when it is due: do the slots booked before it (lower member numbers)
   * still leave room at `startAt` under every rule, counting a call past its estimate without a
   * completion as still in flight (for up to `maxHoldMs` after its estimate)? Books nothing.
   */
  confirm(namespace: string, key: string, startAt: number, members: readonly string[], rules: readonly Rule[], maxHoldMs: number): Promise<boolean>;
  /**
   * Starts no call of the key before `ms` from now (store clock), for every process: the vendor said
   * its limit was hit. A longer pause already in place is kept. Resolves to the pause's end (store clock).
   */
  pause(namespace: string, key: string, ms: number, retainMs: number): Promise<number>;
  /**
   * Adds calls that started without this store deciding them (decided by a process's local fallback
   * while the store was down) as completed slots, so that the store's next decisions count them.
   */
  restore(namespace: string, key: string, slots: readonly RestoredSlot[], retainMs: number, maxHoldMs: number): Promise<void>;
  /**
   * Optional: this process's own calls on the key that may still count, as `restore()` takes them
   * (release in ms from now). The throttle's local fallback (`onStoreError: 'local'`) counts them
   * when it takes a key over, so that calls made through the store just before it failed are not
   * forgotten. `RedisStore` answers from its recovery journal.
   */
  recentCalls?(namespace: string, key: string): readonly RestoredSlot[];
  /** Frees what the store itself owns. A client passed in by the user is left open. */
  close(): Promise<void>;
}
