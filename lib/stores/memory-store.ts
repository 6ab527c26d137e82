import { ThrottleConfigError } from '../errors.js';
import { checkKnown } from '../validate.js';
import { bucketIndex, countInWindow, depsSuffix, foldHorizon, planSlot, planSlots, type Bucket, type BucketsOf, type LogView } from '../slot-plan.js';
import { applyLearned, type LearnEntry, type LearnSource } from '../learning.js';
import type { Rule } from '../rules.js';
import type {
  ClaimRequest,
  ClaimResult,
  InspectResult,
  KeyPart,
  LearnResult,
  ReserveRequest,
  ReserveResult,
  RestoredSlot,
  Settlement,
  Store,
} from '../store.js';
import { checkDepParts, pointerLife } from '../store.js';

export interface MemoryStoreOptions {
  /**
   * The store's clock in ms. Every decision reads it once, as the Redis store reads `TIME`.
   * @default () => performance.timeOrigin + performance.now()  (monotonic)
   */
  readonly now?: () => number;
}

interface KeyLog {
  /** Ascending releases, one per slot (see lib/slot-plan.ts). */
  scores: number[];
  /** `members[i]` is the slot whose score is `scores[i]`. */
  members: string[];
  /** No start before this (a vendor pause), store clock. */
  pausedUntil: number;
  /** A decision on the key was deferred: the next completion or release announces itself. */
  waiting: boolean;
  expiresAt: number;
  /** Calls folded out of the log, per bucketed rule: `<windowMs>:<bucketMs>:<index>` → calls. */
  buckets: Map<string, number>;
  /**
   * Limits learned from the vendor (as meta `l`, lua/includes/learned.lua): each until `lapseAt`
   * (store clock); one learned from refusals with when its window of refusals began and the refusals
   * in it; `aboveRules`: a published limit that applies above the configured rule of its window.
   */
  learned: Array<{
    readonly limit: number;
    readonly windowMs: number;
    readonly lapseAt: number;
    readonly source: LearnSource;
    readonly aboveRules?: boolean;
    readonly since: number;
    readonly refusals: number;
  }>;
  /**
   * Reservations claimed (`claim`), by member (as lua/claim.lua's POINTER keys): the slot that took
   * its place (none when the claim booked nothing), until its slots count no longer and no claim
   * could take it (store clock). The first member marks the reservation.
   */
  claimed: Map<string, { readonly to: string | undefined; readonly until: number }>;
}

/** The start of a reservation's members (`ReserveRequest.reserved`): only those can be claimed. */
const RESERVED = 'r';

/** How many keys each decision checks for expiry. Two keeps the map bounded by the live keys. */
const SWEEP_PER_CALL = 2;

/**
 * The in-process store: the default, needs no set-up, and gives the same decisions as `RedisStore`
 * (lua/includes/decide.lua and complete.lua). Limits hold within this process only; use
 * `RedisStore` to share them between processes. Memory follows active keys: a key's log is dropped
 * once its slots are older than its longest window.
 */
export class MemoryStore implements Store {
  readonly #now: () => number;
  readonly #logs = new Map<string, KeyLog>();
  readonly #listeners = new Map<string, Set<(key: string) => void>>();
  /** Walks the map across decisions, a few entries each time, dropping expired logs (see #sweep). */
  #cursor: Iterator<[string, KeyLog]> = this.#logs.entries();
  #seq = 0;
  /** The clock reading of this turn of the event loop (see #clock), and `performance.now()` when it was taken. */
  #reading: number | undefined;
  #readAt = 0;
  /** One clock, read in this process. */
  readonly singleClock = true;
  /** A call may count in several keys at once (`ReserveRequest.also`). */
  readonly multiKey = true;

  constructor(options: MemoryStoreOptions = {}) {
    if (options === null || typeof options !== 'object') throw new ThrottleConfigError('Expected MemoryStore options to be an object', 'options');
    checkKnown('MemoryStore', options, ['now']);
    this.#now = options.now ?? (() => performance.timeOrigin + performance.now());
  }

  /**
   * The clock, read once per turn of the event loop: decisions asked together see one time, as a
   * Redis batch reads `TIME` once (else a millisecond ticking between two callers of one line could
   * let the second book a slot the first was told to wait for).
   */
  #clock(): number {
    if (this.#reading === undefined) {
      // Local time first: the reading is taken at or after it.
      this.#readAt = performance.now();
      this.#reading = this.#now();
      // A promise job, not queueMicrotask: fake timers (sinon) replace the latter.
      void Promise.resolve().then(() => {
        this.#reading = undefined;
      });
    }
    return this.#reading;
  }

  /** Number of keys with live state; for tests and metrics. */
  get size(): number {
    return this.#logs.size;
  }

  async reserve(request: ReserveRequest): Promise<ReserveResult> {
    const now = this.#clock();
    const nowMs = Math.ceil(now);
    // What no longer counts at `cut` no longer counts at `now` (as `cut` in lua/includes/decide.lua).
    const cut = Math.floor(now);
    const parts: readonly KeyPart[] = request.also === undefined || request.also.length === 0 ? [request] : [request, ...request.also];
    const ids: string[] = [];
    const logs: KeyLog[] = [];
    const views: LogView[] = [];
    for (const part of parts) {
      const id = `${request.namespace}\n${part.key}`;
      const log = this.#open(id, cut);
      if (log.scores.length > trimAbove(part)) trim(log, cut - part.retainMs);
      const { rules, configured } = applyLearned(part.rules, liveLearned(log, now), part.retainMs);
      // A learned rule of another window is exact: a fold keeps its window in the log.
      if (foldDue(log, part.rules, rules.slice(0, configured), request.cost))
        fold(log, cut, part.rules, Math.max(0, ...rules.slice(configured).map((rule) => rule.windowMs)));
      ids.push(id);
      logs.push(log);
      views.push({
        size: log.scores.length,
        scoreAt: (index) => log.scores[index]!,
        memberAt: (index) => log.members[index]!,
        reservedAt: (index) => log.members[index]!.startsWith(RESERVED),
        rules,
        configured,
        pausedUntil: log.pausedUntil,
        bucketsOf: liveBuckets(log, cut),
      });
    }
    this.#sweep(cut);
    const plan = planSlots(views, request.cost, now, request.maxHoldMs, request.reserved === true ? (request.graceMs ?? 0) : undefined);
    const { ruleIndex, bound, earliest } = plan;
    const startAt = Math.ceil(plan.startAt);
    const waitMs = earliest <= now ? 0 : Math.ceil(earliest - now);
    const answer = { waitMs, startAt, now: nowMs, readAt: this.#readAt, ruleIndex, retryMs: 0, members: [] };
    const limited = waitMs > request.maxDelayMs;
    if (bound !== undefined && !limited && request.maxDelayMs !== 0) {
      // Waits for a completion on each key whose binding call is in flight.
      for (const i of plan.waitOn) {
        logs[i]!.waiting = true;
        logs[i]!.expiresAt = Math.max(logs[i]!.expiresAt, bound + 1);
      }
    }
    if (bound !== undefined || limited) {
      for (let i = 0; i < ids.length; i++) this.#keep(ids[i]!, logs[i]!);
      if (bound === undefined || limited || request.maxDelayMs === 0) return { ...answer, status: 'refused' };
      return { ...answer, status: 'deferred', retryMs: Math.max(1, Math.ceil(bound - now)) };
    }
    const members: string[] = [];
    // A reservation's members are told apart from calls' (claim takes only those), and end with the hash of its dependencies.
    const prefix = request.reserved === true ? RESERVED : '';
    const keys = parts.map((part) => part.key);
    const suffix = plan.deps === undefined ? '' : depsSuffix(plan.deps, keys);
    for (let i = 0; i < request.cost; i++) members.push(`${prefix}${++this.#seq}${suffix}`);
    const score = startAt + request.maxHoldMs;
    for (let i = 0; i < parts.length; i++) {
      const log = logs[i]!;
      for (const member of members) insert(log, score, member);
      log.expiresAt = Math.max(log.expiresAt, score + parts[i]!.retainMs);
      this.#logs.set(ids[i]!, log);
    }
    return { ...answer, status: 'booked', members, ...(plan.deps === undefined ? {} : { deps: plan.deps }) };
  }

  /** As lua/claim.lua. */
  async claim(request: ClaimRequest): Promise<ClaimResult> {
    const now = this.#clock();
    const nowMs = Math.ceil(now);
    const { bound, maxHoldMs, deps } = request;
    const members = [...request.members].sort();
    const start = Math.max(request.startAt, bound - maxHoldMs - request.graceMs);
    const last = bound - maxHoldMs;
    const answer = { now: nowMs, waitMs: 0, members: [] as string[] };
    const parts = [request, ...(request.also ?? [])];
    checkDepParts(deps, parts.length);
    const ids = parts.map(({ key }) => `${request.namespace}\n${key}`);
    const logs = ids.map((id) => this.#open(id, Math.floor(now)));
    for (const log of logs) for (const [member, pointer] of log.claimed) if (pointer.until < now) log.claimed.delete(member);
    // The first member in the first key marks the reservation: a token with its members in another order is the same reservation.
    if (logs[0]!.claimed.has(members[0]!)) return { ...answer, status: 'used' };
    const give = request.giveBack === true;
    if (!give && now < start) return { ...answer, status: 'early', waitMs: Math.ceil(start - now) };
    if (!give && now > last) return { ...answer, status: 'late' };
    const keys = parts.map((part) => part.key);
    const suffix = depsSuffix(deps, keys);
    const named = members.filter((member) => member.startsWith(RESERVED) && (suffix === '' ? !member.includes('~') : member.endsWith(suffix)));
    // Per key, the reserved members still there at the bound.
    const present = logs.map((log) =>
      named.filter((member) => {
        const index = log.members.lastIndexOf(member);
        return index >= 0 && log.scores[index] === bound;
      }),
    );
    if (present.every((found) => found.length === 0)) return { ...answer, status: 'moved' };
    let startable = !give && present.every((found) => found.length === members.length) && logs.every((log) => log.pausedUntil <= now);
    if (startable) {
      // Each dependency's release in its key, followed to the slot that took its place where it was claimed.
      let ready = start;
      for (const [member, windowMs, part = 0] of deps) {
        const log = logs[part]!;
        let index = log.members.lastIndexOf(member);
        const to = index < 0 ? log.claimed.get(member)?.to : undefined;
        if (to !== undefined) index = log.members.lastIndexOf(to);
        if (index < 0) continue;
        const score = log.scores[index]!;
        if (score > nowMs) {
          ready = Infinity;
          break;
        }
        ready = Math.max(ready, score + windowMs);
      }
      if (ready > last) startable = false;
      else if (ready > now) return { ...answer, status: 'early', waitMs: Math.ceil(ready - now) };
    }
    let started: string[] = [];
    if (startable) started = members.map(() => String(++this.#seq));
    for (let p = 0; p < logs.length; p++) {
      const log = logs[p]!;
      if (startable) {
        const until = now + pointerLife(bound, maxHoldMs, now, parts[p]!.retainMs);
        for (let i = 0; i < started.length; i++) {
          insert(log, nowMs + maxHoldMs, started[i]!);
          log.claimed.set(members[i]!, { to: started[i]!, until });
        }
        log.expiresAt = Math.max(log.expiresAt, until);
      } else if (p === 0) {
        log.claimed.set(members[0]!, { to: undefined, until: now + Math.max(1, Math.ceil(last - now) + 1) });
      }
      for (const member of present[p]!) {
        const index = log.members.lastIndexOf(member);
        log.scores.splice(index, 1);
        log.members.splice(index, 1);
      }
      log.expiresAt = Math.max(log.expiresAt, last + 1);
      this.#logs.set(ids[p]!, log);
    }
    return started.length > 0 ? { ...answer, status: 'started', members: started } : { ...answer, status: 'moved' };
  }

  /** Written at once (in-process, nothing to batch): `_coalesceMs` is not needed. */
  async settle(namespace: string, key: string, settle: readonly Settlement[], _coalesceMs?: number): Promise<void> {
    const log = this.#logs.get(`${namespace}\n${key}`);
    if (!log || log.expiresAt <= Math.floor(this.#clock())) return;
    for (const { member, releaseAt } of settle) {
      const index = log.members.lastIndexOf(member);
      if (index < 0) continue;
      // As ZADD XX LT: a score only ever goes down.
      if (releaseAt !== null && releaseAt >= log.scores[index]!) continue;
      log.scores.splice(index, 1);
      log.members.splice(index, 1);
      if (releaseAt !== null) insert(log, releaseAt, member);
    }
    if (log.waiting) {
      log.waiting = false;
      for (const listener of this.#listeners.get(namespace) ?? []) listener(key);
    }
  }

  /** Forgets the key's calls that started, its pause and buckets (as reset.lua); decisions waiting on it ask again. */
  async reset(namespace: string, key: string, _retainMs: number, maxHoldMs: number): Promise<void> {
    const id = `${namespace}\n${key}`;
    const log = this.#logs.get(id);
    if (!log) return;
    const now = this.#clock();
    const kept = countInWindow(log.scores.length, (i) => log.scores[i]!, 0, bookedAheadAbove(now, maxHoldMs));
    log.scores.splice(0, log.scores.length - kept);
    log.members.splice(0, log.members.length - kept);
    log.buckets.clear();
    log.pausedUntil = 0;
    log.learned = [];
    const waiting = log.waiting;
    log.waiting = false;
    this.#logs.delete(id);
    this.#keep(id, log);
    if (waiting) for (const listener of this.#listeners.get(namespace) ?? []) listener(key);
  }

  async listen(namespace: string, listener: (key: string) => void): Promise<() => void> {
    let listeners = this.#listeners.get(namespace);
    if (!listeners) this.#listeners.set(namespace, (listeners = new Set()));
    listeners.add(listener);
    return () => {
      listeners.delete(listener);
      if (listeners.size === 0 && this.#listeners.get(namespace) === listeners) this.#listeners.delete(namespace);
    };
  }

  async inspect(namespace: string, key: string, rules: readonly Rule[], maxHoldMs?: number): Promise<InspectResult> {
    const now = this.#clock();
    const nowMs = Math.ceil(now);
    // What no longer counts at `cut` no longer counts at `now` (as in reserve).
    const cut = Math.floor(now);
    const log = this.#logs.get(`${namespace}\n${key}`);
    const live = log && log.expiresAt > cut ? log : undefined;
    // A call in flight is taken to end now, the soonest it can (as inspect.lua).
    const scores = live ? live.scores.map((score) => Math.min(score, nowMs)) : [];
    const scoreAt = (i: number) => scores[i]!;
    const pausedUntil = live?.pausedUntil ?? 0;
    const bucketsOf: BucketsOf = live ? liveBuckets(live, cut) : () => [];
    const learned = live ? liveLearned(live, now) : [];
    // Every learned limit shows, also one of a window longer than the history kept.
    rules = applyLearned(rules, learned, Infinity).rules;
    const { startAt } = planSlot(scores.length, scoreAt, rules, 1, now, 0, pausedUntil, bucketsOf);
    const bookedAhead = live && maxHoldMs !== undefined ? countInWindow(live.scores.length, (i) => live.scores[i]!, 0, bookedAheadAbove(now, maxHoldMs)) : 0;
    return {
      now: nowMs,
      nextFreeInMs: startAt <= now ? 0 : Math.ceil(startAt - now),
      pausedForMs: Math.max(0, Math.ceil(pausedUntil - now)),
      bookedAhead,
      stored: live !== undefined,
      learned: learned.map(({ limit, windowMs, source, lapseAt }) => ({ limit, windowMs, source, lapsesInMs: lapseAt - nowMs })),
      rules: rules.map((rule) => {
        const { limit, windowMs } = rule;
        // Counted on the scores as they are: a call in flight counts now, also under a cap in flight (window 0).
        const logged = live ? countInWindow(live.scores.length, (i) => live.scores[i]!, windowMs, cut) : 0;
        const buckets = rule.bucketMs ? bucketsOf(rule) : [];
        const used = logged + buckets.reduce((sum, bucket) => sum + bucket.count, 0);
        const oldest = Math.min(buckets[0]?.end ?? Infinity, scores[scores.length - logged] ?? Infinity);
        return { limit, windowMs, used: used - bookedAhead, resetInMs: oldest === Infinity ? 0 : Math.ceil(oldest + windowMs - now) };
      }),
    };
  }

  async restore(namespace: string, key: string, slots: readonly RestoredSlot[], retainMs: number): Promise<void> {
    const now = this.#clock();
    const nowMs = Math.ceil(now);
    const id = `${namespace}\n${key}`;
    const log = this.#open(id, Math.floor(now));
    for (const { releaseInMs, cost } of slots) {
      const score = nowMs + Math.ceil(releaseInMs);
      if (score + retainMs <= Math.floor(now)) continue;
      for (let i = 0; i < cost; i++) insert(log, score, String(++this.#seq));
      log.expiresAt = Math.max(log.expiresAt, score + retainMs);
    }
    this.#keep(id, log);
  }

  async pause(namespace: string, key: string, ms: number, maxHoldMs = 0): Promise<number> {
    const now = this.#clock();
    const nowMs = Math.ceil(now);
    const id = `${namespace}\n${key}`;
    const log = this.#open(id, Math.floor(now));
    log.pausedUntil = Math.max(log.pausedUntil, nowMs + Math.ceil(ms));
    if (maxHoldMs > 0) {
      // Slots booked ahead to start before the pause ends (as pause.lua).
      const above = bookedAheadAbove(now, maxHoldMs);
      for (let i = log.scores.length - 1; i >= 0; i--) {
        const score = log.scores[i]!;
        if (score > above && score < log.pausedUntil + maxHoldMs) {
          log.scores.splice(i, 1);
          log.members.splice(i, 1);
        }
      }
    }
    log.expiresAt = Math.max(log.expiresAt, log.pausedUntil + 1);
    this.#logs.set(id, log);
    return log.pausedUntil;
  }

  async learn(namespace: string, key: string, entries: readonly LearnEntry[], maxHoldMs: number): Promise<LearnResult> {
    const now = this.#clock();
    const nowMs = Math.ceil(now);
    const id = `${namespace}\n${key}`;
    const log = this.#open(id, Math.floor(now));
    // As lua/learn.lua.
    const learned = liveLearned(log, now);
    let changed = false;
    let lowered = false;
    const above = maxHoldMs > 0 ? bookedAheadAbove(now, maxHoldMs) : Infinity;
    let held = 0;
    for (const { limit, windowMs, source, lapseMs, mode = 'set', remaining = 0, floor = 1, aboveRules = false, configured = 0 } of entries) {
      const at = learned.findIndex((entry) => entry.windowMs === windowMs);
      const lapseAt = nowMs + lapseMs;
      const before = at >= 0 ? learned[at]! : undefined;
      if (mode === 'hold') {
        // As lua/learn.lua: the room the log leaves beyond what the vendor says remains is held until the reset.
        const current = limitInForce(limit, before);
        const counted = countInWindow(log.scores.length, (i) => log.scores[i]!, windowMs, Math.floor(now));
        const more = current - counted - remaining;
        if (more > 0) {
          const score = Math.min(lapseAt, nowMs + windowMs) - windowMs;
          for (let k = 1; k <= more; k++) insert(log, score, `held:${nowMs}:${counted + k}`);
          log.expiresAt = Math.max(log.expiresAt, score + windowMs + 1);
          held += more;
          lowered = true;
        }
        continue;
      }
      if (mode === 'down') {
        const current = limitInForce(limit, before);
        const refusals = before?.source === 'refusals';
        let since = nowMs;
        let count = 1;
        if (refusals && nowMs - before!.since < windowMs) {
          since = before!.since;
          count = before!.refusals + 1;
        }
        // Calls that started within the window (slots booked ahead left out), as ZCOUNT in lua/learn.lua.
        const started = log.scores.filter((score) => score > Math.floor(now) - windowMs && score <= above).length;
        // The refused calls not all in the window (a call that outlasted it): no measure, one less.
        const measured = started - count < 1 ? current - 1 : started - count;
        let lower = Math.min(current, measured);
        if (count === 1) lower = Math.min(lower, current - 1);
        const least = Math.max(1, floor);
        lower = Math.max(least, lower);
        // Down from a limit in force above the rule (learnAboveRules): it stays above the rule.
        const entry = { limit: lower, windowMs, lapseAt, source: 'refusals' as const, since, refusals: count, aboveRules: before?.aboveRules === true };
        if (lower < current) {
          changed = lowered = true;
          if (at >= 0) learned[at] = entry;
          else learned.push(entry);
        } else if (refusals) {
          // At the floor: the refusal still counts. One learned under a lower floor comes up to this one.
          let kept = before!.limit;
          if (kept < least) {
            kept = Math.min(least, limit);
            changed = true;
          }
          learned[at] = { ...entry, limit: kept, aboveRules: before!.aboveRules };
        }
        continue;
      }
      if (mode === 'up') {
        // Two windows after a refusal lowered it, one after a rise (as lua/learn.lua).
        if (before?.source === 'refusals' && nowMs - before.since >= (before.refusals > 0 ? 2 : 1) * windowMs) {
          const raised = before.limit + Math.max(1, Math.floor(before.limit / 10));
          if (raised >= limit) learned.splice(at, 1);
          else learned[at] = { limit: raised, windowMs, lapseAt, source: 'refusals', since: nowMs, refusals: 0, aboveRules: before.aboveRules };
          changed = true;
        }
        continue;
      }
      // Set, or forget (limit 0): lowered when the limit in force goes down (as lua/learn.lua).
      const inForce = (entry: KeyLog['learned'][number] | undefined): number => (configured > 0 ? limitInForce(configured, entry) : (entry?.limit ?? Infinity));
      const was = inForce(before);
      if (limit === 0) {
        // Only what `source` taught, as learned above the rules or not.
        if (before !== undefined && before.source === source && (before.aboveRules === true) === aboveRules) {
          learned.splice(at, 1);
          changed = true;
          if (inForce(undefined) < was) lowered = true;
        }
        continue;
      }
      const entry = { limit, windowMs, source, lapseAt, since: 0, refusals: 0, aboveRules };
      if (before === undefined || limit !== before.limit || source !== before.source || aboveRules !== (before.aboveRules === true)) changed = true;
      if (inForce(entry) < was) lowered = true;
      if (at >= 0) learned[at] = entry;
      else learned.push(entry);
    }
    log.learned = learned;
    for (const entry of learned) log.expiresAt = Math.max(log.expiresAt, entry.lapseAt + 1);
    let pausedUntil = 0;
    if (lowered && maxHoldMs > 0) {
      const top = log.scores.at(-1);
      if (top !== undefined && top > above) {
        pausedUntil = Math.max(Math.ceil(top - maxHoldMs) + 1, log.pausedUntil);
        const kept = log.scores.length - countInWindow(log.scores.length, (i) => log.scores[i]!, 0, above);
        log.scores.splice(kept);
        log.members.splice(kept);
        log.pausedUntil = pausedUntil;
        log.expiresAt = Math.max(log.expiresAt, pausedUntil + 1);
      }
    }
    this.#keep(id, log);
    return {
      changed,
      pausedUntil,
      held,
      learned: learned.map(({ limit, windowMs, source, lapseAt }) => ({ limit, windowMs, source, lapsesInMs: lapseAt - nowMs })),
    };
  }

  /** The pause in force, known at once: this store holds every pause itself, whenever it was set. */
  pausedUntil(namespace: string, key: string): number {
    return this.#logs.get(`${namespace}\n${key}`)?.pausedUntil ?? 0;
  }

  async close(): Promise<void> {
    this.#logs.clear();
    this.#listeners.clear();
  }

  /** The key's log, or a new one if it had expired by `at` (the clock rounded down). */
  #open(id: string, at: number): KeyLog {
    const log = this.#logs.get(id);
    if (log && log.expiresAt > at) return log;
    this.#logs.delete(id);
    return { scores: [], members: [], pausedUntil: 0, waiting: false, expiresAt: 0, buckets: new Map(), learned: [], claimed: new Map() };
  }

  /** Keeps a log that holds anything, as Redis keeps a key that exists. */
  #keep(id: string, log: KeyLog): void {
    if (log.scores.length > 0 || log.buckets.size > 0 || log.pausedUntil > 0 || log.waiting || log.learned.length > 0 || log.claimed.size > 0)
      this.#logs.set(id, log);
  }

  /**
   * Checks the next few keys of a walk over the map that goes on from one decision to the next
   * (a Map iterator stays valid across inserts and deletes), dropping expired logs. Each decision
   * adds at most one key and checks two, so the map stays close to the number of live keys.
   */
  #sweep(at: number): void {
    for (let checked = 0; checked < SWEEP_PER_CALL; checked++) {
      let next = this.#cursor.next();
      if (next.done) {
        this.#cursor = this.#logs.entries();
        next = this.#cursor.next();
        if (next.done) return;
      }
      const [id, log] = next.value;
      if (log.expiresAt <= at) this.#logs.delete(id);
    }
  }
}

/** The limit in force for a window whose configured limit is `limit`, given what it learned there (as `vt_learned_limit`). */
function limitInForce(limit: number, learned: KeyLog['learned'][number] | undefined): number {
  if (learned === undefined) return limit;
  return learned.aboveRules === true ? learned.limit : Math.min(limit, learned.limit);
}

/** The key's learned limits that still apply at `now` (as `vt_learned_parse`). */
function liveLearned(log: KeyLog, now: number): KeyLog['learned'] {
  return log.learned.length === 0 ? log.learned : log.learned.filter((entry) => entry.lapseAt > now);
}

/**
 * A slot scored above this was booked to start later: past the bound of a call started now (its
 * start rounded up) and a millisecond more (`vt_booked_ahead_above` in lua/includes/log.lua).
 */
function bookedAheadAbove(now: number, maxHoldMs: number): number {
  return Math.ceil(now) + maxHoldMs + 1;
}

/**
 * `vt_fold` in lua/includes/buckets.lua: when some rules are bucketed, calls whose release is known
 * and older than the exact rules' longest window leave the log and are counted in their bucket of
 * each distinct (window, bucket width). Buckets that no longer count are dropped.
 */
function fold(log: KeyLog, at: number, rules: readonly Rule[], horizon = 0): void {
  if (!rules.some(isBucketed)) return;
  const bucketed = [...new Map(rules.filter(isBucketed).map((rule) => [`${rule.windowMs}:${rule.bucketMs}`, rule])).values()];
  for (const [field] of log.buckets) {
    const [windowMs, bucketMs, index] = field.split(':').map(Number) as [number, number, number];
    if (index * bucketMs + windowMs <= at) log.buckets.delete(field);
  }
  const before = at - Math.max(foldHorizon(rules), horizon);
  let drop = 0;
  while (drop < log.scores.length && log.scores[drop]! <= before) {
    const score = log.scores[drop]!;
    for (const { windowMs, bucketMs } of bucketed) {
      const index = bucketIndex(score, bucketMs!);
      if (index * bucketMs! + windowMs <= at) continue;
      const field = `${windowMs}:${bucketMs}:${index}`;
      log.buckets.set(field, (log.buckets.get(field) ?? 0) + 1);
      log.expiresAt = Math.max(log.expiresAt, index * bucketMs! + windowMs);
    }
    drop++;
  }
  log.scores.splice(0, drop);
  log.members.splice(0, drop);
}

/**
 * `vt_fold_due`: folding waits until the log holds more than twice the exact rules' largest limit
 * plus 32, or a bucketed rule could bind (the calls in its log and its buckets, as counted at the
 * last fold, leave no room for `cost` more, at the limit in force). Until then old calls count one by one.
 * `configured`: the key's rules (their exact limits bound the log); `inForce`: the same rules at the limits in force.
 */
function foldDue(log: KeyLog, configured: readonly Rule[], inForce: readonly Rule[], cost: number): boolean {
  if (!configured.some(isBucketed)) return false;
  const size = log.scores.length;
  const mostExact = configured.reduce((most, rule) => (isBucketed(rule) ? most : Math.max(most, rule.limit)), 0);
  if (size > 2 * mostExact + 32) return true;
  return inForce.some((rule) => {
    if (!isBucketed(rule)) return false;
    const prefix = `${rule.windowMs}:${rule.bucketMs}:`;
    let folded = 0;
    for (const [field, count] of log.buckets) if (field.startsWith(prefix)) folded += count;
    return size + folded > rule.limit - cost;
  });
}

function isBucketed(rule: Rule): boolean {
  return (rule.bucketMs ?? 0) > 0;
}

/** The buckets of each bucketed rule that still count at `at`, ascending (as `vt_buckets`). */
function liveBuckets(log: KeyLog, at: number): BucketsOf {
  return (rule) => {
    const out: Bucket[] = [];
    for (const [field, count] of log.buckets) {
      const [windowMs, bucketMs, index] = field.split(':').map(Number) as [number, number, number];
      if (windowMs !== rule.windowMs || bucketMs !== rule.bucketMs) continue;
      const end = index * bucketMs;
      if (end + windowMs > at) out.push({ end, count });
    }
    return out.sort((a, b) => a.end - b.end);
  };
}

/**
 * As `set.trim_above` in lua/batch.lua: the history kept (`retainMs`, k longest windows) and the slots
 * booked ahead (a window at most) hold at most (k + 1) × the largest limit; the log is trimmed once it
 * holds 32 more.
 */
function trimAbove(part: KeyPart): number {
  const most = Math.max(...part.rules.map((rule) => rule.limit));
  const longest = Math.max(1, ...part.rules.map((rule) => rule.windowMs));
  return most * (Math.ceil(part.retainMs / longest) + 1) + 32;
}

function trim(log: KeyLog, before: number): void {
  let drop = 0;
  while (drop < log.scores.length && log.scores[drop]! <= before) drop++;
  if (drop > 0) {
    log.scores.splice(0, drop);
    log.members.splice(0, drop);
  }
}

/**
 * Inserts in the order of a Redis sorted set: scores ascending, equal scores by member compared as
 * bytes, so that the slot at a rule's index is the one Redis would find. Members are ASCII, where
 * comparing UTF-16 code units is comparing bytes.
 */
function insert(log: KeyLog, score: number, member: string): void {
  let lo = 0;
  let hi = log.scores.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const at = log.scores[mid]!;
    if (at < score || (at === score && log.members[mid]! < member)) lo = mid + 1;
    else hi = mid;
  }
  log.scores.splice(lo, 0, score);
  log.members.splice(lo, 0, member);
}
