import { createHash } from 'node:crypto';
import type { Rule } from './rules.js';

/**
 * The decision algorithm, shared by every store (the Redis store runs the same steps in
 * lua/includes/decide.lua). See docs/design.md for the proof.
 *
 * A key's log holds one score per slot: its *release*. While the slot's call may still be on its
 * way to the vendor, that is a bound, start + `maxHoldMs`; once the call completed, its response
 * time, never above the bound. So a score at or before now is known, and a later one is a call in
 * flight or booked ahead. A slot counts against a rule `{limit N, window T}` at time t while
 * `score + T > t`. With the scores sorted ascending (x[0] ≤ … ≤ x[m-1]), `cost` more slots fit at t
 * when at most `N - cost` scores exceed `t - T`, that is when the binding score
 * `b = x[m - N + cost - 1]` has `b + T ≤ t`. So:
 *
 * - every binding score known (b ≤ now): the call starts at `max(now, pause, b_r + T_r)`;
 * - some binding score still a bound (b > now): where the call could start depends on when that
 *   call completes. The decision books nothing and answers the bound: the caller waits for a
 *   completion on the key, or until the bound has passed (then b is known).
 */
export interface SlotPlan {
  /** Earliest start (store clock, ms) that the known binding scores and the pause allow: `now` itself, or a whole ms after it. */
  readonly startAt: number;
  /** Index of the rule that set `startAt`, {@link PAUSED}, or -1 when neither did. */
  readonly ruleIndex: number;
  /** The earliest binding score still in flight (> now) whose window reaches past `startAt`, if any. */
  readonly bound: number | undefined;
  /**
   * No slot before this: `startAt`, or later where a binding call in flight started after now
   * (booked ahead): it releases at the soonest at its start, `bound - maxHoldMs`.
   */
  readonly earliest: number;
}

/** `ruleIndex` of a slot pushed back by a pause the vendor asked for (429 with Retry-After, …). */
export const PAUSED = -2;

/**
 * `ruleIndex` of a deferred answer while a store that lost its data waits for live processes to put
 * back their calls (see `RedisStore`): ask again after `retryMs`.
 */
export const RECOVERING = -3;

/** `ruleIndex` of a slot set by a limit the key learned from its vendor, of a window no configured rule has (lib/learning.ts). */
export const LEARNED = -4;

/** Completed calls folded into one bucket of a bucketed rule: they count as if they ended at `end`. */
export interface Bucket {
  readonly end: number;
  readonly count: number;
}

/** Buckets of a bucketed rule that still count at `now`, ascending by end. */
export type BucketsOf = (rule: Rule) => readonly Bucket[];

/**
 * Index of the bucket a completed call ending at `score` folds into: it counts as if it ended at
 * `index × bucketMs`, the end of its bucket, which is never earlier than `score` (so a bucketed
 * rule can only hold a call back, by less than one bucket width, never let one through early).
 */
export function bucketIndex(score: number, bucketMs: number): number {
  return Math.ceil(score / bucketMs);
}

/**
 * How far back a store keeps every completed call one by one: the longest window of the exact rules.
 * Older completed calls fold into the buckets of the bucketed rules (0: all of them, at once).
 */
export function foldHorizon(rules: readonly Rule[]): number {
  return rules.reduce((max, rule) => (rule.bucketMs ? max : Math.max(max, rule.windowMs)), 0);
}

/**
 * Earliest time from `from` at which `cost` more calls keep a bucketed rule: the calls still kept
 * one by one (the sorted log) plus the buckets. With the j oldest buckets gone (from their end +
 * window on), at most `limit − cost − (calls in the other buckets)` calls of the log may still count,
 * which the index rule of {@link planSlot} turns into a time; the answer is the earliest over j.
 * Returns the time and the index in the log of the slot that set it (-1 when a bucket or `from` did).
 */
export function bucketedFreeAt(
  size: number,
  scoreAt: (index: number) => number,
  buckets: readonly Bucket[],
  rule: Rule,
  cost: number,
  from: number,
): { readonly freeAt: number; readonly index: number } {
  let remaining = buckets.reduce((sum, bucket) => sum + bucket.count, 0);
  let best = Infinity;
  let bestIndex = -1;
  let goneUntil = -Infinity;
  for (let j = 0; j <= buckets.length; j++) {
    if (goneUntil >= best) break;
    const allowed = rule.limit - cost - remaining;
    if (allowed >= 0) {
      let t = Math.max(from, goneUntil);
      let index = -1;
      const at = size - allowed - 1;
      if (at >= 0 && scoreAt(at) + rule.windowMs > t) {
        t = scoreAt(at) + rule.windowMs;
        index = at;
      }
      if (t < best) {
        best = t;
        bestIndex = index;
      }
    }
    if (j < buckets.length) {
      goneUntil = buckets[j]!.end + rule.windowMs;
      remaining -= buckets[j]!.count;
    }
  }
  return { freeAt: best, index: bestIndex };
}

/** `waitOn` of a plan that waits on no log (never written). */
const NO_LOGS: number[] = [];

/** One key's log as a decision reads it. */
export interface LogView {
  /** Number of scores in the log. */
  readonly size: number;
  /** The i-th smallest score, 0 ≤ i < size. */
  readonly scoreAt: (index: number) => number;
  readonly rules: readonly Rule[];
  /** How many of `rules` are the configured ones (the rest: learned limits of other windows, lib/learning.ts). @default rules.length */
  readonly configured?: number;
  /** No start before this (a vendor pause on the key), store clock; 0 = none. */
  readonly pausedUntil?: number;
  /** The live buckets of a bucketed rule (see `Rule.bucketMs`). */
  readonly bucketsOf?: BucketsOf;
  /** The member of the i-th smallest score: a reservation's dependencies name them. */
  readonly memberAt?: (index: number) => string;
  /** Whether the i-th smallest score is a reservation's slot (`ReserveRequest.reserved`). */
  readonly reservedAt?: (index: number) => boolean;
}

/**
 * @param size number of scores in the log
 * @param scoreAt the i-th smallest score, 0 ≤ i < size
 * @param now the store's clock as read (not rounded: a slot is free now only if it is free at the
 *   moment the call can start, never before the reading); scores at or before its ceiling are known
 * @param bucketsOf the live buckets of a bucketed rule (see `Rule.bucketMs`)
 */
export function planSlot(
  size: number,
  scoreAt: (index: number) => number,
  rules: readonly Rule[],
  cost: number,
  now: number,
  maxHoldMs: number,
  pausedUntil = 0,
  bucketsOf: BucketsOf = () => [],
): SlotPlan {
  return planSlots([{ size, scoreAt, rules, pausedUntil, bucketsOf }], cost, now, maxHoldMs);
}

/**
 * The decision for a call that counts in several keys at once (one atomic step): each key's rules
 * apply to that key's log, and the call starts when every rule of every key allows it, exactly as
 * if the rules of all keys were one key's. `ruleIndex` counts the rules of the logs in order (the
 * first log's rules, then the second's, ...); `waitOn` lists the logs whose binding call is in flight.
 *
 * `graceMs` (a reservation, with its grace within `maxHoldMs`): never deferred. Where a
 * binding score is still a bound, the slot starts at the soonest that call could release (its
 * start: {@link reservedHold}), and `deps` lists the slots so taken to be released (see
 * {@link reservationDeps}); a bucketed rule's bound counts released at its score instead. With
 * more than {@link MOST_DEPS} of them, every bound does.
 */
export function planSlots(
  logs: readonly LogView[],
  cost: number,
  now: number,
  maxHoldMs: number,
  graceMs?: number,
): SlotPlan & { readonly waitOn: readonly number[]; readonly deps?: readonly Dependency[] } {
  const reserved = graceMs !== undefined;
  const nowMs = Math.ceil(now);
  let startAt = now;
  let ruleIndex = -1;
  for (const { pausedUntil = 0 } of logs) {
    if (pausedUntil > startAt) {
      startAt = pausedUntil;
      ruleIndex = PAUSED;
    }
  }
  const pending: Pending[] = [];
  let offset = 0;
  for (let l = 0; l < logs.length; l++) {
    const { size, scoreAt, rules, bucketsOf, configured = rules.length } = logs[l]!;
    for (let r = 0; r < rules.length; r++) {
      // A call of `cost` never waits for more room than a rule has (a learned limit below it).
      const rule = rules[r]!.limit >= cost ? rules[r]! : { ...rules[r]!, limit: cost };
      const index = r < configured ? offset + r : LEARNED;
      let score: number | undefined;
      let freeAt: number | undefined;
      let at: number | undefined;
      if (rule.bucketMs) {
        const buckets = bucketsOf?.(rule) ?? [];
        const found = bucketedFreeAt(size, scoreAt, buckets, rule, cost, now);
        freeAt = found.freeAt;
        if (found.index >= 0) score = scoreAt(found.index);
      } else {
        at = size - rule.limit + cost - 1;
        if (at >= 0) {
          score = scoreAt(at);
          freeAt = score + rule.windowMs;
        }
      }
      if (score !== undefined && score > nowMs) pending.push([score, rule.windowMs, index, l, at]);
      else if (freeAt !== undefined && freeAt > startAt) {
        startAt = freeAt;
        ruleIndex = index;
      }
    }
    offset += configured;
  }
  let bound: number | undefined;
  let earliest = startAt;
  let waitOn: number[] = NO_LOGS;
  for (const [score, windowMs, r, l, at] of pending) {
    if (score + windowMs <= startAt) continue;
    // A reservation's bucketed bound counts released at its score (as vt_bounds's RESERVED).
    let soonest = Math.max(nowMs, score - maxHoldMs) + windowMs;
    if (reserved) soonest = at === undefined ? score + windowMs : Math.max(nowMs, score - reservedHold(logs[l]!, at, maxHoldMs, graceMs)) + windowMs;
    if (!reserved) {
      if (bound === undefined || score < bound) bound = score;
      if (waitOn === NO_LOGS) waitOn = [l];
      else if (!waitOn.includes(l)) waitOn.push(l);
    }
    if (soonest > earliest) {
      earliest = soonest;
      ruleIndex = r;
    }
  }
  if (!reserved) return { startAt, ruleIndex, bound, earliest, waitOn };
  const deps = reservationDeps(logs, pending, Math.ceil(earliest));
  if (deps !== false) return { startAt: earliest, ruleIndex, bound: undefined, earliest, waitOn: NO_LOGS, deps };
  // Too many: every binding bound counts released at its score (as vt_bounds_sure).
  for (const [score, windowMs, r] of pending) {
    if (score + windowMs > startAt) {
      startAt = score + windowMs;
      ruleIndex = r;
    }
  }
  return { startAt, ruleIndex, bound: undefined, earliest: startAt, waitOn: NO_LOGS, deps: NO_DEPS };
}

/**
 * How long before its score the binding slot at `at` released at the soonest, for a reservation (as
 * vt_reserved_hold): `maxHoldMs` for a reservation's slot (it holds the grace), `maxHoldMs` −
 * `graceMs` for a call's; where slots of both kinds share its score, a call's.
 */
function reservedHold({ size, scoreAt, reservedAt }: LogView, at: number, maxHoldMs: number, graceMs: number): number {
  const score = scoreAt(at);
  let from = at;
  while (from > 0 && scoreAt(from - 1) === score) from--;
  for (let i = from; i < size && scoreAt(i) === score; i++) if (reservedAt?.(i) !== true) return maxHoldMs - graceMs;
  return maxHoldMs;
}

/** A binding score still a bound: the score, its rule's window, the rule's index, the log, and its place in the log (none for a bucketed rule). */
type Pending = readonly [score: number, windowMs: number, rule: number, log: number, at: number | undefined];

/**
 * A slot a reservation took to be released by its start (`reservationDeps`), the window of the
 * rule it counts in, and, for a reservation of several keys, the index of its key among them
 * (none: the first): the reservation's call may start once the slot's release is known and at
 * least this long ago.
 */
export type Dependency = readonly [member: string, windowMs: number, part?: number];

/** A reservation's dependencies, at most (as lua/includes/decide.lua's VT_RESERVE_MOST_DEPS). */
export const MOST_DEPS = 128;

const NO_DEPS: readonly Dependency[] = [];

/**
 * A reservation's dependencies at its start `start` (as lua/includes/decide.lua, vt_deps): for each
 * exact rule whose binding score was still a bound, the slots at or below it in the log that count
 * at `start` unless released by then, each with the rule's window; false when more than MOST_DEPS.
 */
function reservationDeps(logs: readonly LogView[], pending: readonly Pending[], start: number): readonly Dependency[] | false {
  let deps: Dependency[] | undefined;
  for (const [score, windowMs, , l, at] of pending) {
    if (at === undefined || score + windowMs <= start) continue;
    const { size, scoreAt, memberAt } = logs[l]!;
    let below = 0;
    while (below < size && scoreAt(below) <= start - windowMs) below++;
    for (let i = below; i <= at; i++) {
      deps ??= [];
      if (deps.length === MOST_DEPS) return false;
      deps.push(l === 0 ? [memberAt!(i), windowMs] : [memberAt!(i), windowMs, l]);
    }
  }
  return deps ?? NO_DEPS;
}

/** Dependencies as a reservation's members carry their hash: "MEMBER WINDOW ...", the window followed by "@PART" for a key after the first (vt_deps's list). */
export function depsText(deps: readonly Dependency[]): string {
  return deps.map(([member, windowMs, part]) => (part ? `${member} ${windowMs}@${part}` : `${member} ${windowMs}`)).join(' ');
}

/** Dependencies from their list (`depsText`, vt_deps's); none from nothing. */
export function depsOf(text: string | undefined): readonly Dependency[] {
  if (text === undefined || text === '') return NO_DEPS;
  const parts = text.split(' ');
  const deps: Dependency[] = [];
  for (let i = 0; i + 1 < parts.length; i += 2) {
    const [windowMs, part] = parts[i + 1]!.split('@');
    deps.push(part === undefined ? [parts[i]!, Number(windowMs)] : [parts[i]!, Number(windowMs), Number(part)]);
  }
  return deps;
}

/**
 * What a reservation's members' names end with: "~" and 16 hex digits of the SHA-1 of `depsText`,
 * followed, for a reservation of several keys, by "|" and its encoded keys in order (so that a
 * token with its keys reordered names no slot: its dependencies name keys by place); none without
 * dependencies.
 */
export function depsSuffix(deps: readonly Dependency[], keys: readonly string[] = []): string {
  if (deps.length === 0) return '';
  const text = keys.length > 1 ? `${depsText(deps)}|${keys.join(' ')}` : depsText(deps);
  return `~${createHash('sha1').update(text).digest('hex').slice(0, 16)}`;
}

/** How many scores in the sorted log count against a window of `windowMs` at time `now`. */
export function countInWindow(size: number, scoreAt: (index: number) => number, windowMs: number, now: number): number {
  // Binary search for the first score with score + windowMs > now.
  let lo = 0;
  let hi = size;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (scoreAt(mid) + windowMs > now) hi = mid;
    else lo = mid + 1;
  }
  return size - lo;
}
