/**
 * What OpenTelemetry costs a call: the same calls with `telemetry: false` (the telemetry code never
 * runs), with telemetry on and no provider registered (the default: a look at the API's global
 * registry per call, nothing loaded), and with a tracer provider, a meter provider, or both
 * registered (a span and the metrics per call; spans go to a batch processor whose exporter drops
 * them, the metrics are aggregated and never collected), taken in turn, round after round, on the
 * compiled library.
 *
 *     npx tsx scripts/bench/telemetry.ts [--calls=20000] [--runs=5]
 *
 * Per store (the in-process MemoryStore, where the library's own JavaScript is most of a call, and a
 * RedisStore on a private redis-server), µs of this process's CPU and of wall time per call, median
 * of the runs. Calls go 200 at a time through `schedule()` over 1,000 keys, under a rule that never
 * binds (40/s, a log of exact slots: each key takes 20 calls a run, each run under a name of its own).
 */
import { context, metrics, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, BatchSpanProcessor, type SpanExporter } from '@opentelemetry/sdk-trace-base';
import { Redis } from 'ioredis';
import { library } from '../support/library.js';
import { startRedis } from '../support/redis-server.js';
import { readFlags, settingsOrUsage, UsageError } from '../support/usage.js';

const { MemoryStore, RedisStore, Throttle } = library;

const KEYS = 1_000;
const IN_FLIGHT = 200;

/** Drops every span it is given. */
const dropping: SpanExporter = {
  export: (_spans, done) => done({ code: 0 }),
  shutdown: () => Promise.resolve(),
};

class IdleReader extends MetricReader {
  protected onShutdown(): Promise<void> {
    return Promise.resolve();
  }
  protected onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
}

type Variant = 'telemetry: false' | 'no provider' | 'tracer provider' | 'meter provider' | 'both providers';
const VARIANTS: readonly Variant[] = ['telemetry: false', 'no provider', 'tracer provider', 'meter provider', 'both providers'];

function register(variant: Variant): (() => Promise<void>) | undefined {
  const traces = variant === 'tracer provider' || variant === 'both providers';
  const meters = variant === 'meter provider' || variant === 'both providers';
  if (!traces && !meters) return undefined;
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(dropping)] });
  const meterProvider = new MeterProvider({ readers: [new IdleReader()] });
  if (traces) trace.setGlobalTracerProvider(tracerProvider);
  if (meters) metrics.setGlobalMeterProvider(meterProvider);
  return async () => {
    trace.disable();
    metrics.disable();
    await tracerProvider.shutdown();
    await meterProvider.shutdown();
  };
}

/** µs of CPU and of wall time per call, for `calls` calls through a new throttle on `store`. */
async function measure(
  store: InstanceType<typeof MemoryStore> | InstanceType<typeof RedisStore>,
  variant: Variant,
  calls: number,
  run: number,
): Promise<{ cpu: number; wall: number }> {
  const unregister = register(variant);
  const throttle = new Throttle({ name: `t${run}-${VARIANTS.indexOf(variant)}`, rules: ['40/s'], store, telemetry: variant !== 'telemetry: false' });
  try {
    // Warm-up: the first calls load what they load (the API, with a provider).
    await Promise.all(Array.from({ length: IN_FLIGHT }, (_, i) => throttle.schedule(`w${i}`, () => undefined)));
    const cpuBefore = process.cpuUsage();
    const start = performance.now();
    for (let sent = 0; sent < calls; sent += IN_FLIGHT) {
      await Promise.all(Array.from({ length: IN_FLIGHT }, (_, i) => throttle.schedule(`k${(sent + i) % KEYS}`, () => undefined)));
    }
    const wall = performance.now() - start;
    const cpu = process.cpuUsage(cpuBefore);
    return { cpu: (cpu.user + cpu.system) / calls, wall: (wall * 1000) / calls };
  } finally {
    await throttle.close();
    await unregister?.();
  }
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

const settings = settingsOrUsage(() => {
  const flags = readFlags(process.argv.slice(2), ['calls', 'runs']);
  const calls = Number(flags.get('calls') ?? '20000');
  const runs = Number(flags.get('runs') ?? '5');
  if (!Number.isInteger(calls) || calls < IN_FLIGHT) throw new UsageError(`Expected --calls to be a whole number from ${IN_FLIGHT}`);
  if (!Number.isInteger(runs) || runs < 1 || runs > 20) throw new UsageError('Expected --runs to be a whole number from 1 to 20');
  return { calls, runs };
}, 'Usage: npx tsx scripts/bench/telemetry.ts [--calls=20000] [--runs=5]');

if (settings) {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  const redis = await startRedis();
  const client = new Redis(redis.port, '127.0.0.1');
  try {
    console.log(
      `OpenTelemetry's cost per call: ${settings.calls} calls a run through schedule(), ${IN_FLIGHT} at a time over ${KEYS} keys; median of ${settings.runs} runs, in turn\n`,
    );
    console.log('| store | variant | CPU µs/call | wall µs/call |');
    console.log('| --- | --- | --- | --- |');
    for (const [label, store] of [
      ['MemoryStore', new MemoryStore()],
      ['RedisStore', new RedisStore(client, { prefix: `otel-${process.pid}` })],
    ] as const) {
      const figures = new Map<Variant, Array<{ cpu: number; wall: number }>>(VARIANTS.map((variant) => [variant, []]));
      for (let run = 0; run < settings.runs; run++) {
        // Each run takes the variants in another order.
        const order = VARIANTS.map((_, i) => VARIANTS[(i + run) % VARIANTS.length]!);
        for (const variant of order) figures.get(variant)!.push(await measure(store, variant, settings.calls, run));
      }
      for (const variant of VARIANTS) {
        const runs = figures.get(variant)!;
        console.log(
          `| ${label} | ${variant} | ${median(runs.map((figure) => figure.cpu)).toFixed(1)} | ${median(runs.map((figure) => figure.wall)).toFixed(1)} |`,
        );
      }
      await store.close();
    }
  } finally {
    client.disconnect();
    await redis.stop();
  }
}
