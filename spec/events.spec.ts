/**
 * The events of a call's life (queued, started, completed, failed, retried, with their timings), and
 * the metrics throttleMetrics() builds on them.
 */
import { expect } from 'chai';
import * as client from 'prom-client';
import { CallTimeoutError, MemoryStore, RateLimitedError, Throttle, throttleMetrics, type ThrottleEvents } from '../lib/index.js';
import { useFakeClock } from './support/fake-clock.js';

type Seen = Array<[keyof ThrottleEvents, Record<string, unknown>]>;

/** Records every event of a call's life, in order. */
function record(throttle: Throttle): Seen {
  const seen: Seen = [];
  for (const name of ['queued', 'started', 'completed', 'failed', 'refused', 'retried'] as const) {
    throttle.on(name, (event: object) => seen.push([name, { ...event }]));
  }
  return seen;
}

describe("events of a call's life", () => {
  const fake = useFakeClock();
  const throttles: Throttle[] = [];
  afterEach(async () => {
    await Promise.all(throttles.splice(0).map((throttle) => throttle.close()));
  });
  function make(rules: Array<'1/s' | '2/s'> = ['1/s'], timeoutMs?: number): Throttle {
    const throttle = new Throttle({ name: 'acme', rules, store: new MemoryStore(), ...(timeoutMs === undefined ? {} : { timeoutMs }) });
    throttles.push(throttle);
    return throttle;
  }

  it("a listener's error does not reach the call: it is thrown again on its own, as an uncaught exception", async () => {
    const throttle = make();
    const broken = new Error('the log shipper is down');
    throttle.on('started', () => {
      throw broken;
    });
    const uncaught: unknown[] = [];
    // Mocha's own handler would fail the test: set aside while the call runs.
    const handlers = process.listeners('uncaughtException');
    process.removeAllListeners('uncaughtException');
    process.on('uncaughtException', (error) => uncaught.push(error));
    try {
      expect(await throttle.schedule('u', () => 'ran')).to.equal('ran');
      await fake.clock.tickAsync(0);
    } finally {
      process.removeAllListeners('uncaughtException');
      for (const handler of handlers) process.on('uncaughtException', handler);
    }
    expect(uncaught).to.deep.equal([broken]);
  });

  it('queued, started (after its wait) and completed (after its run), with their timings', async () => {
    const throttle = make();
    const seen = record(throttle);
    await throttle.schedule('u', () => 'first');
    const second = throttle.schedule('u', async () => {
      await new Promise((resolve) => setTimeout(resolve, 200));
      return 'second';
    });
    await fake.clock.tickAsync(1_300);
    expect(await second).to.equal('second');
    expect(seen.map(([name]) => name)).to.deep.equal(['queued', 'started', 'completed', 'queued', 'started', 'completed']);
    const [, , , , started, completed] = seen;
    expect(started![1]).to.include({ key: 'u', cost: 1 });
    expect(started![1].waitedMs).to.be.within(999, 1_010);
    expect(completed![1].durationMs).to.be.within(199, 210);
    expect(completed![1].waitedMs).to.equal(started![1].waitedMs);
  });

  it('failed: fn threw, or outlasted timeoutMs; refused: turned away', async () => {
    const throttle = make(['2/s'], 100);
    const seen = record(throttle);
    const boom = new Error('vendor down');
    await throttle.schedule('u', () => Promise.reject(boom)).catch(() => undefined);
    const slow = throttle.schedule('u', () => new Promise(() => undefined)).catch((error: unknown) => error);
    await fake.clock.tickAsync(150);
    expect(await slow).to.be.instanceOf(CallTimeoutError);
    await throttle.schedule('u', () => 1, { maxDelayMs: 0 }).catch(() => undefined);
    const failed = seen.filter(([name]) => name === 'failed').map(([, event]) => event);
    expect(failed.map((event) => event.error)).to.have.length(2);
    expect(failed[0]!.error).to.equal(boom);
    expect(failed[1]!.error).to.be.instanceOf(CallTimeoutError);
    expect(failed[1]!.durationMs).to.be.within(99, 110);
    const refused = seen.filter(([name]) => name === 'refused');
    expect(refused).to.have.length(1);
    expect(refused[0]![1].error).to.be.instanceOf(RateLimitedError);
  });

  it('every call ends its life: aborted or after close(), failed with ran false; an HTTP client that fails, failed with ran true', async () => {
    const throttle = make();
    const seen = record(throttle);
    await throttle.schedule('u', () => 'first');
    const controller = new AbortController();
    const aborted = throttle.schedule('u', () => 'never', { signal: controller.signal }).catch((error: unknown) => error);
    await fake.clock.tickAsync(10);
    controller.abort(new Error('user went away'));
    await aborted;
    const fetchAcme = throttle.fetch({ key: () => 'v', fetch: async (_input: string): Promise<Response> => Promise.reject(new TypeError('fetch failed')) });
    expect(await fetchAcme('https://api.acme.example/a').catch((error: unknown) => error)).to.be.instanceOf(TypeError);
    await throttle.close();
    await throttle.schedule('u', () => 'closed').catch(() => undefined);
    const failed = seen.filter(([name]) => name === 'failed').map(([, event]) => [event.key, event.ran, (event.error as Error).message]);
    expect(failed).to.deep.equal([
      ['u', false, 'user went away'],
      ['v', true, 'fetch failed'],
      ['u', false, 'Throttle is closed'],
    ]);
    // Every call queued ended: started and completed, refused, or failed.
    const count = (name: string) => seen.filter(([seenName]) => seenName === name).length;
    expect(count('queued')).to.equal(count('completed') + count('refused') + count('failed'));
  });

  it('retried: an HTTP adapter sends a refused request again, with the attempt and the status', async () => {
    const throttle = make(['2/s']);
    const seen = record(throttle);
    let sent = 0;
    const fetchAcme = throttle.fetch({
      key: () => 'u',
      fetch: async (_input: string) => (++sent === 1 ? new Response('slow down', { status: 429, headers: { 'Retry-After': '1' } }) : new Response('ok')),
    });
    const response = fetchAcme('https://api.acme.example/a');
    await fake.clock.tickAsync(1_500);
    expect((await response).status).to.equal(200);
    const retried = seen.filter(([name]) => name === 'retried').map(([, event]) => event);
    expect(retried).to.deep.equal([{ key: 'u', client: 'fetch', attempt: 1, status: 429, pauseMs: 1_000 }]);
  });

  it('throttleMetrics counts completed, failed and retried calls and observes how long each ran', async () => {
    const registry = new client.Registry();
    const throttle = make(['2/s'], 100);
    const metrics = throttleMetrics(throttle, { client, registry });
    await throttle.schedule('u', () => 'ok');
    await throttle.schedule('u', () => Promise.reject(new Error('no'))).catch(() => undefined);
    let sent = 0;
    const fetchAcme = throttle.fetch({
      key: () => 'v',
      fetch: async (_input: string) => new Response('', { status: ++sent === 1 ? 429 : 200, headers: { 'Retry-After': '0' } }),
    });
    const response = fetchAcme('https://api.acme.example/a');
    await fake.clock.tickAsync(1_100);
    await response;
    const text = await registry.metrics();
    expect(text).to.match(new RegExp(`^${metrics.names.completed}\\{throttle="acme"\\} 3$`, 'm'));
    expect(text).to.match(new RegExp(`^${metrics.names.failed}\\{throttle="acme"\\} 1$`, 'm'));
    expect(text).to.match(new RegExp(`^${metrics.names.retried}\\{throttle="acme",client="fetch",status="429"\\} 1$`, 'm'));
    expect(text).to.match(new RegExp(`^${metrics.names.duration}_count\\{throttle="acme",outcome="completed"\\} 3$`, 'm'));
    expect(text).to.match(new RegExp(`^${metrics.names.duration}_count\\{throttle="acme",outcome="failed"\\} 1$`, 'm'));
    metrics.detach();
  });
});
