import type { Rule } from '../../lib/rules.js';
import { MOST_DEPS } from '../../lib/slot-plan.js';
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
  /** A reservation's slot: its score is its start + maxHoldMs + the grace. */
  readonly reserved?: boolean;
}

interface KeyState {
  slots: Slot[];
  pausedUntil: number;
  /** Limits learned from the vendor, by window (no lapse: the property runs well within one). */
  learned: Map<number, { limit: number; source: string; aboveRules: boolean }>;
  /** A decision was deferred: the next settle on the key announces itself. */
  waiting: boolean;
  /** Reservations claimed, by member: the slot that took its place, until when (see `claim`). */
  claimed: Map<string, { readonly to: string | undefined; readonly until: number }>;
}

/** A claim of a reservation (`Store.claim`), as the model takes it. */
export interface ModelClaim {
  readonly members: readonly string[];
  readonly bound: number;
  readonly startAt: number;
  readonly graceMs: number;
  readonly maxHoldMs: number;
  /** History kept: one for every key, or each key's. */
  readonly retainMs: number | readonly number[];
  /** Each with the index of its key among the claim's (none: the first). */
  readonly deps: ReadonlyArray<readonly [member: string, windowMs: number, part?: number]>;
}

export interface ModelRequest {
  readonly rules: readonly Rule[];
  readonly cost: number;
  readonly maxDelayMs: number;
  readonly maxHoldMs: number;
  /**
   * A reservation: never deferred; it starts at the soonest the calls in flight that fill a rule
   * could release (their dependencies), or, with more than MOST_DEPS of those, once each such rule
   * has room at their bounds.
   */
  readonly reserved?: boolean;
  /** A reservation's grace, within `maxHoldMs`. */
  readonly graceMs?: number;
}

export interface ModelDecision {
  readonly status: ReserveStatus;
  readonly startAt: number;
  readonly waitMs: number;
  readonly retryMs: number;
  readonly ruleIndex: number;
}

/** `ruleIndex` when a learned limit of a window no configured rule has sets the start. */
const LEARNED = -4;

export class ReferenceModel {
  readonly #keys = new Map<string, KeyState>();
  /** History each key keeps: a learned limit of a longer window does not count. */
  readonly #retainMs: number;

  constructor(retainMs = Infinity) {
    this.#retainMs = retainMs;
  }

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
    // Every rule with the slots of its key, at the tighter of its limit and what the key learned for
    // its window; then the key's learned limits of other windows (within the history kept).
    const all = keys.flatMap(({ key, rules }) => {
      const state = this.#state(key);
      const own = rules.map((rule, r) => ({
        rule: { ...rule, limit: limitInForce(rule.limit, state.learned.get(rule.windowMs)) },
        slots: state.slots,
        index: r,
      }));
      const learned = [...state.learned]
        .filter(([windowMs]) => windowMs <= this.#retainMs && !rules.some((rule) => rule.windowMs === windowMs))
        .map(([windowMs, { limit }]) => ({ rule: { limit, windowMs }, slots: state.slots, index: LEARNED }));
      return [...own, ...learned];
    });
    let offset = 0;
    for (const entry of all) {
      // Configured rules count on from key to key.
      if (entry.index !== LEARNED) entry.index = offset++;
    }
    // A call never waits for more room than a rule has.
    for (const entry of all) if (entry.rule.limit < cost) entry.rule.limit = cost;
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
    if (start > base) ruleIndex = all.find((entry) => known.includes(entry) && !fits(entry, start - 1))!.index;
    const startAt = Math.ceil(start);
    // Rules filled by calls in flight that still hold the call back at startAt, in rule order: the
    // score each waits for (the lowest score at or after which the rule has room) is the bound to
    // ask again by; its call started at the soonest at that score - maxHoldMs (or now), so the
    // rule has no room before that plus its window.
    let bound: number | undefined;
    let earliest = start;
    const startRule = ruleIndex;
    const held: Array<{ readonly entry: Entry; readonly at: number }> = [];
    for (const entry of all) {
      if (known.includes(entry) || fits(entry, start)) continue;
      const { rule, slots } = entry;
      const frees = slots.map((slot) => slot.score).filter((v) => slots.filter((slot) => slot.score > v).length <= rule.limit - cost);
      const at = Math.min(...frees);
      held.push({ entry, at });
      // A reservation takes the slots at that score to have started a hold before it: the
      // reservations' hold holds their grace, a call's does not (with both there, a call's).
      const reservations = slots.filter((slot) => slot.score === at).every((slot) => slot.reserved === true);
      const hold = request.reserved === true && !reservations ? request.maxHoldMs - (request.graceMs ?? 0) : request.maxHoldMs;
      const soonest = Math.max(nowMs, at - hold) + rule.windowMs;
      if (request.reserved !== true && (bound === undefined || at < bound)) bound = at;
      if (soonest > earliest) {
        earliest = soonest;
        ruleIndex = entry.index;
      }
    }
    if (request.reserved === true) {
      // A reservation starts there too, taking the calls that hold it back to release by then: its
      // dependencies, the slots beyond the rule's room that still count at its start. With more
      // than MOST_DEPS of them, it waits for those scores themselves instead: then each rule has
      // room whatever the calls do.
      const at = Math.ceil(earliest);
      const deps = held.reduce((sum, { entry }) => sum + Math.max(0, counting(entry, at) - (entry.rule.limit - cost)), 0);
      if (deps > MOST_DEPS) {
        earliest = start;
        ruleIndex = startRule;
        for (const { entry, at: score } of held) {
          if (score + entry.rule.windowMs > earliest) {
            earliest = score + entry.rule.windowMs;
            ruleIndex = entry.index;
          }
        }
      }
      const waitMs = earliest <= now ? 0 : Math.ceil(earliest - now);
      return { status: waitMs > request.maxDelayMs ? 'refused' : 'booked', startAt: Math.ceil(earliest), waitMs, retryMs: 0, ruleIndex };
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
    for (const member of members) state.slots.push({ member, score: decision.startAt + request.maxHoldMs, reserved: request.reserved === true });
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

  /**
   * A claim at store time `now` of a reservation booked in `keys` (one, or several in the call's
   * order): the call starts on the reserved slots if they are all in every key's log at their
   * bound, no claim came before (the first member's mark in the first key), it is no earlier than
   * their start (nor than the bound − hold − grace) and no later than the bound − hold, no key is
   * paused, and every dependency (in its key, followed to the slot that took its place where it was
   * claimed) is known and released a window ago; `started` then takes their place in every key,
   * scored ceil(now) + hold. Too early: nothing changes. Slots there but not startable leave, and
   * the reservation counts as used. `apply` false: the answer alone, nothing changed.
   */
  claim(keys: string | readonly string[], now: number, claim: ModelClaim, started: readonly string[], apply = true): { status: string; waitMs: number } {
    const states = (typeof keys === 'string' ? [keys] : keys).map((key) => this.#state(key));
    const nowMs = Math.ceil(now);
    const pointer = (state: KeyState, member: string) => {
      const found = state.claimed.get(member);
      return found !== undefined && found.until >= now ? found : undefined;
    };
    const members = [...claim.members].sort();
    const start = Math.max(claim.startAt, claim.bound - claim.maxHoldMs - claim.graceMs);
    const last = claim.bound - claim.maxHoldMs;
    if (pointer(states[0]!, members[0]!) !== undefined) return { status: 'used', waitMs: 0 };
    if (now < start) return { status: 'early', waitMs: Math.ceil(start - now) };
    if (now > last) return { status: 'late', waitMs: 0 };
    const slotOf = (state: KeyState, member: string | undefined) => state.slots.find((slot) => slot.member === member);
    const present = states.map((state) => members.filter((member) => slotOf(state, member)?.score === claim.bound));
    if (present.every((found) => found.length === 0)) return { status: 'moved', waitMs: 0 };
    let startable = present.every((found) => found.length === members.length) && states.every((state) => state.pausedUntil <= now);
    if (startable) {
      let ready = start;
      for (const [member, windowMs, part = 0] of claim.deps) {
        const state = states[part]!;
        const slot = slotOf(state, member) ?? slotOf(state, pointer(state, member)?.to);
        if (slot === undefined) continue;
        ready = slot.score > nowMs ? Infinity : Math.max(ready, slot.score + windowMs);
        if (ready === Infinity) break;
      }
      if (ready > last) startable = false;
      else if (ready > now) return { status: 'early', waitMs: Math.ceil(ready - now) };
    }
    if (!apply) return { status: startable ? 'started' : 'moved', waitMs: 0 };
    states.forEach((state, k) => {
      for (const [member, { until }] of state.claimed) if (until < now) state.claimed.delete(member);
      state.slots = state.slots.filter((slot) => !present[k]!.includes(slot.member));
    });
    if (!startable) {
      states[0]!.claimed.set(members[0]!, { to: undefined, until: now + Math.max(1, Math.ceil(last - now) + 1) });
      return { status: 'moved', waitMs: 0 };
    }
    for (const [k, state] of states.entries()) {
      const retainMs = typeof claim.retainMs === 'number' ? claim.retainMs : claim.retainMs[k]!;
      const until = now + Math.ceil(Math.max(last - now + 1, claim.maxHoldMs + Math.ceil(retainMs)));
      started.forEach((member, i) => {
        state.slots.push({ member, score: nowMs + claim.maxHoldMs });
        state.claimed.set(members[i]!, { to: member, until });
      });
    }
    return { status: 'started', waitMs: 0 };
  }

  /** A vendor pause: no start before `until`; a later pause in place is kept. Returns the pause in force. */
  pause(key: string, until: number): number {
    const state = this.#state(key);
    state.pausedUntil = Math.max(state.pausedUntil, until);
    return state.pausedUntil;
  }

  /**
   * Limits learned at store time `now`: each replaces what was learned for its window (`limit` 0
   * forgets it, if `source` taught it). When one goes down, slots booked ahead (scored above
   * ceil(now) + maxHoldMs + 1) leave, and the key pauses until the last of them would have started,
   * plus 1 ms. Returns whether a limit changed, the pause set (0: none), and the members taken out.
   */
  learn(
    key: string,
    now: number,
    entries: ReadonlyArray<{
      readonly limit: number;
      readonly windowMs: number;
      readonly source: string;
      readonly aboveRules?: boolean;
      readonly configured?: number;
    }>,
    maxHoldMs: number,
  ): { changed: boolean; pausedUntil: number; removed: string[] } {
    const state = this.#state(key);
    let changed = false;
    let lowered = false;
    for (const { limit, windowMs, source, aboveRules = false, configured = 0 } of entries) {
      const before = state.learned.get(windowMs);
      // The limit in force for the window: the configured one's with what was learned, or what was learned alone.
      const inForce = (entry: { readonly limit: number; readonly aboveRules: boolean } | undefined): number =>
        configured > 0 ? limitInForce(configured, entry) : (entry?.limit ?? Infinity);
      const was = inForce(before);
      if (limit === 0) {
        if (before?.source === source && before.aboveRules === aboveRules) {
          state.learned.delete(windowMs);
          changed = true;
          if (inForce(undefined) < was) lowered = true;
        }
        continue;
      }
      const entry = { limit, source, aboveRules };
      if (before === undefined || limit !== before.limit || source !== before.source || aboveRules !== before.aboveRules) changed = true;
      if (inForce(entry) < was) lowered = true;
      state.learned.set(windowMs, entry);
    }
    const above = Math.ceil(now) + maxHoldMs + 1;
    const ahead = state.slots.filter((slot) => slot.score > above);
    if (!lowered || maxHoldMs === 0 || ahead.length === 0) return { changed, pausedUntil: 0, removed: [] };
    state.slots = state.slots.filter((slot) => slot.score <= above);
    state.pausedUntil = Math.max(state.pausedUntil, Math.ceil(Math.max(...ahead.map((slot) => slot.score)) - maxHoldMs) + 1);
    return { changed, pausedUntil: state.pausedUntil, removed: ahead.map((slot) => slot.member) };
  }

  #state(key: string): KeyState {
    let state = this.#keys.get(key);
    if (!state) this.#keys.set(key, (state = { slots: [], pausedUntil: 0, waiting: false, learned: new Map(), claimed: new Map() }));
    return state;
  }
}

/** A window's limit in force: the learned one above the rule (`aboveRules`), else the tighter. */
function limitInForce(limit: number, learned: { readonly limit: number; readonly aboveRules: boolean } | undefined): number {
  if (learned === undefined) return limit;
  return learned.aboveRules ? learned.limit : Math.min(limit, learned.limit);
}
