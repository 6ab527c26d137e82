import type { AxiosConfigType, AxiosGetAdapterType, AxiosInstanceType, AxiosResponseType } from './axios-types.js';
import type { KeysInput } from '../keys.js';

/** A value for every call, or a function that picks it for each call from the call's arguments. */
export type PerCall<A extends readonly unknown[], T> = T | ((...args: A) => T);

/** What the vendor-aware adapters (`throttle.axios()`, `throttle.fetch()`) do with a response that says the limit was hit. */
export interface VendorSignalOptions<R> {
  /**
   * How many times a request the vendor refused (429, …; see docs/adapters.md) is sent again. Every
   * retry waits for a new slot through the throttle — after the pause the vendor asked for — so it
   * counts against the rules like any call. After the last one the client's own answer comes back
   * (axios: its error for the 429; fetch: the `Response`).
   * @default 2
   */
  readonly retries?: number;
  /**
   * Flags a response as refused although its status does not say so (a vendor that answers `200`
   * with an error body). May be async. Errors it throws are reported as `debug` events and count as
   * "not refused". axios: `response.data` is transformed as your code will see it (JSON parsed);
   * fetch: the hook gets a clone, so it may read the body.
   */
  readonly isThrottled?: (response: R) => boolean | PromiseLike<boolean>;
  /**
   * Pause when the vendor refused a request without saying for how long, in ms; doubled for each
   * retry of the same request (1 s, 2 s, 4 s, …).
   * @default 1_000
   */
  readonly fallbackPauseMs?: number;
  /**
   * Longest vendor pause a request is retried after, in ms. A longer pause is still applied to the
   * key, but the request is not retried: the vendor's answer comes back at once.
   * @default 60_000
   */
  readonly maxRetryAfterMs?: number;
  /**
   * Longest pause applied to a key, in ms, whatever the vendor says (a `debug` event tells when a
   * pause was cut). Protects a key from a broken header pausing it for weeks.
   * @default 86_400_000 (one day)
   */
  readonly maxPauseMs?: number;
  /**
   * Learn the vendor's limits from every answer (`RateLimit-Policy`, `X-RateLimit-Limit`:
   * `throttle.learn()`), for every process sharing the store. It only lowers the pace below the
   * configured rules, unless the throttle has `learnAboveRules`.
   * @default true
   */
  readonly learn?: boolean;
}

/** Per-call options, each fixed or picked from the call's arguments. */
export interface CallOptions<A extends readonly unknown[]> {
  /** Slots the call takes (an endpoint the vendor counts as several calls). @default 1 */
  readonly cost?: PerCall<A, number>;
  /** Longest wait for a slot before `RateLimitedError`, in ms. @default the throttle's `maxDelayMs` */
  readonly maxDelayMs?: PerCall<A, number>;
  /** Higher goes first among the key's calls waiting in this process. @default 0 */
  readonly priority?: PerCall<A, number>;
}

/**
 * Options of `throttle.axios(instance, options)`. The request and response types are axios' own
 * (`InternalAxiosRequestConfig`, `AxiosResponse`) where axios is installed (see axios-types.ts).
 */
export interface AxiosThrottleOptions extends VendorSignalOptions<AxiosResponseType>, CallOptions<[config: AxiosConfigType]> {
  /**
   * The key (upstream user id) of a request, read from its final config — after every request
   * interceptor has run. May be async. `config.throttle.key` takes precedence.
   */
  readonly key: (config: AxiosConfigType) => KeysInput | PromiseLike<KeysInput>;
  /**
   * Resolves adapter names (`['xhr', 'http', 'fetch']`, axios' default) to the adapter function:
   * pass `axios.getAdapter`. Optional: the default `axios` instance brings its own, and an instance
   * from `axios.create()` without it sends through an interceptor-free copy of itself
   * (`instance.create()`), which resolves the names as axios does.
   * @default instance.getAdapter when present
   */
  readonly getAdapter?: AxiosGetAdapterType;
}

/** What `throttle.axios()` returns. */
export interface AxiosThrottleHandle<I extends AxiosInstanceType> {
  /** The instance passed in, now throttled. */
  readonly instance: I;
  /** Restores the instance: its adapter as it was, and the interceptor the throttle added removed. Idempotent. */
  eject(): void;
}

/** The part of a fetch `Response` the adapter reads. */
export interface FetchResponseLike {
  readonly status: number;
  readonly headers: { get(name: string): string | null };
}

/** A function with the shape of `fetch`: the global one, undici's, or your own wrapper. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- any fetch-shaped function, whatever its argument types
export type FetchLike = (input: any, init?: any) => Promise<FetchResponseLike>;

/** Options of `throttle.fetch(options)`. */
export interface FetchThrottleOptions<F extends FetchLike = typeof globalThis.fetch>
  extends VendorSignalOptions<Awaited<ReturnType<F>>>, CallOptions<[input: Parameters<F>[0], init: Parameters<F>[1]]> {
  /** The key (upstream user id) of a request, from fetch's arguments. May be async. */
  readonly key: (input: Parameters<F>[0], init: Parameters<F>[1]) => KeysInput | PromiseLike<KeysInput>;
  /**
   * The fetch to send with, such as undici's.
   * @default globalThis.fetch, read at each call
   */
  readonly fetch?: F;
}

/** Options of `throttle.wrap(fn, options)`. */
export interface WrapOptions<A extends readonly unknown[]> extends CallOptions<A> {
  /** The key (upstream user id) of a call, from the wrapped function's arguments. May be async. */
  readonly key: (...args: A) => KeysInput | PromiseLike<KeysInput>;
  /** An `AbortSignal` for the wait, from the call's arguments: aborting before `fn` starts rejects with its reason. */
  readonly signal?: (...args: A) => AbortSignal | undefined;
}

/** `fn` throttled: the same parameters (and `this`), its result as a promise. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- any function
export type Throttled<F extends (...args: any[]) => unknown> =
  unknown extends ThisParameterType<F>
    ? (...args: Parameters<F>) => Promise<Awaited<ReturnType<F>>>
    : (this: ThisParameterType<F>, ...args: Parameters<F>) => Promise<Awaited<ReturnType<F>>>;
