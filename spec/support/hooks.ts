import type { Cluster, Redis } from 'ioredis';
import { Redis as RedisClient } from 'ioredis';
import { createClient } from 'redis';
import type { RedisClientLike, RedisStoreOptions } from '../../lib/stores/redis-options.js';
import { RedisStore } from '../../lib/stores/redis-store.js';
import { startRedis, type RedisServer } from '../../scripts/support/redis-server.js';

let server: RedisServer | undefined;
const clients: Redis[] = [];
const nodeClients: NodeRedisClient[] = [];

/** A node-redis client (`createClient()`). */
export type NodeRedisClient = ReturnType<typeof createClient>;
const stores: RedisStore[] = [];

/** The standalone redis-server this test run started (one for the whole run). */
export function redisServer(): RedisServer {
  if (!server) throw new Error('the test Redis is not running (spec/support/hooks.ts starts it)');
  return server;
}

/** A new client of the test Redis, closed after the run. */
export function redisClient(options: { enableAutoPipelining?: boolean; keyPrefix?: string } = {}): Redis {
  const client = new RedisClient(redisServer().url, { ...options });
  clients.push(client);
  return client;
}

/** A new node-redis client of the test Redis, connected (RESP2 unless told), closed after the run. */
export async function nodeRedisClient(options: { RESP?: 2 | 3 } = {}): Promise<NodeRedisClient> {
  const client = createClient({ url: redisServer().url, RESP: options.RESP ?? 2 }) as NodeRedisClient;
  nodeClients.push(client);
  await client.connect();
  return client;
}

/**
 * A RedisStore closed after the test that made it. A store left open keeps its recovery heartbeat
 * going while its journal holds calls, and those timers would land in a later test's fake clock.
 */
export function redisStore(client: Redis | Cluster | RedisClientLike, options?: RedisStoreOptions): RedisStore {
  const store = new RedisStore(client, options);
  stores.push(store);
  return store;
}

let prefixes = 0;
/** A key prefix no other test uses, so tests never see each other's keys. */
export function uniquePrefix(): string {
  prefixes += 1;
  return `t${process.pid}-${prefixes}`;
}

export const mochaHooks = {
  async beforeAll(this: Mocha.Context) {
    this.timeout(20_000);
    server = await startRedis();
  },
  async afterEach() {
    await Promise.allSettled(stores.splice(0).map((store) => store.close()));
  },
  async afterAll(this: Mocha.Context) {
    this.timeout(20_000);
    await Promise.allSettled(clients.map((client) => client.quit()));
    await Promise.allSettled(nodeClients.map((client) => (client.isOpen ? client.close() : undefined)));
    await server?.stop();
    server = undefined;
  },
};
