import { DelayedError, type Job } from 'bullmq';
import { RateLimitedError, ReservationError, ThrottleClosedError, ThrottleConfigError } from '../errors.js';
import type { KeyInput, KeysInput } from '../keys.js';
import { describe } from '../rules.js';
import type { Throttle } from '../throttle.js';
import { internalsOf, type ThrottleInternals } from './scheduler.js';
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
   * delayed to its reserved slot (or its place in the key's line), and the worker takes the next job.
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

/** Delays of a job in a row before it waits in the worker, up to a window: to its place in the line, then, if the calls ran longer than the line assumed, to its slot. */
const MAX_DELAYS = 2;

/** The estimate of the calls' run time is the longest lately: a long run counts half as much this much later (ms). */
const HOLD_HALF_LIFE_MS = 5_000;

/** How long a job waits in the queue when its throttle closed before its slot (ms): a worker still running on the closed throttle must not spin on it. */
const CLOSED_DELAY_MS = 1_000;

/** The field of a job's data that holds the token of the slot it was delayed to (`Throttle.reserve`). */
export const RESERVATION = 'vendorThrottleReservation';

/** The token a job carries, if any. */
function heldToken(job: ThrottledJob): string | undefined {
  const data = job.data;
  if (data === null || typeof data !== 'object' || Array.isArray(data)) return undefined;
  const token = (data as Record<string, unknown>)[RESERVATION];
  return typeof token === 'string' ? token : undefined;
}

/** The job's data as a plain object, without the token: the data a job delayed to its reserved slot carries it in; undefined when it cannot. */
function plainData(job: ThrottledJob): Record<string, unknown> | undefined {
  const data = job.data;
  if (data === null || typeof data !== 'object' || Array.isArray(data) || Object.getPrototypeOf(data) !== Object.prototype) return undefined;
  const { [RESERVATION]: _token, ...rest } = data as Record<string, unknown>;
  return rest;
}

/**
 * Whether a job back from its delay whose slot is `retryAfterMs` away goes to that slot itself: the
 * key's line ran a little ahead of its log (the calls ran longer than the line assumed) when the
 * slot is less than the key's shortest window away. Further (a vendor pause since, a longer rule
 * binding, other processes' calls), the job takes a new place in the line.
 */
async function lateForItsPlace(internals: ThrottleInternals, error: RateLimitedError): Promise<boolean> {
  if (error.reason !== 'rule') return false;
  // Unknown (it could not be read): the job takes a new place in the line, which is always safe.
  return error.retryAfterMs < (await internals.shortestWindow(error.key).catch(() => 0));
}

/**
 * A BullMQ processor that never holds a worker on a full window: `processor` runs once the job's
 * slot is free, within `waitMs`. The slot is a reservation (`Throttle.reserve`): a job whose slot is
 * further goes back to the queue delayed to it, its token in its data, so the worker takes the next
 * job, and whichever worker takes it back starts the call on that slot. A job of several keys, or
 * whose data cannot carry a token, is delayed to its place in the key's line, shared by every
 * worker (`Throttle.lineUp`), instead. Waiting is not an attempt: the job is moved with
 * `job.moveToDelayed()` and `DelayedError`, which BullMQ does not count in `attemptsMade`. A job
 * whose throttle closes before its slot goes back to the queue, a second later. See docs/adapters.md.
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
  // How long the calls run, from start to completion (a slot frees a window after its call
  // completed): the longest lately, halving every HOLD_HALF_LIFE_MS.
  let longest = 0;
  let longestAt = 0;
  const holdMs = (now: number): number => longest * 2 ** (-(now - longestAt) / HOLD_HALF_LIFE_MS);
  return async (job, token, signal) => {
    const keys = await options.key(job);
    const cost = options.cost?.(job) ?? 1;
    // Started since its last run: back from a delay (or from a stalled run).
    const returned = job.attemptsStarted > job.attemptsMade + 1;
    // Waits in the worker for its slot, however long: it cannot be delayed (no token: called by
    // hand), or one more start would fail it (maxStartedAttempts).
    const lastStart = token === undefined || (maxStartedAttempts !== undefined && job.attemptsStarted >= maxStartedAttempts);
    // Delayed twice in a row (to its place, then to its slot): it waits in the worker up to a window.
    const delayedTwice = job.attemptsStarted - job.attemptsMade > MAX_DELAYS;
    const keyList = Array.isArray(keys) ? (keys as readonly KeyInput[]) : [keys as KeyInput];
    let started = false;
    const run = async (): Promise<R> => {
      started = true;
      // The processor sees the job's data as it was added.
      if (heldToken(job) !== undefined) delete (job.data as Record<string, unknown>)[RESERVATION];
      const startedAt = performance.now();
      try {
        return await processor(job, token, signal);
      } finally {
        const now = performance.now();
        longest = Math.max(now - startedAt, holdMs(now));
        longestAt = now;
      }
    };
    const delay = async (delayMs: number, to: string, key: string): Promise<never> => {
      internals.notify('debug', { message: `BullMQ job ${job.id} delayed ${delayMs} ms, to ${to}`, key });
      await job.moveToDelayed(Date.now() + delayMs, token);
      throw new DelayedError(`vendor-throttle: delayed ${delayMs} ms, to ${to} on key "${key}"`);
    };
    // The line could not be read: the job goes by its slot alone, said as a debug event.
    const lineUnknown =
      (key: string) =>
      (error: unknown): undefined => {
        internals.notify('debug', { message: `BullMQ job ${job.id}: cannot read the key's line of delayed jobs; it goes by its slot alone`, key, error });
        return undefined;
      };
    const lineUp = async (key: string, fromMs: number): Promise<never> => {
      // Behind the jobs already delayed on the key, in every worker; the line itself is an estimate.
      const delayMs = (await internals.lineUp(key, fromMs, { holdMs: holdMs(performance.now()), cost }).catch(lineUnknown(key))) ?? fromMs;
      return delay(delayMs, 'its place in the line', key);
    };
    const aborting = signal === undefined ? {} : { signal };
    // A job's slot in the worker: waited for up to a window (unknown: no longer than it would have).
    const inWorker = async (key: KeyInput): Promise<number> => (lastStart ? Infinity : Math.max(waitMs, await internals.shortestWindow(key).catch(() => 0)));
    const closed = async (): Promise<never> => {
      // Not the job's failure: another worker (or this one, on a new throttle) takes it.
      await job.moveToDelayed(Date.now() + CLOSED_DELAY_MS, token);
      throw new DelayedError('vendor-throttle: the throttle closed before the job could start');
    };
    /**
     * The job's slot as a reservation (a key of its own, a store that keeps reservations, data that
     * can carry a token): reserved once, by whichever worker takes the job first; within `waitMs`
     * the job waits for it in the worker, further it goes back to the queue delayed to the slot,
     * its token in its data, and whichever worker takes it then starts the call on that slot.
     */
    const reserved = async (key: KeyInput, data: Record<string, unknown>): Promise<R> => {
      const at = String(key);
      /**
       * The call on the reserved slot (`stored`: the token is in the job's data), waited for up to a
       * window in the worker; further (a call it depends on ran long), the job is delayed to it.
       * Undefined with the time to come back when the reservation is gone (used, late, or moved
       * with no slot within the wait).
       */
      const onSlot = async (slotToken: string, stored: boolean): Promise<{ readonly value: R } | { readonly againInMs: number }> => {
        try {
          return { value: await throttle.schedule(key, run, { token: slotToken, maxDelayMs: await inWorker(key), ...aborting }) };
        } catch (error) {
          if (started) throw error;
          if (error instanceof ThrottleClosedError) return closed();
          if (error instanceof ReservationError && error.reason === 'early') {
            if (!stored) await job.updateData!({ ...data, [RESERVATION]: slotToken });
            return delay(error.retryAfterMs, 'its reserved slot', at);
          }
          if (error instanceof RateLimitedError) return { againInMs: error.retryAfterMs };
          if (error instanceof ReservationError) return { againInMs: 0 };
          throw error;
        }
      };
      const held = heldToken(job);
      if (held !== undefined) {
        const outcome = await onSlot(held, true);
        if ('value' in outcome) return outcome.value;
        // Gone: a new reservation, now or when the slot could come (the token no longer carried).
        if (outcome.againInMs > 0) {
          await job.updateData!(data);
          return delay(outcome.againInMs, 'a new reservation', at);
        }
      }
      if (lastStart) {
        try {
          return await throttle.schedule(key, run, { maxDelayMs: Infinity, cost, ...aborting });
        } catch (error) {
          if (!started && error instanceof ThrottleClosedError) return closed();
          throw error;
        }
      }
      let reservation;
      try {
        reservation = await throttle.reserve(key, { cost, maxDelayMs: Infinity, ...aborting });
      } catch (error) {
        if (error instanceof ThrottleClosedError) return closed();
        throw error;
      }
      if (reservation.waitMs <= waitMs) {
        const outcome = await onSlot(reservation.token, false);
        if ('value' in outcome) return outcome.value;
        // Not in the worker: a call it depends on runs long. The job comes back for a new one.
        if (held !== undefined) await job.updateData!(data);
        return delay(outcome.againInMs, 'a new reservation', at);
      }
      await job.updateData!({ ...data, [RESERVATION]: reservation.token });
      return delay(reservation.waitMs, 'its reserved slot', at);
    };
    const data = plainData(job);
    if (keyList.length === 1 && token !== undefined && job.updateData !== undefined && data !== undefined && throttle.store.claim !== undefined)
      return reserved(keyList[0]!, data);
    if (!returned && !lastStart) {
      // A new job whose key has jobs delayed to places not due yet goes behind them, not into a slot
      // they are due to take.
      for (const key of keyList) {
        const behind = await internals.lineUp(key, 0, { holdMs: holdMs(performance.now()), cost, behind: true }).catch(lineUnknown(String(key)));
        if (behind !== undefined) return delay(behind, 'its place in the line', String(key));
      }
    }
    let maxDelayMs = waitMs;
    if (lastStart) maxDelayMs = Infinity;
    // Unknown (it could not be read): it waits in the worker no longer than it would have.
    else if (delayedTwice) maxDelayMs = Math.max(waitMs, await internals.shortestWindow(keyList[0]!).catch(() => 0));
    try {
      return await throttle.schedule(keys, run, { maxDelayMs, cost, ...(signal === undefined ? {} : { signal }) });
    } catch (error) {
      if (started || token === undefined) throw error;
      if (error instanceof RateLimitedError) {
        if (returned && !delayedTwice && (await lateForItsPlace(internals, error))) return delay(error.retryAfterMs, 'its slot', error.key);
        return lineUp(error.key, error.retryAfterMs);
      }
      if (error instanceof ThrottleClosedError) return closed();
      throw error;
    }
  };
}
