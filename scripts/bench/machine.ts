import { readFileSync } from 'node:fs';
import os from 'node:os';
import type { Redis } from 'ioredis';

export interface MachineInfo {
  readonly cpuModel: string;
  /** Logical CPUs this process may use (`os.availableParallelism()`). */
  readonly cores: number;
  /** Physical cores, from /proc/cpuinfo `cpu cores` (undefined when not reported). */
  readonly physicalCores: number | undefined;
  readonly node: string;
  readonly redis: string;
  readonly platform: string;
  readonly totalMemoryGiB: number;
}

/** Reads the CPU model from /proc/cpuinfo (Linux), falling back to `os.cpus()`. */
function cpuInfo(): { model: string; physical: number | undefined } {
  let text = '';
  try {
    text = readFileSync('/proc/cpuinfo', 'utf8');
  } catch {
    // not Linux
  }
  const field = (name: string): string | undefined => new RegExp(`^${name}\\s*:\\s*(.+)$`, 'm').exec(text)?.[1]?.trim();
  const model = field('model name') ?? field('Hardware') ?? os.cpus()[0]?.model ?? 'unknown';
  const cores = field('cpu cores');
  return { model, physical: cores === undefined ? undefined : Number(cores) };
}

/** What the numbers were measured on. `redis` is the version of the server the bench started. */
export async function machineInfo(control: Redis): Promise<MachineInfo> {
  const { model, physical } = cpuInfo();
  const server = (await control.call('INFO', 'server')) as string;
  const version = /^redis_version:(.+)$/m.exec(server)?.[1]?.trim() ?? 'unknown';
  return {
    cpuModel: model,
    cores: os.availableParallelism(),
    physicalCores: physical,
    node: process.version,
    redis: version,
    platform: `${os.platform()} ${os.release()} ${os.arch()}`,
    totalMemoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
  };
}
