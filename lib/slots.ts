import { keysOf } from './calls.js';
import type { StoreClock } from './clock.js';
import { coalesceMs, type Completions } from './completions.js';
import type { Booking, Call } from './decisions.js';
import type { LocalFallback, LocalSlot } from './fallback.js';
import type { ReserveResult, Store } from './store.js';

/** A booked slot. Local times are `performance.now()` readings. */
export interface Grant {
  readonly result: ReserveResult;
  /** Where the slot was booked: the throttle's store, or the local fallback. */
  readonly store: Store;
  readonly localSlot: LocalSlot | undefined;
  readonly clock: StoreClock;
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
  // answers placed it (lib/clock.ts), whichever is sooner. The first ignores drift over the wait
  // itself (docs/design.md §5, Clocks).
  const startsAt = result.waitMs > 0 ? Math.min(booking.receivedAt + result.waitMs, booking.clock.localTime(result.startAt)) : booking.receivedAt;
  return { result, store: booking.store, localSlot: booking.localSlot, clock: booking.clock, due, startsAt };
}

/**
 * Completion accounting of booked slots (docs/design.md, "Completions"): a call's completion, or
 * its slot given back when it never starts, written in every key the call counts in.
 */
export class Slots {
  readonly #completions: Completions;
  readonly #maxHoldMs: number;
  readonly #fallback: LocalFallback | undefined;
  /** Says once that a call outlasted maxHoldMs. */
  readonly #warn: (message: string, key: string) => void;
  #warnedSlow = false;

  constructor(completions: Completions, maxHoldMs: number, fallback: LocalFallback | undefined, warn: (message: string, key: string) => void) {
    this.#completions = completions;
    this.#maxHoldMs = maxHoldMs;
    this.#fallback = fallback;
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
    if (grant.localSlot) grant.localSlot.releaseAt = releaseAt;
    this.#write(call, grant, releaseAt);
  }

  /** Gives back a slot whose call will never start. */
  release(call: Call, grant: Grant): void {
    if (grant.localSlot) for (const key of keysOf(call)) this.#fallback?.forget(key, grant.localSlot);
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
