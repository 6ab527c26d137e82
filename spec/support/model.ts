import type { Rule } from '../../lib/rules.js';

/**
 * The reference model: what a store must answer, written the slow, obvious way. It keeps every slot
 * with its release time and, to place a new call, tries each candidate time in order and counts,
 * for every rule, the slots still inside the window. No sorting tricks, no index arithmetic.
 */
interface Slot {
  member: string;
  release: number;
}

interface KeyState {
  slots: Slot[];
  last: number;
  seq: number;
}

export interface ModelRequest {
  readonly rules: readonly Rule[];
  readonly cost: number;
  readonly maxDelayMs: number;
  readonly holdMs: number;
  readonly retainMs: number;
}

export class ReferenceModel {
  readonly #keys = new Map<string, KeyState>();

  reserve(key: string, now: number, request: ModelRequest): { granted: boolean; startAt: number; members: string[] } {
    const state = this.#state(key);
    state.slots = state.slots.filter((slot) => slot.release > now - request.retainMs);
    const candidates = [Math.max(now, state.last)];
    for (const slot of state.slots) for (const rule of request.rules) candidates.push(slot.release + rule.windowMs);
    candidates.sort((a, b) => a - b);
    const startAt = candidates.find(
      (t) =>
        t >= Math.max(now, state.last) &&
        request.rules.every(
          (rule) => state.slots.filter((slot) => slot.release + rule.windowMs > t).length <= rule.limit - request.cost,
        ),
    )!;
    if (startAt - now > request.maxDelayMs) return { granted: false, startAt, members: [] };
    const members: string[] = [];
    for (let i = 0; i < request.cost; i++) {
      state.seq += 1;
      members.push(String(state.seq));
      state.slots.push({ member: String(state.seq), release: startAt + request.holdMs });
    }
    state.last = startAt;
    return { granted: true, startAt, members };
  }

  settle(key: string, now: number, member: string, releaseAt: number | null, retainMs: number): void {
    const state = this.#state(key);
    state.slots = state.slots.filter((slot) => slot.release > now - retainMs);
    const slot = state.slots.find((s) => s.member === member);
    if (!slot) return;
    if (releaseAt === null) state.slots = state.slots.filter((s) => s !== slot);
    else slot.release = releaseAt;
  }

  #state(key: string): KeyState {
    let state = this.#keys.get(key);
    if (!state) this.#keys.set(key, (state = { slots: [], last: 0, seq: 0 }));
    return state;
  }
}
