import type { Rule } from './rules.js';

/**
 * The decision algorithm, shared by every store (the Redis store runs the same steps in
 * `lua/reserve.lua`). See docs/design.md for the proof.
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
}

/** `ruleIndex` of a slot pushed back by a pause the vendor asked for (429 with Retry-After, …). */
export const PAUSED = -2;

/**
 * @param size number of scores in the log
 * @param scoreAt the i-th smallest score, 0 ≤ i < size
 */
export function planSlot(
  size: number,
  scoreAt: (index: number) => number,
  rules: readonly Rule[],
  cost: number,
  now: number,
  last: number,
  pausedUntil = 0,
): SlotPlan {
  let startAt = Math.max(now, last);
  let ruleIndex = -1;
  if (pausedUntil > now && pausedUntil >= startAt) {
    startAt = pausedUntil;
    ruleIndex = PAUSED;
  }
  for (let r = 0; r < rules.length; r++) {
    const { limit, windowMs } = rules[r]!;
    const index = size - limit + cost - 1;
    if (index < 0) continue;
    const freeAt = scoreAt(index) + windowMs;
    if (freeAt > startAt) {
      startAt = freeAt;
      ruleIndex = r;
    }
  }
  return { startAt, ruleIndex };
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
