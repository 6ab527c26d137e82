import type { Rule } from '../../lib/rules.js';
import type { ReserveStatus } from '../../lib/store.js';

/**
 * The reference model: what a store must answer, written the slow, obvious way (exact rules only),
 * for calls of one key or of several at once.
 * It keeps every slot with its score (its release: start + maxHoldMs until a completion lowers it)
 * and, to place a new call, tries each candidate time in order and counts, for every rule, the
 * slots whose score + window lies after that time. No sorting tricks, no index arithmetic.
 *
 * - A slot whose score is after now is a call still in flight (or booked ahead). A rule whose slots
 *   in flight alone leave no room for the call cannot say when the call fits until they complete.
 * - The other rules (and a vendor pause) give the earliest start from what is known.
 * - If a rule of the first kind still holds the call back at that start, the decision is deferred
 *   (ask again by the earliest score that frees such a rule), or refused when the caller cannot
 *   wait (maxDelayMs 0, or no slot within it even if those calls completed at their starts);
 *   otherwise the call is booked there, or refused when that is further than maxDelayMs.
 */
interface Slot {
  readonly member: string;
  score: number;
}

interface KeyState {
  slots: Slot[];
  pausedUntil: number;
  /** A decision was deferred: the next settle on the key announces itself. */
  waiting: boolean;
}

export interface ModelRequest {
  readonly rules: readonly Rule[];
  readonly cost: number;
  readonly maxDelayMs: number;
  readonly maxHoldMs: number;
}

export interface ModelDecision {
  readonly status: ReserveStatus;
  readonly startAt: number;
  readonly waitMs: number;
  readonly retryMs: number;
  readonly ruleIndex: number;
}

export class ReferenceModel {
  readonly #keys = new Map<string, KeyState>();

  /**
   * What a store decides for `request` on `key` at store time `now` (exact, possibly fractional;
   * the store rounds it up for its comparisons). Changes nothing: see `apply`.
   */
  decide(key: string, now: number, request: ModelRequest): ModelDecision {
    return this.decideKeys([{ key, rules: request.rules }], now, request);
  }

  /**
   * The same for a call that counts in several keys at once: every rule applies to its own key's
   * slots, and the call must fit under all of them (rule indices count on from key to key).
   */
  decideKeys(keys: ReadonlyArray<{ readonly key: string; readonly rules: readonly Rule[] }>, now: number, request: Omit<ModelRequest, 'rules'>): ModelDecision {
    const { cost } = request;
    const nowMs = Math.ceil(now);
    // Every rule with the slots of its key.
    const all = keys.flatMap(({ key, rules }) => rules.map((rule) => ({ rule, slots: this.#state(key).slots })));
    const pausedUntil = Math.max(0, ...keys.map(({ key }) => this.#state(key).pausedUntil));
    // A call may start at the clock reading itself (not rounded up), or at a whole ms after it.
    const base = Math.max(now, pausedUntil);
    type Entry = (typeof all)[number];
    const counting = ({ rule, slots }: Entry, t: number): number => slots.filter((slot) => slot.score + rule.windowMs > t).length;
    const fits = (entry: Entry, t: number): boolean => counting(entry, t) <= entry.rule.limit - cost;
    const known = all.filter(({ rule, slots }) => slots.filter((slot) => slot.score > nowMs).length <= rule.limit - cost);
    const candidates = [base, ...known.flatMap(({ rule, slots }) => slots.map((slot) => slot.score + rule.windowMs))].filter((t) => t >= base);
    candidates.sort((a, b) => a - b);
    const start = candidates.find((t) => known.every((entry) => fits(entry, t)))!;
    let ruleIndex = pausedUntil > now ? -2 : -1;
    // Scores are whole ms: the rule that sets the start is the first one that does not fit 1 ms before.
    if (start > base) ruleIndex = all.findIndex((entry) => known.includes(entry) && !fits(entry, start - 1));
    const startAt = Math.ceil(start);
    // Rules filled by calls in flight that still hold the call back at startAt, in rule order: the
    // score each waits for (the lowest score at or after which the rule has room) is the bound to
    // ask again by; its call started at the soonest at that score - maxHoldMs (or now), so the
    // rule has no room before that plus its window.
    let bound: number | undefined;
    let earliest = start;
    for (const [r, entry] of all.entries()) {
      if (known.includes(entry) || fits(entry, start)) continue;
      const { rule, slots } = entry;
      const frees = slots.map((slot) => slot.score).filter((v) => slots.filter((slot) => slot.score > v).length <= rule.limit - cost);
      const at = Math.min(...frees);
      if (bound === undefined || at < bound) bound = at;
      const soonest = Math.max(nowMs, at - request.maxHoldMs) + rule.windowMs;
      if (soonest > earliest) {
        earliest = soonest;
        ruleIndex = r;
      }
    }
    const waitMs = earliest <= now ? 0 : Math.ceil(earliest - now);
    const limited = waitMs > request.maxDelayMs;
    if (bound !== undefined) {
      if (limited || request.maxDelayMs === 0) return { status: 'refused', startAt, waitMs, retryMs: 0, ruleIndex };
      return { status: 'deferred', startAt, waitMs, retryMs: Math.max(1, Math.ceil(bound - now)), ruleIndex };
    }
    return { status: limited ? 'refused' : 'booked', startAt, waitMs, retryMs: 0, ruleIndex };
  }

  /** Applies a decision: a booked one adds `members`, each scored start + maxHoldMs. */
  apply(key: string, decision: ModelDecision, request: Omit<ModelRequest, 'rules'>, members: readonly string[]): void {
    const state = this.#state(key);
    if (decision.status === 'deferred') state.waiting = true;
    if (decision.status !== 'booked') return;
    for (const member of members) state.slots.push({ member, score: decision.startAt + request.maxHoldMs });
  }

  /** A completion lowers a slot's score (never raises it); a release removes it. True when a deferred decision is woken. */
  settle(key: string, member: string, releaseAt: number | null): boolean {
    const state = this.#state(key);
    const slot = state.slots.find((s) => s.member === member);
    if (slot && releaseAt === null) state.slots = state.slots.filter((s) => s !== slot);
    else if (slot && releaseAt !== null) slot.score = Math.min(slot.score, releaseAt);
    const woke = state.waiting;
    state.waiting = false;
    return woke;
  }

  /** A vendor pause: no start before `until`; a later pause in place is kept. Returns the pause in force. */
  pause(key: string, until: number): number {
    const state = this.#state(key);
    state.pausedUntil = Math.max(state.pausedUntil, until);
    return state.pausedUntil;
  }

  #state(key: string): KeyState {
    let state = this.#keys.get(key);
    if (!state) this.#keys.set(key, (state = { slots: [], pausedUntil: 0, waiting: false }));
    return state;
  }
}
