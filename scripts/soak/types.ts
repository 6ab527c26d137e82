import type { ThrottleMode } from '../../lib/index.js';

/** What one soak run does. */
export interface SoakOptions {
  /** Calls over all workers. */
  readonly calls: number;
  /** User keys; call i goes to key floor(i / (calls / keys)), so every key gets the same number of calls, from every worker in turn. */
  readonly keys: number;
  /** Worker processes sharing the Redis; they take turns on each key's calls. */
  readonly workers: number;
  /** The vendor's silent limit per user, and the throttle's rule: `limit` calls per `windowMs`. */
  readonly limit: number;
  readonly windowMs: number;
  readonly mode: ThrottleMode;
  /** Calls a worker has started and not finished (booking, sleeping or in flight) at most. */
  readonly concurrency: number;
  /** The throttle's `maxHoldMs`; a key's Redis data lives this much past its last call's estimate and window. */
  readonly maxHoldMs: number;
  /** Vendor latency per call, uniform. */
  readonly latencyMs: { readonly min: number; readonly max: number };
  /** Called every second or so while the calls run. */
  readonly onProgress?: (progress: SoakProgress) => void;
}

export interface SoakProgress {
  readonly elapsedMs: number;
  readonly done: number;
  readonly calls: number;
  readonly redisUsedMemory: number;
  readonly redisKeys: number;
}

/** What the parent passes to a worker process (JSON, first argument). */
export interface SoakWorkerConfig {
  readonly index: number;
  readonly redisUrl: string;
  readonly vendorUrl: string;
  readonly prefix: string;
  readonly name: string;
  readonly rules: readonly string[];
  readonly mode: ThrottleMode;
  readonly maxHoldMs: number;
  readonly concurrency: number;
  /** Calls in the whole run: this worker makes calls index, index + workers, …; call i goes to key floor(i / callsPerKey). */
  readonly calls: number;
  readonly callsPerKey: number;
  readonly workers: number;
  /** How long the keys take to go idle after the last call: the worker then collects garbage and measures its heap. */
  readonly idleMs: number;
}

/** Lines a worker prints on stdout, one JSON object each. */
export type SoakWorkerMessage =
  | { readonly type: 'ready'; readonly heapUsed: number }
  | { readonly type: 'progress'; readonly done: number }
  | {
      readonly type: 'done';
      readonly calls: number;
      readonly errors: number;
      /** The first few error messages. */
      readonly errorSamples: readonly string[];
      readonly heapPeak: number;
      readonly elapsedMs: number;
      /** The throttle's `debug` events by kind (numbers replaced by N): re-bookings, late starts, failed background writes. */
      readonly notes: Readonly<Record<string, number>>;
    }
  | {
      readonly type: 'idle';
      readonly heapUsed: number;
      /** `throttle.stats` once idle: all 0 when nothing is held locally any more. */
      readonly stats: { readonly queues: number; readonly queued: number; readonly sleeping: number };
    }
  | {
      readonly type: 'closing';
      /** `process.getActiveResourcesInfo()` just before the worker exits (`beforeExit`), or while something keeps it alive. */
      readonly activeResources: readonly string[];
      /** Its event loop did not end within 5 s of `close()` and `redis.quit()`. */
      readonly stuck: boolean;
    };

export interface SoakWorkerReport {
  readonly index: number;
  readonly pid: number;
  readonly mode: ThrottleMode;
  readonly calls: number;
  readonly errors: number;
  readonly errorSamples: readonly string[];
  /** heapUsed after warm-up and a GC, before the load. */
  readonly heapStart: number;
  /** Highest heapUsed sampled during the load (no GC forced). */
  readonly heapPeak: number;
  /** heapUsed once the keys went idle, after a GC. */
  readonly heapAfterIdle: number;
  /** `throttle.stats` once idle. */
  readonly idleStats: { readonly queues: number; readonly queued: number; readonly sleeping: number };
  readonly elapsedMs: number;
  /** The throttle's `debug` events by kind. */
  readonly notes: Readonly<Record<string, number>>;
  readonly activeResources: readonly string[];
  /** Its event loop did not end by itself within 5 s of close() and quit(). */
  readonly stuck: boolean;
  /** Exit code, or the signal that ended it. */
  readonly exitCode: number | string;
  /** From its last line to its exit: how long its event loop took to end by itself. */
  readonly exitAfterMs: number;
}

export interface SoakReport {
  readonly options: Omit<SoakOptions, 'onProgress'>;
  readonly durationMs: number;
  readonly received: number;
  readonly dropped: number;
  readonly violations: number;
  readonly maxInWindow: number;
  readonly workers: readonly SoakWorkerReport[];
  readonly redis: {
    readonly usedMemoryBaseline: number;
    readonly usedMemoryPeak: number;
    readonly usedMemoryAfterExpiry: number;
    /** Of which the cached Lua scripts (`used_memory_scripts_eval`), loaded during the run and kept. */
    readonly scriptsMemory: number;
    /** Per-user keys (`<prefix>:<name>:{…}:…`) left once they should have expired. */
    readonly userKeysLeft: number;
    /** A few of them, with their time to live (PTTL: -1 = none) and what they hold. */
    readonly userKeysLeftSample: ReadonlyArray<{ readonly key: string; readonly pttl: number; readonly content: string }>;
    /** Most keys at one time (DBSIZE, sampled every second). */
    readonly keysPeak: number;
    /** Keys that are not per user (the namespace's epoch), with their names. */
    readonly otherKeys: readonly string[];
    /** From the last call to the moment no per-user key was left. */
    readonly expiredAfterMs: number;
    /** EVALSHA + EVAL per call (decisions and completions). */
    readonly scriptsPerCall: number;
  };
}
