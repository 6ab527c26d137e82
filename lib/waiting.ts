import type { ReserveResult } from './store.js';

/**
 * The waiting discipline, per key and process (docs/design.md, "Waiting"):
 *
 * - Calls for a key wait in one line, by `priority` and then in the order they asked. Only the
 *   line asks the store, for its leading calls at once (one decision of several calls: the store
 *   merges them into one script step).
 * - A call whose slot is booked leaves the line and sleeps until its start (a timer on a known time).
 * - When the store defers (the slot depends on a call still in flight), the line asks nothing until
 *   the store announces a completion on the key (`wake`), or until the bound it answered has passed.
 *   One ask per completion that can free room, never a loop of asks.
 */

/** One call waiting in a line. */
export interface Waiter<C> {
  readonly call: C;
  readonly priority: number;
  /** Slots the call takes: calls with the same cost are asked for together. */
  readonly cost: number;
  /**
   * Calls like this one a single decision can usually book at most (the smallest limit of its rules
   * over its cost): a line asks for one more than that at once, enough to learn that the rest must
   * wait; if none is told to wait, the next ask takes up to MAX_ASK.
   */
  readonly room: number;
  /** Never more than `room + 1` at once, even after an ask that deferred none: lines that share keys take turns. */
  readonly narrow: boolean;
  /** Answers the line's ask for this call when it leaves the line: booked, refused, or an error. */
  readonly settle: (outcome: Outcome) => void;
  /** The store deferred the call (it stays in line): what it said, for when the call runs out of time. */
  readonly deferred: (result: ReserveResult) => void;
}

export type Outcome = { readonly result: ReserveResult; readonly extra?: unknown } | { readonly error: unknown };

/** What a line needs from the throttle: one decision per call (several in one turn are merged by the store). */
export type Decide<C> = (call: C) => Promise<{ readonly result: ReserveResult; readonly extra?: unknown }>;

/** Calls asked about in one go, at most. */
const MAX_ASK = 64;

/** The line of one key. */
export class KeyLine<C> {
  readonly #waiters: Array<Waiter<C>> = [];
  readonly #decide: Decide<C>;
  /**
   * The line has no more calls; `deferred`: it was waiting for a completion when the last one left;
   * `waited`: the store deferred one of its calls at some time (see {@link KeyLine.waited}).
   */
  readonly #onEmpty: (deferred: boolean, waited: boolean) => void;
  #waited = false;
  /** The ask under way, if any. */
  #asking: Promise<void> | undefined;
  /** A wake came while the line was asking: ask again at once if the answer is to wait. */
  #woken = false;
  #timer: NodeJS.Timeout | undefined;
  /** The store deferred the head: nothing is asked until a wake or the timer. */
  #deferred = false;
  /**
   * The last ask booked or refused every call it asked for: the next asks for up to MAX_ASK (a
   * longer rule, a pause or a refusal can let one decision get past the smallest limit's share).
   */
  #wide = false;
  /** A call asked without a line is being answered: nothing is asked until `resume()`. */
  #held: boolean;

  /** `held`: the line asks nothing until `resume()` (a call ahead of it is being decided). */
  constructor(decide: Decide<C>, onEmpty: (deferred: boolean, waited: boolean) => void, held = false) {
    this.#decide = decide;
    this.#onEmpty = onEmpty;
    this.#held = held;
  }

  get size(): number {
    return this.#waiters.length;
  }

  /** The store deferred a call of the line (or one asked before it, alone): its process is in a waiting list. */
  waited(): void {
    this.#waited = true;
  }

  /** The head waits for a completion (or its bound): calls added now wait behind it. */
  get deferred(): boolean {
    return this.#deferred;
  }

  /**
   * By priority, then first come, first served: before the first waiter of lower priority, or with
   * `first` (it asked before every waiter here) before the first of the same or lower priority.
   */
  add(waiter: Waiter<C>, first = false): void {
    let at = this.#waiters.length;
    while (at > 0 && (this.#waiters[at - 1]!.priority < waiter.priority || (first && this.#waiters[at - 1]!.priority === waiter.priority))) at--;
    this.#waiters.splice(at, 0, waiter);
    if (!this.#deferred && !this.#held) void this.#pump();
  }

  /** The call decided ahead of the line has its answer: the line may ask. */
  resume(): void {
    if (!this.#held) return;
    this.#held = false;
    if (this.#waiters.length === 0) this.#idle();
    else if (!this.#deferred) void this.#pump();
  }

  /** Takes a waiter out (aborted, timed out, closed); false when it was no longer waiting. */
  remove(waiter: Waiter<C>): boolean {
    const index = this.#waiters.indexOf(waiter);
    if (index < 0) return false;
    this.#waiters.splice(index, 1);
    this.#idle();
    return true;
  }

  /** A completion may have freed room on the key: ask again (once, even if several came). */
  wake(): void {
    if (this.#asking || this.#held) {
      this.#woken = true;
      return;
    }
    this.#woken = false;
    if (!this.#deferred) return;
    this.#deferred = false;
    clearTimeout(this.#timer);
    void this.#pump();
  }

  /**
   * Rejects every waiter (the throttle closes) and stops the timer. Resolves once the ask under
   * way, if any, has answered (its bookings, settled on waiters already rejected, are given back),
   * to whether the line was waiting for a completion.
   */
  async clear(error: unknown): Promise<boolean> {
    clearTimeout(this.#timer);
    const deferred = this.#deferred;
    this.#deferred = false;
    for (const waiter of this.#waiters.splice(0)) waiter.settle({ error });
    await this.#asking;
    return deferred;
  }

  #pump(): Promise<void> {
    this.#asking ??= this.#ask().finally(() => {
      this.#asking = undefined;
      // A wake that came after the last answer, before this: ask again.
      if (this.#woken && this.#deferred) this.wake();
      else this.#idle();
    });
    return this.#asking;
  }

  async #ask(): Promise<void> {
    while (this.#waiters.length > 0) {
      this.#woken = false;
      const { cost, room, narrow } = this.#waiters[0]!;
      const most = this.#wide && !narrow ? MAX_ASK : Math.min(MAX_ASK, room + 1);
      const batch: Array<Waiter<C>> = [];
      for (const waiter of this.#waiters) {
        if (waiter.cost !== cost || batch.length >= most) break;
        batch.push(waiter);
      }
      const outcomes = await Promise.all(
        batch.map((waiter) =>
          this.#decide(waiter.call).then(
            (answer): Outcome => answer,
            (error: unknown): Outcome => ({ error }),
          ),
        ),
      );
      let deferred: ReserveResult | undefined;
      for (let i = 0; i < batch.length; i++) {
        const waiter = batch[i]!;
        const outcome = outcomes[i]!;
        if ('result' in outcome && outcome.result.status === 'deferred') {
          deferred ??= outcome.result;
          waiter.deferred(outcome.result);
          continue;
        }
        // Booked or refused: the call leaves the line. One that left meanwhile (aborted) gets the
        // outcome too, so that a booked slot is given back.
        const index = this.#waiters.indexOf(waiter);
        if (index >= 0) this.#waiters.splice(index, 1);
        waiter.settle(outcome);
      }
      this.#wide = deferred === undefined;
      if (deferred) this.#waited = true;
      if (deferred && !this.#woken) {
        this.#deferred = true;
        this.#timer = setTimeout(() => this.wake(), Math.max(1, deferred.retryMs));
        return;
      }
    }
  }

  #idle(): void {
    if (this.#waiters.length === 0 && this.#asking === undefined && !this.#held) {
      clearTimeout(this.#timer);
      const deferred = this.#deferred;
      this.#deferred = false;
      this.#onEmpty(deferred, this.#waited);
    }
  }
}
