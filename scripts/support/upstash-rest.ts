/**
 * A small server that speaks Upstash's REST protocol in front of a real redis-server, for the specs
 * and benches that run `@upstash/redis` (a function's Redis client) against their own Redis:
 *
 * - `POST /` with a JSON command (`["SET","k","v"]`): `{"result": …}`, or `{"error": "…"}` with 400;
 * - `POST /pipeline` with a JSON array of commands: an array of `{result}` / `{error}`;
 * - `POST /multi-exec`: the same, in one MULTI/EXEC;
 * - `Authorization: Bearer <token>`, else 401;
 * - `Upstash-Encoding: base64`: every string of a result base64-encoded (numbers and nulls as they are).
 *
 * No pub/sub, as a function's Redis has none it can hold: SUBSCRIBE is refused. Each request is
 * counted (`requests`), with the commands it carried, so that a spec or a bench can tell what a
 * call costs in HTTP requests.
 */
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Redis } from 'ioredis';

export interface UpstashRest {
  /** The REST URL, for `new Redis({ url, token })` of `@upstash/redis`. */
  readonly url: string;
  readonly token: string;
  /** Requests served (one per HTTP request), each with the names of the commands it carried and its headers. */
  readonly requests: Array<{ readonly path: string; readonly commands: readonly string[]; readonly headers: IncomingHttpHeaders }>;
  close(): Promise<void>;
}

type Reply = null | number | string | Buffer | Reply[];

/** A reply as the REST API writes it: strings base64-encoded when asked. */
function encode(reply: Reply, base64: boolean): unknown {
  if (reply === null || typeof reply === 'number') return reply;
  if (Array.isArray(reply)) return reply.map((item) => encode(item, base64));
  const bytes = Buffer.isBuffer(reply) ? reply : Buffer.from(reply);
  return base64 ? bytes.toString('base64') : bytes.toString('utf8');
}

function isCommand(value: unknown): value is Array<string | number> {
  return Array.isArray(value) && value.length > 0 && value.every((part) => typeof part === 'string' || typeof part === 'number');
}

/** Starts the server on 127.0.0.1 (a free port), in front of the Redis at `redisUrl`. */
export async function startUpstashRest(redisUrl: string, token = 'test-token'): Promise<UpstashRest> {
  const redis = new Redis(redisUrl, { lazyConnect: false, maxRetriesPerRequest: 1 });
  // A Redis that is down answers each command with its error (a REST API's 400): nothing more to say.
  redis.on('error', () => undefined);
  const requests: Array<{ path: string; commands: string[]; headers: IncomingHttpHeaders }> = [];
  const run = async (command: Array<string | number>): Promise<{ result: unknown } | { error: string }> => {
    const [name, ...args] = command.map(String);
    if (/^(p|s)?subscribe$/i.test(name!)) return { error: 'ERR pub/sub is not served over REST here' };
    try {
      return { result: (await redis.callBuffer(name!, ...args)) as Reply };
    } catch (error) {
      return { error: error instanceof Error ? error.message : String(error) };
    }
  };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      void (async () => {
        const send = (status: number, body: unknown): void => {
          res.writeHead(status, { 'content-type': 'application/json', 'upstash-sync-token': String(requests.length) }).end(JSON.stringify(body));
        };
        if (req.method !== 'POST') return send(405, { error: 'only POST is served here' });
        if (req.headers.authorization !== `Bearer ${token}`) return send(401, { error: 'Unauthorized' });
        let body: unknown;
        try {
          body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        } catch {
          return send(400, { error: 'ERR the body is not JSON' });
        }
        const base64 = String(req.headers['upstash-encoding'] ?? '').toLowerCase() === 'base64';
        const path = (req.url ?? '/').split('?')[0]!;
        const encoded = (answer: { result: unknown } | { error: string }) => ('error' in answer ? answer : { result: encode(answer.result as Reply, base64) });
        if (path === '/pipeline' || path === '/multi-exec') {
          if (!Array.isArray(body) || !body.every(isCommand)) return send(400, { error: 'ERR expected an array of commands' });
          requests.push({ path, commands: body.map((command) => String(command[0]).toLowerCase()), headers: req.headers });
          if (path === '/pipeline') return send(200, (await Promise.all(body.map(run))).map(encoded));
          const multi = redis.multi();
          for (const command of body) multi.callBuffer(String(command[0]), ...command.slice(1).map(String));
          const results: Array<[Error | null, unknown]> = (await multi.exec()) ?? [];
          return send(
            200,
            results.map(([error, result]) => (error ? { error: error.message } : { result: encode(result as Reply, base64) })),
          );
        }
        if (path !== '/') return send(404, { error: `ERR no such path ${path}` });
        if (!isCommand(body)) return send(400, { error: 'ERR expected a command: a JSON array of strings' });
        requests.push({ path, commands: [String(body[0]).toLowerCase()], headers: req.headers });
        const answer = await run(body);
        return send('error' in answer ? 400 : 200, encoded(answer));
      })();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    token,
    requests,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
      redis.disconnect();
    },
  };
}

/**
 * Counts the requests an `@upstash/redis` client sends from now on (through the `Requester` it
 * holds, as the store's commands go): the returned function reads the count.
 */
export function countRequests(client: object): () => number {
  const requester = (client as { client: { request(request: unknown): Promise<unknown> } }).client;
  const request = requester.request.bind(requester);
  let made = 0;
  requester.request = (sent) => {
    made++;
    return request(sent);
  };
  return () => made;
}
