import { expect } from 'chai';
import type { FetchThrottleOptions } from '../lib/adapters/options.js';
import { RateLimitedError, ThrottleConfigError } from '../lib/errors.js';
import type { ThrottleOptions } from '../lib/options.js';
import { redisClient, redisStore, uniquePrefix } from './support/hooks.js';
import { useThrottles } from './support/throttles.js';
import { expectNoIdleWait, mostInWindow, ok, startHttpVendor, type Respond, type Vendor } from './support/http-vendor.js';

const delay = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function timings(label: string, values: readonly number[]): void {
  if (process.env.SPEC_TIMINGS) console.log(`      ${label}: ${values.map((v) => v.toFixed(1)).join(', ')}`);
}

/** The user a request is for, from its `user` query parameter. */
function userFromUrl(input: string | URL | Request): string {
  const url = new URL(input instanceof Request ? input.url : input);
  const user = url.searchParams.get('user');
  if (user === null) throw new Error(`no user in ${url}`);
  return user;
}

describe('throttle.fetch()', function () {
  this.timeout(10_000);
  let vendor: Vendor | undefined;
  const make = useThrottles();

  afterEach(async () => {
    await vendor?.close();
    vendor = undefined;
  });

  async function setUp(throttleOptions: Partial<ThrottleOptions> = {}, respond: Respond = ok, options: Partial<FetchThrottleOptions> = {}) {
    vendor = await startHttpVendor(respond);
    const throttle = make(throttleOptions);
    const fetchAcme = throttle.fetch({ key: (input) => userFromUrl(input), ...options });
    const url = (path: string, user: string) => `${vendor!.url}${path}?user=${encodeURIComponent(user)}`;
    return { throttle, fetchAcme, url, vendor };
  }

  it('counts a request in several keys when key() returns a list: per user and app-wide', async () => {
    const { fetchAcme, url, vendor } = await setUp({ rules: (key) => (key === 'app' ? ['3/200ms'] : ['2/200ms']) }, ok, {
      key: (input) => [userFromUrl(input), 'app'],
    });
    const t0 = performance.now();
    const responses = await Promise.all(['u1', 'u1', 'u1', 'u2', 'u2', 'u3'].map((user, i) => fetchAcme(url(`/v1/orders/${i}`, user))));
    expect(responses.map((response) => response.status)).to.deep.equal([200, 200, 200, 200, 200, 200]);
    const all = ['u1', 'u2', 'u3'].flatMap((user) => vendor.times(user, t0)).sort((a, b) => a - b);
    expect(all).to.have.length(6);
    expect(mostInWindow(all, 200)).to.equal(3);
    expect(mostInWindow(vendor.times('u1', t0), 200)).to.be.at.most(2);
  });

  it('spaces arrivals at a real HTTP server by the rules, per user, each a window after the response it waits for', async () => {
    const { fetchAcme, url, vendor } = await setUp({ rules: ['2/200ms'] });
    const t0 = performance.now();
    const doneAt: number[] = [];
    const calls = Array.from({ length: 6 }, (_, i) => fetchAcme(url(`/v1/orders/${i}`, 'u1')).then((response) => ((doneAt[i] = performance.now()), response)));
    calls.push(fetchAcme(url('/v1/orders', 'u2')));
    const responses = await Promise.all(calls);
    expect(responses.map((response) => response.status)).to.deep.equal([200, 200, 200, 200, 200, 200, 200]);
    expect(await responses[0]!.json()).to.deep.equal({ ok: true });
    const times = vendor.times('u1', t0);
    timings('2/200ms, 6 requests, arrivals (ms)', times);
    expect(times).to.have.length(6);
    expect(mostInWindow(times, 200)).to.equal(2);
    expect(times[5]! - times[0]!).to.be.at.least(400); // (ceil(6/2) - 1) * 200
    // Each request starts a window after the response it waits for, not later (100 ms for timers and the network).
    const arrivedAt = (i: number) => vendor.arrivals.find((arrival) => arrival.path === `/v1/orders/${i}?user=u1`)!.at;
    expectNoIdleWait(
      doneAt.map((done, i) => ({ arrivedAt: arrivedAt(i), doneAt: done })),
      2,
      200,
      100,
    );
    expect(Math.abs(vendor.times('u2', t0)[0]! - times[0]!)).to.be.below(100); // another user does not wait a window
  });

  it('takes Request objects, with their bodies, and URL objects', async () => {
    const { fetchAcme, url, vendor } = await setUp();
    const request = new Request(url('/v1/orders', 'u1'), { method: 'POST', body: JSON.stringify({ n: 1 }), headers: { 'content-type': 'application/json' } });
    expect((await fetchAcme(request)).status).to.equal(200);
    expect((await fetchAcme(new URL(url('/v1/orders', 'u2')))).status).to.equal(200);
    expect(vendor.arrivals.map((arrival) => [arrival.method, arrival.user, arrival.body])).to.deep.equal([
      ['POST', 'u1', '{"n":1}'],
      ['GET', 'u2', ''],
    ]);
  });

  it('refused requests reject with the throttle error and never reach the server; cost above a limit is a config error', async () => {
    const { fetchAcme, url, vendor } = await setUp({ rules: ['1/1s'], mode: 'throw' });
    await fetchAcme(url('/a', 'u1'));
    const refused = await fetchAcme(url('/b', 'u1')).catch((error: unknown) => error);
    expect(refused).to.be.instanceOf(RateLimitedError);
    expect((refused as RateLimitedError).key).to.equal('u1');
    const bulk = make({ rules: ['5/s'] }).fetch({ key: userFromUrl, cost: 6 });
    expect(await bulk(url('/c', 'u1')).catch((error: unknown) => error)).to.be.instanceOf(ThrottleConfigError);
    expect(vendor.arrivals.map((arrival) => arrival.path)).to.deep.equal(['/a?user=u1']);
  });

  it('cost: a request the vendor counts as 3 calls books 3 slots in one step', async () => {
    const { fetchAcme, url, vendor } = await setUp({ rules: ['3/250ms'] }, ok, { cost: (input) => (String(input).includes('/bulk') ? 3 : 1) });
    const t0 = performance.now();
    await Promise.all([fetchAcme(url('/bulk', 'u1')), fetchAcme(url('/one', 'u1'))]);
    const times = vendor.times('u1', t0);
    timings('3/250ms, a cost-3 request then a cost-1, arrivals (ms)', times);
    expect(times[1]! - times[0]!).to.be.at.least(250);
  });

  it('init.signal (or the Request signal) cancels a waiting request: its reason, nothing sent, the slot given back', async () => {
    const { throttle, fetchAcme, url, vendor } = await setUp({ rules: ['1/300ms'] });
    const t0 = performance.now();
    await fetchAcme(url('/a', 'u1'));
    const controller = new AbortController();
    const waiting = fetchAcme(url('/b', 'u1'), { signal: controller.signal });
    await delay(50);
    // /a counts; /b is booked a window after its answer.
    expect(await throttle.inspect('u1'))
      .to.deep.include({ bookedAhead: 1 })
      .and.to.have.nested.property('rules[0].used', 1);
    controller.abort();
    expect(await waiting.catch((error: unknown) => error)).to.equal(controller.signal.reason);
    await delay(30);
    expect((await throttle.inspect('u1')).rules[0]!.used).to.equal(1);
    await fetchAcme(url('/c', 'u1'));
    const times = vendor.times('u1', t0);
    timings('1/300ms, arrivals of /a and of /c, which took the cancelled slot (ms)', times);
    expect(vendor.arrivals.map((arrival) => arrival.path)).to.deep.equal(['/a?user=u1', '/c?user=u1']);
    expect(times[1]! - times[0]!).to.be.within(300, 420);

    const other = new AbortController();
    const request = new Request(url('/d', 'u1'), { signal: other.signal });
    const pending = fetchAcme(request);
    other.abort(new Error('gave up'));
    expect(((await pending.catch((error: unknown) => error)) as Error).message).to.equal('gave up');
  });

  it('sends through an injected fetch with its own signature', async () => {
    vendor = await startHttpVendor();
    const seen: string[] = [];
    const tracedFetch = async (url: string, init?: RequestInit & { trace?: string }): Promise<Response> => {
      seen.push(init?.trace ?? '-');
      return fetch(url, init);
    };
    const throttle = make({ rules: ['1/1s'], mode: 'throw' });
    const fetchAcme = throttle.fetch({ fetch: tracedFetch, key: (url) => new URL(url).searchParams.get('user') ?? 'anonymous' });
    expect((await fetchAcme(`${vendor.url}/a?user=u1`, { trace: 'first' })).status).to.equal(200);
    expect(await fetchAcme(`${vendor.url}/a?user=u1`, { trace: 'second' }).catch((error: unknown) => error)).to.be.instanceOf(RateLimitedError);
    expect(seen).to.deep.equal(['first']);
  });

  describe('vendors that speak', () => {
    it('429 + Retry-After pauses the key for a second Throttle on the same Redis, and the retry waits for it', async () => {
      const prefix = uniquePrefix();
      const { throttle, fetchAcme, url, vendor } = await setUp({ name: 'acme', store: redisStore(redisClient(), { prefix }) }, (_arrival, index) =>
        index === 0 ? { status: 429, headers: { 'Retry-After': '1' } } : { status: 200, body: { ok: true } },
      );
      const elsewhere = make({ name: 'acme', store: redisStore(redisClient(), { prefix }) });
      let pausedAt = 0;
      const paused: unknown[] = [];
      throttle.on('paused', (event) => {
        pausedAt = performance.now();
        paused.push(event);
      });
      const t0 = performance.now();
      const response = fetchAcme(url('/v1/orders', 'u1'));
      while (pausedAt === 0) await delay(2);
      expect((await elsewhere.inspect('u1')).pausedForMs).to.be.within(900, 1_001);
      let startedElsewhere = 0;
      await elsewhere.schedule('u1', () => {
        startedElsewhere = performance.now();
      });
      expect((await response).status).to.equal(200);
      const times = vendor.times('u1', t0);
      timings('429 Retry-After: 1 → other throttle started after the pause event (ms)', [startedElsewhere - pausedAt]);
      timings('429 Retry-After: 1 → arrivals of the 429 and of the retry (ms)', times);
      expect(startedElsewhere - pausedAt).to.be.at.least(970);
      expect(times[1]! - times[0]!).to.be.at.least(1_000);
      expect(paused).to.deep.equal([{ key: 'u1', ms: 1_000, source: 'fetch 429' }]);
    });

    it('retries keep the rules, and after the last one the 429 Response comes back', async () => {
      const { fetchAcme, url, vendor } = await setUp({ rules: ['2/300ms'] }, (arrival, index) =>
        index < 2 || arrival.user === 'u2' ? { status: 429, body: { error: 'slow down' }, headers: { 'Retry-After': '0' } } : { status: 200 },
      );
      const t0 = performance.now();
      const responses = await Promise.all([1, 2, 3, 4].map((n) => fetchAcme(url(`/v1/orders/${n}`, 'u1'))));
      expect(responses.map((response) => response.status)).to.deep.equal([200, 200, 200, 200]);
      const times = vendor.times('u1', t0);
      timings('2/300ms, 4 requests, 2 answered 429 then retried, arrivals (ms)', times);
      expect(times).to.have.length(6);
      expect(mostInWindow(times, 300)).to.equal(2);

      const refused = await fetchAcme(url('/v1/x', 'u2'));
      expect(refused.status).to.equal(429);
      expect(await refused.json()).to.deep.equal({ error: 'slow down' });
      expect(vendor.times('u2', t0)).to.have.length(3); // the first try and the 2 default retries
    });

    it('a Request with a body is sent again whole on a retry; a streamed body is not retried', async () => {
      const seen = new Set<string>();
      // Refuses each body the first time it arrives.
      const { throttle, fetchAcme, url, vendor } = await setUp({}, (arrival) => {
        const first = !seen.has(arrival.body);
        seen.add(arrival.body);
        return first ? { status: 429, headers: { 'Retry-After': '0' } } : { status: 200 };
      });
      const body = JSON.stringify({ try: 1 });
      const request = new Request(url('/v1/orders', 'u1'), { method: 'POST', body });
      expect((await fetchAcme(request)).status).to.equal(200);
      expect(vendor.arrivals.map((arrival) => arrival.body)).to.deep.equal([body, body]);

      const debug: string[] = [];
      throttle.on('debug', (event) => debug.push(event.message));
      const stream = new ReadableStream({
        start(controller) {
          controller.enqueue(new TextEncoder().encode(JSON.stringify({ try: 1, streamed: true })));
          controller.close();
        },
      });
      const streamed = await fetchAcme(url('/v1/orders', 'u2'), { method: 'POST', body: stream, duplex: 'half' } as RequestInit);
      expect(streamed.status).to.equal(429);
      expect(debug).to.include('fetch: refused by the vendor; not retried: the request body is a stream and cannot be sent again');
      expect(vendor.arrivals).to.have.length(3);
    });

    it('isThrottled gets a clone: it may read the body, and the caller still can', async () => {
      const { throttle, fetchAcme, url } = await setUp(
        {},
        (_arrival, index) => ({ status: 200, body: index === 0 ? { error: 'rate_limited' } : { ok: true } }),
        {
          isThrottled: async (response) => ((await response.json()) as { error?: string }).error === 'rate_limited',
          fallbackPauseMs: 80,
        },
      );
      const paused: unknown[] = [];
      throttle.on('paused', (event) => paused.push(event));
      const response = await fetchAcme(url('/v1/orders', 'u1'));
      expect(await response.json()).to.deep.equal({ ok: true });
      expect(paused).to.deep.equal([{ key: 'u1', ms: 80, source: 'fetch isThrottled' }]);
    });

    it('IETF RateLimit on a 429 sets the pause; malformed headers are ignored with a debug event', async () => {
      const respond: Respond = (arrival) =>
        arrival.user === 'u1'
          ? { status: 429, headers: { RateLimit: '"default";r=0;t=3', 'RateLimit-Policy': '"default";q=10;w=60' } }
          : { status: 429, headers: { RateLimit: 'remaining=none', 'X-RateLimit-Reset': '-4', Date: 'not a date' } };
      const { throttle, fetchAcme, url } = await setUp({}, respond, { retries: 0 });
      const paused: unknown[] = [];
      throttle.on('paused', (event) => paused.push(event));
      const debug: string[] = [];
      throttle.on('debug', (event) => debug.push(event.message));
      expect((await fetchAcme(url('/v1/orders', 'u1'))).status).to.equal(429);
      expect((await fetchAcme(url('/v1/orders', 'u2'))).status).to.equal(429);
      expect(paused).to.deep.equal([
        { key: 'u1', ms: 3_000, source: 'fetch 429' },
        { key: 'u2', ms: 1_000, source: 'fetch 429' }, // fallbackPauseMs
      ]);
      expect(debug).to.include.members([
        'fetch: ignored malformed Date header "not a date"; using the local clock',
        'fetch: ignored malformed RateLimit remaining value "none"',
        'fetch: ignored malformed X-RateLimit-Reset value "-4"',
      ]);
    });
  });

  it('rejects what cannot work', () => {
    const throttle = make();
    expect(() => throttle.fetch({} as FetchThrottleOptions)).to.throw(ThrottleConfigError, /key to be a function/);
    expect(() => throttle.fetch({ key: () => 'u', fetch: 'fetch' as unknown as typeof fetch })).to.throw(ThrottleConfigError, /fetch/);
    expect(() => throttle.fetch({ key: () => 'u', isThrottled: true as unknown as () => boolean })).to.throw(ThrottleConfigError, /isThrottled/);
    expect(() => throttle.fetch({ key: () => 'u', fallbackPauseMs: -1 })).to.throw(ThrottleConfigError, /fallbackPauseMs/);
  });
});
