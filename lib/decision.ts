import type { Rule } from './rules.js';

/**
 * The decision algorithm, shared by every store (the Redis store runs the same steps in
 * `vt_reserve`, lua/includes/ops.lua). See docs/design.md for the proof.
 *
 * A key's log holds one score per booked slot: the time after which the slot's call can no longer
 * be "in flight" — its completion once known, else its start plus a hold. A slot counts against a
 * rule `{limit N, window T}` at time t while `score + T > t`. With the scores sorted ascending
 * (x[0] ≤ … ≤ x[m-1]), `cost` more slots fit at t when at most `N - cost` scores exceed `t - T`,
 * that is when `x[m - N + cost - 1] + T ≤ t`. So the earliest start is
 *
 *     t = max(now, last, pausedUntil, x[m - N_r + cost - 1] + T_r  for every rule r)
 *
 * where `last` is the latest start already booked (bookings stay in order: first asked, first served)
 * and `pausedUntil` the end of a pause the vendor asked for.
 */
export interface SlotPlan {
  /** Earliest start (store clock, ms) at which `cost` more slots keep every rule. */
  readonly startAt: number;
  /** Index of the rule that pushed `startAt` furthest, {@link PAUSED}, or -1 when neither did. */
  readonly ruleIndex: number;
  /** Index in the sorted log of the slot that set `startAt` when a rule did (else -1). */
  readonly binding: number;
}

/**
 * A slot's member is its number while its call's completion is unknown (the score is then an
 * estimate, start + hold) and gets this suffix once the completion is settled (the score is then
 * the completion time). So a decision can tell a known completion from an estimate.
 */
export const SETTLED_SUFFIX = '!';

/**
 * When to ask again about a slot deferred on a call in flight: when the call's estimate is reached
 * (its completion is then likely known; at least 5 ms), or, once the estimate has passed, after a
 * quarter of the wait, between 5 and 50 ms (as `vt_retry_ms` in lua/includes/log.lua).
 */
export function retryMs(inFlightMs: number, waitMs: number): number {
  if (inFlightMs > 0) return Math.max(5, Math.ceil(inFlightMs));
  return Math.min(50, Math.max(5, Math.ceil(waitMs / 4)));
}

/** Whether a slot's score is still an estimate: its call has not reported its completion. */
export function isUnsettled(member: string): boolean {
  return !member.endsWith(SETTLED_SUFFIX);
}

/**
 * `vt_confirm` (lua/includes/ops.lua) in TypeScript: whether a slot starting at `startAt`, numbered from `first`, still
 * leaves room under every rule among the slots numbered before it.
 */
export function stillFits(
  members: readonly string[],
  scores: readonly number[],
  startAt: number,
  first: number,
  cost: number,
  rules: readonly Rule[],
  bucketsOf: BucketsOf = () => [],
): boolean {
  return rules.every((rule) => {
    const { limit, windowMs } = rule;
    // Folded calls keep no number: every bucket that still counts at the start is counted.
    let counted = rule.bucketMs ? bucketsOf(rule).reduce((sum, bucket) => sum + (bucket.end + windowMs > startAt ? bucket.count : 0), 0) : 0;
    members.forEach((member, i) => {
      if (Number.parseInt(member, 10) < first && scores[i]! + windowMs > startAt) counted++;
    });
    return counted <= limit - cost;
  });
}

/** `ruleIndex` of a slot pushed back by a pause the vendor asked for (429 with Retry-After, …). */
export const PAUSED = -2;

/**
 * `ruleIndex` of a deferred answer while a store that lost its data waits for live processes to put
 * back their calls (see `RedisStore`): ask again after `retryMs`.
 */
export const RECOVERING = -3;

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

/**
 * @param size number of scores in the log
 * @param scoreAt the i-th smallest score, 0 ≤ i < size
 * @param bucketsOf the live buckets of a bucketed rule (see `Rule.bucketMs`)
 */
export function planSlot(
  size: number,
  scoreAt: (index: number) => number,
  rules: readonly Rule[],
  cost: number,
  now: number,
  last: number,
  pausedUntil = 0,
  bucketsOf: BucketsOf = () => [],
): SlotPlan {
  let startAt = Math.max(now, last);
  let ruleIndex = -1;
  let binding = -1;
  if (pausedUntil > now && pausedUntil >= startAt) {
    startAt = pausedUntil;
    ruleIndex = PAUSED;
  }
  for (let r = 0; r < rules.length; r++) {
    const rule = rules[r]!;
    if (rule.bucketMs) {
      const { freeAt, index } = bucketedFreeAt(size, scoreAt, bucketsOf(rule), rule, cost, startAt);
      if (freeAt > startAt) {
        startAt = freeAt;
        ruleIndex = r;
        binding = index;
      }
      continue;
    }
    const index = size - rule.limit + cost - 1;
    if (index < 0) continue;
    const freeAt = scoreAt(index) + rule.windowMs;
    if (freeAt > startAt) {
      startAt = freeAt;
      ruleIndex = r;
      binding = index;
    }
  }
  return { startAt, ruleIndex, binding };
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
