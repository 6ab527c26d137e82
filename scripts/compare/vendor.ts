/**
 * The simulated vendor of the side-by-side benchmark: scripts/sim-vendor.ts's model (a silent limit,
 * every call's arrival drawn between the request reaching the server and the response leaving it),
 * with a latency that may have a heavy tail. Arrivals are only recorded here; the runner works out
 * the drops under every rule of the scenario (metrics.ts `dropsUnderRules`).
 *
 * A request received at r draws its latency L (uniform in [min, max], or `tail.ms` for a share
 * `tail.share` of the calls) and an inbound share u in [0, 1]: arrival = r + u·L, response at r + L.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { clock, closeServer, respondAt } from '../sim-vendor.js';

export interface CompareVendorOptions {
  readonly latencyMs: { readonly min: number; readonly max: number };
  readonly tail?: { readonly share: number; readonly ms: number };
}

export interface CompareVendor {
  readonly url: string;
  /** Arrival times per user (`user` query parameter), ascending. */
  arrivals(): Map<string, number[]>;
  /** Calls that took the tail's latency. */
  readonly tailCalls: number;
  close(): Promise<void>;
}

export async function startCompareVendor(options: CompareVendorOptions): Promise<CompareVendor> {
  const { min, max } = options.latencyMs;
  const tail = options.tail;
  const arrivals = new Map<string, number[]>();
  const pending = new Set<NodeJS.Timeout>();
  let tailCalls = 0;
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const r = clock();
    req.resume();
    const url = new URL(req.url ?? '/', 'http://vendor.invalid');
    if (url.pathname.startsWith('/healthz')) {
      res.end('ok');
      return;
    }
    const user = url.searchParams.get('user') ?? 'anonymous';
    let latency = min + Math.random() * (max - min);
    if (tail && Math.random() < tail.share) {
      latency = tail.ms;
      tailCalls++;
    }
    let list = arrivals.get(user);
    if (!list) arrivals.set(user, (list = []));
    list.push(r + Math.random() * latency);
    respondAt(r + latency, pending, () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"ok":true}');
    });
  });
  server.keepAliveTimeout = 5000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  let closed: Promise<void> | undefined;
  return {
    url: `http://127.0.0.1:${port}/`,
    arrivals: () => new Map([...arrivals].map(([user, list]) => [user, [...list].sort((a, b) => a - b)])),
    get tailCalls() {
      return tailCalls;
    },
    close() {
      closed ??= closeServer(server, pending);
      return closed;
    },
  };
}
