/** Result of driving one operation with a fixed number in flight for a fixed time. */
export interface LoadResult {
  /** Operations that finished inside the run (all of them: the run waits for the last ones). */
  readonly ops: number;
  /** Wall time from the first start to the last finish, in seconds. */
  readonly seconds: number;
  /** Node CPU (user + sys) over the run, in seconds. */
  readonly cpuSeconds: number;
}

/**
 * Keeps `concurrency` calls of `op` in flight until `durationMs` have passed, then waits for the
 * ones still running. The deadline is checked between calls, not with a timer: with an in-memory
 * store every call settles in microtasks and a timer would never get to run.
 * An error thrown by `op` stops the run and is rethrown.
 */
export async function runLoad(concurrency: number, durationMs: number, op: (index: number) => Promise<void>): Promise<LoadResult> {
  const cpuBefore = process.cpuUsage();
  const startedAt = performance.now();
  const deadline = startedAt + durationMs;
  let next = 0;
  let failure: { error: unknown } | undefined;
  const worker = async (): Promise<void> => {
    while (failure === undefined && performance.now() < deadline) {
      const index = next++;
      try {
        await op(index);
      } catch (error) {
        failure ??= { error };
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const seconds = (performance.now() - startedAt) / 1000;
  const cpu = process.cpuUsage(cpuBefore);
  if (failure !== undefined) throw failure.error;
  return { ops: next, seconds, cpuSeconds: (cpu.user + cpu.system) / 1e6 };
}

/** Sample recorder for latencies in ms, with percentiles. */
export class Latencies {
  #values = new Float64Array(1 << 16);
  #count = 0;

  get count(): number {
    return this.#count;
  }

  add(ms: number): void {
    if (this.#count === this.#values.length) {
      const grown = new Float64Array(this.#values.length * 2);
      grown.set(this.#values);
      this.#values = grown;
    }
    this.#values[this.#count++] = ms;
  }

  clear(): void {
    this.#count = 0;
  }

  /** Nearest-rank percentiles of everything recorded, e.g. `percentiles([50, 99])`. */
  percentiles(ps: readonly number[]): number[] {
    if (this.#count === 0) return ps.map(() => NaN);
    const sorted = this.#values.slice(0, this.#count).sort();
    return ps.map((p) => sorted[Math.min(this.#count - 1, Math.max(0, Math.ceil((p / 100) * this.#count) - 1))]!);
  }

  max(): number {
    let max = -Infinity;
    for (let i = 0; i < this.#count; i++) max = Math.max(max, this.#values[i]!);
    return max;
  }
}

/** Median of a non-empty list. */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}
