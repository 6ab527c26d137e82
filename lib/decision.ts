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
 * When to ask again about a slot deferred on a call in flight: a quarter of the call's remaining
 * estimate, or of the wait once the estimate has passed; between 5 and 50 ms (as `vt_retry_ms` in
 * lua/includes/log.lua).
 */
export function retryMs(inFlightMs: number, waitMs: number): number {
  const base = inFlightMs > 0 ? inFlightMs : waitMs;
  return Math.min(50, Math.max(5, Math.ceil(base / 4)));
}

/** Whether a slot's score is still an estimate: its call has not reported its completion. */
export function isUnsettled(member: string): boolean {
  return !member.endsWith(SETTLED_SUFFIX);
}

/**
 * `confirm.lua` in TypeScript: whether a slot starting at `startAt`, numbered from `first`, still
 * leaves room under every rule among the slots numbered before it.
 */
export function stillFits(
  members: readonly string[],
  scores: readonly number[],
  startAt: number,
  first: number,
  cost: number,
  rules: readonly Rule[],
): boolean {
  return rules.every(({ limit, windowMs }) => {
    let counted = 0;
    members.forEach((member, i) => {
      if (Number.parseInt(member, 10) < first && scores[i]! + windowMs > startAt) counted++;
    });
    return counted <= limit - cost;
  });
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
  let binding = -1;
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
