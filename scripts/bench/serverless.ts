/**
 * Functions and a worker sharing one user's limit: invocations made afresh for each call (a new
 * `@upstash/redis` client, `RedisStore` and `Throttle`, closed at the end, as a function does),
 * reaching Redis through a server of Upstash's REST protocol (scripts/support/upstash-rest.ts, no
 * pub/sub), beside a long-lived process on ioredis, all calling one vendor for one user under `5/s`.
 *
 *     npx tsx scripts/bench/serverless.ts [--calls=30] [--runs=1]
 *
 * Per run: the most calls the vendor saw in any second (the limit: 5), the time from the first
 * arrival to the last against the ideal ((ceil(2 × calls / 5) − 1) s), and the HTTP requests each
 * invocation made to the REST API (mean and most), by command. Starts its own redis-server on a
 * free port and stops it.
 */
import { Redis as UpstashRedis } from '@upstash/redis';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Redis } from 'ioredis';
import { library } from '../support/library.js';
import { startRedis } from '../support/redis-server.js';
import { countRequests, startUpstashRest } from '../support/upstash-rest.js';
import { maxInWindow } from '../sim-vendor.js';
import { readFlags, settingsOrUsage, UsageError } from '../support/usage.js';

const { RedisStore, Throttle } = library;

const LIMIT = 5;
const RULE = `${LIMIT}/s` as const;

const settings = settingsOrUsage(() => {
  const flags = readFlags(process.argv.slice(2), ['calls', 'runs']);
  const calls = Number(flags.get('calls') ?? '30');
  const runs = Number(flags.get('runs') ?? '1');
  if (!Number.isInteger(calls) || calls < 1 || calls > 1_000) throw new UsageError('Expected --calls to be a whole number from 1 to 1000');
  if (!Number.isInteger(runs) || runs < 1 || runs > 10) throw new UsageError('Expected --runs to be a whole number from 1 to 10');
  return { calls, runs };
}, 'Usage: npx tsx scripts/bench/serverless.ts [--calls=30] [--runs=1]');

if (settings) {
  const { calls } = settings;
  const redis = await startRedis();
  const rest = await startUpstashRest(redis.url);
  const arrivals: number[] = [];
  const vendor = createServer((_req, res) => {
    arrivals.push(performance.now());
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  });
  await new Promise<void>((resolve) => vendor.listen(0, '127.0.0.1', resolve));
  const vendorUrl = `http://127.0.0.1:${(vendor.address() as AddressInfo).port}/orders?user=42`;
  const worker = new Redis(redis.port, '127.0.0.1');
  try {
    console.log(
      `Invocations made afresh for each of ${calls} calls (@upstash/redis over REST, no pub/sub) beside a long-lived ioredis process with ${calls} calls, one user, ${RULE}; ideal ${Math.ceil((2 * calls) / LIMIT) - 1} s\n`,
    );
    console.log(
      '| run | most in any second | first to last arrival | against the ideal | REST requests per invocation (mean, most) | by command, per invocation |',
    );
    console.log('| --- | --- | --- | --- | --- | --- |');
    for (let run = 1; run <= settings.runs; run++) {
      arrivals.length = 0;
      rest.requests.length = 0;
      const prefix = `fn-${process.pid}-${run}`;
      const longLived = new Throttle({ name: 'acme', rules: [RULE], store: new RedisStore(worker, { prefix }) });
      const perInvocation: number[] = [];
      const invoke = async (): Promise<void> => {
        // One invocation: its own client, store and throttle; the requests its client sends, counted.
        const client = new UpstashRedis({ url: rest.url, token: rest.token, retry: false });
        const made = countRequests(client);
        const store = new RedisStore(client, { prefix });
        const throttle = new Throttle({ name: 'acme', rules: [RULE], store });
        try {
          await throttle.schedule('42', async () => (await fetch(vendorUrl)).text());
        } finally {
          await throttle.close();
          await store.close();
        }
        perInvocation.push(made());
      };
      await Promise.all([
        ...Array.from({ length: calls }, () => longLived.schedule('42', async () => (await fetch(vendorUrl)).text())),
        ...Array.from({ length: calls }, () => invoke()),
      ]);
      await longLived.close();
      const ideal = (Math.ceil((2 * calls) / LIMIT) - 1) * 1_000;
      const span = Math.max(...arrivals) - Math.min(...arrivals);
      const byCommand = new Map<string, number>();
      for (const request of rest.requests) for (const command of request.commands) byCommand.set(command, (byCommand.get(command) ?? 0) + 1);
      const mean = perInvocation.reduce((sum, n) => sum + n, 0) / perInvocation.length;
      console.log(
        `| ${run} | ${maxInWindow(arrivals, 1_000)} of ${LIMIT} | ${(span / 1_000).toFixed(2)} s | ${(span / ideal).toFixed(2)}× | ${mean.toFixed(1)}, ${Math.max(...perInvocation)} | ${[
          ...byCommand,
        ]
          .map(([command, n]) => `${command} ${(n / calls).toFixed(1)}`)
          .join(', ')} |`,
      );
    }
  } finally {
    worker.disconnect();
    await new Promise((resolve) => vendor.close(resolve));
    await rest.close();
    await redis.stop();
  }
}
