/**
 * A function's Redis: `RedisStore` on `@upstash/redis`, through a server of Upstash's REST protocol
 * (scripts/support/upstash-rest.ts: no pub/sub) in front of a real redis-server. Invocations made
 * afresh for each call share one user's limit with worker processes on ioredis and node-redis; an
 * invocation costs few requests and leaves nothing running; a Redis restarted empty costs no wrong
 * answer.
 */
import { Redis as UpstashRedis } from '@upstash/redis';
import { expect } from 'chai';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { RateLimitedError, RedisStore, StoreUnavailableError, Throttle, ThrottleConfigError } from '../lib/index.js';
import { startRedis, type RedisServer } from '../scripts/support/redis-server.js';
import { countRequests, startUpstashRest, type UpstashRest } from '../scripts/support/upstash-rest.js';
import { mostInWindow, startHttpVendor, type Vendor } from './support/http-vendor.js';
import { redisClient, redisServer, uniquePrefix } from './support/hooks.js';
import { spawnWorkers } from './support/worker.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** Decisions and claims the last `invoke()` asked of its store. */
let decisions = 0;
let claims: string[] = [];

/** One invocation: a new client, store and throttle for one call of `keys`, closed at the end; the REST requests it made. */
async function invoke(
  rest: UpstashRest,
  prefix: string,
  rules: string,
  run: () => Promise<unknown>,
  maxDelayMs = Infinity,
  keys: string | readonly string[] = 'u1',
): Promise<number> {
  const client = new UpstashRedis({ url: rest.url, token: rest.token, retry: false });
  const made = countRequests(client);
  const store = new RedisStore(client, { prefix });
  const reserve = store.reserve.bind(store);
  decisions = 0;
  claims = [];
  store.reserve = (request) => {
    decisions++;
    return reserve(request);
  };
  const claim = store.claim.bind(store);
  store.claim = async (request) => {
    const result = await claim(request);
    claims.push(result.status);
    return result;
  };
  const throttle = new Throttle({ name: 'acme', rules: [rules as '5/s'], store, maxDelayMs });
  try {
    await throttle.schedule(keys, run);
  } finally {
    await throttle.close();
    await store.close();
  }
  return made();
}

describe('RedisStore on @upstash/redis (a function)', function () {
  this.timeout(40_000);
  let rest: UpstashRest;
  let vendor: Vendor | undefined;

  before(async () => {
    rest = await startUpstashRest(redisServer().url);
  });
  after(async () => {
    await rest.close();
  });
  /** Throttles over a client of their own (`open`), closed with their stores after each case. */
  const opened: Array<{ readonly throttle: Throttle; readonly store: RedisStore }> = [];
  const open = (reservationGraceMs: number): { readonly throttle: Throttle; readonly store: RedisStore } => {
    const store = new RedisStore(new UpstashRedis({ url: rest.url, token: rest.token, retry: false }), { prefix: uniquePrefix() });
    const throttle = new Throttle({ name: 'acme', rules: ['1/s'], store, maxHoldMs: 2_000, reservationGraceMs });
    opened.push({ throttle, store });
    return { throttle, store };
  };
  afterEach(async () => {
    await vendor?.close();
    vendor = undefined;
    for (const { throttle, store } of opened.splice(0)) {
      await throttle.close();
      await store.close();
    }
  });

  it('takes an @upstash/redis client, and refuses a lookalike', () => {
    expect(() => new RedisStore({ evalsha: () => Promise.resolve() } as never)).to.throw(ThrottleConfigError, /@upstash\/redis/);
  });

  it('shares one limit with worker processes on ioredis and node-redis: invocations made afresh each call, 5/s at the vendor', async () => {
    vendor = await startHttpVendor();
    const prefix = uniquePrefix();
    const url = `${vendor.url}/?user=u1`;
    const since = performance.now();
    const config = { redisUrl: redisServer().url, vendorUrl: vendor.url, rules: '5/s' as const, keys: ['u1'], calls: 5, prefix, name: 'acme' };
    const [requests] = await Promise.all([
      Promise.all(Array.from({ length: 10 }, () => invoke(rest, prefix, '5/s', async () => (await fetch(url)).text()))),
      spawnWorkers([config, { ...config, client: 'node-redis' }]),
    ]);
    const times = vendor.times('u1', since);
    expect(times).to.have.length(20);
    expect(mostInWindow(times, 1_000)).to.equal(5);
    // A call that did not wait: its decision, its completion, and the keys' life at close.
    expect(Math.min(...requests)).to.be.within(2, 3);
  });

  // One key, and two (a user's and the app's, the app's window filled by other users' calls).
  for (const keys of [['u1'], ['u1', 'app']]) {
    const several = keys.length > 1;
    it(`an invocation of ${several ? 'two keys' : 'one key'} that waits for calls in flight reserves its slot${several ? ' in both' : ''}, and claims it at its start once the call it depends on released a window before`, async () => {
      const prefix = uniquePrefix();
      // Five calls of a worker in flight for 300 ms fill the window of 5/s.
      const worker = new Throttle({ name: 'acme', rules: ['5/s'], store: new RedisStore(redisClient(), { prefix }) });
      try {
        const busy = Array.from({ length: 5 }, (_, i) =>
          worker.schedule(several ? [`u${i + 2}`, 'app'] : 'u1', () => new Promise((resolve) => setTimeout(resolve, 300))),
        );
        await new Promise((resolve) => setTimeout(resolve, 50));
        const started = performance.now();
        const made = await invoke(rest, prefix, '5/s', async () => undefined, Infinity, keys);
        const waited = performance.now() - started;
        await Promise.all(busy);
        // Its slot a window after the calls in flight started; its call a window after the first completed.
        expect(waited).to.be.within(1_150, 2_000);
        // One decision, never deferred: booked a window later, on the first call in flight releasing by then.
        expect(decisions).to.equal(1);
        // At the slot's start the claim (it reads the keys' pause too) finds that call completed 250
        // ms later than taken, and says when; the claim then starts the call on the slot, in every key.
        expect(claims).to.deep.equal(['early', 'started']);
        // Besides them, its completion; one more where its scripts were not loaded yet (EVAL after
        // NOSCRIPT). The stamps of the processes it waits for are read riding its decision, never on their own.
        expect(made).to.be.within(4, 5);
        // Its call counts in each of its keys (the calls it depended on released a window before).
        for (const key of keys) expect((await worker.inspect(key)).rules[0]!.used, key).to.equal(1);
      } finally {
        await worker.close();
      }
    });
  }

  it('with recovery on, journals a call that starts at once on the slot it reserved, as any call: put back if Redis loses it', async () => {
    const store = new RedisStore(new UpstashRedis({ url: rest.url, token: rest.token, retry: false }), {
      prefix: uniquePrefix(),
      recovery: { heartbeatMs: 100, graceMs: 800 },
    });
    const throttle = new Throttle({ name: 'acme', rules: ['1/s'], store, maxHoldMs: 2_000 });
    opened.push({ throttle, store });
    await throttle.schedule('u1', () => 'called');
    expect(store.recentCalls('acme', 'u1'), "the call, in this process's journal").to.have.length(1);
  });

  it('an invocation aborted while it waits gives its reserved slot back: the next call starts once the window allows', async () => {
    const { throttle } = open(3_000);
    const first = throttle.schedule('u1', () => new Promise((resolve) => setTimeout(resolve, 300)));
    await new Promise((resolve) => setTimeout(resolve, 50));
    const aborting = new AbortController();
    // It depends on the first call: its slot's members carry their hash, and only a claim takes them out.
    const second = throttle.schedule('u1', () => 'second', { signal: aborting.signal }).catch((error: unknown) => error);
    await new Promise((resolve) => setTimeout(resolve, 150));
    aborting.abort();
    expect(await second).to.have.property('name', 'AbortError');
    await first;
    const freeAt = performance.now() + 1_000;
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    let startedAt = 0;
    await throttle.schedule('u1', () => (startedAt = performance.now()), { maxDelayMs: 500 });
    // Free a window after the first call: the second's slot (counting to its bound, 5 s on) is gone.
    expect(startedAt - freeAt).to.be.below(500);
  });

  it('an invocation whose slot comes past its maxDelayMs is refused with RateLimitedError, its reserved slot given back', async () => {
    const { throttle } = open(3_000);
    const started = performance.now();
    const first = throttle.schedule('u1', () => new Promise((resolve) => setTimeout(resolve, 300)));
    await new Promise((resolve) => setTimeout(resolve, 20));
    // Reserved a window after the first call's start; at its start, the claim finds that call
    // completed 300 ms in: a window after that is past this call's maxDelayMs.
    const refused = await throttle.schedule('u1', () => 'second', { maxDelayMs: 1_100 }).catch((error: unknown) => error);
    expect(refused).to.be.instanceOf(RateLimitedError);
    await first;
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, started + 1_400 - performance.now())));
    // Its slot gone: the window allows a call at once.
    expect(await throttle.schedule('u1', () => 'third', { maxDelayMs: 0 })).to.equal('third');
  });

  it('an invocation whose reserved slot is past its grace when claimed books a slot as any call, never ReservationError', async () => {
    // No grace: the claim at the slot's start comes after it (a round trip at least).
    const { throttle, store } = open(0);
    const claims: string[] = [];
    const claim = store.claim.bind(store);
    store.claim = async (request) => {
      const result = await claim(request);
      // The claims that could start the call (not the one giving the slot back).
      if (request.giveBack !== true) claims.push(result.status);
      return result;
    };
    const first = throttle.schedule('u1', () => new Promise((resolve) => setTimeout(resolve, 300)));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(await throttle.schedule('u1', () => 'second')).to.equal('second');
    await first;
    // Past its grace ('late'; or, claimed in its very ms, 'moved': the first call's window ends
    // after the grace): either way the call books a slot as any call.
    expect(claims).to.have.length(1);
    expect(claims[0]).to.be.oneOf(['late', 'moved']);
  });

  it('leaves nothing running after close(): a process that made an invocation exits by itself', async () => {
    const script = [
      "const { Redis } = await import('@upstash/redis');",
      "const { RedisStore, Throttle } = await import('./lib/index.ts');",
      'const store = new RedisStore(new Redis({ url: process.env.REST_URL, token: process.env.REST_TOKEN, retry: false }), { prefix: process.env.PREFIX });',
      "const throttle = new Throttle({ name: 'acme', rules: ['5/s'], store });",
      "console.log(await throttle.schedule('u1', async () => 'called'));",
      'await throttle.close();',
      'await store.close();',
    ].join('\n');
    const started = performance.now();
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: ROOT,
      env: { ...process.env, REST_URL: rest.url, REST_TOKEN: rest.token, PREFIX: uniquePrefix() },
      timeout: 15_000,
    });
    expect(stdout.trim()).to.equal('called');
    // Exited by itself, well before the timeout: no timer, socket or subscription kept it.
    expect(performance.now() - started).to.be.below(10_000);
  });

  it('answers rightly after Redis restarted empty: scripts loaded again (NOSCRIPT, then EVAL), the log counted afresh', async () => {
    let server: RedisServer | undefined = await startRedis();
    const own = await startUpstashRest(server.url);
    try {
      const prefix = uniquePrefix();
      for (let i = 0; i < 2; i++) await invoke(own, prefix, '2/min', async () => undefined);
      const port = server.port;
      await server.stop();
      server = undefined;
      let failure: unknown;
      await invoke(own, prefix, '2/min', async () => undefined).catch((error: unknown) => (failure = error));
      expect(failure).to.be.instanceOf(StoreUnavailableError);
      server = await startRedis({ port });
      // Empty: no scripts, no log. The next call loads the script (EVAL after NOSCRIPT) and is booked.
      const before = own.requests.length;
      await invoke(own, prefix, '2/min', async () => undefined);
      expect(own.requests.slice(before).flatMap((request) => request.commands)).to.include.members(['evalsha', 'eval']);
      let refused: unknown;
      await invoke(own, prefix, '2/min', async () => undefined, 0);
      await invoke(own, prefix, '2/min', async () => undefined, 0).catch((error: unknown) => (refused = error));
      expect(refused).to.have.property('name', 'RateLimitedError');
    } finally {
      await own.close();
      await server?.stop();
    }
  });
});
