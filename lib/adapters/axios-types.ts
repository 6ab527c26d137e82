import type { KeysInput } from '../keys.js';

/** Per-request throttle settings of an axios request: `acme.get(url, { throttle: { cost: 5 } })` (added to axios' `AxiosRequestConfig` in axios-types.ts). */
export interface AxiosRequestThrottleOptions {
  /** The key of this request, instead of the adapter's `key(config)`. */
  readonly key?: KeysInput;
  /** Slots this request takes. @default the adapter's `cost`, else 1 */
  readonly cost?: number;
  /** Longest wait for a slot, in ms. @default the adapter's `maxDelayMs`, else the throttle's */
  readonly maxDelayMs?: number;
  /** Order among the key's waiting calls in this process. @default the adapter's `priority`, else 0 */
  readonly priority?: number;
  /** Retries after a vendor refusal. @default the adapter's `retries` (2) */
  readonly retries?: number;
}

/*
 * The axios types the public API names: axios' own when TypeScript finds axios (an optional peer
 * dependency) from this package, else the structural ones declared below. This is the only file
 * whose published declarations name axios, so a project without axios compiles them with
 * `skipLibCheck: false` too.
 *
 * Each `import('axios')` below is preceded by a one-line JSDoc `@ts-ignore`. tsc keeps it in the
 * published `.d.ts` (it drops `//` comments there), and without axios the import is then `any`
 * instead of an error; `Installed` picks the local type in that case. An unused `@ts-ignore` costs
 * nothing when axios is there. Keep each `import('axios')` on the line right after its comment, and
 * name these aliases in signatures rather than letting tsc inline `import('axios')` elsewhere:
 * spec/published-types.spec.ts compiles the packed package both ways and fails otherwise. (Vite ships
 * the types of its optional CSS preprocessors the same way.)
 */

/* eslint-disable @typescript-eslint/ban-ts-comment, @typescript-eslint/consistent-type-imports -- axios
   may be missing, hence `@ts-ignore`; in `import()` types, as tsc keeps no comment above an import. */
/** @ts-ignore axios is an optional peer dependency: where it is not installed, this is `any`. */
type RealInstance = import('axios').AxiosInstance;
/** @ts-ignore axios is an optional peer dependency: where it is not installed, this is `any`. */
type RealConfig = import('axios').InternalAxiosRequestConfig;
/** @ts-ignore axios is an optional peer dependency: where it is not installed, this is `any`. */
type RealResponse = import('axios').AxiosResponse;
/** @ts-ignore axios is an optional peer dependency: where it is not installed, this is `any`. */
type RealGetAdapter = typeof import('axios').getAdapter;
/* eslint-enable @typescript-eslint/ban-ts-comment, @typescript-eslint/consistent-type-imports */

/**
 * `true` for `any`, the type of an import that did not resolve. Not the usual `0 extends 1 & T`:
 * a conditional type whose check or extends type is that unresolved type is itself `any`.
 */
type IsAny<T> = [T] extends [1] ? ([T] extends [2] ? true : false) : false;
/** `Real` (axios' type) when axios resolved, else `Local`. */
type Installed<Real, Local> = IsAny<Real> extends true ? Local : Real;

/** axios' `InternalAxiosRequestConfig`: the config an adapter, an interceptor and `key(config)` see. */
export type AxiosConfigType = Installed<RealConfig, AxiosRequestConfigLike>;
/** axios' `AxiosResponse`. */
export type AxiosResponseType = Installed<RealResponse, AxiosResponseLike>;
/** axios' `AxiosInstance`: what `throttle.axios()` takes (`axios` itself, or one from `axios.create()`). */
export type AxiosInstanceType = Installed<RealInstance, AxiosInstanceLike>;
/** The type of axios' `getAdapter` (`axios.getAdapter`). */
export type AxiosGetAdapterType = Installed<RealGetAdapter, AxiosGetAdapterLike>;

/** The parts of an axios request config commonly read to pick a key; in use only where axios' types are not found. */
export interface AxiosRequestConfigLike {
  url?: string;
  method?: string;
  baseURL?: string;
  headers: Record<string, unknown>;
  params?: unknown;
  data?: unknown;
  throttle?: AxiosRequestThrottleOptions;
}

/** The parts of an axios response an `isThrottled` hook commonly reads; in use only where axios' types are not found. */
export interface AxiosResponseLike {
  status: number;
  statusText: string;
  headers: Record<string, unknown>;
  data: unknown;
  config: AxiosRequestConfigLike;
}

/**
 * What `throttle.axios()` checks of an instance at run time; in use only where axios' types are not
 * found. Loose on purpose: any axios instance fits, whatever its version's callback types.
 */
export interface AxiosInstanceLike {
  defaults: object;
  interceptors: {
    request: {
      use(...args: never[]): number;
      eject(id: number): void;
    };
  };
}

/** A function like `axios.getAdapter` (any version's); in use only where axios' types are not found. */
export type AxiosGetAdapterLike = (...args: never[]) => unknown;

/*
 * `acme.get(url, { throttle: { cost: 5 } })`: a typed `throttle` option on every axios request.
 * Without axios, TypeScript ignores this augmentation in a declaration file (no error to suppress).
 */
declare module 'axios' {
  interface AxiosRequestConfig {
    /** vendor-throttle: per-request key, cost, maxDelayMs, priority and retries (see docs/adapters.md). */
    throttle?: AxiosRequestThrottleOptions;
  }
}
