/**
 * Learning each vendor's limit (`Throttle.learn`, on by default in the adapters), beside learning
 * off, in one run: a loud vendor whose real limit is 6 calls/s per user (a sliding second counted
 * at arrival; above it 429 with `Retry-After: 1`), a throttle told `10/s`, two throttles on their
 * own Redis connections and stores (two processes, as the store sees them) × 24 calls for one user
 * through `throttle.axios()` with 5 retries. Per way the vendor speaks: requests refused, whether
 * every call ended 200, and the last arrival against the ideal at the real limit
 * (`(ceil(48 / 6) − 1)` s after the first). Then: a process that starts after the limit was
 * learned; a vendor that raises its limit back to the configured one; another client on the same
 * account taking 4 of a vendor's 10 a second (`X-RateLimit-Remaining`), with a throttle told the
 * vendor's 10/s; a throttle told half the vendor's published limit, with `learnAboveRules` off and on;
 * a silent vendor at the configured limit (calls over it answered 200 and dropped).
 *
 *     npx tsx scripts/bench/learning.ts [--runs=1]
 *
 * Starts its own redis-server on a free port and stops it.
 */
import axios from 'axios';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Redis } from 'ioredis';
import { library } from '../support/library.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { readFlags, settingsOrUsage, UsageError } from '../support/usage.js';

const { RedisStore, Throttle } = library;
type Throttle = InstanceType<typeof Throttle>;

const CONFIGURED = 10;
const REAL = 6;
const CALLS = 24;
const PROCESSES = 2;

type Speech = 'policy' | 'x-ratelimit' | '429' | 'silent';

interface Vendor {
  readonly url: string;
  /** Arrival times (ms, performance.now()) of requests it performed, and of those it refused. */
  readonly performed: number[];
  readonly refused: number[];
  /** Silent: requests answered 200 but over the limit (not performed). */
  dropped: number;
  limit: number;
  close(): Promise<void>;
}

/** `others`: calls of another client the vendor counts in every second (spread evenly over it). */
async function startVendor(speech: Speech, limit: number, others = 0): Promise<Vendor> {
  const performed: number[] = [];
  const refused: number[] = [];
  const vendor: Vendor = {
    url: '',
    performed,
    refused,
    dropped: 0,
    limit,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    const at = performance.now();
    const recent = performed.filter((time) => time > at - 1_000);
    const used = recent.length + others;
    const over = used >= vendor.limit;
    const remaining = Math.max(0, vendor.limit - used - (over ? 0 : 1));
    const resetS = recent.length === 0 ? 1 : Math.max(1, Math.ceil((recent[0]! + 1_000 - at) / 1_000));
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (speech === 'policy') {
      headers['ratelimit-policy'] = `"default";q=${vendor.limit};w=1`;
      headers['ratelimit'] = `"default";r=${remaining};t=${resetS}`;
    } else if (speech === 'x-ratelimit') {
      headers['x-ratelimit-limit'] = String(vendor.limit);
      headers['x-ratelimit-remaining'] = String(remaining);
      headers['x-ratelimit-reset'] = String(resetS);
    }
    if (over && speech === 'silent') {
      vendor.dropped++;
      res.writeHead(200, headers).end('{}');
      return;
    }
    if (over) {
      refused.push(at);
      res.writeHead(429, { ...headers, 'retry-after': '1' }).end('{}');
      return;
    }
    performed.push(at);
    res.writeHead(200, headers).end('{}');
  });
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  Object.assign(vendor, { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
  return vendor;
}

interface Process {
  readonly throttle: Throttle;
  readonly client: Redis;
  send(calls: number): Promise<number[]>;
}

/** How a throttle is set up: the rule it is told (calls/s), and whether a published limit may raise it. */
interface Setup {
  readonly configured?: number;
  readonly learnAboveRules?: boolean;
}

function startProcess(
  redis: RedisServer,
  prefix: string,
  vendor: Vendor,
  learn: boolean,
  { configured = CONFIGURED, learnAboveRules = false }: Setup = {},
): Process {
  const client = new Redis(redis.port, '127.0.0.1', { lazyConnect: false });
  const throttle = new Throttle({ name: 'acme', rules: [`${configured}/s`], store: new RedisStore(client, { prefix }), learnAboveRules });
  const http = axios.create({ baseURL: vendor.url, validateStatus: () => true });
  throttle.axios(http, { key: () => 'user-1', retries: 5, learn });
  return {
    throttle,
    client,
    send: (calls) => Promise.all(Array.from({ length: calls }, () => http.get('/orders').then((response) => response.status))),
  };
}

async function stop(processes: readonly Process[]): Promise<void> {
  for (const { throttle, client } of processes) {
    await throttle.close();
    client.disconnect();
  }
}

interface Outcome {
  readonly requests: number;
  readonly refused: number;
  readonly allOk: boolean;
  /** First to last arrival the vendor performed, ms. */
  readonly spanMs: number;
  readonly dropped: number;
}

async function burst(redis: RedisServer, speech: Speech, learn: boolean, run: string, vendorLimit = REAL, others = 0, setup: Setup = {}): Promise<Outcome> {
  const vendor = await startVendor(speech, vendorLimit, others);
  const processes = Array.from({ length: PROCESSES }, () => startProcess(redis, `learn-${run}`, vendor, learn, setup));
  try {
    const statuses = (await Promise.all(processes.map((process) => process.send(CALLS)))).flat();
    const times = [...vendor.performed].sort((a, b) => a - b);
    return {
      requests: vendor.performed.length + vendor.refused.length + vendor.dropped,
      refused: vendor.refused.length,
      allOk: statuses.every((status) => status === 200),
      spanMs: times.at(-1)! - times[0]!,
      dropped: vendor.dropped,
    };
  } finally {
    await stop(processes);
    await vendor.close();
  }
}

/** The last of `calls` arrivals at `limit`/s, after the first: what a perfect limiter reaches. */
function idealMs(calls: number, limit: number): number {
  return (Math.ceil(calls / limit) - 1) * 1_000;
}

function row(label: string, outcome: Outcome, limit: number): string {
  const ideal = idealMs(PROCESSES * CALLS, limit);
  return `${outcome.refused} of ${outcome.requests} refused${outcome.allOk ? '' : ' (not every call 200)'}, ${(outcome.spanMs / 1_000).toFixed(2)} s = ${(outcome.spanMs / ideal).toFixed(2)}× the ideal`;
}

/** A process that starts after another learned the limit: its requests refused. */
async function latecomer(redis: RedisServer, run: string): Promise<{ first: number; late: number; lateRequests: number }> {
  const vendor = await startVendor('policy', REAL);
  const first = startProcess(redis, `late-${run}`, vendor, true);
  try {
    await first.send(CALLS);
    const refusedBefore = vendor.refused.length;
    const performedBefore = vendor.performed.length;
    const late = startProcess(redis, `late-${run}`, vendor, true);
    try {
      await late.send(CALLS);
    } finally {
      await stop([late]);
    }
    return {
      first: refusedBefore,
      late: vendor.refused.length - refusedBefore,
      lateRequests: vendor.performed.length - performedBefore + vendor.refused.length - refusedBefore,
    };
  } finally {
    await stop([first]);
    await vendor.close();
  }
}

/** The vendor raises its limit to the configured one after the first calls: the pace after it, calls/s over the last windows. */
async function raisedBack(redis: RedisServer, speech: Speech, run: string): Promise<{ paceAfter: number; windows: number[] }> {
  const vendor = await startVendor(speech, REAL);
  const processes = Array.from({ length: PROCESSES }, () => startProcess(redis, `raise-${speech}-${run}`, vendor, true));
  try {
    // Learn 6/s first, then the vendor allows 10/s.
    await Promise.all(processes.map((process) => process.send(12)));
    vendor.limit = CONFIGURED;
    const from = performance.now();
    await Promise.all(processes.map((process) => process.send(40)));
    const after = vendor.performed.filter((time) => time >= from);
    const windows: number[] = [];
    for (let start = from; start < after.at(-1)!; start += 1_000) windows.push(after.filter((time) => time >= start && time < start + 1_000).length);
    const last = windows.slice(-4, -1);
    return { paceAfter: last.reduce((sum, n) => sum + n, 0) / Math.max(1, last.length), windows };
  } finally {
    await stop(processes);
    await vendor.close();
  }
}

const settings = settingsOrUsage(() => {
  const runs = Number(readFlags(process.argv.slice(2), ['runs']).get('runs') ?? '1');
  if (!Number.isInteger(runs) || runs < 1 || runs > 10) throw new UsageError('Expected --runs to be a whole number from 1 to 10');
  return { runs };
}, 'Usage: npx tsx scripts/bench/learning.ts [--runs=1]');

if (settings) {
  const redis = await startRedis();
  try {
    console.log(
      `A loud vendor at ${REAL}/s per user, a throttle told ${CONFIGURED}/s, ${PROCESSES} processes × ${CALLS} calls for one user through throttle.axios() (5 retries); ideal ${(idealMs(PROCESSES * CALLS, REAL) / 1_000).toFixed(1)} s at the real limit\n`,
    );
    for (let run = 1; run <= settings.runs; run++) {
      console.log(`Run ${run}:\n`);
      console.log('| the vendor says | learning off | learning on |');
      console.log('| --- | --- | --- |');
      for (const [speech, label] of [
        ['policy', '`RateLimit-Policy` + `RateLimit` on every response'],
        ['x-ratelimit', '`X-RateLimit-Limit/-Remaining/-Reset`'],
        ['429', '`429` + `Retry-After` only'],
      ] as const) {
        const off = await burst(redis, speech, false, `${speech}-off-${run}`);
        const on = await burst(redis, speech, true, `${speech}-on-${run}`);
        console.log(`| ${label} | ${row(label, off, REAL)} | ${row(label, on, REAL)} |`);
      }
      const late = await latecomer(redis, String(run));
      console.log(
        `| a process that starts after the limit was learned (\`RateLimit-Policy\`) | – | first process ${late.first} refused; the later one ${late.late} of ${late.lateRequests} |`,
      );
      for (const speech of ['policy', '429'] as const) {
        const raised = await raisedBack(redis, speech, String(run));
        console.log(
          `| the vendor raises its limit to ${CONFIGURED}/s (${speech === 'policy' ? 'published' : '429 only'}) | – | calls per window after the raise: ${raised.windows.join(', ')}; the last three full windows ${raised.paceAfter.toFixed(1)}/s (${((raised.paceAfter / CONFIGURED) * 100).toFixed(0)} % of ${CONFIGURED}/s) |`,
        );
      }
      const sharedOff = await burst(redis, 'x-ratelimit', false, `shared-off-${run}`, CONFIGURED, 4);
      const sharedOn = await burst(redis, 'x-ratelimit', true, `shared-on-${run}`, CONFIGURED, 4);
      const shared = (outcome: Outcome): string =>
        `${outcome.refused} of ${outcome.requests} refused${outcome.allOk ? '' : ' (not every call 200)'}, ${(outcome.spanMs / 1_000).toFixed(2)} s = ${(outcome.spanMs / idealMs(PROCESSES * CALLS, CONFIGURED - 4)).toFixed(2)}× the ideal`;
      console.log(
        `| another client takes 4 of the vendor's ${CONFIGURED}/s (\`X-RateLimit-*\`), the throttle told ${CONFIGURED}/s; ideal at the 6/s left | ${shared(sharedOff)} | ${shared(sharedOn)} |`,
      );
      const low = { configured: REAL / 2 };
      const lowOff = await burst(redis, 'policy', true, `low-off-${run}`, REAL, 0, low);
      const lowOn = await burst(redis, 'policy', true, `low-on-${run}`, REAL, 0, { ...low, learnAboveRules: true });
      console.log(
        `| a throttle told ${REAL / 2}/s, below the vendor's published ${REAL}/s: \`learnAboveRules\` off, on (learning on) | ${row('', lowOff, REAL)} | ${row('', lowOn, REAL)} |`,
      );
      const silentOff = await burst(redis, 'silent', false, `silent-off-${run}`, CONFIGURED);
      const silentOn = await burst(redis, 'silent', true, `silent-on-${run}`, CONFIGURED);
      console.log(
        `| a silent vendor at the configured ${CONFIGURED}/s | ${silentOff.dropped} over, ${(silentOff.spanMs / 1_000).toFixed(2)} s | ${silentOn.dropped} over, ${(silentOn.spanMs / 1_000).toFixed(2)} s |\n`,
      );
    }
  } finally {
    await redis.stop();
  }
}
