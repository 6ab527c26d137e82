/**
 * A worker that dies while it holds slots booked ahead: two processes × 40 calls at once for one
 * user at 10/s (maxHoldMs 10 s, the default), a silent vendor; the first process is SIGKILLed
 * 1.5 s after the release (an OOM kill, a crash, a deploy past its grace period). Prints, per run,
 * the survivor's last start against the ideal for the calls the vendor received
 * (`(ceil(received / limit) − 1) × window`), and the windows over the limit.
 *
 *     npx tsx scripts/bench/dead-worker.ts [--runs=3]
 *
 * Starts its own redis-server on a free port and a simulated vendor (scripts/sim-vendor.ts), and
 * stops both. The workers are spec/support/fault-worker.ts processes.
 */
import { startVendor } from '../sim-vendor.js';
import { startRedis } from '../support/redis-server.js';
import { readFlags, settingsOrUsage, UsageError } from '../support/usage.js';
import { startFaultWorker, type FaultWorkerConfig, type FaultWorkerDone } from '../../spec/support/fault-worker.js';

const LIMIT = 10;
const WINDOW_MS = 1000;
const CALLS = 40;
const KILL_AFTER_MS = 1500;

const USAGE = 'Usage: npx tsx scripts/bench/dead-worker.ts [--runs=3]';

const settings = settingsOrUsage(() => {
  const runs = Number(readFlags(process.argv.slice(2), ['runs']).get('runs') ?? '3');
  if (!Number.isInteger(runs) || runs < 1 || runs > 20) throw new UsageError('Expected --runs to be a whole number from 1 to 20');
  return { runs };
}, USAGE);

if (settings) {
  const redis = await startRedis();
  try {
    console.log(`A worker killed ${KILL_AFTER_MS} ms in: 2 processes × ${CALLS} calls on one key, ${LIMIT}/${WINDOW_MS}ms, maxHoldMs 10000, a silent vendor\n`);
    console.log("| run | vendor received | survivor's last start | ideal | × ideal | over the limit |");
    console.log('| ---: | ---: | ---: | ---: | ---: | ---: |');
    for (let run = 1; run <= settings.runs; run++) {
      const vendor = await startVendor({ limit: LIMIT, windowMs: WINDOW_MS, latencyMs: { min: 5, max: 55 } });
      const config: FaultWorkerConfig = {
        redisUrl: redis.url,
        vendorUrl: vendor.url,
        prefix: `dead${run}`,
        name: 'vendor',
        rules: [`${LIMIT}/${WINDOW_MS}ms`],
        mode: 'wait',
        maxHoldMs: 10_000,
        key: 'acct-1',
        calls: CALLS,
      };
      const workers = [startFaultWorker(config), startFaultWorker(config)];
      try {
        await Promise.all(workers.map((worker) => worker.waitFor((message) => message.type === 'ready')));
        const wentAt = performance.timeOrigin + performance.now();
        for (const worker of workers) worker.go();
        await new Promise((resolve) => setTimeout(resolve, KILL_AFTER_MS));
        workers[0]!.child.kill('SIGKILL');
        const done = await workers[1]!.waitFor((message): message is FaultWorkerDone => message.type === 'done');
        await workers[1]!.exited;
        const received = vendor.stats().received;
        const idealMs = (Math.ceil(received / LIMIT) - 1) * WINDOW_MS;
        const lastMs = Math.max(...done.starts) - wentAt;
        console.log(
          `| ${run} | ${received} | ${(lastMs / 1000).toFixed(2)} s | ${(idealMs / 1000).toFixed(1)} s | ${(lastMs / idealMs).toFixed(2)}× | ${vendor.violations()} |`,
        );
      } finally {
        for (const { child } of workers) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
        await vendor.close();
      }
    }
  } finally {
    await redis.stop();
  }
}
