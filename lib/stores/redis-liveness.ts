/*
 * A process that dies with slots booked ahead (docs/design.md §5, "A process that dies"): while
 * this process holds slots booked ahead in a namespace it stamps the namespace's `alive` hash
 * (lua/alive.lua) every STAMP_EVERY_MS; a process whose decisions on a key wait reads the stamps
 * and gives back (lua/reap.lua) the slots of processes whose stamp went stale, booked to start
 * after it went stale. Before this process starts a slot booked ahead it checks that the slot
 * cannot have been given back that way (`Stamps.mayStart`).
 */

import type { KeyNames } from '../keys.js';
import { scripts } from './redis-scripts.js';

/**
 * How often a process that holds slots booked ahead stamps the namespace (ms): half of STALE_MS, so
 * that a stamp a little late is no gap. Each stamp is a client command: a busy key pays them
 * beside its calls (docs/benchmarks.md).
 */
export const STAMP_EVERY_MS = 250;
/**
 * A stamp older than this (ms, store clock) is stale: its process's slots booked to start later than
 * the stamp + STALE_MS never started. The owner tolerates gaps up to STALE_MS - STAMP_MARGIN_MS
 * between its confirmed stamps (its event loop or its link to Redis stalling for about 0.4 s):
 * past that it books its slots again rather than start them.
 */
export const STALE_MS = 500;
/** Rounding of the store times compared (the stamp is written in whole ms, starts rounded up). */
const STAMP_MARGIN_MS = 20;
/** Stamps not renewed for this long are dropped (their processes are long dead): the hash stays bounded. */
const KEEP_MS = 3_600_000;
/** Every this many stamps, the writer also drops stamps older than KEEP_MS. */
const SWEEP_EVERY = 100;
/** How often a process with keys whose decisions wait reads the namespace's stamps (ms). */
const WATCH_EVERY_MS = 500;

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
  timer: NodeJS.Timeout | undefined;
  /** A stamp of this process is in the hash (not yet dropped). */
  written: boolean;
  count: number;
}

export interface StampsDeps {
  readonly tag: string;
  /** The number of the newest slot this process asked for. */
  seq(): number;
  /** The store clock, as this process estimates it. */
  storeNow(): number;
  aliveKey(namespace: string): string;
  run: Run;
}

/** The stamps this process writes, and the check before it starts a slot booked ahead. */
export class Stamps {
  readonly #deps: StampsDeps;
  readonly #namespaces = new Map<string, NamespaceStamps>();
  #closed = false;

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
      state = { sent: 0, from: 0, confirmed: undefined, aheadUntil: 0, hold: 0, timer: undefined, written: false, count: 0 };
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

  /** Stops stamping and removes this process's stamps. */
  async close(): Promise<void> {
    this.#closed = true;
    const drops: Array<Promise<unknown>> = [];
    for (const [namespace, state] of this.#namespaces) {
      clearTimeout(state.timer);
      state.timer = undefined;
      if (state.written) drops.push(this.#deps.run(scripts.alive.name, [this.#deps.aliveKey(namespace)], ['drop', this.#deps.tag]).catch(() => undefined));
    }
    await Promise.all(drops);
  }

  #schedule(namespace: string, state: NamespaceStamps, afterMs: number): void {
    state.timer = setTimeout(() => void this.#stamp(namespace, state), afterMs);
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
        await run(scripts.alive.name, [aliveKey(namespace)], ['drop', tag]).catch(() => undefined);
      }
      // Booked ahead meanwhile: stamps go on.
      if (storeNow() <= state.aheadUntil + STALE_MS && state.timer === undefined && !this.#closed) this.#schedule(namespace, state, 0);
      return;
    }
    const before = state.sent;
    const covers = this.#deps.seq();
    state.sent = covers;
    state.written = true;
    state.count += 1;
    try {
      const at = (await run(
        scripts.alive.name,
        [aliveKey(namespace)],
        ['stamp', tag, covers, state.hold, KEEP_MS, state.count % SWEEP_EVERY === 0 ? 1 : 0],
      )) as number;
      if (at >= 0) {
        // A gap since the last confirmed stamp (or stamps sent and none confirmed): a reaper may
        // have given back any slot the earlier stamps covered.
        const gap = state.confirmed === undefined ? before > 0 : at - state.confirmed > STALE_MS - STAMP_MARGIN_MS;
        if (gap) state.from = Math.max(state.from, before + 1);
        state.confirmed = Math.max(state.confirmed ?? 0, at);
      }
    } catch {
      // Not confirmed: it may or may not be written; the next confirmed stamp judges the gap.
    }
    if (!this.#closed) this.#schedule(namespace, state, STAMP_EVERY_MS);
  }
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
  readonly #namespaces = new Map<string, { keys: Map<string, Contested>; timer: NodeJS.Timeout | undefined }>();
  #closed = false;

  constructor(deps: ReaperDeps) {
    this.#deps = deps;
  }

  /** This process waits on `key` for up to `forMs` (a decision deferred, or booked far ahead). */
  waits(namespace: string, key: string, forMs: number): void {
    if (this.#closed) return;
    let watch = this.#namespaces.get(namespace);
    if (!watch) this.#namespaces.set(namespace, (watch = { keys: new Map(), timer: undefined }));
    const until = Date.now() + Math.min(forMs, 60_000);
    const contested = watch.keys.get(key);
    if (contested) contested.until = Math.max(contested.until, until);
    else watch.keys.set(key, { until, done: new Set() });
    if (watch.timer === undefined) this.#schedule(namespace, watch, 0);
  }

  close(): void {
    this.#closed = true;
    for (const watch of this.#namespaces.values()) clearTimeout(watch.timer);
    this.#namespaces.clear();
  }

  #schedule(namespace: string, watch: { keys: Map<string, Contested>; timer: NodeJS.Timeout | undefined }, afterMs: number): void {
    watch.timer = setTimeout(() => {
      void this.#watch(namespace, watch).finally(() => {
        const now = Date.now();
        for (const [key, contested] of watch.keys) if (contested.until < now) watch.keys.delete(key);
        if (watch.keys.size > 0 && !this.#closed) this.#schedule(namespace, watch, WATCH_EVERY_MS);
        else {
          watch.timer = undefined;
          if (this.#namespaces.get(namespace) === watch && watch.keys.size === 0) this.#namespaces.delete(namespace);
        }
      });
    }, afterMs);
    watch.timer.unref();
  }

  async #watch(namespace: string, watch: { keys: Map<string, Contested> }): Promise<void> {
    const { run, tag, cluster, aliveKey, names, channel, freed } = this.#deps;
    try {
      const alive = aliveKey(namespace);
      const reply = (await run(scripts.alive.name, [alive], ['read', KEEP_MS])) as Array<number | string>;
      const now = Number(reply[0]);
      const stale: Array<{ id: string; args: Array<string | number> }> = [];
      for (let i = 1; i + 1 < reply.length; i += 2) {
        const other = String(reply[i]);
        const [at, n, hold] = String(reply[i + 1])
          .split(':')
          .map(Number) as [number, number, number];
        if (other !== tag && now > at + STALE_MS) stale.push({ id: `${other}@${at}`, args: [other, at, n, hold] });
      }
      if (stale.length === 0) return;
      await Promise.all(
        [...watch.keys].map(async ([key, contested]) => {
          const todo = stale.filter(({ id }) => !contested.done.has(id));
          if (todo.length === 0) return;
          const { log, meta } = names(namespace, key);
          const removed = (await run(scripts.reap.name, cluster ? [log, meta] : [log, meta, alive], [
            channel(namespace),
            STALE_MS,
            ...todo.flatMap(({ args }) => args),
          ])) as number;
          for (const { id } of todo) contested.done.add(id);
          if (removed > 0) freed(namespace, key);
        }),
      );
    } catch {
      // Redis unreachable: the next watch tries again.
    }
  }
}
