import type {
  AxiosAdapter,
  AxiosInstance,
  AxiosRequestConfig,
  AxiosResponse,
  AxiosResponseHeaders,
  AxiosResponseTransformer,
  AxiosStatic,
  CancelToken,
  InternalAxiosRequestConfig,
} from 'axios';
import { ThrottleConfigError } from '../errors.js';
import { describe } from '../rules.js';
import type { Scheduler } from './scheduler.js';
import type { AxiosInstanceType, AxiosRequestThrottleOptions } from './axios-types.js';
import { checkCallOptions, followSignals, pickCallOptions, type SignalLike, VENDOR_SIGNAL_OPTIONS } from './call-options.js';
import type { AxiosThrottleHandle, AxiosThrottleOptions } from './options.js';
import { checkRetries, sendThrottled, vendorSettings, type Outcome, type VendorSettings } from './retry.js';

/** What `adapter` may hold in axios config: a function, a name, or a list of them. */
type AdapterSetting = AxiosRequestConfig['adapter'];
type Dispatch = (config: InternalAxiosRequestConfig) => Promise<AxiosResponse>;

/** axios' own default, for an instance or request that names no adapter. */
const AXIOS_DEFAULT_ADAPTERS: AdapterSetting = ['xhr', 'http', 'fetch'];

/** Every throttled adapter → the adapter setting it sends through. */
const wrappedSettings = new WeakMap<AxiosAdapter, AdapterSetting>();

/**
 * Sends every request of an axios instance through `throttle`.
 *
 * The slot is taken in the instance's adapter — the last step before the request leaves, after every
 * request interceptor and `transformRequest` — so time spent waiting never shrinks the window at the
 * vendor. `instance.defaults.adapter` is replaced by a throttled one around the adapter configured
 * before, and a synchronous request interceptor wraps an adapter set on a single request the same way.
 * axios names (`'http'`, `['xhr', 'http', 'fetch']`) are resolved with `options.getAdapter`, or the
 * instance's own (`axios.getAdapter` on the default instance), or else by sending through an
 * interceptor-free copy of the instance (`instance.create()` with `transformRequest`/`transformResponse`
 * left empty, as they already ran) — so that nothing here imports axios at run time.
 */
export function throttleAxios<I extends AxiosInstanceType>(throttle: Scheduler, instance: I, options: AxiosThrottleOptions): AxiosThrottleHandle<I> {
  if (!isAxiosInstance(instance)) {
    throw new ThrottleConfigError(`Expected an axios instance (axios, or one from axios.create()), got ${describe(instance)}`, 'instance');
  }
  checkCallOptions(options, 'axios', [...VENDOR_SIGNAL_OPTIONS, 'getAdapter']);
  const settings = vendorSettings(options, 'axios');
  const getAdapter = options.getAdapter ?? (instance as Partial<AxiosStatic>).getAdapter;
  if (getAdapter !== undefined && typeof getAdapter !== 'function') {
    throw new ThrottleConfigError(`Expected axios option getAdapter to be a function (axios.getAdapter), got ${describe(getAdapter)}`, 'getAdapter');
  }
  const mine = new WeakSet<AxiosAdapter>();
  let ejected = false;
  let copy: AxiosInstance | undefined;

  /** The function that sends `config` through `setting`, as axios' dispatchRequest would resolve it. */
  const resolve = (setting: AdapterSetting, config: InternalAxiosRequestConfig): Dispatch => {
    if (typeof setting === 'function') return setting;
    if (getAdapter) return getAdapter(setting, config);
    if (typeof instance.create !== 'function') {
      throw new ThrottleConfigError('Cannot resolve axios adapter names for this instance: pass getAdapter: axios.getAdapter', 'getAdapter');
    }
    copy ??= interceptorFree(instance);
    return viaCopy(copy, setting);
  };

  const throttled = (setting: AdapterSetting): AxiosAdapter => {
    const adapter: AxiosAdapter = async (config) => {
      const dispatch = resolve(setting, config);
      if (ejected) return dispatch(config);
      return sendRequest(throttle, settings, options, config, dispatch);
    };
    wrappedSettings.set(adapter, setting);
    mine.add(adapter);
    return adapter;
  };

  const hadAdapter = Object.prototype.hasOwnProperty.call(instance.defaults, 'adapter');
  const original = instance.defaults.adapter;
  const installed = throttled(original ?? AXIOS_DEFAULT_ADAPTERS);
  instance.defaults.adapter = installed;
  // An adapter set on one request replaces the instance's: wrap it too, so no request goes around the throttle.
  const interceptor = instance.interceptors.request.use(
    (config) => {
      if (!includes(config.adapter, mine)) config.adapter = throttled(config.adapter ?? AXIOS_DEFAULT_ADAPTERS);
      return config;
    },
    null,
    { synchronous: true },
  );

  return {
    instance,
    eject() {
      if (ejected) return;
      ejected = true;
      instance.interceptors.request.eject(interceptor);
      if (instance.defaults.adapter !== installed) return;
      if (hadAdapter) instance.defaults.adapter = original;
      else delete instance.defaults.adapter;
    },
  };
}

/** One request: its key and options, its signals, then `sendThrottled` with axios' view of an answer. */
async function sendRequest(
  throttle: Scheduler,
  settings: VendorSettings<AxiosResponse>,
  options: AxiosThrottleOptions,
  config: InternalAxiosRequestConfig,
  dispatch: Dispatch,
): Promise<AxiosResponse> {
  const own = requestOptions(config.throttle);
  const key = own.key ?? (await options.key(config));
  const picked = pickCallOptions(options, [config]);
  const retries = own.retries === undefined ? settings.retries : checkRetries(own.retries, 'config.throttle.retries');
  const { signal, stop } = followSignals([config.signal as SignalLike | undefined, config.cancelToken && tokenSignal(config.cancelToken)]);
  try {
    return await sendThrottled(
      throttle,
      {
        key,
        schedule: {
          cost: own.cost ?? picked.cost,
          maxDelayMs: own.maxDelayMs ?? picked.maxDelayMs,
          priority: own.priority ?? picked.priority,
          signal,
        },
        retries,
        client: 'axios',
      },
      settings,
      {
        send: () => dispatch(config),
        answer: responseOf,
        flagged: async (outcome) => Boolean(await settings.isThrottled!(transformed(responseOf(outcome)!, config))),
        replayable: !isStream(config.data),
      },
    );
  } finally {
    stop();
  }
}

function requestOptions(value: unknown): AxiosRequestThrottleOptions {
  if (value === undefined) return {};
  if (value === null || typeof value !== 'object') {
    throw new ThrottleConfigError(`Expected config.throttle to be an object, got ${describe(value)}`, 'config.throttle');
  }
  return value as AxiosRequestThrottleOptions;
}

/** The vendor's answer in an outcome: the response, or the response of an axios error (a 429 rejects). */
function responseOf(outcome: Outcome<AxiosResponse>): AxiosResponse | undefined {
  if (outcome.ok) return outcome.value;
  const response = (outcome.error as { response?: Partial<AxiosResponse> } | null)?.response;
  return response && typeof response.status === 'number' ? (response as AxiosResponse) : undefined;
}

/** A copy of `response` with `data` as the caller will see it: the adapter's answer has not been through `transformResponse` yet. */
function transformed(response: AxiosResponse, config: InternalAxiosRequestConfig): AxiosResponse {
  const transforms = ([] as AxiosResponseTransformer[]).concat(config.transformResponse ?? []);
  let data: unknown = response.data;
  for (const transform of transforms) data = transform.call(config, data, response.headers as AxiosResponseHeaders, response.status);
  return { ...response, data };
}

/** A stream body is read once: such a request cannot be sent again. */
function isStream(data: unknown): boolean {
  if (data === null || typeof data !== 'object') return false;
  return typeof (data as { pipe?: unknown }).pipe === 'function' || typeof (data as { getReader?: unknown }).getReader === 'function';
}

/** An axios `CancelToken` seen as a signal. */
function tokenSignal(token: CancelToken): SignalLike {
  return {
    get aborted() {
      return token.reason !== undefined;
    },
    get reason() {
      return token.reason;
    },
    addEventListener: (_type, listener) => token.subscribe(listener),
    removeEventListener: (_type, listener) => token.unsubscribe(listener),
  };
}

/** Whether `setting` is, or sends through, an adapter this installation made. */
function includes(setting: AdapterSetting, mine: WeakSet<AxiosAdapter>): boolean {
  let current = setting;
  while (typeof current === 'function' && wrappedSettings.has(current)) {
    if (mine.has(current)) return true;
    current = wrappedSettings.get(current);
  }
  return false;
}

function isAxiosInstance(value: unknown): value is AxiosInstance {
  if ((typeof value !== 'function' && typeof value !== 'object') || value === null) return false;
  const candidate = value as Partial<AxiosInstance>;
  return typeof candidate.defaults === 'object' && candidate.defaults !== null && typeof candidate.interceptors?.request?.use === 'function';
}

/** A copy of the instance with no interceptors and no defaults: it only resolves the adapter and sends. */
function interceptorFree(instance: AxiosInstance): AxiosInstance {
  const copy = instance.create();
  // The config it is given is complete already (merged, intercepted, transformed): defaults would
  // only add back headers an interceptor removed.
  const defaults = copy.defaults as unknown as Record<string, unknown>;
  for (const name of Object.keys(defaults)) delete defaults[name];
  return copy;
}

/** Sends through the copy with `setting` as adapter; the answer keeps the config this adapter was given. */
function viaCopy(copy: AxiosInstance, setting: AdapterSetting): Dispatch {
  return async (config) => {
    try {
      const response = await copy.request({ ...config, adapter: setting, transformRequest: [], transformResponse: [] });
      response.config = config;
      return response;
    } catch (error) {
      const failure = error as { isAxiosError?: boolean; config?: unknown; response?: { config?: unknown } } | null;
      if (failure?.isAxiosError === true) {
        failure.config = config;
        if (failure.response) failure.response.config = config;
      }
      throw error;
    }
  };
}
