import { setMaxListeners } from 'node:events';
import { readFileSync } from 'node:fs';
import { StoreUnavailableError } from '../errors.js';
import { PAUSED, RECOVERING } from '../slot-plan.js';
import { withTimeout } from '../time.js';
import type { RedisClientLike } from './redis-options.js';

/**
 * The codes the scripts and this side share, declared once: every script is loaded after a line
 * that declares each as a Lua local, `VT_<GROUP>_<NAME>` (`VT_OP_DECIDE`, `VT_STATUS_BOOKED`, …).
 */
export const CODES = {
  /** lua/batch.lua: the first field of each operation (its fields: the script's header). */
  op: { decide: 1, decideKeys: 2, complete: 3, leave: 4, check: 5, checkFull: 6, tidy: 7, paused: 8 },
  /**
   * A decided call's status (lua/includes/decide.lua); `notMade`: its key was found lost, asked
   * again once put back; `bookedNow`: booked to start at once, answered in this one value.
   */
  status: { refused: 0, booked: 1, deferred: 2, notMade: 3, bookedNow: 4 },
  /** The first value of a batch's reply: done, or nothing done because the namespace's epoch changed. */
  batch: { done: 1, epochChanged: 3 },
  /** What a key's check found (lua/includes/check.lua). */
  check: { whole: 0, lost: 1, held: 2 },
  /** A decision's rule index when no rule set the start: none, a vendor pause, a hold after a loss. */
  rule: { none: -1, paused: PAUSED, recovering: RECOVERING },
} as const;

/** `CODES` as Lua locals, one line. */
const LUA_CODES = Object.entries(CODES)
  .flatMap(([group, codes]) => Object.entries(codes).map(([name, value]) => `local VT_${group.toUpperCase()}_${snakeCase(name)} = ${value}`))
  .join('; ');

function snakeCase(name: string): string {
  return name.replace(/[A-Z]/g, (letter) => `_${letter}`).toUpperCase();
}

/**
 * The Lua scripts of the Redis store, read once from `lib/lua/*.lua` with their `--- @include "name"`
 * lines replaced by `lib/lua/includes/name.lua`. Command names carry a version so that two library
 * versions sharing one client never run each other's script.
 */
export const SCRIPT_VERSION = 18;

/** A script, registered with ioredis `defineCommand` without a fixed number of keys: each call passes it first. */
export interface ScriptDefinition {
  readonly name: string;
  readonly lua: string;
}

const INCLUDE = /^--- @include "([a-z-]+)"$/gm;

function load(file: string): string {
  const source = readFileSync(new URL(`../lua/${file}.lua`, import.meta.url), 'utf8');
  return `${LUA_CODES}\n${source}`.replace(INCLUDE, (_line, name: string) => readFileSync(new URL(`../lua/includes/${name}.lua`, import.meta.url), 'utf8'));
}

export const scripts = {
  batch: { name: `vtBatch${SCRIPT_VERSION}`, lua: load('batch') },
  inspect: { name: `vtInspect${SCRIPT_VERSION}`, lua: load('inspect') },
  pause: { name: `vtPause${SCRIPT_VERSION}`, lua: load('pause') },
  restore: { name: `vtRestore${SCRIPT_VERSION}`, lua: load('restore') },
  epoch: { name: `vtEpoch${SCRIPT_VERSION}`, lua: load('epoch') },
  reset: { name: `vtReset${SCRIPT_VERSION}`, lua: load('reset') },
  keep: { name: `vtKeep${SCRIPT_VERSION}`, lua: load('keep') },
} as const satisfies Record<string, ScriptDefinition>;

type ScriptFn = (...args: Array<string | number | Buffer>) => Promise<unknown>;
/** The client's events the runner listens to (ioredis `Redis` and `Cluster` are EventEmitters). */
interface ClientEvents {
  on?(event: 'error' | 'connect' | 'ready' | 'end', listener: (error?: unknown) => void): unknown;
  off?(event: 'error' | 'connect' | 'ready' | 'end', listener: (error?: unknown) => void): unknown;
  /** ioredis: 'wait', 'connecting', 'connect', 'ready', 'reconnecting', 'close', 'end'. */
  readonly status?: string;
}

/** What the store does when the client ends (`quit()`, `disconnect()`, a `retryStrategy` that gave up) and is ready again. */
export interface ClientLife {
  ended(): void;
  ready(): void;
}

/** The failure of every command while the client has ended: nothing can reach Redis until its owner connects it again. */
export function clientEnded(cause?: unknown): StoreUnavailableError {
  return new StoreUnavailableError(
    'The Redis client was closed (quit(), disconnect(), or its retryStrategy gave up): the store can reach Redis again only once the client connects again',
    cause,
  );
}

/** An ioredis connection: its socket of the moment, if any (ioredis `Redis.stream`; a `Cluster` has none of its own). */
interface Connection {
  readonly stream?: unknown;
}

const heard = new WeakSet<object>();
const ignore = (): void => undefined;

/**
 * Listens to the errors of the connection's socket, once a connection failed or is being ended.
 * ioredis listens to its socket's first 'error' only (`once`), but a TLS socket can emit two: a
 * handshake cut short by `disconnect()` fails its certificate check, then the server's alert to the
 * cut handshake arrives ('tlsv1 alert decode error'). Unheard, the second is an uncaught exception:
 * a crash. The client's own 'error' event, which the store hears, reports the first.
 */
export function hearLateErrors(connection: object): void {
  const stream = (connection as Connection).stream as { on?: (event: 'error', listener: () => void) => unknown } | null | undefined;
  if (stream === null || typeof stream !== 'object' || typeof stream.on !== 'function' || heard.has(stream)) return;
  heard.add(stream);
  stream.on('error', ignore);
}

/** The client as the runner uses it: the scripts it defined, GET, its events, and whether it is a Cluster. */
export type ScriptedClient = RedisClientLike & Record<string, ScriptFn> & ClientEvents & { readonly isCluster?: boolean };

/** Keys of each script on a Cluster, where a batch holds one user key's two keys and no epoch key. */
const CLUSTER_KEYS = { batch: 2, inspect: 2, pause: 1, restore: 2, epoch: 1, reset: 2, keep: 2 } as const satisfies Record<keyof typeof scripts, number>;

/**
 * Runs the scripts on one ioredis client, standalone or Cluster, each call bounded by the store's
 * `commandTimeoutMs`, and failed at once while the client cannot connect. The scripts are
 * registered with `defineCommand` (EVALSHA, EVAL on NOSCRIPT).
 */
export class ScriptRunner {
  readonly client: ScriptedClient;
  /** A Cluster: every script reaches one slot, with a fixed number of keys. */
  readonly cluster: boolean;
  readonly #timeoutMs: number;
  /** The client's latest error while it has not been ready since (a refused connection, a TLS failure). */
  #lastError: unknown;
  /**
   * Aborted, with a `StoreUnavailableError` saying why, when an attempt to connect fails (a refused
   * connection, a TLS failure): commands under way stop waiting, and new ones fail at once, until
   * the client connects. ioredis would only queue them while it retries.
   */
  #connection = connection();
  /** While the client cannot connect: resolves once it does. */
  #reconnected: { readonly promise: Promise<void>; readonly resolve: () => void } | undefined;
  readonly #onError = (error: unknown): void => {
    this.#lastError = error;
    hearLateErrors(this.client);
    // An error of a connection that is up (a reset before ioredis reconnects, NOAUTH at the ready
    // check) says nothing of the next attempt: commands wait in the client's queue for it.
    const status = this.client.status;
    if (status === undefined || status === 'ready' || status === 'connect' || this.#connection.signal.aborted) return;
    this.#connection.abort(this.#unreachable());
  };
  readonly #onConnect = (): void => {
    if (this.#connection.signal.aborted) this.#connection = connection();
    this.#reconnected?.resolve();
    this.#reconnected = undefined;
  };
  readonly #onReady = (): void => {
    this.#lastError = undefined;
    this.#onConnect();
    this.#life?.ready();
  };
  readonly #onEnd = (): void => {
    this.#life?.ended();
  };
  readonly #life: ClientLife | undefined;

  /** `life`: told when the client ends, and when it is ready (again). */
  constructor(client: RedisClientLike, timeoutMs: number, life?: ClientLife) {
    this.client = client as ScriptedClient;
    this.cluster = this.client.isCluster === true;
    this.#timeoutMs = timeoutMs;
    this.#life = life;
    // Heard so that commands fail at once while the client cannot connect, saying why (it retries a
    // refused connection and would queue them meanwhile), and so that one that times out can say
    // why. Listening also keeps ioredis from printing each error; the throttle reports them
    // through its 'storeError' event instead.
    this.client.on?.('error', this.#onError);
    this.client.on?.('connect', this.#onConnect);
    this.client.on?.('ready', this.#onReady);
    this.client.on?.('end', this.#onEnd);
    for (const [op, { name, lua }] of Object.entries(scripts)) {
      // Standalone: no fixed number of keys, so the epoch key rides along in the same script. Cluster:
      // a fixed number, so that the first argument ioredis sees is a key, which it routes and
      // auto-pipelines by (with a leading count it takes the count for a key: one pipeline over all masters).
      if (typeof this.client[name] === 'function') continue;
      client.defineCommand(name, this.cluster ? { lua, numberOfKeys: CLUSTER_KEYS[op as keyof typeof scripts] } : { lua });
    }
  }

  /** The client has ended (`quit()`, `disconnect()`): every command fails at once until it connects again. */
  get ended(): boolean {
    return this.client.status === 'end';
  }

  /**
   * Runs one script with the timeout, or fails at once while the client cannot connect or has
   * ended; `late` gets the reply of a script that answered after the call gave up on it.
   */
  run(name: string, keys: readonly string[], args: ReadonlyArray<string | number | Buffer>, late?: (reply: unknown) => void): Promise<unknown> {
    return this.#send(() => this.#call(name, keys, args), late);
  }

  /** GET, as `run` sends a script. */
  get(key: string): Promise<string | null> {
    return this.#send(() => this.client['get']!(key) as Promise<string | null>);
  }

  /**
   * While the client cannot connect (its latest attempt failed), a promise that resolves once it
   * does; otherwise undefined.
   */
  reconnected(): Promise<void> | undefined {
    if (!this.#connection.signal.aborted) return undefined;
    if (this.#reconnected === undefined) {
      let resolve!: () => void;
      const promise = new Promise<void>((done) => (resolve = done));
      this.#reconnected = { promise, resolve };
    }
    return this.#reconnected.promise;
  }

  /** Sends a command unless the client cannot connect or has ended, bounded by the timeout and by a failed attempt to connect. */
  #send<T>(send: () => Promise<T>, late?: (value: T) => void): Promise<T> {
    if (this.ended) return Promise.reject(clientEnded());
    const { signal } = this.#connection;
    if (signal.aborted) return Promise.reject(this.#unreachable());
    return withTimeout(send(), this.#timeoutMs, () => this.#timedOut(), late, signal).catch((error: unknown) => {
      throw this.#endedError(error);
    });
  }

  /** Calls a script: with the number of keys first on a standalone Redis, without it on a Cluster (fixed there). */
  #call(name: string, keys: readonly string[], args: ReadonlyArray<string | number | Buffer>): Promise<unknown> {
    if (!this.cluster) return this.client[name]!(keys.length, ...keys, ...args);
    // A batch with a call of several keys has more keys than the command defined for one key.
    if (name === scripts.batch.name && keys.length !== CLUSTER_KEYS.batch) name = this.#clusterBatch(keys.length);
    return this.client[name]!(...keys, ...args);
  }

  /** The batch script on a Cluster for a batch of `count` keys (one slot), defined the first time it is needed. */
  #clusterBatch(count: number): string {
    const name = `${scripts.batch.name}k${count}`;
    if (typeof this.client[name] !== 'function') this.client.defineCommand(name, { lua: scripts.batch.lua, numberOfKeys: count });
    return name;
  }

  /**
   * Rejects with `StoreUnavailableError` when `promise` takes longer than `commandTimeoutMs`; its
   * message and `cause` carry the client's latest error when it is not connected (NOAUTH, a lost
   * connection). A command the client dropped as it ended says so.
   */
  timed<T>(promise: Promise<T>, late?: (value: T) => void): Promise<T> {
    return withTimeout(promise, this.#timeoutMs, () => this.#timedOut(), late).catch((error: unknown) => {
      throw this.#endedError(error);
    });
  }

  /** A command the client dropped as it ended, as the store failure it is; any other error as it is. */
  #endedError(error: unknown): unknown {
    return this.ended && !(error instanceof StoreUnavailableError) ? clientEnded(error) : error;
  }

  #timedOut(): StoreUnavailableError {
    const message = `Redis did not answer within ${this.#timeoutMs} ms (commandTimeoutMs)`;
    const status = this.client.status;
    if (status === undefined || status === 'ready') return new StoreUnavailableError(message);
    return new StoreUnavailableError(`${message}; the client is ${status} (${this.#why()})`, this.#lastError);
  }

  /** The client cannot connect: its state and the error of its latest attempt, which is the cause. */
  #unreachable(): StoreUnavailableError {
    return new StoreUnavailableError(`Redis cannot be reached: the client is ${this.client.status} (${this.#why()})`, this.#lastError);
  }

  #why(): string {
    const cause = this.#lastError;
    return cause === undefined ? 'no error reported yet' : cause instanceof Error ? cause.message || cause.name : String(cause);
  }

  /** Stops listening to the client's events (the client stays the caller's). */
  close(): void {
    this.client.off?.('error', this.#onError);
    this.client.off?.('connect', this.#onConnect);
    this.client.off?.('ready', this.#onReady);
    this.client.off?.('end', this.#onEnd);
  }
}

/** A connection's signal: every command under way listens to it. */
function connection(): AbortController {
  const controller = new AbortController();
  setMaxListeners(0, controller.signal);
  return controller;
}
