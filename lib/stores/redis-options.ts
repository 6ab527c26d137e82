import type { HashTag } from '../keys.js';

/** Options of `new RedisStore(client, options)`, and the part of an ioredis client it uses. */
export interface RedisStoreOptions {
  /**
   * First part of every key: `<prefix>:<throttle name>:{<user key>}:log`. Letters, digits, `.`, `_`, `-`, `/`.
   * @default 'vt'
   */
  readonly prefix?: string;
  /**
   * The hash tag of every key: `'key'` (each user key in a slot of its own, spread over a Cluster)
   * or `'name'` (every key of a throttle in one slot: `<prefix>:<name>:{<name>}:<user key>:log`).
   * A call of several keys (`schedule([user, 'app'], fn)`) on a Redis Cluster needs `'name'`: one
   * script decides it, and a script reaches one slot. Changing it starts every key afresh.
   * @default 'key'
   */
  readonly hashTag?: HashTag;
  /**
   * Longest wait for one Redis command, in ms: past it the call fails with `StoreUnavailableError`
   * (and the throttle's `onStoreError` policy applies), so a hung or unreachable Redis never hangs
   * callers. A decision that Redis still carries out after the timeout books a slot nobody uses:
   * the store removes it when the late answer comes (until then it counts: safe, only less full).
   * @default 5_000
   */
  readonly commandTimeoutMs?: number;
  /**
   * Detects a Redis that lost its data (restart without persistence, `FLUSHALL`, failover to a
   * replica that lagged) and puts back this process's calls still inside their windows, from a
   * journal kept in memory, before anything new is decided (docs/design.md). `false` turns it off.
   * @default { heartbeatMs: 500, graceMs: 3_000 }
   */
  readonly recovery?: false | {
    /** How often a process with calls in its journal checks the epoch when it decides nothing. @default 500 */
    readonly heartbeatMs?: number;
    /** How long after a loss is found nothing new is decided, so every live process can put back its calls; above heartbeatMs. @default 3_000 */
    readonly graceMs?: number;
  };
}

/**
 * The part of an ioredis `Redis` or `Cluster` client the store relies on. Declared here so that the
 * published types do not require ioredis (an optional peer dependency) to be installed.
 */
export interface RedisClientLike {
  defineCommand(name: string, definition: { numberOfKeys?: number; lua: string }): void;
}
