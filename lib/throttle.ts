import { EventEmitter, setMaxListeners } from 'node:events';
import { Activity, Sleeping } from './activity.js';
import { CallLife, LIFE_EVENTS, type LifeEvents } from './call-life.js';
import { throttleAxios } from './adapters/axios.js';
import type { AxiosInstanceType } from './adapters/axios-types.js';
import { throttleFetch } from './adapters/fetch.js';
import type { AxiosThrottleHandle, AxiosThrottleOptions, FetchLike, FetchThrottleOptions, Throttled, WrapOptions } from './adapters/options.js';
import { registerInternals } from './adapters/scheduler.js';
import { Booker } from './booker.js';
import { throttleWrap } from './adapters/wrap.js';
import { prepareCall, reasonOf, type CallDefaults } from './calls.js';
import { Completions, Slots, type Grant } from './completions.js';
import { CallTimeoutError, ThrottleClosedError, ThrottleConfigError } from './errors.js';
import { decodeToken, type Reservation } from './reservations.js';
import { StoreClient, type Call } from './store-client.js';
import { LocalFallback } from './fallback.js';
import type { KeyInput, KeysInput } from './keys.js';
import { KeyOps } from './key-ops.js';
import {
  throttleSettings,
  type KeyUsage,
  type LimitOptions,
  type LimitResult,
  type ReserveOptions,
  type ScheduleOptions,
  type ThrottleEvents,
  type ThrottleOptions,
  type ThrottleStats,
} from './options.js';
import { Refusals } from './refusals.js';
import { ReservationOps } from './reservation-ops.js';
import { describe } from './rules.js';
import { Telemetry, telemetryReady, type CallTrace } from './telemetry.js';
import { withTimeout } from './time.js';
import { MemoryStore } from './stores/memory-store.js';
import type { Store } from './store.js';
import type { HeaderSource } from './vendor-signals.js';
import { Lines } from './waiting.js';

/** What an adapter does with a call's value within its span (`ThrottleInternals.schedule`); `defer`: work that keeps the span open. */
type Then<T, U> = (value: Awaited<T>, defer: (work: Promise<unknown>) => void) => Promise<U>;

/** A `defer` of a call without a span: the work runs on its own. */
const IGNORE = (): void => undefined;

/**
 * Keeps calls to one vendor under its limits per key, counted over every process that shares the store.
 *
 * ```ts
 * const throttle = new Throttle({ name: 'acme', rules: ['30/min'], store: new RedisStore(redis) });
 * const user = await throttle.schedule(userId, () => acme.get(`/users/${userId}`));
 * ```
 */
export class Throttle extends EventEmitter<ThrottleEvents> {
  readonly name: string;
  readonly mode: 'wait' | 'throw';
  readonly store: Store;
  readonly #ownsStore: boolean;
  readonly #callDefaults: CallDefaults;
  readonly #maxHoldMs: number;
  readonly #fallback: LocalFallback | undefined;
  readonly #storeClient: StoreClient;
  readonly #completions: Completions;
  readonly #slots: Slots;
  readonly #closing = new AbortController();
  readonly #lines: Lines;
  readonly #sleeping = new Sleeping();
  readonly #activity = new Activity();
  readonly #refusals = new Refusals();
  readonly #keyOps: KeyOps;
  readonly #booker: Booker;
  readonly #reservations: ReservationOps;
  /** OpenTelemetry spans and metrics, while a provider is registered (none with `telemetry: false`). */
  readonly #telemetry: Telemetry | undefined;
  /** Stops listening to the store's notices. */
  readonly #unwatch: (() => void) | undefined;
  #closed: Promise<void> | undefined;
  /** The throttle's events as a call's life and the key operations report them. */
  readonly #events: LifeEvents = {
    listenerCount: (event) => this.listenerCount(event),
    notify: (event, ...args) => this.#notify(event, ...args),
  };

  constructor(options: ThrottleOptions) {
    super();
    const settings = throttleSettings(options);
    this.name = settings.name;
    this.mode = settings.mode;
    this.#callDefaults = {
      mode: settings.mode,
      maxDelayMs: settings.maxDelayMs,
      timeoutMs: settings.timeoutMs,
      retainMs: settings.retainMs,
      rules: settings.rules,
    };
    this.#maxHoldMs = settings.maxHoldMs;
    const policy = settings.onStoreError;
    this.#ownsStore = settings.store === undefined;
    this.store = settings.store ?? new MemoryStore();
    this.#fallback =
      policy === 'local'
        ? new LocalFallback(this.name, this.store, settings.localShare, (error) =>
            this.#notify('debug', { message: 'at close, the calls decided locally could not be put into the store: other processes never count them', error }),
          )
        : undefined;
    this.#storeClient = new StoreClient({
      namespace: this.name,
      store: this.store,
      maxHoldMs: this.#maxHoldMs,
      policy,
      fallback: this.#fallback,
      closing: this.#closing.signal,
      notify: (event, ...args) => this.#notify(event, ...args),
    });
    this.#completions = new Completions(this.name, this.store, this.#refusals, (error) =>
      this.#notify('debug', { message: 'a completion or release did not reach the store; it is sent again (until then the slot counts to its bound)', error }),
    );
    this.#slots = new Slots(this.#completions, this.#maxHoldMs, (message, key) => this.#notify('debug', { message, key }));
    this.#lines = new Lines(this.#storeClient, this.#slots, this.#closing.signal, settings.maxQueued);
    this.#booker = new Booker({
      name: this.name,
      store: this.store,
      maxHoldMs: this.#maxHoldMs,
      graceMs: settings.reservationGraceMs,
      policy,
      storeClient: this.#storeClient,
      slots: this.#slots,
      lines: this.#lines,
      refusals: this.#refusals,
      sleeping: this.#sleeping,
      closing: this.#closing.signal,
      notify: (event, ...args) => this.#notify(event, ...args),
    });
    this.#reservations = new ReservationOps({
      name: this.name,
      store: this.store,
      maxHoldMs: this.#maxHoldMs,
      graceMs: settings.reservationGraceMs,
      reserveDefaults: { ...this.#callDefaults, mode: 'wait', maxDelayMs: settings.reserveMaxDelayMs },
      callDefaults: this.#callDefaults,
      storeClient: this.#storeClient,
      slots: this.#slots,
      booker: this.#booker,
      notify: (event, ...args) => this.#notify(event, ...args),
    });
    this.#keyOps = new KeyOps({
      name: this.name,
      store: this.store,
      callDefaults: this.#callDefaults,
      maxHoldMs: this.#maxHoldMs,
      learnedForMs: settings.learnedForMs,
      learnAboveRules: settings.learnAboveRules,
      learnedFloor: settings.learnedFloor,
      closing: this.#closing.signal,
      lines: this.#lines,
      slots: this.#slots,
      waitingHere: (encoded) => this.#sleeping.on(encoded) + this.#lines.queued(encoded),
      freed: (encoded) => {
        this.#refusals.forget(encoded);
        this.#lines.wake(encoded);
      },
      notify: (event, ...args) => this.#notify(event, ...args),
      events: this.#events,
    });
    this.#unwatch = this.store.watch?.((notice) => this.#notify('storeWarning', notice));
    this.#telemetry = settings.telemetry
      ? new Telemetry({
          name: this.name,
          maxHoldMs: this.#maxHoldMs,
          keyLabel: settings.keyLabel,
          waiting: () => this.#activity.size,
          running: () => this.#activity.pending,
          failed: (error) => this.#notify('debug', { message: 'OpenTelemetry failed to record a call; calls go on, and this is said once', error }),
        })
      : undefined;
    registerInternals(this, {
      notify: (event, ...args) => this.#notify(event, ...args),
      schedule: (key, fn, options, retry, then) => this.#schedule(key, fn, options, retry, then),
      // How long a BullMQ job waits in the worker for its slot, at most (lib/adapters/bullmq.ts).
      shortestWindow: (key) => this.#keyOps.shortestWindow(key),
    });
    // Every waiting call listens to this signal; their number is bounded by the work, not a leak.
    setMaxListeners(0, this.#closing.signal);
  }

  /** How long after its start a call may still reach the vendor (see `ThrottleOptions.maxHoldMs`). */
  get maxHoldMs(): number {
    return this.#maxHoldMs;
  }

  /** What this process holds locally: keys with waiting calls, calls waiting in line, calls sleeping until their slot. All 0 when idle. */
  get stats(): ThrottleStats {
    const queued = this.#lines.queued();
    return { queues: this.#lines.size, queued, sleeping: this.#sleeping.calls };
  }

  /**
   * Runs `fn` once a slot for `key` is free under every rule, and returns what `fn` returns (or
   * rejects with the very error it threw). The slot is spent when `fn` starts, whatever `fn` then does.
   *
   * Rejects, without calling `fn` and with nothing booked, with `RateLimitedError` (no slot within
   * `maxDelayMs`), `QueueFullError`, `StoreUnavailableError`, `ThrottleClosedError`, `signal.reason`,
   * `ThrottleConfigError` (a bad key, fn or options, cost above a limit); with
   * `CallTimeoutError` when `fn` outlasts `timeoutMs` (its slot keeps counting to its bound).
   */
  schedule<T>(key: KeysInput, fn: () => T | PromiseLike<T>, options?: ScheduleOptions): Promise<Awaited<T>> {
    return this.#schedule(key, fn, options, false, undefined);
  }

  /**
   * `schedule()`, and for the HTTP adapters: `retry` (a request sent again after the vendor refused
   * it), and `then`, what the adapter does with `fn`'s value (reads the vendor's answer, learns,
   * pauses) within the call's span, once its completion is written; work it `defer`s (a lesson not
   * awaited) keeps the span open, not the caller waiting.
   */
  async #schedule<T, U = Awaited<T>>(
    key: KeysInput,
    fn: () => T | PromiseLike<T>,
    options: ScheduleOptions | undefined,
    retry: boolean,
    then: Then<T, U> | undefined,
  ): Promise<U> {
    if (typeof fn !== 'function') throw new ThrottleConfigError(`Expected fn to be a function, got ${describe(fn)}`, 'fn');
    this.#activity.entered();
    try {
      const given = options?.token;
      // A reservation's token is read before the call: its cost is the reservation's.
      // Its error names the key as given when it is one (the key itself is checked next).
      const token = given === undefined ? undefined : decodeToken(given, typeof key === 'string' || typeof key === 'number' ? String(key) : describe(key));
      if (token !== undefined && options?.cost !== undefined && options.cost !== token.members.length)
        throw new ThrottleConfigError(`Expected no cost, or the reservation's (${token.members.length}), with a token; got ${describe(options.cost)}`, 'cost');
      // Synchronous for fixed rules: awaited only when rules depend on the key.
      const prepared = prepareCall(this.#callDefaults, key, token === undefined ? options : { ...options, cost: token.members.length });
      const call = prepared instanceof Promise ? await prepared : prepared;
      this.#booker.checkKeys(call);
      const life = this.#listened() ? new CallLife(this.#events, call) : undefined;
      let trace: CallTrace | undefined;
      if (this.#telemetry !== undefined) {
        // The OpenTelemetry API is loaded once a provider is registered: the first calls wait for it.
        const loading = telemetryReady();
        if (loading !== undefined) await loading;
        trace = this.#telemetry.begin(call.key, call.cost, retry);
      }
      let grant: Grant;
      try {
        if (token !== undefined) grant = await this.#reservations.claim(call, token);
        else if (this.#reservations.everyCallReserves) grant = await this.#reservations.reserveAndClaim(call);
        else grant = await this.#booker.book(call);
      } catch (error) {
        life?.notStarted(error);
        trace?.notStarted(error);
        throw error;
      }
      life?.started();
      trace?.started(grant.result.waitMs > 0 ? reasonOf(call, grant.result) : undefined);
      this.#activity.started();
      try {
        if (trace !== undefined) return await trace.run(() => this.#traced(call, grant, fn, life, trace, then));
        let value: Awaited<T>;
        try {
          value = await this.#run(call, grant, fn);
        } catch (error) {
          life?.threw(error);
          throw error;
        }
        life?.ran(value);
        return then === undefined ? (value as U) : await then(value, IGNORE);
      } finally {
        this.#activity.ran();
      }
    } finally {
      this.#activity.left();
    }
  }

  /**
   * Books a slot for `key` now, for a call made later, maybe by another process sharing the store
   * (a function that hands the token to its platform's delay): the slot counts in every process as
   * any call's. Make the call with `schedule(key, fn, { token })` at `startAt` (within the
   * throttle's `reservationGraceMs`). A token never used counts until its start + the grace +
   * `maxHoldMs`, then a window. Never waits for a call in flight: its slot starts a window after the
   * soonest those calls could release, and its call waits at its start for those that ran longer
   * (its dependencies, checked by the claim). It waits only in this process's
   * line of the key's calls.
   *
   * With several keys (a user's and an app-wide one), the slot is booked in each, in one decision,
   * and the token's call is made with the same keys.
   *
   * Rejects, with nothing booked, with `RateLimitedError` (no slot within `maxDelayMs`),
   * `QueueFullError`, `StoreUnavailableError`, `ThrottleClosedError`, `signal.reason`, or
   * `ThrottleConfigError` (a bad key or options; a store without `claim`, or without `multiKey`
   * for several keys).
   */
  reserve(key: KeysInput, options?: ReserveOptions): Promise<Reservation> {
    return this.#reservations.reserve(key, options);
  }

  /**
   * Gives back a reservation whose call will not be made (the platform's delay could not be
   * scheduled, the job was removed): its slots leave the log of each of its keys at once, so other
   * calls need not wait for its bound, and the token starts no call after (`'used'`). A token used,
   * moved or given back already: nothing is left to give back, and it resolves all the same.
   *
   * Rejects with `ReservationError` (a token malformed, of another throttle or for other keys),
   * `StoreUnavailableError`, or `ThrottleConfigError` (a bad key; a store without `claim`).
   */
  release(key: KeysInput, token: string): Promise<void> {
    return this.#reservations.release(key, token);
  }

  /** A call's run in its span: `then` (an adapter's reading of the answer), and what it defers, before the span ends. */
  async #traced<T, U>(
    call: Call,
    grant: Grant,
    fn: () => T | PromiseLike<T>,
    life: CallLife | undefined,
    trace: CallTrace,
    then: Then<T, U> | undefined,
  ): Promise<U> {
    let value: Awaited<T>;
    try {
      value = await this.#run(call, grant, fn);
    } catch (error) {
      life?.threw(error);
      trace.threw(error);
      trace.end();
      throw error;
    }
    life?.ran(value);
    trace.ran(value);
    if (then === undefined) {
      trace.end();
      return value as U;
    }
    const deferred: Array<Promise<unknown>> = [];
    try {
      return await then(value, (work) => deferred.push(work));
    } finally {
      if (deferred.length === 0) trace.end();
      else void Promise.allSettled(deferred).then(() => trace.end());
    }
  }

  /** Whether any event of a call's life is listened to (else no call reports its life). */
  #listened(): boolean {
    for (const event of LIFE_EVENTS) if (this.listenerCount(event) > 0) return true;
    return false;
  }

  /** Calls of this process waiting for a slot (in line, asking the store, or sleeping until their start): p-queue's `size`. */
  get size(): number {
    return this.#activity.size;
  }

  /** Calls of this process whose `fn` is running: p-queue's `pending`. */
  get pending(): number {
    return this.#activity.pending;
  }

  /** Resolves once no call of this process waits for a slot (`size` is 0; calls may still run). */
  onEmpty(): Promise<void> {
    return this.#activity.onEmpty();
  }

  /** Resolves once this process has no call at all: none waiting for a slot, none running. */
  onIdle(): Promise<void> {
    return this.#activity.onIdle();
  }

  /** Usage of `key` under its rules, read from the store without booking anything. */
  inspect(key: KeyInput): Promise<KeyUsage> {
    return this.#keyOps.inspect(key);
  }

  /**
   * Books a slot for `key` now if every rule allows it, without waiting and without throwing for a
   * full key: Upstash's `limit()`. Report the call's response with the answer's `done()`.
   */
  limit(key: KeyInput, options?: LimitOptions): Promise<LimitResult> {
    return this.#keyOps.limit(key, options);
  }

  /**
   * Forgets every call counted on `key`, in every process sharing the store, and its pause: the
   * next calls start as on a new key. Calls the vendor saw in its current window still count there:
   * a reset lets calls over the vendor's limit unless the vendor forgot them too.
   */
  reset(key: KeyInput): Promise<void> {
    return this.#keyOps.reset(key);
  }

  /** Sends every request of an axios instance through this throttle; see docs/adapters.md. */
  axios<I extends AxiosInstanceType>(instance: I, options: AxiosThrottleOptions): AxiosThrottleHandle<I> {
    return throttleAxios(this, instance, options);
  }

  /** A function with the signature of `fetch` that sends every request through this throttle; see docs/adapters.md. */
  fetch<F extends FetchLike = typeof globalThis.fetch>(options: FetchThrottleOptions<F>): F {
    return throttleFetch(this, options);
  }

  /** `fn` with every call sent through `schedule()`, keyed by `options.key(...args)`: same parameters, its result as a promise. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- any function
  wrap<F extends (...args: any[]) => unknown>(fn: F, options: WrapOptions<Parameters<F>>): Throttled<F> {
    return throttleWrap(this, fn, options);
  }

  /**
   * Starts no call for `key` during the next `ms` milliseconds, in every process sharing the store
   * (the vendor said its limit was hit). Calls already booked keep their slots; a longer pause in
   * place is kept. Resolves once the store has recorded it. `source` is reported in the `paused` event.
   */
  pause(key: KeyInput, ms: number, source = 'pause()'): Promise<void> {
    return this.#keyOps.pause(key, ms, source);
  }

  /**
   * Learns the vendor's limits for `key` from one of its responses (its `headers`; `status` as
   * answered), for every process sharing the store: `RateLimit-Policy` (`"burst";q=100;w=60`) and
   * `X-RateLimit-Limit`. A learned limit only lowers (unless `learnAboveRules`): from the next decision of any process, the key
   * counts under the tighter of each configured rule and what was learned for its window (the calls
   * already in the window count: no burst), and under a learned limit of another window as one more
   * rule. It holds `learnedForMs` unless said again; a vendor that says the configured limit again
   * brings it back. A value that cannot apply (malformed, 0, absurd, a window longer than
   * `retainMs`) is ignored and said in a `debug` event. A change emits `learned`. The adapters call
   * it on every answer (`learn: false` turns that off). Resolves once the store has it.
   */
  learn(key: KeyInput, response: { readonly status: number; readonly headers: HeaderSource; readonly flagged?: boolean }): Promise<void> {
    return this.#keyOps.learn(key, response);
  }

  /**
   * Emits an event, never letting a listener's error reach the call that caused it: the error is
   * thrown again on its own (a microtask), an uncaught exception as the error of a listener of an
   * I/O event is. The listeners after the one that threw do not run, as with `emit()`.
   */
  #notify<E extends keyof ThrottleEvents>(event: E, ...args: ThrottleEvents[E]): void {
    this.#telemetry?.heard(event, args[0]);
    if (this.listenerCount(event) === 0) return;
    try {
      (this.emit as (event: E, ...args: ThrottleEvents[E]) => boolean)(event, ...args);
    } catch (error) {
      queueMicrotask(() => {
        throw error;
      });
    }
  }

  /**
   * Stops the throttle: rejects every call still waiting with `ThrottleClosedError`, gives its slot
   * back, and leaves no timer running. Calls whose `fn` has started finish normally. A store passed
   * in by the user (and its Redis client) stays open.
   */
  close(): Promise<void> {
    this.#closed ??= this.#shutdown();
    return this.#closed;
  }

  async #shutdown(): Promise<void> {
    const closed = new ThrottleClosedError();
    this.#closing.abort(closed);
    this.#unwatch?.();
    this.#telemetry?.close();
    const { lines, listed } = this.#lines.drain();
    // Asks under way answer first: slots booked for calls just rejected are given back. This
    // process leaves the waiting lists it may be on, so that the next process is woken.
    await Promise.all(lines.map((line) => line.clear(closed)));
    await this.#storeClient.leave(listed);
    // Calls asked without a line give back what was booked for them once answered.
    await Promise.allSettled([...this.#lines.asking]);
    // The calls just rejected give their slots back once their rejections have run (microtasks).
    await new Promise((resolve) => process.nextTick(resolve));
    await this.#storeClient.close();
    await this.#completions.close();
    // Keys then live only as long as their slots count (failing, to their calls' bounds).
    await this.store.tidy?.(this.name).catch((error: unknown) => this.#notify('debug', { message: 'cannot shorten the life of the keys used', error }));
    await this.#fallback?.close();
    if (this.#ownsStore) await this.store.close();
  }

  #run<T>(call: Call, grant: Grant, fn: () => T | PromiseLike<T>): Promise<Awaited<T>> {
    const startedAt = performance.now();
    const running = new Promise<Awaited<T>>((resolve) => resolve(fn() as Awaited<T>)).finally(() => this.#slots.complete(call, grant, startedAt));
    // Past timeoutMs the call may still reach the vendor: its slot counts to its bound unless it completes later.
    return withTimeout(running, call.timeoutMs, () => new CallTimeoutError(call.key, call.timeoutMs));
  }
}
