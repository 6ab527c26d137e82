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
 * invocation made to the REST API (mean and most), by command.
 *
 * Then the same calls made with reservations (`reserve()`, then `schedule(key, fn, { token })`):
 * each invocation reserves a slot and returns; a platform's delay (a timer here) invokes a new
 * one at the reservation's `startAt`, which makes the call with the token. Every process with
 * `maxHoldMs` 1000 and `reservationGraceMs` 1000 (a reserved slot counts to its start + both, then a
 * window). It prints how far each call started from its reserved time, and the requests of each
 * kind of invocation.
 *
 * Last, what a script costs over HTTP sent as EVALSHA (its SHA1) or as EVAL (its text): request
 * bytes and time per request, 300 of each, lua/inspect.lua and lua/batch.lua.
 *
 * Starts its own redis-server on a free port and stops it.
 */
import { Redis as UpstashRedis } from '@upstash/redis';
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Redis } from 'ioredis';
import { library } from '../support/library.js';
import { scripts } from '../../lib/stores/redis-scripts.js';
import { startRedis } from '../support/redis-server.js';
import { countRequests, startUpstashRest, type UpstashRest } from '../support/upstash-rest.js';
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
      const { span, ideal } = await beside(longLived, calls, vendorUrl, arrivals, invoke);
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
    await reservations(calls, settings.runs, rest, worker, vendorUrl, arrivals);
    await evalAgainstEvalsha(rest);
  } finally {
    worker.disconnect();
    await new Promise((resolve) => vendor.close(resolve));
    await rest.close();
    await redis.stop();
  }
}

/**
 * `calls` calls of the long-lived process beside `calls` invocations, all released at once, the
 * long-lived throttle closed after; the vendor's first to last arrival, and the ideal.
 */
async function beside(
  longLived: InstanceType<typeof Throttle>,
  calls: number,
  vendorUrl: string,
  arrivals: readonly number[],
  invocation: () => Promise<void>,
): Promise<{ readonly span: number; readonly ideal: number }> {
  await Promise.all([
    ...Array.from({ length: calls }, () => longLived.schedule('42', async () => (await fetch(vendorUrl)).text())),
    ...Array.from({ length: calls }, () => invocation()),
  ]);
  await longLived.close();
  return { span: Math.max(...arrivals) - Math.min(...arrivals), ideal: (Math.ceil((2 * calls) / LIMIT) - 1) * 1_000 };
}

/** The calls made with reservations: each invocation reserves and returns; one made afresh at `startAt` makes the call. */
async function reservations(calls: number, runs: number, rest: UpstashRest, worker: Redis, vendorUrl: string, arrivals: number[]): Promise<void> {
  const config = { name: 'acme', rules: [RULE], maxHoldMs: 1_000, reservationGraceMs: 1_000 } as const;
  console.log(
    `\nThe same ${calls} + ${calls} calls, the invocations with reservations (maxHoldMs 1000, reservationGraceMs 1000 in every process): each reserves and returns; one made afresh at its startAt calls with the token\n`,
  );
  console.log(
    '| run | most in any second | first to last arrival | against the ideal | start after the reserved time (ms: least, median, most) | calls booked again | requests: reserving invocation, calling invocation (mean, most) |',
  );
  console.log('| --- | --- | --- | --- | --- | --- | --- |');
  for (let run = 1; run <= runs; run++) {
    arrivals.length = 0;
    const prefix = `fn-r-${process.pid}-${run}`;
    const longLived = new Throttle({ ...config, store: new RedisStore(worker, { prefix }) });
    const lateness: number[] = [];
    const reserving: number[] = [];
    const calling: number[] = [];
    let rebooked = 0;
    /** One invocation: its own client, store and throttle, closed at the end; the requests it made. */
    const invocation = async <T>(work: (throttle: InstanceType<typeof Throttle>) => Promise<T>): Promise<{ value: T; requests: number }> => {
      const client = new UpstashRedis({ url: rest.url, token: rest.token, retry: false });
      const made = countRequests(client);
      const store = new RedisStore(client, { prefix });
      const throttle = new Throttle({ ...config, store });
      throttle.on('debug', ({ message }) => {
        if (message.includes('moved')) rebooked++;
      });
      let value: T;
      try {
        value = await work(throttle);
      } finally {
        await throttle.close();
        await store.close();
      }
      // Counted once closed: the completion is written by then.
      return { value, requests: made() };
    };
    const reserveAndCall = async (): Promise<void> => {
      const { value: reservation, requests } = await invocation((throttle) => throttle.reserve('42'));
      reserving.push(requests);
      // The platform's delay: a new invocation at startAt.
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, reservation.startAt - Date.now())));
      const called = await invocation((throttle) =>
        throttle.schedule(
          '42',
          async () => {
            lateness.push(Date.now() - reservation.startAt);
            return (await fetch(vendorUrl)).text();
          },
          { token: reservation.token },
        ),
      );
      calling.push(called.requests);
    };
    const { span, ideal } = await beside(longLived, calls, vendorUrl, arrivals, reserveAndCall);
    const sorted = [...lateness].sort((a, b) => a - b);
    const mean = (values: readonly number[]): string => (values.reduce((sum, n) => sum + n, 0) / values.length).toFixed(1);
    console.log(
      `| ${run} | ${maxInWindow(arrivals, 1_000)} of ${LIMIT} | ${(span / 1_000).toFixed(2)} s | ${(span / ideal).toFixed(2)}× | ${sorted[0]}, ${sorted[Math.floor(sorted.length / 2)]}, ${sorted.at(-1)} | ${rebooked} | ${mean(reserving)}, ${Math.max(...reserving)}; ${mean(calling)}, ${Math.max(...calling)} |`,
    );
  }
}

/** A script sent over HTTP as EVALSHA or as EVAL: bytes and time per request. */
async function evalAgainstEvalsha(rest: UpstashRest): Promise<void> {
  const REQUESTS = 300;
  console.log('\nA script over HTTP, EVALSHA (its SHA1) against EVAL (its text), 300 requests each, one after another\n');
  console.log('| script | text | sent as | request body | time per request (median, 95th percentile) |');
  console.log('| --- | --- | --- | --- | --- |');
  const client = new UpstashRedis({ url: rest.url, token: rest.token, retry: false });
  // lua/inspect.lua on an empty key: a read of one rule. lua/batch.lua with no operation: its rule sets read, nothing done.
  const cases = [
    { script: scripts.inspect, keys: ['bench:evalsha:log', 'bench:evalsha:meta'], args: ['1', '5', '1000', '0'] },
    { script: scripts.batch, keys: [], args: ['', '.bench', 'bench:free', '0', 'x:9100', '0', '0'] },
  ];
  for (const { script, keys, args } of cases) {
    const sha = createHash('sha1').update(script.lua).digest('hex');
    await client.scriptLoad(script.lua);
    for (const [sentAs, send] of [
      ['EVALSHA', () => client.evalsha(sha, keys, args)],
      ['EVAL', () => client.eval(script.lua, keys, args)],
    ] as const) {
      const times: number[] = [];
      const before = rest.requests.length;
      for (let i = 0; i < REQUESTS; i++) {
        const started = performance.now();
        await send();
        times.push(performance.now() - started);
      }
      const bytes = rest.requests.slice(before).map((request) => Number(request.headers['content-length'] ?? 0));
      times.sort((a, b) => a - b);
      console.log(
        `| ${script.name.replace(/[0-9]+$/, '')} | ${(script.lua.length / 1024).toFixed(1)} kB | ${sentAs} | ${Math.round(bytes.reduce((sum, n) => sum + n, 0) / bytes.length)} B | ${times[Math.floor(REQUESTS / 2)]!.toFixed(2)} ms, ${times[Math.floor(REQUESTS * 0.95)]!.toFixed(2)} ms |`,
      );
    }
  }
}
