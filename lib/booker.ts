import type { Sleeping } from './activity.js';
import { alsoOf, bindingKey, keysOf, limitedError, reasonOf, RETRY_PRIORITY, ruleAt, spacingOf } from './calls.js';
import { grantOf, type Grant, type Slots } from './completions.js';
import { StoreUnavailableError, ThrottleConfigError } from './errors.js';
import type { StoreErrorPolicy, ThrottleEvents } from './options.js';
import type { Refusals } from './refusals.js';
import { tokenContentOf, type TokenContent } from './reservations.js';
import { PAUSED } from './slot-plan.js';
import type { ReserveResult, Store } from './store.js';
import { storeError, type Call, type StoreClient } from './store-client.js';
import { sleep } from './time.js';
import type { Lines, WaiterHooks } from './waiting.js';

/** Times a call that woke too late books again before it starts anyway (and says so in a `debug` event). */
const MAX_REBOOKS = 3;

/**
 * Times in a row a call booked ahead may fail to read its key's pause before it fails with the
 * store's error: a read that keeps failing while bookings succeed (an ACL that denies it) would
 * otherwise book the call again and again, behind every call booked meanwhile.
 */
const PAUSE_READS = 3;

/** What a throttle's bookings need of it. */
export interface BookerContext {
  readonly name: string;
  readonly store: Store;
  readonly maxHoldMs: number;
  /** How long a reservation's call may start after its slot (`reservationGraceMs`). */
  readonly graceMs: number;
  readonly policy: StoreErrorPolicy;
  readonly storeClient: StoreClient;
  readonly slots: Slots;
  readonly lines: Lines;
  readonly refusals: Refusals;
  /** Calls sleeping until their slot, per key (the throttle's `stats`). */
  readonly sleeping: Sleeping;
  readonly closing: AbortSignal;
  notify<E extends keyof ThrottleEvents>(event: E, ...args: ThrottleEvents[E]): void;
}

/**
 * A call's way to its slot: through its key's line to the store, asleep until the slot starts,
 * checked against a vendor pause set meanwhile and against a late wake, booked again when the
 * slot was lost. What it answers, a `Grant`, is a slot the call may start on now.
 */
export class Booker {
  readonly #c: BookerContext;

  constructor(context: BookerContext) {
    this.#c = context;
  }

  /** A call of several keys needs a store that decides them at once. */
  checkKeys(call: Call): void {
    if (call.also.length > 0 && !this.#c.store.multiKey)
      throw new ThrottleConfigError('Expected a store that decides calls of several keys at once (Store.multiKey), got one that takes a key per call', 'key');
  }

  /** A booking for the call, booked again if it woke too late for its slot or the store may have given the slot back. */
  async book(call: Call): Promise<Grant> {
    return this.startable(call, await this.#book(call));
  }

  /**
   * The grant, or a new booking when the call woke too late for its slot or the store may have
   * given the slot back (rare: a stalled event loop or link). Nothing is awaited from the check to the start.
   */
  startable(call: Call, grant: Grant): Grant | Promise<Grant> {
    return this.#lateBy(grant) > this.#c.maxHoldMs / 2 || !this.#mayStart(grant) ? this.#rebook(call, grant) : grant;
  }

  /** The call's booking through its key's line, unless it was aborted or a recent refusal answers for it. */
  enter(call: Call): Promise<Grant> {
    this.aborted(call)?.throwIfAborted();
    this.#c.refusals.check(call.line, call.cost, call.deadline - performance.now());
    return this.#c.lines.enter(call, this.#hooks);
  }

  /** Sleeps until local time `at`, counted among the calls sleeping until their slot. */
  async sleepUntil(call: Call, keys: readonly string[], at: number): Promise<void> {
    this.#c.sleeping.enter(keys);
    try {
      await sleep(Math.max(0, at - performance.now()), [call.signal, this.#c.closing]);
    } finally {
      this.#c.sleeping.leave(keys);
    }
  }

  /**
   * How long after a vendor pause's end the call starts: the end belongs to the HTTP adapters'
   * retries of the requests the vendor refused (their arrival order at the vendor is otherwise a
   * race, won by whichever process's timer fires first); any other call goes one slot later.
   */
  behindRetries(call: Call): number {
    return call.priority === RETRY_PRIORITY ? 0 : spacingOf(call);
  }

  /** The call's signal if aborted, else the throttle's if it closes, else undefined. */
  aborted(call: Call): AbortSignal | undefined {
    if (call.signal?.aborted) return call.signal;
    return this.#c.closing.aborted ? this.#c.closing : undefined;
  }

  /** The token of a reservation this process made for its own call (a call that reserves its slot). */
  ownToken(call: Call, result: ReserveResult): TokenContent {
    return tokenContentOf(this.#c.name, call, result, this.#c.maxHoldMs, this.#c.graceMs);
  }

  /** Takes a reservation of this process's out of the log, its call not started (aborted, refused), in the background. */
  giveBack(call: Call, content: TokenContent): void {
    this.#c.storeClient
      .claim(call, content, this.#c.graceMs, true)
      .catch((error: unknown) => this.#c.notify('debug', { message: 'cannot give back a reserved slot; it counts until its bound', key: call.key, error }));
  }

  /** How late the call woke for its slot: from the earliest the slot can have started (the store decided after the ask was sent). */
  #lateBy(grant: Grant): number {
    return performance.now() - (grant.due + 1);
  }

  /**
   * A call that woke so late (a stalled event loop) that half of `maxHoldMs` has passed gives its
   * slot back and books again: its slot counts only until start + `maxHoldMs`, which must cover
   * the call's way to the vendor. After MAX_REBOOKS new bookings it starts anyway.
   */
  async #rebook(call: Call, late: Grant): Promise<Grant> {
    const { maxHoldMs, slots, notify } = this.#c;
    let grant = late;
    for (let rebooks = 0; ; rebooks++) {
      const lateBy = this.#lateBy(grant);
      const mayStart = this.#mayStart(grant);
      if (lateBy <= maxHoldMs / 2 && mayStart) return grant;
      const message = mayStart
        ? `woke ${Math.round(lateBy)} ms after its slot, over half of maxHoldMs (${maxHoldMs} ms)`
        : 'its slot may have been given back to other processes (this process stopped renewing its liveness stamp in the store: a stalled event loop or link)';
      if (rebooks >= MAX_REBOOKS) {
        if (!mayStart) {
          // Starting could put a window over the limit: never.
          slots.release(call, grant);
          throw new StoreUnavailableError(`The call's slot ${message}, after ${MAX_REBOOKS} new bookings`);
        }
        notify('debug', { message: `${message}: starting anyway after ${MAX_REBOOKS} new bookings`, key: call.key });
        return grant;
      }
      notify('debug', { message: `${message}: booking again`, key: call.key });
      slots.release(call, grant);
      grant = await this.#book(call);
    }
  }

  /** Whether the store lets the slot start now (`Store.mayStart`): it cannot have given it back. */
  #mayStart(grant: Grant): boolean {
    const { result } = grant;
    return grant.store.mayStart?.(this.#c.name, result.members, result.startAt) ?? true;
  }

  /**
   * One booking: the wait in line, then the sleep until the slot starts. `failedReads`: times in a
   * row the call could not read its key's pause when a slot it booked ahead came (see PAUSE_READS).
   */
  async #book(call: Call, failedReads = 0): Promise<Grant> {
    const { slots, notify } = this.#c;
    const grant = await this.enter(call);
    const { result } = grant;
    if (result.waitMs > 0) {
      notify('delayed', { key: call.key, cost: call.cost, delayMs: result.waitMs, reason: reasonOf(call, result), ...alsoOf(call) });
      const keys = keysOf(call);
      try {
        // A slot at the end of a vendor pause: the end is the retries' (behindRetries).
        await this.sleepUntil(call, keys, grant.startsAt + (result.ruleIndex === PAUSED ? this.behindRetries(call) : 0));
      } catch (reason) {
        slots.release(call, grant);
        throw reason;
      }
      let pausedUntil: number | undefined;
      try {
        pausedUntil = await this.#pausedSinceBooked(grant, keys);
      } catch (error) {
        // A pause set since the booking may have taken the slot out of the log: the call does not start on it.
        slots.release(call, grant);
        const failure = storeError(error);
        if (!(failure instanceof StoreUnavailableError)) throw failure;
        if (failedReads + 1 >= PAUSE_READS) {
          // Bookings succeed but the read keeps failing: asking again, or waiting, would not tell either.
          notify('storeError', { key: call.key, error: failure, policy: this.#c.policy });
          throw failure;
        }
        notify('debug', { message: 'cannot read the vendor pause before a slot booked ahead starts; booking again', key: call.key, error });
        return this.#book(call, failedReads + 1);
      }
      if (pausedUntil !== undefined) {
        slots.release(call, grant);
        // The retries asked as soon as the pause was set: this call asks again only behind them.
        const wakeAt = grant.clock.localTime(pausedUntil) + this.behindRetries(call);
        if (wakeAt > performance.now() && wakeAt < call.deadline) await this.sleepUntil(call, keys, wakeAt);
        return this.#book(call);
      }
    }
    return grant;
  }

  /**
   * The end (store clock) of a vendor pause set after the call's slot was booked (by any process
   * sharing the store) that covers the slot's start, or undefined: a decision never books into a
   * pause, so a pause that ends after the start is newer than the booking, and took the slot out of
   * the log. Asked of the store when a slot booked ahead comes due (`Store.pausedUntil`, which may
   * know it without asking); rejects with the store's error.
   */
  async #pausedSinceBooked(grant: Grant, keys: readonly string[]): Promise<number | undefined> {
    const { store } = grant;
    if (store.pausedUntil === undefined) return undefined;
    let end = 0;
    let asked: Array<Promise<number>> | undefined;
    for (const key of keys) {
      const until = store.pausedUntil(this.#c.name, key, grant.askedAt);
      if (typeof until === 'number') end = Math.max(end, until);
      else (asked ??= []).push(until);
    }
    if (asked !== undefined) end = Math.max(end, ...(await Promise.all(asked)));
    return end > grant.result.startAt ? end : undefined;
  }

  /** What the lines ask of the throttle about a call: its errors, its rules, its refusals and slots (one object, made once). */
  readonly #hooks: WaiterHooks = {
    limited: (call, answer, waitMs) => limitedError(call, answer, waitMs),
    windowOf: (call, answer) => (answer.ruleIndex >= 0 ? ruleAt(call, answer.ruleIndex).rule.windowMs : 1),
    refused: (call, answer, at) => {
      // A reservation's refusal counts reservations booked ahead from their start, and waits for a
      // bucketed rule's calls at their bounds: it says nothing of other calls, unless every call reserves.
      if (at.store === this.#c.store && (call.graceMs === undefined || this.#c.store.announces === false))
        this.#c.refusals.remember(call.line, call.cost, at.sentAt + answer.waitMs, reasonOf(call, answer), bindingKey(call, answer));
    },
    release: (call, answer, at) => {
      // A reservation with dependencies: only a claim can take its slots out.
      if (call.graceMs !== undefined && (answer.deps?.length ?? 0) > 0 && at.store === this.#c.store) this.giveBack(call, this.ownToken(call, answer));
      else this.#c.slots.release(call, grantOf(answer, at));
    },
    failure: () => this.#c.storeClient.failure,
  };
}
