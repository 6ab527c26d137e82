import type { Grant } from './completions.js';
import { ReservationError, ThrottleConfigError } from './errors.js';
import { describe } from './rules.js';
import { MOST_DEPS, type Dependency } from './slot-plan.js';
import type { ReserveResult } from './store.js';
import type { Call, ReservedSlots } from './store-client.js';

/**
 * Reservations (docs/design.md, "Reservations"): a slot booked now for a call made later, by this
 * process or another (a function invoked again by its platform's delay). The slot is booked in the
 * key's log like any call's, so every process counts it; its token names it, and a claim
 * (`Store.claim`) starts the call on it, once.
 */

/** What `Throttle.reserve()` answers: when the call may start, and the token to make it with. */
export interface Reservation {
  /** The user key, normalized: the first of `keys`. */
  readonly key: string;
  /** Every key the slot counts in, normalized, in the order given (one, or a user's and an app-wide one). */
  readonly keys: readonly string[];
  /** Slots reserved. */
  readonly cost: number;
  /** ms from the answer until the slot starts (0: now). */
  readonly waitMs: number;
  /** When the call may start: `Date.now()` plus `waitMs` when the answer came (ms since the epoch, rounded up). */
  readonly startAt: number;
  /**
   * The last moment a call surely starts with the token: the slot's start + the throttle's
   * `reservationGraceMs`, counted from when the reservation was asked for (up to a round trip
   * before `startAt` + the grace).
   */
  readonly claimBy: number;
  /** Pass it to `schedule(key, fn, { token })` then, in any process sharing the store. A short ASCII string. */
  readonly token: string;
}

/** A token's content: the throttle's name, and the slots it names. */
export interface TokenContent extends ReservedSlots {
  readonly name: string;
}

const PREFIX = 'vt1.';
/** Longest token read: one of 1,000 slots fits well within it. */
const MAX_TOKEN = 64_000;
/** Most keys a token names: a call of several keys counts in a few (a user's, an app-wide one). */
const MOST_KEYS = 16;
/** A member as the stores write them: `r<n>` (MemoryStore), `<n>.<tag>` (RedisStore), a reservation's with `~<hash>`. */
const MEMBER = /^[A-Za-z0-9._~-]{1,64}$/;

/**
 * What a reservation booked for `call` (`grant`, in the throttle `name`'s store) tells its caller.
 * The store decided between the ask and the answer: the slot surely starts by `startAt`, and surely
 * can still be claimed at `claimBy`.
 */
export function reservationOf(name: string, call: Call, grant: Grant, maxHoldMs: number, graceMs: number): Reservation {
  const { result } = grant;
  const now = Date.now();
  const askedAt = now - (performance.now() - grant.askedAt);
  const token = encodeToken(tokenContentOf(name, call, result, maxHoldMs, graceMs));
  return {
    key: call.key,
    keys: [call.key, ...call.also.map((part) => part.key)],
    cost: call.cost,
    waitMs: result.waitMs,
    startAt: Math.ceil(now + result.waitMs),
    claimBy: Math.floor(askedAt + result.waitMs + graceMs),
    token,
  };
}

/** What the token of a reservation booked for `call` (`result`) names: its slots at their bound (start + `maxHoldMs` + `graceMs`), and their dependencies. */
export function tokenContentOf(name: string, call: Call, result: ReserveResult, maxHoldMs: number, graceMs: number): TokenContent {
  const also = call.also.map((part) => part.encoded);
  return {
    name,
    key: call.encoded,
    also,
    members: result.members,
    bound: result.startAt + maxHoldMs + graceMs,
    start: result.startAt,
    deps: result.deps ?? [],
  };
}

export function encodeToken(content: TokenContent): string {
  const deps = content.deps.length === 0 ? {} : { d: content.deps };
  const also = content.also.length === 0 ? {} : { a: content.also };
  const json = JSON.stringify({ n: content.name, k: content.key, ...also, m: content.members, b: content.bound, s: content.start, ...deps });
  return PREFIX + Buffer.from(json, 'utf8').toString('base64url');
}

/**
 * A token read back, checked for shape before anything is asked of the store; a token that is not
 * one is `ReservationError` ('malformed'). `key` is the call's user key (for the error).
 */
export function decodeToken(token: unknown, key: string): TokenContent {
  if (typeof token !== 'string') throw new ThrottleConfigError(`Expected token to be a string from Throttle.reserve(), got ${describe(token)}`, 'token');
  const malformed = (detail: string): never => {
    throw new ReservationError(key, 'malformed', `${detail}; expected a token from Throttle.reserve(), as it gave it`);
  };
  if (token.length > MAX_TOKEN) return malformed(`it is ${token.length} characters long`);
  if (!token.startsWith(PREFIX) || !/^[A-Za-z0-9_-]+$/.test(token.slice(PREFIX.length))) return malformed(`it does not start with "${PREFIX}" and base64url`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(token.slice(PREFIX.length), 'base64url').toString('utf8'));
  } catch {
    return malformed('its content is not JSON');
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) return malformed('its content is not an object');
  const { n, k, a = [], m, b, s, d = [], ...rest } = parsed as Record<string, unknown>;
  if (Object.keys(rest).length > 0) return malformed(`it has fields it should not (${Object.keys(rest).slice(0, 3).join(', ')})`);
  if (typeof n !== 'string' || n.length === 0 || n.length > 100) return malformed('it names no throttle');
  if (typeof k !== 'string' || k.length === 0) return malformed('it names no key');
  if (
    !Array.isArray(a) ||
    a.length >= MOST_KEYS ||
    !a.every((other) => typeof other === 'string' && other.length > 0) ||
    new Set([k, ...a]).size !== a.length + 1
  )
    return malformed('its keys are not distinct keys');
  if (!Array.isArray(m) || m.length === 0 || m.length > 1_000 || !m.every((member) => typeof member === 'string' && MEMBER.test(member)))
    return malformed('its slots are not slots');
  if (new Set(m).size !== m.length) return malformed('it names a slot twice');
  if (typeof b !== 'number' || !Number.isSafeInteger(b) || b < 0 || typeof s !== 'number' || !Number.isSafeInteger(s) || s < 0 || s > b)
    return malformed('its times are not times');
  if (
    !Array.isArray(d) ||
    d.length > MOST_DEPS ||
    !d.every(
      (dep) =>
        Array.isArray(dep) &&
        (dep.length === 2 || (dep.length === 3 && Number.isSafeInteger(dep[2]) && dep[2] >= 1 && dep[2] <= a.length)) &&
        typeof dep[0] === 'string' &&
        MEMBER.test(dep[0]) &&
        Number.isSafeInteger(dep[1]) &&
        dep[1] >= 0,
    )
  )
    return malformed('its dependencies are not slots, windows and keys');
  return { name: n, key: k, also: a as string[], members: m as string[], bound: b, start: s, deps: d as Dependency[] };
}
