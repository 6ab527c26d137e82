import { readFileSync } from 'node:fs';
import { PAUSED, RECOVERING } from '../slot-plan.js';

/**
 * The codes the scripts and this side share, declared once: every script is loaded after a line
 * that declares each as a Lua local, `VT_<GROUP>_<NAME>` (`VT_OP_DECIDE`, `VT_STATUS_BOOKED`, …).
 */
export const CODES = {
  /** lua/batch.lua: the first field of each operation (its fields: the script's header). */
  op: { decide: 1, decideKeys: 2, complete: 3, leave: 4, check: 5, checkFull: 6, tidy: 7, paused: 8, witness: 9 },
  /**
   * A decided call's status (lua/includes/decide.lua); `notMade`: its key was found lost, asked
   * again once put back; `bookedNow`: booked to start at once, answered in this one value.
   */
  status: { refused: 0, booked: 1, deferred: 2, notMade: 3, bookedNow: 4 },
  /** The first value of a batch's reply: done, or nothing done because the namespace's epoch changed. */
  batch: { done: 1, epochChanged: 3, doneUnderChangedEpoch: 4 },
  /** What a key's check found (lua/includes/check.lua). */
  check: { whole: 0, lost: 1, held: 2 },
  /**
   * The slack a log's life gets beyond what its latest booking needs (its retain, within these
   * bounds), so that the next bookings of the process need not set it again (lua/includes/decide.lua).
   */
  expiry: { slackMinMs: 5000, slackMaxMs: 10_000 },
  /** A decision's rule index when no rule set the start: none, a vendor pause, a hold after a loss. */
  rule: { none: -1, paused: PAUSED, recovering: RECOVERING },
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
export const SCRIPT_VERSION = 25;

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
  line: { name: `vtLine${SCRIPT_VERSION}`, lua: load('line') },
  restore: { name: `vtRestore${SCRIPT_VERSION}`, lua: load('restore') },
  epoch: { name: `vtEpoch${SCRIPT_VERSION}`, lua: load('epoch') },
  reset: { name: `vtReset${SCRIPT_VERSION}`, lua: load('reset') },
  keep: { name: `vtKeep${SCRIPT_VERSION}`, lua: load('keep') },
  alive: { name: `vtAlive${SCRIPT_VERSION}`, lua: load('alive') },
  reap: { name: `vtReap${SCRIPT_VERSION}`, lua: load('reap') },
} as const satisfies Record<string, ScriptDefinition>;
