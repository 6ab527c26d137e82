import { randomBytes } from 'node:crypto';
import { StoreUnavailableError, ThrottleConfigError } from '../errors.js';
import { checkNamespace, keyNames } from '../keys.js';
import type { Rule } from '../rules.js';
import type { InspectResult, ReserveRequest, ReserveResult, RestoredSlot, Settlement, Store } from '../store.js';
import { Journal } from './journal.js';
import { MAX_TIMER_MS } from '../sleep.js';
import { scripts } from './redis-scripts.js';

export interface RedisStoreOptions {
  /**
   * First part of every key: `<prefix>:<throttle name>:{<user key>}:log`. Letters, digits, `.`, `_`, `-`, `/`.
   * @default 'vt'
   */
  readonly prefix?: string;
  /**
   * Longest wait for one Redis command, in ms: past it the call fails with `StoreUnavailableError`
   * (and the throttle's `onStoreError` policy applies), so a hung or unreachable Redis never hangs
   * callers. A decision that Redis still carries out after the timeout books a slot nobody uses:
   * it counts as in flight until `maxHoldMs` after its estimate (safe, only less full).
   * @default 5_000
   */
  readonly commandTimeoutMs?: number;
  /**
   * Detects a Redis that lost its data (restart without persistence, `FLUSHALL`, failover to a
   * replica that lagged) and puts back this process's calls still inside their windows, from a
   * journal kept in memory, before anything new is decided (docs/design.md §11). `false` turns it off.
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

type ScriptFn = (...args: Array<string | number>) => Promise<unknown>;
type ScriptedClient = RedisClientLike & Record<string, ScriptFn> & { readonly isCluster?: boolean };

/** Keys of each script on a Cluster, where a batch holds one user key's three keys and no epoch key. */
const CLUSTER_KEYS = { batch: 3, inspect: 2, pause: 3, restore: 3, epoch: 1 } as const satisfies Record<keyof typeof scripts, number>;

/** Times a decision meets a changed epoch (and puts back its journal) before it gives up. */
const MAX_RECOVERIES = 3;

/** Operations per `EVALSHA` at most; more wait for the next one (sent at once, pipelined by ioredis). */
const MAX_BATCH = 256;

/** Restores in flight at once while a journal is put back (ioredis pipelines them on one connection). */
const RESTORE_CONCURRENCY = 128;

/** One operation waiting for the next batch (see lua/includes/ops.lua for the arguments). */
interface Op {
  readonly type: 'r' | 's' | 'c';
  readonly namespace: string;
  readonly key: string;
  /** The operation's own arguments before the rules: reserve COST .. MAX_HOLD, settle RETAIN, confirm MAX_HOLD. */
  readonly head: ReadonlyArray<string | number>;
  /** Rules as R, then R pairs (reserve, confirm). */
  readonly rules: readonly number[];
  /** Settlement pairs (reserve, settle) or one START, FIRST, COST triple (confirm). */
  readonly items: ReadonlyArray<string | number>;
  readonly resolve: (reply: unknown) => void;
  readonly reject: (error: unknown) => void;
  /** Times the batch found the store had lost its data. */
  tries: number;
}

/**
 * Shares each key's log through Redis (standalone or Cluster), so limits hold across processes
 * and machines. The decisions, completions and confirmations one process has within an event-loop
 * turn go as one `EVALSHA` of `lua/batch.lua` per namespace (per key on a Cluster), which reads the
 * time with `TIME` (the store's clock, never the worker's). Scripts are registered with ioredis
 * `defineCommand`, which sends EVALSHA and falls back to EVAL on NOSCRIPT (also in pipelines), so a
 * `SCRIPT FLUSH` or a restarted Redis is recovered transparently.
 *
 * The client stays the caller's: `close()` does not quit it. ioredis `enableAutoPipelining` batches
 * decisions into fewer writes, which helps with a busy or distant Redis (and Cluster); against a
 * local standalone Redis it measured slower (docs/benchmarks.md), so measure before enabling it.
 */
export class RedisStore implements Store {
  readonly prefix: string;
  readonly #client: ScriptedClient;
  readonly #timeoutMs: number;
  /**
   * Namespace → the epoch value this process knows (see lua/epoch.lua): set once this process has
   * put back its journal under it (or, for a namespace seen for the first time, adopted it).
   */
  readonly #epochs = new Map<string, string>();
  readonly #epochLookups = new Map<string, Promise<string>>();
  readonly #recovering = new Map<string, Promise<boolean>>();
  /** Namespaces whose put-back did not finish: nothing is sent there before a recovery succeeds. */
  readonly #unrecovered = new Set<string>();
  /** Bumped by every recovery: a batch that met a changed epoch after one is just sent again. */
  #generation = 0;
  #queue: Op[] = [];
  #flushScheduled = false;
  readonly #journal: Journal | undefined;
  readonly #heartbeatMs: number;
  readonly #graceMs: number;
  #heartbeat: NodeJS.Timeout | undefined;
  #closed = false;
  readonly #cluster: boolean;
  /** Times this store found that Redis had lost its data and put back its journal. */
  recoveries = 0;

  constructor(client: RedisClientLike, options: RedisStoreOptions = {}) {
    if (client === null || typeof client !== 'object' || typeof client.defineCommand !== 'function') {
      throw new TypeError('Expected an ioredis Redis or Cluster client');
    }
    if (options === null || typeof options !== 'object') throw new ThrottleConfigError('Expected RedisStore options to be an object');
    this.prefix = checkNamespace('RedisStore prefix', options.prefix ?? 'vt');
    this.#timeoutMs = positive('commandTimeoutMs', options.commandTimeoutMs ?? 5_000);
    const recovery = options.recovery ?? {};
    if (recovery !== false && (recovery === null || typeof recovery !== 'object')) {
      throw new ThrottleConfigError('Expected recovery to be false or an object');
    }
    this.#heartbeatMs = recovery === false ? 0 : positive('recovery.heartbeatMs', recovery.heartbeatMs ?? 500);
    this.#graceMs = recovery === false ? 0 : positive('recovery.graceMs', recovery.graceMs ?? 3_000);
    if (recovery !== false && this.#graceMs <= this.#heartbeatMs) {
      throw new ThrottleConfigError(`Expected recovery.graceMs (${this.#graceMs}) to be above recovery.heartbeatMs (${this.#heartbeatMs})`);
    }
    this.#journal = recovery === false ? undefined : new Journal();
    const scripted = client as ScriptedClient;
    this.#cluster = scripted.isCluster === true;
    for (const [op, { name, lua }] of Object.entries(scripts)) {
      // Standalone: no fixed number of keys, so the epoch key rides along in the same script. Cluster:
      // a fixed number, so that the first argument ioredis sees is a key, which it routes and
      // auto-pipelines by (with a leading count it takes the count for a key: one pipeline over all masters).
      if (typeof scripted[name] === 'function') continue;
      client.defineCommand(name, this.#cluster ? { lua, numberOfKeys: CLUSTER_KEYS[op as keyof typeof scripts] } : { lua });
    }
    this.#client = scripted;
  }

  /** The ioredis client this store runs on. */
  get client(): RedisClientLike {
    return this.#client;
  }

  async reserve(request: ReserveRequest): Promise<ReserveResult> {
    this.#journal?.settle(request.namespace, request.key, request.settle);
    const head: Array<string | number> = [
      request.cost,
      Number.isFinite(request.maxDelayMs) ? request.maxDelayMs : 'inf',
      request.holdMs,
      request.retainMs,
      request.defer ? 1 : 0,
      request.maxHoldMs,
    ];
    const reply = (await this.#enqueue({ type: 'r', namespace: request.namespace, key: request.key, head, rules: ruleArgs(request.rules), items: settlePairs(request.settle) })) as number[];
    const [status, waitMs, startAt, ruleIndex, first, now, tentative, retryMs] = reply as [number, number, number, number, number, number, number, number];
    const members: string[] = [];
    if (status === 1) {
      for (let i = 0; i < request.cost; i++) members.push(String(first + i));
      this.#journal?.book(request.namespace, request.key, members, startAt + request.holdMs, request.retainMs, request.maxHoldMs, now);
      this.#startHeartbeat();
    }
    return { granted: status === 1, deferred: status === 2, retryMs, waitMs, startAt, now, ruleIndex, members, tentative: tentative === 1 };
  }

  async settle(namespace: string, key: string, settle: readonly Settlement[], retainMs: number): Promise<void> {
    if (settle.length === 0) return;
    this.#journal?.settle(namespace, key, settle);
    await this.#enqueue({ type: 's', namespace, key, head: [retainMs], rules: [], items: settlePairs(settle) });
  }

  async inspect(namespace: string, key: string, rules: readonly Rule[]): Promise<InspectResult> {
    await this.#recovered(namespace);
    const { log, meta } = keyNames(this.prefix, namespace, key);
    const reply = (await this.#run(scripts.inspect.name, [log, meta], ruleArgs(rules))) as number[];
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
    const reply = await this.#enqueue({ type: 'c', namespace, key, head: [maxHoldMs], rules: ruleArgs(rules), items: [startAt, members[0]!, members.length] });
    return reply === 1;
  }

  async pause(namespace: string, key: string, ms: number, retainMs: number): Promise<number> {
    await this.#recovered(namespace);
    const { log, meta, flight } = keyNames(this.prefix, namespace, key);
    return (await this.#run(scripts.pause.name, [log, meta, flight], [Math.ceil(ms), retainMs])) as number;
  }

  async restore(namespace: string, key: string, slots: readonly RestoredSlot[], retainMs: number, maxHoldMs: number): Promise<void> {
    if (slots.length === 0) return;
    // New slot numbers are taken here: not before every live process has put back its journal,
    // whose numbers they could otherwise take (restore.lua skips a number that exists).
    await this.#untilReady(namespace);
    const entries: Array<string | number> = [];
    for (const { releaseInMs, cost } of slots) {
      for (let i = 0; i < cost; i++) entries.push('', Math.ceil(releaseInMs), 1);
    }
    const { log, meta, flight } = keyNames(this.prefix, namespace, key);
    const added = (await this.#run(scripts.restore.name, [log, meta, flight], [retainMs, maxHoldMs, 1, entries.length / 3, ...entries])) as Array<string | number>;
    // Journaled like the store's own decisions: they are put back if Redis later loses its data.
    const restored = [];
    for (let i = 0; i + 1 < added.length; i += 2) restored.push({ member: String(added[i]), score: Number(added[i + 1]) });
    this.#journal?.restored(namespace, key, restored, retainMs, maxHoldMs);
    if (restored.length > 0) this.#startHeartbeat();
  }

  /**
   * This process's own calls on the key that may still count, from the recovery journal, as
   * `restore()` takes them: a completed call until its completion, one without a completion until
   * `maxHoldMs` after its estimate (or after now). Empty with `recovery: false`.
   */
  recentCalls(namespace: string, key: string): RestoredSlot[] {
    if (this.#journal === undefined) return [];
    const now = this.#storeNow();
    const { maxHoldMs, entries } = this.#journal.keyEntries(namespace, key, now);
    return entries.map(({ score, settled }) => ({ releaseInMs: Math.ceil((settled ? score : Math.max(score, now) + maxHoldMs) - now), cost: 1 }));
  }

  /** Stops the epoch heartbeat. The client belongs to the caller and stays open. */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#heartbeat);
    this.#heartbeat = undefined;
  }

  /** Runs one script (inspect, pause, restore: rare operations, never batched) with a timeout. */
  #run(name: string, keys: readonly string[], args: ReadonlyArray<string | number>): Promise<unknown> {
    return this.#timed(this.#call(name, keys, args));
  }

  /** Calls a script: with the number of keys first on a standalone Redis, without it on a Cluster (fixed there). */
  #call(name: string, keys: readonly string[], args: ReadonlyArray<string | number>): Promise<unknown> {
    const command = this.#client[name]!.bind(this.#client);
    return this.#cluster ? command(...keys, ...args) : command(keys.length, ...keys, ...args);
  }

  /**
   * Queues an operation for the next batch. Everything this process asks within one turn of the
   * event loop goes to Redis together, at the next `setImmediate`: decisions, completions and
   * confirmations for the same key and with the same arguments merge into one operation, and
   * operations on different keys of one namespace share one `EVALSHA` (on a Cluster, one per key).
   */
  #enqueue(op: Omit<Op, 'resolve' | 'reject' | 'tries'>): Promise<unknown> {
    return new Promise((resolve, reject) => {
      this.#queue.push({ ...op, resolve, reject, tries: 0 });
      if (!this.#flushScheduled) {
        this.#flushScheduled = true;
        setImmediate(() => this.#flush());
      }
    });
  }

  #flush(): void {
    this.#flushScheduled = false;
    const ops = this.#queue;
    this.#queue = [];
    // Batches: one per namespace (its epoch rides along), or per key on a Cluster.
    const batches = new Map<string, Op[]>();
    for (const op of ops) {
      const id = this.#cluster ? `${op.namespace}\n${op.key}` : op.namespace;
      const batch = batches.get(id);
      if (batch) batch.push(op);
      else batches.set(id, [op]);
    }
    for (const batch of batches.values()) {
      for (let from = 0; from < batch.length; from += MAX_BATCH) void this.#send(batch.slice(from, from + MAX_BATCH));
    }
  }

  /** Sends one batch; a store that lost its data is recovered first and the batch sent again. */
  async #send(ops: Op[]): Promise<void> {
    const namespace = ops[0]!.namespace;
    try {
      let epoch = '';
      if (this.#journal !== undefined) {
        // Nothing of a namespace goes out while this process puts back its calls there.
        await this.#recovered(namespace);
        epoch = this.#epochs.get(namespace) ?? (await this.#epochOf(namespace));
      }
      const generation = this.#generation;
      const { keys, args, deliver } = encodeBatch(this.prefix, ops);
      // A Cluster script cannot reach the epoch key (another slot): the heartbeat checks it there.
      const checked = this.#cluster ? '' : epoch;
      if (checked !== '') keys.push(this.#epochKey(namespace));
      const reply = (await this.#timed(this.#call(scripts.batch.name, keys, [checked, ...args]))) as unknown[];
      if (reply[0] === 3) {
        // Sent before a recovery of this process finished, or the epoch's grace was only extended
        // (same id): sent again, not counted as a loss.
        const lost = generation === this.#generation && (await this.#recover(namespace));
        const retry = lost ? ops.filter((op) => op.tries++ < MAX_RECOVERIES) : ops;
        for (const op of ops) {
          if (!retry.includes(op)) op.reject(new StoreUnavailableError('Redis lost its data again while this process was putting its calls back'));
        }
        if (retry.length > 0) await this.#send(retry);
        return;
      }
      deliver(reply);
    } catch (error) {
      for (const op of ops) op.reject(error);
    }
  }

  #timed<T>(promise: Promise<T>): Promise<T> {
    // A timeout past what a timer can hold is as good as none.
    if (this.#timeoutMs > MAX_TIMER_MS) return promise;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_resolve, reject) => {
      timer = setTimeout(() => reject(new StoreUnavailableError(`Redis did not answer within ${this.#timeoutMs} ms (commandTimeoutMs)`)), this.#timeoutMs);
    });
    return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
  }

  #epochKey(namespace: string): string {
    return `${this.prefix}:${namespace}:epoch`;
  }

  /**
   * The namespace's epoch for a namespace this process has never seen, created without a grace
   * period if missing (a new deployment looks the same as a wiped one).
   */
  #epochOf(namespace: string): Promise<string> {
    let lookup = this.#epochLookups.get(namespace);
    if (!lookup) {
      lookup = this.#newEpoch(namespace, 0)
        .then((value) => {
          // A recovery that started meanwhile decides what this process knows.
          if (!this.#recovering.has(namespace) && !this.#unrecovered.has(namespace)) this.#epochs.set(namespace, value);
          return value;
        })
        .finally(() => this.#epochLookups.delete(namespace));
      this.#epochLookups.set(namespace, lookup);
    }
    return lookup;
  }

  /** Runs lua/epoch.lua: the epoch in force, created (ready `graceMs` from now) if missing. */
  #newEpoch(namespace: string, graceMs: number): Promise<string> {
    const id = randomBytes(6).toString('base64url');
    return this.#timed(this.#call(scripts.epoch.name, [this.#epochKey(namespace)], [id, graceMs]) as Promise<string>);
  }

  /**
   * Returns once no recovery of the namespace is running in this process and none is owed (a
   * put-back that failed is tried again first); rejects when that recovery fails.
   */
  async #recovered(namespace: string): Promise<void> {
    for (;;) {
      const running = this.#recovering.get(namespace);
      if (running) await running;
      else if (this.#unrecovered.has(namespace)) await this.#recover(namespace);
      else return;
    }
  }

  /**
   * Returns once this process knows the namespace's epoch in force (checked in Redis now) and it is
   * ready: every live process has put back its calls.
   */
  async #untilReady(namespace: string): Promise<void> {
    if (this.#journal === undefined) return;
    for (let round = 0; round < 100; round++) {
      await this.#recovered(namespace);
      const known = this.#epochs.get(namespace);
      if (known === undefined) {
        // A namespace never seen: as a first decision would.
        await this.#epochOf(namespace);
        continue;
      }
      const value = await this.#timed(this.#client.get!(this.#epochKey(namespace)) as Promise<string | null>);
      if (value !== known) {
        await this.#recover(namespace);
        continue;
      }
      const waitMs = readyOf(value) - this.#storeNow();
      if (waitMs <= 0) return;
      await new Promise((resolve) => setTimeout(resolve, Math.min(waitMs, this.#heartbeatMs)));
    }
    throw new StoreUnavailableError('The epoch of the namespace kept changing (Redis losing its data again and again)');
  }

  /**
   * One recovery at a time per namespace; callers that find one running wait for it. Resolves true
   * when Redis had lost the data (the journal was put back), false when the epoch only had its
   * grace extended, or had not changed.
   */
  #recover(namespace: string): Promise<boolean> {
    let recovery = this.#recovering.get(namespace);
    if (!recovery) {
      recovery = this.#putBack(namespace).finally(() => this.#recovering.delete(namespace));
      this.#recovering.set(namespace, recovery);
    }
    return recovery;
  }

  /**
   * Redis lost the namespace's data: takes (or creates, with a grace period during which nothing new
   * is decided) the new epoch, then puts back every call of the journal still inside its window, and
   * only then knows the epoch. If the put-back fails, the namespace stays owed a recovery: the next
   * operation (or heartbeat) puts the journal back again (restores never overwrite). While the
   * put-back runs, the epoch's ready time is kept ahead (#holdGrace), so that no process decides
   * anything before this one is done.
   */
  async #putBack(namespace: string): Promise<boolean> {
    const known = this.#unrecovered.has(namespace) ? undefined : this.#epochs.get(namespace);
    let epoch = await this.#newEpoch(namespace, this.#graceMs);
    if (known !== undefined && idOf(epoch) === idOf(known)) {
      // No loss: the same epoch, or its grace extended by a process still putting back.
      this.#epochs.set(namespace, epoch);
      return false;
    }
    this.#epochs.delete(namespace);
    this.#unrecovered.add(namespace);
    this.#generation += 1;
    for (let attempt = 1; ; attempt++) {
      const grace = this.#holdGrace(namespace, epoch);
      let current: string | null;
      try {
        await this.#restoreJournal(namespace);
        // Still the same epoch? A second loss during the put-back wiped what was put back before it.
        current = await this.#timed(this.#client.get!(this.#epochKey(namespace)) as Promise<string | null>);
      } finally {
        await grace.stop();
      }
      if (current !== null && idOf(current) === idOf(epoch)) {
        epoch = current;
        break;
      }
      if (attempt >= MAX_RECOVERIES) throw new StoreUnavailableError('Redis lost its data again while this process was putting its calls back');
      epoch = await this.#newEpoch(namespace, this.#graceMs);
    }
    this.recoveries += 1;
    this.#epochs.set(namespace, epoch);
    this.#unrecovered.delete(namespace);
    return true;
  }

  /**
   * Puts back the namespace's journal, RESTORE_CONCURRENCY keys at a time. A key whose restore fails
   * is tried once more after the others; a second failure rejects (once every other key is back).
   */
  async #restoreJournal(namespace: string): Promise<void> {
    let todo = this.#journal?.entriesOf(namespace, this.#storeNow()) ?? [];
    let failure: unknown;
    for (let pass = 0; pass < 2 && todo.length > 0; pass++) {
      const failed: typeof todo = [];
      let next = 0;
      const worker = async () => {
        while (next < todo.length) {
          const item = todo[next++]!;
          const { key, retainMs, maxHoldMs, entries } = item;
          const { log, meta, flight } = keyNames(this.prefix, namespace, key);
          const args: Array<string | number> = [retainMs, maxHoldMs, 0, entries.length];
          for (const { member, score, settled } of entries) args.push(member, score, settled ? 1 : 0);
          try {
            await this.#run(scripts.restore.name, [log, meta, flight], args);
          } catch (error) {
            failure ??= error;
            failed.push(item);
          }
        }
      };
      await Promise.all(Array.from({ length: Math.min(RESTORE_CONCURRENCY, todo.length) }, worker));
      todo = failed;
    }
    if (todo.length > 0) throw failure;
  }

  /**
   * While this process puts back its journal, keeps the epoch's ready time at least half a grace
   * period ahead: when less is left, `SET … XX GET` writes the same id with ready = now + graceMs
   * (GET and SET are all it needs). Processes that knew the epoch meet a changed value, read it
   * again and, finding the same id, only take the later ready time. If the SET finds no epoch, or
   * another one (Redis lost its data again), it stops (putting back the other epoch it overwrote):
   * the put-back then finds the epoch changed and starts again.
   */
  #holdGrace(namespace: string, epoch: string): { stop(): Promise<void> } {
    const key = this.#epochKey(namespace);
    let value = epoch;
    let stopped = false;
    let timer: NodeJS.Timeout | undefined;
    let writing: Promise<void> = Promise.resolve();
    const set = (next: string) => this.#timed(this.#client.set!(key, next, 'XX', 'GET') as Promise<string | null>);
    const extend = async (): Promise<boolean> => {
      try {
        const next = `${idOf(value)}:${Math.ceil(this.#storeNow() + this.#graceMs)}`;
        const old = await set(next);
        if (old !== null && idOf(old) === idOf(value)) {
          value = next;
          // Another process extended it further meanwhile: keep its time (never shorten a grace).
          if (readyOf(old) > readyOf(next)) {
            await set(old);
            value = old;
          }
        } else {
          // Lost again: nothing written, or another epoch, which stays.
          if (old !== null) await set(old);
          stopped = true;
        }
        return true;
      } catch {
        // Redis unreachable: the put-back fails too, or this is tried again shortly.
        return false;
      }
    };
    const schedule = (afterMs = 0): void => {
      if (stopped) return;
      const lead = this.#graceMs / 2;
      timer = setTimeout(() => {
        writing = extend().then((ok) => schedule(ok ? 0 : 50));
      }, Math.max(afterMs, Math.min(readyOf(value) - lead - this.#storeNow(), MAX_TIMER_MS)));
      timer.unref();
    };
    schedule();
    return {
      stop: async () => {
        stopped = true;
        clearTimeout(timer);
        await writing;
      },
    };
  }

  #storeNow(): number {
    return Date.now() + (this.#journal?.clockOffsetMs ?? 0);
  }

  /**
   * While the journal holds calls, checks every `heartbeatMs` that each namespace's epoch is the one
   * this process knows, so that an idle process puts back its calls within the grace period too.
   */
  #startHeartbeat(): void {
    if (this.#heartbeat !== undefined || this.#closed || this.#journal === undefined) return;
    this.#heartbeat = setTimeout(() => {
      this.#heartbeat = undefined;
      void this.#beat().finally(() => {
        if (this.#journal!.prune(this.#storeNow()) > 0) this.#startHeartbeat();
      });
    }, this.#heartbeatMs);
    this.#heartbeat.unref();
  }

  async #beat(): Promise<void> {
    for (const namespace of this.#journal!.namespaces()) {
      try {
        // A put-back that failed is tried again at once.
        if (this.#unrecovered.has(namespace)) {
          await this.#recover(namespace);
          continue;
        }
        const known = this.#epochs.get(namespace);
        const value = await this.#timed(this.#client.get!(this.#epochKey(namespace)) as Promise<string | null>);
        if (known === undefined) await this.#epochOf(namespace);
        else if (value !== known) await this.#recover(namespace);
      } catch {
        // Redis unreachable: the next beat, or the next decision, tries again.
      }
    }
  }
}

/**
 * Lays out a batch for lua/batch.lua: per key, completions first (merged into one settle), then the
 * decisions (callers with the same arguments merged into one reserve of COUNT calls), then the
 * confirmations (merged by rules). `deliver` hands each caller its part of the reply.
 */
function encodeBatch(prefix: string, ops: readonly Op[]): { keys: string[]; args: Array<string | number>; deliver: (reply: unknown[]) => void } {
  const keys: string[] = [];
  const groups = new Map<string, Map<string, Op[]>>();
  for (const op of ops) {
    let byKey = groups.get(op.key);
    if (!byKey) groups.set(op.key, (byKey = new Map()));
    // Merge what can be merged: settles per key, reserves and confirms with the same arguments.
    const id = op.type === 's' ? 's' : `${op.type}${op.head.join(',')}|${op.rules.join(',')}`;
    const same = byKey.get(id);
    if (same) same.push(op);
    else byKey.set(id, [op]);
  }
  const args: Array<string | number> = [];
  const receivers: Array<(reply: unknown) => void> = [];
  for (const [key, byKey] of groups) {
    const { log, meta, flight } = keyNames(prefix, ops[0]!.namespace, key);
    keys.push(log, meta, flight);
    const k = keys.length / 3;
    const ordered = [...byKey.values()].sort((a, b) => ORDER[a[0]!.type] - ORDER[b[0]!.type]);
    for (const merged of ordered) {
      const first = merged[0]!;
      if (first.type === 's') {
        const retain = Math.max(...merged.map((op) => op.head[0] as number));
        const pairs = merged.flatMap((op) => op.items);
        args.push('s', k, retain, pairs.length / 2, ...pairs);
        receivers.push(() => merged.forEach((op) => op.resolve(0)));
      } else if (first.type === 'r') {
        const pairs = merged.flatMap((op) => op.items);
        args.push('r', k, ...first.head, merged.length, ...first.rules, pairs.length / 2, ...pairs);
        receivers.push((reply) => merged.forEach((op, i) => op.resolve((reply as unknown[])[i])));
      } else {
        args.push('c', k, ...first.head, ...first.rules, merged.length, ...merged.flatMap((op) => op.items));
        receivers.push((reply) => merged.forEach((op, i) => op.resolve((reply as unknown[])[i])));
      }
    }
  }
  return {
    keys,
    args: [receivers.length, ...args],
    deliver: (reply) => receivers.forEach((receive, i) => receive(reply[i + 1])),
  };
}

const ORDER = { s: 0, r: 1, c: 2 } as const;

/** The id of an epoch value `<id>:<ready ms>`. */
function idOf(epoch: string): string {
  return epoch.slice(0, epoch.lastIndexOf(':'));
}

/** The ready time (ms, store clock) of an epoch value `<id>:<ready ms>`. */
function readyOf(epoch: string): number {
  return Number(epoch.slice(epoch.lastIndexOf(':') + 1));
}

function positive(what: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value <= 0) {
    throw new ThrottleConfigError(`Expected ${what} to be a whole number of ms above 0, got ${String(value)}`);
  }
  return value;
}

function ruleArgs(rules: readonly Rule[]): number[] {
  const args = [rules.length];
  for (const { limit, windowMs, bucketMs } of rules) args.push(limit, windowMs, bucketMs ?? 0);
  return args;
}

function settlePairs(settle: readonly Settlement[]): Array<string | number> {
  const args: Array<string | number> = [];
  for (const { member, releaseAt } of settle) args.push(member, releaseAt === null ? '' : Math.ceil(releaseAt));
  return args;
}
