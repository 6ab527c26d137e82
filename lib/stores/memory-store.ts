import { bucketIndex, countInWindow, foldHorizon, isUnsettled, planSlot, retryMs, SETTLED_SUFFIX, stillFits, type Bucket, type BucketsOf } from '../decision.js';
import type { Rule } from '../rules.js';
import type { InspectResult, ReserveRequest, ReserveResult, RestoredSlot, Settlement, Store } from '../store.js';

export interface MemoryStoreOptions {
  /**
   * The store's clock in ms. Every decision reads it once, as the Redis store reads `TIME`.
   * @default () => performance.timeOrigin + performance.now()  (monotonic)
   */
  readonly now?: () => number;
}

interface KeyLog {
  /** Ascending release times, one per booked slot. */
  scores: number[];
  /** `members[i]` is the slot whose score is `scores[i]`. */
  members: string[];
  seq: number;
  last: number;
  /** No start before this (a vendor pause), store clock. */
  pausedUntil: number;
  /** Slots whose call has not reported its completion, with their estimate. */
  flight: Map<string, number>;
  /** `maxHoldMs` of the latest decision: how long a call past its estimate may still count. */
  maxHoldMs: number;
  expiresAt: number;
  /** Completed calls folded out of the log, per bucketed rule: `<windowMs>:<bucketMs>:<index>` → calls. */
  buckets: Map<string, number>;
}

/** How many keys each decision checks for expiry. Two keeps the map bounded by the live keys. */
const SWEEP_PER_CALL = 2;

/**
 * The in-process store: the default, needs no set-up, and gives the same decisions as `RedisStore`.
 * Limits hold within this process only; use `RedisStore` to share them between processes.
 * Memory follows active keys: a key's log is dropped once its slots are older than its longest window.
 */
export class MemoryStore implements Store {
  readonly #now: () => number;
  readonly #logs = new Map<string, KeyLog>();
  /** Walks the map across decisions, a few entries each time, dropping expired logs (see #sweep). */
  #cursor: Iterator<[string, KeyLog]> = this.#logs.entries();

  constructor(options: MemoryStoreOptions = {}) {
    this.#now = options.now ?? (() => performance.timeOrigin + performance.now());
  }

  /** Number of keys with live state; for tests and metrics. */
  get size(): number {
    return this.#logs.size;
  }

  async reserve(request: ReserveRequest): Promise<ReserveResult> {
    const now = this.#now();
    const nowMs = Math.ceil(now);
    const id = `${request.namespace}\n${request.key}`;
    const log = this.#open(id, nowMs);
    const latest = applySettlements(log, request.settle);
    log.expiresAt = Math.max(log.expiresAt, latest + request.retainMs);
    applyOverdue(log, now, request.maxHoldMs);
    fold(log, nowMs, request.rules);
    trim(log, nowMs - request.retainMs);
    const scoreAt = (i: number) => log.scores[i]!;
    const bucketsOf = liveBuckets(log, nowMs);
    const { startAt, ruleIndex, binding } = planSlot(log.scores.length, scoreAt, request.rules, request.cost, nowMs, log.last, log.pausedUntil, bucketsOf);
    // A slot at `nowMs` starts now (the clock read is rounded up); a later one is waited for in full.
    const waitMs = startAt <= nowMs ? 0 : Math.ceil(startAt - now);
    this.#sweep(nowMs);
    if (waitMs > request.maxDelayMs) {
      if (log.seq > 0) this.#logs.set(id, log);
      return { granted: false, deferred: false, retryMs: 0, waitMs, startAt, now: nowMs, ruleIndex, members: [], tentative: false };
    }
    // Only a call still in flight is worth waiting for: one that left the flight set unsettled (its
    // worker died, its settle was lost) will never be settled (as vt_reserve).
    const bindingInFlight = binding >= 0 && log.flight.has(log.members[binding]!);
    if (request.defer && bindingInFlight) {
      if (log.seq > 0) this.#logs.set(id, log);
      const retry = retryMs(log.scores[binding]! - now, waitMs);
      return { granted: false, deferred: true, retryMs: retry, waitMs, startAt, now: nowMs, ruleIndex, members: [], tentative: true };
    }
    const members: string[] = [];
    for (let i = 0; i < request.cost; i++) {
      log.seq += 1;
      members.push(String(log.seq));
      insert(log, startAt + request.holdMs, String(log.seq));
      log.flight.set(String(log.seq), startAt + request.holdMs);
    }
    log.last = startAt;
    log.maxHoldMs = request.maxHoldMs;
    // As vt_extend: each booking keeps the log for its own call; earlier ones kept it for theirs.
    log.expiresAt = Math.max(log.expiresAt, startAt + request.holdMs + request.maxHoldMs + request.retainMs);
    this.#logs.set(id, log);
    // A binding slot that left the flight set unsettled is taken to have reached the vendor long ago
    // (its score no longer moves): nothing to confirm about it.
    const tentative = bindingInFlight || (waitMs > 0 && restsOnFlight(log, startAt, request.rules));
    return { granted: true, deferred: false, retryMs: 0, waitMs, startAt, now: nowMs, ruleIndex, members, tentative };
  }

  async settle(namespace: string, key: string, settle: readonly Settlement[], retainMs: number): Promise<void> {
    const nowMs = Math.ceil(this.#now());
    const id = `${namespace}\n${key}`;
    const log = this.#logs.get(id);
    if (!log || log.expiresAt <= nowMs) return;
    // No trim here: a call still in flight may have an old score that only a decision moves up.
    const latest = applySettlements(log, settle);
    log.expiresAt = Math.max(log.expiresAt, latest + retainMs);
  }

  async inspect(namespace: string, key: string, rules: readonly Rule[]): Promise<InspectResult> {
    const now = this.#now();
    const nowMs = Math.ceil(now);
    const log = this.#logs.get(`${namespace}\n${key}`);
    const live = log && log.expiresAt > nowMs ? log : undefined;
    const scores = live ? live.scores : [];
    const scoreAt = (i: number) => scores[i]!;
    const pausedUntil = live?.pausedUntil ?? 0;
    const bucketsOf: BucketsOf = live ? liveBuckets(live, nowMs) : () => [];
    const { startAt } = planSlot(scores.length, scoreAt, rules, 1, nowMs, live?.last ?? 0, pausedUntil, bucketsOf);
    return {
      now: nowMs,
      nextFreeInMs: startAt <= nowMs ? 0 : Math.ceil(startAt - now),
      pausedForMs: Math.max(0, Math.ceil(pausedUntil - now)),
      rules: rules.map((rule) => {
        const { limit, windowMs } = rule;
        const logged = countInWindow(scores.length, scoreAt, windowMs, nowMs);
        const buckets = rule.bucketMs ? bucketsOf(rule) : [];
        const used = logged + buckets.reduce((sum, bucket) => sum + bucket.count, 0);
        const oldest = Math.min(buckets[0]?.end ?? Infinity, scores[scores.length - logged] ?? Infinity);
        return { limit, windowMs, used, resetInMs: oldest === Infinity ? 0 : Math.ceil(oldest + windowMs - now) };
      }),
    };
  }

  async confirm(namespace: string, key: string, startAt: number, members: readonly string[], rules: readonly Rule[], maxHoldMs: number): Promise<boolean> {
    const now = this.#now();
    const log = this.#logs.get(`${namespace}\n${key}`);
    if (!log || log.expiresAt <= Math.ceil(now)) return true;
    applyOverdue(log, now, maxHoldMs);
    return stillFits(log.members, log.scores, startAt, Number.parseInt(members[0]!, 10), members.length, rules, liveBuckets(log, Math.ceil(now)));
  }

  async restore(namespace: string, key: string, slots: readonly RestoredSlot[], retainMs: number, maxHoldMs: number): Promise<void> {
    const now = this.#now();
    const id = `${namespace}\n${key}`;
    const log = this.#open(id, Math.ceil(now));
    for (const { releaseInMs, cost } of slots) {
      for (let i = 0; i < cost; i++) {
        log.seq += 1;
        insert(log, Math.ceil(now + releaseInMs), String(log.seq) + SETTLED_SUFFIX);
      }
    }
    log.maxHoldMs = Math.max(log.maxHoldMs, maxHoldMs);
    log.expiresAt = Math.max(log.expiresAt, expiry(log, retainMs));
    if (log.seq > 0) this.#logs.set(id, log);
  }

  async pause(namespace: string, key: string, ms: number, _retainMs: number): Promise<number> {
    const now = this.#now();
    const id = `${namespace}\n${key}`;
    const log = this.#open(id, Math.ceil(now));
    log.pausedUntil = Math.max(log.pausedUntil, Math.ceil(now + ms));
    log.expiresAt = Math.max(log.expiresAt, log.pausedUntil);
    this.#logs.set(id, log);
    return log.pausedUntil;
  }

  async close(): Promise<void> {
    this.#logs.clear();
  }

  #open(id: string, nowMs: number): KeyLog {
    const log = this.#logs.get(id);
    if (log && log.expiresAt > nowMs) return log;
    this.#logs.delete(id);
    return { scores: [], members: [], seq: 0, last: 0, pausedUntil: 0, flight: new Map(), maxHoldMs: 0, expiresAt: 0, buckets: new Map() };
  }

  /**
   * Checks the next few keys of a walk over the map that goes on from one decision to the next
   * (a Map iterator stays valid across inserts and deletes), dropping expired logs. Each decision
   * adds at most one key and checks two, so the map stays close to the number of live keys.
   */
  #sweep(nowMs: number): void {
    for (let checked = 0; checked < SWEEP_PER_CALL; checked++) {
      let next = this.#cursor.next();
      if (next.done) {
        this.#cursor = this.#logs.entries();
        next = this.#cursor.next();
        if (next.done) return;
      }
      const [id, log] = next.value;
      if (log.expiresAt <= nowMs) this.#logs.delete(id);
    }
  }
}

/**
 * When a key's log is no longer needed (`vt_expire` in lua/includes/log.lua): its latest slot is
 * history, no call in flight can count any more, and no vendor pause is on. Like the Redis store,
 * callers only ever push it later.
 */
function expiry(log: KeyLog, retainMs: number): number {
  let until = log.pausedUntil;
  const top = log.scores[log.scores.length - 1];
  if (top !== undefined) until = Math.max(until, top + retainMs);
  for (const estimate of log.flight.values()) until = Math.max(until, estimate + log.maxHoldMs + retainMs);
  return until;
}

/**
 * Whether a call in flight was taken to have left a window by `startAt` (its estimate + the shortest
 * window is at or before it): it may complete later than its estimate, so the slot is tentative.
 */
function restsOnFlight(log: KeyLog, startAt: number, rules: readonly Rule[]): boolean {
  const shortest = Math.min(...rules.map((rule) => rule.windowMs));
  for (const estimate of log.flight.values()) {
    if (estimate + shortest <= startAt) return true;
  }
  return false;
}

/**
 * `vt_fold` in lua/includes/ops.lua: when some rules are bucketed, completed calls (and calls no
 * longer counted as in flight) older than the exact rules' longest window leave the log and are
 * counted in their bucket of each distinct (window, bucket width). Buckets that no longer count are dropped.
 */
function fold(log: KeyLog, nowMs: number, rules: readonly Rule[]): void {
  if (!rules.some(isBucketed)) return;
  // One set of buckets per distinct (window, bucket width): rules sharing both read the same buckets,
  // and each call is counted in them once.
  const bucketed = [...new Map(rules.filter(isBucketed).map((rule) => [`${rule.windowMs}:${rule.bucketMs}`, rule])).values()];
  for (const [field] of log.buckets) {
    const [windowMs, bucketMs, index] = field.split(':').map(Number) as [number, number, number];
    if (index * bucketMs + windowMs <= nowMs) log.buckets.delete(field);
  }
  const before = nowMs - foldHorizon(rules);
  let kept = 0;
  for (let i = 0; i < log.scores.length; i++) {
    const score = log.scores[i]!;
    const member = log.members[i]!;
    if (score <= before && (!isUnsettled(member) || !log.flight.has(member))) {
      for (const { windowMs, bucketMs } of bucketed) {
        const index = bucketIndex(score, bucketMs!);
        // A call whose bucket no longer counts (not trimmed yet) just leaves.
        if (index * bucketMs! + windowMs <= nowMs) continue;
        const field = `${windowMs}:${bucketMs}:${index}`;
        log.buckets.set(field, (log.buckets.get(field) ?? 0) + 1);
        log.expiresAt = Math.max(log.expiresAt, index * bucketMs! + windowMs);
      }
      continue;
    }
    log.scores[kept] = score;
    log.members[kept] = member;
    kept++;
  }
  log.scores.length = kept;
  log.members.length = kept;
}

function isBucketed(rule: Rule): boolean {
  return rule.bucketMs !== undefined && rule.bucketMs > 0;
}

const NO_BUCKETS: BucketsOf = () => [];

/** The buckets of a bucketed rule that still count at `nowMs`, ascending (as `vt_buckets`). */
function liveBuckets(log: KeyLog, nowMs: number): BucketsOf {
  if (log.buckets.size === 0) return NO_BUCKETS;
  return ({ windowMs, bucketMs }) => {
    if (!bucketMs || log.buckets.size === 0) return [];
    const out: Bucket[] = [];
    for (let index = Math.floor((nowMs - windowMs) / bucketMs) + 1, last = bucketIndex(nowMs, bucketMs); index <= last; index++) {
      const count = log.buckets.get(`${windowMs}:${bucketMs}:${index}`);
      if (count) out.push({ end: index * bucketMs, count });
    }
    return out;
  };
}

/** `vt_overdue` in lua/includes/log.lua: a call past its estimate without a completion counts from now. */
function applyOverdue(log: KeyLog, now: number, maxHoldMs: number): void {
  for (const [member, estimate] of log.flight) {
    if (estimate > now) continue;
    if (estimate + maxHoldMs <= now) {
      log.flight.delete(member);
      continue;
    }
    const index = log.members.lastIndexOf(member);
    if (index >= 0 && log.scores[index]! < Math.ceil(now)) {
      log.scores.splice(index, 1);
      log.members.splice(index, 1);
      insert(log, Math.ceil(now), member);
    }
  }
}

/** Returns the latest completion applied (0 when none), as vt_settle. */
function applySettlements(log: KeyLog, settle: readonly Settlement[]): number {
  let latest = 0;
  for (const { member, releaseAt } of settle) {
    log.flight.delete(member);
    let index = log.members.lastIndexOf(member);
    if (index < 0) index = log.members.lastIndexOf(member + SETTLED_SUFFIX);
    if (index < 0) continue;
    log.scores.splice(index, 1);
    log.members.splice(index, 1);
    if (releaseAt !== null) {
      insert(log, releaseAt, member + SETTLED_SUFFIX);
      latest = Math.max(latest, releaseAt);
    }
  }
  return latest;
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
 * bytes ('10' before '9', 'n' before 'n!'), so that the slot at a rule's index, which decides
 * `deferred` and `tentative`, is the one Redis would find. Members are ASCII (digits and '!'), where
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
