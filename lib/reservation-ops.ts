import type { Booker, BookerContext } from './booker.js';
import { alsoOf, keysOf, limitedError, prepareCall, reasonOf, type CallDefaults } from './calls.js';
import { grantOf, type Grant } from './completions.js';
import { ReservationError, StoreUnavailableError, ThrottleConfigError } from './errors.js';
import type { KeysInput } from './keys.js';
import { RESERVE_OPTIONS, type ReserveOptions } from './options.js';
import { decodeToken, reservationOf, type Reservation, type TokenContent } from './reservations.js';
import { describe } from './rules.js';
import { PAUSED } from './slot-plan.js';
import type { ReserveResult } from './store.js';
import type { Call } from './store-client.js';
import { checkKnown } from './validate.js';

/** What a throttle's reservations need of it: what its bookings do, and the booker itself. */
export interface ReservationOpsContext extends Pick<BookerContext, 'name' | 'store' | 'maxHoldMs' | 'graceMs' | 'storeClient' | 'slots' | 'notify'> {
  /** What a reservation gets unless its options say otherwise: `maxDelayMs` as given, in `throw` mode too. */
  readonly reserveDefaults: CallDefaults;
  readonly callDefaults: CallDefaults;
  readonly booker: Booker;
}

/**
 * The throttle's reservations (docs/design.md, "Reservations"): `reserve()` and `release()`, the
 * claim that starts a call on a token, and the slot a call reserves for itself on a store that
 * announces no completions. Token format: lib/reservations.ts.
 */
export class ReservationOps {
  readonly #c: ReservationOpsContext;

  constructor(context: ReservationOpsContext) {
    this.#c = context;
  }

  /** See `Throttle.reserve()`. */
  async reserve(key: KeysInput, options?: ReserveOptions): Promise<Reservation> {
    const { name, store, booker, maxHoldMs, graceMs } = this.#c;
    if (options !== undefined && (options === null || typeof options !== 'object'))
      throw new ThrottleConfigError(`Expected reserve options to be an object, got ${describe(options)}`, 'options');
    if (options !== undefined) checkKnown('reserve', options, RESERVE_OPTIONS);
    if (store.claim === undefined) throw new ThrottleConfigError('Expected a store that keeps reservations (Store.claim), got one without', 'store');
    const prepared = prepareCall(this.#c.reserveDefaults, key, options);
    const call: Call = { ...(prepared instanceof Promise ? await prepared : prepared), graceMs };
    booker.checkKeys(call);
    const grant = await booker.enter(call);
    // Booked in the throttle's store: a local fallback's booking could be claimed by no other process.
    if (grant.store !== store) {
      this.#c.slots.release(call, grant);
      throw this.#c.storeClient.failure ?? new StoreUnavailableError('The store cannot be reached: a reservation cannot be made in this process alone');
    }
    return reservationOf(name, call, grant, maxHoldMs, graceMs);
  }

  /** See `Throttle.release()`. */
  async release(key: KeysInput, token: string): Promise<void> {
    const content = decodeToken(token, typeof key === 'string' || typeof key === 'number' ? String(key) : describe(key));
    const prepared = prepareCall(this.#c.callDefaults, key, { cost: content.members.length });
    const call = prepared instanceof Promise ? await prepared : prepared;
    this.#checkToken(call, content);
    await this.#c.storeClient.claim(call, content, this.#c.graceMs, true);
  }

  /**
   * Whether every call reserves its slot: on a store that announces no completions (a Redis over
   * HTTP), a call does not wait by asking again (see `reserveAndClaim`).
   */
  get everyCallReserves(): boolean {
    return this.#c.store.announces === false && this.#c.store.claim !== undefined;
  }

  /**
   * The call's slot as a reservation of its own (`reserve()` and the claim of its token), over a
   * store that announces nothing: one decision, then at the slot's start one claim (it checks the
   * vendor pause too), where a waiting call would ask again each time its slot could be free. A
   * slot that starts now and depends on no call is started on as it is, with no claim.
   */
  async reserveAndClaim(call: Call): Promise<Grant> {
    const { booker } = this.#c;
    const reservation: Call = { ...call, graceMs: this.#c.graceMs, own: true };
    const grant = await booker.enter(reservation);
    const { result } = grant;
    const deps = result.deps ?? [];
    // Decided by a local fallback (the store cannot be reached): no other process could count a
    // reservation there; the call books as any call.
    if (grant.store !== this.#c.store) {
      this.#c.slots.release(call, grant);
      return booker.book(call);
    }
    if (result.waitMs === 0 && deps.length === 0) return booker.startable(call, grant);
    this.#c.notify('delayed', { key: call.key, cost: call.cost, delayMs: result.waitMs, reason: reasonOf(call, result), ...alsoOf(call) });
    const content = booker.ownToken(call, result);
    try {
      // A slot at the end of a vendor pause: the end is the retries' (Booker.behindRetries).
      await booker.sleepUntil(call, keysOf(call), grant.startsAt + (result.ruleIndex === PAUSED ? booker.behindRetries(call) : 0));
      return await this.claim(call, content);
    } catch (error) {
      // Not started: the slot is given back (its members carry the hash of their dependencies:
      // only a claim can take them out).
      booker.giveBack(call, content);
      if (!(error instanceof ReservationError)) throw error;
      // Its grace over (a stall): a slot as any call's. Too far for the call's maxDelayMs: refused.
      if (error.reason === 'late') return booker.book(call);
      throw limitedError(call, result, error.retryAfterMs);
    }
  }

  /**
   * The call's start on its reservation's slot (`Store.claim`): waiting for the slot's start
   * and for the calls it depends on to have released a window before, within `maxDelayMs`; booked
   * as any call where the slot moved.
   */
  async claim(call: Call, token: TokenContent): Promise<Grant> {
    const { booker } = this.#c;
    this.#checkToken(call, token);
    for (;;) {
      booker.aborted(call)?.throwIfAborted();
      const { result, booking } = await this.#c.storeClient.claim(call, token, this.#c.graceMs);
      switch (result.status) {
        case 'started': {
          const started: ReserveResult = {
            status: 'booked',
            waitMs: 0,
            retryMs: 0,
            startAt: result.now,
            now: result.now,
            ruleIndex: -1,
            members: result.members,
          };
          return booker.startable(call, grantOf(started, booking));
        }
        case 'early':
          if (performance.now() + result.waitMs > call.deadline)
            throw new ReservationError(call.key, 'early', `its call may start in ${result.waitMs} ms, past the call's maxDelayMs`, result.waitMs);
          await booker.sleepUntil(call, keysOf(call), booking.receivedAt + result.waitMs);
          break;
        case 'late':
          throw new ReservationError(call.key, 'late', 'its grace is over: a call started now could reach the vendor after its slot counts no longer');
        case 'used':
          throw new ReservationError(call.key, 'used', 'a call was made with it already');
        default:
          // Moved (a vendor pause, a lower learned limit, a store that lost it, a call it depends on still running): a slot as any call's.
          this.#c.notify('debug', {
            message: "the reservation's slot moved (a vendor pause, a lower learned limit, lost, or a call it depends on still running): booking again",
            key: call.key,
          });
          return booker.book(call);
      }
    }
  }

  /** A token is this throttle's, for the call's keys (in any order: a claim takes them in the token's). */
  #checkToken(call: Call, token: TokenContent): void {
    const { name } = this.#c;
    if (token.name !== name) throw new ReservationError(call.key, 'otherThrottle', `it was made by the throttle "${token.name}", not "${name}"`);
    const keys = [call.encoded, ...call.also.map((part) => part.encoded)];
    if (token.also.length !== call.also.length || ![token.key, ...token.also].every((encoded) => keys.includes(encoded)))
      throw new ReservationError(call.key, 'otherKey', `it was made for ${token.also.length > 0 ? 'other keys' : 'another key'}`);
  }
}
