/**
 * RedisStore on node-redis clients (`createClient()`, `createCluster()`), beside ioredis: what only
 * node-redis needs (EVALSHA with one resend on NOSCRIPT, a client connected by its owner), and
 * throttles on both libraries sharing one limit. The store contract itself runs on node-redis in
 * spec/store-contract.spec.ts.
 */
import { expect } from 'chai';
import { createCluster, RESP_TYPES } from 'redis';
import { RateLimitedError, StoreUnavailableError, Throttle, type RedisStore } from '../lib/index.js';
import type { ReserveRequest } from '../lib/store.js';
import { ClientDriver } from '../lib/stores/redis-client.js';
import { nodeRedisClient, redisClient, redisStore, uniquePrefix, type NodeRedisClient } from './support/hooks.js';
import { startRedisCluster, type RedisCluster } from './support/redis-cluster.js';
import { startRedis } from '../scripts/support/redis-server.js';
import { createClient } from 'redis';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function request(key = 'k'): ReserveRequest {
  return { namespace: 'ns', key, cost: 1, rules: [{ limit: 5, windowMs: 1_000 }], maxDelayMs: 0, maxHoldMs: 1_000, retainMs: 1_000 };
}

/** Records the name of every command the client sends (EVALSHA, EVAL, GET, …). */
function recordCommands(client: NodeRedisClient): string[] {
  const sent: string[] = [];
  const send = client.sendCommand.bind(client);
  client.sendCommand = ((args: readonly string[], options?: never) => {
    sent.push(String(args[0]));
    return send(args, options);
  }) as typeof client.sendCommand;
  return sent;
}

/**
 * One call on `first` holds the only slot of '1 concurrent' for `holdMs`; a call on `second` waits
 * for it and is woken by its completion. Returns when each call started and ended.
 */
async function waitRound(first: Throttle, second: Throttle, holdMs = 150, key = 'u'): Promise<{ firstEnd: number; secondStart: number }> {
  let firstEnd = 0;
  let secondStart = 0;
  let started!: () => void;
  const firstStarted = new Promise<void>((resolve) => (started = resolve));
  const holding = first.schedule(key, async () => {
    started();
    await sleep(holdMs);
    firstEnd = performance.now();
  });
  // The first call has its slot before the second asks: once it runs (a fixed sleep was not enough
  // on a loaded machine, where a fresh store's first booking, its epoch read first, took longer).
  await firstStarted;
  await second.schedule(key, () => {
    secondStart = performance.now();
  });
  await holding;
  return { firstEnd, secondStart };
}

describe('RedisStore on node-redis', () => {
  const throttles: Throttle[] = [];
  afterEach(async () => {
    await Promise.all(throttles.splice(0).map((throttle) => throttle.close()));
  });

  function throttle(store: RedisStore, rules: ConstructorParameters<typeof Throttle>[0]['rules'], maxDelayMs?: number): Throttle {
    const made = new Throttle({ name: 'acme', rules, store, maxDelayMs });
    throttles.push(made);
    return made;
  }

  it('shares one limit with a throttle on ioredis: each sees the calls of the other', async () => {
    const prefix = uniquePrefix();
    const onNode = throttle(redisStore(await nodeRedisClient(), { prefix }), ['3/10s'], 0);
    const onIORedis = throttle(redisStore(redisClient(), { prefix }), ['3/10s'], 0);
    await onIORedis.schedule('u', () => 1);
    await onIORedis.schedule('u', () => 2);
    await onNode.schedule('u', () => 3);
    expect((await onNode.inspect('u')).rules[0]!.used).to.equal(3);
    expect(await onNode.schedule('u', () => 4).catch((error: unknown) => error)).to.be.instanceOf(RateLimitedError);
    expect(await onIORedis.schedule('u', () => 5).catch((error: unknown) => error)).to.be.instanceOf(RateLimitedError);
  });

  for (const RESP of [2, 3] as const) {
    it(`RESP${RESP}: a call waiting on node-redis is woken by the completion of a call on ioredis, and the other way round`, async () => {
      const prefix = uniquePrefix();
      const onNode = throttle(redisStore(await nodeRedisClient({ RESP }), { prefix }), ['1 concurrent']);
      const onIORedis = throttle(redisStore(redisClient(), { prefix }), ['1 concurrent']);
      for (const [first, second] of [
        [onIORedis, onNode],
        [onNode, onIORedis],
      ] as const) {
        const { firstEnd, secondStart } = await waitRound(first, second);
        // Started once the first ended, woken by its completion, not at its bound (maxHoldMs, 10 s).
        expect(secondStart).to.be.at.least(firstEnd);
        expect(secondStart - firstEnd).to.be.below(100);
      }
    });
  }

  it('a script Redis no longer holds (SCRIPT FLUSH) is sent again once, as EVAL, and the call is decided', async () => {
    const client = await nodeRedisClient();
    const store = redisStore(client, { prefix: uniquePrefix(), recovery: false });
    expect((await store.reserve(request())).status).to.equal('booked');
    await client.sendCommand(['SCRIPT', 'FLUSH']);
    const sent = recordCommands(client);
    expect((await store.reserve(request())).status).to.equal('booked');
    expect(sent).to.deep.equal(['EVALSHA', 'EVAL']);
    // Loaded again by the EVAL: the next goes as EVALSHA alone.
    sent.length = 0;
    expect((await store.reserve(request())).status).to.equal('booked');
    expect(sent).to.deep.equal(['EVALSHA']);
  });

  it('recovers from SCRIPT FLUSH with recovery on, whose epoch script is flushed too', async () => {
    const client = await nodeRedisClient();
    const store = redisStore(client, { prefix: uniquePrefix() });
    await store.reserve(request());
    await client.sendCommand(['SCRIPT', 'FLUSH']);
    expect((await store.reserve(request('other'))).status).to.equal('booked');
    expect(store.recoveries).to.equal(0);
  });

  it('sends a script once when it fails in any other way: it may have run, and a resend could book twice', async () => {
    const sent: string[][] = [];
    const failures = [new Error('ERR vtBatch: injected'), new Error('Socket closed unexpectedly')];
    const fake = {
      isOpen: true,
      isReady: true,
      duplicate: () => fake,
      on: () => fake,
      off: () => fake,
      sendCommand: (args: string[]) => {
        sent.push(args);
        return Promise.reject(failures[0]!);
      },
    };
    const store = redisStore(fake, { prefix: uniquePrefix(), recovery: false });
    for (const failure of [...failures]) {
      failures[0] = failure;
      sent.length = 0;
      expect(await store.reserve(request()).catch((error: unknown) => error)).to.equal(failure);
      expect(sent.map((args) => args[0])).to.deep.equal(['EVALSHA']);
    }
  });

  it("reads replies as node-redis' defaults whatever the client's type mapping (strings as Buffers)", async () => {
    const client = (await nodeRedisClient({ RESP: 3 })).withTypeMapping({ [RESP_TYPES.BLOB_STRING]: Buffer });
    const prefix = uniquePrefix();
    await client.sendCommand(['SET', `${prefix}:s`, 'v']);
    await client.sendCommand(['HSET', `${prefix}:h`, 'f', 'w']);
    // What the recovery compares (the namespace's epoch) and the pause reads: strings, as from ioredis.
    const driver = new ClientDriver(client, 1_000);
    try {
      expect(await driver.get(`${prefix}:s`)).to.equal('v');
      expect(await driver.hget(`${prefix}:h`, 'f')).to.equal('w');
      expect(await driver.info('stats'))
        .to.be.a('string')
        .and.match(/evicted_keys:\d+/);
    } finally {
      driver.close();
    }
    const store = redisStore(client, { prefix });
    const onNode = throttle(store, ['1 concurrent', '3/10s'], 0);
    await onNode.schedule('u', () => 1);
    await onNode.pause('u', 500);
    const inspected = await onNode.inspect('u');
    expect(inspected.rules[1]!.used).to.equal(1);
    expect(inspected.pausedForMs).to.be.within(400, 501); // the store rounds the end of the pause up
  });

  it('a client not connected yet fails every call at once saying so, and serves them once its owner connects it', async () => {
    const client = (await nodeRedisClient()).duplicate();
    const store = redisStore(client, { prefix: uniquePrefix(), commandTimeoutMs: 5_000 });
    const started = performance.now();
    const error = await store.reserve(request()).catch((failure: unknown) => failure);
    expect(error).to.be.instanceOf(StoreUnavailableError);
    expect((error as Error).message).to.match(/node-redis client is not open .*await client\.connect\(\)/);
    expect(performance.now() - started).to.be.below(100);
    await client.connect();
    try {
      expect((await store.reserve(request())).status).to.equal('booked');
    } finally {
      await store.close();
      client.destroy();
    }
  });

  it('fails calls at once while Redis is down, not after commandTimeoutMs, and serves them once it is back', async () => {
    let server = await startRedis();
    const client = createClient({ url: server.url });
    client.on('error', () => undefined);
    await client.connect();
    const store = redisStore(client, { prefix: uniquePrefix(), commandTimeoutMs: 5_000, recovery: false });
    try {
      expect((await store.reserve(request())).status).to.equal('booked');
      const port = server.port;
      await server.stop();
      // The client's first attempt to reconnect is refused.
      await sleep(300);
      const started = performance.now();
      const error = await store.reserve(request()).catch((failure: unknown) => failure);
      expect(error).to.be.instanceOf(StoreUnavailableError);
      expect((error as Error).message).to.match(/^Redis cannot be reached: the client is reconnecting \(.*ECONNREFUSED/);
      expect(performance.now() - started).to.be.below(100);
      const back = store.reconnected();
      expect(back).to.not.equal(undefined);
      server = await startRedis({ port });
      await back;
      expect((await store.reserve(request())).status).to.equal('booked');
    } finally {
      await store.close();
      client.destroy();
      await server.stop();
    }
  });

  it('follows its owner closing the client: calls fail at once, and work again, wakes and all, once it connects again', async () => {
    const client = await nodeRedisClient();
    const prefix = uniquePrefix();
    const store = redisStore(client, { prefix });
    const limited = throttle(store, ['1 concurrent']);
    const holding = limited.schedule('u', () => sleep(100));
    await sleep(20);
    const waiting = limited.schedule('u', () => 'second').catch((error: unknown) => error);
    await sleep(30);
    await client.close();
    expect(await waiting).to.be.instanceOf(StoreUnavailableError);
    await holding.catch(() => undefined);
    expect(store.ended).to.equal(true);
    await client.connect();
    expect(store.ended).to.equal(false);
    // The slot of the call cut short counts to its bound: a new key, woken by a process on ioredis.
    const other = throttle(redisStore(redisClient(), { prefix }), ['1 concurrent']);
    const { firstEnd, secondStart } = await waitRound(other, limited, 150, 'v');
    expect(secondStart).to.be.at.least(firstEnd);
    expect(secondStart - firstEnd).to.be.below(100);
  });
});

describe('RedisStore on a node-redis cluster (createCluster, 3 masters)', function () {
  this.timeout(30_000);
  let cluster: RedisCluster;
  const clients: Array<{ close(): Promise<unknown> }> = [];

  before(async function () {
    this.timeout(60_000);
    cluster = await startRedisCluster({ masters: 3 });
  });

  after(async function () {
    this.timeout(20_000);
    await Promise.allSettled(clients.map((client) => client.close()));
    await cluster?.stop();
  });

  async function connected() {
    const client = createCluster({ rootNodes: cluster.startupNodes.map(({ host, port }) => ({ url: `redis://${host}:${port}` })) });
    clients.push(client);
    client.on('error', () => undefined);
    await client.connect();
    return client;
  }

  it('decides, waits and wakes across two processes, keys spread over the masters', async () => {
    const prefix = uniquePrefix();
    const stores = [redisStore(await connected(), { prefix }), redisStore(await connected(), { prefix })];
    const [one, two] = stores.map((store) => new Throttle({ name: 'acme', rules: ['1 concurrent', '20/10s'], store }));
    try {
      const { firstEnd, secondStart } = await waitRound(one!, two!);
      expect(secondStart).to.be.at.least(firstEnd);
      expect(secondStart - firstEnd).to.be.below(100);
      // Keys of several slots, so several masters: each decided there.
      const users = Array.from({ length: 12 }, (_, i) => `user-${i}`);
      await Promise.all(users.map((user) => one!.schedule(user, () => user)));
      for (const user of users) expect((await two!.inspect(user)).rules[1]!.used).to.equal(1);
    } finally {
      await Promise.all([one!.close(), two!.close()]);
    }
  });
});
