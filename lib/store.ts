import type { LearnEntry, LearnedLimit } from './learning.js';
import type { Rule } from './rules.js';
import { ThrottleConfigError } from './errors.js';
import type { Dependency } from './slot-plan.js';

/**
 * A change to a slot already in a key's log:
 * - `releaseAt` a number: the slot's call completed at that time (store clock, ms); it stops counting
 *   `windowMs` after it. A release only ever lowers a slot's score (never above its bound);
 * - `releaseAt` null: the call never started (aborted, closed); the slot is removed.
 */
export interface Settlement {
  readonly member: string;
  readonly releaseAt: number | null;
}

/** One decision: can `cost` more slots start now, or when, under every rule? Books the slot if it can. */
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
   * How long after its start a call may still reach the vendor: a booked slot counts as if its call
   * released at start + `maxHoldMs` until its completion (`settle`) says when it really did.
   */
  readonly maxHoldMs: number;
  /** History to keep, at least the longest window. */
  readonly retainMs: number;
  /**
   * More keys the call counts in, each under its own rules (a per-user and an app-wide limit): the
   * call starts only when every rule of every key allows it, and then takes `cost` slots in each,
   * all in one atomic decision. Only for a store with {@link Store.multiKey}. Keys are distinct.
   */
  readonly also?: readonly KeyPart[];
  /**
   * This process still waits on `key` through other calls that count in it besides more keys
   * (`also`): a store that keeps a list of waiting processes per key keeps this one in it even if
   * this decision needs no more waiting. Only for a call of one key.
   */
  readonly stay?: boolean;
  /**
   * A slot reserved for a call made later, maybe by another process (`Throttle.reserve`), claimed
   * with `claim()`: it is never given back as a dead process's slot, and `maxHoldMs` covers the
   * grace after its start within which it can be claimed. It is never deferred: where a binding
   * call is in flight (or booked ahead), it is booked at the soonest that call could release, and
   * the slots it so took to be released are its dependencies (`ReserveResult.deps`), which its
   * claim checks.
   */
  readonly reserved?: boolean;
  /**
   * With `reserved`: the reservations' grace, within `maxHoldMs`. A slot booked ahead releases at
   * the soonest at its start: its score − `maxHoldMs` for a reservation's, and − (`maxHoldMs` −
   * this) for a call's.
   */
  readonly graceMs?: number;
  /**
   * With `reserved`: the reservation is for the asking process's own call, which starts on it at
   * once when it starts now and depends on no call (no claim): a store that keeps a journal of its
   * process's calls (`RedisStore` with recovery) journals it as one of them.
   */
  readonly own?: boolean;
}

/** One more key of a call (see `ReserveRequest.also`). */
export interface KeyPart {
  /** The encoded user key. */
  readonly key: string;
  readonly rules: readonly Rule[];
  /** History to keep in this key, at least its longest window. */
  readonly retainMs: number;
}

/**
 * - `booked`: the slot is booked; it starts in `waitMs` (0 = now).
 * - `refused`: no slot within `maxDelayMs`; nothing booked; `waitMs` says when to try again (at the soonest).
 * - `deferred`: where the slot can start depends on a call still in flight (or booked ahead): nothing
 *   booked; ask again once the store announces a completion on the key (`listen`), or after
 *   `retryMs` at the latest (by then that call's release is known).
 */
export type ReserveStatus = 'booked' | 'refused' | 'deferred';

export interface ReserveResult {
  readonly status: ReserveStatus;
  /** Booked: ms from the decision until the slot starts. Refused or deferred: no slot before this many ms. */
  readonly waitMs: number;
  /** Deferred: ask again after this many ms at the latest. */
  readonly retryMs: number;
  /** Store-clock time (ms) the slot starts at (booked), or the earliest the known releases allow. */
  readonly startAt: number;
  /** Store-clock time (ms, rounded up) the decision was taken at. */
  readonly now: number;
  /**
   * A store that reads its clock in this process: `performance.now()` when it read `now` (it may
   * reuse a reading taken before the decision was asked for). Others leave it out: they read their
   * clock after the ask left.
   */
  readonly readAt?: number;
  /**
   * Index in `rules` of the rule that set the start, `PAUSED` (-2) for a vendor pause,
   * `RECOVERING` (-3) while the store puts back data it lost (a new epoch, or a key held), -1 when
   * none did. With `also`, rules count on from the first key's through each of `also` in order.
   */
  readonly ruleIndex: number;
  /** Members of the booked slots (`cost` of them, the same in every key of the call), empty unless booked. */
  readonly members: readonly string[];
  /** A reservation booked: its dependencies (see `ReserveRequest.reserved`), in the order its members' names carry their hash. */
  readonly deps?: readonly Dependency[];
}

/** A claim of slots reserved earlier (`Store.claim`): its call starts now, in place of those slots. */
export interface ClaimRequest {
  readonly namespace: string;
  readonly key: string;
  /** The reserved slots' members (`ReserveResult.members` of a decision with `reserved`). */
  readonly members: readonly string[];
  /** Their dependencies (`ReserveResult.deps`): the claim checks them against the hash the members' names carry. */
  readonly deps: readonly Dependency[];
  /** Their score in the log: their start + the reserving throttle's `maxHoldMs` + its grace. */
  readonly bound: number;
  /** Their start (store clock, ms), as the reservation said it. */
  readonly startAt: number;
  /** The claiming throttle's `reservationGraceMs`: the slots start no earlier than `bound` − `maxHoldMs` − this. */
  readonly graceMs: number;
  /** The claiming throttle's `maxHoldMs`: the call's slots count to now + this until completed; no claim after `bound` − this. */
  readonly maxHoldMs: number;
  /** History the key keeps, at least its longest window. */
  readonly retainMs: number;
  /**
   * More keys the reservation was booked in (`ReserveRequest.also`), in its order: the claim takes
   * the slots of every key at once. Only for a store with {@link Store.multiKey}.
   */
  readonly also?: ReadonlyArray<{ readonly key: string; readonly retainMs: number }>;
  /** No call starts: the reserved slots leave the log, the reservation counts as used (`moved`). Its own process gives back a reservation whose call was aborted. */
  readonly giveBack?: boolean;
}

/**
 * - `started`: the call starts now on the slots `members` (this process's, settled as any call's);
 *   the reserved ones left the log;
 * - `early`: the slots start in `waitMs` (their start, or a window after a dependency's release);
 *   nothing changed;
 * - `late`: too late for a call to reach the vendor within the slots' bound; they count to it, and
 *   cannot be claimed;
 * - `used`: the reservation was claimed before;
 * - `moved`: none of the slots is in the log (a vendor pause or a lower learned limit took them
 *   out, the store lost them, or the token names no reservation), the key is paused, or a
 *   dependency has not released in time for the slots' bound: those left leave the log (then the
 *   reservation counts as used), and the call books a slot as any call.
 */
export type ClaimStatus = 'started' | 'early' | 'late' | 'used' | 'moved';

export interface ClaimResult {
  readonly status: ClaimStatus;
  /** Store-clock time (ms, rounded up) the claim was decided at. */
  readonly now: number;
  /** `early`: ms until the slots start. */
  readonly waitMs: number;
  /** `started`: the call's slots. */
  readonly members: readonly string[];
}

/** Calls to count in a key's log that the store did not decide: see `Store.restore`. */
export interface RestoredSlot {
  /** The call's release (its completion, or the bound of one still in flight): ms from the store's now (negative = in the past). */
  readonly releaseInMs: number;
  /** Slots the call took. */
  readonly cost: number;
}

/**
 * Something about the store its users should know while it happens (a `storeWarning` event of
 * every throttle on the store):
 * - `evicting`: Redis evicts keys under `maxmemory`, and what the store does about it;
 * - `evictionsStopped`: none for a while, and the store works as before;
 * - `cannotWatch`: the store cannot read what it watches (`INFO` denied to its user);
 * - `evictionCheckFailed`: a check of the evictions failed (Redis unreachable, a script refused),
 *   once until a check succeeds;
 * - `heartbeatFailed`: the recovery heartbeat could not check for lost data, once until a beat succeeds;
 * - `stampFailed`: this process could not write its liveness stamp, once until a stamp succeeds;
 * - `reapFailed`: it could not read the stamps or give back the slots of dead processes, once until it can;
 * - `subscribeFailed`: it could not subscribe its wake channels again after a reconnection, once until a subscription succeeds;
 * - `claimFailed`: it could not claim its new connection on a young Redis, once per connection.
 */
export interface StoreNotice {
  readonly kind:
    | 'evicting'
    | 'evictionsStopped'
    | 'cannotWatch'
    | 'evictionCheckFailed'
    | 'heartbeatFailed'
    | 'stampFailed'
    | 'reapFailed'
    | 'subscribeFailed'
    | 'claimFailed';
  /** A sentence for a log: the cause, what the store does, and the fix. */
  readonly message: string;
  /** Redis's `maxmemory-policy` ('unknown' where it cannot be read). */
  readonly policy?: string;
  /** Redis's `evicted_keys` (INFO stats) at the time. */
  readonly evictedKeys?: number;
  /** What failed (every `…Failed` kind): the store's error. */
  readonly error?: unknown;
}

/** Usage of one rule of a key (see `InspectResult`). */
export interface RuleUsage {
  readonly limit: number;
  readonly windowMs: number;
  /** Slots of calls that started (running, or completed within the window): they count against this rule now. */
  readonly used: number;
  /** Calls that could still start now under this rule: `limit − used − bookedAhead`, at least 0. */
  readonly remaining: number;
  /** ms until the oldest slot that counts stops counting (0 when none counts). */
  readonly resetInMs: number;
}

/** Usage of one key, read without booking anything. */
export interface InspectResult {
  /** Store-clock time of the reading (ms). */
  readonly now: number;
  /** Per rule: `limit`, `windowMs`, `used` (slots that count now; with `maxHoldMs`, not those booked ahead), `resetInMs`. */
  readonly rules: ReadonlyArray<Omit<RuleUsage, 'remaining'>>;
  /** With `maxHoldMs`: slots booked for calls that start later (they sleep until then), in every process; not in `used`. */
  readonly bookedAhead?: number;
  /** ms until one more call could start (0 = now). */
  readonly nextFreeInMs: number;
  /** ms until a pause the vendor asked for ends (0 = not paused). */
  readonly pausedForMs: number;
  /** False: the store holds nothing at all for the key (a new key, idle past its windows, or another namespace). */
  readonly stored?: boolean;
  /**
   * The limits the key learned from its vendor (lib/learning.ts), in force now. `rules` then shows
   * each rule with the tighter limit, followed by the learned limits of other windows.
   */
  readonly learned?: readonly LearnedLimit[];
}

/** What `Store.learn` did. */
export interface LearnResult {
  /** A limit in force changed (learned anew, lowered, raised or forgotten). */
  readonly changed: boolean;
  /** The limits the key learned, in force now. */
  readonly learned: readonly LearnedLimit[];
  /** Slots booked ahead were taken out, and the key paused until this (store clock, ms) so that their calls book again; 0 when not. */
  readonly pausedUntil: number;
  /** Slots held for calls the vendor counted and this store did not make (mode `'hold'`). */
  readonly held: number;
}

/** Each rule's usage with `remaining`: calls that could start now, `limit − used − bookedAhead` (at least 0). */
export function withRemaining(usage: InspectResult): RuleUsage[] {
  const ahead = usage.bookedAhead ?? 0;
  return usage.rules.map((rule) => ({ ...rule, remaining: Math.max(0, rule.limit - rule.used - ahead) }));
}

/**
 * Where the shared log of each key lives. One decision algorithm, several stores: every store must
 * give the same answers for the same sequence of requests and clock readings.
 */
export interface Store {
  reserve(request: ReserveRequest): Promise<ReserveResult>;
  /**
   * Applies completions and releases of earlier slots, and wakes decisions waiting for the key. The
   * store may hold the write back up to `coalesceMs` to send it with others: a release is its
   * response time whenever written, and the room it frees comes a window after it.
   */
  settle(namespace: string, key: string, settle: readonly Settlement[], coalesceMs?: number): Promise<void>;
  /**
   * Every decision reads one clock (true: one Redis, or this process). A store whose decisions read
   * several clocks (a Redis Cluster: each master's `TIME`) leaves it out, and each decision's own
   * round trip then places its call (lib/time.ts).
   */
  readonly singleClock?: boolean;
  /**
   * `reserve()` takes `also`: one call decided in several keys at once. A store without it takes
   * calls of one key only. A Redis Cluster holds to it for keys whose hash tags share a slot.
   */
  readonly multiKey?: boolean;
  /**
   * False: `listen()` never hears (a Redis reached over HTTP has no pub/sub). A call the store
   * deferred then asks again when its slot could first be free (`waitMs`), not only at its bound.
   * Left out: completions are announced.
   */
  readonly announces?: boolean;
  /**
   * The key's usage. With `maxHoldMs` (the throttle's), a slot released later than now + `maxHoldMs`
   * is one booked ahead (its call has not started), counted in `bookedAhead` and not in `used`;
   * without it every slot that counts is in `used`.
   */
  inspect(namespace: string, key: string, rules: readonly Rule[], maxHoldMs?: number): Promise<InspectResult>;
  /**
   * Optional: forgets the key's calls that started, for every process sharing the store
   * (`Throttle.reset`), with its pause and hold; slots booked to start later (released after now +
   * `maxHoldMs`) stay. Processes waiting on the key ask again. `retainMs`: the history the key keeps.
   */
  reset?(namespace: string, key: string, retainMs: number, maxHoldMs: number): Promise<void>;
  /**
   * Calls `listener(key)` whenever a completion or release is written for a key of `namespace` on
   * which a decision was deferred (in any process sharing the store). Resolves, with a function that
   * stops listening, once no announcement made after it can be missed. `listener('')` means any
   * key (announcements may have been missed: a lost connection). A store without it leaves
   * deferred callers to ask again at their bound.
   */
  listen?(namespace: string, listener: (key: string) => void): Promise<() => void>;
  /**
   * Optional: while the store is known to be out of reach (its connection refused), a promise that
   * resolves once it can be reached again; otherwise undefined. A call under `onStoreError: 'wait'`
   * waits for it, within its `maxDelayMs`, instead of asking again with backoff.
   */
  reconnected?(): Promise<void> | undefined;
  /**
   * Optional: this process no longer waits for a completion on the key (the calls that waited went
   * away), so that announcements go to processes that still wait.
   */
  leave?(namespace: string, key: string): Promise<void>;
  /**
   * Starts no call of the key before `ms` from now (store clock), for every process: the vendor said
   * its limit was hit. A longer pause already in place is kept. With `maxHoldMs` (the throttle's),
   * slots booked ahead to start before the pause ends (released later than now + `maxHoldMs`) leave
   * the log: their calls learn of the pause when their start comes (`pausedUntil`) and book again, and the room goes to whoever asks first. Resolves to the pause's
   * end (store clock).
   */
  pause(namespace: string, key: string, ms: number, maxHoldMs?: number): Promise<number>;
  /**
   * Optional: limits the key learned from its vendor, for every process (lib/learning.ts): each entry
   * replaces what was learned for its window (limit 0 forgets it, if `source` taught it). Decisions
   * count the key under the tighter of each rule and what was learned for its window, and under a
   * learned limit of another window within the history kept, counting the calls already in the log.
   * With `maxHoldMs`, when a limit goes down, slots booked ahead (under the old limit) leave the log
   * and the key pauses until the last of them would have started, as `pause` does: their calls
   * learn of it when their start comes and book again under the new limit.
   */
  learn?(namespace: string, key: string, entries: readonly LearnEntry[], maxHoldMs: number): Promise<LearnResult>;
  /**
   * Optional: the end of the key's vendor pause (store clock, ms; 0 or past when none). A call booked
   * to start later asks for it when its start comes: a pause that ends after its start was set after
   * the booking (a decision never books into a pause), so the call gives its slot back and books again
   * (as it does when this fails, up to the third failure in a row, which fails the call with
   * `StoreUnavailableError`). A store without it must not take slots out of the log in `pause`.
   * `since` (`performance.now()` when the call's booking was asked for): a store that hears of every
   * pause set since then may answer from what it heard, without asking, and a store that holds its
   * pauses itself answers at once (a number); one that must ask answers with a promise.
   */
  pausedUntil?(namespace: string, key: string, since: number): number | Promise<number>;
  /**
   * Optional: whether this process may start its slots `members`, booked to start at `startAt`
   * (store clock), right now. False when the store may have given them back (another process took
   * this one for dead while its event loop or its link stalled): the call books again instead.
   * Asked synchronously just before a call starts.
   */
  mayStart?(namespace: string, members: readonly string[], startAt: number): boolean;
  /**
   * Optional: starts a call now on slots reserved earlier (`ReserveRequest.reserved`), by this
   * process or another, if they are still in the key's log at their bound, their start has come, a
   * call started now reaches the vendor within their bound, each of their dependencies released
   * a window ago, and no claim took them before: the call's own slots take their place, to count
   * to now + `maxHoldMs` until settled. A reservation is claimed at most once, whatever the claims
   * race. A dependency claimed since is followed to the slots that took its place.
   */
  claim?(request: ClaimRequest): Promise<ClaimResult>;
  /**
   * Adds calls that started without this store deciding them (decided by a process's local fallback
   * while the store was down), so that the store's next decisions count them.
   */
  restore(namespace: string, key: string, slots: readonly RestoredSlot[], retainMs: number): Promise<void>;
  /**
   * Optional: this process's own calls on the key that may still count, as `restore()` takes them
   * (release in ms from now). The throttle's local fallback (`onStoreError: 'local'`) counts them
   * when it takes a key over, so that calls made through the store just before it failed are not
   * forgotten. `RedisStore` answers from its recovery journal.
   */
  recentCalls?(namespace: string, key: string): readonly RestoredSlot[];
  /**
   * Optional: the namespace's throttle closes, its calls settled. A store whose keys live to the
   * bounds of the calls booked there shortens them to what the slots still need.
   */
  tidy?(namespace: string): Promise<void>;
  /** Optional: calls `listener` with each {@link StoreNotice}; returns a function that stops it. */
  watch?(listener: (notice: StoreNotice) => void): () => void;
  /**
   * Optional: true while the store can answer nothing because its owner closed what it runs on (a
   * `RedisStore` whose client ended: `quit()`, `disconnect()`). Calls then fail with the store's
   * error whatever `onStoreError` says: no backoff for a store nobody reopens, no local decisions.
   */
  readonly ended?: boolean;
  /** Frees what the store itself owns. A client passed in by the user is left open. */
  close(): Promise<void>;
}

/** Each dependency of a claim names one of its `keys` keys (`Dependency`'s part), else `ThrottleConfigError`: a store looks up no other. */
/**
 * How long after `now` a started claim's pointer keys live (as lua/claim.lua): until the call's
 * slots count no longer (a dependency followed then is released), and past the claim's last moment.
 */
export function pointerLife(bound: number, maxHoldMs: number, now: number, retainMs: number): number {
  return Math.ceil(Math.max(bound - maxHoldMs - now + 1, maxHoldMs + Math.ceil(retainMs)));
}

export function checkDepParts(deps: readonly Dependency[], keys: number): void {
  for (const [, , part = 0] of deps) {
    if (!Number.isInteger(part) || part < 0 || part >= keys)
      throw new ThrottleConfigError(`Expected each dependency of a claim to name one of its ${keys} keys, got part ${String(part)}`, 'token');
  }
}
