import { randomBytes } from 'node:crypto';
import { StoreUnavailableError } from '../errors.js';
import type { KeyNames } from '../keys.js';
import { MAX_TIMER_MS } from '../time.js';
import { blankWitness, type Checks, type Journal } from '../journal.js';
import { replies, scripts } from './redis-scripts.js';

/*
 * Recovery after Redis lost data (docs/design.md §9): the epoch, holds and put-backs that give this
 * process's journal (lib/journal.ts) back to a store that lost it.
 */

/** Times a decision meets a changed epoch (and puts back its journal) before it gives up. */
export const MAX_RECOVERIES = 3;

/** Restores in flight at once while a journal is put back (ioredis pipelines them on one connection). */
const RESTORE_CONCURRENCY = 128;

/** How often a lookup asks again while its epoch is provisional (some connection not claimed yet). */
const CLAIM_POLL_MS = 10;

/**
 * How long a lookup asks again before it takes a provisional epoch as it is: long enough for the
 * claims of processes connecting together to land (each claims as its connection is ready), short
 * enough that a call that cannot wait for a real loss is still refused at once.
 */
const CLAIM_WAIT_MS = 100;

/**
 * Per client object (the user's), its claim token and the recoveries of the stores on it: a
 * connection is claimed (lua/epoch.lua, KEYS[2]) only while none of them holds calls.
 */
const claimsByClient = new WeakMap<object, { readonly token: string; readonly recoveries: Set<Recovery> }>();

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
  /** The user's client object: its connection is what this process claims on a young Redis. */
  readonly client: object;
  /** The earliest the store's clock can read now (ms), as the store's batches placed it (lib/time.ts). */
  storeNow(): number;
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
  readonly #claims: { readonly token: string; readonly recoveries: Set<Recovery> };
  /**
   * Namespace → the epoch value this process knows (see lua/epoch.lua): set once this process has
   * put back its journal under it (or, for a namespace seen for the first time, adopted it).
   */
  readonly #epochs = new Map<string, string>();
  readonly #epochLookups = new Map<string, Promise<string>>();
  readonly #recovering = new Map<string, Promise<boolean>>();
  /** Per namespace, when (`performance.now()`) the latest batch that found its epoch unchanged was sent. */
  readonly #epochCheckedAt = new Map<string, number>();
  /** Per namespace, when (`Date.now()`) the heartbeat last took its keys to check. */
  readonly #beatAt = new Map<string, number>();
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
    this.storeNow = deps.storeNow;
    let claims = claimsByClient.get(deps.client);
    if (claims === undefined) {
      claims = { token: randomBytes(9).toString('base64url'), recoveries: new Set() };
      claimsByClient.set(deps.client, claims);
    }
    claims.recoveries.add(this);
    this.#claims = claims;
  }

  /** `<prefix>:young`: the claims of a young standalone Redis (lua/epoch.lua, KEYS[2]). */
  get #youngKey(): string {
    return `${this.#prefix}:young`;
  }

  /**
   * The client's token while no store of this process on the client holds calls, else '': a
   * connection claimed tells a process that looks up a new namespace on a young Redis that this
   * connection holds nothing to put back (docs/design.md §9, "A start-up or a loss").
   */
  #claimToken(): string {
    for (const recovery of this.#claims.recoveries) {
      if (recovery.journal.prune(recovery.storeNow()) > 0) return '';
    }
    return this.#claims.token;
  }

  /**
   * Claims the client's connection on a young standalone Redis (the client is ready: a new
   * connection, which nothing claimed yet). Best effort: a connection not claimed only makes a
   * process that looks up a new namespace there wait its grace, as after a loss.
   */
  async claim(): Promise<void> {
    if (this.#epochNames === 0) return;
    const token = this.#claimToken();
    if (token === '') return;
    await this.#run(scripts.epoch.name, [this.#youngKey, this.#youngKey], ['', 2 * this.#heartbeatMs, 'claim', 1, token]);
  }

  /** Keys found without this process's calls (a check failed) and put back one by one. */
  keysRestored = 0;

  /** How a batch of the namespace checks its keys: each key's witness from the journal. */
  checks(namespace: string): Checks {
    const storeNow = this.storeNow();
    const checkedAt = Date.now();
    const into = blankWitness();
    return { witness: (key) => this.journal.witness(namespace, key, storeNow, checkedAt, into) };
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
   * longer while it puts them back. Otherwise it is ready at once. An epoch made to wait only
   * because a connection to a young Redis was not claimed yet is provisional: asked again every
   * CLAIM_POLL_MS, for up to CLAIM_WAIT_MS, until it is ready (every connection claimed: processes
   * starting together) or no longer provisional (a process found a loss).
   */
  #epochOf(namespace: string): Promise<string> {
    let lookup = this.#epochLookups.get(namespace);
    if (!lookup) {
      lookup = this.#firstEpoch(namespace)
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

  async #firstEpoch(namespace: string): Promise<string> {
    const graceMs = 2 * this.#heartbeatMs;
    const until = Date.now() + CLAIM_WAIT_MS;
    for (;;) {
      const id = randomBytes(6).toString('base64url');
      const { value, provisional } = replies.epochFirst(
        await this.#run(scripts.epoch.name, this.#epochKeys(namespace), [id, graceMs, 'first', this.#epochNames, this.#claimToken()]),
      );
      if (!provisional || readyOf(value) <= this.storeNow() || Date.now() >= until) return value;
      await new Promise((resolve) => setTimeout(resolve, CLAIM_POLL_MS));
    }
  }

  /** lua/epoch.lua's keys: the epoch, and on a standalone Redis the claims of a young Redis. */
  #epochKeys(namespace: string): string[] {
    return this.#epochNames === 1 ? [this.epochKey(namespace), this.#youngKey, `${this.#prefix}:${namespace}:mark`] : [this.epochKey(namespace)];
  }

  /** Runs lua/epoch.lua ('lost'): the epoch in force, created ready `graceMs` from now if missing. */
  #newEpoch(namespace: string, graceMs: number): Promise<string> {
    const id = randomBytes(6).toString('base64url');
    return this.#run(scripts.epoch.name, this.#epochKeys(namespace), [id, graceMs, 'lost', this.#epochNames]).then(replies.epochLost);
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
    this.journal.forgetLives(namespace);
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
          const { key, retainMs, entries, pointers } = item;
          const args: Array<string | number> = [retainMs, 0, holdMs, entries.length];
          for (const { member, score } of entries) args.push(member, score);
          args.push(pointers.length);
          for (const [, member, lifeMs] of pointers) args.push(member, lifeMs);
          const { log, meta } = this.#names(namespace, key);
          try {
            await this.#run(scripts.restore.name, [log, meta, ...this.#kept(namespace), ...pointers.map(([pointer]) => pointer)], args);
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
    const keys = this.#epochKeys(namespace);
    let value = epoch;
    let stopped = false;
    let timer: NodeJS.Timeout | undefined;
    let writing: Promise<void> = Promise.resolve();
    const extend = async (): Promise<boolean> => {
      try {
        const now = replies.epochExtend(await this.#run(scripts.epoch.name, keys, [idOf(value), this.#graceMs, 'extend', this.#epochNames]));
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

  /** The earliest the store's clock can read now (ms): the journal prunes nothing that may still count there. */
  readonly storeNow: () => number;

  get heartbeatMs(): number {
    return this.#heartbeatMs;
  }

  /**
   * The namespace's keys no decision checked lately, that this process holds calls on: the
   * heartbeat checks them (lib/stores/redis-heartbeat.ts), so that a key that lost data, or that
   * another process holds, is found within about two beats (the next beat starts at most a beat
   * after this one ends) even when this process decides nothing there.
   */
  unchecked(namespace: string, dueAfterMs: number): string[] {
    const storeNow = this.storeNow();
    const into = blankWitness();
    const now = Date.now();
    // Due: a key no check reached since the previous beat looked, or within `dueAfterMs` (the
    // heartbeat's, lib/stores/redis-heartbeat.ts: no longer than the soonest a beat comes after the
    // previous one, so every key the previous beat checked is due at the next).
    const before = Math.max(now - dueAfterMs, (this.#beatAt.get(namespace) ?? -Infinity) + 1);
    this.#beatAt.set(namespace, now);
    return this.journal.unchecked(namespace, before).filter((key) => this.journal.witness(namespace, key, storeNow, now, into) !== undefined);
  }

  /**
   * A batch sent at `sentAt` (`performance.now()`) found the namespace's epoch `value` in place: the
   * heartbeat need not read it for a beat, if it is still the one this process knows.
   */
  epochChecked(namespace: string, value: string, sentAt: number): void {
    if (this.#epochs.get(namespace) === value) this.#epochCheckedAt.set(namespace, sentAt);
  }

  /**
   * The heartbeat's check of the namespace's epoch: the one this process knows, or it puts back its
   * calls (an idle process too finds a loss within the grace period); a put-back that failed is
   * tried again at once. `beatStartedAt` (`performance.now()`): when the beat began.
   */
  async checkEpoch(namespace: string, beatStartedAt = Infinity): Promise<void> {
    if (this.#unrecovered.has(namespace)) {
      await this.recover(namespace);
      return;
    }
    // A batch found it unchanged within a beat (lua/batch.lua checks it with each decision), or
    // since this beat began (the beat's own checks, however long their round trip took): as fresh
    // as a read now would be.
    const checkedAt = this.#epochCheckedAt.get(namespace) ?? -Infinity;
    if (checkedAt >= beatStartedAt || performance.now() - checkedAt < this.#heartbeatMs) return;
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
