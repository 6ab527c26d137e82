import { ThrottleConfigError } from '../errors.js';
import { describe } from '../rules.js';
import type { Scheduler } from './scheduler.js';
import { checkCallOptions, followSignals, pickCallOptions, type SignalLike, VENDOR_SIGNAL_OPTIONS } from './call-options.js';
import type { FetchLike, FetchThrottleOptions } from './options.js';
import { sendThrottled, vendorSettings } from './retry.js';

/** The parts of a `Request` (global or undici's) the adapter uses. */
interface RequestLike {
  readonly signal?: SignalLike | null;
  readonly body?: unknown;
  clone(): RequestLike;
}

/** The parts of a `Response` used beyond `FetchResponseLike`, all optional for fetch look-alikes. */
interface ResponseExtras {
  clone?(): unknown;
  readonly bodyUsed?: boolean;
  readonly body?: { cancel(reason?: unknown): Promise<void> } | null;
}

/**
 * A function with the signature of `fetch` (the global one, or `options.fetch`) that sends every
 * request through `throttle`, keyed by `options.key(input, init)`, and listens to the vendor's
 * answer (see `sendThrottled`). `init.signal` (else the `Request`'s signal) also cancels the wait
 * for a slot, which is then given back; the promise rejects with the signal's reason, as fetch does.
 *
 * A retry sends the request again: a `Request` with a body is cloned for each attempt but the last,
 * a streamed `init.body` (a `ReadableStream`, an async iterable) cannot be sent twice and is not retried.
 */
export function throttleFetch<F extends FetchLike>(throttle: Scheduler, options: FetchThrottleOptions<F>): F {
  checkCallOptions(options, 'fetch', [...VENDOR_SIGNAL_OPTIONS, 'fetch']);
  if (options.fetch !== undefined && typeof options.fetch !== 'function') {
    throw new ThrottleConfigError(`Expected fetch option fetch to be a function, got ${describe(options.fetch)}`, 'fetch');
  }
  const settings = vendorSettings(options, 'fetch');
  type Answer = Awaited<ReturnType<F>>;

  const throttled = async (input: Parameters<F>[0], init?: Parameters<F>[1]): Promise<Answer> => {
    const send = (options.fetch ?? globalThis.fetch) as unknown as (input: unknown, init?: unknown) => Promise<Answer>;
    if (typeof send !== 'function') throw new ThrottleConfigError('There is no global fetch: pass the fetch to use as option fetch', 'fetch');
    const key = await options.key(input, init);
    const request = requestLike(input);
    const requestInit = init as { signal?: SignalLike | null; body?: unknown } | undefined;
    const { signal, stop } = followSignals([requestInit?.signal ?? request?.signal]);
    const retries = settings.retries;
    try {
      return await sendThrottled<Answer>(
        throttle,
        { key, schedule: { ...pickCallOptions(options, [input, init]), signal }, retries, client: 'fetch' },
        settings,
        {
          // A Request's body is read when it is sent: send clones while a retry may follow.
          send: (attempt) => send(request && request.body != null && attempt < retries ? request.clone() : input, init),
          answer: (outcome) => (outcome.ok ? { status: outcome.value.status, headers: outcome.value.headers } : undefined),
          flagged: async (outcome) => {
            const response = (outcome as { value: Answer }).value;
            const copy = (typeof (response as ResponseExtras).clone === 'function' ? (response as ResponseExtras).clone!() : response) as Answer;
            try {
              return Boolean(await settings.isThrottled!(copy));
            } finally {
              if (copy !== response) release(copy as ResponseExtras);
            }
          },
          replayable: !isStreamBody(requestInit?.body),
          discard: (outcome) => {
            if (outcome.ok) release(outcome.value as ResponseExtras);
          },
        },
      );
    } finally {
      stop();
    }
  };
  return throttled as unknown as F;
}

function requestLike(input: unknown): RequestLike | undefined {
  if (input === null || typeof input !== 'object' || input instanceof URL) return undefined;
  const candidate = input as Partial<RequestLike> & { url?: unknown };
  return typeof candidate.clone === 'function' && typeof candidate.url === 'string' ? (candidate as RequestLike) : undefined;
}

/** A body that can be read only once. */
function isStreamBody(body: unknown): boolean {
  if (body === null || typeof body !== 'object') return false;
  return typeof (body as { getReader?: unknown }).getReader === 'function' || Symbol.asyncIterator in body;
}

/** Cancels a body nobody will read, so that the connection is freed. */
function release(response: ResponseExtras): void {
  if (response.bodyUsed || !response.body) return;
  // Not a failure to report: a body that cannot be cancelled has errored or ended already, and
  // its connection is freed either way.
  response.body.cancel().catch(() => {});
}
