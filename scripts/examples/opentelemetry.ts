/**
 * vendor-throttle's OpenTelemetry spans and metrics, exported to the console: a tracer and a meter
 * provider registered as an application's set-up does (the Node SDK does the same), undici's
 * instrumentation for fetch's HTTP spans, a local vendor, and a throttle of 2 calls per second.
 *
 *     npx tsx scripts/examples/opentelemetry.ts
 *
 * Prints three spans `schedule acme`, each the parent of its `GET` span (the third waited about a
 * second: `vendor_throttle.reason` 2/s), then the metrics. Needs no Redis (the in-process store).
 */
import { context, metrics, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici';
import { ConsoleMetricExporter, MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, ConsoleSpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Throttle } from '../../lib/index.js';

// The application's set-up.
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(new ConsoleSpanExporter())] });
trace.setGlobalTracerProvider(tracerProvider);
const reader = new PeriodicExportingMetricReader({ exporter: new ConsoleMetricExporter(), exportIntervalMillis: 60_000 });
const meterProvider = new MeterProvider({ readers: [reader] });
metrics.setGlobalMeterProvider(meterProvider);
const undici = new UndiciInstrumentation();
undici.setTracerProvider(tracerProvider);
undici.enable();

// A vendor on this machine.
const vendor = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}'));
await new Promise<void>((resolve) => vendor.listen(0, '127.0.0.1', resolve));
const base = `http://127.0.0.1:${(vendor.address() as AddressInfo).port}`;

const acme = new Throttle({ name: 'acme', rules: ['2/s'], keyLabel: () => 'example-user' });
const fetchAcme = acme.fetch({ key: (input) => new URL(String(input)).searchParams.get('user') ?? 'anonymous' });
try {
  for (let i = 0; i < 3; i++) await (await fetchAcme(`${base}/v1/orders?user=42`)).text();
} finally {
  await acme.close();
  await new Promise((resolve) => vendor.close(resolve));
  undici.disable();
  await meterProvider.shutdown();
  await tracerProvider.shutdown();
}
