/**
 * One soak worker process (started by scripts/soak/run.ts):
 *
 *     node --expose-gc --import tsx scripts/soak/worker.ts '<json SoakWorkerConfig>'
 *
 * Warms up (one call), collects garbage and reports its heap (`ready`), waits for a line on stdin,
 * then runs its share of the calls with at most `concurrency` at a time, sampling its heap. Once
 * done it waits for the keys to go idle, collects garbage and reports its heap again (`idle`),
 * closes the throttle and the store, quits its Redis client and lets its event loop end: it reports
 * what is still listed as active just before it exits (`closing`, from `beforeExit`), or, if
 * something keeps it alive for 5 s, what that is (and exits with 3). Every line on stdout is one
 * JSON SoakWorkerMessage.
 */
import { Redis } from 'ioredis';
import { RedisStore, Throttle } from '../../lib/index.js';
import type { SoakWorkerConfig, SoakWorkerMessage } from './types.js';
import { runAsChild, waitForLine } from '../support/child.js';
import type { RuleString } from '../../lib/rules.js';

const ERROR_SAMPLES = 5;
/** A worker whose event loop has not ended this long after close() and quit() reports what holds it and exits with 3. */
const STUCK_AFTER_MS = 5_000;

function print(message: SoakWorkerMessage): void {
  process.stdout.write(`${JSON.stringify(message)}\n`);
}

function collectGarbage(): void {
  if (typeof globalThis.gc !== 'function') throw new Error('run the soak worker with --expose-gc');
  // Two passes: the first may only queue finalizers.
  globalThis.gc();
  globalThis.gc();
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function runWorker(config: SoakWorkerConfig): Promise<void> {
  const redis = new Redis(config.redisUrl);
  const store = new RedisStore(redis, { prefix: config.prefix });
  const throttle = new Throttle({ name: config.name, rules: config.rules as readonly RuleString[], store, mode: config.mode, maxHoldMs: config.maxHoldMs });
  const keyOf = (call: number): string => `user-${Math.floor(call / config.callsPerKey)}`;
  // What the throttle said along the way (re-bookings, late starts, failed background writes), by kind.
  const notes: Record<string, number> = {};
  throttle.on('debug', ({ message }) => {
    const kind = message.replace(/\d+/g, 'N');
    notes[kind] = (notes[kind] ?? 0) + 1;
  });
  const vendorCall = async (key: string): Promise<void> => {
    const url = new URL(config.vendorUrl);
    url.searchParams.set('user', key);
    const response = await fetch(url);
    await response.text();
    if (!response.ok) throw new Error(`vendor answered ${response.status}`);
  };
  try {
    // Warm-up: a connection to each server, fetch loaded, the scripts sent once. Not counted by the vendor.
    await (await fetch(new URL('/healthz', config.vendorUrl))).text();
    await throttle.schedule(`warm-up-${config.index}`, () => redis.ping());
    collectGarbage();
    print({ type: 'ready', heapUsed: process.memoryUsage().heapUsed });
    await waitForLine();

    let heapPeak = 0;
    const sampler = setInterval(() => {
      heapPeak = Math.max(heapPeak, process.memoryUsage().heapUsed);
    }, 100);
    let done = 0;
    let errors = 0;
    const errorSamples: string[] = [];
    const progress = setInterval(() => print({ type: 'progress', done }), 1000);
    const started = performance.now();
    let next = config.index;
    const runner = async (): Promise<void> => {
      for (; next < config.calls;) {
        const call = next;
        next += config.workers;
        const key = keyOf(call);
        try {
          await throttle.schedule(key, () => vendorCall(key));
        } catch (error) {
          errors += 1;
          if (errorSamples.length < ERROR_SAMPLES) errorSamples.push(error instanceof Error ? `${error.name}: ${error.message}` : String(error));
        }
        done += 1;
      }
    };
    await Promise.all(Array.from({ length: config.concurrency }, runner));
    const elapsedMs = performance.now() - started;
    clearInterval(progress);
    clearInterval(sampler);
    heapPeak = Math.max(heapPeak, process.memoryUsage().heapUsed);
    print({ type: 'done', calls: done, errors, errorSamples, heapPeak, elapsedMs, notes });

    await sleep(config.idleMs);
    collectGarbage();
    print({ type: 'idle', heapUsed: process.memoryUsage().heapUsed, stats: throttle.stats });
  } finally {
    await throttle.close();
    await store.close();
    await redis.quit();
  }
  // Nothing else is done: the event loop should now end by itself. Just before it does, report what
  // is still listed; if something keeps it alive instead, report that after a while and exit with 3.
  const stuck = setTimeout(() => {
    print({ type: 'closing', activeResources: process.getActiveResourcesInfo(), stuck: true });
    process.exit(3);
  }, STUCK_AFTER_MS);
  stuck.unref();
  process.once('beforeExit', () => {
    clearTimeout(stuck);
    print({ type: 'closing', activeResources: process.getActiveResourcesInfo(), stuck: false });
  });
}

// No top-level await: spec files import this module (see runAsChild).
runAsChild<SoakWorkerConfig>(import.meta.url, 'soak worker', runWorker);
