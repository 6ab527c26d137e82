/**
 * `npm run soak`: many calls over many keys from several worker processes sharing one Redis,
 * against a simulated vendor with a silent per-user limit. Checks that nothing goes over the limit,
 * that each worker's heap is flat once its keys go idle, that Redis memory returns to its baseline
 * once the keys expire, and that every worker exits by itself after `close()` and `redis.quit()`.
 * Starts its own redis-server on a free port (needs `redis-server` on the PATH).
 *
 *     npm run soak -- [--calls 200000] [--keys 10000] [--workers 4] [--limit 5] [--window 500]
 *                     [--concurrency 200] [--max-hold-ms 10000]
 *
 * `--concurrency` is the number of calls a worker has under way at once (booking, sleeping or in
 * flight). Exit code 0 when the run is clean, 1 when it is not, 2 on a bad flag.
 */
import { parseArgs } from 'node:util';
import { formatNumber } from './bench/table.js';
import { formatReport, soakProblems } from './soak/report.js';
import { runSoak } from './soak/run.js';
import type { SoakOptions } from './soak/types.js';

class UsageError extends Error {}

function settings(): SoakOptions {
  const { values } = parseArgs({
    options: {
      calls: { type: 'string', default: '200000' },
      keys: { type: 'string', default: '10000' },
      workers: { type: 'string', default: '4' },
      limit: { type: 'string', default: '5' },
      window: { type: 'string', default: '500' },
      concurrency: { type: 'string', default: '200' },
      'max-hold-ms': { type: 'string', default: '10000' },
    },
    strict: true,
  });
  const whole = (flag: string, min: number, max: number): number => {
    const text = values[flag as keyof typeof values]!;
    const value = Number(text);
    if (!Number.isInteger(value) || value < min || value > max) throw new UsageError(`--${flag}: expected a whole number from ${min} to ${max}, got '${text}'`);
    return value;
  };
  const calls = whole('calls', 1, 10_000_000);
  return {
    calls,
    keys: Math.min(whole('keys', 1, 10_000_000), calls),
    workers: whole('workers', 1, 64),
    limit: whole('limit', 1, 1_000),
    windowMs: whole('window', 10, 3_600_000),
    mode: 'wait',
    concurrency: whole('concurrency', 1, 100_000),
    maxHoldMs: whole('max-hold-ms', 100, 600_000),
    latencyMs: { min: 5, max: 55 },
  };
}

async function main(): Promise<void> {
  let options: SoakOptions;
  try {
    options = settings();
  } catch (error) {
    console.error(error instanceof Error ? error.message : String(error));
    process.exitCode = 2;
    return;
  }
  let lastShown = 0;
  const report = await runSoak({
    ...options,
    onProgress: ({ elapsedMs, done, calls, redisUsedMemory, redisKeys }) => {
      if (elapsedMs - lastShown < 5_000 && done < calls) return;
      lastShown = elapsedMs;
      console.log(
        `  ${formatNumber(elapsedMs / 1000, 0).padStart(4)} s  ${formatNumber(done).padStart(9)} / ${formatNumber(calls)} calls  ` +
          `redis ${formatNumber(redisUsedMemory / 1024 / 1024, 1)} MB, ${formatNumber(redisKeys)} keys`,
      );
    },
  });
  console.log(`\n${formatReport(report)}`);
  if (soakProblems(report).length > 0) process.exitCode = 1;
}

// No top-level await, like the other scripts (specs import their modules).
main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
