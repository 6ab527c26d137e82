import { expect } from 'chai';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import nock from 'nock';

/** One request as the vendor saw it. `at`: performance.now() when it arrived (its body read). */
export interface Arrival {
  readonly at: number;
  readonly method: string;
  readonly path: string;
  readonly user: string | undefined;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

/** The vendor's answer to one arrival (`index`: how many arrived before it, all paths and users). */
export interface Reply {
  readonly status?: number;
  readonly body?: unknown;
  readonly headers?: Readonly<Record<string, string | undefined>>;
}
export type Respond = (arrival: Arrival, index: number) => Reply;

export const ok: Respond = () => ({ status: 200, body: { ok: true } });

/** The user a request is for: the `x-acme-user` header, else the `user` query parameter. */
function userOf(path: string, headers: IncomingHttpHeaders): string | undefined {
  const header = headers['x-acme-user'];
  if (typeof header === 'string') return header;
  return new URL(path, 'http://vendor.invalid').searchParams.get('user') ?? undefined;
}

export interface Vendor {
  readonly url: string;
  readonly arrivals: Arrival[];
  /** Arrival times of one user's requests, in ms after `since`, rounded to 0.1 ms. */
  times(user: string, since: number): number[];
  close(): Promise<void>;
}

/** A simulated vendor on a real `node:http` server on 127.0.0.1 (port 0), for fetch. */
export async function startHttpVendor(respond: Respond = ok): Promise<Vendor> {
  const arrivals: Arrival[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const path = req.url ?? '/';
      const arrival: Arrival = {
        at: performance.now(),
        method: req.method ?? 'GET',
        path,
        user: userOf(path, req.headers),
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
      };
      arrivals.push(arrival);
      const reply = respond(arrival, arrivals.length - 1);
      res.writeHead(reply.status ?? 200, { 'content-type': 'application/json', ...defined(reply.headers) });
      res.end(JSON.stringify(reply.body ?? {}));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    arrivals,
    times: (user, since) => timesOf(arrivals, user, since),
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((error) => (error ? reject(error) : resolve()));
      }),
  };
}

/** A simulated vendor intercepted by nock at `origin` (every method and path), for axios. */
export function nockVendor(origin: string, respond: Respond = ok): Vendor {
  const arrivals: Arrival[] = [];
  const reply = function (this: { req: { headers: Record<string, string | string[]>; method?: string } }, path: string, body: unknown) {
    const headers = this.req.headers as IncomingHttpHeaders;
    const text = typeof body === 'string' ? body : JSON.stringify(body ?? '');
    const arrival: Arrival = { at: performance.now(), method: this.req.method ?? 'GET', path, user: userOf(path, headers), headers, body: text };
    arrivals.push(arrival);
    const answer = respond(arrival, arrivals.length - 1);
    return [answer.status ?? 200, answer.body ?? {}, defined(answer.headers)] as [number, unknown, Record<string, string>];
  };
  const scope = nock(origin).persist();
  for (const method of ['get', 'post', 'put'] as const) scope[method](/.*/).reply(reply);
  return {
    url: origin,
    arrivals,
    times: (user, since) => timesOf(arrivals, user, since),
    close: async () => {
      scope.persist(false);
      nock.cleanAll();
    },
  };
}

function defined(headers: Reply['headers']): Record<string, string> {
  return Object.fromEntries(Object.entries(headers ?? {}).filter((entry): entry is [string, string] => entry[1] !== undefined));
}

function timesOf(arrivals: readonly Arrival[], user: string, since: number): number[] {
  return arrivals.filter((arrival) => arrival.user === user).map((arrival) => Math.round((arrival.at - since) * 10) / 10);
}

/** The most arrivals inside any half-open window `[t, t + windowMs)`. */
export function mostInWindow(times: readonly number[], windowMs: number): number {
  const sorted = [...times].sort((a, b) => a - b);
  let most = 0;
  for (let i = 0, j = 0; i < sorted.length; i++) {
    while (sorted[i]! - sorted[j]! >= windowMs) j++;
    most = Math.max(most, i - j + 1);
  }
  return most;
}

/**
 * Checks that no request waited longer than it had to: each one after the first `limit` arrived at
 * most `windowMs` + `slackMs` after the response it waited for, the `limit`-th latest response among
 * the requests that arrived before it (a request counts from its start until its response + the window).
 */
export function expectNoIdleWait(
  requests: ReadonlyArray<{ readonly arrivedAt: number; readonly doneAt: number }>,
  limit: number,
  windowMs: number,
  slackMs: number,
): void {
  const sorted = [...requests].sort((a, b) => a.arrivedAt - b.arrivedAt);
  for (let i = limit; i < sorted.length; i++) {
    const before = sorted
      .slice(0, i)
      .map((request) => request.doneAt)
      .sort((a, b) => a - b);
    const due = before[i - limit]! + windowMs;
    expect(sorted[i]!.arrivedAt, `arrival ${i}: ${(sorted[i]!.arrivedAt - due).toFixed(1)} ms after its slot`).to.be.at.most(due + slackMs);
  }
}
