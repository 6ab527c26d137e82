import { readFileSync } from 'node:fs';

/**
 * The Lua scripts of the Redis store, read once from `lib/lua/*.lua` with their `--- @include "name"`
 * lines replaced by `lib/lua/includes/name.lua`. Command names carry a version so that two library
 * versions sharing one client never run each other's script.
 */
export const SCRIPT_VERSION = 8;

/** A script, registered with ioredis `defineCommand` without a fixed number of keys: each call passes it first. */
export interface ScriptDefinition {
  readonly name: string;
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
  batch: { name: `vtBatch${SCRIPT_VERSION}`, lua: load('batch') },
  inspect: { name: `vtInspect${SCRIPT_VERSION}`, lua: load('inspect') },
  pause: { name: `vtPause${SCRIPT_VERSION}`, lua: load('pause') },
  restore: { name: `vtRestore${SCRIPT_VERSION}`, lua: load('restore') },
  epoch: { name: `vtEpoch${SCRIPT_VERSION}`, lua: load('epoch') },
} as const satisfies Record<string, ScriptDefinition>;
