import axios, { AxiosError, type AxiosAdapter, type AxiosInstance } from 'axios';
import { expect } from 'chai';
import { once } from 'node:events';
import nock from 'nock';
import type { AxiosThrottleHandle, AxiosThrottleOptions } from '../lib/adapters/options.js';
import { RateLimitedError, ThrottleConfigError } from '../lib/errors.js';
import type { Throttle } from '../lib/throttle.js';
import { redisClient, redisStore, uniquePrefix } from './support/hooks.js';
import { useThrottles } from './support/throttles.js';
import { expectNoIdleWait, mostInWindow, nockVendor, ok, type Vendor } from './support/http-vendor.js';

const ORIGIN = 'http://api.acme.test';
const as = (id: string) => ({ headers: { 'x-acme-user': id } });
const delay = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Prints measured arrival times when SPEC_TIMINGS is set (they go into reports, not into assertions). */
function timings(label: string, values: readonly number[]): void {
  if (process.env.SPEC_TIMINGS) console.log(`      ${label}: ${values.map((v) => v.toFixed(1)).join(', ')}`);
}

describe('throttle.axios()', function () {
  this.timeout(10_000);
  let vendor: Vendor | undefined;
  const make = useThrottles();
  let handles: Array<AxiosThrottleHandle<AxiosInstance>> = [];

  before(() => {
    if (!nock.isActive()) nock.activate();
    nock.disableNetConnect();
  });
  after(() => {
    nock.enableNetConnect();
    nock.cleanAll();
    nock.restore(); // leave http and fetch unpatched for the specs that follow
  });
  afterEach(async () => {
    for (const handle of handles) handle.eject();
    handles = [];
    await vendor?.close();
    vendor = undefined;
  });

  /** An `axios.create()` instance for the vendor, throttled by the `x-acme-user` header. */
  function acmeFor(throttle: Throttle, options: Partial<AxiosThrottleOptions> = {}): AxiosInstance {
    const acme = axios.create({ baseURL: ORIGIN });
    handles.push(throttle.axios(acme, { key: (config) => config.headers['x-acme-user'], ...options }));
    return acme;
  }

  describe('on an axios.create() instance', () => {
    it('spaces arrivals at the vendor by the rules, per user, each a window after the response it waits for', async () => {
      const throttle = make({ rules: ['2/200ms'] });
      vendor = nockVendor(ORIGIN);
      const acme = acmeFor(throttle);
      const t0 = performance.now();
      const doneAt: number[] = [];
      const calls = Array.from({ length: 6 }, (_, i) => acme.get(`/v1/orders/${i}`, as('u1')).then((response) => ((doneAt[i] = performance.now()), response)));
      calls.push(acme.get('/v1/orders', as('u2')));
      const responses = await Promise.all(calls);
      expect(responses.map((response) => response.status)).to.deep.equal([200, 200, 200, 200, 200, 200, 200]);
      const times = vendor.times('u1', t0);
      timings('2/200ms, 6 requests, arrivals (ms)', times);
      expect(times).to.have.length(6);
      expect(mostInWindow(times, 200)).to.equal(2);
      expect(times[5]! - times[0]!).to.be.at.least(400); // (ceil(6/2) - 1) * 200
      // Each request starts a window after the response it waits for, not later (100 ms for timers and the network).
      const arrivedAt = (i: number) => vendor!.arrivals.find((arrival) => arrival.path === `/v1/orders/${i}`)!.at;
      expectNoIdleWait(
        doneAt.map((done, i) => ({ arrivedAt: arrivedAt(i), doneAt: done })),
        2,
        200,
        100,
      );
      expect(Math.abs(vendor.times('u2', t0)[0]! - times[0]!)).to.be.below(100); // another user does not wait a window
    });

    it('takes the slot in the adapter: after every request interceptor and transformRequest, keyed by the final config', async () => {
      const throttle = make({ rules: ['1/200ms'] });
      vendor = nockVendor(ORIGIN);
      const acme = axios.create({ baseURL: ORIGIN });
      const usedDuringInterceptors: number[] = [];
      // Registered before the throttle: runs after its interceptor (axios runs request interceptors last-added first).
      acme.interceptors.request.use(async (config) => {
        usedDuringInterceptors.push((await throttle.inspect('u1')).rules[0]!.used);
        config.headers.set('x-acme-user', 'u1');
        return config;
      });
      handles.push(throttle.axios(acme, { key: (config) => config.headers['x-acme-user'] }));
      acme.interceptors.request.use(async (config) => {
        await delay(100);
        usedDuringInterceptors.push((await throttle.inspect('u1')).rules[0]!.used);
        return config;
      });
      await acme.post('/v1/orders', { n: 1 });
      const firstDone = performance.now();
      await acme.post('/v1/orders', { n: 2 });
      // One slot per request, none booked while the interceptors ran (the first's counts during the second's).
      expect(usedDuringInterceptors).to.deep.equal([0, 0, 1, 1]);
      expect(vendor.arrivals.map((arrival) => [arrival.user, arrival.body])).to.deep.equal([
        ['u1', '{"n":1}'],
        ['u1', '{"n":2}'],
      ]);
      // The 100 ms in the interceptors counted towards the 200 ms the second request had to wait.
      const gap = vendor.arrivals[1]!.at - firstDone;
      timings('1/200ms, second arrival after the first response (ms)', [gap]);
      expect(gap).to.be.within(200, 300);
    });

    it('per request: key, cost, maxDelayMs and retries through config.throttle; cost above a limit is a config error', async () => {
      const throttle = make({ rules: ['5/300ms'] });
      vendor = nockVendor(ORIGIN);
      const acme = acmeFor(throttle);
      await acme.post('/v1/bulk', { ids: [1, 2, 3, 4, 5] }, { ...as('u1'), throttle: { cost: 5 } });
      expect((await throttle.inspect('u1')).rules[0]!.used).to.equal(5);

      const refused = await acme.get('/v1/one', { ...as('u1'), throttle: { maxDelayMs: 50 } }).catch((error: unknown) => error);
      expect(refused).to.be.instanceOf(RateLimitedError);
      expect((refused as RateLimitedError).key).to.equal('u1');
      expect((refused as RateLimitedError).retryAfterMs).to.be.within(200, 320);

      await acme.get('/v1/other', { ...as('u1'), throttle: { key: 'u9' } }); // another key: at once
      const tooBig = await acme.get('/v1/huge', { ...as('u1'), throttle: { cost: 6 } }).catch((error: unknown) => error);
      expect(tooBig).to.be.instanceOf(ThrottleConfigError);
      const badRetries = await acme.get('/v1/x', { ...as('u1'), throttle: { retries: 1.5 } }).catch((error: unknown) => error);
      expect(badRetries).to.be.instanceOf(ThrottleConfigError);
      // Refused requests never reached the vendor.
      expect(vendor.arrivals.map((arrival) => arrival.path)).to.deep.equal(['/v1/bulk', '/v1/other']);
    });

    it('cost from the adapter options: an endpoint the vendor counts as 5 calls books 5 slots in one step', async () => {
      const throttle = make({ rules: ['5/300ms'] });
      vendor = nockVendor(ORIGIN);
      const acme = acmeFor(throttle, { cost: (config) => (config.url === '/v1/bulk' ? 5 : 1) });
      const t0 = performance.now();
      await Promise.all([acme.post('/v1/bulk', {}, as('u1')), acme.post('/v1/bulk', {}, as('u1')), acme.get('/v1/one', as('u1'))]);
      const times = vendor.times('u1', t0);
      timings('5/300ms, two cost-5 requests and one cost-1, arrivals (ms)', times);
      expect(times[1]! - times[0]!).to.be.at.least(300);
      expect(times[2]! - times[1]!).to.be.at.least(300);
    });

    it('priority: higher priorities are served first among the requests waiting for a key', async () => {
      const throttle = make({ rules: ['1/150ms'] });
      vendor = nockVendor(ORIGIN);
      const acme = acmeFor(throttle);
      const booked = once(throttle, 'delayed');
      const first = acme.get('/first', as('u1')); // starts at once
      const second = acme.get('/second', as('u1')); // booked once /first has answered, sleeping until its slot
      await booked;
      const low = acme.get('/low', { ...as('u1'), throttle: { priority: 0 } });
      const high = acme.get('/high', { ...as('u1'), throttle: { priority: 10 } });
      await Promise.all([first, second, low, high]);
      expect(vendor.arrivals.map((arrival) => arrival.path)).to.deep.equal(['/first', '/second', '/high', '/low']);
    });

    it('a signal cancels a waiting request: CanceledError, nothing sent, its slot given back', async () => {
      const throttle = make({ rules: ['1/300ms'] });
      vendor = nockVendor(ORIGIN);
      const acme = acmeFor(throttle);
      const t0 = performance.now();
      await acme.get('/a', as('u1'));
      const controller = new AbortController();
      const waiting = acme.get('/b', { ...as('u1'), signal: controller.signal });
      const source = axios.CancelToken.source();
      const waitingToo = acme.get('/b2', { ...as('u1'), cancelToken: source.token });
      await delay(50);
      // /a answered; /b is booked a window after its answer and sleeps; /b2 waits in line for /b's completion.
      expect(await throttle.inspect('u1'))
        .to.deep.include({ bookedAhead: 1 })
        .and.to.have.nested.property('rules[0].used', 1);
      expect(throttle.stats).to.deep.equal({ queues: 1, queued: 1, sleeping: 1 });
      controller.abort();
      source.cancel('no longer needed');
      const [error, errorToo] = await Promise.all([waiting.catch((e: unknown) => e), waitingToo.catch((e: unknown) => e)]);
      expect(axios.isCancel(error)).to.equal(true);
      expect(axios.isCancel(errorToo)).to.equal(true);
      expect((errorToo as Error).message).to.equal('no longer needed');
      await delay(30); // the release is written in the background
      expect((await throttle.inspect('u1')).rules[0]!.used).to.equal(1);
      await acme.get('/c', as('u1'));
      const times = vendor.times('u1', t0);
      timings('1/300ms, arrivals of /a and /c after two cancelled requests (ms)', times);
      expect(vendor.arrivals.map((arrival) => arrival.path)).to.deep.equal(['/a', '/c']);
      // /c takes the slot /b gave back, a window after /a's answer; had /b's slot not been given back,
      // /c would have waited for /b's bound (maxHoldMs, 10 s) and a window more.
      expect(times[1]! - times[0]!).to.be.within(300, 420);
    });

    it('a request with its own adapter goes through the throttle too', async () => {
      const throttle = make({ rules: ['1/1s'], mode: 'throw' });
      const acme = acmeFor(throttle);
      let sent = 0;
      const custom: AxiosAdapter = async (config) => {
        sent += 1;
        return { data: 'custom', status: 200, statusText: 'OK', headers: {}, config };
      };
      expect((await acme.get('/x', { ...as('u1'), adapter: custom })).data).to.equal('custom');
      const refused = await acme.get('/x', { ...as('u1'), adapter: custom }).catch((error: unknown) => error);
      expect(refused).to.be.instanceOf(RateLimitedError);
      expect(sent).to.equal(1);
    });

    it('resolves adapter names with getAdapter when given one', async () => {
      const throttle = make({ rules: ['1/1s'], mode: 'throw' });
      vendor = nockVendor(ORIGIN);
      const acme = acmeFor(throttle, { getAdapter: axios.getAdapter });
      expect((await acme.get('/x', as('u1'))).data).to.deep.equal({ ok: true });
      expect(await acme.get('/x', as('u1')).catch((error: unknown) => error)).to.be.instanceOf(RateLimitedError);
      expect(vendor.arrivals).to.have.length(1);
    });

    it('eject() restores the adapter and the interceptors, and is idempotent', async () => {
      const throttle = make({ rules: ['1/1s'], mode: 'throw' });
      vendor = nockVendor(ORIGIN);
      const acme = axios.create({ baseURL: ORIGIN });
      const adapter = acme.defaults.adapter;
      const interceptors = () => acme.interceptors.request.handlers!.filter(Boolean).length;
      const handle = throttle.axios(acme, { key: () => 'u1' });
      expect(handle.instance).to.equal(acme);
      expect(acme.defaults.adapter).to.not.equal(adapter);
      expect(interceptors()).to.equal(1);
      await acme.get('/a');
      expect(await acme.get('/b').catch((error: unknown) => error)).to.be.instanceOf(RateLimitedError);
      handle.eject();
      handle.eject();
      expect(acme.defaults.adapter).to.equal(adapter);
      expect(interceptors()).to.equal(0);
      await Promise.all([acme.get('/c'), acme.get('/d')]);
      expect(vendor.arrivals.map((arrival) => arrival.path)).to.deep.equal(['/a', '/c', '/d']);
    });

    it('rejects what cannot work', () => {
      const throttle = make();
      expect(() => throttle.axios({} as AxiosInstance, { key: () => 'u' })).to.throw(ThrottleConfigError, /axios instance/);
      const acme = axios.create();
      expect(() => throttle.axios(acme, {} as AxiosThrottleOptions)).to.throw(ThrottleConfigError, /key to be a function/);
      expect(() => throttle.axios(acme, { key: () => 'u', retries: -1 })).to.throw(ThrottleConfigError, /retries/);
      expect(() => throttle.axios(acme, { key: () => 'u', cost: '5' as unknown as number })).to.throw(ThrottleConfigError, /cost/);
      expect(() => throttle.axios(acme, { key: () => 'u', maxPauseMs: Infinity })).to.throw(ThrottleConfigError, /maxPauseMs/);
      expect(acme.defaults.adapter).to.deep.equal(['xhr', 'http', 'fetch']); // untouched
    });
  });

  describe('on the default axios instance', () => {
    it('throttles axios itself; refused requests reject with the throttle error and never reach the vendor; eject restores it', async () => {
      const throttle = make({ rules: ['1/1s'], mode: 'throw' });
      vendor = nockVendor(ORIGIN);
      const adapter = axios.defaults.adapter;
      const handle = throttle.axios(axios, { key: () => 'everyone' });
      try {
        expect((await axios.get(`${ORIGIN}/a`)).data).to.deep.equal({ ok: true });
        const refused = await axios.get(`${ORIGIN}/b`).catch((error: unknown) => error);
        expect(refused).to.be.instanceOf(RateLimitedError);
        expect((refused as RateLimitedError).reason).to.equal('rule');
      } finally {
        handle.eject();
      }
      expect(axios.defaults.adapter).to.equal(adapter);
      await axios.get(`${ORIGIN}/c`);
      expect(vendor.arrivals.map((arrival) => arrival.path)).to.deep.equal(['/a', '/c']);
    });

    it('spaces arrivals by the rules', async () => {
      const throttle = make({ rules: ['1/150ms'] });
      vendor = nockVendor(ORIGIN);
      handles.push(throttle.axios(axios, { key: (config) => config.headers['x-acme-user'] }));
      const t0 = performance.now();
      await Promise.all([1, 2, 3].map((n) => axios.get(`${ORIGIN}/v1/orders/${n}`, as('u1'))));
      const times = vendor.times('u1', t0);
      timings('default instance, 1/150ms, 3 requests, arrivals (ms)', times);
      expect(mostInWindow(times, 150)).to.equal(1);
    });
  });

  describe('vendors that speak', () => {
    it('429 + Retry-After pauses the key for a second Throttle on the same Redis, and the retry waits for it', async () => {
      const prefix = uniquePrefix();
      const here = make({ name: 'acme', store: redisStore(redisClient(), { prefix }) });
      const elsewhere = make({ name: 'acme', store: redisStore(redisClient(), { prefix }) });
      vendor = nockVendor(ORIGIN, (_arrival, index) => (index === 0 ? { status: 429, headers: { 'Retry-After': '1' } } : { status: 200, body: { ok: true } }));
      const acme = acmeFor(here);
      const paused: unknown[] = [];
      let pausedAt = 0;
      here.on('paused', (event) => {
        pausedAt = performance.now();
        paused.push(event);
      });
      const t0 = performance.now();
      const response = acme.get('/v1/orders', as('u1'));
      while (pausedAt === 0) await delay(2);
      const usage = await elsewhere.inspect('u1');
      expect(usage.pausedForMs).to.be.within(900, 1_001); // the store rounds the end of the pause up
      let startedElsewhere = 0;
      await elsewhere.schedule('u1', () => {
        startedElsewhere = performance.now();
      });
      expect((await response).status).to.equal(200);
      const times = vendor.times('u1', t0);
      timings('429 Retry-After: 1 → other throttle started after the pause event (ms)', [startedElsewhere - pausedAt]);
      timings('429 Retry-After: 1 → arrivals of the 429 and of the retry (ms)', times);
      expect(startedElsewhere - pausedAt).to.be.at.least(970);
      expect(times).to.have.length(2);
      expect(times[1]! - times[0]!).to.be.at.least(1_000);
      expect(paused).to.deep.equal([{ key: 'u1', ms: 1_000, source: 'axios 429' }]);
    });

    it('a loud vendor whose limit is below the rules: no process sends before its Retry-After, and every call ends 2xx', async function () {
      this.timeout(20_000);
      // The vendor allows 5 calls in any second per user and answers the rest 429, with the seconds
      // until a call fits again (rounded up) and the same in ms; the throttle is told 10/s.
      const prefix = uniquePrefix();
      const processes = [1, 2].map(() => make({ name: 'acme', rules: ['10/s'], store: redisStore(redisClient(), { prefix }) }));
      const accepted: number[] = [];
      const refusals: Array<{ at: number; until: number }> = [];
      vendor = nockVendor(ORIGIN, (arrival) => {
        const inWindow = accepted.filter((at) => at > arrival.at - 1_000);
        if (inWindow.length < 5) {
          accepted.push(arrival.at);
          return { status: 200, body: { ok: true } };
        }
        const waitMs = inWindow[inWindow.length - 5]! + 1_000 - arrival.at;
        refusals.push({ at: arrival.at, until: arrival.at + Math.ceil(waitMs / 1_000) * 1_000 });
        return { status: 429, headers: { 'Retry-After': String(Math.ceil(waitMs / 1_000)), 'Retry-After-Ms': String(Math.ceil(waitMs)) } };
      });
      const clients = processes.map((throttle) => acmeFor(throttle, { retries: 3 }));
      const statuses = await Promise.all(
        clients.flatMap((acme) =>
          Array.from({ length: 15 }, (_, n) =>
            acme.get(`/v1/orders/${n}`, as('u1')).then(
              (response) => response.status,
              (error: unknown) => (error as AxiosError).response?.status ?? String(error),
            ),
          ),
        ),
      );
      // Sent while a Retry-After was running: arrived more than 50 ms after a 429 (so not already on
      // its way when that 429 came back) and before the end of the pause it asked for.
      const early = vendor.arrivals.filter((arrival) => refusals.some((r) => arrival.at > r.at + 50 && arrival.at < r.until));
      timings('loud vendor 5/s, throttle 10/s, 2 × 15 calls: arrivals (ms)', vendor.times('u1', vendor.arrivals[0]!.at));
      expect(early.map((arrival) => Math.round(arrival.at - vendor!.arrivals[0]!.at))).to.deep.equal([]);
      expect(statuses.filter((status) => status !== 200)).to.deep.equal([]);
    });

    it('retries go through the throttle: every arrival, retries included, keeps the rules', async () => {
      const throttle = make({ rules: ['2/300ms'] });
      vendor = nockVendor(ORIGIN, (arrival, index) =>
        index < 2 || arrival.user === 'u2' ? { status: 429, headers: { 'Retry-After': '0' } } : { status: 200, body: { ok: true } },
      );
      const acme = acmeFor(throttle);
      const t0 = performance.now();
      const responses = await Promise.all([1, 2, 3, 4].map((n) => acme.get(`/v1/orders/${n}`, as('u1'))));
      expect(responses.map((response) => response.status)).to.deep.equal([200, 200, 200, 200]);
      const times = vendor.times('u1', t0);
      timings('2/300ms, 4 requests, 2 answered 429 then retried, arrivals (ms)', times);
      expect(times).to.have.length(6);
      expect(mostInWindow(times, 300)).to.equal(2);

      // A vendor that keeps refusing: after `retries` the client's own error comes back.
      const error = await acme.get('/v1/x', { ...as('u2'), throttle: { retries: 1 } }).catch((e: unknown) => e);
      expect(error).to.be.instanceOf(AxiosError);
      expect((error as AxiosError).response?.status).to.equal(429);
      expect(vendor.times('u2', t0)).to.have.length(2);
    });

    it('isThrottled flags a 200 with an error body (data as the caller sees it); it is paused and retried', async () => {
      const throttle = make();
      vendor = nockVendor(ORIGIN, (_arrival, index) => ({ status: 200, body: index === 0 ? { error: 'rate_limited' } : { ok: true } }));
      const acme = acmeFor(throttle, {
        isThrottled: (response) => (response.data as { error?: string }).error === 'rate_limited',
        fallbackPauseMs: 100,
      });
      const paused: unknown[] = [];
      throttle.on('paused', (event) => paused.push(event));
      const response = await acme.get('/v1/orders', as('u1'));
      expect(response.data).to.deep.equal({ ok: true });
      expect(paused).to.deep.equal([{ key: 'u1', ms: 100, source: 'axios isThrottled' }]);
      const [first, second] = vendor.arrivals;
      expect(second!.at - first!.at).to.be.at.least(100);
    });

    it('a malformed header is ignored with a debug event, never a crash', async () => {
      const throttle = make();
      vendor = nockVendor(ORIGIN, (_arrival, index) =>
        index === 0 ? { status: 429, headers: { 'Retry-After': 'soon', 'X-RateLimit-Reset': 'later' } } : ok(_arrival, index),
      );
      const acme = acmeFor(throttle, { fallbackPauseMs: 50 });
      const debug: Array<{ message: string; key?: string }> = [];
      throttle.on('debug', (event) => debug.push(event));
      const paused: unknown[] = [];
      throttle.on('paused', (event) => paused.push(event));
      expect((await acme.get('/v1/orders', as('u1'))).status).to.equal(200);
      expect(debug).to.deep.include({ message: 'axios: ignored malformed Retry-After header "soon"', key: 'u1' });
      expect(debug).to.deep.include({ message: 'axios: ignored malformed X-RateLimit-Reset value "later"', key: 'u1' });
      expect(paused).to.deep.equal([{ key: 'u1', ms: 50, source: 'axios 429' }]); // fallbackPauseMs
    });

    it('a success that used the last call pauses the key and is not retried', async () => {
      const throttle = make();
      vendor = nockVendor(ORIGIN, () => ({ status: 200, body: { ok: true }, headers: { 'X-RateLimit-Remaining': '0', 'X-RateLimit-Reset': '2' } }));
      const acme = acmeFor(throttle);
      const paused: unknown[] = [];
      throttle.on('paused', (event) => paused.push(event));
      expect((await acme.get('/v1/orders', as('u1'))).data).to.deep.equal({ ok: true });
      expect(paused).to.deep.equal([{ key: 'u1', ms: 2_000, source: 'axios 200' }]);
      expect((await throttle.inspect('u1')).pausedForMs).to.be.within(1_900, 2_001);
      expect(vendor.arrivals).to.have.length(1);
    });

    it('a vendor pause longer than maxRetryAfterMs is applied but not waited for', async () => {
      const throttle = make();
      vendor = nockVendor(ORIGIN, () => ({ status: 429, headers: { 'Retry-After': '120' } }));
      const acme = acmeFor(throttle);
      const started = performance.now();
      const error = await acme.get('/v1/orders', as('u1')).catch((e: unknown) => e);
      expect((error as AxiosError).response?.status).to.equal(429);
      expect(performance.now() - started).to.be.below(500);
      expect((await throttle.inspect('u1')).pausedForMs).to.be.within(119_000, 120_001);
      expect(vendor.arrivals).to.have.length(1);
    });
  });
});
