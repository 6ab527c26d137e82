/**
 * OpenTelemetry (lib/telemetry.ts): with a tracer and a meter provider registered (the SDK's
 * in-memory exporter, a reader collected by hand), each call gives a span over its wait and its
 * run, the parent of the vendor's HTTP span (undici's instrumentation, as fetch sends it), with the
 * attributes and events a dashboard groups by; metrics after ASP.NET Core's rate-limiting ones.
 * Without a provider nothing is recorded, and in a process without one the API is never loaded.
 */
import { context, metrics, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici';
import { MeterProvider, MetricReader, type DataPoint, type Histogram } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { expect } from 'chai';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { CallTimeoutError, MemoryStore, RateLimitedError, Throttle, type ThrottleOptions } from '../lib/index.js';
import { startHttpVendor, type Vendor } from './support/http-vendor.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** A reader collected by the spec itself. */
class Reader extends MetricReader {
  protected onShutdown(): Promise<void> {
    return Promise.resolve();
  }
  protected onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
}

describe('OpenTelemetry', function () {
  this.timeout(20_000);
  const exporter = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  let reader: Reader;
  let undici: UndiciInstrumentation;
  const throttles: Throttle[] = [];
  let vendor: Vendor | undefined;

  function make(options: Partial<ThrottleOptions> = {}): Throttle {
    const throttle = new Throttle({ name: 'acme', rules: ['2/s'], store: new MemoryStore(), ...options });
    throttles.push(throttle);
    return throttle;
  }

  const spans = (): ReadableSpan[] => exporter.getFinishedSpans().filter((span) => span.instrumentationScope.name === 'vendor-throttle');

  /** The data points of metric `name`, from one collection. */
  async function points(name: string): Promise<Array<DataPoint<number | Histogram>>> {
    const { resourceMetrics } = await reader.collect();
    const metric = resourceMetrics.scopeMetrics.flatMap((scope) => scope.metrics).find((candidate) => candidate.descriptor.name === name);
    return (metric?.dataPoints ?? []) as Array<DataPoint<number | Histogram>>;
  }

  before(() => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    trace.setGlobalTracerProvider(tracerProvider);
    reader = new Reader();
    metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));
    undici = new UndiciInstrumentation();
    undici.setTracerProvider(tracerProvider);
    undici.enable();
  });

  afterEach(async () => {
    await Promise.all(throttles.splice(0).map((throttle) => throttle.close()));
    await vendor?.close();
    vendor = undefined;
    exporter.reset();
  });

  after(() => {
    undici.disable();
    trace.disable();
    metrics.disable();
    context.disable();
  });

  it("gives each call a span over its wait and its run, the parent of the vendor's HTTP span and the child of the caller's", async () => {
    vendor = await startHttpVendor();
    const throttle = make();
    const fetchAcme = throttle.fetch({ key: () => 'u1' });
    const job = trace.getTracer('job').startSpan('job');
    await context.with(trace.setSpan(context.active(), job), async () => {
      for (let i = 0; i < 3; i++) await (await fetchAcme(`${vendor!.url}/orders?user=u1`)).text();
    });
    job.end();
    const calls = spans();
    expect(calls).to.have.length(3);
    const http = exporter.getFinishedSpans().filter((span) => span.instrumentationScope.name.includes('undici'));
    expect(http).to.have.length(3);
    for (const [i, call] of calls.entries()) {
      expect(call.name).to.equal('schedule acme');
      expect(call.parentSpanContext?.spanId).to.equal(job.spanContext().spanId);
      expect(http[i]!.parentSpanContext?.spanId).to.equal(call.spanContext().spanId);
      expect(call.attributes).to.include({
        'vendor_throttle.name': 'acme',
        'vendor_throttle.cost': 1,
        'vendor_throttle.retry': false,
        'vendor_throttle.outcome': 'completed',
      });
      // No key without a keyLabel: a key may be a customer's id.
      expect(call.attributes).to.not.have.property('vendor_throttle.key');
    }
    // The third waited for the first's window under 2/s: the rule that bound it, and how long.
    expect(calls[0]!.attributes).to.not.have.property('vendor_throttle.reason');
    expect(calls[2]!.attributes).to.include({ 'vendor_throttle.reason': '2/s' });
    expect(calls[2]!.attributes['vendor_throttle.wait_ms']).to.be.within(900, 1_100);
    // The span covers the wait: it starts before the HTTP span by the wait.
    const startMs = (span: ReadableSpan) => span.startTime[0] * 1000 + span.startTime[1] / 1e6;
    expect(startMs(http[2]!) - startMs(calls[2]!)).to.be.within(850, 1_200);
  });

  it('says how each call ended: refused and why, failed, timed out, cancelled; and the key as keyLabel gives it', async () => {
    const throttle = make({ mode: 'throw', keyLabel: (key) => (key.startsWith('vip-') ? 'vip' : 'standard') });
    await throttle.schedule('vip-1', async () => undefined);
    await throttle
      .schedule('vip-1', async () => {
        throw new Error('vendor down');
      })
      .catch(() => undefined);
    const refused = await throttle.schedule('vip-1', async () => undefined).catch((error: unknown) => error);
    expect(refused).to.be.instanceOf(RateLimitedError);
    const slow = make({ name: 'slow', timeoutMs: 20 });
    const timedOut = await slow.schedule('u2', () => new Promise((resolve) => setTimeout(resolve, 200))).catch((error: unknown) => error);
    expect(timedOut).to.be.instanceOf(CallTimeoutError);
    const controller = new AbortController();
    const waiting = make({ name: 'waiting', rules: ['1/min'] });
    await waiting.schedule('u3', async () => undefined);
    const cancelled = waiting.schedule('u3', async () => undefined, { signal: controller.signal }).catch((error: unknown) => error);
    controller.abort(new Error('user gave up'));
    await cancelled;
    const outcomes = spans().map((span) => span.attributes);
    expect(outcomes.map((span) => span['vendor_throttle.outcome'])).to.deep.equal(['completed', 'failed', 'refused', 'timed_out', 'completed', 'cancelled']);
    expect(outcomes[0]).to.include({ 'vendor_throttle.key': 'vip' });
    expect(outcomes[2]).to.include({ 'vendor_throttle.reason': '2/s' });
    const failed = spans()[1]!;
    expect(failed.status).to.deep.include({ code: 2, message: 'vendor down' });
    expect(failed.events.map((event) => event.name)).to.include('exception');
    expect(spans()[0]!.status.code).to.equal(0);
  });

  it('notes a vendor pause and a learned limit on the span of the call whose answer said so, and marks the retry', async () => {
    let refuseNext = true;
    vendor = await startHttpVendor(() => {
      if (!refuseNext) return { status: 200, headers: { 'ratelimit-policy': '"d";q=1;w=1' } };
      refuseNext = false;
      return { status: 429, headers: { 'retry-after': '1' } };
    });
    const throttle = make({ rules: ['5/s'] });
    const fetchAcme = throttle.fetch({ key: () => 'u1', retries: 1 });
    expect((await fetchAcme(`${vendor.url}/?user=u1`)).status).to.equal(200);
    const [first, retry] = spans();
    expect(first!.attributes).to.include({ 'vendor_throttle.retry': false, 'vendor_throttle.outcome': 'completed' });
    const pause = first!.events.find((event) => event.name === 'vendor_throttle.paused');
    expect(pause?.attributes).to.include({ 'vendor_throttle.pause.ms': 1_000, 'vendor_throttle.pause.source': 'fetch 429' });
    expect(retry!.attributes).to.include({ 'vendor_throttle.retry': true, 'vendor_throttle.reason': 'paused' });
    // The retry's answer published 1 a second: learned, where the refusal had taught 4.
    const learned = retry!.events.find((event) => event.name === 'vendor_throttle.learned');
    expect(learned?.attributes).to.include({ 'vendor_throttle.learned.limits': '1/s (policy)' });
  });

  it('counts calls by outcome, queued and in flight, and their time in queue, through the meter', async () => {
    const throttle = make({ name: 'metered', mode: 'throw' });
    let release = (): void => undefined;
    const running = throttle.schedule('u1', () => new Promise<void>((resolve) => (release = resolve)));
    await new Promise((resolve) => setTimeout(resolve, 10));
    const active = (await points('vendor_throttle.active_calls')).find((point) => point.attributes['vendor_throttle.name'] === 'metered');
    expect(active?.value).to.equal(1);
    release();
    await running;
    await throttle.schedule('u1', async () => undefined);
    await throttle.schedule('u1', async () => undefined).catch(() => undefined);
    const calls = (await points('vendor_throttle.calls')).filter((point) => point.attributes['vendor_throttle.name'] === 'metered');
    expect(calls.map((point) => ({ outcome: point.attributes['vendor_throttle.outcome'], value: point.value }))).to.have.deep.members([
      { outcome: 'completed', value: 2 },
      { outcome: 'refused', value: 1 },
    ]);
    const queued = (await points('vendor_throttle.queued_calls')).find((point) => point.attributes['vendor_throttle.name'] === 'metered');
    expect(queued?.value).to.equal(0);
    const inQueue = (await points('vendor_throttle.call.time_in_queue')).filter((point) => point.attributes['vendor_throttle.name'] === 'metered');
    expect(inQueue.reduce((sum, point) => sum + (point.value as Histogram).count, 0)).to.equal(3);
    const hold = (await points('vendor_throttle.hold')).find((point) => point.attributes['vendor_throttle.name'] === 'metered');
    expect(hold?.value).to.equal(throttle.maxHoldMs / 1000);
  });

  it('never lets the SDK break a call: a span that cannot start, or end, leaves the call as it was, said once in a debug event', async () => {
    const span = {
      setAttribute: () => span,
      addEvent: () => span,
      setStatus: () => span,
      recordException: () => undefined,
      isRecording: () => true,
      spanContext: () => ({ traceId: '1'.repeat(32), spanId: '1'.repeat(16), traceFlags: 1 }),
      end: () => {
        throw new Error('cannot end');
      },
    };
    const broken = (where: 'start' | 'end') => ({
      getTracer: () => ({
        startSpan: () => {
          if (where === 'start') throw new Error('cannot start');
          return span;
        },
        startActiveSpan: () => undefined,
      }),
    });
    for (const where of ['start', 'end'] as const) {
      trace.disable();
      trace.setGlobalTracerProvider(broken(where) as never);
      try {
        const throttle = make({ name: `broken-${where}` });
        const said: string[] = [];
        throttle.on('debug', ({ message }) => said.push(message));
        for (let i = 0; i < 2; i++) expect(await throttle.schedule('u1', async () => i)).to.equal(i);
        expect(said.filter((message) => message.includes('OpenTelemetry'))).to.have.length(1);
        expect(throttle.pending + throttle.size).to.equal(0);
      } finally {
        trace.disable();
        trace.setGlobalTracerProvider(tracerProvider);
      }
    }
  });

  it('records nothing with telemetry: false, or once the providers are gone', async () => {
    const off = make({ name: 'off', telemetry: false });
    await off.schedule('u1', async () => undefined);
    expect(spans()).to.deep.equal([]);
    const on = make({ name: 'on' });
    trace.disable();
    try {
      await on.schedule('u1', async () => undefined);
      expect(spans()).to.deep.equal([]);
    } finally {
      trace.setGlobalTracerProvider(tracerProvider);
    }
    await on.schedule('u1', async () => undefined);
    expect(spans()).to.have.length(1);
  });

  it('in a process with no provider registered, never loads the API', async () => {
    // A child process: this one has loaded the API for the specs above.
    const script = [
      'const seen = [];',
      "const { register } = await import('node:module');",
      "const { MessageChannel } = await import('node:worker_threads');",
      'const { port1, port2 } = new MessageChannel();',
      'port1.on("message", (url) => seen.push(url)); port1.unref();',
      "register('data:text/javascript,' + encodeURIComponent('let port; export function initialize(data) { port = data.port; } export async function resolve(specifier, context, next) { const resolved = await next(specifier, context); port.postMessage(resolved.url); return resolved; }'), { data: { port: port2 }, transferList: [port2] });",
      "const { Throttle } = await import('./lib/index.ts');",
      "const throttle = new Throttle({ name: 'acme', rules: ['5/s'] });",
      "for (let i = 0; i < 3; i++) await throttle.schedule('u1', async () => undefined);",
      'await throttle.close();',
      'await new Promise((resolve) => setTimeout(resolve, 50));',
      "console.log(JSON.stringify({ modules: seen.length, otel: seen.filter((url) => url.includes('@opentelemetry')) }));",
    ].join('\n');
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: ROOT, timeout: 15_000 });
    const result = JSON.parse(stdout.trim().split('\n').at(-1)!) as { modules: number; otel: string[] };
    expect(result.modules, 'the hook saw the library load').to.be.above(10);
    expect(result.otel).to.deep.equal([]);
  });
});
