import { randomBytes } from 'node:crypto';
import { StoreUnavailableError } from '../errors.js';
import type { KeyNames } from '../keys.js';
import { MAX_TIMER_MS } from '../time.js';
import { scripts } from './redis-scripts.js';

/*
 * Recovery after Redis lost data (docs/design.md §9): the journal of what this process booked and
 * still counts, and the epoch, holds and put-backs that give it back to a store that lost it.
 */

/**
 * This process's newest slot on a key, and until when the key must hold it (store clock, ms): a
 * decision checks it before it relies on the key (lua/includes/check.lua).
 */
export interface Witness {
  readonly number: number;
  /** Its score as this process wrote it (a fold may have moved it into buckets once past it). */
  readonly score: number;
  /** Until then the slot counts: no trim removes it before. */
  readonly keyUntil: number;
}

/** A witness's times are this much earlier than the slot's own (rounding of the scores written). */
const WITNESS_MARGIN_MS = 5;

/** One of this process's slots, as the store should hold it. */
export interface JournalEntry {
  readonly member: string;
  /** Store clock, ms: the slot's release, its completion once known, else its bound (start + maxHoldMs). */
  readonly score: number;
}

interface KeyJournal {
  retainMs: number;
  /** `Date.now()` of the key's last check (a decision's or the heartbeat's). */
  checkedAt: number;
  /** `Date.now()` when this process last put back its calls on the key (a check failed). */
  restoredAt: number;
  /** Calls without a completion yet: slot number → bound. Few: the calls in flight or booked ahead. */
  readonly pending: Map<number, number>;
  /** The highest number in `pending` (numbers only grow), or -1 when it must be found again. */
  newest: number;
  /**
   * Completed calls, in the order their completions came: slot numbers and completion times as
   * two packed arrays of numbers (16 bytes a call, where a Map entry costs about 100), since a key
   * of a long window keeps many. Entries before `head` were pruned.
   */
  members: number[];
  scores: number[];
  head: number;
}

/**
 * What this process booked in a shared store and still counts there: for each key, its slots until
 * they fall out of every window. Kept so that a store that lost its data can be given back this
 * process's share of it (`RedisStore` recovery). Memory follows the calls still inside their
 * windows; `prune` drops the rest. Slots are numbered by the store; `member(n)` names them.
 */
export class Journal {
  /** Store clock minus `Date.now()`, from the latest decision (for pruning between decisions). */
  clockOffsetMs = 0;
  readonly #namespaces = new Map<string, Map<string, KeyJournal>>();
  readonly #member: (number: number) => string;
  #size = 0;

  constructor(member: (number: number) => string) {
    this.#member = member;
  }

  /** Slots booked: numbers `first` .. `first + count - 1`, each with its bound. */
  book(namespace: string, key: string, first: number, count: number, bound: number, retainMs: number, storeNow: number): void {
    // The store's reading comes rounded up and Date.now() truncated: 2 ms less, so that the estimate
    // never runs ahead of the store's clock (pruning a slot before it stops counting there).
    this.clockOffsetMs = storeNow - Date.now() - 2;
    const journal = this.#open(namespace, key, retainMs);
    for (let number = first; number < first + count; number++) {
      if (!journal.pending.has(number)) this.#size += 1;
      journal.pending.set(number, bound);
    }
    if (journal.newest >= 0) journal.newest = Math.max(journal.newest, first + count - 1);
  }

  /**
   * Calls put into the store for this process (`restore`: calls decided locally while it was down),
   * so that they are put back too if the store later loses its data.
   */
  restored(namespace: string, key: string, entries: ReadonlyArray<{ number: number; score: number }>, retainMs: number): void {
    if (entries.length === 0) return;
    const journal = this.#open(namespace, key, retainMs);
    for (const { number, score } of entries) this.#complete(journal, number, score);
  }

  /** Completions and releases, as sent to the store: NUMBER, RELEASE_AT pairs (RELEASE_AT -1: given back, never started). */
  settle(namespace: string, key: string, pairs: readonly number[]): void {
    const journal = this.#namespaces.get(namespace)?.get(key);
    if (!journal) return;
    for (let i = 0; i < pairs.length; i += 2) {
      const number = pairs[i]!;
      const bound = journal.pending.get(number);
      // Only a call without a completion is settled; a completion sent again is already here.
      if (bound === undefined) continue;
      journal.pending.delete(number);
      this.#size -= 1;
      const releaseAt = pairs[i + 1]!;
      if (releaseAt >= 0) this.#complete(journal, number, Math.min(bound, releaseAt));
    }
  }

  #complete(journal: KeyJournal, number: number, score: number): void {
    journal.members.push(number);
    journal.scores.push(score);
    this.#size += 1;
  }

  #open(namespace: string, key: string, retainMs: number): KeyJournal {
    let keys = this.#namespaces.get(namespace);
    if (!keys) this.#namespaces.set(namespace, (keys = new Map()));
    let journal = keys.get(key);
    if (!journal) keys.set(key, (journal = { retainMs, checkedAt: 0, restoredAt: 0, pending: new Map(), newest: -1, members: [], scores: [], head: 0 }));
    journal.retainMs = Math.max(journal.retainMs, retainMs);
    return journal;
  }

  /** The key's slots that still count at `storeNow` (as `prune` would keep them). */
  keyEntries(namespace: string, key: string, storeNow: number): JournalEntry[] {
    const journal = this.#namespaces.get(namespace)?.get(key);
    return journal ? this.#entriesOf(journal, storeNow) : [];
  }

  /**
   * The newest of this process's slots on the key that still counts at `storeNow` (a call without a
   * completion, else the latest completed), or undefined when none does: a key this process holds
   * nothing on needs no check. Marks the key checked at `checkedAt`.
   */
  witness(namespace: string, key: string, storeNow: number, checkedAt = Date.now()): Witness | undefined {
    const journal = this.#namespaces.get(namespace)?.get(key);
    if (!journal) return undefined;
    journal.checkedAt = checkedAt;
    const { retainMs, pending, members, scores } = journal;
    let number = -1;
    let score = 0;
    if (pending.size > 0) {
      if (!pending.has(journal.newest)) {
        journal.newest = -1;
        for (const n of pending.keys()) journal.newest = Math.max(journal.newest, n);
      }
      number = journal.newest;
      score = pending.get(number)!;
    }
    if (number < 0 && journal.head < scores.length) {
      number = members[members.length - 1]!;
      score = scores[scores.length - 1]!;
    }
    if (number < 0 || score + retainMs - WITNESS_MARGIN_MS <= storeNow) return undefined;
    return { number, score, keyUntil: score + retainMs - WITNESS_MARGIN_MS };
  }

  /**
   * Whether this process should put back its calls on the key now (a check failed): not when it
   * did within `withinMs` (checks failing while the key is held find the same loss).
   */
  restoreDue(namespace: string, key: string, withinMs: number, now = Date.now()): boolean {
    const journal = this.#namespaces.get(namespace)?.get(key);
    return journal !== undefined && now - journal.restoredAt >= withinMs;
  }

  /** This process put back its calls on the key at `now`. */
  restoredNow(namespace: string, key: string, now = Date.now()): void {
    const journal = this.#namespaces.get(namespace)?.get(key);
    if (journal) journal.restoredAt = now;
  }

  /** The namespace's keys not checked since `before` (`Date.now()` ms). */
  unchecked(namespace: string, before: number): string[] {
    const out: string[] = [];
    for (const [key, journal] of this.#namespaces.get(namespace) ?? []) if (journal.checkedAt < before) out.push(key);
    return out;
  }

  namespaces(): string[] {
    return [...this.#namespaces.keys()];
  }

  /** The namespace's keys (or those of `only`) with the slots that still count at `storeNow`. */
  entriesOf(namespace: string, storeNow: number, only?: readonly string[]): Array<{ key: string; retainMs: number; entries: JournalEntry[] }> {
    this.prune(storeNow);
    const out = [];
    const keys = this.#namespaces.get(namespace);
    for (const key of only ?? keys?.keys() ?? []) {
      const journal = keys?.get(key);
      if (journal) out.push({ key, retainMs: journal.retainMs, entries: this.#entriesOf(journal, storeNow) });
    }
    return out;
  }

  /** A key's slots that still count at `storeNow`: its calls without a completion, then its completed ones. */
  #entriesOf(journal: KeyJournal, storeNow: number): JournalEntry[] {
    const { retainMs, pending, members, scores } = journal;
    const entries: JournalEntry[] = [];
    for (const [number, score] of pending) {
      if (score + retainMs > storeNow) entries.push({ member: this.#member(number), score });
    }
    for (let i = journal.head; i < scores.length; i++) {
      if (scores[i]! + retainMs > storeNow) entries.push({ member: this.#member(members[i]!), score: scores[i]! });
    }
    return entries;
  }

  /** Drops slots that no longer count anywhere (as the store's own expiry would); returns the slots left. */
  prune(storeNow: number): number {
    for (const [namespace, keys] of this.#namespaces) {
      for (const [key, journal] of keys) {
        const { retainMs, pending, scores } = journal;
        for (const [number, score] of pending) {
          if (score + retainMs <= storeNow) {
            pending.delete(number);
            this.#size -= 1;
          }
        }
        // Completions come roughly in time order: drop from the front while they no longer count.
        // One that came out of order waits behind the one before it (by at most the spread of
        // response times): kept a little longer, never dropped early.
        while (journal.head < scores.length && scores[journal.head]! + retainMs <= storeNow) {
          journal.head += 1;
          this.#size -= 1;
        }
        if (journal.head > 32 && journal.head * 2 > scores.length) {
          journal.members = journal.members.slice(journal.head);
          journal.scores = scores.slice(journal.head);
          journal.head = 0;
        }
        if (pending.size === 0 && journal.head === journal.scores.length) keys.delete(key);
      }
      if (keys.size === 0) this.#namespaces.delete(namespace);
    }
    return this.#size;
  }
}

/** The checks of a batch's keys (lua/includes/check.lua): each key's witness. */
export interface Checks {
  witness(key: string): Witness | undefined;
}

/** Times a decision meets a changed epoch (and puts back its journal) before it gives up. */
export const MAX_RECOVERIES = 3;

/** Restores in flight at once while a journal is put back (ioredis pipelines them on one connection). */
const RESTORE_CONCURRENCY = 128;

/** What recovery needs of the store: its client's GET, and its scripts with a timeout. */
export interface RecoveryDeps {
  readonly prefix: string;
  readonly journal: Journal;
  readonly heartbeatMs: number;
  readonly graceMs: number;
  get(key: string): Promise<string | null>;
  /** Runs a script by name with a timeout. */
  run(name: string, keys: readonly string[], args: ReadonlyArray<string | number>): Promise<unknown>;
  /** The Redis keys of a user key (the store's layout). */
  names(namespace: string, key: string): KeyNames;
  /** The namespace's index of kept keys, as the last key of a script; none on a Cluster. */
  kept(namespace: string): string[];
  /** A Cluster: no batch reaches the epoch, and the epoch names no Redis (each key does, lua/epoch.lua). */
  readonly cluster: boolean;
}

/**
 * Finds a Redis that lost its data (restart without persistence, `FLUSHALL`, failover to a replica
 * that lagged) and puts back this process's calls from its journal before anything new is decided
 * (docs/design.md, "When Redis loses its data"). Each namespace has an epoch key `<id>:<ready ms>`;
 * every decision checks it (lua/batch.lua), and a process that finds it changed puts back its
 * journal under a grace period during which no process decides anything new.
 */
export class Recovery {
  readonly journal: Journal;
  readonly #prefix: string;
  readonly #heartbeatMs: number;
  readonly #graceMs: number;
  /** lua/epoch.lua's NAMES: 1 on a standalone Redis, where the epoch names the Redis that created it. */
  readonly #epochNames: 0 | 1;
  readonly #client: Pick<RecoveryDeps, 'get'>;
  readonly #run: RecoveryDeps['run'];
  readonly #names: RecoveryDeps['names'];
  readonly #kept: RecoveryDeps['kept'];
  /**
   * Namespace → the epoch value this process knows (see lua/epoch.lua): set once this process has
   * put back its journal under it (or, for a namespace seen for the first time, adopted it).
   */
  readonly #epochs = new Map<string, string>();
  readonly #epochLookups = new Map<string, Promise<string>>();
  readonly #recovering = new Map<string, Promise<boolean>>();
  /** Namespaces whose put-back did not finish: nothing is sent there before a recovery succeeds. */
  readonly #unrecovered = new Set<string>();
  /** Bumped by every recovery: a batch that met a changed epoch after one is just sent again. */
  generation = 0;
  /** Times this process found that Redis had lost its data and put back its journal. */
  recoveries = 0;

  constructor(deps: RecoveryDeps) {
    this.journal = deps.journal;
    this.#names = deps.names;
    this.#kept = deps.kept;
    this.#prefix = deps.prefix;
    this.#heartbeatMs = deps.heartbeatMs;
    this.#graceMs = deps.graceMs;
    this.#epochNames = deps.cluster ? 0 : 1;
    this.#client = { get: deps.get };
    this.#run = deps.run;
  }

  /** Keys found without this process's calls (a check failed) and put back one by one. */
  keysRestored = 0;

  /** How a batch of the namespace checks its keys: each key's witness from the journal. */
  checks(namespace: string): Checks {
    const storeNow = this.storeNow();
    const checkedAt = Date.now();
    return { witness: (key) => this.journal.witness(namespace, key, storeNow, checkedAt) };
  }

  get graceMs(): number {
    return this.#graceMs;
  }

  /**
   * Puts back this process's calls on keys that lost data, once per grace period each (checks
   * finding the key held while it stays held find the same loss): those a check found without them
   * (`lost`: the key is held again if that added anything, in case the hold went with the key),
   * and those found held (`held`: without holding, so that put-backs never keep a key held).
   */
  async restoreKeys(namespace: string, lost: readonly string[], held: readonly string[] = []): Promise<void> {
    const due = (keys: readonly string[]) => keys.filter((key) => this.journal.restoreDue(namespace, key, this.#graceMs));
    const lostDue = due(lost);
    const heldDue = due(held).filter((key) => !lost.includes(key));
    await Promise.all([this.#restoreJournal(namespace, lostDue, this.#graceMs), this.#restoreJournal(namespace, heldDue, 0)]);
    // Only once back: a put-back that failed is tried again at the next finding.
    const now = Date.now();
    for (const key of [...lostDue, ...heldDue]) this.journal.restoredNow(namespace, key, now);
    this.keysRestored += lostDue.length + heldDue.length;
  }

  /** The epoch this process knows for the namespace, looked up (created if missing) the first time. */
  epochOf(namespace: string): Promise<string> | string {
    return this.#epochs.get(namespace) ?? this.#epochOf(namespace);
  }

  epochKey(namespace: string): string {
    return `${this.#prefix}:${namespace}:epoch`;
  }

  /**
   * The namespace's epoch for a namespace this process has never seen. A missing epoch means a new
   * namespace, or a Redis that lost its data before any live process noticed. When the Redis shows
   * a sign of a loss (lua/epoch.lua, 'first'), it is created ready two heartbeats from now: time
   * for every process that holds calls there to find it (each checks every heartbeat) and hold it
   * longer while it puts them back. Otherwise it is ready at once.
   */
  #epochOf(namespace: string): Promise<string> {
    let lookup = this.#epochLookups.get(namespace);
    if (!lookup) {
      lookup = this.#newEpoch(namespace, 2 * this.#heartbeatMs, 'first')
        .then((value) => {
          // A recovery that started meanwhile decides what this process knows.
          if (!this.#recovering.has(namespace) && !this.#unrecovered.has(namespace)) this.#epochs.set(namespace, value);
          return value;
        })
        .finally(() => this.#epochLookups.delete(namespace));
      this.#epochLookups.set(namespace, lookup);
    }
    return lookup;
  }

  /** Runs lua/epoch.lua: the epoch in force, created (ready `graceMs` from now, see its MODE) if missing. */
  #newEpoch(namespace: string, graceMs: number, mode: 'lost' | 'first' = 'lost'): Promise<string> {
    const id = randomBytes(6).toString('base64url');
    return this.#run(scripts.epoch.name, [this.epochKey(namespace)], [id, graceMs, mode, this.#epochNames]) as Promise<string>;
  }

  /**
   * Returns once no recovery of the namespace is running in this process and none is owed (a
   * put-back that failed is tried again first); rejects when that recovery fails.
   */
  async recovered(namespace: string): Promise<void> {
    for (;;) {
      const running = this.#recovering.get(namespace);
      if (running) await running;
      else if (this.#unrecovered.has(namespace)) await this.recover(namespace);
      else return;
    }
  }

  /**
   * Returns once this process knows the namespace's epoch in force (checked in Redis now) and it is
   * ready: every live process has put back its calls.
   */
  async untilReady(namespace: string): Promise<void> {
    for (let round = 0; round < 100; round++) {
      await this.recovered(namespace);
      const known = this.#epochs.get(namespace);
      if (known === undefined) {
        // A namespace never seen: as a first decision would.
        await this.#epochOf(namespace);
        continue;
      }
      const value = await this.#client.get(this.epochKey(namespace));
      if (value !== known) {
        await this.recover(namespace);
        continue;
      }
      const waitMs = readyOf(value) - this.storeNow();
      if (waitMs <= 0) return;
      await new Promise((resolve) => setTimeout(resolve, Math.min(waitMs, this.#heartbeatMs)).unref());
    }
    throw new StoreUnavailableError('The epoch of the namespace kept changing (Redis losing its data again and again)');
  }

  /**
   * One recovery at a time per namespace; callers that find one running wait for it. Resolves true
   * when Redis had lost the data (the journal was put back), false when the epoch only had its
   * grace extended, or had not changed.
   */
  recover(namespace: string): Promise<boolean> {
    let recovery = this.#recovering.get(namespace);
    if (!recovery) {
      recovery = this.#putBack(namespace).finally(() => this.#recovering.delete(namespace));
      this.#recovering.set(namespace, recovery);
    }
    return recovery;
  }

  /**
   * Redis lost the namespace's data: takes (or creates, with a grace period during which nothing new
   * is decided) the new epoch, then puts back every call of the journal still inside its window, and
   * only then knows the epoch. If the put-back fails, the namespace stays owed a recovery: the next
   * operation (or heartbeat) puts the journal back again (restores never overwrite). While the
   * put-back runs, the epoch's ready time is kept ahead (#holdGrace), so that no process decides
   * anything before this one is done.
   */
  async #putBack(namespace: string): Promise<boolean> {
    if (this.journal.entriesOf(namespace, this.storeNow()).length === 0) {
      // Nothing of this process's to put back, but Redis lost the epoch (it never expires): a new
      // one is ready two heartbeats from now, time for every process that holds calls there to find
      // it and hold it while it puts them back (as 'first' with a sign of a loss).
      this.#epochs.set(namespace, await this.#newEpoch(namespace, 2 * this.#heartbeatMs));
      this.#unrecovered.delete(namespace);
      return false;
    }
    const known = this.#unrecovered.has(namespace) ? undefined : this.#epochs.get(namespace);
    let epoch = await this.#newEpoch(namespace, this.#graceMs);
    if (known !== undefined && idOf(epoch) === idOf(known)) {
      // No loss: the same epoch, or its grace extended by a process still putting back.
      this.#epochs.set(namespace, epoch);
      return false;
    }
    this.#epochs.delete(namespace);
    this.#unrecovered.add(namespace);
    this.generation += 1;
    for (let attempt = 1; ; attempt++) {
      const grace = this.#holdGrace(namespace, epoch);
      let current: string | null;
      try {
        await this.#restoreJournal(namespace);
        // Still the same epoch? A second loss during the put-back wiped what was put back before it.
        current = await this.#client.get(this.epochKey(namespace));
      } finally {
        await grace.stop();
      }
      if (current !== null && idOf(current) === idOf(epoch)) {
        epoch = current;
        break;
      }
      if (attempt >= MAX_RECOVERIES) throw new StoreUnavailableError('Redis lost its data again while this process was putting its calls back');
      epoch = await this.#newEpoch(namespace, this.#graceMs);
    }
    this.recoveries += 1;
    this.#epochs.set(namespace, epoch);
    this.#unrecovered.delete(namespace);
    return true;
  }

  /**
   * Puts back the namespace's journal, RESTORE_CONCURRENCY keys at a time. A key whose restore fails
   * is tried once more after the others; a second failure rejects (once every other key is back).
   */
  async #restoreJournal(namespace: string, keys?: readonly string[], holdMs = 0): Promise<void> {
    let todo = this.journal.entriesOf(namespace, this.storeNow(), keys);
    let failure: unknown;
    for (let pass = 0; pass < 2 && todo.length > 0; pass++) {
      const failed: typeof todo = [];
      let next = 0;
      const worker = async () => {
        while (next < todo.length) {
          const item = todo[next++]!;
          const { key, retainMs, entries } = item;
          const args: Array<string | number> = [retainMs, 0, holdMs, entries.length];
          for (const { member, score } of entries) args.push(member, score);
          const { log, meta } = this.#names(namespace, key);
          try {
            await this.#run(scripts.restore.name, [log, meta, ...this.#kept(namespace)], args);
          } catch (error) {
            failure ??= error;
            failed.push(item);
          }
        }
      };
      await Promise.all(Array.from({ length: Math.min(RESTORE_CONCURRENCY, todo.length) }, worker));
      todo = failed;
    }
    if (todo.length > 0) throw failure;
  }

  /**
   * While this process puts back its journal, keeps the epoch's ready time at least half a grace
   * period ahead: when less is left, lua/epoch.lua (EXTEND) moves it to now + graceMs in one atomic
   * step, and only if the epoch is still this one (never shortening a later time another process
   * set). Processes that knew the epoch meet a changed value, read it again and, finding the same
   * id, only take the later ready time. If the script finds no epoch, or another one (Redis lost its
   * data again), it stops: the put-back then finds the epoch changed and starts again.
   */
  #holdGrace(namespace: string, epoch: string): { stop(): Promise<void> } {
    const key = this.epochKey(namespace);
    let value = epoch;
    let stopped = false;
    let timer: NodeJS.Timeout | undefined;
    let writing: Promise<void> = Promise.resolve();
    const extend = async (): Promise<boolean> => {
      try {
        const now = (await this.#run(scripts.epoch.name, [key], [idOf(value), this.#graceMs, 'extend', this.#epochNames])) as string | null;
        if (now !== null && idOf(now) === idOf(value)) value = now;
        else stopped = true;
        return true;
      } catch {
        // Redis unreachable: the put-back fails too, or this is tried again shortly.
        return false;
      }
    };
    const schedule = (afterMs = 0): void => {
      if (stopped) return;
      const lead = this.#graceMs / 2;
      timer = setTimeout(
        () => {
          writing = extend().then((ok) => schedule(ok ? 0 : 50));
        },
        Math.max(afterMs, Math.min(readyOf(value) - lead - this.storeNow(), MAX_TIMER_MS)),
      );
      timer.unref();
    };
    schedule();
    return {
      stop: async () => {
        stopped = true;
        clearTimeout(timer);
        await writing;
      },
    };
  }

  storeNow(): number {
    return Date.now() + this.journal.clockOffsetMs;
  }

  get heartbeatMs(): number {
    return this.#heartbeatMs;
  }

  /**
   * The namespace's keys no decision checked within a beat, that this process holds calls on: the
   * store's heartbeat checks them (lib/stores/redis-store.ts), so that a key that lost data, or that
   * another process holds, is found within about two beats (the next beat starts a beat after this
   * one ends) even when this process decides nothing there.
   */
  unchecked(namespace: string): string[] {
    const storeNow = this.storeNow();
    return this.journal.unchecked(namespace, Date.now() - this.#heartbeatMs).filter((key) => this.journal.witness(namespace, key, storeNow) !== undefined);
  }

  /**
   * The heartbeat's check of the namespace's epoch: the one this process knows, or it puts back its
   * calls (an idle process too finds a loss within the grace period); a put-back that failed is
   * tried again at once.
   */
  async checkEpoch(namespace: string): Promise<void> {
    if (this.#unrecovered.has(namespace)) {
      await this.recover(namespace);
      return;
    }
    const known = this.#epochs.get(namespace);
    const value = await this.#client.get(this.epochKey(namespace));
    if (known === undefined) await this.#epochOf(namespace);
    else if (value !== known) await this.recover(namespace);
  }
}

/** The id of an epoch value `<id>:<ready ms>`. */
function idOf(epoch: string): string {
  return epoch.slice(0, epoch.lastIndexOf(':'));
}

/** The ready time (ms, store clock) of an epoch value `<id>:<ready ms>`. */
export function readyOf(epoch: string): number {
  return Number(epoch.slice(epoch.lastIndexOf(':') + 1));
}
