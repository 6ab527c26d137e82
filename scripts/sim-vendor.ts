/**
 * A simulated vendor with a SILENT per-user rate limit: a real `node:http` server on 127.0.0.1
 * (port 0) that answers every request `200 OK`, records when each call "arrived", and marks as
 * dropped every call over the limit, without telling the client.
 *
 * Latency model. When the server receives a request at server time r, it draws a total latency L
 * uniform in [latencyMs.min, latencyMs.max] and an inbound share u uniform in [0, 1]:
 *
 *     arrival  = r + u·L   (the moment the vendor counts the call)
 *     response = r + L     (when the response is sent back)
 *
 * So a call's arrival always lies between the client's start and its response, and two calls that
 * start at the same time can arrive up to L apart, in either order. This is the jitter that makes a
 * limiter exact on start times still overrun the vendor (design brief §4b).
 *
 * Counting. Per user, the vendor looks at arrivals in a sliding half-open window (a − windowMs, a].
 * Arrivals are taken in time order; an arrival that would make more than `limit` *performed* calls
 * in its trailing window is accepted silently (200 OK) but dropped (not performed, so it does not
 * count against later arrivals). Because arrivals are only known u·L after the request, the drop
 * decisions are computed exactly at `stats()` time by sorting all arrivals drawn so far.
 *
 * `windowViolations()` is the stricter, stateless measure: it counts every arrival (dropped or
 * not) and says how many arrivals have more than `limit` arrivals in their trailing window. For a
 * client that keeps the limit both numbers are 0.
 *
 * Times are `performance.timeOrigin + performance.now()` (ms since the epoch, sub-ms resolution).
 *
 * Manual use:
 *
 *     npx tsx scripts/sim-vendor.ts --limit 20 --window 500 [--min 5] [--max 55] [--port 0]
 *
 * prints the URL, logs a summary every few seconds while calls come in, and prints the final
 * figures on Ctrl-C. Call it with `curl 'http://127.0.0.1:PORT/?user=alice'` or an `x-user` header.
 * `GET /healthz` is answered at once and not counted (clients use it to warm up a connection).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

export interface VendorOptions {
  /** Calls per user the vendor performs in any window of `windowMs`. */
  readonly limit: number;
  readonly windowMs: number;
  /** Total latency per call, drawn uniformly. @default { min: 5, max: 55 } */
  readonly latencyMs?: { readonly min: number; readonly max: number };
  /** Which upstream user a request is for. @default `user` query parameter, else `x-user` header, else 'anonymous' */
  readonly userFrom?: (req: IncomingMessage) => string;
  /** Port to listen on. @default 0 (any free port) */
  readonly port?: number;
}

export interface VendorStats {
  /** Requests received. */
  readonly received: number;
  /** Calls performed (within the limit at their arrival). */
  readonly accepted: number;
  /** Calls answered 200 OK but not performed. */
  readonly dropped: number;
  /** Arrival times per user, ascending (dropped ones included). */
  readonly perUser: Map<string, number[]>;
  /** Dropped calls per user (users with none are absent). */
  readonly droppedPerUser: Map<string, number>;
  /** Earliest and latest arrival over all users (NaN when none). */
  readonly firstArrival: number;
  readonly lastArrival: number;
}

export interface Vendor {
  /** Base URL, e.g. `http://127.0.0.1:40123/`. */
  readonly url: string;
  readonly limit: number;
  readonly windowMs: number;
  /** Stops listening, cancels responses still pending and closes every connection. */
  close(): Promise<void>;
  /** Exact figures over every arrival drawn so far (call it once all responses are in). */
  stats(): VendorStats;
  /** Most arrivals (dropped ones included) in any window (a − windowMs, a], for one user or the worst user. */
  maxInWindow(user?: string): number;
  /** `windowViolations()` summed over users (or for one user). */
  violations(user?: string): number;
  /** Most calls of one user (or of the worst user) in service at once: arrived and not yet answered. */
  maxConcurrent(user?: string): number;
}

/** Wall-clock ms with sub-ms resolution; the same base in every process of one machine. */
export function clock(): number {
  return performance.timeOrigin + performance.now();
}

/** Stops a vendor's server: its pending responses' timers cleared, its connections closed. */
export function closeServer(server: Server, pending: Set<NodeJS.Timeout>): Promise<void> {
  return new Promise<void>((resolve) => {
    for (const timer of pending) clearTimeout(timer);
    pending.clear();
    server.close(() => resolve());
    server.closeAllConnections();
  });
}

/**
 * Calls `send` once `at` (on {@link clock}) has really passed. Timers run on libuv's cached whole-ms
 * loop time and can fire up to ~1 ms early: re-armed until then, so that a response never leaves
 * before its call's arrival. Pending timers are kept in `pending`, for closing.
 */
export function respondAt(at: number, pending: Set<NodeJS.Timeout>, send: () => void): void {
  const left = at - clock();
  if (left <= 0) {
    send();
    return;
  }
  const timer = setTimeout(() => {
    pending.delete(timer);
    respondAt(at, pending, send);
  }, Math.ceil(left));
  pending.add(timer);
}

/**
 * How many arrivals exceed `limit` in their trailing window: taking arrivals in time order (ties in
 * the given order), arrival i counts when more than `limit` arrivals, itself included, lie in
 * (a_i − windowMs, a_i]. Every arrival counts, whether a vendor would have dropped it or not.
 */
export function windowViolations(arrivals: readonly number[], limit: number, windowMs: number): number {
  const sorted = [...arrivals].sort((a, b) => a - b);
  let violations = 0;
  let lo = 0;
  for (let i = 0; i < sorted.length; i++) {
    const a = sorted[i]!;
    while (sorted[lo]! <= a - windowMs) lo++;
    if (i - lo + 1 > limit) violations++;
  }
  return violations;
}

/** Most arrivals in any window (a − windowMs, a]. */
export function maxInWindow(arrivals: readonly number[], windowMs: number): number {
  const sorted = [...arrivals].sort((a, b) => a - b);
  let max = 0;
  let lo = 0;
  for (let i = 0; i < sorted.length; i++) {
    while (sorted[lo]! <= sorted[i]! - windowMs) lo++;
    max = Math.max(max, i - lo + 1);
  }
  return max;
}

/**
 * How many of the arrivals a vendor that performs at most `limit` calls per window drops: in time
 * order, an arrival is dropped when `limit` performed calls already lie in (a − windowMs, a].
 * Dropped calls are not performed and do not count against later arrivals.
 */
export function vendorDrops(arrivals: readonly number[], limit: number, windowMs: number): number {
  const sorted = [...arrivals].sort((a, b) => a - b);
  const performed: number[] = [];
  let head = 0;
  let dropped = 0;
  for (const a of sorted) {
    while (head < performed.length && performed[head]! <= a - windowMs) head++;
    if (performed.length - head >= limit) dropped++;
    else performed.push(a);
  }
  return dropped;
}

function defaultUser(req: IncomingMessage): string {
  const url = new URL(req.url ?? '/', 'http://vendor.invalid');
  const header = req.headers['x-user'];
  return url.searchParams.get('user') ?? (Array.isArray(header) ? header[0] : header) ?? 'anonymous';
}

function checkOptions(options: VendorOptions): void {
  const whole = (what: string, value: unknown, min: number): void => {
    if (typeof value !== 'number' || !Number.isFinite(value) || value < min) {
      throw new TypeError(`Expected ${what} to be a number from ${min} up, got ${String(value)}`);
    }
  };
  whole('limit', options.limit, 1);
  whole('windowMs', options.windowMs, 1);
  if (options.latencyMs) {
    whole('latencyMs.min', options.latencyMs.min, 0);
    whole('latencyMs.max', options.latencyMs.max, options.latencyMs.min);
  }
}

/** Starts a simulated vendor; resolves once it listens. */
export async function startVendor(options: VendorOptions): Promise<Vendor> {
  checkOptions(options);
  const { limit, windowMs } = options;
  const { min, max } = options.latencyMs ?? { min: 5, max: 55 };
  const userFrom = options.userFrom ?? defaultUser;
  const arrivals = new Map<string, number[]>();
  /** Per user, each call's time in service at the vendor: [arrival, response]. */
  const inService = new Map<string, Array<readonly [number, number]>>();
  const pending = new Set<NodeJS.Timeout>();
  let received = 0;

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const r = clock();
    if (req.url?.startsWith('/healthz')) {
      req.resume();
      res.end('ok');
      return;
    }
    received += 1;
    let user: string;
    try {
      user = userFrom(req);
    } catch {
      user = 'anonymous';
    }
    const latency = min + Math.random() * (max - min);
    const arrival = r + Math.random() * latency;
    let list = arrivals.get(user);
    if (!list) arrivals.set(user, (list = []));
    list.push(arrival);
    let spans = inService.get(user);
    if (!spans) inService.set(user, (spans = []));
    spans.push([arrival, r + latency]);
    // Drain the request body (if any) so the connection can be reused.
    req.resume();
    respondAt(r + latency, pending, () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ ok: true, user }));
    });
  });
  server.keepAliveTimeout = 1000;

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;

  const sortedPerUser = (): Map<string, number[]> => new Map([...arrivals].map(([user, list]) => [user, [...list].sort((a, b) => a - b)]));

  let closed: Promise<void> | undefined;
  return {
    url: `http://127.0.0.1:${port}/`,
    limit,
    windowMs,
    close() {
      closed ??= closeServer(server, pending);
      return closed;
    },
    stats() {
      const perUser = sortedPerUser();
      const droppedPerUser = new Map<string, number>();
      let dropped = 0;
      let first = NaN;
      let last = NaN;
      for (const [user, list] of perUser) {
        const drops = vendorDrops(list, limit, windowMs);
        if (drops > 0) droppedPerUser.set(user, drops);
        dropped += drops;
        if (list.length > 0) {
          if (!(list[0]! >= first)) first = list[0]!;
          if (!(list.at(-1)! <= last)) last = list.at(-1)!;
        }
      }
      let total = 0;
      for (const list of perUser.values()) total += list.length;
      return { received, accepted: total - dropped, dropped, perUser, droppedPerUser, firstArrival: first, lastArrival: last };
    },
    maxInWindow(user?: string) {
      const lists = user === undefined ? [...arrivals.values()] : [arrivals.get(user) ?? []];
      return lists.reduce((worst, list) => Math.max(worst, maxInWindow(list, windowMs)), 0);
    },
    violations(user?: string) {
      const lists = user === undefined ? [...arrivals.values()] : [arrivals.get(user) ?? []];
      return lists.reduce((sum, list) => sum + windowViolations(list, limit, windowMs), 0);
    },
    maxConcurrent(user?: string) {
      const lists = user === undefined ? [...inService.values()] : [inService.get(user) ?? []];
      return lists.reduce((worst, spans) => Math.max(worst, maxOverlap(spans)), 0);
    },
  };
}

/** Most of `spans` ([from, to), ms) that hold at one moment: an end at t comes before a start at t. */
export function maxOverlap(spans: ReadonlyArray<readonly [number, number]>): number {
  const edges = spans.flatMap(([from, to]): Array<[number, number]> => [
    [from, 1],
    [to, -1],
  ]);
  edges.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let open = 0;
  let most = 0;
  for (const [, step] of edges) {
    open += step;
    most = Math.max(most, open);
  }
  return most;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      limit: { type: 'string', default: '20' },
      window: { type: 'string', default: '500' },
      min: { type: 'string', default: '5' },
      max: { type: 'string', default: '55' },
      port: { type: 'string', default: '0' },
    },
  });
  const vendor = await startVendor({
    limit: Number(values.limit),
    windowMs: Number(values.window),
    latencyMs: { min: Number(values.min), max: Number(values.max) },
    port: Number(values.port),
  });
  console.log(`simulated vendor on ${vendor.url}  limit ${vendor.limit}/${vendor.windowMs}ms per user, silent`);
  console.log(`try: curl '${vendor.url}?user=alice'   (Ctrl-C prints the figures and stops)`);
  let seen = 0;
  const summary = (): string => {
    const s = vendor.stats();
    return `received ${s.received}, accepted ${s.accepted}, silently dropped ${s.dropped}, users ${s.perUser.size}, most in one window ${vendor.maxInWindow()}`;
  };
  const ticker = setInterval(() => {
    const { received } = vendor.stats();
    if (received !== seen) console.log(summary());
    seen = received;
  }, 2000);
  process.once('SIGINT', () => {
    clearInterval(ticker);
    console.log(summary());
    void vendor.close();
  });
}

// No top-level await: specs import this module, and mocha loads specs through require() when it can.
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
}
