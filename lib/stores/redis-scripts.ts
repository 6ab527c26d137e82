import { readFileSync } from 'node:fs';

/**
 * The Lua scripts of the Redis store, read once from `lib/lua/*.lua` with their `--- @include "name"`
 * lines replaced by `lib/lua/includes/name.lua`. Command names carry a version so that two library
 * versions sharing one client never run each other's script.
 */
export const SCRIPT_VERSION = 1;

export interface ScriptDefinition {
  readonly name: string;
  readonly numberOfKeys: number;
  readonly lua: string;
}

const INCLUDE = /^--- @include "([a-z-]+)"$/gm;

function load(file: string): string {
  const source = readFileSync(new URL(`../lua/${file}.lua`, import.meta.url), 'utf8');
  return source.replace(INCLUDE, (_line, name: string) =>
    readFileSync(new URL(`../lua/includes/${name}.lua`, import.meta.url), 'utf8'),
  );
}

export const scripts = {
  reserve: { name: `vtReserve${SCRIPT_VERSION}`, numberOfKeys: 3, lua: load('reserve') },
  settle: { name: `vtSettle${SCRIPT_VERSION}`, numberOfKeys: 3, lua: load('settle') },
  inspect: { name: `vtInspect${SCRIPT_VERSION}`, numberOfKeys: 2, lua: load('inspect') },
  pause: { name: `vtPause${SCRIPT_VERSION}`, numberOfKeys: 3, lua: load('pause') },
  confirm: { name: `vtConfirm${SCRIPT_VERSION}`, numberOfKeys: 3, lua: load('confirm') },
} as const satisfies Record<string, ScriptDefinition>;
