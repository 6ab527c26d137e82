import { checkNamespace, keyNames } from '../keys.js';
import type { Rule } from '../rules.js';
import type { InspectResult, ReserveRequest, ReserveResult, Settlement, Store } from '../store.js';
import { scripts } from './redis-scripts.js';

export interface RedisStoreOptions {
  /**
   * First part of every key: `<prefix>:<throttle name>:{<user key>}:log`. Letters, digits, `.`, `_`, `-`, `/`.
   * @default 'vt'
   */
  readonly prefix?: string;
}

/**
 * The part of an ioredis `Redis` or `Cluster` client the store relies on. Declared here so that the
 * published types do not require ioredis (an optional peer dependency) to be installed.
 */
export interface RedisClientLike {
  defineCommand(name: string, definition: { numberOfKeys?: number; lua: string }): void;
}

type ScriptFn = (...args: Array<string | number>) => Promise<unknown>;
type ScriptedClient = RedisClientLike & Record<string, ScriptFn>;

/**
 * Shares each key's log through Redis (standalone or Cluster), so limits hold across processes
 * and machines. Every decision is one `EVALSHA` of `lua/reserve.lua`, which reads the time with
 * `TIME` (the store's clock, never the worker's). Scripts are registered with ioredis
 * `defineCommand`, which sends EVALSHA and falls back to EVAL on NOSCRIPT (also in pipelines).
 *
 * The client stays the caller's: `close()` does not quit it. ioredis `enableAutoPipelining` batches
 * decisions into fewer writes, which helps with a busy or distant Redis (and Cluster); against a
 * local standalone Redis it measured slower (docs/benchmarks.md), so measure before enabling it.
 */
export class RedisStore implements Store {
  readonly prefix: string;
  readonly #client: ScriptedClient;

  constructor(client: RedisClientLike, options: RedisStoreOptions = {}) {
    if (client === null || typeof client !== 'object' || typeof client.defineCommand !== 'function') {
      throw new TypeError('Expected an ioredis Redis or Cluster client');
    }
    this.prefix = checkNamespace('RedisStore prefix', options.prefix ?? 'vt');
    const scripted = client as ScriptedClient;
    for (const { name, numberOfKeys, lua } of Object.values(scripts)) {
      if (typeof scripted[name] !== 'function') client.defineCommand(name, { numberOfKeys, lua });
    }
    this.#client = scripted;
  }

  /** The ioredis client this store runs on. */
  get client(): RedisClientLike {
    return this.#client;
  }

  async reserve(request: ReserveRequest): Promise<ReserveResult> {
    const { log, meta, flight } = keyNames(this.prefix, request.namespace, request.key);
    const args: Array<string | number> = [
      log,
      meta,
      flight,
      request.cost,
      Number.isFinite(request.maxDelayMs) ? request.maxDelayMs : 'inf',
      request.holdMs,
      request.retainMs,
      request.defer ? 1 : 0,
      request.maxHoldMs,
      ...ruleArgs(request.rules),
      ...settleArgs(request.settle),
    ];
    const reply = (await this.#client[scripts.reserve.name]!(...args)) as number[];
    const [status, waitMs, startAt, ruleIndex, first, now, tentative, retryMs] = reply as number[] as [number, number, number, number, number, number, number, number];
    const members: string[] = [];
    if (status === 1) for (let i = 0; i < request.cost; i++) members.push(String(first + i));
    return { granted: status === 1, deferred: status === 2, retryMs, waitMs, startAt, now, ruleIndex, members, tentative: tentative === 1 };
  }

  async settle(namespace: string, key: string, settle: readonly Settlement[], retainMs: number): Promise<void> {
    if (settle.length === 0) return;
    const { log, meta, flight } = keyNames(this.prefix, namespace, key);
    await this.#client[scripts.settle.name]!(log, meta, flight, retainMs, ...settleArgs(settle));
  }

  async inspect(namespace: string, key: string, rules: readonly Rule[]): Promise<InspectResult> {
    const { log, meta } = keyNames(this.prefix, namespace, key);
    const reply = (await this.#client[scripts.inspect.name]!(log, meta, ...ruleArgs(rules))) as number[];
    return {
      now: reply[0]!,
      nextFreeInMs: reply[1]!,
      pausedForMs: reply[2]!,
      rules: rules.map(({ limit, windowMs }, r) => ({
        limit,
        windowMs,
        used: reply[3 + 2 * r]!,
        resetInMs: reply[4 + 2 * r]!,
      })),
    };
  }

  async confirm(namespace: string, key: string, startAt: number, members: readonly string[], rules: readonly Rule[], maxHoldMs: number): Promise<boolean> {
    const { log, meta, flight } = keyNames(this.prefix, namespace, key);
    const reply = await this.#client[scripts.confirm.name]!(log, meta, flight, startAt, members[0]!, members.length, maxHoldMs, ...ruleArgs(rules));
    return reply === 1;
  }

  async pause(namespace: string, key: string, ms: number, retainMs: number): Promise<number> {
    const { log, meta, flight } = keyNames(this.prefix, namespace, key);
    return (await this.#client[scripts.pause.name]!(log, meta, flight, Math.ceil(ms), retainMs)) as number;
  }

  async close(): Promise<void> {
    // The client belongs to the caller.
  }
}

function ruleArgs(rules: readonly Rule[]): number[] {
  const args = [rules.length];
  for (const { limit, windowMs } of rules) args.push(limit, windowMs);
  return args;
}

function settleArgs(settle: readonly Settlement[]): Array<string | number> {
  const args: Array<string | number> = [settle.length];
  for (const { member, releaseAt } of settle) args.push(member, releaseAt === null ? '' : Math.ceil(releaseAt));
  return args;
}
