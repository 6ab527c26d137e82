import { createHash } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { createRequire } from 'node:module';
import { StoreUnavailableError } from '../errors.js';
import { withTimeout } from '../time.js';
import type { IORedisClientLike, RedisClientLike } from './redis-options.js';
import { scripts } from './redis-scripts.js';
import { evalShaCommand, type ScriptKeys } from './resp.js';

/**
 * The user's client, by library: ioredis (`Redis`, `Cluster`: `defineCommand`), node-redis
 * (`createClient()`, `createCluster()`: `sendCommand` and `isOpen`) or `@upstash/redis` (`Redis`:
 * `evalsha`, and the `Requester` it sends every command through); undefined for anything else.
 */
export function clientKind(client: unknown): 'ioredis' | 'node-redis' | 'upstash' | undefined {
  if (client === null || typeof client !== 'object') return undefined;
  const methods = client as { defineCommand?: unknown; sendCommand?: unknown; duplicate?: unknown; evalsha?: unknown };
  if (typeof methods.defineCommand === 'function') return 'ioredis';
  if (typeof methods.sendCommand === 'function' && typeof methods.duplicate === 'function' && 'isOpen' in client) return 'node-redis';
  if (typeof methods.evalsha === 'function' && requesterOf(client) !== undefined) return 'upstash';
  return undefined;
}

/** The REST API's answer to one command: its result (strings decoded), or the error Redis gave. */
interface RestReply {
  readonly result?: unknown;
  readonly error?: string;
}

/** What an `@upstash/redis` `Redis` sends its commands through (its `client`, the `Requester` its constructor takes). */
interface Requester {
  request(request: { readonly body: ReadonlyArray<string | number> }): Promise<RestReply>;
}

function requesterOf(client: object): Requester | undefined {
  const requester = (client as { client?: Partial<Requester> | null }).client;
  return typeof requester === 'object' && requester !== null && typeof requester.request === 'function' ? (requester as Requester) : undefined;
}

/**
 * An argument as the REST API carries it: JSON has no bytes, so a binary one (the batch's packed
 * fields) goes as `x:` and its hex, which lua/batch.lua reads back.
 */
function restArg(arg: Arg): string | number {
  return Buffer.isBuffer(arg) ? `x:${arg.toString('hex')}` : arg;
}

type Arg = string | number | Buffer;
/** A script's keys: as strings, or written straight into the command (lib/stores/resp.ts). */
type Keys = readonly string[] | ScriptKeys;
type ScriptFn = (...args: Arg[]) => Promise<unknown>;
type Event = 'error' | 'connect' | 'ready' | 'end' | 'terminated' | 'disconnect';
/** The client's events the driver listens to (both libraries' clients are EventEmitters). */
interface ClientEvents {
  on?(event: Event, listener: (error?: unknown) => void): unknown;
  off?(event: Event, listener: (error?: unknown) => void): unknown;
  /** ioredis: 'wait', 'connecting', 'connect', 'ready', 'reconnecting', 'close', 'end'. */
  readonly status?: string;
}

/** A node-redis client or cluster, as the driver uses it. */
interface NodeRedis {
  /** Client: `sendCommand(args)`; cluster: `sendCommand(firstKey, isReadonly, args)`. */
  sendCommand(...args: unknown[]): Promise<unknown>;
  readonly isOpen: boolean;
  readonly isReady: boolean;
  duplicate(): NodeRedisSubscriber;
}

interface NodeRedisSubscriber {
  connect(): Promise<unknown>;
  subscribe(channel: string, listener: (message: string, channel: string) => void): Promise<unknown>;
  on(event: 'error' | 'ready' | 'end' | 'reconnecting', listener: () => void): unknown;
  destroy(): void;
}

/** An ioredis subscriber connection (`duplicate()` of the user's client). */
interface IORedisSubscriber {
  subscribe(channel: string): Promise<unknown>;
  on(event: 'message', listener: (channel: string, message: string) => void): unknown;
  on(event: 'error' | 'ready' | 'close', listener: () => void): unknown;
  disconnect(): void;
}

/** The store's own connection for the wakes: subscribed channels, closed by `close()`. */
export interface Subscriber {
  subscribe(channel: string): Promise<unknown>;
  close(): void;
}

/** What the store does when the client ends (`quit()`, `disconnect()`, a `retryStrategy` that gave up) and is ready again. */
export interface ClientLife {
  ended(): void;
  ready(): void;
}

/** The failure of every command while the client has ended: nothing can reach Redis until its owner connects it again. */
function clientEnded(node: boolean, cause?: unknown): StoreUnavailableError {
  return new StoreUnavailableError(
    node
      ? 'The node-redis client is not open (not connected yet, or closed by close(), destroy(), or a reconnectStrategy that gave up): the store can reach Redis only once the client is connected (await client.connect())'
      : 'The Redis client was closed (quit(), disconnect(), or its retryStrategy gave up): the store can reach Redis again only once the client connects again',
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
function hearLateErrors(connection: object): void {
  const stream = (connection as Connection).stream as { on?: (event: 'error', listener: () => void) => unknown } | null | undefined;
  if (stream === null || typeof stream !== 'object' || typeof stream.on !== 'function' || heard.has(stream)) return;
  heard.add(stream);
  stream.on('error', ignore);
}

/** The ioredis client as the driver uses it: the scripts it defined, GET, HGET, INFO, its events, and whether it is a Cluster. */
type ScriptedClient = IORedisClientLike & Record<string, ScriptFn> & ClientEvents & { readonly isCluster?: boolean };

/**
 * Keys of each script as defined on an ioredis Cluster: a batch of one user key's two keys and no
 * epoch key, a claim of one key's log and meta and one reserved member's pointer. A call with
 * another number of keys (a batch with a call of several keys, a claim of several slots, keys or
 * dependencies) uses a command defined for that number (#clusterVariant).
 */
const CLUSTER_KEYS = {
  batch: 2,
  inspect: 2,
  pause: 2,
  learn: 2,
  restore: 2,
  epoch: 1,
  reset: 2,
  keep: 2,
  alive: 1,
  reap: 2,
  claim: 3,
} as const satisfies Record<keyof typeof scripts, number>;

/** Each script by name, with its SHA1 (for EVALSHA on node-redis, which registers no script on a client made by the user). */
const BY_NAME = new Map<string, { readonly lua: string; readonly sha: string }>(
  Object.values(scripts).map(({ name, lua }) => [name, { lua, sha: createHash('sha1').update(lua).digest('hex') }]),
);

/** `CLUSTER_KEYS` by script name. */
const CLUSTER_KEYS_OF = new Map<string, number>(Object.entries(scripts).map(([op, { name }]) => [name, CLUSTER_KEYS[op as keyof typeof scripts]]));

/**
 * node-redis command options: replies read with the default type mapping (strings as strings),
 * whatever the user's client maps them to (`withTypeMapping`), as the store reads them.
 */
const PLAIN = Object.freeze({ typeMapping: Object.freeze({}) });

/** Redis's error as the REST API words it, without what `@upstash/redis` adds (`Command failed: `, `, command was: …`). */
function restError(error: string): string {
  return error.replace(/^Command failed: /, '').replace(/, command was: [\s\S]*$/, '');
}

/** Redis's answer to EVALSHA of a script it does not hold (`SCRIPT FLUSH`, a restart): the script did not run. */
function noScript(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('NOSCRIPT');
}

/** An ioredis command, as `sendCommand` takes it. */
interface IORedisCommand {
  readonly promise: Promise<unknown>;
  toWritable(socket: unknown): string | Buffer;
}

/** The ioredis module, as far as `rawSender` uses it. */
interface IORedisModule {
  readonly Redis: abstract new (...args: never[]) => object;
  readonly Command: new (name: string, args: unknown[]) => IORedisCommand;
}

/** The ioredis this library resolves (undefined without one), loaded once. */
let ioredis: IORedisModule | null | undefined;

function loadIORedis(): IORedisModule | undefined {
  if (ioredis === undefined) {
    try {
      const loaded = createRequire(import.meta.url)('ioredis') as Partial<IORedisModule>;
      ioredis = typeof loaded.Redis === 'function' && typeof loaded.Command === 'function' ? (loaded as IORedisModule) : null;
    } catch {
      ioredis = null;
    }
  }
  return ioredis ?? undefined;
}

/**
 * Sends a command already written as RESP through a standalone ioredis client (`sendCommand` of a
 * `Command` whose bytes are given): one buffer for the socket, where ioredis would write each
 * argument with its header and copy them together. Undefined where the client cannot: a client of
 * another copy of ioredis than the one this library resolves, with a `keyPrefix` (ioredis adds it
 * to the keys), or with `enableAutoPipelining` (its commands wait for the next tick: the batch
 * would overtake those sent before it).
 */
function rawSender(client: object): ((bytes: Buffer) => Promise<unknown>) | undefined {
  const io = loadIORedis();
  const options = (client as { options?: { keyPrefix?: unknown; enableAutoPipelining?: unknown } }).options;
  if (io === undefined || !(client instanceof io.Redis) || options?.keyPrefix || options?.enableAutoPipelining) return undefined;
  const send = (client as { sendCommand?: unknown }).sendCommand;
  if (typeof send !== 'function') return undefined;
  class Written extends io.Command {
    readonly #bytes: Buffer;
    constructor(bytes: Buffer) {
      super('evalsha', []);
      this.#bytes = bytes;
    }
    override toWritable(): Buffer {
      return this.#bytes;
    }
  }
  return (bytes) => (send as (command: IORedisCommand) => Promise<unknown>).call(client, new Written(bytes));
}

/**
 * Speaks to the user's client, ioredis or node-redis, standalone or Cluster: runs the store's
 * scripts, GET, HGET and INFO, each bounded by the store's `commandTimeoutMs` and failed at once
 * while the client cannot connect, opens the wakes' subscriber, and follows the client's events.
 *
 * Scripts: on ioredis, registered with `defineCommand` (EVALSHA, EVAL on NOSCRIPT, also in
 * pipelines). On node-redis, sent as EVALSHA of the SHA1 computed here, and sent again as EVAL once
 * when Redis answers NOSCRIPT only: any other failure may come after the script ran (a lost
 * connection), and a second send could book the same calls twice.
 */
export class ClientDriver {
  /** The user's client. */
  readonly client: RedisClientLike;
  /** It as ioredis (its events as well on node-redis). */
  readonly #io: ScriptedClient;
  readonly #node: NodeRedis | undefined;
  /** `@upstash/redis`: each command one request of its REST API (no connection, no pub/sub). */
  readonly #rest: Requester | undefined;
  /** A standalone ioredis client: sends a command written as RESP (see `rawSender`). */
  readonly #raw: ((bytes: Buffer) => Promise<unknown>) | undefined;
  /** A Cluster: every script reaches one slot (on ioredis, with a fixed number of keys). */
  readonly cluster: boolean;
  readonly #timeoutMs: number;
  /** The client's latest error while it has not been ready since (a refused connection, a TLS failure). */
  #lastError: unknown;
  /** node-redis: the connection was up (connected or ready) until its latest error. */
  #up = false;
  /**
   * Aborted, with a `StoreUnavailableError` saying why, when an attempt to connect fails (a refused
   * connection, a TLS failure): commands under way stop waiting, and new ones fail at once, until
   * the client connects. The client would only queue them while it retries.
   */
  #connection = connection();
  /** While the client cannot connect: resolves once it does. */
  #reconnected: { readonly promise: Promise<void>; readonly resolve: () => void } | undefined;
  readonly #onError = (error: unknown): void => {
    this.#lastError = error;
    hearLateErrors(this.#io);
    // An error of a connection that is up (a reset before the client reconnects, NOAUTH at the
    // ready check) says nothing of the next attempt: commands wait in the client's queue for it.
    const status = this.status;
    this.#up = false;
    if (status === undefined || status === 'ready' || status === 'connect' || this.#connection.signal.aborted) return;
    this.#connection.abort(this.#unreachable());
  };
  readonly #onConnect = (): void => {
    this.#up = true;
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
  /** The client's events and what each means here (a node-redis cluster is ready once it 'connect's, and ends with 'disconnect'). */
  readonly #events: ReadonlyArray<readonly [Event, (error?: unknown) => void]>;

  /** `life`: told when the client ends, and when it is ready (again). */
  constructor(client: RedisClientLike, timeoutMs: number, life?: ClientLife) {
    this.client = client;
    this.#io = client as unknown as ScriptedClient;
    this.#timeoutMs = timeoutMs;
    this.#life = life;
    const kind = clientKind(client);
    if (kind === 'upstash') {
      this.#rest = requesterOf(client);
      this.cluster = false;
      this.#up = true;
      this.#events = [];
      return;
    }
    if (kind === 'node-redis') {
      this.#node = client as unknown as NodeRedis;
      this.cluster = typeof (client as { nodeClient?: unknown }).nodeClient === 'function';
      this.#up = this.#node.isReady;
      this.#events = this.cluster
        ? [
            ['error', this.#onError],
            ['connect', this.#onReady],
            ['disconnect', this.#onEnd],
          ]
        : [
            ['error', this.#onError],
            ['connect', this.#onConnect],
            ['ready', this.#onReady],
            ['end', this.#onEnd],
            ['terminated', this.#onEnd],
          ];
    } else {
      this.cluster = this.#io.isCluster === true;
      this.#events = [
        ['error', this.#onError],
        ['connect', this.#onConnect],
        ['ready', this.#onReady],
        ['end', this.#onEnd],
      ];
      this.#raw = this.cluster ? undefined : rawSender(client);
      for (const [op, { name, lua }] of Object.entries(scripts)) {
        // Standalone: no fixed number of keys, so the epoch key rides along in the same script. Cluster:
        // a fixed number, so that the first argument ioredis sees is a key, which it routes and
        // auto-pipelines by (with a leading count it takes the count for a key: one pipeline over all masters).
        if (typeof this.#io[name] === 'function') continue;
        this.#io.defineCommand(name, this.cluster ? { lua, numberOfKeys: CLUSTER_KEYS[op as keyof typeof scripts] } : { lua });
      }
    }
    // Heard so that commands fail at once while the client cannot connect, saying why (it retries a
    // refused connection and would queue them meanwhile), and so that one that times out can say
    // why. Listening also keeps the client from printing (ioredis) or throwing (node-redis) each
    // error; the throttle reports them through its 'storeError' event instead.
    for (const [event, listener] of this.#events) this.#io.on?.(event, listener);
  }

  /**
   * The client's state, as ioredis names it: 'ready', 'connect' (up, not ready yet), 'end' (closed),
   * or another while it cannot connect.
   */
  get status(): string | undefined {
    if (this.#rest !== undefined) return 'ready';
    const node = this.#node;
    if (node === undefined) return this.#io.status;
    return !node.isOpen ? 'end' : node.isReady ? 'ready' : this.#up ? 'connect' : 'reconnecting';
  }

  /** The client has ended (`quit()`, `disconnect()`; node-redis: not connected yet): every command fails at once until it connects again. */
  get ended(): boolean {
    return this.status === 'end';
  }

  /**
   * Runs one script with the timeout, or fails at once while the client cannot connect or has
   * ended; `late` gets the reply of a script that answered after the call gave up on it.
   */
  run(name: string, keys: Keys, args: readonly Arg[], late?: (reply: unknown) => void): Promise<unknown> {
    return this.#send(() => this.#call(name, keys, args), late);
  }

  /** GET, as `run` sends a script. */
  get(key: string): Promise<string | null> {
    if (this.#rest) return this.#send(() => this.#restCommand(['GET', key]) as Promise<string | null>);
    return this.#send(() => (this.#node ? this.#command(key, true, ['GET', key]) : this.#io['get']!(key)) as Promise<string | null>);
  }

  /** HGET, as `run` sends a script. */
  hget(key: string, field: string): Promise<string | null> {
    if (this.#rest) return this.#send(() => this.#restCommand(['HGET', key, field]) as Promise<string | null>);
    return this.#send(() => (this.#node ? this.#command(key, true, ['HGET', key, field]) : this.#io['hget']!(key, field)) as Promise<string | null>);
  }

  /** INFO `section` (a standalone Redis), with the timeout. */
  info(section: string): Promise<string> {
    if (this.#rest) return this.timed(this.#restCommand(['INFO', section]).then(String));
    const node = this.#node;
    return this.timed((node ? node.sendCommand(['INFO', section], PLAIN).then(String) : this.#io['info']!(section)) as Promise<string>);
  }

  /**
   * Opens a connection of the store's own (the client's `duplicate()`) for the wakes: `message`
   * hears every message of the channels it subscribes, `lost` is told when its connection is lost
   * (messages published from then on are missed), `reconnected` when it is back after a
   * disconnection (the client subscribes its channels again by itself: node-redis before it says
   * so, ioredis before any command asked from then on).
   */
  subscriber(message: (channel: string, message: string) => void, reconnected: () => void, lost: () => void = ignore): Subscriber {
    // Over HTTP there is no connection to hold: nothing is heard (`RedisStore.announces` is false),
    // and a deferred call asks again when its slot could first be free (lib/waiting.ts).
    if (this.#rest) return { subscribe: () => Promise.resolve(), close: ignore };
    const duplicate = (this.client as { duplicate?: unknown }).duplicate;
    if (typeof duplicate !== 'function') throw new StoreUnavailableError('The Redis client cannot open a subscriber connection (no duplicate())');
    // A duplicate of a client that ended would be a connection of the store's own that nothing closes.
    if (this.ended) throw clientEnded(this.#node !== undefined);
    let connections = 0;
    const onReady = (): void => {
      // Back after a disconnection (the client subscribes again by itself): every waiting call asks again.
      if (++connections > 1) reconnected();
    };
    if (this.#node) {
      const subscriber = this.#node.duplicate();
      // A lost subscriber reconnects on its own; waiters ask again at their bounds meanwhile.
      subscriber.on('error', lost);
      subscriber.on('end', lost);
      subscriber.on('reconnecting', lost);
      subscriber.on('ready', onReady);
      const connected = subscriber.connect();
      connected.catch(ignore);
      const listener = (text: string, channel: string): void => message(channel, text);
      return {
        subscribe: (channel) => connected.then(() => subscriber.subscribe(channel, listener)),
        close: () => {
          try {
            subscriber.destroy();
          } catch {
            // node-redis 5 throws when the connection is closed already.
          }
        },
      };
    }
    const subscriber = (duplicate as () => IORedisSubscriber).call(this.client);
    subscriber.on('error', () => hearLateErrors(subscriber));
    subscriber.on('close', lost);
    subscriber.on('ready', onReady);
    subscriber.on('message', message);
    return {
      subscribe: (channel) => subscriber.subscribe(channel),
      close: () => {
        // Ended in the middle of a TLS handshake, its socket may still report an error: heard.
        hearLateErrors(subscriber);
        subscriber.disconnect();
      },
    };
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
    if (this.ended) return Promise.reject(clientEnded(this.#node !== undefined));
    const { signal } = this.#connection;
    if (signal.aborted) return Promise.reject(this.#unreachable());
    return withTimeout(send(), this.#timeoutMs, () => this.#timedOut(), late, signal).catch((error: unknown) => {
      throw this.#endedError(error);
    });
  }

  /**
   * Calls a script. ioredis: with the number of keys first on a standalone Redis, without it on a
   * Cluster (fixed there). node-redis: EVALSHA, routed by the first key on a Cluster.
   */
  #call(name: string, given: Keys, args: readonly Arg[]): Promise<unknown> {
    if (this.#rest) return this.#restScript(name, isKeyList(given) ? given : given.list(), args);
    const raw = this.#raw;
    if (raw && !isKeyList(given)) return this.#written(raw, name, given, args);
    const keys = isKeyList(given) ? given : given.list();
    if (this.#node) return this.#evalSha(name, keys, args);
    if (!this.cluster) return this.#io[name]!(keys.length, ...keys, ...args);
    if (keys.length !== CLUSTER_KEYS_OF.get(name)) name = this.#clusterVariant(name, keys.length);
    return this.#io[name]!(...keys, ...args);
  }

  /**
   * ioredis, standalone: EVALSHA written as one buffer; on NOSCRIPT alone (the script did not run),
   * sent again as the command ioredis defined, which loads it.
   */
  async #written(raw: (bytes: Buffer) => Promise<unknown>, name: string, keys: ScriptKeys, args: readonly Arg[]): Promise<unknown> {
    try {
      return await raw(evalShaCommand(BY_NAME.get(name)!.sha, keys, args));
    } catch (error) {
      if (!noScript(error)) throw error;
      const list = keys.list();
      return this.#io[name]!(list.length, ...list, ...args);
    }
  }

  /** A script on an ioredis Cluster for a call of `count` keys (one slot), defined the first time it is needed. */
  #clusterVariant(script: string, count: number): string {
    const name = `${script}k${count}`;
    if (typeof this.#io[name] !== 'function') this.#io.defineCommand(name, { lua: BY_NAME.get(script)!.lua, numberOfKeys: count });
    return name;
  }

  /** node-redis: EVALSHA; on NOSCRIPT alone (the script did not run), EVAL once, which also loads it. */
  async #evalSha(name: string, keys: readonly string[], args: readonly Arg[]): Promise<unknown> {
    const { sha, lua } = BY_NAME.get(name)!;
    const command: Array<string | Buffer> = ['EVALSHA', sha, String(keys.length), ...keys];
    for (const arg of args) command.push(typeof arg === 'number' ? String(arg) : arg);
    try {
      return await this.#command(keys[0], false, command);
    } catch (error) {
      if (!noScript(error)) throw error;
      return this.#command(keys[0], false, ['EVAL', lua, ...command.slice(2)]);
    }
  }

  /**
   * `@upstash/redis`: EVALSHA, and EVAL once on NOSCRIPT alone (the script did not run: a Redis
   * that lost its scripts, or a replica that never had them). One request each.
   */
  async #restScript(name: string, keys: readonly string[], args: readonly Arg[]): Promise<unknown> {
    const { sha, lua } = BY_NAME.get(name)!;
    const rest: Array<string | number> = [String(keys.length), ...keys];
    for (const arg of args) rest.push(restArg(arg));
    try {
      return await this.#restCommand(['EVALSHA', sha, ...rest]);
    } catch (error) {
      if (!noScript(error)) throw error;
      return this.#restCommand(['EVAL', lua, ...rest]);
    }
  }

  /** One command through the REST API: its result, or Redis's error as an `Error` with Redis's message. */
  async #restCommand(command: ReadonlyArray<string | number>): Promise<unknown> {
    let reply: RestReply;
    try {
      reply = await this.#rest!.request({ body: command });
    } catch (error) {
      // The client's error repeats the whole command (a script's text with EVAL): kept as the cause.
      throw error instanceof Error ? new Error(restError(error.message), { cause: error }) : error;
    }
    if (reply.error !== undefined && reply.error !== null) throw new Error(restError(reply.error));
    return reply.result ?? null;
  }

  /** node-redis: one command, routed by `key` on a Cluster, its reply read with the default type mapping. */
  #command(key: string | undefined, readonly: boolean, command: ReadonlyArray<string | Buffer>): Promise<unknown> {
    return this.cluster ? this.#node!.sendCommand(key, readonly, command, PLAIN) : this.#node!.sendCommand(command, PLAIN);
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
    return this.ended && !(error instanceof StoreUnavailableError) ? clientEnded(this.#node !== undefined, error) : error;
  }

  #timedOut(): StoreUnavailableError {
    const message = `Redis did not answer within ${this.#timeoutMs} ms (commandTimeoutMs)`;
    const status = this.status;
    if (status === undefined || status === 'ready') return new StoreUnavailableError(message);
    return new StoreUnavailableError(`${message}; the client is ${status} (${this.#why()})`, this.#lastError);
  }

  /** The client cannot connect: its state and the error of its latest attempt, which is the cause. */
  #unreachable(): StoreUnavailableError {
    return new StoreUnavailableError(`Redis cannot be reached: the client is ${this.status} (${this.#why()})`, this.#lastError);
  }

  #why(): string {
    const cause = this.#lastError;
    return cause === undefined ? 'no error reported yet' : cause instanceof Error ? cause.message || cause.name : String(cause);
  }

  /** Stops listening to the client's events (the client stays the caller's). */
  close(): void {
    for (const [event, listener] of this.#events) this.#io.off?.(event, listener);
  }
}

function isKeyList(keys: Keys): keys is readonly string[] {
  return Array.isArray(keys);
}

/** A connection's signal: every command under way listens to it. */
function connection(): AbortController {
  const controller = new AbortController();
  setMaxListeners(0, controller.signal);
  return controller;
}
