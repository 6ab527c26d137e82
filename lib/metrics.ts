/**
 * Optional Prometheus metrics for a throttle, through the user's own `prom-client`.
 *
 * prom-client is an optional peer dependency: nothing here imports it at load time, and the types
 * below describe only the small part of it this module uses, so that the published types do not
 * require it. Pass the module (`import * as client from 'prom-client'`), or load it with
 * {@link loadPromClient}.
 *
 * Labels are the throttle's name and small fixed sets (reason, rule, source, policy, state), never
 * the user key: one series per key would grow without bound.
 */
import { ThrottleConfigError } from './errors.js';
import { checkKnown } from './validate.js';
import { formatRule } from './rules.js';
import type { ThrottleEvents, ThrottleStats } from './options.js';

/** Label names and values, as prom-client takes them. */
export type PromLabels = Readonly<Record<string, string>>;

/** What this module passes to prom-client's metric constructors. */
export interface PromMetricConfig {
  readonly name: string;
  readonly help: string;
  readonly labelNames: readonly string[];
  /** Always empty: metrics are registered with `registry.registerMetric()`. */
  readonly registers: never[];
}

/** The part of a prom-client `Counter` used here. */
export interface PromCounterLike {
  inc(labels: PromLabels, value?: number): void;
}

/** The part of a prom-client `Histogram` used here. */
export interface PromHistogramLike {
  observe(labels: PromLabels, value: number): void;
}

/** The part of a prom-client `Gauge` used here. */
export interface PromGaugeLike {
  set(labels: PromLabels, value: number): void;
  reset(): void;
}

/** The part of a prom-client `Registry` used here (`client.register`, or `new client.Registry()`). */
export interface PromRegistryLike {
  getSingleMetric(name: string): unknown;
  registerMetric(metric: PromCounterLike | PromHistogramLike | PromGaugeLike): void;
  /** Every metric of the registry in the text format, for a `/metrics` endpoint. */
  metrics(): Promise<string>;
  /** The `Content-Type` to answer `metrics()` with. */
  readonly contentType: string;
}

/**
 * The part of the prom-client module used here: `import * as client from 'prom-client'`, or what
 * {@link loadPromClient} resolves to. Declared here so that the published types do not require
 * prom-client (an optional peer dependency) to be installed.
 */
export interface PromClientLike {
  readonly register: PromRegistryLike;
  readonly Registry: new () => PromRegistryLike;
  readonly Counter: new (config: PromMetricConfig) => PromCounterLike;
  readonly Histogram: new (config: PromMetricConfig & { readonly buckets: number[] }) => PromHistogramLike;
  readonly Gauge: new (config: PromMetricConfig & { readonly collect: () => void }) => PromGaugeLike;
}

/** What the metrics read from a throttle: a `Throttle`, or anything shaped like one. */
export interface MetricsSource {
  readonly name: string;
  readonly stats: ThrottleStats;
  readonly maxHoldMs: number;
  on<E extends keyof ThrottleEvents>(event: E, listener: (...args: ThrottleEvents[E]) => void): unknown;
  off<E extends keyof ThrottleEvents>(event: E, listener: (...args: ThrottleEvents[E]) => void): unknown;
}

export interface ThrottleMetricsOptions {
  /** The prom-client module: `import * as client from 'prom-client'`, or `await loadPromClient()`. */
  readonly client: PromClientLike;
  /**
   * Where the metrics are registered. Several throttles may share one registry: they share the
   * metrics, each with its own `throttle` label.
   * @default client.register (prom-client's global registry)
   */
  readonly registry?: PromRegistryLike;
  /**
   * Start of every metric name: letters, digits, `_` and `:`, not starting with a digit.
   * @default 'vendor_throttle_'
   */
  readonly prefix?: string;
  /**
   * Upper bounds of the `wait_seconds` and `call_duration_seconds` histogram buckets, in seconds. Only used by the first throttle
   * that registers the metrics on a registry (with this prefix).
   * @default DEFAULT_WAIT_BUCKETS (1 ms to 10 min)
   */
  readonly buckets?: readonly number[];
}

/** The metric names (with the prefix) a {@link ThrottleMetrics} writes to. */
export interface ThrottleMetricNames {
  readonly granted: string;
  readonly grantedCost: string;
  readonly delayed: string;
  readonly refused: string;
  readonly pauses: string;
  readonly storeErrors: string;
  readonly storeWarnings: string;
  readonly completed: string;
  readonly failed: string;
  readonly retried: string;
  readonly wait: string;
  readonly duration: string;
  readonly waiting: string;
  readonly hold: string;
  readonly learned: string;
}

/** What {@link throttleMetrics} returns. */
export interface ThrottleMetrics {
  /** Metric names, prefix included. */
  readonly names: ThrottleMetricNames;
  /**
   * Stops counting this throttle's events and drops its gauge series. Counters and the histogram
   * keep the totals counted so far (Prometheus expects them never to go down). Idempotent.
   */
  detach(): void;
}

/** `wait_seconds` buckets: 1 ms to 10 minutes. */
export const DEFAULT_WAIT_BUCKETS: readonly number[] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];

const METRIC_PREFIX = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;

interface Metrics {
  readonly granted: PromCounterLike;
  readonly grantedCost: PromCounterLike;
  readonly delayed: PromCounterLike;
  readonly refused: PromCounterLike;
  readonly pauses: PromCounterLike;
  readonly storeErrors: PromCounterLike;
  readonly storeWarnings: PromCounterLike;
  readonly completed: PromCounterLike;
  readonly failed: PromCounterLike;
  readonly retried: PromCounterLike;
  readonly wait: PromHistogramLike;
  readonly duration: PromHistogramLike;
  readonly waiting: PromGaugeLike;
  readonly hold: PromGaugeLike;
  readonly learned: PromGaugeLike;
}

/** Per throttle, the limits its keys learned last, by window and source (`learned` events), until they lapse (`performance.now()`). */
const lastLearned = new WeakMap<
  MetricsSource,
  Map<string, { readonly limit: number; readonly windowMs: number; readonly source: string; readonly lapseAt: number }>
>();

/** The metrics of one registry and prefix, and the throttles attached to them. */
interface Shared {
  readonly metrics: Metrics;
  readonly sources: Set<MetricsSource>;
}

/** Per registry, per prefix: metrics are registered once and shared by every throttle on them. */
const registries = new WeakMap<object, Map<string, Shared>>();

/**
 * Counts a throttle's events in Prometheus metrics (see docs/metrics.md for each metric):
 *
 * ```ts
 * import * as client from 'prom-client';
 * const metrics = throttleMetrics(throttle, { client });
 * // later: metrics.detach();
 * ```
 *
 * Throws `ThrottleConfigError` if `client` does not look like prom-client, if the prefix is not a valid metric
 * name start, if this throttle already has metrics on that registry and prefix, or if a metric of
 * the same name was registered there by something else.
 */
export function throttleMetrics(throttle: MetricsSource, options: ThrottleMetricsOptions): ThrottleMetrics {
  if (options === null || typeof options !== 'object') {
    throw new ThrottleConfigError(`Expected throttleMetrics options to be an object, got ${String(options)}`, 'options');
  }
  checkKnown('throttleMetrics', options, ['client', 'registry', 'prefix', 'buckets']);
  const { client } = options;
  if (
    client === null ||
    typeof client !== 'object' ||
    typeof client.Counter !== 'function' ||
    typeof client.Histogram !== 'function' ||
    typeof client.Gauge !== 'function'
  ) {
    throw new ThrottleConfigError("Expected options.client to be the prom-client module (import * as client from 'prom-client')", 'client');
  }
  const registry = options.registry ?? client.register;
  if (registry === null || typeof registry !== 'object' || typeof registry.getSingleMetric !== 'function' || typeof registry.registerMetric !== 'function') {
    throw new ThrottleConfigError('Expected options.registry to be a prom-client Registry', 'registry');
  }
  const prefix = options.prefix ?? 'vendor_throttle_';
  if (typeof prefix !== 'string' || !METRIC_PREFIX.test(prefix)) {
    throw new ThrottleConfigError(`Expected prefix to be letters, digits, '_' or ':', not starting with a digit, got ${JSON.stringify(prefix)}`, 'prefix');
  }
  const names = metricNames(prefix);
  const shared = sharedMetrics(client, registry, prefix, options.buckets ?? DEFAULT_WAIT_BUCKETS);
  if (shared.sources.has(throttle)) {
    throw new ThrottleConfigError(`Throttle '${throttle.name}' already has metrics on this registry with prefix '${prefix}': detach them first`, 'prefix');
  }
  shared.sources.add(throttle);

  const { metrics } = shared;
  const name = throttle.name;
  const unsubscribe = [
    subscribe(throttle, 'granted', ({ cost, waitedMs }) => {
      metrics.granted.inc({ throttle: name });
      metrics.grantedCost.inc({ throttle: name }, cost);
      metrics.wait.observe({ throttle: name }, waitedMs / 1000);
    }),
    subscribe(throttle, 'delayed', ({ reason }) => {
      metrics.delayed.inc({ throttle: name, ...reasonLabels(reason) });
    }),
    subscribe(throttle, 'refused', ({ error }) => {
      // QueueFullError has no reason; a RateLimitedError says which rule was full, or why else.
      const labels = !('reason' in error) ? { reason: 'queue_full', rule: '' } : reasonLabels(error.rule ?? error.reason);
      metrics.refused.inc({ throttle: name, ...labels });
    }),
    subscribe(throttle, 'paused', ({ source }) => {
      metrics.pauses.inc({ throttle: name, source });
    }),
    subscribe(throttle, 'storeError', ({ policy }) => {
      metrics.storeErrors.inc({ throttle: name, policy });
    }),
    subscribe(throttle, 'storeWarning', ({ kind }) => {
      metrics.storeWarnings.inc({ throttle: name, kind });
    }),
    subscribe(throttle, 'completed', ({ durationMs }) => {
      metrics.completed.inc({ throttle: name });
      metrics.duration.observe({ throttle: name, outcome: 'completed' }, durationMs / 1000);
    }),
    subscribe(throttle, 'failed', ({ durationMs, ran }) => {
      // Calls that ran: the vendor's failures (a call that never ran is refused, aborted or a store error).
      if (!ran) return;
      metrics.failed.inc({ throttle: name });
      metrics.duration.observe({ throttle: name, outcome: 'failed' }, durationMs / 1000);
    }),
    subscribe(throttle, 'retried', ({ client, status }) => {
      metrics.retried.inc({ throttle: name, client, status: String(status) });
    }),
    subscribe(throttle, 'learned', ({ learned }) => {
      let last = lastLearned.get(throttle);
      if (!last) lastLearned.set(throttle, (last = new Map()));
      const now = performance.now();
      for (const { limit, windowMs, source, lapsesInMs } of learned) last.set(`${windowMs}:${source}`, { limit, windowMs, source, lapseAt: now + lapsesInMs });
    }),
  ];

  let attached = true;
  return {
    names,
    detach() {
      if (!attached) return;
      attached = false;
      for (const off of unsubscribe) off();
      shared.sources.delete(throttle);
      lastLearned.delete(throttle);
    },
  };
}

/**
 * Loads prom-client with a dynamic `import()`, for code that does not import it itself. Rejects
 * with an `Error` saying how to install it when it is missing.
 */
export async function loadPromClient(): Promise<PromClientLike> {
  let loaded: unknown;
  try {
    loaded = await import('prom-client');
  } catch (error) {
    throw new Error('Prometheus metrics need the prom-client package: npm install prom-client', { cause: error });
  }
  // A CommonJS module: its exports are the named exports, and `default` too.
  const module = loaded as PromClientLike & { default?: PromClientLike };
  return typeof module.Counter === 'function' ? module : module.default!;
}

/** Adds `listener`; returns the function that removes it. */
function subscribe<E extends keyof ThrottleEvents>(source: MetricsSource, event: E, listener: (...args: ThrottleEvents[E]) => void): () => void {
  source.on(event, listener);
  return () => {
    source.off(event, listener);
  };
}

function metricNames(prefix: string): ThrottleMetricNames {
  return {
    granted: `${prefix}calls_granted_total`,
    grantedCost: `${prefix}slots_granted_total`,
    delayed: `${prefix}calls_delayed_total`,
    refused: `${prefix}calls_refused_total`,
    pauses: `${prefix}pauses_total`,
    storeErrors: `${prefix}store_errors_total`,
    storeWarnings: `${prefix}store_warnings_total`,
    completed: `${prefix}calls_completed_total`,
    failed: `${prefix}calls_failed_total`,
    retried: `${prefix}calls_retried_total`,
    wait: `${prefix}wait_seconds`,
    duration: `${prefix}call_duration_seconds`,
    waiting: `${prefix}waiting_calls`,
    hold: `${prefix}hold_seconds`,
    learned: `${prefix}learned_limit`,
  };
}

/** `reason` and `rule` labels of a delay or a refusal: a rule (`rule`, `30/min`), `paused` or `booked`. */
function reasonLabels(reason: ThrottleEvents['delayed'][0]['reason'] | 'rule'): { reason: string; rule: string } {
  return typeof reason === 'object' ? { reason: 'rule', rule: formatRule(reason) } : { reason, rule: '' };
}

/** The metrics of `registry` under these names: the ones registered by an earlier call, or new ones. */
function sharedMetrics(client: PromClientLike, registry: PromRegistryLike, prefix: string, buckets: readonly number[]): Shared {
  const names = metricNames(prefix);
  const kinds = Object.keys(names) as Array<keyof Metrics>;
  let byPrefix = registries.get(registry);
  if (!byPrefix) registries.set(registry, (byPrefix = new Map()));
  const known = byPrefix.get(prefix);
  // Still registered as created (a `registry.clear()` since then means: create them again).
  if (known && kinds.every((kind) => registry.getSingleMetric(names[kind]) === known.metrics[kind])) return known;
  const taken = kinds.find((kind) => registry.getSingleMetric(names[kind]) !== undefined);
  if (taken !== undefined) {
    throw new ThrottleConfigError(`Metric ${names[taken]} is already registered on this registry by other code: pass another prefix`, 'prefix');
  }

  const sources = new Set<MetricsSource>();
  const config = (name: string, help: string, labelNames: readonly string[]): PromMetricConfig => ({ name, help, labelNames, registers: [] });
  const byReason = ['throttle', 'reason', 'rule'];
  const metrics: Metrics = {
    granted: new client.Counter(config(names.granted, 'Calls that got their slot and started.', ['throttle'])),
    grantedCost: new client.Counter(config(names.grantedCost, 'Slots taken by calls that started (the sum of their cost).', ['throttle'])),
    delayed: new client.Counter(config(names.delayed, 'Calls that booked a later slot and slept until it, by what set the start.', byReason)),
    refused: new client.Counter(config(names.refused, 'Calls turned away without running (RateLimitedError, QueueFullError), by reason.', byReason)),
    pauses: new client.Counter(
      config(names.pauses, 'Keys paused for every process sharing the store (vendor 429s, pause()), by source.', ['throttle', 'source']),
    ),
    storeErrors: new client.Counter(config(names.storeErrors, 'Store failures seen by calls, by the onStoreError policy applied.', ['throttle', 'policy'])),
    storeWarnings: new client.Counter(
      config(
        names.storeWarnings,
        'What the store said while it happened (Redis evicting keys, evictions stopped, INFO denied, a background check failing), by kind.',
        ['throttle', 'kind'],
      ),
    ),
    completed: new client.Counter(config(names.completed, 'Calls whose fn resolved.', ['throttle'])),
    failed: new client.Counter(config(names.failed, 'Calls whose fn threw, rejected or outlasted timeoutMs.', ['throttle'])),
    retried: new client.Counter(
      config(names.retried, 'Requests an HTTP adapter sent again after the vendor refused them, by client and refused status.', [
        'throttle',
        'client',
        'status',
      ]),
    ),
    wait: new client.Histogram({
      ...config(names.wait, 'Time from schedule() to the start of the call (queued, booking and sleeping), in seconds.', ['throttle']),
      buckets: [...buckets],
    }),
    duration: new client.Histogram({
      ...config(names.duration, "Time from the start of a call's fn to its end, by outcome (completed, failed), in seconds.", ['throttle', 'outcome']),
      buckets: [...buckets],
    }),
    waiting: new client.Gauge({
      ...config(names.waiting, 'Calls of this process waiting: queued behind the head of their key, or sleeping until their slot.', ['throttle', 'state']),
      collect: () => collectWaiting(metrics.waiting, sources),
    }),
    hold: new client.Gauge({
      ...config(names.hold, 'How long after its start an unfinished call counts as on its way (throttle.maxHoldMs), in seconds.', ['throttle']),
      collect: () => collectHold(metrics.hold, sources),
    }),
    learned: new client.Gauge({
      ...config(
        names.learned,
        'The limit a key of this process learned last from its vendor (throttle.learn()), by the window it limits and its source, until it lapses.',
        ['throttle', 'window', 'source'],
      ),
      collect: () => collectLearned(metrics.learned, sources),
    }),
  };
  for (const metric of Object.values(metrics)) registry.registerMetric(metric);
  const created: Shared = { metrics, sources };
  byPrefix.set(prefix, created);
  return created;
}

/** Sets the `waiting_calls` series from each attached throttle's `stats` (throttles of one name add up). */
function collectWaiting(gauge: PromGaugeLike, sources: ReadonlySet<MetricsSource>): void {
  const totals = new Map<string, { queued: number; sleeping: number }>();
  for (const source of sources) {
    const { queued, sleeping } = source.stats;
    const total = totals.get(source.name) ?? { queued: 0, sleeping: 0 };
    totals.set(source.name, { queued: total.queued + queued, sleeping: total.sleeping + sleeping });
  }
  gauge.reset();
  for (const [throttle, { queued, sleeping }] of totals) {
    gauge.set({ throttle, state: 'queued' }, queued);
    gauge.set({ throttle, state: 'sleeping' }, sleeping);
  }
}

/** Sets the `hold_seconds` series (the longest maxHoldMs among throttles of one name). */
function collectLearned(gauge: PromGaugeLike, sources: ReadonlySet<MetricsSource>): void {
  const now = performance.now();
  const lowest = new Map<string, { labels: PromLabels; limit: number }>();
  for (const source of sources) {
    const last = lastLearned.get(source);
    for (const [id, entry] of last ?? []) {
      if (entry.lapseAt <= now) {
        last!.delete(id);
        continue;
      }
      const window = formatRule({ limit: 1, windowMs: entry.windowMs }).slice(2);
      const labelId = `${source.name}\n${window}\n${entry.source}`;
      const known = lowest.get(labelId);
      if (known === undefined || entry.limit < known.limit)
        lowest.set(labelId, { labels: { throttle: source.name, window, source: entry.source }, limit: entry.limit });
    }
  }
  gauge.reset();
  for (const { labels, limit } of lowest.values()) gauge.set(labels, limit);
}

function collectHold(gauge: PromGaugeLike, sources: ReadonlySet<MetricsSource>): void {
  const holds = new Map<string, number>();
  for (const source of sources) holds.set(source.name, Math.max(holds.get(source.name) ?? 0, source.maxHoldMs));
  gauge.reset();
  for (const [throttle, holdMs] of holds) gauge.set({ throttle }, holdMs / 1000);
}
