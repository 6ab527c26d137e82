import { countInWindow, isUnsettled, planSlot, retryMs, SETTLED_SUFFIX, stillFits } from '../decision.js';
import type { Rule } from '../rules.js';
import type { InspectResult, ReserveRequest, ReserveResult, Settlement, Store } from '../store.js';

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
    applySettlements(log, request.settle);
    applyOverdue(log, now, request.maxHoldMs);
    trim(log, nowMs - request.retainMs);
    const scoreAt = (i: number) => log.scores[i]!;
    const { startAt, ruleIndex, binding } = planSlot(log.scores.length, scoreAt, request.rules, request.cost, nowMs, log.last, log.pausedUntil);
    // A slot at `nowMs` starts now (the clock read is rounded up); a later one is waited for in full.
    const waitMs = startAt <= nowMs ? 0 : Math.ceil(startAt - now);
    this.#sweep(nowMs);
    if (waitMs > request.maxDelayMs) {
      if (log.seq > 0) this.#logs.set(id, log);
      return { granted: false, deferred: false, retryMs: 0, waitMs, startAt, now: nowMs, ruleIndex, members: [], tentative: false };
    }
    if (request.defer && binding >= 0 && isUnsettled(log.members[binding]!)) {
      if (log.seq > 0) this.#logs.set(id, log);
      const retry = retryMs(log.scores[binding]! - now, waitMs);
      return { granted: false, deferred: true, retryMs: retry, waitMs, startAt, now: nowMs, ruleIndex, members: [], tentative: true };
    }
    const bindingMember = binding >= 0 ? log.members[binding] : undefined;
    const members: string[] = [];
    for (let i = 0; i < request.cost; i++) {
      log.seq += 1;
      members.push(String(log.seq));
      insert(log, startAt + request.holdMs, String(log.seq));
      log.flight.set(String(log.seq), startAt + request.holdMs);
    }
    log.last = startAt;
    log.maxHoldMs = request.maxHoldMs;
    log.expiresAt = Math.max(log.expiresAt, expiry(log, request.retainMs));
    this.#logs.set(id, log);
    const tentative = binding >= 0 && isUnsettled(bindingMember!);
    return { granted: true, deferred: false, retryMs: 0, waitMs, startAt, now: nowMs, ruleIndex, members, tentative };
  }

  async settle(namespace: string, key: string, settle: readonly Settlement[], retainMs: number): Promise<void> {
    const nowMs = Math.ceil(this.#now());
    const id = `${namespace}\n${key}`;
    const log = this.#logs.get(id);
    if (!log || log.expiresAt <= nowMs) return;
    // No trim here: a call still in flight may have an old score that only a decision moves up.
    applySettlements(log, settle);
    log.expiresAt = Math.max(log.expiresAt, expiry(log, retainMs));
  }

  async inspect(namespace: string, key: string, rules: readonly Rule[]): Promise<InspectResult> {
    const now = this.#now();
    const nowMs = Math.ceil(now);
    const log = this.#logs.get(`${namespace}\n${key}`);
    const live = log && log.expiresAt > nowMs ? log : undefined;
    const scores = live ? live.scores : [];
    const scoreAt = (i: number) => scores[i]!;
    const pausedUntil = live?.pausedUntil ?? 0;
    const { startAt } = planSlot(scores.length, scoreAt, rules, 1, nowMs, live?.last ?? 0, pausedUntil);
    return {
      now: nowMs,
      nextFreeInMs: startAt <= nowMs ? 0 : Math.ceil(startAt - now),
      pausedForMs: Math.max(0, Math.ceil(pausedUntil - now)),
      rules: rules.map(({ limit, windowMs }) => {
        const used = countInWindow(scores.length, scoreAt, windowMs, nowMs);
        const oldest = scores[scores.length - used];
        return { limit, windowMs, used, resetInMs: oldest === undefined ? 0 : Math.ceil(oldest + windowMs - now) };
      }),
    };
  }

  async confirm(namespace: string, key: string, startAt: number, members: readonly string[], rules: readonly Rule[], maxHoldMs: number): Promise<boolean> {
    const now = this.#now();
    const log = this.#logs.get(`${namespace}\n${key}`);
    if (!log || log.expiresAt <= Math.ceil(now)) return true;
    applyOverdue(log, now, maxHoldMs);
    return stillFits(log.members, log.scores, startAt, Number.parseInt(members[0]!, 10), members.length, rules);
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
    return { scores: [], members: [], seq: 0, last: 0, pausedUntil: 0, flight: new Map(), maxHoldMs: 0, expiresAt: 0 };
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

function applySettlements(log: KeyLog, settle: readonly Settlement[]): void {
  for (const { member, releaseAt } of settle) {
    log.flight.delete(member);
    let index = log.members.lastIndexOf(member);
    if (index < 0) index = log.members.lastIndexOf(member + SETTLED_SUFFIX);
    if (index < 0) continue;
    log.scores.splice(index, 1);
    log.members.splice(index, 1);
    if (releaseAt !== null) insert(log, releaseAt, member + SETTLED_SUFFIX);
  }
}

function trim(log: KeyLog, before: number): void {
  let drop = 0;
  while (drop < log.scores.length && log.scores[drop]! <= before) drop++;
  if (drop > 0) {
    log.scores.splice(0, drop);
    log.members.splice(0, drop);
  }
}

/** Inserts keeping scores ascending; equal scores keep booking order, as a Redis sorted set does by member. */
function insert(log: KeyLog, score: number, member: string): void {
  let lo = 0;
  let hi = log.scores.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (log.scores[mid]! <= score) lo = mid + 1;
    else hi = mid;
  }
  log.scores.splice(lo, 0, score);
  log.members.splice(lo, 0, member);
}
