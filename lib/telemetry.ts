/**
 * OpenTelemetry traces and metrics of a throttle's calls, through the user's own
 * `@opentelemetry/api` (an optional peer dependency, so that the application and this library
 * share one copy: a second copy would record into a no-op provider).
 *
 * Nothing is imported and nothing is recorded until a tracer or meter provider is registered: each
 * call reads the API's global registry (one property of `globalThis`), and only once a provider is
 * there is the API loaded (a dynamic `import()`, once). The types below describe the part of the API
 * used here, so that the published types do not require it.
 *
 * Names follow the shape of the one stable rate-limiting convention (ASP.NET Core's
 * `aspnetcore.rate_limiting.*`): calls by outcome, calls queued, time in queue, calls in flight.
 * No attribute carries the user key: `keyLabel` may give one.
 */
import { CALL_FAILED } from './call-life.js';
import { CallTimeoutError, QueueFullError, RateLimitedError, StoreUnavailableError, type WaitReason } from './errors.js';
import type { LearnedLimit } from './learning.js';
import type { ThrottleEvents } from './options.js';
import { formatRule } from './rule-label.js';

/** Where `@opentelemetry/api` 1.x registers its globals (its `internal/global-utils`). */
const GLOBAL = Symbol.for('opentelemetry.js.api.1');
const SCOPE = 'vendor-throttle';

type Attributes = Record<string, string | number | boolean>;

interface SpanLike {
  setAttribute(key: string, value: string | number | boolean): unknown;
  addEvent(name: string, attributes?: Attributes): unknown;
  setStatus(status: { code: number; message?: string }): unknown;
  recordException(exception: unknown): unknown;
  isRecording(): boolean;
  end(): void;
}

interface TracerLike {
  startSpan(name: string, options: { kind: number; attributes: Attributes }, context: unknown): SpanLike;
}

interface ObservableResultLike {
  observe(value: number, attributes: Attributes): void;
}

interface MeterLike {
  createCounter(name: string, options: { description: string; unit: string }): { add(value: number, attributes: Attributes): void };
  createUpDownCounter(name: string, options: { description: string; unit: string }): { add(value: number, attributes: Attributes): void };
  createHistogram(
    name: string,
    options: { description: string; unit: string; advice?: { explicitBucketBoundaries: number[] } },
  ): { record(value: number, attributes: Attributes): void };
  createObservableGauge(name: string, options: { description: string; unit: string }): { addCallback(callback: (result: ObservableResultLike) => void): void };
  createObservableUpDownCounter(
    name: string,
    options: { description: string; unit: string },
  ): { addCallback(callback: (result: ObservableResultLike) => void): void };
}

/** The part of `@opentelemetry/api` used here. */
interface OtelApi {
  readonly trace: {
    getTracer(name: string): TracerLike;
    setSpan(context: unknown, span: SpanLike): unknown;
    getActiveSpan(): SpanLike | undefined;
  };
  readonly context: { active(): unknown; with<T>(context: unknown, fn: () => T): T };
  readonly metrics: { getMeter(name: string): MeterLike };
  readonly SpanKind: { readonly INTERNAL: number };
  readonly SpanStatusCode: { readonly ERROR: number };
}

/** What the API's global registry holds: the providers registered, by kind. */
interface Registry {
  readonly trace?: object;
  readonly metrics?: object;
}

/** How a call ended, as the `vendor_throttle.outcome` attribute says it. */
export type CallOutcome = 'completed' | 'failed' | 'timed_out' | 'refused' | 'cancelled' | 'store_error';

/** Seconds: 1 ms to 10 min, as the Prometheus histograms. */
const SECONDS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];

/** Named in a variable: a bundler leaves the import of this optional peer to run time. */
const API_PACKAGE = '@opentelemetry/api';

let api: OtelApi | undefined;
let loading: Promise<void> | undefined;
/** The API could not be loaded (a registry filled by another copy, the package not installed): nothing is recorded. */
let unavailable = false;
/** Why it could not, said once per throttle as a `debug` event. */
let importError: unknown;

/** The API's global registry, where providers are registered. */
function registry(): Registry | undefined {
  return (globalThis as { [GLOBAL]?: Registry })[GLOBAL];
}

/**
 * Starts loading the API when a provider is registered and it is not loaded yet; resolves once it
 * is (or failed to load: then nothing is recorded, and nothing is awaited again).
 */
export function telemetryReady(): Promise<void> | undefined {
  if (api !== undefined || unavailable) return undefined;
  const registered = registry();
  if (registered?.trace === undefined && registered?.metrics === undefined) return undefined;
  loading ??= (import(API_PACKAGE) as Promise<unknown>).then(
    (module) => {
      const loaded = module as OtelApi & { default?: OtelApi };
      api = typeof loaded.trace === 'object' ? loaded : loaded.default;
      if (api === undefined) {
        unavailable = true;
        importError = new Error(`${API_PACKAGE} loaded without its trace API`);
      }
    },
    (error: unknown) => {
      unavailable = true;
      importError = error;
    },
  );
  return loading;
}

/**
 * Runs `record`, telemetry's own work: an error of the SDK (or of an exporter it calls at once) is
 * never a call's error. It is said once, as a `debug` event of the throttle.
 */
function guarded(record: () => void, failed: (error: unknown) => void): void {
  try {
    record();
  } catch (error) {
    failed(error);
  }
}

/** The instruments of one meter provider. */
interface Instruments {
  readonly provider: object;
  readonly calls: { add(value: number, attributes: Attributes): void };
  readonly slots: { add(value: number, attributes: Attributes): void };
  readonly timeInQueue: { record(value: number, attributes: Attributes): void };
  readonly duration: { record(value: number, attributes: Attributes): void };
  readonly delayed: { add(value: number, attributes: Attributes): void };
  readonly pauses: { add(value: number, attributes: Attributes): void };
  readonly retries: { add(value: number, attributes: Attributes): void };
  readonly storeErrors: { add(value: number, attributes: Attributes): void };
  readonly storeWarnings: { add(value: number, attributes: Attributes): void };
}

/**
 * Per throttle recorded through a meter, what the observable instruments read: its name, calls,
 * hold and the limits its keys learned last. Held weakly: a throttle nobody closed is still collected.
 */
interface Observed {
  readonly name: string;
  readonly maxHoldMs: number;
  /** Calls of the throttle waiting for their slot, and running. */
  waiting(): number;
  running(): number;
  readonly learned: Map<string, { readonly limit: number; readonly windowMs: number; readonly source: string; readonly lapseAt: number }>;
}

const observed = new Set<WeakRef<Observed>>();

/** The throttles the observable instruments read (those collected meanwhile leave the set). */
function* live(): Generator<Observed> {
  for (const ref of observed) {
    const source = ref.deref();
    if (source === undefined) observed.delete(ref);
    else yield source;
  }
}
let instruments: Instruments | undefined;
let tracer: { readonly provider: object; readonly tracer: TracerLike } | undefined;

/** The instruments of the meter provider registered now (made again when it changes). */
function instrumentsOf(otel: OtelApi, provider: object): Instruments {
  if (instruments?.provider === provider) return instruments;
  const meter = otel.metrics.getMeter(SCOPE);
  const counter = (name: string, description: string, unit: string) => meter.createCounter(name, { description, unit });
  const seconds = { unit: 's', advice: { explicitBucketBoundaries: SECONDS } };
  instruments = {
    provider,
    calls: counter('vendor_throttle.calls', 'Calls that ended, by outcome (completed, failed, timed_out, refused, cancelled, store_error).', '{call}'),
    slots: counter('vendor_throttle.slots', 'Slots taken by calls that started (the sum of their cost).', '{slot}'),
    timeInQueue: meter.createHistogram('vendor_throttle.call.time_in_queue', {
      description: 'Time from schedule() to the start of fn, or to the end of a call that never started, by outcome.',
      ...seconds,
    }),
    duration: meter.createHistogram('vendor_throttle.call.duration', { description: "Time from the start of a call's fn to its end, by outcome.", ...seconds }),
    delayed: counter('vendor_throttle.delayed_calls', 'Calls that booked a later slot and slept until it, by what set the start.', '{call}'),
    pauses: counter('vendor_throttle.pauses', 'Keys paused for every process sharing the store (vendor 429s, pause()), by source.', '{pause}'),
    retries: counter('vendor_throttle.retries', 'Requests an HTTP adapter sent again after the vendor refused them, by client and status.', '{request}'),
    storeErrors: counter('vendor_throttle.store_errors', 'Store failures seen by calls, by the onStoreError policy applied.', '{error}'),
    storeWarnings: counter('vendor_throttle.store_warnings', 'What the store said while it happened (Redis evicting keys, …), by kind.', '{warning}'),
  };
  // Read from each throttle when collected: nothing per call.
  meter
    .createObservableUpDownCounter('vendor_throttle.queued_calls', {
      description: 'Calls of this process waiting for their slot: in line, asking the store, or sleeping until their start.',
      unit: '{call}',
    })
    .addCallback((result) => {
      for (const source of live()) result.observe(source.waiting(), { 'vendor_throttle.name': source.name });
    });
  meter
    .createObservableUpDownCounter('vendor_throttle.active_calls', { description: 'Calls of this process whose fn is running.', unit: '{call}' })
    .addCallback((result) => {
      for (const source of live()) result.observe(source.running(), { 'vendor_throttle.name': source.name });
    });
  meter
    .createObservableGauge('vendor_throttle.hold', { description: 'How long after its start an unfinished call counts as on its way (maxHoldMs).', unit: 's' })
    .addCallback((result) => {
      for (const source of live()) result.observe(source.maxHoldMs / 1000, { 'vendor_throttle.name': source.name });
    });
  meter
    .createObservableGauge('vendor_throttle.learned_limit', {
      description: 'The limit a key of this process learned last from its vendor, by the window it limits and its source, until it lapses.',
      unit: '{call}',
    })
    .addCallback((result) => {
      const now = performance.now();
      for (const source of live()) {
        for (const [id, entry] of source.learned) {
          if (entry.lapseAt <= now) source.learned.delete(id);
          else
            result.observe(entry.limit, {
              'vendor_throttle.name': source.name,
              'vendor_throttle.window': windowOf(entry.windowMs),
              'vendor_throttle.learned.source': entry.source,
            });
        }
      }
    });
  return instruments;
}

/** `1s`, `5min`: a window as the rules write it. */
function windowOf(windowMs: number): string {
  return formatRule({ limit: 1, windowMs }).slice(2);
}

/** `30/min`, `paused`, `learned`, `recovering`, `booked`: what set a call's start or refused it. */
function reasonText(reason: WaitReason): string {
  return typeof reason === 'object' ? formatRule(reason) : reason;
}

/** How a call that did not complete ended. */
function outcomeOf(error: unknown, ran: boolean): CallOutcome {
  if (ran) return error instanceof CallTimeoutError ? 'timed_out' : 'failed';
  if (error instanceof RateLimitedError || error instanceof QueueFullError) return 'refused';
  if (error instanceof StoreUnavailableError) return 'store_error';
  return 'cancelled';
}

/** What a throttle tells its telemetry. */
export interface TelemetryOptions {
  readonly name: string;
  readonly maxHoldMs: number;
  /** Calls waiting for their slot, and calls running (`throttle.size`, `throttle.pending`). */
  waiting(): number;
  running(): number;
  /** The `vendor_throttle.key` attribute of a key's spans; none: no key attribute. */
  readonly keyLabel: ((key: string) => string | undefined) | undefined;
  /** Told the first time recording fails (an SDK that throws): a `debug` event. */
  failed(error: unknown): void;
}

/** A throttle's telemetry: spans of its calls and the metrics, while a provider is registered. */
export class Telemetry {
  readonly #options: TelemetryOptions;
  readonly #base: Attributes;
  readonly #observed: Observed;
  /** This throttle among those the observable instruments read, once a meter provider recorded it. */
  #ref: WeakRef<Observed> | undefined;
  #said = false;
  /** Recording failed: said once, as a `debug` event; never the call's error. */
  readonly failed = (error: unknown): void => {
    if (this.#said) return;
    this.#said = true;
    this.#options.failed(error);
  };

  constructor(options: TelemetryOptions) {
    this.#options = options;
    this.#base = { 'vendor_throttle.name': options.name };
    this.#observed = { name: options.name, maxHoldMs: options.maxHoldMs, waiting: options.waiting, running: options.running, learned: new Map() };
  }

  /** Stops the observable instruments reading this throttle. */
  close(): void {
    if (this.#ref !== undefined) observed.delete(this.#ref);
    this.#ref = undefined;
  }

  /** The instruments of the meter provider registered now, this throttle read by the observable ones. */
  #instruments(otel: OtelApi, meters: object): Instruments {
    const made = instrumentsOf(otel, meters);
    if (this.#ref === undefined) observed.add((this.#ref = new WeakRef(this.#observed)));
    return made;
  }

  /**
   * The trace of a call entering `schedule()`, or undefined when no provider is registered (then
   * nothing is recorded). `retry`: an HTTP adapter's retry after the vendor refused the request.
   */
  begin(key: string, cost: number, retry: boolean): CallTrace | undefined {
    const otel = api;
    if (otel === undefined) {
      // A provider is registered, but its API cannot be loaded here (not installed beside this package).
      if (unavailable) this.failed(importError);
      return undefined;
    }
    const registered = registry();
    const traces = registered?.trace;
    const meters = registered?.metrics;
    if (traces === undefined && meters === undefined) return undefined;
    try {
      let span: SpanLike | undefined;
      const parent = otel.context.active();
      if (traces !== undefined) {
        if (tracer?.provider !== traces) tracer = { provider: traces, tracer: otel.trace.getTracer(SCOPE) };
        const attributes: Attributes = { ...this.#base, 'vendor_throttle.cost': cost, 'vendor_throttle.retry': retry };
        const label = this.#label(key);
        if (label !== undefined) attributes['vendor_throttle.key'] = label;
        span = tracer.tracer.startSpan(`schedule ${this.#options.name}`, { kind: otel.SpanKind.INTERNAL, attributes }, parent);
      }
      return new CallTrace(otel, span, parent, meters === undefined ? undefined : this.#instruments(otel, meters), this.#base, cost, this.failed);
    } catch (error) {
      this.failed(error);
      return undefined;
    }
  }

  /** The key's label, if `keyLabel` gives a string (one that throws or gives anything else: none). */
  #label(key: string): string | undefined {
    try {
      const label = this.#options.keyLabel?.(key);
      return typeof label === 'string' ? label : undefined;
    } catch {
      return undefined;
    }
  }

  /** An event of the throttle: counted, and a pause or a learned limit noted on the span in whose context it happened. */
  heard<E extends keyof ThrottleEvents>(event: E, payload: ThrottleEvents[E][0]): void {
    const otel = api;
    if (
      otel === undefined ||
      (event !== 'paused' && event !== 'learned' && event !== 'delayed' && event !== 'retried' && event !== 'storeError' && event !== 'storeWarning')
    )
      return;
    guarded(() => this.#heard(otel, event, payload), this.failed);
  }

  #heard<E extends keyof ThrottleEvents>(otel: OtelApi, event: E, payload: ThrottleEvents[E][0]): void {
    const meters = registry()?.metrics;
    const counted = meters === undefined ? undefined : this.#instruments(otel, meters);
    if (event === 'paused') {
      const { ms, source } = payload as ThrottleEvents['paused'][0];
      counted?.pauses.add(1, { ...this.#base, 'vendor_throttle.pause.source': source });
      note(otel, 'vendor_throttle.paused', { 'vendor_throttle.pause.ms': ms, 'vendor_throttle.pause.source': source });
    } else if (event === 'learned') {
      const { learned } = payload as ThrottleEvents['learned'][0];
      this.#learned(learned);
      note(otel, 'vendor_throttle.learned', { 'vendor_throttle.learned.limits': learned.map(describeLearned).join(', ') || 'none' });
    } else if (counted === undefined) {
      return;
    } else if (event === 'delayed') {
      counted.delayed.add(1, { ...this.#base, 'vendor_throttle.reason': reasonText((payload as ThrottleEvents['delayed'][0]).reason) });
    } else if (event === 'retried') {
      const { client, status } = payload as ThrottleEvents['retried'][0];
      counted.retries.add(1, { ...this.#base, 'vendor_throttle.client': client, 'http.response.status_code': status });
    } else if (event === 'storeError') {
      counted.storeErrors.add(1, { ...this.#base, 'vendor_throttle.store_error.policy': (payload as ThrottleEvents['storeError'][0]).policy });
    } else {
      counted.storeWarnings.add(1, { ...this.#base, 'vendor_throttle.store_warning.kind': (payload as ThrottleEvents['storeWarning'][0]).kind });
    }
  }

  #learned(learned: readonly LearnedLimit[]): void {
    const now = performance.now();
    for (const { limit, windowMs, source, lapsesInMs } of learned) {
      this.#observed.learned.set(`${windowMs}:${source}`, { limit, windowMs, source, lapseAt: now + lapsesInMs });
    }
  }
}

function describeLearned({ limit, windowMs, source }: LearnedLimit): string {
  return `${limit}/${windowOf(windowMs)} (${source})`;
}

/** Adds an event to the span active where the event happened, if it still records. */
function note(otel: OtelApi, name: string, attributes: Attributes): void {
  const span = otel.trace.getActiveSpan();
  if (span?.isRecording() === true) span.addEvent(name, attributes);
}

/**
 * One call's span (the wait and the call; `fn` runs in its context, so the vendor's HTTP span is
 * its child) and its metrics. Nothing it does throws: a failure of the SDK is `failed`, said once.
 */
export class CallTrace {
  readonly #otel: OtelApi;
  readonly #span: SpanLike | undefined;
  readonly #parent: unknown;
  readonly #instruments: Instruments | undefined;
  readonly #base: Attributes;
  readonly #cost: number;
  readonly #failed: (error: unknown) => void;
  readonly #queuedAt = performance.now();
  #startedAt = 0;
  #waitedMs = 0;
  #reason: string | undefined;

  constructor(
    otel: OtelApi,
    span: SpanLike | undefined,
    parent: unknown,
    instruments: Instruments | undefined,
    base: Attributes,
    cost: number,
    failed: (error: unknown) => void,
  ) {
    this.#otel = otel;
    this.#span = span;
    this.#parent = parent;
    this.#instruments = instruments;
    this.#base = base;
    this.#cost = cost;
    this.#failed = failed;
  }

  /** The call got its slot; `reason`: what set its start, when it waited for one. */
  started(reason: WaitReason | undefined): void {
    this.#startedAt = performance.now();
    this.#waitedMs = this.#startedAt - this.#queuedAt;
    guarded(() => {
      if (reason !== undefined) this.#reason = reasonText(reason);
      this.#instruments?.slots.add(this.#cost, this.#base);
    }, this.#failed);
  }

  /** Runs `fn` in the span's context (once, whatever the SDK does). */
  run<T>(fn: () => T): T {
    if (this.#span === undefined) return fn();
    let called = false;
    try {
      const context = this.#otel.trace.setSpan(this.#parent, this.#span);
      return this.#otel.context.with(context, () => {
        called = true;
        return fn();
      });
    } catch (error) {
      if (called) throw error;
      this.#failed(error);
      return fn();
    }
  }

  /** The call got no slot: recorded, and its span ended. */
  notStarted(error: unknown): void {
    this.#waitedMs = performance.now() - this.#queuedAt;
    guarded(() => {
      if (error instanceof RateLimitedError) this.#reason = error.rule === undefined ? error.reason : formatRule(error.rule);
      else if (error instanceof QueueFullError) this.#reason = 'queue_full';
      this.#record(outcomeOf(error, false), error, false);
    }, this.#failed);
    this.end();
  }

  /** `fn` resolved with `value` (an HTTP adapter's failed request resolves with it too): recorded; `end()` ends the span. */
  ran(value: unknown): void {
    guarded(() => {
      const failure = typeof value === 'object' && value !== null && CALL_FAILED in value ? (value as { [CALL_FAILED]: unknown })[CALL_FAILED] : undefined;
      if (failure === undefined) this.#record('completed', undefined, true);
      else this.#record('failed', failure, true);
    }, this.#failed);
  }

  /** `fn` threw, or outlasted timeoutMs: recorded; `end()` ends the span. */
  threw(error: unknown): void {
    guarded(() => this.#record(outcomeOf(error, true), error, true), this.#failed);
  }

  /** Ends the span. */
  end(): void {
    if (this.#span !== undefined) guarded(() => this.#span!.end(), this.#failed);
  }

  #record(outcome: CallOutcome, error: unknown, ran: boolean): void {
    const attributes: Attributes = { ...this.#base, 'vendor_throttle.outcome': outcome };
    if (this.#reason !== undefined) attributes['vendor_throttle.reason'] = this.#reason;
    if (this.#instruments !== undefined) {
      this.#instruments.calls.add(1, attributes);
      this.#instruments.timeInQueue.record(this.#waitedMs / 1000, attributes);
      if (ran) this.#instruments.duration.record((performance.now() - this.#startedAt) / 1000, attributes);
    }
    const span = this.#span;
    if (span === undefined) return;
    span.setAttribute('vendor_throttle.outcome', outcome);
    span.setAttribute('vendor_throttle.wait_ms', Math.round(this.#waitedMs * 1000) / 1000);
    if (this.#reason !== undefined) span.setAttribute('vendor_throttle.reason', this.#reason);
    if (outcome !== 'completed') {
      if (error !== undefined) span.recordException(error instanceof Error ? error : String(error));
      span.setStatus({ code: this.#otel.SpanStatusCode.ERROR, message: error instanceof Error ? error.message : outcome });
    }
  }
}
