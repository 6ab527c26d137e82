/*
 * A process that dies with slots booked ahead (docs/design.md §5, "A process that dies"): while
 * this process holds slots booked ahead in a namespace it stamps the namespace's `alive` hash
 * (lua/alive.lua) every STAMP_EVERY_MS; a process whose decisions on a key wait reads the stamps
 * and gives back (lua/reap.lua) the slots of processes whose stamp went stale, booked to start
 * after it went stale. Before this process starts a slot booked ahead it checks that the slot
 * cannot have been given back that way (`Stamps.mayStart`). Stamps and reads ride the namespace's
 * batches when one goes out (lua/batch.lua's ALIVE: `ride`); a stamp or a read of its own goes
 * only when none went in time.
 */

import type { KeyNames } from '../keys.js';
import type { StoreNotice } from '../store.js';
import { replies, scripts } from './redis-scripts.js';

/**
 * How long after the previous stamp a process that holds slots booked ahead stamps the namespace at
 * the latest (ms): STALE_MS less room for a stamp a little late (its round trip, the event loop), so
 * that it is no gap. A stamp rides a batch of the namespace going out at least RIDE_AFTER of this
 * after the previous one; one of its own (a client command) goes only when no batch took it.
 */
export const STAMP_EVERY_MS = 550;
/**
 * A stamp or a read of stamps rides a batch once this share of its period has passed since the
 * previous one: a process whose batches go a few times a period sends none of its own, and its
 * timer, moved a period past each ride, does not fire. A batch that may book carries a stamp
 * whenever stamps go on, covering the slots it books: a slot asked for after the latest stamp is
 * in none, and counts to its bound if its process dies before the next one. (When a booking batch
 * carried one only past half a period, a process killed 0.3 s after its last bookings left those
 * slots counting: the survivor of spec/dead-process.spec.ts took 2–6× the ideal in 2 runs of 3.)
 */
const RIDE_AFTER = 0.2;
/**
 * A stamp older than this (ms, store clock) is stale: its process's slots booked to start later than
 * the stamp + STALE_MS never started. The owner tolerates gaps up to STALE_MS - STAMP_MARGIN_MS
 * between its confirmed stamps (its event loop or its link to Redis stalling for about 0.8 s):
 * past that it books its slots again rather than start them.
 */
export const STALE_MS = 800;
/** Rounding of the store times compared (the stamp is written in whole ms, starts rounded up). */
const STAMP_MARGIN_MS = 20;
/** Stamps not renewed for this long are dropped (their processes are long dead): the hash stays bounded. */
const KEEP_MS = 3_600_000;
/** Every this many stamps, the writer also drops stamps older than KEEP_MS. */
const SWEEP_EVERY = 100;
/**
 * How often a process with keys whose decisions wait reads the namespace's stamps (ms): as often as
 * it stamps, so that a stamp of its own carries the read.
 */
const WATCH_EVERY_MS = STAMP_EVERY_MS;

type Run = (name: string, keys: readonly string[], args: ReadonlyArray<string | number>) => Promise<unknown>;

/** One namespace's stamps written by this process. */
interface NamespaceStamps {
  /** The slot number the latest stamp sent covers (slots numbered up to it were asked for before it was sent); 0: none sent. */
  sent: number;
  /** Slots numbered below this may have been given back by another process (a gap in the stamps): they never start. */
  from: number;
  /** Store time of the latest stamp Redis confirmed. */
  confirmed: number | undefined;
  /** Store time until which this process holds slots booked ahead or waits here: stamps go on until a little past it. */
  aheadUntil: number;
  /** The largest maxHoldMs of the namespace's slots (the reaper derives a slot's start from its score with it). */
  hold: number;
  /** The stamps' timer, while they go on (set from the first hold until the stamp is dropped). */
  timer: NodeJS.Timeout | undefined;
  /** `timer` has not fired yet: a ride may move it (once fired, its stamp is under way and arms the next itself). */
  armed: boolean;
  /** A stamp of this process is in the hash (not yet dropped). */
  written: boolean;
  count: number;
  /** `performance.now()` when the latest stamp was sent (on its own, or riding a batch). */
  sentAt: number;
}

/** A stamp sent riding a batch: what its answer is judged against (`Stamps.answered`). */
export interface StampTicket {
  readonly state: NamespaceStamps;
  /** What the stamps sent before it covered. */
  readonly before: number;
}

/** What a batch of a namespace carries of its liveness stamps (lua/batch.lua's ALIVE), and who takes the answer. */
export interface Ride {
  /** ALIVE's fields: N (-1: no stamp), HOLD, KEEP_MS, SWEEP, READ. */
  readonly args: ReadonlyArray<string | number>;
  readonly read: boolean;
  readonly ticket: StampTicket | undefined;
}

export interface StampsDeps {
  readonly tag: string;
  /** The number of the newest slot this process asked for. */
  seq(): number;
  /** The store clock, as this process estimates it. */
  storeNow(): number;
  aliveKey(namespace: string): string;
  run: Run;
  /** Whether a stamp of its own reads the namespace's stamps too, for the reaper (`Reaper.rides`). */
  rides?(namespace: string): boolean;
  /** The stamps a stamp of its own read (`Reaper.read`). */
  read?(namespace: string, stamps: readonly unknown[]): void;
  /** Tells the store's watchers (`stampFailed`). */
  notify?(notice: StoreNotice): void;
}

/** The stamps this process writes, and the check before it starts a slot booked ahead. */
export class Stamps {
  readonly #deps: StampsDeps;
  readonly #namespaces = new Map<string, NamespaceStamps>();
  #closed = false;
  /** A stamp of its own failed and none was answered since: said once an episode. */
  #failing = false;

  constructor(deps: StampsDeps) {
    this.#deps = deps;
  }

  /**
   * This process holds a slot booked ahead to start at `until` (store clock), or waits on a key
   * (listed in its waiting processes) until then: stamps start now if they had stopped, and go on
   * until then. A process found dead loses its slots booked ahead, and its place in the lists of
   * waiting processes (which would otherwise get the wakes meant for the living).
   */
  holds(namespace: string, until: number, maxHoldMs: number): void {
    if (this.#closed) return;
    let state = this.#namespaces.get(namespace);
    if (!state) {
      state = { sent: 0, from: 0, confirmed: undefined, aheadUntil: 0, hold: 0, timer: undefined, armed: false, written: false, count: 0, sentAt: -Infinity };
      this.#namespaces.set(namespace, state);
    }
    state.aheadUntil = Math.max(state.aheadUntil, until);
    state.hold = Math.max(state.hold, maxHoldMs);
    if (state.timer === undefined) this.#schedule(namespace, state, 0);
  }

  /**
   * Whether this process may start its slots `numbers`, booked to start at `startAt` (store clock):
   * none of them can have been given back by a reaper. A slot asked for after the latest stamp was
   * sent is in no stamp: no reaper touches it. Else it needs the stamps unbroken since it was asked
   * for (no gap over STALE_MS - margin between confirmed stamps), the latest confirmed one no more
   * than STALE_MS - margin before its start.
   */
  mayStart(namespace: string, numbers: readonly number[], startAt: number): boolean {
    const state = this.#namespaces.get(namespace);
    if (state === undefined) return true;
    for (const number of numbers) {
      if (number > state.sent) continue;
      if (number < state.from || state.confirmed === undefined || startAt > state.confirmed + STALE_MS - STAMP_MARGIN_MS) return false;
    }
    return true;
  }

  /**
   * A stamp for a batch of the namespace about to go out, if one is due: stamps go on (their timer
   * runs), and the batch `books` or the previous stamp went at least RIDE_AFTER of STAMP_EVERY_MS
   * ago. Its args are ALIVE's
   * N, HOLD, KEEP_MS and SWEEP; the batch's answer goes to `answered`.
   */
  ride(namespace: string, books: boolean): { readonly args: number[]; readonly ticket: StampTicket } | undefined {
    const state = this.#namespaces.get(namespace);
    if (state === undefined || state.timer === undefined || this.#closed) return undefined;
    if ((!books && performance.now() - state.sentAt < RIDE_AFTER * STAMP_EVERY_MS) || this.#deps.storeNow() > state.aheadUntil + STALE_MS) return undefined;
    const before = this.#sent(state);
    // The next stamp of its own is due a period after this one: its timer waits until then (a
    // timer that fired already has its stamp under way, which arms the next one itself).
    if (state.armed) {
      clearTimeout(state.timer);
      this.#schedule(namespace, state, STAMP_EVERY_MS);
    }
    return { args: [state.sent, state.hold, KEEP_MS, state.count % SWEEP_EVERY === 0 ? 1 : 0], ticket: { state, before } };
  }

  /** A stamp that rode a batch was written at `at` (-1: not written), or the batch failed with `error`. */
  answered(ticket: StampTicket, at: number | undefined, error?: unknown): void {
    if (at !== undefined) this.#confirm(ticket.state, ticket.before, at);
    else if (error !== undefined) this.#failed(error);
  }

  /** Stops stamping and removes this process's stamps. */
  async close(): Promise<void> {
    this.#closed = true;
    const drops: Array<Promise<unknown>> = [];
    for (const [namespace, state] of this.#namespaces) {
      clearTimeout(state.timer);
      state.timer = undefined;
      // Best effort: a stamp left behind goes stale within STALE_MS, and the reaper then gives back
      // only slots booked to start after it, which a closed store no longer starts.
      if (state.written) drops.push(this.#deps.run(scripts.alive.name, [this.#deps.aliveKey(namespace)], ['drop', this.#deps.tag]).catch(() => undefined));
    }
    await Promise.all(drops);
  }

  #schedule(namespace: string, state: NamespaceStamps, afterMs: number): void {
    state.armed = true;
    state.timer = setTimeout(() => {
      state.armed = false;
      void this.#stamp(namespace, state);
    }, afterMs);
    state.timer.unref();
  }

  /** One stamp, then the next one STAMP_EVERY_MS after its answer (stamps go one at a time, in order), or the stamp dropped once no slot booked ahead is left. */
  async #stamp(namespace: string, state: NamespaceStamps): Promise<void> {
    const { run, tag, aliveKey, storeNow } = this.#deps;
    if (this.#closed) return;
    if (storeNow() > state.aheadUntil + STALE_MS) {
      // No slot booked ahead left to start: the stamp goes (a missing stamp means unknown, so no
      // slot of this process is given back until it stamps again; its next stamp comes after a
      // gap, which no slot asked for before then survives).
      state.timer = undefined;
      if (state.written) {
        state.written = false;
        // Best effort: a stamp left behind goes stale, and a reaper then gives back only slots
        // booked to start after it (none here); the next stamp follows a gap either way.
        await run(scripts.alive.name, [aliveKey(namespace)], ['drop', tag]).catch(() => undefined);
      }
      // Booked ahead meanwhile: stamps go on.
      if (storeNow() <= state.aheadUntil + STALE_MS && state.timer === undefined && !this.#closed) this.#schedule(namespace, state, 0);
      return;
    }
    // A stamp rode a batch meanwhile: the next one is due a period after it.
    const dueIn = state.sentAt + STAMP_EVERY_MS - performance.now();
    if (dueIn > 1) {
      this.#schedule(namespace, state, dueIn);
      return;
    }
    const before = this.#sent(state);
    // A read of the stamps due for the reaper goes with it.
    const read = this.#deps.rides?.(namespace) === true;
    try {
      const reply = await run(
        scripts.alive.name,
        [aliveKey(namespace)],
        ['stamp', tag, state.sent, state.hold, KEEP_MS, state.count % SWEEP_EVERY === 0 ? 1 : 0, read ? 1 : 0],
      );
      const { at, stamps } = replies.aliveStamp(reply, read);
      this.#confirm(state, before, at);
      if (read) this.#deps.read?.(namespace, stamps);
    } catch (error) {
      // Not confirmed: it may or may not be written; the next confirmed stamp judges the gap.
      this.#failed(error);
    }
    if (!this.#closed) this.#schedule(namespace, state, Math.max(0, state.sentAt + STAMP_EVERY_MS - performance.now()));
  }

  /** A stamp goes out now, covering every slot asked for so far: returns what the stamps before it covered. */
  #sent(state: NamespaceStamps): number {
    const before = state.sent;
    state.sent = this.#deps.seq();
    state.written = true;
    state.count += 1;
    state.sentAt = performance.now();
    return before;
  }

  /**
   * A stamp failed, of its own or riding a batch (Redis unreachable, the script or the key denied):
   * said once (`stampFailed`), until a stamp is answered. Its slots booked ahead start only if the stamps
   * were unbroken (`mayStart`); past a gap they are booked again.
   */
  #failed(error: unknown): void {
    if (this.#failing || this.#closed) return;
    this.#failing = true;
    const why = error instanceof Error ? error.message : String(error);
    this.#deps.notify?.({
      kind: 'stampFailed',
      error,
      message: `This process cannot write its liveness stamp to Redis (${why}): until a stamp succeeds, other processes may take it for dead and give back its slots booked ahead, so it books them again rather than start them (calls wait longer). Said once until then`,
    });
  }

  /** A stamp's answer: written at `at` (-1: not written, a later stamp was there). */
  #confirm(state: NamespaceStamps, before: number, at: number): void {
    this.#failing = false;
    if (at < 0) return;
    // A gap since the last confirmed stamp (or stamps sent and none confirmed): a reaper may have
    // given back any slot the earlier stamps covered. Stamps are answered in the order they were
    // sent (one connection), so a time earlier than the last one's comes from another clock: a
    // Redis failed over to (a reaper there saw none of the stamps before), or a clock stepped
    // back. It counts as a gap, and the stamps are judged on that clock from now on.
    const gap = state.confirmed === undefined ? before > 0 : at < state.confirmed || at - state.confirmed > STALE_MS - STAMP_MARGIN_MS;
    if (gap) state.from = Math.max(state.from, before + 1);
    state.confirmed = at;
  }
}

/** What a batch of `namespace` about to go out carries of the liveness stamps (lua/batch.lua's ALIVE): a stamp due, a read due, or nothing. */
export function rideOf(stamps: Stamps | undefined, reaper: Reaper, namespace: string, books: boolean): Ride | undefined {
  const stamp = stamps?.ride(namespace, books);
  const read = reaper.rides(namespace);
  if (stamp === undefined && !read) return undefined;
  return { args: [...(stamp?.args ?? [-1, 0, KEEP_MS, 0]), read ? 1 : 0], read, ticket: stamp?.ticket };
}

export interface ReaperDeps {
  readonly tag: string;
  readonly cluster: boolean;
  aliveKey(namespace: string): string;
  names(namespace: string, key: string): KeyNames;
  channel(namespace: string): string;
  run: Run;
  /** Slots of `key` were given back: this process's calls waiting on it ask again. */
  freed(namespace: string, key: string): void;
  /** Tells the store's watchers (`reapFailed`). */
  notify?(notice: StoreNotice): void;
  /**
   * False: the stamps are read only riding the namespace's batches, never on their own (a Redis
   * reached over HTTP, where each read is a request, and a waiting call asks again anyway).
   */
  readonly ownReads?: boolean;
}

interface Watch {
  readonly keys: Map<string, Contested>;
  timer: NodeJS.Timeout | undefined;
  /** `timer` has not fired yet: a ride may move it (once fired, its read is under way and arms the next itself). */
  armed: boolean;
  /** `performance.now()` when the stamps were last read for this watch (on their own, or riding a batch). */
  readAt: number;
}

interface Contested {
  /** `Date.now()` until which this process waits on the key. */
  until: number;
  /** Stamps (`tag@at`) already reaped on this key. */
  readonly done: Set<string>;
}

/**
 * Watches the stamps of namespaces where this process waits behind slots booked ahead, and gives
 * back those of processes whose stamps went stale.
 */
export class Reaper {
  readonly #deps: ReaperDeps;
  readonly #namespaces = new Map<string, Watch>();
  #closed = false;
  /** A read or a give-back failed and none succeeded since: said once an episode. */
  #failing = false;

  constructor(deps: ReaperDeps) {
    this.#deps = deps;
  }

  /** This process waits on `key` for up to `forMs` (a decision deferred, or booked far ahead). */
  waits(namespace: string, key: string, forMs: number): void {
    if (this.#closed) return;
    let watch = this.#namespaces.get(namespace);
    if (!watch) this.#namespaces.set(namespace, (watch = { keys: new Map(), timer: undefined, armed: false, readAt: -Infinity }));
    const until = Date.now() + Math.min(forMs, 60_000);
    const contested = watch.keys.get(key);
    if (contested) contested.until = Math.max(contested.until, until);
    else watch.keys.set(key, { until, done: new Set() });
    // A batch going out meanwhile reads the stamps for it (`rides`); else a read of its own.
    if (watch.timer === undefined) this.#schedule(namespace, watch, Math.max(0, watch.readAt + WATCH_EVERY_MS - performance.now()));
  }

  /**
   * Whether a batch of the namespace about to go out reads the stamps for this watch (lua/batch.lua
   * ALIVE's READ): the watch runs, and its previous read was at least RIDE_AFTER of WATCH_EVERY_MS
   * ago. The batch's answer goes to `read`.
   */
  rides(namespace: string): boolean {
    const watch = this.#namespaces.get(namespace);
    if (watch === undefined || watch.timer === undefined || this.#closed) return false;
    const now = performance.now();
    if (now - watch.readAt < RIDE_AFTER * WATCH_EVERY_MS) return false;
    watch.readAt = now;
    // The next read of its own is due a period after this one: its timer waits until then (a timer
    // that fired already has its read under way, which arms the next one itself).
    if (watch.armed) {
      clearTimeout(watch.timer);
      this.#schedule(namespace, watch, WATCH_EVERY_MS);
    }
    return true;
  }

  /** The stamps a batch read for the namespace's watch (lua/alive.lua 'read''s reply). */
  read(namespace: string, reply: readonly unknown[]): void {
    const watch = this.#namespaces.get(namespace);
    if (watch !== undefined && !this.#closed) void this.#reap(namespace, watch, reply);
  }

  close(): void {
    this.#closed = true;
    for (const watch of this.#namespaces.values()) clearTimeout(watch.timer);
    this.#namespaces.clear();
  }

  #schedule(namespace: string, watch: Watch, afterMs: number): void {
    watch.armed = true;
    watch.timer = setTimeout(() => {
      watch.armed = false;
      if (this.#closed) return;
      // Read riding a batch meanwhile: the next read is due a period after it.
      const read = this.#deps.ownReads === false || watch.readAt + WATCH_EVERY_MS - performance.now() > 1 ? Promise.resolve() : this.#watch(namespace, watch);
      void read.finally(() => {
        const now = Date.now();
        for (const [key, contested] of watch.keys) if (contested.until < now) watch.keys.delete(key);
        if (watch.keys.size > 0 && !this.#closed) this.#schedule(namespace, watch, Math.max(0, watch.readAt + WATCH_EVERY_MS - performance.now()));
        else {
          watch.timer = undefined;
          if (this.#namespaces.get(namespace) === watch && watch.keys.size === 0) this.#namespaces.delete(namespace);
        }
      });
    }, afterMs);
    watch.timer.unref();
  }

  async #watch(namespace: string, watch: Watch): Promise<void> {
    if (this.#closed) return;
    watch.readAt = performance.now();
    try {
      const reply = replies.aliveRead(await this.#deps.run(scripts.alive.name, [this.#deps.aliveKey(namespace)], ['read', KEEP_MS]));
      await this.#reap(namespace, watch, reply);
    } catch (error) {
      // The next watch tries again.
      this.#failed(error);
    }
  }

  /**
   * A read of the stamps, or a give-back, failed (Redis unreachable, the scripts or the keys
   * denied): said once (`reapFailed`), until one succeeds.
   */
  #failed(error: unknown): void {
    if (this.#failing || this.#closed) return;
    this.#failing = true;
    const why = error instanceof Error ? error.message : String(error);
    this.#deps.notify?.({
      kind: 'reapFailed',
      error,
      message: `This process cannot read the liveness stamps, or give back the slots of dead processes, in Redis (${why}): until it can, slots booked ahead by a process that died count to their bound (maxHoldMs) and calls waiting behind them wait that long. Said once until then`,
    });
  }

  /** Gives back, on the watched keys, the slots of processes whose stamps (`reply`, as lua/alive.lua 'read' answers) went stale. */
  async #reap(namespace: string, watch: Watch, reply: readonly unknown[]): Promise<void> {
    const { tag, cluster, aliveKey, names, channel, run, freed } = this.#deps;
    try {
      const alive = aliveKey(namespace);
      const now = Number(reply[0]);
      const stale: Array<{ id: string; args: Array<string | number> }> = [];
      for (let i = 1; i + 1 < reply.length; i += 2) {
        const other = String(reply[i]);
        const [at, n, hold] = String(reply[i + 1])
          .split(':')
          .map(Number) as [number, number, number];
        if (other !== tag && now > at + STALE_MS) stale.push({ id: `${other}@${at}`, args: [other, at, n, hold] });
      }
      if (stale.length === 0) {
        this.#failing = false;
        return;
      }
      await Promise.all(
        [...watch.keys].map(async ([key, contested]) => {
          const todo = stale.filter(({ id }) => !contested.done.has(id));
          if (todo.length === 0) return;
          const { log, meta } = names(namespace, key);
          const removed = replies.reap(
            await run(scripts.reap.name, cluster ? [log, meta] : [log, meta, alive], [channel(namespace), STALE_MS, ...todo.flatMap(({ args }) => args)]),
          );
          for (const { id } of todo) contested.done.add(id);
          if (removed > 0) freed(namespace, key);
        }),
      );
      this.#failing = false;
    } catch (error) {
      // The next watch tries again.
      this.#failed(error);
    }
  }
}
