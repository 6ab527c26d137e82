/**
 * One worker process of the side-by-side benchmark (scripts/compare.ts starts several):
 *
 *     node --import tsx scripts/compare/worker.ts
 *
 * Reads commands from stdin and answers on stdout, one JSON line each (protocol.ts). For each run
 * it builds one contender's limiter on its own counted Redis client(s) (`prepare` → `ready`),
 * releases the load on `go` (a burst of calls to the simulated vendor, or a closed loop of no-op
 * calls with a warm-up: `warm`, then `measure`), closes the limiter and sends the `result`, and
 * quits its clients on `teardown`. It lives for the whole suite, so process start-up is paid once.
 *
 * A run's `clockSkewMs` shifts this process's wall clock for that run, as spec/support/worker.ts
 * does: `Date.now()` and `performance.timeOrigin` read that much off (monotonic `performance.now()`
 * is untouched, as with a real skewed clock); the times the worker reports are read from the
 * unshifted clock, so the parent can compare them with the vendor's.
 */
import { createHash } from 'node:crypto';
import { Redis } from 'ioredis';
import { Agent, request } from 'node:http';
import { createInterface } from 'node:readline';
import type { Limiter, LimiterContext } from './contender.js';
import { contenderById } from './contenders.js';
import { scripts } from '../../lib/stores/redis-scripts.js';
import type { BurstLoad, BurstResult, ClosedLoad, ClosedResult, Command, Reply, RunSpec } from './protocol.js';

const realTimeOrigin = performance.timeOrigin;
const realDateNow = Date.now.bind(Date);
/** Unshifted wall clock, sub-ms: scripts/sim-vendor.ts `clock()` as it reads before any skew. */
const clock = (): number => realTimeOrigin + performance.now();

/** Shifts `Date.now()` and `performance.timeOrigin` by `skewMs` (0: back to the real clock). */
function applySkew(skewMs: number): void {
  if (skewMs === 0) {
    Date.now = realDateNow;
    // The own property shadowed Performance.prototype's getter: removing it restores the real origin.
    delete (performance as { timeOrigin?: number }).timeOrigin;
    return;
  }
  Date.now = () => realDateNow() + skewMs;
  Object.defineProperty(performance, 'timeOrigin', { value: realTimeOrigin + skewMs, configurable: true });
}

const inbox: Command[] = [];
let waiting: ((command: Command) => void) | undefined;
/** Set while a burst runs: the parent's `abort` ends it early. */
let onAbort: (() => void) | undefined;
createInterface({ input: process.stdin })
  .on('line', (line) => {
    const command = JSON.parse(line) as Command;
    if (command.type === 'abort') onAbort?.();
    else if (waiting) {
      const resolve = waiting;
      waiting = undefined;
      resolve(command);
    } else inbox.push(command);
  })
  .on('close', () => {
    // The parent went away: nothing left to do.
    process.exit(0);
  });

function next(): Promise<Command> {
  const queued = inbox.shift();
  if (queued) return Promise.resolve(queued);
  return new Promise((resolve) => (waiting = resolve));
}

function send(reply: Reply): void {
  process.stdout.write(`${JSON.stringify(reply)}\n`);
}

/** The run was called off by the parent (`teardown` before the step this worker waited for). */
class CalledOff extends Error {}

async function expect(type: Command['type']): Promise<void> {
  const command = await next();
  if (command.type === type) return;
  if (command.type === 'teardown') {
    inbox.unshift(command);
    throw new CalledOff(`teardown instead of ${type}`);
  }
  throw new Error(`Expected '${type}', got '${command.type}'`);
}

/** The library's scripts by SHA1, to name what each EVALSHA ran (COMPARE_DEBUG). */
const SCRIPT_BY_SHA = new Map(Object.values(scripts).map(({ name, lua }) => [createHash('sha1').update(lua).digest('hex'), name]));

/** The Redis clients of one run, every command they send counted (direct, pipelined, scripts). */
class Clients {
  readonly #clients: Redis[] = [];
  sent = 0;
  /** Per command name, what the clients sent (printed on stderr with COMPARE_DEBUG). */
  readonly byName = new Map<string, number>();

  constructor(private readonly url: string) {}

  async connect(options: { enableAutoPipelining?: boolean } = {}): Promise<Redis> {
    // Not lazyConnect: Bottleneck duplicates the client for pub/sub, and a lazy duplicate never connects.
    const client = new Redis(this.url, { enableAutoPipelining: options.enableAutoPipelining ?? false });
    client.on('error', () => {}); // surfaced through the commands that fail
    await client.ping();
    this.#count(client);
    return client;
  }

  /** Counts what `client` sends, and what the clients it `duplicate()`s send (a store's subscriber, Bottleneck's pub/sub). */
  #count(client: Redis): void {
    const target = client as unknown as { sendCommand: (...args: unknown[]) => unknown; duplicate: (...args: unknown[]) => Redis };
    const original = target.sendCommand.bind(client);
    target.sendCommand = (...args: unknown[]): unknown => {
      this.sent++;
      const command = args[0] as { name?: string; args?: unknown[] } | undefined;
      let name = command?.name ?? '?';
      if (name === 'evalsha') name = `evalsha:${SCRIPT_BY_SHA.get(String(command?.args?.[0])) ?? '?'}`;
      this.byName.set(name, (this.byName.get(name) ?? 0) + 1);
      return original(...args);
    };
    const duplicate = target.duplicate.bind(client);
    target.duplicate = (...args: unknown[]): Redis => {
      const copy = duplicate(...args);
      this.#count(copy);
      return copy;
    };
    this.#clients.push(client);
  }

  async close(): Promise<void> {
    await Promise.all(
      this.#clients.map(async (client) => {
        if (client.status === 'end') return;
        try {
          await client.quit();
        } catch {
          client.disconnect();
        }
      }),
    );
  }
}

/** Keep-alive connections to the vendor: the HTTP client should cost little next to the limiters. */
const agent = new Agent({ keepAlive: true, maxSockets: Infinity });

/** GET `url` and read the whole response; a request on a reused socket the server just closed is sent again (Node's documented retry). */
function get(url: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(url, { agent }, (response) => {
      response.resume();
      response.on('end', () => resolve(response.statusCode ?? 0));
      response.on('error', reject);
    });
    req.on('error', (error: NodeJS.ErrnoException) => {
      if (req.reusedSocket && error.code === 'ECONNRESET') get(url).then(resolve, reject);
      else reject(error);
    });
    req.end();
  });
}

function describeError(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

async function runBurst(limiter: Limiter, load: BurstLoad, clients: Clients): Promise<BurstResult> {
  const urls = load.users.map((user) => {
    const url = new URL(load.vendorUrl);
    url.searchParams.set('user', user);
    return url.href;
  });
  // Opens a connection; the vendor does not count /healthz.
  await get(new URL('/healthz', load.vendorUrl).href);
  send({ type: 'ready' });
  await expect('go');
  const sentBefore = clients.sent;
  const byNameBefore = new Map(clients.byName);
  const cpuBefore = process.cpuUsage();
  const order: number[] = [];
  for (let j = 0; j < load.callsPerUser; j++) for (let u = 0; u < load.users.length; u++) order.push(u);
  const ask = order.map(() => -1);
  const start = order.map(() => -1);
  const end = order.map(() => -1);
  let errors = 0;
  const firstErrors: string[] = [];
  const debug = process.env.COMPARE_DEBUG
    ? setInterval(() => process.stderr.write(`[${process.pid}] started ${start.filter((s) => s >= 0).length}/${order.length}\n`), 2000)
    : undefined;
  let settled = 0;
  const delay = load.sendDelayMs;
  const aborted = new Promise<void>((resolve) => (onAbort = resolve));
  await Promise.race([
    aborted,
    Promise.all(
      order.map(async (u, i) => {
        ask[i] = clock();
        try {
          await limiter.schedule(load.users[u]!, async () => {
            start[i] = clock();
            if (load.noHttp) {
              end[i] = start[i];
              return;
            }
            if (delay) await new Promise((resolve) => setTimeout(resolve, delay.min + Math.random() * (delay.max - delay.min)));
            const status = await get(urls[u]!);
            end[i] = clock();
            if (status !== 200) throw new Error(`vendor answered ${status}`);
          });
        } catch (error) {
          errors++;
          if (firstErrors.length < 3) firstErrors.push(describeError(error));
        }
        settled++;
      }),
    ),
  ]);
  onAbort = undefined;
  clearInterval(debug);
  const observedSkewMs = Math.round(Date.now() - clock());
  await closeWithin(limiter, 5000);
  const cpu = process.cpuUsage(cpuBefore);
  if (process.env.COMPARE_DEBUG) {
    const delta = [...clients.byName].map(([name, count]) => `${name}=${count - (byNameBefore.get(name) ?? 0)}`).join(' ');
    process.stderr.write(`[${process.pid}] sent by command: ${delta}\n`);
  }
  return {
    kind: 'burst',
    user: order,
    ask,
    start,
    end,
    errors,
    firstErrors,
    unfinished: order.length - settled,
    sent: clients.sent - sentBefore,
    cpuUs: cpu.user + cpu.system,
    observedSkewMs,
  };
}

/** Closes the limiter, giving up after `ms` (a limiter with calls still waiting may never settle them). */
async function closeWithin(limiter: Limiter, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([limiter.close().catch(() => {}), new Promise((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}

async function runClosed(limiter: Limiter, load: ClosedLoad, spec: RunSpec, clients: Clients): Promise<ClosedResult> {
  let n = 0;
  let errors = 0;
  const firstErrors: string[] = [];
  const latencies: number[] = [];
  /** Runs for `ms`, and on until `minAsked` calls have been asked for (at most `capMs`). */
  const loop = async (ms: number, record: boolean, minAsked = 0, capMs = ms): Promise<number> => {
    const startedAt = performance.now();
    let ops = 0;
    const more = (): boolean => {
      const elapsed = performance.now() - startedAt;
      return elapsed < ms || (n < minAsked && elapsed < capMs);
    };
    await Promise.all(
      Array.from({ length: load.concurrency }, async () => {
        while (more()) {
          const user = `u${(n++ * spec.workers + spec.index) % load.users}`;
          const asked = clock();
          try {
            await limiter.schedule(user, async () => {
              if (record) latencies.push(clock() - asked);
              if (load.vendorUrl === undefined) return;
              const status = await get(urlOf(user));
              if (status !== 200) throw new Error(`vendor answered ${status}`);
            });
            ops++;
          } catch (error) {
            errors++;
            if (firstErrors.length < 3) firstErrors.push(describeError(error));
            await new Promise((resolve) => setImmediate(resolve));
          }
        }
      }),
    );
    return ops;
  };
  const urls = new Map<string, string>();
  const urlOf = (user: string): string => {
    let url = urls.get(user);
    if (url === undefined) {
      const parsed = new URL(load.vendorUrl!);
      parsed.searchParams.set('user', user);
      urls.set(user, (url = parsed.href));
    }
    return url;
  };
  if (load.vendorUrl !== undefined) await get(new URL('/healthz', load.vendorUrl).href);
  send({ type: 'ready' });
  await expect('go');
  // Warm up until every user has been seen once: limiters that set up per user (Bottleneck's
  // Group) pay that once per user, not per call, in a running service.
  await loop(load.warmMs, false, load.users, load.warmMs + 30_000);
  errors = 0;
  send({ type: 'warm' });
  await expect('measure');
  const sentBefore = clients.sent;
  const cpuBefore = process.cpuUsage();
  const startedAt = performance.now();
  const ops = await loop(load.measureMs, true);
  const seconds = (performance.now() - startedAt) / 1000;
  await closeWithin(limiter, 5000);
  const cpu = process.cpuUsage(cpuBefore);
  return {
    kind: 'closed',
    ops,
    seconds,
    latencies: latencies.map((ms) => Math.round(ms * 1000) / 1000),
    errors,
    firstErrors,
    sent: clients.sent - sentBefore,
    cpuUs: cpu.user + cpu.system,
  };
}

async function run(spec: RunSpec): Promise<void> {
  const clients = new Clients(spec.redisUrl);
  let limiter: Limiter | undefined;
  try {
    applySkew(spec.clockSkewMs ?? 0);
    const context: LimiterContext = {
      runId: spec.runId,
      rules: spec.rules,
      workers: spec.workers,
      connect: (options) => clients.connect(options),
    };
    limiter = await contenderById(spec.contender).create(context);
    const result = spec.load.kind === 'burst' ? await runBurst(limiter, spec.load, clients) : await runClosed(limiter, spec.load, spec, clients);
    limiter = undefined;
    send({ type: 'result', result });
  } catch (error) {
    if (!(error instanceof CalledOff)) send({ type: 'failed', message: describeError(error) });
    await limiter?.close().catch(() => {});
  }
  await expect('teardown').catch(() => {});
  await clients.close();
  applySkew(0);
  send({ type: 'torn' });
}

async function main(): Promise<void> {
  for (;;) {
    const command = await next();
    if (command.type === 'exit') break;
    if (command.type === 'prepare') await run(command.run);
    else if (command.type === 'teardown') send({ type: 'torn' });
    else send({ type: 'failed', message: `Unexpected command '${command.type}'` });
  }
  process.exit(0);
}

main().catch((error: unknown) => {
  process.stderr.write(`compare worker ${process.pid}: ${describeError(error)}\n`);
  process.exit(1);
});
