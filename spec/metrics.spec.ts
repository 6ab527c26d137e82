import { expect } from 'chai';
import * as client from 'prom-client';
import { QueueFullError, RateLimitedError, StoreUnavailableError, ThrottleClosedError, ThrottleConfigError } from '../lib/errors.js';
import { DEFAULT_WAIT_BUCKETS, loadPromClient, throttleMetrics, type PromClientLike } from '../lib/metrics.js';
import type { ThrottleOptions } from '../lib/options.js';
import { MemoryStore } from '../lib/stores/memory-store.js';
import type { Store, StoreNotice } from '../lib/store.js';
import { Throttle } from '../lib/throttle.js';
import { delegatingStore } from './support/delegating-store.js';
import { useFakeClock } from './support/fake-clock.js';

/**
 * The value of one sample in Prometheus text format: `name{labels} value`, where the sample's labels
 * are exactly `labels` (in any order). Undefined when there is no such sample.
 */
function sample(text: string, name: string, labels: Readonly<Record<string, string>>): number | undefined {
  for (const line of text.split('\n')) {
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const found = Object.fromEntries([...(match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1]!, m[2]!]));
    const wanted = Object.entries(labels);
    if (Object.keys(found).length === wanted.length && wanted.every(([key, value]) => found[key] === value)) return Number(match[3]);
  }
  return undefined;
}

/** Every sample of `name`, with its labels. */
function samples(text: string, name: string): Array<{ labels: Record<string, string>; value: number }> {
  const out: Array<{ labels: Record<string, string>; value: number }> = [];
  for (const line of text.split('\n')) {
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const labels = Object.fromEntries([...(match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1]!, m[2]!]));
    out.push({ labels, value: Number(match[3]) });
  }
  return out;
}

/** What `promise` rejects with (fails the test if it resolves). */
async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected a rejection');
}

/** A store that fails every call, like an unreachable Redis. */
function downStore(): Store {
  const down = (): Promise<never> => Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:1'));
  return { reserve: down, settle: down, inspect: down, pause: down, restore: down, close: async () => {} };
}

describe('metrics: throttleMetrics() with prom-client', () => {
  const fake = useFakeClock();
  let registry: client.Registry;
  let throttles: Throttle[] = [];

  beforeEach(() => {
    registry = new client.Registry();
  });

  afterEach(async () => {
    await Promise.all(throttles.map((throttle) => throttle.close()));
    throttles = [];
  });

  function make(options: Partial<ThrottleOptions>): Throttle {
    const throttle = new Throttle({ name: 'acme', rules: ['2/s'], store: new MemoryStore(), ...options });
    throttles.push(throttle);
    return throttle;
  }

  it('takes the prom-client module as it is imported (types and values)', async () => {
    const typed: PromClientLike = client;
    const loaded = await loadPromClient();
    expect(loaded.Counter).to.equal(typed.Counter);
    expect(loaded.register).to.equal(client.register);
  });

  it('counts granted calls and slots, delays by rule, and observes each wait in seconds', async () => {
    const throttle = make({});
    const metrics = throttleMetrics(throttle, { client, registry });
    const done = Promise.all(Array.from({ length: 5 }, () => throttle.schedule('alice', () => undefined)));
    await fake.clock.tickAsync(2_500);
    await done;
    await throttle.schedule('bob', () => undefined, { cost: 2 });

    const text = await registry.metrics();
    expect(sample(text, metrics.names.granted, { throttle: 'acme' })).to.equal(6);
    expect(sample(text, metrics.names.grantedCost, { throttle: 'acme' })).to.equal(7);
    // 2 start at once; the 3rd and 4th wait for the 2/s window, the 5th for the next one.
    expect(sample(text, metrics.names.delayed, { throttle: 'acme', reason: 'rule', rule: '2/s' })).to.equal(3);
    expect(sample(text, `${metrics.names.wait}_count`, { throttle: 'acme' })).to.equal(6);
    expect(sample(text, `${metrics.names.wait}_bucket`, { throttle: 'acme', le: '0.5' })).to.equal(3);
    expect(sample(text, `${metrics.names.wait}_bucket`, { throttle: 'acme', le: '2.5' })).to.equal(6);
    const sum = sample(text, `${metrics.names.wait}_sum`, { throttle: 'acme' })!;
    expect(sum).to.be.within(4, 4.01); // 0 + 0 + 1 + 1 + 2 s (+ 1 ms per booking behind a waited slot) + 0
    expect(text).not.to.include('alice');
    expect(text).not.to.include('bob');
  });

  it('counts refusals by reason and rule: a full rule, a pause, a full queue', async () => {
    const strict = make({ name: 'strict', mode: 'throw', rules: ['1/min'] });
    const queued = make({ name: 'queued', rules: ['1/s'], maxQueued: 0 });
    const m1 = throttleMetrics(strict, { client, registry });
    throttleMetrics(queued, { client, registry });

    await strict.schedule('u', () => undefined);
    expect(await rejection(strict.schedule('u', () => undefined))).to.be.instanceOf(RateLimitedError);
    await strict.pause('v', 5_000, 'test');
    expect(await rejection(strict.schedule('v', () => undefined))).to.be.instanceOf(RateLimitedError);

    await queued.schedule('u', () => undefined);
    const booked = queued.schedule('u', () => undefined).catch((error: unknown) => error); // sleeps for its slot
    await fake.clock.tickAsync(10);
    const head = queued.schedule('u', () => undefined).catch((error: unknown) => error); // waits in line for its completion
    await fake.clock.tickAsync(10);
    expect(await rejection(queued.schedule('u', () => undefined))).to.be.instanceOf(QueueFullError);
    await queued.close();
    expect(await booked).to.be.instanceOf(ThrottleClosedError); // not a refusal
    expect(await head).to.be.instanceOf(ThrottleClosedError);

    const text = await registry.metrics();
    expect(samples(text, m1.names.refused)).to.have.deep.members([
      { labels: { throttle: 'strict', reason: 'rule', rule: '1/min' }, value: 1 },
      { labels: { throttle: 'strict', reason: 'paused', rule: '' }, value: 1 },
      { labels: { throttle: 'queued', reason: 'queue_full', rule: '' }, value: 1 },
    ]);
    expect(sample(text, m1.names.pauses, { throttle: 'strict', source: 'test' })).to.equal(1);
  });

  it('counts vendor pauses by source and calls delayed by a pause', async () => {
    const throttle = make({ rules: ['100/s'] });
    const metrics = throttleMetrics(throttle, { client, registry });
    await throttle.pause('alice', 300, 'fetch 429');
    const waiting = throttle.schedule('alice', () => undefined);
    await fake.clock.tickAsync(400);
    await waiting;

    const text = await registry.getSingleMetricAsString(metrics.names.pauses);
    expect(sample(text, metrics.names.pauses, { throttle: 'acme', source: 'fetch 429' })).to.equal(1);
    const delayed = await registry.getSingleMetricAsString(metrics.names.delayed);
    expect(sample(delayed, metrics.names.delayed, { throttle: 'acme', reason: 'paused', rule: '' })).to.equal(1);
  });

  it('counts store errors by policy', async () => {
    const throttle = make({ store: downStore() });
    const metrics = throttleMetrics(throttle, { client, registry });
    expect(await rejection(throttle.schedule('alice', () => undefined))).to.be.instanceOf(StoreUnavailableError);
    expect(await rejection(throttle.schedule('bob', () => undefined))).to.be.instanceOf(StoreUnavailableError);
    const text = await registry.getSingleMetricAsString(metrics.names.storeErrors);
    expect(sample(text, metrics.names.storeErrors, { throttle: 'acme', policy: 'fail' })).to.equal(2);
  });

  it('counts what the store says (storeWarning) by kind, and the throttle stops listening when it closes', async () => {
    const listeners = new Set<(notice: StoreNotice) => void>();
    const store = delegatingStore(new MemoryStore(), {
      watch: (listener) => {
        listeners.add(listener);
        return () => listeners.delete(listener);
      },
    });
    const throttle = make({ store });
    const metrics = throttleMetrics(throttle, { client, registry });
    const heard: StoreNotice[] = [];
    throttle.on('storeWarning', (notice) => heard.push(notice));
    const evicting: StoreNotice = { kind: 'evicting', message: 'Redis is evicting keys', policy: 'volatile-ttl', evictedKeys: 3 };
    for (const listener of listeners) listener(evicting);
    for (const listener of listeners) listener({ kind: 'evictionsStopped', message: 'Redis has evicted no key for 10 s' });
    expect(heard.map((notice) => notice.kind)).to.deep.equal(['evicting', 'evictionsStopped']);
    expect(heard[0]).to.deep.equal(evicting);
    const text = await registry.getSingleMetricAsString(metrics.names.storeWarnings);
    expect(sample(text, metrics.names.storeWarnings, { throttle: 'acme', kind: 'evicting' })).to.equal(1);
    expect(sample(text, metrics.names.storeWarnings, { throttle: 'acme', kind: 'evictionsStopped' })).to.equal(1);
    await throttle.close();
    expect(listeners.size).to.equal(0);
  });

  it('shows the limit a key learned last from its vendor, by window and source, until it lapses', async () => {
    const throttle = make({ rules: ['10/s', '100/min'], learnedForMs: 5_000 });
    const metrics = throttleMetrics(throttle, { client, registry });
    await throttle.learn('alice', { status: 200, headers: { 'ratelimit-policy': '"s";q=6;w=1, "m";q=50;w=60' } });
    await throttle.learn('bob', { status: 200, headers: { 'ratelimit-policy': '"s";q=4;w=1' } });
    let text = await registry.metrics();
    expect(sample(text, metrics.names.learned, { throttle: 'acme', window: 's', source: 'policy' })).to.equal(4);
    expect(sample(text, metrics.names.learned, { throttle: 'acme', window: 'min', source: 'policy' })).to.equal(50);
    await fake.clock.tickAsync(5_001);
    text = await registry.metrics();
    expect(samples(text, metrics.names.learned)).to.deep.equal([]);
  });

  it('reads queued and sleeping calls from throttle.stats when scraped, and maxHoldMs', async () => {
    const throttle = make({ rules: ['1/s'], maxHoldMs: 2_500 });
    const metrics = throttleMetrics(throttle, { client, registry });
    const done = Promise.all(Array.from({ length: 4 }, () => throttle.schedule('alice', () => undefined)));
    await fake.clock.tickAsync(10);
    const { queued, sleeping } = throttle.stats;
    // One ran; the second sleeps until its slot at 1 s; the other two wait in line for its completion.
    expect({ queued, sleeping }).to.deep.equal({ queued: 2, sleeping: 1 });

    let text = await registry.metrics();
    expect(sample(text, metrics.names.waiting, { throttle: 'acme', state: 'queued' })).to.equal(queued);
    expect(sample(text, metrics.names.waiting, { throttle: 'acme', state: 'sleeping' })).to.equal(sleeping);
    expect(sample(text, metrics.names.hold, { throttle: 'acme' })).to.equal(2.5);

    await fake.clock.tickAsync(4_000);
    await done;
    text = await registry.metrics();
    expect(sample(text, metrics.names.waiting, { throttle: 'acme', state: 'queued' })).to.equal(0);
    expect(sample(text, metrics.names.waiting, { throttle: 'acme', state: 'sleeping' })).to.equal(0);
  });

  it('shares one registry between throttles, each under its own label, and detach() stops counting one', async () => {
    const a = make({ name: 'vendor-a' });
    const b = make({ name: 'vendor-b' });
    const ma = throttleMetrics(a, { client, registry });
    const mb = throttleMetrics(b, { client, registry });
    expect(() => throttleMetrics(a, { client, registry })).to.throw(ThrottleConfigError, /already has metrics/);

    await a.schedule('k', () => undefined);
    await b.schedule('k', () => undefined);
    await b.schedule('k', () => undefined);
    ma.detach();
    ma.detach();
    expect(a.listenerCount('granted')).to.equal(0);
    expect(b.listenerCount('granted')).to.equal(1);
    await a.schedule('k', () => undefined);

    const text = await registry.metrics();
    expect(sample(text, ma.names.granted, { throttle: 'vendor-a' })).to.equal(1); // kept, not counted after detach
    expect(sample(text, mb.names.granted, { throttle: 'vendor-b' })).to.equal(2);
    expect(samples(text, mb.names.waiting).map((s) => s.labels.throttle)).to.deep.equal(['vendor-b', 'vendor-b']);

    // Attached again after a detach: the same counters go on.
    const again = throttleMetrics(a, { client, registry });
    await a.schedule('k2', () => undefined);
    expect(sample(await registry.metrics(), again.names.granted, { throttle: 'vendor-a' })).to.equal(2);
    again.detach();
    mb.detach();
  });

  it('keeps registries and prefixes apart, and registers again after registry.clear()', async () => {
    const throttle = make({});
    const other = new client.Registry();
    const m1 = throttleMetrics(throttle, { client, registry });
    const m2 = throttleMetrics(throttle, { client, registry: other, prefix: 'batch_' });
    expect(m2.names.granted).to.equal('batch_calls_granted_total');
    await throttle.schedule('k', () => undefined);
    expect(sample(await registry.metrics(), m1.names.granted, { throttle: 'acme' })).to.equal(1);
    expect(sample(await other.metrics(), m2.names.granted, { throttle: 'acme' })).to.equal(1);
    m1.detach();

    registry.clear();
    const m3 = throttleMetrics(throttle, { client, registry });
    await throttle.schedule('k', () => undefined);
    expect(sample(await registry.metrics(), m3.names.granted, { throttle: 'acme' })).to.equal(1);
    m2.detach();
    m3.detach();
  });

  it('says what is wrong: not prom-client, a bad prefix, a name taken by other code', () => {
    const throttle = make({});
    expect(() => throttleMetrics(throttle, { client: {} as PromClientLike, registry })).to.throw(ThrottleConfigError, /prom-client module/);
    expect(() => throttleMetrics(throttle, { client, registry, prefix: '1bad-' })).to.throw(ThrottleConfigError, /prefix/);
    new client.Counter({ name: 'mine_calls_granted_total', help: 'not ours', registers: [registry] });
    expect(() => throttleMetrics(throttle, { client, registry, prefix: 'mine_' })).to.throw(
      ThrottleConfigError,
      /mine_calls_granted_total is already registered/,
    );
  });

  it('uses the given wait buckets, by default from 1 ms to 10 minutes', async () => {
    expect(DEFAULT_WAIT_BUCKETS[0]).to.equal(0.001);
    expect(DEFAULT_WAIT_BUCKETS.at(-1)).to.equal(600);
    const throttle = make({});
    const metrics = throttleMetrics(throttle, { client, registry, buckets: [0.1, 1] });
    await throttle.schedule('k', () => undefined);
    const les = samples(await registry.metrics(), `${metrics.names.wait}_bucket`).map((s) => s.labels.le);
    expect(les).to.deep.equal(['0.1', '1', '+Inf']);
  });
});
