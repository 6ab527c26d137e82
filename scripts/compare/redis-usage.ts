/** What one run cost the shared Redis: `INFO commandstats` and `INFO cpu` deltas, memory of its keys. */
import type { Redis } from 'ioredis';

export interface ServerReading {
  /** Calls per command name, every command Redis ran (those run inside Lua scripts included). */
  readonly calls: ReadonlyMap<string, number>;
  /** µs Redis spent in commands. */
  readonly usec: number;
  /** Redis process CPU, user + sys, seconds. */
  readonly cpuSeconds: number;
  /** When it was read (performance.now(), ms). */
  readonly at: number;
}

export interface ServerCost {
  /** Commands Redis ran, scripts' inner commands included, the reader's own INFO excluded. */
  readonly commands: number;
  readonly byCommand: Record<string, number>;
  /** µs Redis spent executing commands (`INFO commandstats` usec). */
  readonly usec: number;
  /** Redis CPU between the readings, less what an idle Redis uses in that time. */
  readonly cpuSeconds: number;
}

export async function readServer(control: Redis): Promise<ServerReading> {
  const text = (await control.call('INFO', 'commandstats', 'cpu')) as string;
  const calls = new Map<string, number>();
  let usec = 0;
  for (const match of text.matchAll(/^cmdstat_(\S+?):calls=(\d+),usec=(\d+)/gm)) {
    calls.set(match[1]!, Number(match[2]));
    usec += Number(match[3]);
  }
  const cpu = (name: string): number => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(text)?.[1] ?? 0);
  return { calls, usec, cpuSeconds: cpu('used_cpu_user') + cpu('used_cpu_sys'), at: performance.now() };
}

/**
 * Redis CPU seconds per second while nobody uses it (its timers, the reader's INFO): read over
 * `ms` at the start and taken out of every run's CPU.
 */
export async function idleCpu(control: Redis, ms: number): Promise<number> {
  const before = await readServer(control);
  await new Promise((resolve) => setTimeout(resolve, ms));
  const after = await readServer(control);
  return (after.cpuSeconds - before.cpuSeconds) / ((after.at - before.at) / 1000);
}

export function serverCost(before: ServerReading, after: ServerReading, idleCpuPerSecond: number): ServerCost {
  const byCommand: Record<string, number> = {};
  let commands = 0;
  for (const [name, now] of after.calls) {
    // The reading that opened the interval is one INFO nobody else sent.
    // The memory sample's SCAN and MEMORY USAGE are the reader's too (no contender sends them).
    if (name === 'scan' || name.startsWith('memory')) continue;
    const calls = now - (before.calls.get(name) ?? 0) - (name === 'info' ? 1 : 0);
    if (calls <= 0) continue;
    byCommand[name] = calls;
    commands += calls;
  }
  return {
    commands,
    byCommand,
    usec: after.usec - before.usec,
    cpuSeconds: Math.max(0, after.cpuSeconds - before.cpuSeconds - (idleCpuPerSecond * (after.at - before.at)) / 1000),
  };
}

/** Keys in the database and the bytes `MEMORY USAGE` reports for all of them. */
export async function keyMemory(control: Redis): Promise<{ keys: number; bytes: number }> {
  let cursor = '0';
  let keys = 0;
  let bytes = 0;
  do {
    const [next, found] = await control.scan(cursor, 'COUNT', 1000);
    cursor = next;
    if (found.length === 0) continue;
    const pipeline = control.pipeline();
    for (const key of found) pipeline.call('MEMORY', 'USAGE', key, 'SAMPLES', '0');
    for (const [error, value] of (await pipeline.exec()) ?? []) {
      if (!error && typeof value === 'number') {
        keys++;
        bytes += value;
      }
    }
  } while (cursor !== '0');
  return { keys, bytes };
}
