import { StoreUnavailableError, ThrottleConfigError, ThrottleError } from './errors.js';
import type { LocalFallback } from './fallback.js';
import type { StoreErrorPolicy, ThrottleEvents } from './options.js';
import type { Rule } from './rules.js';
import { sleep, StoreClock, withTimeout } from './time.js';
import type { ClaimResult, KeyPart, ReserveRequest, ReserveResult, Store } from './store.js';
import type { Dependency } from './slot-plan.js';

/** How long after a failed subscription to completions the next wait tries again. */
const LISTEN_RETRY_MS = 5_000;

/** One key of a call, checked: what the store needs of it. */
export interface CallKey {
  /** The user key, normalized. */
  readonly key: string;
  readonly encoded: string;
  readonly rules: readonly Rule[];
  readonly retainMs: number;
}

/** One call, validated, with everything a decision needs: its first key, and any more it counts in. */
export interface Call extends CallKey {
  /** More keys the call counts in (lib/calls.ts); empty for a call of one key. */
  readonly also: readonly CallKey[];
  /** The call's line in this process: its encoded key, or its keys' sorted and joined by spaces. */
  readonly line: string;
  readonly cost: number;
  /** Calls of this cost one decision can usually book at most: the smallest limit over the cost (lib/waiting.ts). */
  readonly room: number;
  readonly maxDelayMs: number;
  /** `performance.now()` by which the call must have its slot (Infinity: no bound). */
  readonly deadline: number;
  readonly priority: number;
  readonly timeoutMs: number;
  readonly signal: AbortSignal | undefined;
  /**
   * A reservation (`Throttle.reserve`): its slot is booked for a call made later, maybe by another
   * process, and can be claimed for this long after its start.
   */
  readonly graceMs?: number;
  /** A reservation for this process's own call (`ReserveRequest.own`). */
  readonly own?: boolean;
}

/** A reservation's slots, as its token names them (lib/reservations.ts) and a claim takes them. */
export interface ReservedSlots {
  /** The encoded key. */
  readonly key: string;
  /** More encoded keys the slots were booked in, in the call's order (a reservation of several keys). */
  readonly also: readonly string[];
  readonly members: readonly string[];
  /** The reserved slots' score in the log. */
  readonly bound: number;
  /** Their start (store clock, ms). */
  readonly start: number;
  /** Their dependencies (`ReserveResult.deps`): slots to have released a window before the call starts. */
  readonly deps: readonly Dependency[];
}

/** What a decision gives the line, besides the store's answer. */
export interface Booking {
  /** Where the slot was booked, and is settled: the throttle's store, or the local fallback (a store too). */
  readonly store: Store;
  /** `performance.now()` when the decision was asked for. */
  readonly sentAt: number;
  /** `performance.now()` when the answer came: the store decided between `sentAt` and this. */
  readonly receivedAt: number;
  /** The store's clock against this process's, as the decisions so far tell it. */
  readonly clock: StoreClock;
}

export interface StoreClientOptions {
  readonly namespace: string;
  readonly store: Store;
  readonly maxHoldMs: number;
  readonly policy: StoreErrorPolicy;
  readonly fallback: LocalFallback | undefined;
  readonly closing: AbortSignal;
  notify<E extends keyof ThrottleEvents>(event: E, ...args: ThrottleEvents[E]): void;
}

/** A decision's answer: the store's, where it was taken, and whether this process asked to stay in the key's waiting list (`ReserveRequest.stay`). */
export interface Decided {
  readonly result: ReserveResult;
  readonly extra: Booking;
  readonly stay: boolean;
}

/**
 * The store failed an ask and `onStoreError` says to ask again now (once the store can be reached,
 * after a backoff, or of the local fallback): the next ask is number `attempt`.
 */
export interface AskAgain {
  readonly attempt: number;
}

const NO_KEYS: readonly never[] = [];

/** A call's more keys as the store takes them. */
function alsoRequested(call: Call): readonly KeyPart[] {
  return call.also.length === 0 ? NO_KEYS : call.also.map(({ encoded, rules, retainMs }) => ({ key: encoded, rules, retainMs }));
}
const LEFT: Promise<unknown> = Promise.resolve([]);

/**
 * The throttle's side of the store protocol: one decision per call, with `onStoreError` applied
 * when the store fails ('fail' rejects; 'wait' asks again within the call's `maxDelayMs`, once the
 * store can be reached again when it says it cannot, else with backoff; 'local' decides in this
 * process with a share of each limit); the store's completion announcements, once a waiting line
 * asks for them (`listen`); leaving waiting lists.
 */
export class StoreClient {
  readonly #options: StoreClientOptions;
  #listening: Promise<void> | undefined;
  /** Announcements reach this process. */
  #listened = false;
  /** `performance.now()` before which a subscription that failed is not tried again. */
  #retryListenAt = 0;
  #unlisten: (() => void) | undefined;
  /** The store's latest failure, until it answers again. */
  #failure: StoreUnavailableError | undefined;
  /** Failures raised when a call's deadline passed while the store still failed (reported before). */
  readonly #deadlines = new WeakSet<Error>();
  /** Per failure a call's deadline raised, the store's answer that came after it (`lateAnswer`). */
  readonly #late = new WeakMap<Error, Promise<Decided | undefined>>();
  /** Per store answering (the throttle's, or the local fallback's): its clock. */
  readonly #clocks = new WeakMap<Store, StoreClock>();

  constructor(options: StoreClientOptions) {
    this.#options = options;
  }

  /** The throttle's store (a decision of the local fallback names the fallback instead: `Booking.store`). */
  get store(): Store {
    return this.#options.store;
  }

  /** The store failed and has not answered since: why (a call that runs out of time then says so). */
  get failure(): StoreUnavailableError | undefined {
    return this.#failure;
  }

  /**
   * The store's answer for `call`, asked for the `attempt`th time; `AskAgain` when the store failed
   * and the call is to be asked again (the asker decides `stay` afresh: time passes, and the lines
   * of this process change, while it backs off). `stay`: this process stays in the key's waiting
   * list (calls of several keys wait on it). `again`: the call was asked before (a deferral that
   * started the subscription to completions): its answer is bounded by the call's deadline as every
   * ask after the first is; one that comes after the deadline can be followed (`lateAnswer`).
   */
  decide(call: Call, stay: boolean, again = false, attempt = 0): Promise<Decided | AskAgain> {
    const { store, fallback } = this.#options;
    if (again || attempt > 0 || fallback?.owing === true || (fallback?.active === true && !store.ended)) return this.#decide(call, stay, again, attempt);
    // The usual ask, the first to the store: answered without an async frame (and, as an async
    // function would, rejecting rather than throwing).
    let sentAt = 0;
    let asked: Promise<ReserveResult>;
    try {
      sentAt = performance.now();
      asked = store.reserve(this.#request(call, alsoRequested(call), sentAt, stay));
    } catch (error) {
      // As a failure of the store (the catch of `#decide`).
      asked = Promise.reject(error as Error);
    }
    return asked.then(
      (result) => {
        this.#failure = undefined;
        fallback?.recovered();
        return { result, extra: this.#booking(store, sentAt, result), stay };
      },
      async (error: unknown) => {
        await this.#failed(call, error, 0);
        return { attempt: 1 };
      },
    );
  }

  async #decide(call: Call, stay: boolean, again: boolean, attempt: number): Promise<Decided | AskAgain> {
    const { store, fallback } = this.#options;
    const sentAt = performance.now();
    const request = this.#request(call, alsoRequested(call), sentAt, stay);
    if (fallback?.active && !store.ended) {
      const result = await fallback.reserve(request);
      return { result, extra: this.#booking(fallback, sentAt, result), stay };
    }
    try {
      if (fallback?.owing) await fallback.putBack();
      // Once the store failed, 'wait' asks again only until the call's maxDelayMs runs out.
      const asked = store.reserve(request);
      const result = await (attempt === 0 && !again ? asked : this.#byDeadline(call, asked, sentAt, stay));
      this.#failure = undefined;
      fallback?.recovered();
      return { result, extra: this.#booking(store, sentAt, result), stay };
    } catch (error) {
      await this.#failed(call, error, attempt);
      return { attempt: attempt + 1 };
    }
  }

  /**
   * The answer the store gave after the call's deadline had failed it with `error` (its slot is
   * then to be given back), once it comes; undefined for any other error, and for an answer that
   * never comes.
   */
  lateAnswer(error: unknown): Promise<Decided | undefined> | undefined {
    return error instanceof Error ? this.#late.get(error) : undefined;
  }

  #request(call: Call, also: readonly KeyPart[], sentAt: number, stay: boolean): ReserveRequest {
    const { namespace, maxHoldMs } = this.#options;
    const maxDelayMs = Math.max(0, call.deadline - sentAt);
    const { graceMs } = call;
    if (graceMs !== undefined) {
      // A reservation's slot counts as if its call started as late as its grace allows.
      return {
        namespace,
        key: call.encoded,
        rules: call.rules,
        cost: call.cost,
        maxDelayMs,
        maxHoldMs: maxHoldMs + graceMs,
        retainMs: call.retainMs,
        also,
        stay,
        reserved: true,
        graceMs,
        ...(call.own === true ? { own: true } : {}),
      };
    }
    return { namespace, key: call.encoded, rules: call.rules, cost: call.cost, maxDelayMs, maxHoldMs, retainMs: call.retainMs, also, stay };
  }

  /**
   * Ask number `attempt` failed with `error`: resolves when the call is to be asked again (now, once
   * the store can be reached, after a backoff, or to the local fallback), else rejects with the
   * failure to give the caller.
   */
  async #failed(call: Call, error: unknown, attempt: number): Promise<void> {
    const { store, policy, fallback, closing } = this.#options;
    const failure = storeError(error);
    if (!(failure instanceof StoreUnavailableError)) throw failure;
    // The deadline passed while the store still failed: reported already.
    if (this.#deadlines.has(failure)) throw failure;
    this.#failure = failure;
    this.#options.notify('storeError', { key: call.key, error: failure, policy });
    // A store whose client was closed answers again only if its owner reopens it: no waiting, no local decisions.
    if (policy === 'fail' || store.ended) throw failure;
    if (fallback) {
      fallback.failed();
      return;
    }
    // Out of reach (a refused connection): ask again once the store can be reached, if it can
    // before the call's maxDelayMs runs out.
    const reconnected = store.reconnected?.();
    if (reconnected) {
      if (performance.now() >= call.deadline) throw failure;
      const stop = call.signal ? AbortSignal.any([call.signal, closing]) : closing;
      await withTimeout(reconnected, Math.max(0, call.deadline - performance.now()), () => this.#expired(), undefined, stop);
      return;
    }
    const backoffMs = Math.min(1_000, 25 * 2 ** Math.min(attempt, 6));
    if (performance.now() + backoffMs > call.deadline) throw failure;
    await sleep(backoffMs, [call.signal, closing]);
  }

  /**
   * Listens for the store's completion announcements (a line that waits for one calls this):
   * resolves to true when it listens from now on (a completion may have come before: ask again),
   * false when it listened already, or cannot (a subscription that failed is tried again at most
   * every LISTEN_RETRY_MS; meanwhile calls ask again at their bounds).
   */
  async listen(listener: (key: string) => void): Promise<boolean> {
    const { store } = this.#options;
    // A store that announces nothing (no pub/sub): there is nothing to listen for, nor to ask again for.
    if (this.#listened || !store.listen || store.announces === false || performance.now() < this.#retryListenAt) return false;
    await this.#listen(store.listen.bind(store), listener);
    return this.#listened;
  }

  /**
   * Leaves the keys' waiting lists in the store (this process's calls there went away); never
   * rejects. One that fails is said (`debug`): the list keeps this process until its entry's time
   * passes, and meanwhile a completion wakes it instead of the next process, which asks again at its bound.
   */
  leave(keys: readonly string[]): Promise<unknown> {
    if (keys.length === 0) return LEFT;
    const { store, namespace, notify } = this.#options;
    return Promise.all(
      keys.map((key) =>
        store.leave?.(namespace, key).catch((error: unknown) => notify('debug', { message: "cannot leave the key's waiting list in the store", key, error })),
      ),
    );
  }

  /**
   * The store's answer, or the store's failure once the call's deadline passes first; an answer
   * that comes after it is kept for `lateAnswer`.
   */
  #byDeadline(call: Call, asked: Promise<ReserveResult>, sentAt: number, stay: boolean): Promise<ReserveResult> {
    const deadline = withTimeout(asked, Math.max(0, call.deadline - performance.now()), () => this.#expired());
    deadline.catch((error: unknown) => {
      if (!(error instanceof Error) || !this.#deadlines.has(error)) return;
      this.#late.set(
        error,
        asked.then(
          (result) => ({ result, extra: this.#booking(this.#options.store, sentAt, result), stay }),
          () => undefined,
        ),
      );
    });
    return deadline;
  }

  /** The call's deadline passed while the store still failed: its latest failure, saying so (reported before). */
  #expired(): StoreUnavailableError {
    const last = this.#failure;
    const error = new StoreUnavailableError(`${last?.message ?? 'The store did not answer'}; the call's maxDelayMs ran out`, last?.cause ?? last);
    this.#deadlines.add(error);
    return error;
  }

  /**
   * Claims a reservation's slots for `call` (`Store.claim`), with the booking its answer places on
   * this process's clock; with `giveBack`, takes them out instead (its own call was aborted). A
   * store's failure rejects as a decision's under 'fail' (reported in `storeError`): a claim is not
   * asked again, since a claim that reached the store before its answer was lost has used the
   * reservation.
   */
  async claim(call: Call, token: ReservedSlots, graceMs: number, giveBack = false): Promise<{ readonly result: ClaimResult; readonly booking: Booking }> {
    const { store, namespace, maxHoldMs, policy } = this.#options;
    if (store.claim === undefined) throw new ThrottleConfigError('Expected a store that keeps reservations (Store.claim), got one without', 'store');
    const sentAt = performance.now();
    let result: ClaimResult;
    try {
      const { members, bound, start, deps } = token;
      const give = giveBack ? { giveBack } : {};
      // The call's keys in the token's order (its dependencies name them by place).
      const retainOf = (encoded: string): number => [call, ...call.also].find((part) => part.encoded === encoded)?.retainMs ?? call.retainMs;
      const also = token.also.length === 0 ? {} : { also: token.also.map((key) => ({ key, retainMs: retainOf(key) })) };
      const request = { namespace, key: token.key, members, bound, startAt: start, graceMs, maxHoldMs, retainMs: retainOf(token.key), deps, ...also, ...give };
      result = await store.claim(request);
    } catch (error) {
      const failure = storeError(error);
      if (failure instanceof StoreUnavailableError) this.#options.notify('storeError', { key: call.key, error: failure, policy });
      throw failure;
    }
    this.#failure = undefined;
    return { result, booking: this.#booking(store, sentAt, result) };
  }

  #booking(store: Store, askedAt: number, result: { readonly now: number; readonly readAt?: number }): Booking {
    const receivedAt = performance.now();
    // An in-process store may answer with a clock reading taken before the ask: from then on.
    const sentAt = Math.min(askedAt, result.readAt ?? askedAt);
    let clock = store.singleClock ? this.#clocks.get(store) : undefined;
    if (!clock) {
      clock = new StoreClock();
      if (store.singleClock) this.#clocks.set(store, clock);
    }
    clock.sample(sentAt, receivedAt, result.now);
    return { store, sentAt, receivedAt, clock };
  }

  /** Stops listening. */
  async close(): Promise<void> {
    await this.#listening;
    this.#unlisten?.();
  }

  #listen(listen: NonNullable<Store['listen']>, listener: (key: string) => void): Promise<void> {
    this.#listening ??= listen(this.#options.namespace, listener).then(
      (stop) => {
        this.#listened = true;
        if (this.#options.closing.aborted) stop();
        else this.#unlisten = stop;
      },
      (error: unknown) => {
        // Tried again by a wait at least LISTEN_RETRY_MS later; meanwhile calls ask at their bounds.
        this.#listening = undefined;
        this.#retryListenAt = performance.now() + LISTEN_RETRY_MS;
        this.#options.notify('debug', { message: 'cannot listen for completions; waiting calls ask again at their bounds until it works', error });
      },
    );
    return this.#listening;
  }
}

/** A store's failure as the throttle reports it: its own errors as they are, anything else as `StoreUnavailableError`. */
export function storeError(error: unknown): Error {
  if (error instanceof ThrottleError) return error;
  const message = error instanceof Error ? error.message : String(error);
  return new StoreUnavailableError(`Throttle store failed: ${message}`, error);
}
