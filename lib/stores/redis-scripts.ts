import { readFileSync } from 'node:fs';
import { StoreUnavailableError } from '../errors.js';
import { sourceOfLetter, type LearnedLimit } from '../learning.js';
import { LEARNED, PAUSED, RECOVERING } from '../slot-plan.js';
import type { ClaimStatus } from '../store.js';

/**
 * The codes the scripts and this side share, declared once: every script is loaded after a line
 * that declares each as a Lua local, `VT_<GROUP>_<NAME>` (`VT_OP_DECIDE`, `VT_STATUS_BOOKED`, …).
 */
export const CODES = {
  /** lua/batch.lua: the first field of each operation (its fields: the script's header). */
  op: { decide: 1, decideKeys: 2, complete: 3, leave: 4, check: 5, checkFull: 6, tidy: 7, paused: 8, witness: 9 },
  /**
   * A decided call's status (lua/includes/decide.lua); `notMade`: its key was found lost, asked
   * again once put back; `bookedNow`: booked to start at once, answered in this one value;
   * `bookedDeps`: a reservation booked with its dependencies, answered in six.
   */
  status: { refused: 0, booked: 1, deferred: 2, notMade: 3, bookedNow: 4, bookedDeps: 5 },
  /** A reservation's dependencies, at most (lua/includes/decide.lua, vt_deps; lib/slot-plan.ts, reservationDeps). */
  reserve: { mostDeps: 128 },
  /** The first value of a batch's reply: done, or nothing done because the namespace's epoch changed. */
  batch: { done: 1, epochChanged: 3, doneUnderChangedEpoch: 4 },
  /** What a key's check found (lua/includes/check.lua). */
  check: { whole: 0, lost: 1, held: 2 },
  /**
   * The slack a log's life gets beyond what its latest booking needs (its retain, within these
   * bounds), so that the next bookings of the process need not set it again (lua/includes/decide.lua).
   */
  expiry: { slackMinMs: 5000, slackMaxMs: 10_000 },
  /**
   * What a claim of reserved slots found (lua/claim.lua); `epochChanged`: nothing, the namespace's
   * epoch changed (the store recovers, then claims again); `reserved`: the least number of a
   * reservation's member (lib/stores/redis-store.ts), which only a claim takes.
   */
  claim: { started: 1, early: 2, late: 3, used: 4, moved: 5, epochChanged: 6, reserved: 10_000_000_000_000 },
  /** A decision's rule index when no configured rule set the start: none, a vendor pause, a hold after a loss, a learned limit of another window. */
  rule: { none: -1, paused: PAUSED, recovering: RECOVERING, learned: LEARNED },
} as const;

/** `CODES` as Lua locals, one line. */
const LUA_CODES = Object.entries(CODES)
  .flatMap(([group, codes]) => Object.entries(codes).map(([name, value]) => `local VT_${group.toUpperCase()}_${snakeCase(name)} = ${value}`))
  .join('; ');

function snakeCase(name: string): string {
  return name.replace(/[A-Z]/g, (letter) => `_${letter}`).toUpperCase();
}

/**
 * The Lua scripts of the Redis store, read once from `lib/lua/*.lua` with their `--- @include "name"`
 * lines replaced by `lib/lua/includes/name.lua`. Command names carry a version so that two library
 * versions sharing one client never run each other's script.
 */
export const SCRIPT_VERSION = 32;

/** A script: its name (the ioredis command it is defined as) and its text. */
export interface ScriptDefinition {
  readonly name: string;
  readonly lua: string;
}

const INCLUDE = /^--- @include "([a-z-]+)"$/gm;

function load(file: string): string {
  const source = readFileSync(new URL(`../lua/${file}.lua`, import.meta.url), 'utf8');
  return `${LUA_CODES}\n${source}`.replace(INCLUDE, (_line, name: string) => readFileSync(new URL(`../lua/includes/${name}.lua`, import.meta.url), 'utf8'));
}

export const scripts = {
  batch: { name: `vtBatch${SCRIPT_VERSION}`, lua: load('batch') },
  inspect: { name: `vtInspect${SCRIPT_VERSION}`, lua: load('inspect') },
  pause: { name: `vtPause${SCRIPT_VERSION}`, lua: load('pause') },
  learn: { name: `vtLearn${SCRIPT_VERSION}`, lua: load('learn') },
  restore: { name: `vtRestore${SCRIPT_VERSION}`, lua: load('restore') },
  epoch: { name: `vtEpoch${SCRIPT_VERSION}`, lua: load('epoch') },
  reset: { name: `vtReset${SCRIPT_VERSION}`, lua: load('reset') },
  keep: { name: `vtKeep${SCRIPT_VERSION}`, lua: load('keep') },
  alive: { name: `vtAlive${SCRIPT_VERSION}`, lua: load('alive') },
  reap: { name: `vtReap${SCRIPT_VERSION}`, lua: load('reap') },
  claim: { name: `vtClaim${SCRIPT_VERSION}`, lua: load('claim') },
} as const satisfies Record<string, ScriptDefinition>;

/**
 * Each script's reply, read as its header says it answers: a reply of another shape (a script of
 * another version under the same name, a proxy that rewrote it) fails as `StoreUnavailableError`
 * naming the script, instead of being taken for what it is not. lua/batch.lua's reply has its own
 * reader (lib/stores/redis-batch.ts).
 */
export const replies = {
  /**
   * inspect.lua: NOW, NEXT_FREE_IN, PAUSED_FOR, BOOKED_AHEAD, STORED, then per rule of `rules` and
   * per learned rule of another window USED, RESET_IN, LIMIT; then the learned limits.
   */
  inspect(reply: unknown, rules: number) {
    const values = list('inspect', reply, 7 + 3 * rules);
    const [now, nextFreeInMs, pausedForMs, bookedAhead, stored, extra] = values.slice(0, 6).map((value) => number('inspect', value)) as [
      number,
      number,
      number,
      number,
      number,
      number,
    ];
    const count = rules + extra;
    const usage = numbers('inspect', values.slice(6, 6 + 3 * count), 3 * count);
    const learned = learnedOf('inspect', reply, values.slice(6 + 3 * count));
    return {
      now,
      nextFreeInMs,
      pausedForMs,
      bookedAhead,
      stored: stored === 1,
      rules: Array.from({ length: count }, (_, r) => ({ used: usage[3 * r]!, resetInMs: usage[3 * r + 1]!, limit: usage[3 * r + 2]! })),
      learned,
    };
  },
  /** learn.lua: CHANGED, PAUSED_UNTIL, HELD, then the learned limits in force. */
  learn(reply: unknown) {
    const values = list('learn', reply, 3);
    return {
      changed: number('learn', values[0]) === 1,
      pausedUntil: number('learn', values[1]),
      held: number('learn', values[2]),
      learned: learnedOf('learn', reply, [values.length - 3, ...values.slice(3)], 4),
    };
  },
  /** pause.lua: the end of the pause in force (store clock ms). */
  pause: (reply: unknown): number => number('pause', reply),
  /** claim.lua: STATUS, NOW_MS, WAIT_MS. */
  claim(reply: unknown): { readonly status: ClaimStatus | 'epochChanged'; readonly now: number; readonly waitMs: number } {
    const [code, now, waitMs] = numbers('claim', reply, 3) as [number, number, number];
    const status = CLAIM_STATUSES[code];
    return status === undefined ? unexpected('claim', reply) : { status, now, waitMs };
  },
  /** keep.lua: the kept keys left, or -1. */
  keep: (reply: unknown): number => number('keep', reply),
  /** reap.lua: the slots removed. */
  reap: (reply: unknown): number => number('reap', reply),
  /** epoch.lua 'first': the epoch in force, and whether it is provisional. */
  epochFirst(reply: unknown): { readonly value: string; readonly provisional: boolean } {
    const [value, provisional] = list('epoch', reply, 2);
    if (typeof value !== 'string' || (provisional !== 0 && provisional !== 1)) return unexpected('epoch', reply);
    return { value, provisional: provisional === 1 };
  },
  /** epoch.lua 'lost': the epoch in force. */
  epochLost: (reply: unknown): string => (typeof reply === 'string' ? reply : unexpected('epoch', reply)),
  /** epoch.lua 'extend': the epoch in force, or null when there is none. */
  epochExtend: (reply: unknown): string | null => (reply === null || typeof reply === 'string' ? reply : unexpected('epoch', reply)),
  /** alive.lua 'stamp': the time written (-1: not written), and with READ what 'read' answers. */
  aliveStamp(reply: unknown, read: boolean): { readonly at: number; readonly stamps: unknown[] } {
    if (!read) return { at: number('alive', reply), stamps: [] };
    const [at, ...stamps] = list('alive', reply, 1);
    return { at: number('alive', at), stamps };
  },
  /** alive.lua 'read': NOW, then TAG, VALUE pairs (lib/stores/redis-liveness.ts reads them). */
  aliveRead: (reply: unknown): unknown[] => list('alive', reply, 1),
};

const CLAIM_STATUSES: Partial<Record<number, ClaimStatus | 'epochChanged'>> = {
  [CODES.claim.epochChanged]: 'epochChanged',
  [CODES.claim.started]: 'started',
  [CODES.claim.early]: 'early',
  [CODES.claim.late]: 'late',
  [CODES.claim.used]: 'used',
  [CODES.claim.moved]: 'moved',
};

/** A script's reply of another shape than its header says, as the store failure it is. */
export function unexpected(script: string, reply: unknown): never {
  let text: string;
  try {
    text = JSON.stringify(reply) ?? String(reply);
  } catch {
    // A value JSON cannot render (a BigInt, a cycle): named by its tag, and the failure still said.
    text = Object.prototype.toString.call(reply);
  }
  throw new StoreUnavailableError(
    `Unexpected reply from lua/${script}.lua: ${text.length > 100 ? `${text.slice(0, 97)}...` : text} (a script of another version under the same name, or a proxy that rewrote the reply?)`,
  );
}

/** A count N, then N learned limits of four values each (LIMIT, WINDOW, LAPSE_IN_MS, SOURCE); with `per`, the count is of values. */
function learnedOf(script: string, reply: unknown, values: readonly unknown[], per = 1): LearnedLimit[] {
  const n = number(script, values[0]) / per;
  if (!Number.isInteger(n) || values.length !== 1 + 4 * n) return unexpected(script, reply);
  return Array.from({ length: n }, (_, e) => ({
    limit: number(script, values[1 + 4 * e]),
    windowMs: number(script, values[2 + 4 * e]),
    lapsesInMs: number(script, values[3 + 4 * e]),
    source: sourceOfLetter(values[4 + 4 * e]),
  }));
}

function number(script: string, reply: unknown): number {
  return typeof reply === 'number' ? reply : unexpected(script, reply);
}

function numbers(script: string, reply: unknown, least: number): number[] {
  const values = list(script, reply, least);
  return values.map((value) => number(script, value));
}

/** An array of at least `least` values. */
function list(script: string, reply: unknown, least: number): unknown[] {
  return Array.isArray(reply) && reply.length >= least ? reply : unexpected(script, reply);
}
