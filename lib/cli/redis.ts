import type * as IORedis from 'ioredis';
import type { Cluster, Redis } from 'ioredis';
import { CliError, EXIT } from './errors.js';

export type RedisClient = Redis | Cluster;

/** How long connecting may take before the command gives up. */
const CONNECT_TIMEOUT_MS = 5_000;

/**
 * Connects to Redis (or, with `cluster`, to the Redis Cluster that `url` is a node of) and waits
 * until it answers. ioredis is an optional peer dependency of the library: it is loaded here, only
 * when `--redis` is given. Throws `CliError` (exit 3) when it cannot connect within 5 s.
 */
export async function connectRedis(url: string, cluster: boolean): Promise<RedisClient> {
  let ioredis: Pick<typeof IORedis, 'Redis' | 'Cluster'>;
  try {
    ioredis = await import('ioredis');
  } catch {
    throw new CliError('--redis needs the ioredis package next to vendor-throttle: npm install ioredis', EXIT.fatal);
  }
  const parsed = new URL(url);
  const client: RedisClient = cluster
    ? new ioredis.Cluster([{ host: parsed.hostname, port: Number(parsed.port || 6379) }], {
        lazyConnect: true,
        redisOptions: {
          username: parsed.username === '' ? undefined : decodeURIComponent(parsed.username),
          password: parsed.password === '' ? undefined : decodeURIComponent(parsed.password),
          tls: parsed.protocol === 'rediss:' ? {} : undefined,
          connectTimeout: CONNECT_TIMEOUT_MS,
        },
      })
    : new ioredis.Redis(url, { lazyConnect: true, connectTimeout: CONNECT_TIMEOUT_MS, maxRetriesPerRequest: 2 });
  let lastError: unknown;
  // Failed commands reject on their own; the event only says the connection dropped (ioredis reconnects).
  client.on('error', (error: unknown) => (lastError = error));
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      client.connect().then(() => client.ping()),
      new Promise<never>((_resolve, reject) => {
        timer = setTimeout(() => reject(lastError ?? new Error(`no answer within ${CONNECT_TIMEOUT_MS / 1000} s`)), CONNECT_TIMEOUT_MS);
      }),
    ]);
  } catch (error) {
    client.disconnect();
    // ioredis rejects with "Connection is closed"; the error event said why.
    const reason = ((lastError ?? error) as Error).message;
    throw new CliError(`cannot reach Redis${cluster ? ' Cluster' : ''} at ${redact(url)}: ${reason}`, EXIT.fatal);
  } finally {
    clearTimeout(timer);
  }
  return client;
}

/** Closes a client, waiting for replies still due; gives up (disconnects) after 2 s. */
export async function closeRedis(client: RedisClient): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([client.quit().catch(() => undefined), new Promise((resolve) => (timer = setTimeout(resolve, 2_000)))]);
  clearTimeout(timer);
  client.disconnect();
}

/** The URL without its password, for messages. */
export function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') parsed.password = '***';
    return parsed.href;
  } catch {
    return url;
  }
}
