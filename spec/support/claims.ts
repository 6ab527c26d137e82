import { expect } from 'chai';
import type { ClaimRequest, ClaimResult, ReserveResult, Store } from '../../lib/store.js';
import type { Dependency } from '../../lib/slot-plan.js';
import type { ModelClaim, ReferenceModel } from './model.js';

/** A store under a property: its clock moved by `advance`, read exactly where the test controls it. */
export interface ClaimSubject {
  advance(ms: number): Promise<void>;
  readonly clock?: () => number;
}

/**
 * A claim as a throttle makes it: told to wait (`early`) and `wait` given, it waits and claims
 * again, three times at most. Each answer must be the model's at the reading the store's could be
 * (Redis's fractional clock may round either way), and is applied to the model at that reading.
 */
export async function claimPinned(
  subject: ClaimSubject,
  store: Store,
  model: ReferenceModel,
  keys: readonly string[],
  request: ClaimRequest,
  modelClaim: ModelClaim,
  wait: boolean,
): Promise<ClaimResult> {
  for (let attempt = 0; ; attempt++) {
    const exact = subject.clock?.();
    const result = await store.claim!(request);
    const nows = exact !== undefined ? [exact] : [result.now, result.now - 0.5];
    const answers = nows.map((now) => model.claim(keys, now, modelClaim, result.members, false));
    const at = Math.max(
      0,
      answers.findIndex((answer) => answer.status === result.status && answer.waitMs === result.waitMs),
    );
    expect({ status: result.status, waitMs: result.waitMs }, `claim on ${keys.join('+')}`).to.deep.equal(answers[at]);
    model.claim(keys, nows[at]!, modelClaim, result.members);
    if (result.status !== 'early' || !wait || attempt === 2) return result;
    await subject.advance(result.waitMs);
  }
}

/**
 * A slot the properties booked, in their order: a call's, or a reservation's (`reserved`: a slot,
 * not a call, until a claim makes it one, at the reservation's place in the order).
 */
export interface BookedSlot {
  members: readonly string[];
  start: number;
  release: number;
  hold: number;
  cost: number;
  open: boolean;
  reserved?: { readonly bound: number; readonly deps: readonly Dependency[]; claimable: boolean };
}

/** The slot a booking answered (`result`, booked), held `hold`; a reservation's claimable at its bound. */
export function bookedSlot(result: ReserveResult, hold: number, cost: number, reserved: boolean): BookedSlot {
  const release = result.startAt + hold;
  const slot = { members: result.members, start: result.startAt, release, hold, cost, open: true };
  return reserved ? { ...slot, reserved: { bound: release, deps: result.deps ?? [], claimable: true } } : slot;
}

/**
 * What a claim's answer does to the properties' bookings: `started`, the target becomes the call's
 * slot (new members, never seen before, held `maxHoldMs` from the claim); `moved`, its slots left
 * and no call starts on them; `used` or `late`, it can be claimed no more.
 */
export function claimed<T extends BookedSlot>(result: ClaimResult, target: T, booked: T[], seen: Set<string>, maxHoldMs: number): void {
  if (result.status === 'started') {
    for (const member of result.members) {
      expect(seen.has(member), 'member reused').to.equal(false);
      seen.add(member);
    }
    Object.assign(target, { members: result.members, start: result.now, release: result.now + maxHoldMs, hold: maxHoldMs, reserved: undefined });
  } else if (result.status === 'moved') {
    booked.splice(booked.indexOf(target), 1);
  } else if (result.status !== 'early') {
    target.reserved!.claimable = false;
  }
}
