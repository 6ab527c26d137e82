import { DelayedError, type Job } from 'bullmq';
import { RateLimitedError, ReservationError, ThrottleClosedError, ThrottleConfigError } from '../errors.js';
import type { KeyInput, KeysInput } from '../keys.js';
import { describe } from '../rules.js';
import type { Throttle } from '../throttle.js';
import { internalsOf } from './scheduler.js';
import { checkDelay, checkKnown, checkWhole } from '../validate.js';

/**
 * What the processor reads of a job: a BullMQ `Job`, or the `SandboxedJob` a sandboxed processor
 * (a file run in a child process) is given.
 */
export interface ThrottledJob {
  readonly id?: string;
  readonly attemptsStarted: number;
  readonly attemptsMade: number;
  /** The job's data: a job delayed to its reserved slot carries the reservation's token in it (`RESERVATION`). */
  readonly data?: unknown;
  moveToDelayed(timestamp: number, token?: string): Promise<void>;
  updateData?(data: unknown): Promise<void>;
}

/** A BullMQ processor function, as `new Worker(name, processor)` takes it (or a sandboxed processor file exports). */
export type JobProcessor<J extends ThrottledJob = Job, R = unknown> = (job: J, token?: string, signal?: AbortSignal) => Promise<R>;

export interface ThrottleProcessorOptions<J extends ThrottledJob = Job> {
  /** The key the job's call counts in, or its keys (a user's and an app-wide one). May be async. */
  readonly key: (job: J) => KeysInput | PromiseLike<KeysInput>;
  /**
   * Longest wait for a slot in the worker, in ms. A job whose slot is further goes back to the queue,
   * delayed to its reserved slot, and the worker takes the next job.
   * @default 250
   */
  readonly waitMs?: number;
  /** Slots the job's call takes (an endpoint the vendor counts as several calls). @default 1 */
  readonly cost?: (job: J) => number;
  /**
   * The Worker's `maxStartedAttempts`, where you set one. Each delay starts the job once more
   * (BullMQ counts every move to active in `attemptsStarted`), so a job already started that many
   * times waits in the worker for its slot, however far, instead of being delayed again, which
   * would fail it.
   */
  readonly maxStartedAttempts?: number;
}

/** The names `throttleProcessor()` takes. */
const OPTIONS = ['key', 'waitMs', 'cost', 'maxStartedAttempts'] as const satisfies ReadonlyArray<keyof ThrottleProcessorOptions>;

/** How long a job waits in the queue when its throttle closed before its slot (ms): a worker still running on the closed throttle must not spin on it. */
const CLOSED_DELAY_MS = 1_000;

/** The field of a job's data that holds the token of the slot it was delayed to (`Throttle.reserve`). */
export const RESERVATION = 'vendorThrottleReservation';

/**
 * The field that holds a job's data as it was added, beside `RESERVATION`, where that data is not a
 * plain object (a string, a number, an array, null) and so cannot carry the token itself.
 */
export const RESERVED_DATA = 'vendorThrottleData';

/** A job's data as it was added, the token it carries (if any), and that data with a token. */
interface Carried {
  readonly data: unknown;
  readonly token: string | undefined;
  withToken(token: string): unknown;
}

function isPlain(data: unknown): data is Record<string, unknown> {
  return data !== null && typeof data === 'object' && Object.getPrototypeOf(data) === Object.prototype;
}

/**
 * What a job carries: a plain object holds the token in its field `RESERVATION`; other data is
 * wrapped, `{ [RESERVATION]: token, [RESERVED_DATA]: data }`, while the job waits for its slot.
 */
function carried(job: ThrottledJob): Carried {
  const data = job.data;
  if (!isPlain(data)) return { data, token: undefined, withToken: (token) => ({ [RESERVATION]: token, [RESERVED_DATA]: data }) };
  const { [RESERVATION]: held, ...rest } = data;
  const token = typeof held === 'string' ? held : undefined;
  const keys = Object.keys(rest);
  if (token !== undefined && keys.length === 1 && keys[0] === RESERVED_DATA) {
    const wrapped = rest[RESERVED_DATA];
    return { data: wrapped, token, withToken: (next) => ({ [RESERVATION]: next, [RESERVED_DATA]: wrapped }) };
  }
  return { data: held === undefined ? data : rest, token, withToken: (next) => ({ ...rest, [RESERVATION]: next }) };
}

/**
 * A BullMQ processor that never holds a worker on a full window: `processor` runs once the job's
 * slot is free, within `waitMs`. The slot is a reservation (`Throttle.reserve`), in each of the
 * job's keys: a job whose slot is further goes back to the queue delayed to it, its token in its
 * data (`RESERVATION`; data that is not a plain object is wrapped, `RESERVED_DATA`), so the worker
 * takes the next job, and whichever worker takes it back starts the call on that slot. The key,
 * cost and processor functions see the data as it was added. Waiting is not an attempt: the job is
 * moved with `job.moveToDelayed()` and `DelayedError`, which BullMQ does not count in
 * `attemptsMade`. A job whose throttle closes before its slot goes back to the queue, a second
 * later. See docs/adapters.md.
 *
 * ```ts
 * const worker = new Worker('imports', throttleProcessor(throttle, (job) => acme.sync(job.data), { key: (job) => job.data.user }), { connection });
 * ```
 */
export function throttleProcessor<J extends ThrottledJob, R>(
  throttle: Throttle,
  processor: JobProcessor<J, R>,
  options: ThrottleProcessorOptions<J>,
): JobProcessor<J, R> {
  if (typeof processor !== 'function') throw new ThrottleConfigError(`Expected processor to be a function, got ${describe(processor)}`, 'processor');
  if (options === null || typeof options !== 'object')
    throw new ThrottleConfigError(`Expected throttleProcessor options to be an object, got ${describe(options)}`, 'options');
  checkKnown('throttleProcessor', options, OPTIONS);
  const internals = internalsOf(throttle);
  // A throttle that never waits could not hold a job in the worker for its slot, its last resort.
  if (throttle.mode !== 'wait') throw new ThrottleConfigError(`Expected a throttle in 'wait' mode for throttleProcessor(), got '${throttle.mode}'`, 'throttle');
  if (typeof options.key !== 'function')
    throw new ThrottleConfigError(`Expected throttleProcessor option key to be a function, got ${describe(options.key)}`, 'key');
  if (options.cost !== undefined && typeof options.cost !== 'function')
    throw new ThrottleConfigError(`Expected throttleProcessor option cost to be a function, got ${describe(options.cost)}`, 'cost');
  const waitMs = options.waitMs ?? 250;
  checkDelay('throttleProcessor waitMs', waitMs);
  const { maxStartedAttempts } = options;
  if (maxStartedAttempts !== undefined) checkWhole('throttleProcessor maxStartedAttempts', maxStartedAttempts, 1);
  return async (job, token, signal) => {
    // The key, the cost and the processor see the job's data as it was added.
    const held = carried(job);
    if (held.token !== undefined) (job as { data?: unknown }).data = held.data;
    const keys = await options.key(job);
    const cost = options.cost?.(job) ?? 1;
    const keyList = Array.isArray(keys) ? (keys as readonly KeyInput[]) : [keys as KeyInput];
    const at = keyList.map(String).join(', ');
    // Waits in the worker for its slot, however long: it cannot be delayed (no token: called by
    // hand), or one more start would fail it (maxStartedAttempts).
    const lastStart = token === undefined || (maxStartedAttempts !== undefined && job.attemptsStarted >= maxStartedAttempts);
    let started = false;
    const run = async (): Promise<R> => {
      started = true;
      return processor(job, token, signal);
    };
    const delay = async (delayMs: number, to: string): Promise<never> => {
      internals.notify('debug', { message: `BullMQ job ${job.id} delayed ${delayMs} ms, to ${to}`, key: String(keyList[0]) });
      await job.moveToDelayed(Date.now() + delayMs, token);
      throw new DelayedError(`vendor-throttle: delayed ${delayMs} ms, to ${to} on ${keyList.length > 1 ? 'keys' : 'key'} "${at}"`);
    };
    const aborting = signal === undefined ? {} : { signal };
    // A job's slot in the worker: waited for up to the keys' shortest window (unknown: no longer than waitMs).
    const inWorker = async (): Promise<number> => {
      if (lastStart) return Infinity;
      const windows = await Promise.all(keyList.map((key) => internals.shortestWindow(key).catch(() => 0)));
      return Math.max(waitMs, Math.min(...windows));
    };
    const closed = async (): Promise<never> => {
      // Not the job's failure: another worker (or this one, on a new throttle) takes it.
      await job.moveToDelayed(Date.now() + CLOSED_DELAY_MS, token);
      throw new DelayedError('vendor-throttle: the throttle closed before the job could start');
    };
    // At its last start: the job's slot, however far, in the worker.
    const anyCall = async (): Promise<R> => {
      try {
        return await throttle.schedule(keys, run, { maxDelayMs: Infinity, cost, ...aborting });
      } catch (error) {
        if (!started && error instanceof ThrottleClosedError) return closed();
        throw error;
      }
    };
    if (throttle.store.claim === undefined || job.updateData === undefined) {
      if (lastStart) return anyCall();
      // A store that keeps no reservations (or a job that cannot carry a token): the job waits in
      // the worker up to waitMs (a window, once back from a delay), else it is delayed to the
      // soonest its slot could be free, and asks again then.
      const returned = job.attemptsStarted > job.attemptsMade + 1;
      try {
        return await throttle.schedule(keys, run, { maxDelayMs: returned ? await inWorker() : waitMs, cost, ...aborting });
      } catch (error) {
        if (started) throw error;
        if (error instanceof RateLimitedError) return delay(error.retryAfterMs, 'its slot');
        if (error instanceof ThrottleClosedError) return closed();
        throw error;
      }
    }
    const update = job.updateData.bind(job);
    // Data that could not be written: a reservation it would have carried is given back, not left to count to its bound.
    const updateData = async (data: unknown, reserved?: string): Promise<void> => {
      try {
        await update(data);
      } catch (error) {
        if (reserved !== undefined) await throttle.release(keys, reserved).catch(() => undefined);
        throw error;
      }
    };
    /**
     * The call on the reserved slot (`stored`: the token is in the job's data), waited for up to a
     * window in the worker; further (a call it depends on ran long), the job is delayed to it.
     * The time to come back for a new reservation when this one is gone (used, late, or moved
     * with no slot within the wait).
     */
    const onSlot = async (slotToken: string, stored: boolean): Promise<{ readonly value: R } | { readonly againInMs: number }> => {
      try {
        return { value: await throttle.schedule(keys, run, { token: slotToken, maxDelayMs: await inWorker(), ...aborting }) };
      } catch (error) {
        if (started) throw error;
        if (error instanceof ThrottleClosedError) {
          // The job goes back to the queue with its token: the worker that takes it claims the slot.
          if (!stored) await updateData(held.withToken(slotToken), slotToken);
          return closed();
        }
        if (error instanceof ReservationError && error.reason === 'early') {
          if (!stored) await updateData(held.withToken(slotToken), slotToken);
          return delay(error.retryAfterMs, 'its reserved slot');
        }
        if (error instanceof RateLimitedError) return { againInMs: error.retryAfterMs };
        if (error instanceof ReservationError) return { againInMs: 0 };
        // Aborted, or the store failed: a reservation no job carries is given back, not left to count to its bound.
        if (!stored) await throttle.release(keys, slotToken).catch(() => undefined);
        throw error;
      }
    };
    if (held.token !== undefined) {
      const outcome = await onSlot(held.token, true);
      if ('value' in outcome) return outcome.value;
      // Gone: a new reservation, now or when the slot could come (the token no longer carried).
      if (outcome.againInMs > 0) {
        if (!lastStart) {
          await updateData(held.data);
          return delay(outcome.againInMs, 'a new reservation');
        }
      }
    }
    if (lastStart) return anyCall();
    let reservation;
    try {
      reservation = await throttle.reserve(keys, { cost, maxDelayMs: Infinity, ...aborting });
    } catch (error) {
      if (error instanceof ThrottleClosedError) return closed();
      throw error;
    }
    if (reservation.waitMs <= waitMs) {
      const outcome = await onSlot(reservation.token, false);
      if ('value' in outcome) return outcome.value;
      // Not in the worker: a call it depends on runs long. The job comes back for a new one.
      if (held.token !== undefined) await updateData(held.data);
      return delay(outcome.againInMs, 'a new reservation');
    }
    await updateData(held.withToken(reservation.token), reservation.token);
    return delay(reservation.waitMs, 'its reserved slot');
  };
}
