import { formatNumber, renderTable } from '../bench/table.js';
import type { SoakReport } from './types.js';

const MB = 1024 * 1024;
const mb = (bytes: number): string => `${formatNumber(bytes / MB, 1)} MB`;

/** Problems that make the run fail: calls over the limit, calls lost, a worker that did not end cleanly, keys that stay. */
export function soakProblems(report: SoakReport): string[] {
  const problems: string[] = [];
  if (report.violations > 0) problems.push(`${report.violations} arrivals over the limit at the vendor`);
  if (report.dropped > 0) problems.push(`${report.dropped} calls dropped by the vendor`);
  const errors = report.workers.reduce((sum, worker) => sum + worker.errors, 0);
  if (errors > 0)
    problems.push(
      `${errors} calls failed: ${report.workers
        .flatMap((worker) => worker.errorSamples)
        .slice(0, 3)
        .join('; ')}`,
    );
  if (report.received !== report.options.calls) problems.push(`the vendor received ${report.received} calls, not ${report.options.calls}`);
  for (const worker of report.workers) {
    if (worker.stuck)
      problems.push(`worker ${worker.index} did not exit by itself after close() and quit(): ${worker.activeResources.join(', ')} kept it alive`);
    else if (worker.exitCode !== 0) problems.push(`worker ${worker.index} exited with ${worker.exitCode}`);
  }
  if (report.redis.userKeysLeft > 0) {
    const sample = report.redis.userKeysLeftSample.map(({ key, pttl, content }) => `${key} (pttl ${pttl}: ${content})`).join(', ');
    problems.push(`${report.redis.userKeysLeft} per-user keys did not expire, e.g. ${sample}`);
  }
  return problems;
}

/** The throttle's debug events summed over the workers, by kind. */
function formatNotes(report: SoakReport): string {
  const sums = new Map<string, number>();
  for (const worker of report.workers) {
    for (const [kind, count] of Object.entries(worker.notes)) sums.set(kind, (sums.get(kind) ?? 0) + count);
  }
  if (sums.size === 0) return 'none';
  return [...sums]
    .sort((a, b) => b[1] - a[1])
    .map(([kind, count]) => `${formatNumber(count)} × ${kind}`)
    .join('; ');
}

/** The summary `npm run soak` prints. */
export function formatReport(report: SoakReport): string {
  const { options, redis } = report;
  const calls = report.workers.reduce((sum, worker) => sum + worker.calls, 0);
  const lines = [
    `soak: ${formatNumber(options.calls)} calls over ${formatNumber(options.keys)} keys, ${options.workers} worker processes (${options.mode} mode), ` +
      `rule ${options.limit}/${options.windowMs}ms, vendor latency ${options.latencyMs.min}-${options.latencyMs.max} ms, ` +
      `concurrency ${options.concurrency} per worker, maxHoldMs ${options.maxHoldMs}`,
    '',
    `calls            ${formatNumber(calls)} in ${formatNumber(report.durationMs / 1000, 1)} s (${formatNumber(calls / (report.durationMs / 1000))} calls/s)`,
    `vendor           received ${formatNumber(report.received)}, dropped ${formatNumber(report.dropped)}, ` +
      `violations ${formatNumber(report.violations)}, most in one window ${report.maxInWindow}/${options.limit}`,
    `redis memory     baseline ${mb(redis.usedMemoryBaseline)}, peak ${mb(redis.usedMemoryPeak)}, ` +
      `after the keys expired ${mb(redis.usedMemoryAfterExpiry)} (${formatNumber((redis.usedMemoryAfterExpiry - redis.usedMemoryBaseline) / 1024)} kB above baseline, ` +
      `of which ${formatNumber(redis.scriptsMemory / 1024)} kB cached scripts)`,
    `redis keys       peak ${formatNumber(redis.keysPeak)}; per-user keys left ${redis.userKeysLeft}, ` +
      `${formatNumber(redis.expiredAfterMs / 1000, 1)} s after the last call; other keys: ${redis.otherKeys.length > 0 ? redis.otherKeys.join(', ') : 'none'}`,
    `redis scripts    ${formatNumber(redis.scriptsPerCall, 2)} EVALSHA/EVAL per call`,
    `throttle notes   ${formatNotes(report)}`,
    '',
    renderTable(
      [
        { title: 'worker', left: true },
        { title: 'mode', left: true },
        { title: 'calls' },
        { title: 'errors' },
        { title: 'heap start MB', digits: 1 },
        { title: 'heap peak MB', digits: 1 },
        { title: 'heap idle+GC MB', digits: 1 },
        { title: 'idle - start kB' },
        { title: 'exit' },
        { title: 'exit after ms' },
        { title: 'active resources before exit', left: true },
      ],
      report.workers.map((worker) => [
        `${worker.index} (pid ${worker.pid})`,
        worker.mode,
        worker.calls,
        worker.errors,
        worker.heapStart / MB,
        worker.heapPeak / MB,
        worker.heapAfterIdle / MB,
        (worker.heapAfterIdle - worker.heapStart) / 1024,
        String(worker.exitCode),
        worker.exitAfterMs,
        worker.activeResources.length > 0 ? worker.activeResources.join(', ') : 'none',
      ]),
    ),
  ];
  const problems = soakProblems(report);
  lines.push(
    '',
    problems.length === 0
      ? 'OK: no violations, no drops, no errors, every worker exited by itself, every per-user key expired.'
      : `FAILED:\n- ${problems.join('\n- ')}`,
  );
  return lines.join('\n');
}
