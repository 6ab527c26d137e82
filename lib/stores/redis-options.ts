import { checkKnown } from '../validate.js';
import { ThrottleConfigError } from '../errors.js';
import { checkNamespace, type HashTag } from '../keys.js';

/** Options of `new RedisStore(client, options)`, and the part of a Redis client it uses. */
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
   * A journal needs a process that lives on: on an `@upstash/redis` client (a function's) it is off
   * unless given.
   * @default { heartbeatMs: 500, graceMs: 3_000 }; `false` on an `@upstash/redis` client
   */
  readonly recovery?:
    | false
    | {
        /** How often a process with calls in its journal checks the epoch when it decides nothing. @default 500 */
        readonly heartbeatMs?: number;
        /** How long after a loss is found nothing new is decided, so every live process can put back its calls; above heartbeatMs. @default 3_000 */
        readonly graceMs?: number;
      };
}

/**
 * A client the store runs on: an ioredis `Redis` or `Cluster`, a node-redis client
 * (`createClient()`) or cluster (`createCluster()`), connected by its owner, or an `@upstash/redis`
 * `Redis` (Redis over HTTP, for functions). Declared here so that the published types require none
 * of these libraries (optional peer dependencies) to be installed.
 */
export type RedisClientLike = IORedisClientLike | NodeRedisClientLike | UpstashClientLike;

/**
 * The part of an `@upstash/redis` `Redis` the store relies on: its commands go through the client's
 * `Requester` (the REST API's `request()`, which the client holds), replies as Redis gives them.
 */
export interface UpstashClientLike {
  evalsha(...args: never[]): Promise<unknown>;
  readYourWritesSyncToken: string | undefined;
}

/** The part of an ioredis `Redis` or `Cluster` client the store relies on. */
export interface IORedisClientLike {
  defineCommand(name: string, definition: { numberOfKeys?: number; lua: string }): void;
}

/** The part of a node-redis client or cluster the store relies on. */
export interface NodeRedisClientLike {
  // Method syntax: a client's `sendCommand(args, options?)` and a cluster's `sendCommand(firstKey, isReadonly, args, options?)` both fit.
  sendCommand(...args: never[]): Promise<unknown>;
  readonly isOpen: boolean;
  readonly isReady: boolean;
  duplicate(...args: never[]): unknown;
}

/** `RedisStoreOptions` checked, with every default filled in. */
export interface RedisStoreSettings {
  readonly prefix: string;
  readonly hashTag: HashTag;
  readonly timeoutMs: number;
  readonly recovery: false | { readonly heartbeatMs: number; readonly graceMs: number };
}

/** Checks the options of `new RedisStore()`: a `ThrottleConfigError` names what is wrong. */
export function redisStoreSettings(options: RedisStoreOptions, overHttp = false): RedisStoreSettings {
  if (options === null || typeof options !== 'object') throw new ThrottleConfigError('Expected RedisStore options to be an object', 'options');
  checkKnown('RedisStore', options, ['prefix', 'hashTag', 'commandTimeoutMs', 'recovery']);
  const prefix = checkNamespace('RedisStore prefix', options.prefix ?? 'vt');
  const hashTag = options.hashTag ?? 'key';
  if (hashTag !== 'key' && hashTag !== 'name') throw new ThrottleConfigError(`Expected hashTag to be 'key' or 'name', got ${String(hashTag)}`, 'hashTag');
  const timeoutMs = positive('commandTimeoutMs', options.commandTimeoutMs ?? 5_000);
  const recovery = options.recovery ?? (overHttp ? false : {});
  if (recovery !== false && (recovery === null || typeof recovery !== 'object')) {
    throw new ThrottleConfigError('Expected recovery to be false or an object', 'recovery');
  }
  if (recovery === false) return { prefix, hashTag, timeoutMs, recovery };
  checkKnown('RedisStore recovery', recovery, ['heartbeatMs', 'graceMs']);
  const heartbeatMs = positive('recovery.heartbeatMs', recovery.heartbeatMs ?? 500);
  const graceMs = positive('recovery.graceMs', recovery.graceMs ?? 3_000);
  // A process finds a loss within about two heartbeats of its last check, and needs time to put
  // its calls back.
  if (graceMs < 3 * heartbeatMs) {
    throw new ThrottleConfigError(
      `Expected recovery.graceMs (${graceMs}) to be at least three times recovery.heartbeatMs (${heartbeatMs})`,
      'recovery.graceMs',
    );
  }
  return { prefix, hashTag, timeoutMs, recovery: { heartbeatMs, graceMs } };
}

function positive(what: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value <= 0) {
    throw new ThrottleConfigError(`Expected ${what} to be a whole number of ms above 0, got ${String(value)}`, what);
  }
  return value;
}
