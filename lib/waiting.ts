import { keysOf } from './calls.js';
import { grantOf, type Grant, type Slots } from './completions.js';
import type { Booking, Call, Decided, StoreClient } from './store-client.js';
import { QueueFullError, RateLimitedError } from './errors.js';
import { MAX_TIMER_MS } from './time.js';
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
 * - `maxDelayMs` bounds a call's whole wait: one still in line when it runs out leaves it
 *   (`waitInLine`).
 * - `Lines` holds a throttle's lines: one per key, one per set of keys for calls of several, and
 *   which lines hold each key, so that a completion on a key wakes every line waiting on it, in
 *   turns when a shared key binds.
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

/** No keys to leave (most calls: shared, not made per call). */
const NO_KEYS: readonly string[] = [];

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

  /**
   * Nothing wakes a deferred head (a store that does not announce completions): it asks again when
   * its slot could first be free (the calls it waits for ended by then: a window at the latest).
   */
  readonly #asksAgain: boolean;

  /** `held`: the line asks nothing until `resume()` (a call ahead of it is being decided). `unheard`: see `#asksAgain`. */
  constructor(decide: Decide<C>, onEmpty: (deferred: boolean, waited: boolean) => void, held = false, unheard = false) {
    this.#decide = decide;
    this.#onEmpty = onEmpty;
    this.#held = held;
    this.#asksAgain = unheard;
  }

  get size(): number {
    return this.#waiters.length;
  }

  /** The store deferred a call of the line (or one asked before it, alone): its process is in a waiting list. */
  waited(): void {
    this.#waited = true;
  }

  /**
   * The store deferred the head, asked before the line was made (alone), and nothing will wake it:
   * the line asks again when its slot could first be free, or at its bound.
   */
  waitFor(result: ReserveResult): void {
    if (!this.#asksAgain || this.#deferred) return;
    this.#waited = true;
    this.#deferred = true;
    this.#timer = setTimeout(() => this.wake(), this.#againIn(result));
  }

  /** When a deferred head asks again: at its bound, or, where nothing wakes it, when its slot could first be free if sooner. */
  #againIn(result: ReserveResult): number {
    return Math.max(1, this.#asksAgain ? Math.min(result.retryMs, result.waitMs) : result.retryMs);
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
        this.#timer = setTimeout(() => this.wake(), this.#againIn(deferred));
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

/** What a call waiting in line needs from its throttle. */
export interface WaiterHooks {
  /** The `RateLimitedError` for a call the store refused, or that ran out of time after `result`. */
  limited(call: Call, result: ReserveResult, retryAfterMs: number): RateLimitedError;
  /** The window of the rule the store named for the call (1 when none). */
  windowOf(call: Call, result: ReserveResult): number;
  /** The store refused the call: remember it for the calls after it. */
  refused(call: Call, result: ReserveResult, booking: Booking): void;
  /** A slot was booked for a call that had already left the line: give it back. */
  release(call: Call, result: ReserveResult, booking: Booking): void;
  /** The store's failure, while it has not answered since (onStoreError 'wait'). */
  failure(): Error | undefined;
}

/**
 * Puts `call` in `line` and resolves once the store books its slot; rejects when the store refuses
 * it, when its `maxDelayMs` runs out in line (`RateLimitedError`, or the store's failure), or with
 * its signal's reason when aborted. Nothing is left booked for a call that rejects. `first`: the
 * call asked before every call in line (it was deferred when asked alone), so it goes ahead of them.
 */
export function waitInLine(
  line: KeyLine<Call>,
  call: Call,
  hooks: WaiterHooks,
  first = false,
): Promise<{ readonly result: ReserveResult; readonly booking: Booking }> {
  return new Promise((resolve, reject) => {
    let last: { readonly result: ReserveResult; readonly at: number } | undefined;
    let timer: NodeJS.Timeout | undefined;
    let done = false;
    const finish = (): void => {
      done = true;
      clearTimeout(timer);
      call.signal?.removeEventListener('abort', onAbort);
    };
    const onAbort = function (this: AbortSignal): void {
      if (line.remove(waiter)) {
        finish();
        reject(this.reason);
      }
    };
    const waiter: Waiter<Call> = {
      call,
      priority: call.priority,
      cost: call.cost,
      room: call.room,
      narrow: call.also.length > 0,
      settle: (outcome: Outcome) => {
        if (done) {
          // Left the line (aborted, out of time) while its slot was being booked: give it back.
          if ('result' in outcome && outcome.result.status === 'booked') hooks.release(call, outcome.result, outcome.extra as Booking);
          return;
        }
        finish();
        if ('error' in outcome) return reject(outcome.error);
        const { result } = outcome;
        const booking = outcome.extra as Booking;
        last = { result, at: performance.now() };
        if (result.status === 'booked') return resolve({ result, booking });
        hooks.refused(call, result, booking);
        reject(hooks.limited(call, result, result.waitMs));
      },
      deferred: (result) => {
        last = { result, at: performance.now() };
      },
    };
    if (call.deadline - performance.now() <= MAX_TIMER_MS && call.maxDelayMs > 0) {
      // maxDelayMs bounds the whole wait: a call still in line when it runs out leaves it.
      timer = setTimeout(
        () => {
          if (!line.remove(waiter)) return;
          finish();
          const failure = hooks.failure();
          if (failure && !last) return reject(failure);
          // No slot before the store's answer, nor (a call it waits for may still be in flight)
          // before one window of the rule it named.
          const window = last ? hooks.windowOf(call, last.result) : 1;
          const leftMs = last ? Math.max(last.result.waitMs - (performance.now() - last.at), last.result.status === 'deferred' ? window : 1) : 0;
          const retryAfterMs = Math.max(1, Math.ceil(leftMs));
          reject(last ? hooks.limited(call, last.result, retryAfterMs) : new RateLimitedError(call.key, 'booked', retryAfterMs));
        },
        Math.max(0, call.deadline - performance.now()),
      );
    }
    // close() clears every line itself: only the call's own signal is listened to here (a listener
    // per waiting call on the throttle's signal would make each removal scan all of them).
    call.signal?.addEventListener('abort', onAbort, { once: true });
    line.add(waiter, first);
  });
}

/**
 * A throttle's lines in this process (lib/waiting.ts): one per key, and one per set of keys for
 * calls that count in several (`Call.line`). Knows which lines hold each key, so that a completion
 * announced on a key wakes every line that waits on it, and so that this process leaves a key's
 * list of waiting processes only when no line of it holds the key any more.
 */
export class Lines {
  readonly #client: StoreClient;
  readonly #slots: Slots;
  readonly #lines = new Map<string, KeyLine<Call>>();
  /** Lines with a call asked without a line (none of the line's calls waited), until it is answered. */
  readonly #alone = new Map<string, Promise<unknown>>();
  /** Per encoded key, the lines of several keys that hold it (asked alone or in line), with how many reasons each. */
  readonly #several = new Map<string, Map<string, number>>();
  /** Keys whose list of waiting processes may hold this process (a decision on them was deferred, or kept it there). */
  readonly #listed = new Set<string>();
  /** Per line of several keys, its turn (see `#turn`), while it is held. */
  readonly #turns = new Map<string, number>();
  #served = 0;

  /** The throttle's: aborted when it closes. */
  readonly #closing: AbortSignal;
  /** Calls a line holds at most while it waits for a completion (`maxQueued`). */
  readonly #maxQueued: number;

  constructor(client: StoreClient, slots: Slots, closing: AbortSignal, maxQueued: number) {
    this.#client = client;
    this.#slots = slots;
    this.#closing = closing;
    this.#maxQueued = maxQueued;
  }

  /**
   * The call's slot: asked of the store at once when no call of its line (its key, or its set of
   * keys) waits in this process, else in the line, which it also joins, first, when the store
   * defers it. Rejects with `hooks.limited`'s error when refused, `QueueFullError` when the line
   * is full, or the abort reason (the call's signal, or the throttle closing); a slot booked for a
   * call that went meanwhile is given back.
   */
  async enter(call: Call, hooks: WaiterHooks): Promise<Grant> {
    let line = this.#lines.get(call.line);
    let first = false;
    /** The store's answer to the call asked alone, when it deferred it. */
    let deferredAlone: ReserveResult | undefined;
    if (line === undefined && !this.#isAlone(call.line)) {
      // Calls of the line that come meanwhile wait in a held line, behind this one.
      const asked = this.ask(call);
      this.#startAlone(call, asked);
      let answer;
      try {
        answer = await asked;
      } catch (error) {
        this.#doneAlone(call);
        this.#lines.get(call.line)?.resume();
        throw error;
      }
      const { result, extra } = answer;
      line = this.#lines.get(call.line);
      const aborted = this.#aborted(call);
      if (aborted || result.status !== 'deferred') {
        // Listed in its keys' waiting processes, but gone: leave those no line here holds.
        const leave = line?.size ? NO_KEYS : this.leaving(call);
        this.#doneAlone(call);
        line?.resume();
        void this.#client.leave(leave);
        if (result.status === 'booked') {
          const grant = grantOf(result, extra);
          if (!aborted) return grant;
          this.#slots.release(call, grant);
        }
        if (aborted) throw aborted.reason;
        hooks.refused(call, result, extra);
        throw hooks.limited(call, result, result.waitMs);
      }
      first = true;
      deferredAlone = result;
    }
    if (line === undefined) {
      const created: KeyLine<Call> = new KeyLine<Call>(
        (queued) => this.ask(queued),
        () => {
          // Its calls went away: leave the waiting lists it may be on, so that the next process is woken.
          const leave = this.#closing.aborted ? NO_KEYS : this.leaving(call);
          this.delete(call, created);
          void this.#client.leave(leave);
        },
        this.#isAlone(call.line),
        this.#client.store.announces === false,
      );
      this.set(call, (line = created));
    } else if (!first && line.deferred && line.size >= this.#maxQueued) {
      throw new QueueFullError(call.key, this.#maxQueued);
    }
    if (first) this.#doneAlone(call);
    const waiting = waitInLine(line, call, hooks, first);
    // Deferred when asked alone: it asks again first, then the calls that came meanwhile (at once
    // where a completion may have been announced meanwhile, else when its slot could first be free).
    if (deferredAlone !== undefined && this.#client.store.announces === false) line.waitFor(deferredAlone);
    if (first) line.resume();
    const { result, booking } = await waiting;
    this.#tookTurn(call);
    return grantOf(result, booking);
  }

  /** The call's signal if aborted, else the throttle's if it closes, else undefined. */
  #aborted(call: Call): AbortSignal | undefined {
    if (call.signal?.aborted) return call.signal;
    return this.#closing.aborted ? this.#closing : undefined;
  }

  /**
   * Asks the store for `call`'s slot, keeping this process's waiting lists in step with the
   * store's answer (the local fallback's lists none). A deferral that finds this process not yet
   * listening for completions starts listening and asks again (one may have come meanwhile):
   * every line then hears the completions it waits for. `again`: that ask.
   */
  ask(call: Call, again = false, attempt = 0): Promise<Decided> {
    // Chained, not an async loop: one frame less per call.
    const stay = call.also.length === 0 && this.stays(call.encoded);
    return this.#client.decide(call, stay, again, attempt).then(
      (decided) => {
        if (!('result' in decided)) return this.ask(call, again, decided.attempt);
        if (decided.extra.store !== this.#client.store) return decided;
        this.answered(call, decided.result, decided.stay);
        if (decided.result.status !== 'deferred') return decided;
        return this.#client.listen(this.#wake).then((listening) => (listening ? this.ask(call, true) : decided));
      },
      (error: unknown) => {
        // The call's deadline passed first: an answer that still comes is not the call's.
        void this.#client.lateAnswer(error)?.then((late) => late && this.#late(call, late));
        throw error;
      },
    );
  }

  readonly #wake = (key: string): void => this.wake(key);

  /** An answer the call stopped waiting for: its slot given back, its keys' waiting lists left. */
  #late(call: Call, { result, extra, stay }: Decided): void {
    this.answered(call, result, stay);
    if (result.status === 'booked') this.#slots.release(call, grantOf(result, extra));
    void this.#client.leave(this.get(call.line)?.size ? NO_KEYS : this.leaving(call));
  }

  get(line: string): KeyLine<Call> | undefined {
    return this.#lines.get(line);
  }

  set(call: Call, line: KeyLine<Call>): void {
    this.#lines.set(call.line, line);
    this.#hold(call, 1);
  }

  /** Forgets `line` if it is still the call's line. */
  delete(call: Call, line: KeyLine<Call>): void {
    if (this.#lines.get(call.line) !== line) return;
    this.#lines.delete(call.line);
    this.#hold(call, -1);
  }

  #isAlone(line: string): boolean {
    return this.#alone.has(line);
  }

  #startAlone(call: Call, asked: Promise<unknown>): void {
    this.#alone.set(call.line, asked);
    this.#hold(call, 1);
  }

  #doneAlone(call: Call): void {
    if (this.#alone.delete(call.line)) this.#hold(call, -1);
  }

  /** Calls asked alone, still unanswered. */
  get asking(): Iterable<Promise<unknown>> {
    return this.#alone.values();
  }

  /** A completion was announced on the key ('': on any key): the lines that hold it may ask again. */
  wake(key: string): void {
    if (key === '') {
      for (const line of this.#lines.values()) line.wake();
      return;
    }
    this.#lines.get(key)?.wake();
    const several = this.#several.get(key);
    if (several === undefined) return;
    // Lines served least lately first: their asks go first in the batch (see `served`).
    const ids = [...several.keys()].sort((a, b) => this.#turn(a) - this.#turn(b));
    for (const id of ids) this.#lines.get(id)?.wake();
  }

  /**
   * A call of several keys was booked: its line goes behind the other lines of its keys, so that
   * when a completion wakes them, the lines that waited longest ask first (users take turns at an
   * app-wide key).
   */
  #tookTurn(call: Call): void {
    if (call.also.length > 0 && this.#turns.has(call.line)) this.#turns.set(call.line, ++this.#served);
  }

  /**
   * When the line was last served (a count of bookings); a line never served yet comes first, in
   * an order drawn at random, so that processes whose lines were made in the same order (one per
   * user, user by user) do not all serve the same users first. A line that empties is forgotten: a
   * user whose calls come one at a time counts as not served lately, and goes ahead of backlogs.
   */
  #turn(line: string): number {
    let turn = this.#turns.get(line);
    if (turn === undefined) this.#turns.set(line, (turn = -Math.random()));
    return turn;
  }

  /** Whether a line of several keys holds the key (this process stays in its waiting list). */
  stays(key: string): boolean {
    return this.#several.has(key);
  }

  /**
   * The store answered a decision for `call` (`stay`: as sent). A deferred one lists this process
   * on the call's keys; one of a single key that waits no more, sent without `stay`, took it off.
   */
  answered(call: Call, result: ReserveResult, stay: boolean): void {
    if (result.status === 'deferred') for (const key of keysOf(call)) this.#listed.add(key);
    else if (call.also.length === 0 && !stay) this.#listed.delete(call.encoded);
  }

  /**
   * The keys of `call` whose waiting lists this process should leave now that the call's line (or
   * its call asked alone) goes: those it may be listed on that no other line of it holds. They
   * count as left.
   */
  leaving(call: Call): readonly string[] {
    if (call.also.length === 0 && !this.#listed.has(call.encoded)) return NO_KEYS;
    return keysOf(call).filter((key) => {
      if (!this.#listed.has(key)) return false;
      if (key !== call.line && (this.#lines.has(key) || this.#alone.has(key))) return false;
      const several = this.#several.get(key);
      if (several !== undefined && (several.size > 1 || !several.has(call.line))) return false;
      this.#listed.delete(key);
      return true;
    });
  }

  /** Calls waiting in line: in all lines, or in the lines that hold one key. */
  queued(key?: string): number {
    if (key === undefined) {
      let queued = 0;
      for (const line of this.#lines.values()) queued += line.size;
      return queued;
    }
    let queued = this.#lines.get(key)?.size ?? 0;
    for (const id of this.#several.get(key)?.keys() ?? []) queued += this.#lines.get(id)?.size ?? 0;
    return queued;
  }

  get size(): number {
    return this.#lines.size;
  }

  /** Takes every line out, for `close()`, with the keys this process may be listed on (to leave). */
  drain(): { lines: Array<KeyLine<Call>>; listed: string[] } {
    const lines = [...this.#lines.values()];
    const listed = [...this.#listed];
    this.#lines.clear();
    this.#several.clear();
    this.#turns.clear();
    this.#listed.clear();
    return { lines, listed };
  }

  #hold(call: Call, by: 1 | -1): void {
    if (call.also.length === 0) return;
    if (by > 0) this.#turn(call.line);
    for (const key of keysOf(call)) {
      let lines = this.#several.get(key);
      if (!lines) this.#several.set(key, (lines = new Map()));
      const count = (lines.get(call.line) ?? 0) + by;
      if (count > 0) lines.set(call.line, count);
      else lines.delete(call.line);
      if (lines.size === 0) this.#several.delete(key);
    }
    if (!this.#several.get(call.encoded)?.has(call.line)) this.#turns.delete(call.line);
  }
}
