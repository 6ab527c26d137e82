import { formatRule } from './rule-label.js';

/** A rule as errors report it (the shape of `Rule` in lib/rules.ts, which imports this file). */
interface Rule {
  readonly limit: number;
  readonly windowMs: number;
}

/** Stable machine-readable codes, one per error class. */
export type ThrottleErrorCode =
  'ERR_THROTTLE_CONFIG' | 'ERR_RATE_LIMITED' | 'ERR_QUEUE_FULL' | 'ERR_STORE_UNAVAILABLE' | 'ERR_THROTTLE_CLOSED' | 'ERR_CALL_TIMEOUT' | 'ERR_RESERVATION';

/** Base class of every error vendor-throttle raises itself. */
export class ThrottleError extends Error {
  readonly code: ThrottleErrorCode;

  constructor(code: ThrottleErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}

/**
 * A bad argument: options, rules, keys or call arguments that cannot work, or a flag of the
 * `vendor-throttle` command. Raised before anything is reserved (the command: before anything is sent).
 */
export class ThrottleConfigError extends ThrottleError {
  /**
   * The argument that is wrong, as the caller wrote it: an option (`maxDelayMs`, `recovery.graceMs`,
   * `retries`, an unknown one such as `maxDelay`), a parameter (`key`, `fn`, `options`), or a flag of
   * the command (`--max-delay-ms`, `<file>` for its input file).
   */
  readonly argument: string | undefined;

  constructor(message: string, argument?: string) {
    super('ERR_THROTTLE_CONFIG', message);
    this.argument = argument;
  }
}

/**
 * What set a call's start: a rule that is full, a vendor's pause, the store putting back data it
 * lost, or calls booked before it.
 */
export type WaitReason = Rule | 'paused' | 'recovering' | 'booked' | 'learned';

function describeReason(reason: WaitReason): string {
  if (reason === 'paused') return 'a vendor pause';
  if (reason === 'recovering') return 'the store putting back calls after it lost data (a Redis restarted empty, flushed, or evicting)';
  if (reason === 'booked') return 'calls booked before it';
  if (reason === 'learned') return 'a limit learned from the vendor (Throttle.learn)';
  return `rule ${formatRule(reason)}`;
}

/**
 * The call would have to wait longer than `maxDelayMs` (0 in `throw` mode).
 * Nothing was reserved and `fn` was not called; retrying after `retryAfterMs` is expected to succeed
 * unless other callers take the slot first.
 */
export class RateLimitedError extends ThrottleError {
  /** The user key, as given to `schedule()`. */
  readonly key: string;
  /** The rule that is full, or `undefined` when the reason is another (`reason` says which). */
  readonly rule: Rule | undefined;
  /**
   * Why: `'rule'` (a rule is full), `'paused'` (the vendor asked to pause this key), `'recovering'`
   * (the store lost data, a restart without persistence, `FLUSHALL` or an eviction, and no call
   * starts until every process has put back the calls it made), or `'booked'` (calls booked earlier
   * for the key come first: first asked, first served), or `'learned'` (a limit the key learned from
   * its vendor, of a window no configured rule has: `Throttle.learn`).
   */
  readonly reason: 'rule' | Exclude<WaitReason, Rule>;
  /** Milliseconds until the call could start. */
  readonly retryAfterMs: number;

  constructor(key: string, cause: WaitReason, retryAfterMs: number) {
    super('ERR_RATE_LIMITED', `Rate limited on key "${preview(key)}" by ${describeReason(cause)}: retry in ${retryAfterMs} ms`);
    this.key = key;
    this.rule = typeof cause === 'object' ? cause : undefined;
    this.reason = typeof cause === 'object' ? 'rule' : cause;
    this.retryAfterMs = retryAfterMs;
  }
}

/** The key's line in this process already holds `maxQueued` calls. Nothing was queued. */
export class QueueFullError extends ThrottleError {
  readonly key: string;
  readonly maxQueued: number;

  constructor(key: string, maxQueued: number) {
    super('ERR_QUEUE_FULL', `Queue for key "${preview(key)}" is full (maxQueued ${maxQueued})`);
    this.key = key;
    this.maxQueued = maxQueued;
  }
}

/** The store could not be reached or failed; `fn` was not called. The original error is in `cause`. */
export class StoreUnavailableError extends ThrottleError {
  constructor(message: string, cause?: unknown) {
    super('ERR_STORE_UNAVAILABLE', message, { cause });
  }
}

/** `close()` was called: the throttle accepts no new work and rejects what was still waiting. */
export class ThrottleClosedError extends ThrottleError {
  constructor() {
    super('ERR_THROTTLE_CLOSED', 'Throttle is closed');
  }
}

/**
 * The call's `fn` did not settle within `timeoutMs`. The call had started: its slot keeps counting
 * for as long as the request may still reach the vendor (until its start + `maxHoldMs`, or until
 * `fn` settles after all and its completion is written).
 */
export class CallTimeoutError extends ThrottleError {
  readonly key: string;
  readonly timeoutMs: number;

  constructor(key: string, timeoutMs: number) {
    super('ERR_CALL_TIMEOUT', `Call on key "${preview(key)}" did not settle within ${timeoutMs} ms (timeoutMs)`);
    this.key = key;
    this.timeoutMs = timeoutMs;
  }
}

/**
 * Why a reservation's token could not be used (`schedule(key, fn, { token })`):
 * - `malformed`: not a token this library made (cut, altered, or not a string);
 * - `otherThrottle`: made by a throttle of another `name`;
 * - `otherKey`: reserved for another key than the call's;
 * - `early`: its slot starts further away than the call's `maxDelayMs` (`retryAfterMs` says when);
 * - `late`: its grace (`reservationGraceMs`) is over; its slot counts to its bound, and the call
 *   must reserve or schedule again;
 * - `used`: a call was made with it before (or booked a slot again when its slot had moved).
 */
export type ReservationProblem = 'malformed' | 'otherThrottle' | 'otherKey' | 'early' | 'late' | 'used';

/** A reservation's token cannot be used; `fn` was not called, and nothing was booked. */
export class ReservationError extends ThrottleError {
  /** The user key the call was made for. */
  readonly key: string;
  readonly reason: ReservationProblem;
  /** `early`: ms until the slot starts; 0 otherwise. */
  readonly retryAfterMs: number;

  constructor(key: string, reason: ReservationProblem, detail: string, retryAfterMs = 0) {
    super('ERR_RESERVATION', `Cannot use the reservation's token on key "${preview(key)}": ${detail}`);
    this.key = key;
    this.reason = reason;
    this.retryAfterMs = retryAfterMs;
  }
}

/** Shortens a user key for messages: keys may be 10 kB long or hold newlines. */
export function preview(key: string): string {
  const flat = JSON.stringify(key).slice(1, -1);
  return flat.length > 64 ? `${flat.slice(0, 61)}...` : flat;
}
