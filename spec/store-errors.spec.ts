/**
 * What calls do when Redis fails: each `onStoreError` policy against a real redis-server this spec
 * starts, stops, pauses and fills up (never the run's shared server).
 */
import { expect } from 'chai';
import { Redis, type RedisOptions } from 'ioredis';
import { RateLimitedError, StoreUnavailableError, Throttle, type StoreErrorPolicy, type StoreNotice, type ThrottleEvents } from '../lib/index.js';
import { startRedis, type RedisServer } from '../scripts/support/redis-server.js';
import { redisStore, uniquePrefix } from './support/hooks.js';
import type { RuleString } from '../lib/rules.js';

type StoreErrorEvent = ThrottleEvents['storeError'][0];

describe('when Redis fails (onStoreError)', function () {
  this.timeout(30_000);
  let server: RedisServer;
  let client: Redis;
  const throttles: Throttle[] = [];

  beforeEach(async () => {
    server = await startRedis();
    // Fail fast while disconnected, as a production client would be configured to.
    client = new Redis(server.url, { maxRetriesPerRequest: 1, retryStrategy: (times) => Math.min(times * 20, 100) });
    client.on('error', () => {});
  });

  afterEach(async () => {
    await Promise.all(throttles.splice(0).map((throttle) => throttle.close()));
    client.disconnect();
    await server.stop();
  });

  function make(policy: StoreErrorPolicy, options: { commandTimeoutMs?: number; localShare?: number; maxDelayMs?: number; rules?: string[] } = {}) {
    const store = redisStore(client, { prefix: uniquePrefix(), commandTimeoutMs: options.commandTimeoutMs ?? 300 });
    const throttle = new Throttle({
      name: 'acme',
      rules: (options.rules ?? ['4/400ms']) as RuleString[],
      store,
      onStoreError: policy,
      localShare: options.localShare,
      maxDelayMs: options.maxDelayMs,
    });
    throttles.push(throttle);
    const errors: StoreErrorEvent[] = [];
    throttle.on('storeError', (event) => errors.push(event));
    return { throttle, store, errors };
  }

  it("'fail' (the default) rejects with StoreUnavailableError and never calls fn when Redis is down", async () => {
    const { throttle, errors } = make('fail');
    await throttle.schedule('u', () => 'warm');
    await server.stop();
    let ran = false;
    const error = await throttle.schedule('u', () => (ran = true)).catch((reason: unknown) => reason);
    expect(error).to.be.instanceOf(StoreUnavailableError);
    expect(ran).to.equal(false);
    expect(errors).to.have.length(1);
    expect(errors[0]!.policy).to.equal('fail');
    expect(errors[0]!.key).to.equal('u');
  });

  it('a hung Redis fails the call after commandTimeoutMs instead of hanging it', async () => {
    const { throttle } = make('fail', { commandTimeoutMs: 200 });
    await throttle.schedule('u', () => 'warm');
    const admin = new Redis(server.url);
    await admin.client('PAUSE', 1_500, 'ALL');
    const startedAt = performance.now();
    const error = await throttle.schedule('u', () => 'ran').catch((reason: unknown) => reason);
    const tookMs = performance.now() - startedAt;
    admin.disconnect();
    expect(error).to.be.instanceOf(StoreUnavailableError);
    expect((error as Error).message).to.match(/did not answer within 200 ms/);
    expect(tookMs).to.be.within(190, 1_000);
  });

  it('Redis out of memory (maxmemory reached) is a StoreUnavailableError, and nothing runs', async () => {
    const { throttle } = make('fail');
    await throttle.schedule('u', () => 'warm');
    await client.config('SET', 'maxmemory', '1');
    let ran = false;
    const error = await throttle.schedule('other', () => (ran = true)).catch((reason: unknown) => reason);
    await client.config('SET', 'maxmemory', '0');
    expect(error).to.be.instanceOf(StoreUnavailableError);
    expect(String((error as StoreUnavailableError).cause)).to.match(/OOM/);
    expect(ran).to.equal(false);
    // Memory is back: calls go through again.
    expect(await throttle.schedule('other', () => 'ran')).to.equal('ran');
  });

  it("'wait' keeps asking until Redis answers again, then books as usual", async () => {
    // Each attempt that timed out is still carried out once the pause ends, and books a slot nobody
    // uses: given back when its answer comes.
    const { throttle, errors } = make('wait', { commandTimeoutMs: 150, rules: ['20/400ms'] });
    await throttle.schedule('u', () => 'warm');
    const admin = new Redis(server.url);
    await admin.client('PAUSE', 700, 'ALL');
    const startedAt = performance.now();
    // Two calls: the asks of one batch fail together, and each keeps asking.
    expect(await Promise.all([throttle.schedule('u', () => 'ran'), throttle.schedule('v', () => 'ran too')])).to.deep.equal(['ran', 'ran too']);
    admin.disconnect();
    expect(performance.now() - startedAt).to.be.within(600, 3_000);
    // Only the calls that ran count (the warm-up's window is over): the late answers' slots went.
    await new Promise((resolve) => setTimeout(resolve, 100));
    for (const key of ['u', 'v']) expect((await throttle.inspect(key)).rules[0]!.used, key).to.equal(1);
    expect(errors.length).to.be.at.least(1);
    expect(errors.every((event) => event.policy === 'wait')).to.equal(true);
  });

  it("'wait' gives up with StoreUnavailableError once the call's maxDelayMs is spent", async () => {
    const { throttle } = make('wait', { commandTimeoutMs: 100, maxDelayMs: 400 });
    await throttle.schedule('u', () => 'warm');
    await server.stop();
    const startedAt = performance.now();
    let ran = false;
    const error = await throttle.schedule('u', () => (ran = true)).catch((reason: unknown) => reason);
    expect(error).to.be.instanceOf(StoreUnavailableError);
    expect(ran).to.equal(false);
    expect(performance.now() - startedAt).to.be.within(100, 1_500);
  });

  it("'wait' rejects by the call's maxDelayMs even while each ask to a hung Redis takes commandTimeoutMs", async () => {
    // Asks at 0 (times out at 400), 425 (times out at 825) and 875: the last must not run to 1,275.
    const { throttle, errors } = make('wait', { commandTimeoutMs: 400, maxDelayMs: 900 });
    await throttle.schedule('u', () => 'warm');
    const admin = new Redis(server.url);
    await admin.client('PAUSE', 2_000, 'ALL');
    const startedAt = performance.now();
    let ran = false;
    const error = await throttle.schedule('u', () => (ran = true)).catch((reason: unknown) => reason);
    const tookMs = performance.now() - startedAt;
    expect(error).to.be.instanceOf(StoreUnavailableError);
    expect(ran).to.equal(false);
    expect(tookMs).to.be.within(850, 1_150);
    // One event per ask that failed, none for the deadline.
    expect(errors).to.have.length(2);
    admin.disconnect();
  });

  it("'local' decides in-process with localShare of each limit, and puts those calls into Redis once it is back", async () => {
    const { throttle, errors } = make('local', { localShare: 0.5, rules: ['4/5s'], maxDelayMs: 0 });
    const port = server.port;
    await server.stop();
    // 4/5s with a share of 0.5: 2 calls may start locally, the third is refused.
    const outcomes = await Promise.allSettled([1, 2, 3].map(() => throttle.schedule('u', () => 'local')));
    expect(outcomes.map((outcome) => outcome.status)).to.deep.equal(['fulfilled', 'fulfilled', 'rejected']);
    expect(errors.length).to.be.at.least(1);
    expect(errors[0]!.policy).to.equal('local');
    // Redis comes back (empty): the two local calls are put into it before anything new is decided there.
    server = await startRedis({ port });
    await waitFor(async () => (await throttle.inspect('u').catch(() => undefined))?.rules[0]!.used === 2, 3_000);
    const usage = await throttle.inspect('u');
    expect(usage.rules[0]!.used).to.equal(2);
    // Redis counts them: 2 more fit, then the window is full.
    const after = await Promise.allSettled([1, 2, 3].map(() => throttle.schedule('u', () => 'redis')));
    expect(after.map((outcome) => outcome.status)).to.deep.equal(['fulfilled', 'fulfilled', 'rejected']);
  });

  it("'local' counts this process's own calls made through Redis just before it failed", async () => {
    const { throttle } = make('local', { localShare: 1, rules: ['2/5s'], maxDelayMs: 0 });
    expect(await throttle.schedule('u', () => 'redis')).to.equal('redis');
    expect(await throttle.schedule('u', () => 'redis')).to.equal('redis');
    await server.stop();
    // The window already holds this process's two calls: the local fallback must not grant a third.
    const error = await throttle.schedule('u', () => 'local').catch((reason: unknown) => reason);
    expect(error).to.be.instanceOf(RateLimitedError);
    expect((error as RateLimitedError).retryAfterMs).to.be.within(4_000, 5_100);
    // Another key has no calls yet: it gets its share at once.
    expect(await throttle.schedule('v', () => 'local')).to.equal('local');
  });

  it("'local' counts, in a second outage, the calls made through Redis since the first", async () => {
    const { throttle } = make('local', { localShare: 1, rules: ['3/10s'], maxDelayMs: 0 });
    const port = server.port;
    await server.stop();
    expect(await throttle.schedule('u', () => 'local')).to.equal('local');
    // Redis comes back empty: the local call is put back, and two more go through Redis.
    server = await startRedis({ port });
    await waitFor(async () => (await throttle.inspect('u').catch(() => undefined))?.rules[0]!.used === 1, 3_000);
    expect(await throttle.schedule('u', () => 'redis')).to.equal('redis');
    expect(await throttle.schedule('u', () => 'redis')).to.equal('redis');
    await server.stop();
    // The window holds 3 calls of this process: the local fallback, which still holds the first, must
    // count the two made through Redis too, and grant nothing more.
    const error = await throttle.schedule('u', () => 'local').catch((reason: unknown) => reason);
    expect(error).to.be.instanceOf(RateLimitedError);
  });

  it('says once an outage that the recovery heartbeat and the eviction check fail (storeWarning heartbeatFailed, evictionCheckFailed)', async () => {
    const store = redisStore(client, { prefix: uniquePrefix(), commandTimeoutMs: 300, recovery: { heartbeatMs: 50, graceMs: 150 } });
    const throttle = new Throttle({ name: 'acme', rules: ['4/10s'], store });
    throttles.push(throttle);
    const warnings: StoreNotice[] = [];
    throttle.on('storeWarning', (warning) => warnings.push(warning));
    // The journal holds the call for 10 s: the heartbeat beats every 50 ms meanwhile.
    await throttle.schedule('u', () => 'ran');
    const port = server.port;
    const outage = async (): Promise<void> => {
      await server.stop();
      // About ten beats, each failing.
      await new Promise((resolve) => setTimeout(resolve, 500));
    };
    await outage();
    // One of each, in the order the two found Redis gone.
    const kinds = (): string[] => warnings.map((warning) => warning.kind).sort();
    expect(kinds()).to.deep.equal(['evictionCheckFailed', 'heartbeatFailed']);
    const beat = warnings.find((warning) => warning.kind === 'heartbeatFailed')!;
    expect(beat.message).to.match(/^The recovery heartbeat cannot check Redis for lost data \(.+\): until a beat succeeds/);
    expect(beat.error).to.be.instanceOf(Error);
    // Redis is back (empty): a beat finds the loss and puts the call back, then beats succeed.
    server = await startRedis({ port });
    await waitFor(async () => store.recoveries === 1, 3_000);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(warnings).to.have.length(2);
    await outage();
    expect(kinds()).to.deep.equal(['evictionCheckFailed', 'evictionCheckFailed', 'heartbeatFailed', 'heartbeatFailed']);
  });

  it("'local' refuses a call whose cost is above the local share", async () => {
    const { throttle } = make('local', { localShare: 0.25, rules: ['4/s'] });
    await server.stop();
    const error = await throttle.schedule('u', () => 'x', { cost: 2 }).catch((reason: unknown) => reason);
    expect(error).to.be.instanceOf(StoreUnavailableError);
    expect((error as Error).message).to.match(/above this process's share/);
  });
});

async function waitFor(check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe('a Redis that cannot be reached: StoreUnavailableError says why, and no call waits commandTimeoutMs for it', function () {
  this.timeout(20_000);
  let server: RedisServer;
  const clients: Redis[] = [];
  const throttles: Throttle[] = [];

  beforeEach(async () => {
    server = await startRedis();
  });

  afterEach(async () => {
    await Promise.all(throttles.splice(0).map((throttle) => throttle.close()));
    for (const client of clients.splice(0)) client.disconnect();
    await server.stop();
  });

  /**
   * A throttle on a client with ioredis's default retries, which queue commands while it reconnects,
   * and the store's default commandTimeoutMs (5 s) unless given.
   */
  function onClient(
    options: number | string | RedisOptions,
    throttleOptions: { onStoreError?: StoreErrorPolicy; maxDelayMs?: number; commandTimeoutMs?: number; recovery?: false } = {},
  ): { throttle: Throttle; errors: StoreErrorEvent[] } {
    // As a user would create it: new Redis(port), new Redis(url) or new Redis(options).
    const client = typeof options === 'number' ? new Redis(options) : typeof options === 'string' ? new Redis(options) : new Redis(options);
    clients.push(client);
    const { onStoreError, maxDelayMs, commandTimeoutMs, recovery } = throttleOptions;
    const store = redisStore(client, { prefix: uniquePrefix(), commandTimeoutMs, recovery });
    const throttle = new Throttle({ name: 'acme', rules: ['4/s'], store, onStoreError, maxDelayMs });
    throttles.push(throttle);
    const errors: StoreErrorEvent[] = [];
    throttle.on('storeError', (event) => errors.push(event));
    return { throttle, errors };
  }

  /** A call's outcome and how long it took to settle. */
  async function timed(call: Promise<unknown>): Promise<{ value?: unknown; error?: Error; tookMs: number }> {
    const startedAt = performance.now();
    const outcome = await call.then(
      (value: unknown) => ({ value }),
      (error: unknown) => ({ error: error as Error }),
    );
    return { ...outcome, tookMs: performance.now() - startedAt };
  }

  function expectRefused(error: Error | undefined, port: number): void {
    expect(error).to.be.instanceOf(StoreUnavailableError);
    expect(error!.message).to.match(new RegExp(`cannot be reached.*ECONNREFUSED 127\\.0\\.0\\.1:${port}`));
    expect((error!.cause as { code?: string }).code).to.equal('ECONNREFUSED');
  }

  it("'fail' (the default): a refused connection fails the call at once, not after commandTimeoutMs, the message and the cause carrying ECONNREFUSED", async () => {
    await server.stop();
    for (const options of [server.port, { port: server.port, lazyConnect: true }]) {
      const { throttle, errors } = onClient(options);
      let ran = false;
      const { error, tookMs } = await timed(throttle.schedule('u', () => (ran = true)));
      expect(tookMs).to.be.below(1_000);
      expectRefused(error, server.port);
      expect(ran).to.equal(false);
      expect(errors.map((event) => event.policy)).to.deep.equal(['fail']);
      // The client keeps trying: the next call fails at once too.
      const again = await timed(throttle.schedule('u', () => (ran = true)));
      expect(again.tookMs).to.be.below(1_000);
      expectRefused(again.error, server.port);
    }
  });

  it("'fail': a Redis that goes away under a connected client fails the call once the client's first attempt to reconnect is refused", async () => {
    const { throttle } = onClient(server.port);
    expect(await throttle.schedule('u', () => 'ran')).to.equal('ran');
    await server.stop();
    const { error, tookMs } = await timed(throttle.schedule('u', () => 'ran'));
    // ioredis tries again within 250 ms of losing the connection (50 ms and up to 200 ms of jitter).
    expect(tookMs).to.be.below(1_000);
    expectRefused(error, server.port);
  });

  it("'wait': a refused connection fails the call by its maxDelayMs, however long commandTimeoutMs is, after one failed ask", async () => {
    await server.stop();
    const { throttle, errors } = onClient(server.port, { onStoreError: 'wait', maxDelayMs: 300 });
    const { error, tookMs } = await timed(throttle.schedule('u', () => 'ran'));
    expect(tookMs).to.be.within(290, 800);
    expectRefused(error, server.port);
    expect(error!.message).to.match(/maxDelayMs ran out/);
    // It waited for the client to connect, without asking again meanwhile.
    expect(errors.map((event) => event.policy)).to.deep.equal(['wait']);
  });

  it("'wait': a call rides out a Redis that starts within its maxDelayMs, asking again once the client connects", async () => {
    await server.stop();
    // Without recovery: a Redis just started holds a namespace it has never seen for a second.
    const { throttle, errors } = onClient(server.port, { onStoreError: 'wait', maxDelayMs: 5_000, recovery: false });
    const call = timed(throttle.schedule('u', () => 'ran'));
    await new Promise((resolve) => setTimeout(resolve, 300));
    server = await startRedis({ port: server.port });
    const { value, error, tookMs } = await call;
    expect(error).to.equal(undefined);
    expect(value).to.equal('ran');
    expect(tookMs).to.be.within(300, 5_000);
    expect(errors.map((event) => event.policy)).to.deep.equal(['wait']);
  });

  it("'local': a refused connection sends the call to the local fallback at once, and close() does not wait commandTimeoutMs either", async () => {
    await server.stop();
    const { throttle, errors } = onClient(server.port, { onStoreError: 'local' });
    const { value, tookMs } = await timed(throttle.schedule('u', () => 'local'));
    expect(value).to.equal('local');
    expect(tookMs).to.be.below(1_000);
    expectRefused(errors[0]?.error, server.port);
    // close() tries once more to put the local call into Redis: refused at once too.
    const closing = await timed(throttle.close());
    expect(closing.error).to.equal(undefined);
    expect(closing.tookMs).to.be.below(1_000);
  });

  it('a password Redis refuses: the message and the cause carry NOAUTH or WRONGPASS, at once', async () => {
    const admin = new Redis(server.url);
    await admin.config('SET', 'requirepass', 'secret');
    admin.disconnect();
    for (const [options, reply] of [
      [server.url, /NOAUTH/],
      [{ port: server.port, password: 'wrong' }, /WRONGPASS/],
    ] as const) {
      const startedAt = performance.now();
      const error = await onClient(options)
        .throttle.schedule('u', () => 'ran')
        .catch((reason: unknown) => reason);
      expect(performance.now() - startedAt).to.be.below(300);
      expect(error).to.be.instanceOf(StoreUnavailableError);
      expect((error as Error).message).to.match(reply);
      expect(String((error as Error).cause)).to.match(reply);
    }
  });
});
