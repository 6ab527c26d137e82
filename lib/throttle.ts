import { EventEmitter, setMaxListeners } from 'node:events';
import PQueue from 'p-queue';
import { throttleAxios } from './adapters/axios.js';
import type { AxiosInstanceType } from './adapters/axios-types.js';
import { throttleFetch } from './adapters/fetch.js';
import type { AxiosThrottleHandle, AxiosThrottleOptions, FetchLike, FetchThrottleOptions, Throttled, WrapOptions } from './adapters/options.js';
import { throttleWrap } from './adapters/wrap.js';
import { QueueFullError, RateLimitedError, StoreUnavailableError, ThrottleClosedError, ThrottleConfigError, ThrottleError } from './errors.js';
import { PAUSED } from './decision.js';
import { HoldEstimator } from './hold.js';
import { checkNamespace, encodeKey, normalizeKey, type KeyInput } from './keys.js';
import type { KeyUsage, RulesOption, ScheduleOptions, StoreErrorPolicy, ThrottleEvents, ThrottleMode, ThrottleOptions, ThrottleStats } from './options.js';
import { describe, longestWindow, MAX_WINDOW_MS, parseRules, type Rule, type RuleInput } from './rules.js';
import { MAX_TIMER_MS, sleep } from './sleep.js';
import { MemoryStore } from './stores/memory-store.js';
import type { ReserveRequest, ReserveResult, Settlement, Store } from './store.js';

/** One call, validated, with everything a decision needs. */
interface Call {
  readonly key: string;
  readonly encoded: string;
  readonly rules: readonly Rule[];
  readonly retainMs: number;
  readonly cost: number;
  readonly maxDelayMs: number;
  readonly priority: number;
  readonly signal: AbortSignal | undefined;
}

/** A booked slot. Local times are `performance.now()` readings. */
interface Grant {
  readonly members: readonly string[];
  /** Start, store clock. */
  readonly startAt: number;
  readonly holdMs: number;
  /** Local time the slot starts at, read up to 1 ms early (for converting completion times). */
  readonly due: number;
  /** Local time the slot starts at (for measuring how late the call starts). */
  readonly dueExact: number;
  /** The start was set by an estimate: confirm the slot when it is due. */
  readonly tentative: boolean;
  /**
   * How late the call may start and still be counted as in flight by every decision: `maxHoldMs` −
   * longest response seen (a call without a completion counts until `maxHoldMs` after its estimate).
   */
  readonly lagBudgetMs: number;
  /** Where the slot was booked: the throttle's store, or the local fallback (`onStoreError: 'local'`). */
  readonly store: Store;
  /** The rules the slot was booked under (the local fallback's share of them, for a local slot). */
  readonly rules: readonly Rule[];
  /** A slot decided locally: its record, to be put into the store once it answers. */
  readonly localSlot: LocalSlot | undefined;
}

/** One answer of a store, and which store gave it. */
interface Decision {
  readonly result: ReserveResult;
  readonly store: Store;
  readonly rules: readonly Rule[];
  readonly localSlot: LocalSlot | undefined;
}

/** Slots of an earlier try, given back with the next decision when it goes to the same store. */
interface GiveBack {
  readonly store: Store;
  readonly settle: readonly Settlement[];
}

/** A slot decided by the local fallback while the store was down, to be put into the store once it answers. */
interface LocalSlot {
  readonly cost: number;
  /** The slot's start plus the hold it was booked with, on the local store's clock: its estimate. */
  readonly estimateAt: number;
  /** Completion, on the local store's clock; undefined until the call completes. */
  releaseAt: number | undefined;
}

/** Keys remembered as refused (see `#blocked`) at most; past it the oldest are forgotten. */
const MAX_BLOCKED_KEYS = 10_000;

/** After a store failure with `onStoreError: 'local'`, how long calls go straight to the local fallback. */
const STORE_RETRY_MS = 1_000;

/** Times a call that woke too late books again before it starts anyway (and says so in a `debug` event). */
const MAX_REBOOKS = 3;

const MODES: readonly ThrottleMode[] = ['delay', 'queue', 'throw'];
const NO_SETTLEMENTS: readonly Settlement[] = [];
/** `#decide` without a failure of the first try to handle. */
const NOT_FAILED = Symbol('not failed');
const POLICIES: readonly StoreErrorPolicy[] = ['fail', 'wait', 'local'];

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
  readonly mode: ThrottleMode;
  readonly store: Store;
  readonly #ownsStore: boolean;
  readonly #rules: readonly Rule[] | ((key: string) => Promise<readonly Rule[]>);
  readonly #maxDelayMs: number;
  readonly #retainMs: number;
  readonly #concurrency: number;
  readonly #maxQueued: number;
  readonly #hold: HoldEstimator;
  readonly #maxHoldMs: number;
  readonly #closing = new AbortController();
  readonly #queues = new Map<string, PQueue>();
  readonly #waiting = new Map<string, number>();
  readonly #background = new Set<Promise<void>>();
  /** Deferred heads per key, woken when this process writes a completion for the key. */
  readonly #settledWaiters = new Map<string, Set<() => void>>();
  readonly #onStoreError: StoreErrorPolicy;
  readonly #localShare: number;
  /** `onStoreError: 'local'`: the in-process fallback, created on the first failure. */
  #local: MemoryStore | undefined;
  /** `performance.now()` before which calls skip the failing store and decide locally. */
  #storeDownUntil = 0;
  /** Slots decided locally per key, not yet put into the store. */
  readonly #localSlots = new Map<string, { readonly retainMs: number; readonly slots: LocalSlot[] }>();
  #putBack: Promise<void> | undefined;
  /**
   * Keys the store refused lately: no slot for a call of `cost` or more before `until`
   * (`performance.now()`). A call that cannot wait that long is refused here, without a round trip;
   * a completion or release this process writes for the key forgets it.
   */
  readonly #blocked = new Map<string, { readonly until: number; readonly cost: number; readonly reason: Rule | 'paused' | 'booked' }>();
  #putBackTimer: NodeJS.Timeout | undefined;
  /**
   * Completions and releases the store failed to take, per key: sent again with the key's next
   * decision, and every {@link STORE_RETRY_MS} until taken or no longer counting. A lost late
   * completion would let the store stop counting a call before it reached the vendor.
   */
  readonly #unsent = new Map<string, { readonly retainMs: number; readonly since: number; readonly settle: Settlement[] }>();
  #unsentTimer: NodeJS.Timeout | undefined;
  #closed: Promise<void> | undefined;
  /** A call took `maxHoldMs` or longer, and a `debug` event said so (once). */
  #warnedSlow = false;

  constructor(options: ThrottleOptions) {
    super();
    if (options === null || typeof options !== 'object') {
      throw new ThrottleConfigError(`Expected Throttle options to be an object, got ${describe(options)}`);
    }
    this.name = checkNamespace('name', options.name ?? 'default');
    this.mode = options.mode ?? 'delay';
    if (!MODES.includes(this.mode)) {
      throw new ThrottleConfigError(`Expected mode to be 'delay', 'queue' or 'throw', got ${describe(options.mode)}`);
    }
    const bucketAbove = checkCount('bucketAbove', options.bucketAbove ?? 1_000, 0);
    const buckets = checkWhole('buckets', options.buckets ?? 50, 2);
    if (buckets > 1_000) throw new ThrottleConfigError(`Expected buckets to be at most 1000, got ${buckets}`);
    this.#rules = compileRules(options.rules, (rules) => bucketRules(rules, bucketAbove, buckets));
    const maxDelayMs = checkDelay('maxDelayMs', options.maxDelayMs ?? Infinity);
    this.#maxDelayMs = this.mode === 'throw' ? 0 : maxDelayMs;
    const safetyMarginMs = checkWhole('safetyMarginMs', options.safetyMarginMs ?? 100, 0, MAX_WINDOW_MS);
    const maxHoldMs = checkWhole('maxHoldMs', options.maxHoldMs ?? 10_000, 0, MAX_WINDOW_MS);
    this.#maxHoldMs = Math.max(maxHoldMs, safetyMarginMs);
    const adaptive = options.adaptiveMargin ?? true;
    if (typeof adaptive !== 'boolean') throw new ThrottleConfigError(`Expected adaptiveMargin to be a boolean, got ${describe(adaptive)}`);
    this.#hold = new HoldEstimator(safetyMarginMs, maxHoldMs, adaptive);
    this.#retainMs = checkWhole('retainMs', options.retainMs ?? 0, 0, MAX_WINDOW_MS);
    this.#concurrency = checkCount('concurrency', options.concurrency ?? 4);
    this.#maxQueued = checkCount('maxQueued', options.maxQueued ?? Infinity, 0);
    this.#onStoreError = options.onStoreError ?? 'fail';
    if (!POLICIES.includes(this.#onStoreError)) {
      throw new ThrottleConfigError(`Expected onStoreError to be 'fail', 'wait' or 'local', got ${describe(options.onStoreError)}`);
    }
    const share = options.localShare ?? 1 / 4;
    if (typeof share !== 'number' || !(share > 0 && share <= 1)) {
      throw new ThrottleConfigError(`Expected localShare to be a number in (0, 1], got ${describe(share)}`);
    }
    this.#localShare = share;
    if (options.store !== undefined && !isStore(options.store)) {
      throw new ThrottleConfigError(`Expected store to be a MemoryStore, a RedisStore or another Store, got ${describe(options.store)}`);
    }
    this.#ownsStore = options.store === undefined;
    this.store = options.store ?? new MemoryStore();
    // Every waiting call listens to this signal; their number is bounded by the work, not a leak.
    setMaxListeners(0, this.#closing.signal);
  }

  /** The in-flight estimate new slots are booked with, in ms (see `safetyMarginMs`). */
  get holdMs(): number {
    return this.#hold.holdMs;
  }

  /**
   * What this process holds locally: keys with a queue, and calls waiting (queued, or sleeping for
   * their slot). All drop to 0 when idle.
   */
  get stats(): ThrottleStats {
    let queued = 0;
    for (const queue of this.#queues.values()) queued += queue.size;
    let sleeping = 0;
    for (const count of this.#waiting.values()) sleeping += count;
    return { queues: this.#queues.size, queued, sleeping };
  }

  /**
   * Runs `fn` once a slot for `key` is free under every rule, and returns what `fn` returns (or
   * rejects with the very error it threw). The slot is spent when `fn` starts, whatever `fn` then does.
   *
   * Rejects, without calling `fn` and with nothing booked, with `RateLimitedError` (slot further than
   * `maxDelayMs`), `QueueFullError`, `StoreUnavailableError`, `ThrottleClosedError`, `signal.reason`,
   * `TypeError` (bad key or fn) or `ThrottleConfigError` (bad options, cost above a limit).
   */
  async schedule<T>(key: KeyInput, fn: () => T | PromiseLike<T>, options: ScheduleOptions = {}): Promise<Awaited<T>> {
    if (typeof fn !== 'function') throw new TypeError(`Expected fn to be a function, got ${describe(fn)}`);
    const call = await this.#prepare(key, options);
    const askedAt = performance.now();
    let grant: Grant;
    try {
      grant = this.mode === 'queue' ? await this.#enqueue(call) : await this.#acquire(call);
    } catch (error) {
      if (error instanceof RateLimitedError || error instanceof QueueFullError) {
        this.notify('refused', { key: call.key, cost: call.cost, error });
      }
      throw error;
    }
    this.notify('granted', { key: call.key, cost: call.cost, waitedMs: performance.now() - askedAt });
    return this.#run(call, grant, fn);
  }

  /** Usage of `key` under its rules, read from the store without booking anything. */
  async inspect(key: KeyInput): Promise<KeyUsage> {
    const call = await this.#prepare(key, {});
    let usage;
    try {
      usage = await this.store.inspect(this.name, call.encoded, call.rules);
    } catch (error) {
      throw storeError(error);
    }
    const waitingHere = (this.#waiting.get(call.encoded) ?? 0) + (this.#queues.get(call.encoded)?.size ?? 0);
    return { key: call.key, rules: usage.rules, nextFreeInMs: usage.nextFreeInMs, pausedForMs: usage.pausedForMs, waitingHere };
  }

  /**
   * Sends every request of an axios instance (one from `axios.create()`, or `axios` itself) through
   * this throttle, keyed by `options.key(config)`; per request, `config.throttle` overrides key, cost,
   * `maxDelayMs`, priority and retries. The slot is taken in the adapter, after every request
   * interceptor. A vendor's 429 pauses the key in the store and is retried through the throttle.
   * `eject()` on the result restores the instance. See docs/adapters.md.
   */
  axios<I extends AxiosInstanceType>(instance: I, options: AxiosThrottleOptions): AxiosThrottleHandle<I> {
    return throttleAxios(this, instance, options);
  }

  /**
   * A function with the signature of `fetch` (the global one, or `options.fetch`, such as undici's)
   * that sends every request through this throttle, keyed by `options.key(input, init)`, and listens
   * to the vendor's rate-limit answers like `axios()`. See docs/adapters.md.
   */
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
  async pause(key: KeyInput, ms: number, source = 'pause()'): Promise<void> {
    const call = await this.#prepare(key, {});
    checkDelay('pause ms', ms);
    if (ms > MAX_WINDOW_MS) throw new ThrottleConfigError(`Expected pause ms to be at most ${MAX_WINDOW_MS} (366 days), got ${ms}`);
    try {
      await this.store.pause(this.name, call.encoded, ms, call.retainMs);
    } catch (error) {
      throw storeError(error);
    }
    this.notify('paused', { key: call.key, ms, source });
  }

  /**
   * Emits an event, never letting a listener's error reach the call that caused it.
   * @internal for the adapters (lib/adapters/) and the throttle itself.
   */
  notify<E extends keyof ThrottleEvents>(event: E, ...args: ThrottleEvents[E]): void {
    if (this.listenerCount(event) === 0) return;
    try {
      (this.emit as (event: E, ...args: ThrottleEvents[E]) => boolean)(event, ...args);
    } catch {
      // A listener's failure is the listener's business.
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
    this.#closing.abort(new ThrottleClosedError());
    for (const queue of this.#queues.values()) queue.clear();
    this.#queues.clear();
    // The calls just rejected give their slots back once their rejections have run (microtasks,
    // all run before the next tick): wait for those writes too, not only the ones under way.
    await new Promise((resolve) => process.nextTick(resolve));
    while (this.#background.size > 0) await Promise.allSettled([...this.#background]);
    clearTimeout(this.#putBackTimer);
    // Slots decided locally while the store was down: one last try to put them into the store.
    if (this.#localSlots.size > 0) await this.#putBackLocal().catch(() => undefined);
    clearTimeout(this.#putBackTimer);
    // Completions and releases the store failed to take: one last try.
    clearTimeout(this.#unsentTimer);
    await this.#sendUnsent();
    clearTimeout(this.#unsentTimer);
    if (this.#ownsStore) await this.store.close();
    await this.#local?.close();
  }

  async #prepare(key: KeyInput, options: ScheduleOptions): Promise<Call> {
    const userKey = normalizeKey(key);
    if (options === null || typeof options !== 'object') {
      throw new TypeError(`Expected schedule options to be an object, got ${describe(options)}`);
    }
    const cost = checkCount('cost', options.cost ?? 1);
    const requested = options.maxDelayMs === undefined ? this.#maxDelayMs : checkDelay('maxDelayMs', options.maxDelayMs);
    const maxDelayMs = this.mode === 'throw' ? 0 : requested;
    const priority = options.priority ?? 0;
    if (typeof priority !== 'number' || !Number.isFinite(priority)) {
      throw new ThrottleConfigError(`Expected priority to be a finite number, got ${describe(priority)}`);
    }
    const signal = options.signal;
    if (signal !== undefined && !(signal instanceof AbortSignal)) {
      throw new TypeError(`Expected signal to be an AbortSignal, got ${describe(signal)}`);
    }
    const rules = typeof this.#rules === 'function' ? await this.#rules(userKey) : this.#rules;
    const smallest = Math.min(...rules.map((rule) => rule.limit));
    if (cost > smallest) {
      throw new ThrottleConfigError(`Expected cost to be at most ${smallest} (the smallest limit of key "${userKey}"), got ${cost}`);
    }
    const retainMs = Math.max(longestWindow(rules), this.#retainMs);
    return { key: userKey, encoded: encodeKey(userKey), rules, retainMs, cost, maxDelayMs, priority, signal };
  }

  /**
   * Books a slot for `call` and sleeps until it starts. Two checks when it wakes, each of which
   * gives the slot back and books again in the same round trip (docs/design.md §4):
   * - a slot set by an estimate (another call's completion was not known) is confirmed with what
   *   is known now: a call still on its way past its estimate keeps counting;
   * - a call that wakes so late (a stalled event loop) that it might still be on its way once
   *   `maxHoldMs` has passed after its estimate does not start: past that, decisions stop counting it.
   *   At most {@link MAX_REBOOKS} times, then it starts and says so in a `debug` event.
   * A call that starts after its estimate but within that budget is safe: every booking that took it
   * to be over by then is tentative and confirmed, counting it as in flight.
   */
  async #acquire(call: Call): Promise<Grant> {
    let giveBack: GiveBack | undefined;
    for (let late = 0; ; ) {
      const grant = await this.#book(call, giveBack);
      giveBack = { store: grant.store, settle: grant.members.map((member) => ({ member, releaseAt: null })) };
      if (grant.tentative && !(await this.#confirm(call, grant))) {
        this.notify('debug', { message: 'the slot could not be confirmed (a call it was booked behind is still on its way, or the store did not answer): booking again', key: call.key });
        continue;
      }
      const aborted = [call.signal, this.#closing.signal].find((signal) => signal?.aborted);
      if (aborted) {
        this.#release(call, grant);
        throw aborted.reason;
      }
      const lateBy = performance.now() - grant.dueExact;
      if (lateBy <= grant.lagBudgetMs) return grant;
      const message = `woke ${Math.round(lateBy)} ms after its slot, beyond what maxHoldMs (${this.#maxHoldMs} ms) covers`;
      if (++late > MAX_REBOOKS) {
        this.notify('debug', { message: `${message}: starting anyway after ${MAX_REBOOKS} new bookings`, key: call.key });
        return grant;
      }
      this.notify('debug', { message: `${message}: booking again`, key: call.key });
    }
  }

  /**
   * Checks a tentative slot with the store. When the store cannot be asked, `onStoreError` applies
   * as to a decision: `'fail'` gives the slot back and rejects; `'wait'` and `'local'` book again
   * (the slot rides back with that decision), which retries or decides locally.
   */
  async #confirm(call: Call, grant: Grant): Promise<boolean> {
    try {
      return await grant.store.confirm(this.name, call.encoded, grant.startAt, grant.members, grant.rules, this.#maxHoldMs);
    } catch (error) {
      const failure = storeError(error);
      if (failure instanceof StoreUnavailableError) this.notify('storeError', { key: call.key, error: failure, policy: this.#onStoreError });
      if (!(failure instanceof StoreUnavailableError) || this.#onStoreError === 'fail') {
        this.#release(call, grant);
        throw failure;
      }
      return false;
    }
  }

  /**
   * Asks the store for a decision, applying `onStoreError` when it fails: reject ('fail'), ask again
   * with backoff within the call's `maxDelayMs` ('wait'), or decide locally with a share of each limit
   * ('local'). Slots decided locally are put into the store before it decides anything new.
   */
  async #decide(
    call: Call,
    request: ReserveRequest,
    giveBack: GiveBack | undefined,
    signals: ReadonlyArray<AbortSignal | undefined>,
    firstFailure: unknown = NOT_FAILED,
  ): Promise<Decision> {
    let settle = giveBack?.settle ?? NO_SETTLEMENTS;
    if (giveBack && giveBack.store !== this.store) {
      this.#settleInBackground(giveBack.store, call.encoded, settle, call.retainMs);
      settle = [];
    }
    const firstAskedAt = performance.now();
    for (let attempt = 0; ; attempt++) {
      if (this.#onStoreError === 'local' && performance.now() < this.#storeDownUntil) {
        if (settle.length > 0) this.#settleInBackground(this.store, call.encoded, settle, call.retainMs);
        return this.#decideLocally(call, request);
      }
      const unsent = this.#unsent.get(call.encoded);
      if (unsent) {
        // Completions and releases the store failed to take before ride along (again).
        this.#unsent.delete(call.encoded);
        settle = [...settle, ...unsent.settle];
      }
      try {
        if (attempt === 0 && firstFailure !== NOT_FAILED) throw firstFailure;
        if (this.#localSlots.size > 0) await this.#putBackLocal();
        const result = await this.store.reserve(settle.length === 0 ? request : { ...request, settle });
        this.#storeDownUntil = 0;
        return { result, store: this.store, rules: call.rules, localSlot: undefined };
      } catch (error) {
        if (settle.length > 0) this.#settleInBackground(this.store, call.encoded, settle, call.retainMs);
        settle = [];
        const failure = storeError(error);
        if (!(failure instanceof StoreUnavailableError)) throw failure;
        this.notify('storeError', { key: call.key, error: failure, policy: this.#onStoreError });
        if (this.#onStoreError === 'fail') throw failure;
        if (this.#onStoreError === 'local') {
          this.#storeDownUntil = performance.now() + STORE_RETRY_MS;
          continue;
        }
        const backoffMs = Math.min(1_000, 25 * 2 ** Math.min(attempt, 6));
        if (performance.now() + backoffMs - firstAskedAt > call.maxDelayMs) throw failure;
        await sleep(backoffMs, signals);
      }
    }
  }

  /** `onStoreError: 'local'`: decides in this process with `localShare` of each limit. */
  async #decideLocally(call: Call, request: ReserveRequest): Promise<Decision> {
    const local = (this.#local ??= new MemoryStore({ now: localClock }));
    const rules = call.rules.map(({ limit, windowMs }) => ({ limit: Math.max(1, Math.floor(limit * this.#localShare)), windowMs }));
    const smallest = Math.min(...rules.map((rule) => rule.limit));
    if (call.cost > smallest) {
      throw new StoreUnavailableError(`The store is down, and cost ${call.cost} is above this process's share of the limit (${smallest})`);
    }
    if (this.store.recentCalls !== undefined && (await local.inspect(this.name, call.encoded, rules)).rules.every((rule) => rule.used === 0)) {
      // Taking the key over: this process's calls made through the store just before it failed count too.
      const recent = this.store.recentCalls(this.name, call.encoded);
      if (recent.length > 0) await local.restore(this.name, call.encoded, recent, call.retainMs, this.#maxHoldMs);
    }
    const result = await local.reserve({ ...request, rules, settle: [] });
    if (!result.granted) return { result, store: local, rules, localSlot: undefined };
    const localSlot: LocalSlot = { cost: call.cost, estimateAt: result.startAt + request.holdMs, releaseAt: undefined };
    let entry = this.#localSlots.get(call.encoded);
    if (!entry) this.#localSlots.set(call.encoded, (entry = { retainMs: call.retainMs, slots: [] }));
    entry.slots.push(localSlot);
    this.#schedulePutBack();
    return { result, store: local, rules, localSlot };
  }

  /**
   * Puts the slots decided locally into the store: one that completed counts until its completion;
   * one without a completion (still in flight, or booked ahead and not started yet) as a call in
   * flight would, until `maxHoldMs` after its estimate (or after now, if that has passed). A slot
   * decided while a put-back runs stays for the next one; a failure leaves the rest for the next try.
   */
  #putBackLocal(): Promise<void> {
    this.#putBack ??= (async () => {
      for (const [encoded, entry] of this.#localSlots) {
        const now = localClock();
        const handled = new Set(entry.slots);
        const live = entry.slots.filter((slot) => slot.releaseAt === undefined || slot.releaseAt + entry.retainMs > now);
        if (live.length > 0) {
          const releaseAt = (slot: LocalSlot) => slot.releaseAt ?? Math.max(slot.estimateAt, now) + this.#maxHoldMs;
          const restored = live.map((slot) => ({ releaseInMs: Math.ceil(releaseAt(slot) - now), cost: slot.cost }));
          await this.store.restore(this.name, encoded, restored, entry.retainMs, this.#maxHoldMs);
        }
        // Slots decided locally while the restore was on its way stay for the next put-back.
        const kept = entry.slots.filter((slot) => !handled.has(slot));
        entry.slots.splice(0, entry.slots.length, ...kept);
        if (kept.length === 0 && this.#localSlots.get(encoded) === entry) this.#localSlots.delete(encoded);
      }
    })().finally(() => {
      this.#putBack = undefined;
    });
    return this.#putBack;
  }

  /** Forgets local slots that no longer count anywhere, so a long outage does not grow memory. */
  #pruneLocal(): void {
    const now = localClock();
    for (const [encoded, { retainMs, slots }] of this.#localSlots) {
      for (let i = slots.length - 1; i >= 0; i--) {
        const releaseAt = slots[i]!.releaseAt;
        if (releaseAt !== undefined && releaseAt + retainMs <= now) slots.splice(i, 1);
      }
      if (slots.length === 0) this.#localSlots.delete(encoded);
    }
  }

  /** While slots decided locally wait to be put into the store, tries every {@link STORE_RETRY_MS}. */
  #schedulePutBack(): void {
    if (this.#putBackTimer !== undefined || this.#closing.signal.aborted) return;
    this.#putBackTimer = setTimeout(() => {
      this.#putBackTimer = undefined;
      this.#pruneLocal();
      if (this.#localSlots.size === 0) return;
      this.#putBackLocal().then(
        () => {
          this.#storeDownUntil = 0;
        },
        () => this.#schedulePutBack(),
      );
    }, STORE_RETRY_MS);
    this.#putBackTimer.unref();
  }

  /** One decision and the sleep until its slot. `giveBack` (slots of an earlier try) rides along. */
  async #book(call: Call, giveBack: GiveBack | undefined): Promise<Grant> {
    const signals = [call.signal, this.#closing.signal];
    const aborted = signals.find((signal) => signal?.aborted);
    if (aborted) {
      if (giveBack) this.#settleInBackground(giveBack.store, call.encoded, giveBack.settle, call.retainMs);
      throw aborted.reason;
    }
    const blocked = this.#blocked.get(call.encoded);
    if (blocked) {
      const leftMs = Math.ceil(blocked.until - performance.now());
      if (leftMs <= 0) this.#blocked.delete(call.encoded);
      else if (call.cost >= blocked.cost && leftMs > call.maxDelayMs) {
        if (giveBack) this.#settleInBackground(giveBack.store, call.encoded, giveBack.settle, call.retainMs);
        throw new RateLimitedError(call.key, blocked.reason, leftMs);
      }
    }
    let pending = giveBack;
    // `queue` mode books on known completions only (`defer`). Its own slots carry the same estimate
    // as delay mode's: a longer one would make a delay-mode process sharing the key book its calls
    // behind it, seconds late (an overdue call is counted from now anyway, see docs/design.md §4).
    const deferring = this.mode === 'queue';
    const holdMs = this.#hold.holdMs;
    // Once a response took maxHoldMs or longer (set it above the vendor's request timeout), no late
    // start is covered any more, and booking again would not help: every call would book three
    // times before starting anyway. Late starts are then let through up to maxHoldMs.
    const response = this.#hold.responseMs;
    const lagBudgetMs = response < this.#maxHoldMs ? this.#maxHoldMs - response : this.#maxHoldMs;
    const request: ReserveRequest = {
      settle: NO_SETTLEMENTS,
      namespace: this.name,
      key: call.encoded,
      rules: call.rules,
      cost: call.cost,
      maxDelayMs: call.maxDelayMs,
      holdMs,
      retainMs: call.retainMs,
      defer: deferring,
      maxHoldMs: this.#maxHoldMs,
    };
    let sentAt: number;
    let decision: Decision;
    let result: ReserveResult;
    for (;;) {
      sentAt = performance.now();
      if (pending === undefined && this.#localSlots.size === 0 && this.#storeDownUntil === 0 && !this.#unsent.has(call.encoded)) {
        // The common case, with one await less: nothing to give back or send again, nothing decided locally.
        try {
          decision = { result: await this.store.reserve(request), store: this.store, rules: call.rules, localSlot: undefined };
        } catch (error) {
          decision = await this.#decide(call, request, undefined, signals, error);
        }
      } else {
        decision = await this.#decide(call, request, pending, signals);
      }
      pending = undefined;
      result = decision.result;
      if (!result.deferred) break;
      // The slot waits for a call still in flight (or booked ahead): ask again once its completion
      // is likely known (the store says when: at its estimate), or at once when this process settles
      // a call of the key. Never later than this throttle's hold before the slot the estimate gives:
      // the call started at least a hold before its estimate, so the slot its completion frees starts
      // no earlier than that, and learning of the completion by then costs no quota.
      const retry = result.ruleIndex >= 0 ? Math.max(5, Math.min(result.retryMs, result.waitMs - this.#hold.holdMs)) : result.retryMs;
      await this.#sleepUnlessSettled(call.encoded, Math.min(retry, result.waitMs), signals);
    }
    if (!result.granted) {
      const reason = result.ruleIndex === PAUSED ? 'paused' : result.ruleIndex >= 0 ? call.rules[result.ruleIndex]! : 'booked';
      if (decision.store === this.store) this.#block(call, sentAt + result.waitMs, reason);
      throw new RateLimitedError(call.key, reason, result.waitMs);
    }
    // Where the slot starts on the local clock. `due` is read early so that completion times
    // converted to the store clock can only come out late: the script ran after `sentAt`, and a
    // wait is rounded up by less than 1 ms (a slot at once starts at the decision's own clock
    // reading, rounded up: no correction).
    const dueExact = sentAt + result.waitMs;
    const due = result.waitMs > 0 ? dueExact - 1 : dueExact;
    const grant: Grant = {
      members: result.members,
      startAt: result.startAt,
      holdMs,
      due,
      dueExact,
      tentative: result.tentative,
      lagBudgetMs,
      store: decision.store,
      rules: decision.rules,
      localSlot: decision.localSlot,
    };
    const abortedNow = signals.find((signal) => signal?.aborted);
    if (abortedNow) {
      this.#release(call, grant);
      throw abortedNow.reason;
    }
    if (result.waitMs > 0) {
      const reason = result.ruleIndex === PAUSED ? 'paused' : result.ruleIndex >= 0 ? call.rules[result.ruleIndex]! : 'booked';
      this.notify('delayed', { key: call.key, cost: call.cost, delayMs: result.waitMs, reason });
      this.#waiting.set(call.encoded, (this.#waiting.get(call.encoded) ?? 0) + 1);
      try {
        await sleep(result.waitMs, signals);
      } catch (reason) {
        this.#release(call, grant);
        throw reason;
      } finally {
        const left = this.#waiting.get(call.encoded)! - 1;
        if (left === 0) this.#waiting.delete(call.encoded);
        else this.#waiting.set(call.encoded, left);
      }
    }
    return grant;
  }

  /** Remembers that calls of `call.cost` or more for the key have no slot before `until`. */
  #block(call: Call, until: number, reason: Rule | 'paused' | 'booked'): void {
    const known = this.#blocked.get(call.encoded);
    if (known && known.cost <= call.cost && known.until >= until) return;
    this.#blocked.delete(call.encoded);
    if (this.#blocked.size >= MAX_BLOCKED_KEYS) {
      const now = performance.now();
      for (const [key, entry] of this.#blocked) if (entry.until <= now) this.#blocked.delete(key);
      if (this.#blocked.size >= MAX_BLOCKED_KEYS) this.#blocked.delete(this.#blocked.keys().next().value!);
    }
    this.#blocked.set(call.encoded, { until, cost: call.cost, reason });
  }

  /**
   * Sleeps like `sleep`, but wakes early when this process writes a completion for the key: a
   * deferred head then asks again at once instead of at its next turn.
   */
  async #sleepUnlessSettled(key: string, ms: number, signals: ReadonlyArray<AbortSignal | undefined>): Promise<void> {
    const kick = new AbortController();
    let waiters = this.#settledWaiters.get(key);
    if (!waiters) this.#settledWaiters.set(key, (waiters = new Set()));
    const wake = () => kick.abort();
    waiters.add(wake);
    try {
      await sleep(ms, [...signals, kick.signal]);
    } catch (reason) {
      if (!kick.signal.aborted || signals.some((signal) => signal?.aborted)) throw reason;
    } finally {
      waiters.delete(wake);
      if (waiters.size === 0) this.#settledWaiters.delete(key);
    }
  }

  /** `queue` mode: waits in the key's local queue; the head books its slot and sleeps until it. */
  async #enqueue(call: Call): Promise<Grant> {
    this.#closing.signal.throwIfAborted();
    let queue = this.#queues.get(call.encoded);
    if (!queue) {
      const created = new PQueue({ concurrency: this.#concurrency });
      created.on('idle', () => {
        if (this.#queues.get(call.encoded) === created) this.#queues.delete(call.encoded);
      });
      this.#queues.set(call.encoded, created);
      queue = created;
    }
    // A call that can start at once becomes a head; only calls that would wait behind the heads count.
    if (queue.pending >= this.#concurrency && queue.size >= this.#maxQueued) throw new QueueFullError(call.key, this.#maxQueued);
    if (!(call.maxDelayMs <= MAX_TIMER_MS)) {
      const signal = call.signal ? AbortSignal.any([call.signal, this.#closing.signal]) : this.#closing.signal;
      return queue.add(() => this.#acquire(call), { priority: call.priority, signal });
    }
    // maxDelayMs bounds the whole wait, the time queued included: a call still queued when it runs
    // out leaves the queue, and a head books its slot with what is left.
    const deadline = performance.now() + call.maxDelayMs;
    const expiry = new AbortController();
    const timer = setTimeout(() => expiry.abort(), call.maxDelayMs);
    const signal = AbortSignal.any([expiry.signal, this.#closing.signal, ...(call.signal ? [call.signal] : [])]);
    try {
      return await queue.add(
        () => {
          clearTimeout(timer);
          return this.#acquire({ ...call, maxDelayMs: Math.max(0, deadline - performance.now()) });
        },
        { priority: call.priority, signal },
      );
    } catch (error) {
      if (!expiry.signal.aborted || call.signal?.aborted || this.#closing.signal.aborted) throw error;
      throw new RateLimitedError(call.key, 'booked', await this.#nextFreeInMs(call));
    } finally {
      clearTimeout(timer);
    }
  }

  /** When the key has room for a call again, by the store (for a call that ran out of time queued). */
  async #nextFreeInMs(call: Call): Promise<number> {
    try {
      const usage = await this.store.inspect(this.name, call.encoded, call.rules);
      return Math.max(1, Math.ceil(usage.nextFreeInMs));
    } catch {
      return Math.min(...call.rules.map((rule) => rule.windowMs));
    }
  }

  async #run<T>(call: Call, grant: Grant, fn: () => T | PromiseLike<T>): Promise<Awaited<T>> {
    const startedAt = performance.now();
    try {
      return await fn();
    } finally {
      this.#complete(call, grant, startedAt);
    }
  }

  /** Records the call's completion: its slot counts until `windowMs` after it (see docs/design.md). */
  #complete(call: Call, grant: Grant, startedAt: number): void {
    const completedAt = performance.now();
    this.#hold.observe(completedAt - startedAt);
    if (completedAt - startedAt >= this.#maxHoldMs && !this.#warnedSlow) {
      this.#warnedSlow = true;
      const message = `a call took ${Math.round(completedAt - startedAt)} ms, not less than maxHoldMs (${this.#maxHoldMs} ms): calls without a completion stop counting maxHoldMs after their estimate, so set maxHoldMs above the vendor's request timeout`;
      this.notify('debug', { message, key: call.key });
    }
    const releaseAt = Math.ceil(grant.startAt + (completedAt - grant.due));
    if (grant.localSlot) grant.localSlot.releaseAt = releaseAt;
    // Written at once, whether earlier than booked (the room frees sooner) or later (the slot must
    // count longer): a slot past its estimate and not settled is taken for a call still on its way.
    this.#settleInBackground(grant.store, call.encoded, grant.members.map((member) => ({ member, releaseAt })), call.retainMs);
  }

  /** Gives back a slot whose call will never start. */
  #release(call: Call, grant: Grant): void {
    if (grant.localSlot) {
      const slots = this.#localSlots.get(call.encoded)?.slots;
      const index = slots?.indexOf(grant.localSlot) ?? -1;
      if (index >= 0) slots!.splice(index, 1);
    }
    this.#settleInBackground(grant.store, call.encoded, grant.members.map((member) => ({ member, releaseAt: null })), call.retainMs);
  }

  #settleInBackground(store: Store, encoded: string, settle: readonly Settlement[], retainMs: number): void {
    const done = store
      .settle(this.name, encoded, settle, retainMs)
      .then(
        () => this.#settled(encoded),
        (error: unknown) => {
          if (store !== this.store || this.#closing.signal.aborted) {
            this.notify('debug', { message: 'background settle failed; the slot stays counted as booked', error });
            return;
          }
          this.notify('debug', { message: "background settle failed; sent again with the key's next decision, or within a second", error });
          this.#keepUnsent(encoded, settle, retainMs, performance.now());
        },
      )
      .finally(() => this.#background.delete(done));
    this.#background.add(done);
  }

  /** A completion or release of the key reached the store: room may have freed up, ask it again rather than trust what it said before. */
  #settled(encoded: string): void {
    this.#blocked.delete(encoded);
    for (const wake of this.#settledWaiters.get(encoded) ?? []) wake();
  }

  #keepUnsent(encoded: string, settle: readonly Settlement[], retainMs: number, since: number): void {
    let entry = this.#unsent.get(encoded);
    if (!entry) {
      if (this.#unsent.size >= MAX_BLOCKED_KEYS) this.#unsent.delete(this.#unsent.keys().next().value!);
      this.#unsent.set(encoded, (entry = { retainMs, since, settle: [] }));
    }
    entry.settle.push(...settle);
    if (this.#unsentTimer === undefined && !this.#closing.signal.aborted) {
      this.#unsentTimer = setTimeout(() => {
        this.#unsentTimer = undefined;
        void this.#sendUnsent();
      }, STORE_RETRY_MS);
      this.#unsentTimer.unref();
    }
  }

  /** Sends the completions and releases kept in {@link #unsent}; those that still fail are kept (until they no longer count). */
  async #sendUnsent(): Promise<void> {
    const entries = [...this.#unsent];
    this.#unsent.clear();
    await Promise.all(
      entries.map(async ([encoded, { retainMs, since, settle }]) => {
        if (performance.now() - since > retainMs + this.#maxHoldMs) return;
        try {
          await this.store.settle(this.name, encoded, settle, retainMs);
          this.#settled(encoded);
        } catch {
          if (!this.#closing.signal.aborted) this.#keepUnsent(encoded, settle, retainMs, since);
        }
      }),
    );
  }
}

/** The local fallback's clock: monotonic, in ms. */
function localClock(): number {
  return performance.timeOrigin + performance.now();
}

function compileRules(option: RulesOption, finish: (rules: readonly Rule[]) => readonly Rule[]): readonly Rule[] | ((key: string) => Promise<readonly Rule[]>) {
  if (typeof option !== 'function') {
    if (option === undefined) throw new ThrottleConfigError("Expected rules, e.g. ['30/min'], got undefined");
    return finish(parseRules(option as RuleInput | readonly RuleInput[]));
  }
  const cache = new WeakMap<object, readonly Rule[]>();
  return async (key) => {
    const input = await option(key);
    if (input !== null && typeof input === 'object') {
      const cached = cache.get(input);
      if (cached) return cached;
      const rules = finish(parseRules(input as RuleInput | readonly RuleInput[]));
      cache.set(input, rules);
      return rules;
    }
    return finish(parseRules(input));
  };
}

/** Rules with a limit above `above` are counted in `buckets` buckets per window (see `ThrottleOptions.bucketAbove`). */
function bucketRules(rules: readonly Rule[], above: number, buckets: number): readonly Rule[] {
  if (rules.every((rule) => rule.limit <= above)) return rules;
  return rules.map((rule) => (rule.limit > above ? { limit: rule.limit, windowMs: rule.windowMs, bucketMs: Math.ceil(rule.windowMs / buckets) } : rule));
}

function checkDelay(what: string, value: unknown): number {
  if (typeof value !== 'number' || Number.isNaN(value) || value < 0) {
    throw new ThrottleConfigError(`Expected ${what} to be a number of ms from 0 up (Infinity allowed), got ${describe(value)}`);
  }
  return value;
}

function checkWhole(what: string, value: unknown, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new ThrottleConfigError(`Expected ${what} to be a whole number from ${min} to ${max}, got ${describe(value)}`);
  }
  return value;
}

function checkCount(what: string, value: unknown, min = 1): number {
  if (value === Infinity) return value;
  return checkWhole(what, value, min);
}

function isStore(value: unknown): value is Store {
  const store = value as Partial<Store> | null;
  return typeof store === 'object' && store !== null &&
    (['reserve', 'settle', 'inspect', 'confirm', 'pause', 'restore', 'close'] as const).every((method) => typeof store[method] === 'function');
}

function storeError(error: unknown): Error {
  if (error instanceof ThrottleError) return error;
  const message = error instanceof Error ? error.message : String(error);
  return new StoreUnavailableError(`Throttle store failed: ${message}`, error);
}
