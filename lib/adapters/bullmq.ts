import { DelayedError, type Job } from 'bullmq';
import { RateLimitedError, ThrottleClosedError, ThrottleConfigError } from '../errors.js';
import type { KeysInput } from '../keys.js';
import { describe } from '../rules.js';
import type { Throttle } from '../throttle.js';
import { checkDelay, checkKnown, checkWhole } from '../validate.js';

/**
 * What the processor reads of a job: a BullMQ `Job`, or the `SandboxedJob` a sandboxed processor
 * (a file run in a child process) is given.
 */
export interface ThrottledJob {
  readonly id?: string;
  readonly attemptsStarted: number;
  readonly attemptsMade: number;
  moveToDelayed(timestamp: number, token?: string): Promise<void>;
}

/** A BullMQ processor function, as `new Worker(name, processor)` takes it (or a sandboxed processor file exports). */
export type JobProcessor<J extends ThrottledJob = Job, R = unknown> = (job: J, token?: string, signal?: AbortSignal) => Promise<R>;

export interface ThrottleProcessorOptions<J extends ThrottledJob = Job> {
  /** The key the job's call counts in, or its keys (a user's and an app-wide one). May be async. */
  readonly key: (job: J) => KeysInput | PromiseLike<KeysInput>;
  /**
   * Longest wait for a slot in the worker, in ms. A job whose slot is further goes back to the queue,
   * delayed to its place, and the worker takes the next job.
   * @default 250
   */
  readonly waitMs?: number;
  /** Slots the job's call takes (an endpoint the vendor counts as several calls). @default 1 */
  readonly cost?: (job: J) => number;
  /**
   * The Worker's `maxStartedAttempts`, where you set one. Each delay starts the job once more
   * (BullMQ counts every move to active in `attemptsStarted`), so a job already started that many
   * times waits in the worker for its slot (up to the throttle's `maxDelayMs`) instead of being
   * delayed again, which would fail it.
   */
  readonly maxStartedAttempts?: number;
}

/** The names `throttleProcessor()` takes. */
const OPTIONS = ['key', 'waitMs', 'cost', 'maxStartedAttempts'] as const satisfies ReadonlyArray<keyof ThrottleProcessorOptions>;

/** Delays of a job between two runs: to its place in the line, then, if the calls ran longer than the line assumed, to its slot. */
const MAX_DELAYS = 2;

/** How fast the estimate of the calls' run time (the longest lately) forgets a long one, per call. */
const HOLD_DECAY = 0.05;

/**
 * Whether a job back from its delay (started since its last run) whose slot is `retryAfterMs` away
 * goes to that slot itself: the key's line ran a little ahead of its log (the calls ran longer than
 * the line assumed) when the slot is less than the key's shortest window away. Further (a vendor
 * pause since, a longer rule binding, other processes' calls), the job takes a new place in the line.
 */
async function lateForItsPlace(throttle: Throttle, job: ThrottledJob, error: RateLimitedError): Promise<boolean> {
  if (job.attemptsStarted <= job.attemptsMade + 1 || error.reason !== 'rule') return false;
  return error.retryAfterMs < (await throttle.shortestWindow(error.key).catch(() => 0));
}

/**
 * A BullMQ processor that never holds a worker on a full window: `processor` runs once the job's
 * slot is free, within `waitMs`; a job whose slot is further goes back to the queue delayed to its
 * place in the key's line, shared by every worker (`Throttle.lineUp`), so the worker takes the next
 * job. Waiting is not an attempt: the job is moved with `job.moveToDelayed()` and `DelayedError`,
 * which BullMQ does not count in `attemptsMade`. A job whose throttle closes before its slot goes
 * back to the queue at once. See docs/adapters.md.
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
  if (typeof processor !== 'function') throw new TypeError(`Expected processor to be a function, got ${describe(processor)}`);
  if (options === null || typeof options !== 'object') throw new TypeError(`Expected throttleProcessor options to be an object, got ${describe(options)}`);
  checkKnown('throttleProcessor', options, OPTIONS);
  // A throttle that never waits could not hold a job in the worker for its slot, its last resort.
  if (throttle.mode !== 'wait') throw new ThrottleConfigError(`Expected a throttle in 'wait' mode for throttleProcessor(), got '${throttle.mode}'`);
  if (typeof options.key !== 'function') throw new ThrottleConfigError(`Expected throttleProcessor option key to be a function, got ${describe(options.key)}`);
  if (options.cost !== undefined && typeof options.cost !== 'function')
    throw new ThrottleConfigError(`Expected throttleProcessor option cost to be a function, got ${describe(options.cost)}`);
  const waitMs = options.waitMs ?? 250;
  checkDelay('throttleProcessor waitMs', waitMs);
  const { maxStartedAttempts } = options;
  if (maxStartedAttempts !== undefined) checkWhole('throttleProcessor maxStartedAttempts', maxStartedAttempts, 1);
  // How long the calls run, from start to completion: a slot frees a window after its call completed.
  let holdMs = 0;

  return async (job, token, signal) => {
    const key = await options.key(job);
    // Waits in the worker rather than be delayed again: one more start would fail the job, or the job
    // was delayed twice since its last run (to its place, then to its slot), which bounds its delays.
    const waitHere = (maxStartedAttempts !== undefined && job.attemptsStarted >= maxStartedAttempts) || job.attemptsStarted - job.attemptsMade > MAX_DELAYS;
    let started = false;
    const run = async (): Promise<R> => {
      started = true;
      const startedAt = performance.now();
      try {
        return await processor(job, token, signal);
      } finally {
        // The longer runs count most: the line's windows must not run ahead of the log's.
        holdMs = Math.max(performance.now() - startedAt, holdMs * (1 - HOLD_DECAY));
      }
    };
    try {
      return await throttle.schedule(key, run, {
        ...(waitHere ? {} : { maxDelayMs: waitMs }),
        ...(options.cost === undefined ? {} : { cost: options.cost(job) }),
        ...(signal === undefined ? {} : { signal }),
      });
    } catch (error) {
      if (started || token === undefined) throw error;
      if (error instanceof RateLimitedError) {
        const toSlot = await lateForItsPlace(throttle, job, error);
        const delayMs = toSlot
          ? error.retryAfterMs
          : // Behind the jobs already delayed on the key, in every worker; the line itself is an estimate.
            await throttle.lineUp(error.key, error.retryAfterMs, holdMs).catch(() => error.retryAfterMs);
        const to = toSlot ? 'its slot' : 'its place in the line';
        throttle.notify('debug', { message: `BullMQ job ${job.id} delayed ${delayMs} ms, to ${to}`, key: error.key });
        await job.moveToDelayed(Date.now() + delayMs, token);
        throw new DelayedError(`vendor-throttle: delayed ${delayMs} ms, to ${to} on key "${error.key}"`);
      }
      if (error instanceof ThrottleClosedError) {
        // Not the job's failure: another worker takes it.
        await job.moveToDelayed(Date.now(), token);
        throw new DelayedError('vendor-throttle: the throttle closed before the job could start');
      }
      throw error;
    }
  };
}
