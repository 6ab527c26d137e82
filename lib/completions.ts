import type { StoreClock } from './time.js';
import type { Booking, Call } from './store-client.js';
import type { Refusals } from './refusals.js';
import type { Rule } from './rules.js';
import type { ReserveResult, Settlement, Store } from './store.js';

/**
 * A booked slot, from the store's answer to its end (docs/design.md, "Completions"): `grantOf`
 * places the slot on this process's clock, `Slots` writes the call's completion (or the slot given
 * back when the call never starts) in every key it counts in, and `Completions` sends those writes,
 * coalesced, and again until the store takes them.
 */

/** A booked slot. Local times are `performance.now()` readings. */
export interface Grant {
  readonly result: ReserveResult;
  /** Where the slot was booked, and is settled: the throttle's store, or the local fallback. */
  readonly store: Store;
  readonly clock: StoreClock;
  /** Local time the booking was asked for (`Booking.sentAt`): the store decided after it. */
  readonly askedAt: number;
  /** Local time the slot starts at, read up to 1 ms early (completion times convert to the store clock late, never early). */
  readonly due: number;
  /**
   * Local time the call may start: the wait counted from the answer's arrival, the latest the store
   * can have decided, so that the call never starts before its slot on the store's clock.
   */
  readonly startsAt: number;
}

/** The slot a store booked, placed on this process's clock. */
export function grantOf(result: ReserveResult, booking: Booking): Grant {
  // A slot at once starts at the decision's own clock reading, rounded up: no correction; a later
  // one is reached by a timer that may fire up to 1 ms early.
  const due = booking.sentAt + result.waitMs - (result.waitMs > 0 ? 1 : 0);
  // A later slot: counted from this answer's arrival, or from the store clock as the quickest
  // answers placed it (lib/time.ts), whichever is sooner. The first ignores drift over the wait
  // itself (docs/design.md §5, Clocks).
  const startsAt = result.waitMs > 0 ? Math.min(booking.receivedAt + result.waitMs, booking.clock.localTime(result.startAt)) : booking.receivedAt;
  return { result, store: booking.store, clock: booking.clock, askedAt: booking.sentAt, due, startsAt };
}

/**
 * Completion accounting of booked slots (docs/design.md, "Completions"): a call's completion, or
 * its slot given back when it never starts, written in every key the call counts in.
 */
export class Slots {
  readonly #completions: Completions;
  readonly #maxHoldMs: number;
  /** Says once that a call outlasted maxHoldMs. */
  readonly #warn: (message: string, key: string) => void;
  #warnedSlow = false;

  constructor(completions: Completions, maxHoldMs: number, warn: (message: string, key: string) => void) {
    this.#completions = completions;
    this.#maxHoldMs = maxHoldMs;
    this.#warn = warn;
  }

  /** Records the call's completion: its slot counts until `windowMs` after it. */
  complete(call: Call, grant: Grant, startedAt: number): void {
    const completedAt = performance.now();
    if (completedAt - startedAt >= this.#maxHoldMs && !this.#warnedSlow) {
      this.#warnedSlow = true;
      this.#warn(
        `a call took ${Math.round(completedAt - startedAt)} ms, not less than maxHoldMs (${this.#maxHoldMs} ms): a slot counts at most until start + maxHoldMs, so set maxHoldMs above the vendor's request timeout`,
        call.key,
      );
    }
    // The latest the store clock can read now: from this call's own answer (drift over the call
    // ignored, as for its start), or from the quickest answers, whichever is sooner.
    const releaseAt = Math.ceil(Math.min(grant.result.startAt + (completedAt - grant.due), grant.clock.storeTime(completedAt)));
    this.#write(call, grant, releaseAt);
  }

  /** Gives back a slot whose call will never start. */
  release(call: Call, grant: Grant): void {
    this.#write(call, grant, null);
  }

  /** Writes the call's release (its completion, or null: it never started) in every key it counts in. */
  #write(call: Call, grant: Grant, releaseAt: number | null): void {
    const { members } = grant.result;
    const settle = members.length === 1 ? [{ member: members[0]!, releaseAt }] : members.map((member) => ({ member, releaseAt }));
    this.#completions.write(grant.store, call.encoded, settle, call.retainMs + this.#maxHoldMs, coalesceMs(call.rules));
    for (const part of call.also) {
      this.#completions.write(grant.store, part.encoded, settle, part.retainMs + this.#maxHoldMs, coalesceMs(part.rules));
    }
  }
}

/**
 * How long a completion or release may wait to be written with others: a tenth of the shortest
 * window, at most 20 ms. The room it frees comes a whole window after the response, so the
 * decisions it wakes still come in time; a busy key then needs about one command per call.
 */
export function coalesceMs(rules: readonly Rule[]): number {
  let shortest = Infinity;
  for (const rule of rules) shortest = Math.min(shortest, rule.windowMs);
  return Math.min(20, shortest / 10);
}

/** Keys whose unsent completions are kept at most; past it the oldest are forgotten. */
const MAX_KEYS = 10_000;

/** How often completions the store failed to take are sent again. */
export const RESEND_MS = 1_000;

/**
 * Writes completions and releases (docs/design.md, "Completions"). A completion lowers its slot's
 * release to the response time, so the room it frees is used at once; one the store failed to
 * take is sent again every {@link RESEND_MS} until taken or no longer counting (until then the slot
 * counts to its bound: safe, only less full).
 */
export class Completions {
  readonly #namespace: string;
  readonly #store: Store;
  readonly #refusals: Refusals;
  readonly #onFailure: (error: unknown) => void;
  /** Writes under way, and who waits for them to end (close). */
  #writing = 0;
  #written: Array<() => void> = [];
  readonly #unsent = new Map<string, { readonly store: Store; readonly until: number; readonly settle: Settlement[] }>();
  #timer: NodeJS.Timeout | undefined;
  #closed = false;

  /** `refusals`: the throttle's, forgotten for a key once a completion there is written (room may have come). */
  constructor(namespace: string, store: Store, refusals: Refusals, onFailure: (error: unknown) => void) {
    this.#namespace = namespace;
    this.#store = store;
    this.#refusals = refusals;
    this.#onFailure = onFailure;
  }

  /**
   * Writes in the background; `keepMs`: how long the write matters (the slot's window and bound);
   * `coalesceMs`: how long the store may hold it back to batch it with others.
   */
  write(store: Store, key: string, settle: readonly Settlement[], keepMs: number, coalesceMs: number): void {
    this.#writing += 1;
    store.settle(this.#namespace, key, settle, coalesceMs).then(
      () => {
        this.#ended();
        this.#refusals.forget(key);
      },
      (error: unknown) => {
        this.#ended();
        this.#onFailure(error);
        if (store === this.#store && !this.#closed) this.#keep(key, settle, performance.now() + keepMs);
      },
    );
  }

  #ended(): void {
    this.#writing -= 1;
    if (this.#writing === 0) for (const resolve of this.#written.splice(0)) resolve();
  }

  /** Waits for the writes under way, then tries the unsent ones once more; no timer is left. */
  async close(): Promise<void> {
    while (this.#writing > 0) await new Promise<void>((resolve) => this.#written.push(resolve));
    this.#closed = true;
    clearTimeout(this.#timer);
    await this.#resend();
    clearTimeout(this.#timer);
  }

  #keep(key: string, settle: readonly Settlement[], until: number): void {
    let entry = this.#unsent.get(key);
    if (!entry) {
      if (this.#unsent.size >= MAX_KEYS) this.#unsent.delete(this.#unsent.keys().next().value!);
      this.#unsent.set(key, (entry = { store: this.#store, until, settle: [] }));
    }
    entry.settle.push(...settle);
    if (this.#timer === undefined && !this.#closed) {
      this.#timer = setTimeout(() => {
        this.#timer = undefined;
        void this.#resend();
      }, RESEND_MS);
      this.#timer.unref();
    }
  }

  async #resend(): Promise<void> {
    const entries = [...this.#unsent];
    this.#unsent.clear();
    await Promise.all(
      entries.map(async ([key, { until, settle }]) => {
        if (performance.now() > until) return;
        try {
          await this.#store.settle(this.#namespace, key, settle);
          this.#refusals.forget(key);
        } catch {
          // Its first failure was said (`onFailure`, a debug event): tried again until `until`,
          // past which (or once closed) the slot counts to its bound, as that event said.
          if (!this.#closed) this.#keep(key, settle, until);
        }
      }),
    );
  }
}
