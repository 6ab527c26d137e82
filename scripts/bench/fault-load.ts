/**
 * The load of the data-loss benchmarks (cluster-faults.ts, evictions.ts): calls for every user at
 * twice the limit, evenly, spread over the processes (throttles) in turn, each a GET of the
 * simulated vendor; and what came of them.
 */
import type { Throttle } from '../../lib/index.js';

export interface LoadOptions {
  readonly throttles: readonly Throttle[];
  readonly users: readonly string[];
  readonly vendorUrl: string;
  readonly limit: number;
  readonly windowMs: number;
  /** Calls arrive over this long. */
  readonly arrivalMs: number;
  /** `performance.now()` of the first arrival. */
  readonly startedAt: number;
}

export interface LoadResult {
  readonly scheduled: number;
  /** Calls whose fn ran once, and more than once (must be 0). */
  readonly ranOnce: number;
  readonly ranTwice: number;
  /** Calls that failed (`<user>#<n>: <error>`). */
  readonly errors: string[];
}

/** Sends the calls and waits until every one has run or failed. */
export async function sendAtTwiceTheLimit(options: LoadOptions): Promise<LoadResult> {
  const { throttles, users, vendorUrl, startedAt } = options;
  // One call per user every windowMs / (2 × limit) ms.
  const perUser = Math.round((2 * options.limit * options.arrivalMs) / options.windowMs);
  const gapMs = options.arrivalMs / perUser;
  const runs = new Map<string, number>();
  const errors: string[] = [];
  const calls: Array<Promise<void>> = [];
  for (let n = 0; n < perUser; n++) {
    const wait = startedAt + n * gapMs - performance.now();
    if (wait > 0) await sleep(wait);
    for (const [u, user] of users.entries()) {
      const id = `${user}#${n}`;
      calls.push(
        throttles[(n * users.length + u) % throttles.length]!.schedule(user, async () => {
          runs.set(id, (runs.get(id) ?? 0) + 1);
          await (await fetch(`${vendorUrl}?user=${encodeURIComponent(user)}`)).text();
        }).catch((error: unknown) => {
          errors.push(`${id}: ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`);
        }),
      );
    }
  }
  await Promise.all(calls);
  const counts = [...runs.values()];
  return {
    scheduled: perUser * users.length,
    ranOnce: counts.filter((count) => count === 1).length,
    ranTwice: counts.filter((count) => count > 1).length,
    errors,
  };
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
