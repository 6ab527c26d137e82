import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import { scripts } from '../../lib/stores/redis-scripts.js';

/** One reading of the server's `INFO commandstats` and `INFO cpu`. */
export interface ServerSnapshot {
  /** Calls and µs per command name (`evalsha`, `zadd`, `client|setinfo`, ...). */
  readonly commands: ReadonlyMap<string, { calls: number; usec: number }>;
  /** Seconds of CPU the server used (user + sys, main thread and all). */
  readonly cpuSeconds: number;
}

/** Commands the server ran between two snapshots, split the way the bench reports them. */
export interface ServerDelta {
  /** Every command by name, the bench's own snapshot `INFO` excluded. */
  readonly byCommand: Record<string, number>;
  /** EVALSHA calls (a script sent by its digest: the normal case). */
  readonly evalsha: number;
  /** EVAL calls (script sent in full: first use on a connection, or after NOSCRIPT). */
  readonly eval: number;
  /**
   * Everything else. `INFO commandstats` counts the commands a script runs through `redis.call`
   * too, so with a client that only sends scripts this is "commands run inside scripts".
   */
  readonly other: number;
  readonly total: number;
  /** µs the server spent in EVAL/EVALSHA (inner commands included). */
  readonly scriptUsec: number;
  readonly cpuSeconds: number;
}

const SCRIPT_COMMANDS = new Set(['eval', 'evalsha', 'eval_ro', 'evalsha_ro', 'fcall', 'fcall_ro']);

/**
 * Reads `INFO commandstats cpu` (one command, several sections: Redis ≥ 7). The `INFO` of one
 * snapshot is counted by the next one; {@link diffServer} takes it out.
 */
export async function serverSnapshot(control: Redis): Promise<ServerSnapshot> {
  const text = (await control.call('INFO', 'commandstats', 'cpu')) as string;
  const commands = new Map<string, { calls: number; usec: number }>();
  for (const match of text.matchAll(/^cmdstat_(\S+?):calls=(\d+),usec=(\d+)/gm)) {
    commands.set(match[1]!, { calls: Number(match[2]), usec: Number(match[3]) });
  }
  const cpu = (name: string): number => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(text)?.[1] ?? 0);
  return { commands, cpuSeconds: cpu('used_cpu_user') + cpu('used_cpu_sys') };
}

export function diffServer(before: ServerSnapshot, after: ServerSnapshot): ServerDelta {
  const byCommand: Record<string, number> = {};
  let evalsha = 0;
  let evalCalls = 0;
  let other = 0;
  let scriptUsec = 0;
  for (const [name, now] of after.commands) {
    const was = before.commands.get(name) ?? { calls: 0, usec: 0 };
    // The snapshot that opened this interval is one INFO the library did not send.
    const calls = now.calls - was.calls - (name === 'info' ? 1 : 0);
    if (calls <= 0) continue;
    byCommand[name] = calls;
    if (name === 'evalsha') evalsha += calls;
    else if (name === 'eval') evalCalls += calls;
    else other += calls;
    if (SCRIPT_COMMANDS.has(name)) scriptUsec += now.usec - was.usec;
  }
  return {
    byCommand,
    evalsha,
    eval: evalCalls,
    other,
    total: evalsha + evalCalls + other,
    scriptUsec,
    cpuSeconds: after.cpuSeconds - before.cpuSeconds,
  };
}

/** Commands one ioredis client wrote, counted client-side; scripts are named by their digest. */
export interface ClientCounts {
  /** `vtBatch3`, `vtInspect3`, or a plain command name (`ping`, `info`, ...). */
  readonly byName: Record<string, number>;
  readonly total: number;
}

const SCRIPT_BY_SHA = new Map<string, string>(
  Object.values(scripts).map(({ name, lua }): [string, string] => [createHash('sha1').update(lua).digest('hex'), name]),
);

interface SentCommand {
  readonly name: string;
  readonly args: unknown[];
}

/**
 * Counts every command `client` sends, by wrapping its `sendCommand` (which both direct calls and
 * (auto)pipelines go through). This tells the library's own commands apart from the ones Lua runs,
 * which `INFO commandstats` mixes together. A NOSCRIPT retry counts as a second command, as it is.
 */
export class CommandCounter {
  readonly #counts = new Map<string, number>();

  constructor(client: Redis) {
    const target = client as unknown as { sendCommand: (command: SentCommand, ...rest: unknown[]) => unknown };
    const original = target.sendCommand.bind(client);
    target.sendCommand = (command: SentCommand, ...rest: unknown[]): unknown => {
      const label = labelOf(command);
      this.#counts.set(label, (this.#counts.get(label) ?? 0) + 1);
      return original(command, ...rest);
    };
  }

  snapshot(): ClientCounts {
    const byName = Object.fromEntries(this.#counts);
    let total = 0;
    for (const count of this.#counts.values()) total += count;
    return { byName, total };
  }
}

function labelOf(command: SentCommand): string {
  const name = command.name.toLowerCase();
  if (name === 'evalsha' || name === 'eval') {
    const first = command.args[0];
    const sha = name === 'evalsha' ? String(first) : createHash('sha1').update(String(first)).digest('hex');
    return SCRIPT_BY_SHA.get(sha) ?? `${name}:${sha.slice(0, 8)}`;
  }
  return name;
}

export function diffClient(before: ClientCounts, after: ClientCounts): ClientCounts {
  const byName: Record<string, number> = {};
  for (const [name, count] of Object.entries(after.byName)) {
    const delta = count - (before.byName[name] ?? 0);
    if (delta > 0) byName[name] = delta;
  }
  return { byName, total: after.total - before.total };
}
