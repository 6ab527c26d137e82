import { randomBytes } from 'node:crypto';
import { StoreUnavailableError, ThrottleConfigError } from '../errors.js';
import { encodeKey, keyNameParts, keyNames, type HashTag, type KeyNameParts, type KeyNames } from '../keys.js';
import type { Rule } from '../rules.js';
import type { Pace } from '../slot-plan.js';
import { StoreClock } from '../time.js';
import type { InspectResult, ReserveRequest, ReserveResult, RestoredSlot, Settlement, Store, StoreNotice } from '../store.js';
import { batchKeys, encodeBatch, groupByKey, ruleArgs, type DecideOp, type Decision, type Op } from './redis-batch.js';
import { EvictionWatch } from './redis-evictions.js';
import { Journal } from './redis-journal.js';
import { Reaper, rideOf, STALE_MS, Stamps } from './redis-liveness.js';
import { MAX_RECOVERIES, Recovery } from './redis-recovery.js';
import { redisStoreSettings, type RedisClientLike, type RedisStoreOptions } from './redis-options.js';
import { ClientDriver, clientKind } from './redis-client.js';
import { CODES, scripts } from './redis-scripts.js';
import { PauseFeeds } from './redis-pauses.js';
import { Wakes } from './redis-wakes.js';

/** Operations per `EVALSHA` at most (more go in the next one, sent at once, pipelined by the client), but for the operations of one key. */
const MAX_BATCH = 256;

/**
 * Shares each key's log through Redis (standalone or Cluster, Redis 7 or later), so limits hold
 * across processes and machines. The decisions and completions one process has within an
 * event-loop turn go as one `EVALSHA` of `lua/batch.lua` per namespace (per key on a Cluster),
 * which reads the time with `TIME` (the store's clock, never the worker's). The client is ioredis
 * or node-redis (lib/stores/redis-client.ts speaks to either): scripts go as EVALSHA, sent again as
 * EVAL on NOSCRIPT, so a `SCRIPT FLUSH` or a restarted Redis is recovered transparently.
 *
 * A decision that waits for a call in flight learns of its completion through one Redis channel per
 * namespace and process (`<prefix>:<name>:free<tag>`), on a second connection the store opens with
 * `duplicate()` the first time a decision waits. A completion publishes only when a process waits
 * on its key, to the first in the key's waiting list (they take turns): it alone hears it and asks again
 * (lua/includes/waiters.lua).
 *
 * The client stays the caller's: `close()` does not quit it (only the store's own subscriber). The
 * subscriber follows it: when the client ends (`quit()`, `disconnect()`), the subscriber closes too,
 * so that a process that closed its client exits even without `close()`.
 */
export class RedisStore implements Store {
  readonly prefix: string;
  /** Which part of a key's Redis keys is their hash tag (see `RedisStoreOptions.hashTag`). */
  readonly hashTag: HashTag;
  readonly #scripts: ClientDriver;
  readonly #recovery: Recovery | undefined;
  readonly #cluster: boolean;
  /** Suffix of this store's members, `<number><tag>`: unique across processes without a counter in Redis. */
  readonly #tag = `.${randomBytes(6).toString('base64url')}`;
  #seq = 0;
  readonly #parts = new Map<string, KeyNameParts>();
  #queue: Op[] = [];
  /** The next batch: none, at the next `setImmediate`, or at a timer (completions alone, see `settle`). */
  #flushScheduled: 'none' | 'now' | NodeJS.Timeout = 'none';
  /** `performance.now()` when the timer of `#flushScheduled` fires. */
  #flushAt = Infinity;
  /** The recovery heartbeat's next beat, while the journal holds calls. */
  #heartbeat: NodeJS.Timeout | undefined;
  #closed = false;
  readonly #wakes: Wakes;
  /** Redis's evictions, watched by the heartbeat (a standalone Redis, with recovery). */
  readonly #evictions: EvictionWatch | undefined;
  readonly #watchers = new Set<(notice: StoreNotice) => void>();
  /** A heartbeat failed and none has succeeded since: said once an episode. */
  #beatFailing = false;
  /** This process's liveness stamps while it holds slots booked ahead (with recovery; none without). */
  readonly #stamps: Stamps | undefined;
  /** Gives back the slots dead processes booked ahead on keys where this process waits. */
  readonly #reaper: Reaper;
  /** The vendor pauses announced in the namespaces where this process holds slots booked ahead. */
  readonly #pauses: PauseFeeds;
  /** Where Redis's clock stands against this process's, from the batches' round trips (the journal prunes by it). */
  readonly #clock = new StoreClock();

  constructor(client: RedisClientLike, options: RedisStoreOptions = {}) {
    if (clientKind(client) === undefined) {
      throw new ThrottleConfigError('Expected an ioredis Redis or Cluster client, or a node-redis client (createClient() or createCluster())');
    }
    const { prefix, hashTag, timeoutMs, recovery } = redisStoreSettings(options);
    this.prefix = prefix;
    this.hashTag = hashTag;
    // The subscriber follows the client: it closes when the client ends, and opens again when it is back.
    // A connection (again): claimed on a young Redis while this process holds no calls (lua/epoch.lua).
    const ready = (): void => {
      this.#wakes.ready();
      this.#claim();
    };
    this.#scripts = new ClientDriver(client, timeoutMs, { ended: () => this.#wakes.ended(), ready });
    this.#cluster = this.#scripts.cluster;
    this.#wakes = new Wakes(this.#scripts, (notice) => this.#notify(notice));
    this.#pauses = new PauseFeeds({
      channel: (namespace) => this.#pauseChannel(namespace),
      listen: (channel, listener) => this.#wakes.listen(channel, listener),
      liveSince: (channel) => this.#wakes.liveSince(channel),
    });
    this.#reaper = new Reaper({
      tag: this.#tag,
      cluster: this.#cluster,
      aliveKey: (namespace) => this.#aliveKey(namespace),
      names: (namespace, key) => this.#names(namespace, key),
      channel: (namespace) => this.#channel(namespace),
      run: (name, keys, args) => this.#scripts.run(name, keys, args),
      freed: (namespace, key) => this.#wakes.wake(`${this.#channel(namespace)}${this.#tag}`, key),
      notify: (notice) => this.#notify(notice),
    });
    if (recovery !== false) {
      const { heartbeatMs, graceMs } = recovery;
      this.#recovery = new Recovery({
        prefix: this.prefix,
        journal: new Journal((number) => this.#member(number)),
        heartbeatMs,
        graceMs,
        get: (key) => this.#scripts.get(key),
        run: (name, keys, args) => this.#scripts.run(name, keys, args),
        names: (namespace, key) => this.#names(namespace, key),
        kept: (namespace) => this.#kept(namespace),
        cluster: this.#cluster,
        client,
        // Before a batch was answered: this host's clock (the store's, for all this process knows).
        storeNow: () => (this.#clock.sampled ? this.#clock.earliestStoreTime(performance.now()) : Date.now()),
      });
      const clock = this.#recovery;
      this.#stamps = new Stamps({
        tag: this.#tag,
        seq: () => this.#seq,
        storeNow: () => clock.storeNow(),
        aliveKey: (namespace) => this.#aliveKey(namespace),
        run: (name, keys, args) => this.#scripts.run(name, keys, args),
        rides: (namespace) => this.#reaper.rides(namespace),
        read: (namespace, stamps) => this.#reaper.read(namespace, stamps),
        notify: (notice) => this.#notify(notice),
      });
      if (this.#scripts.status === 'ready') this.#claim();
      if (!this.#cluster) {
        const recovery = this.#recovery;
        // Evictions are over once none came for this long: long enough not to flip a namespace in
        // and out of being kept within one episode.
        const quietMs = Math.max(20 * heartbeatMs, graceMs);
        this.#evictions = new EvictionWatch({
          info: (section) => this.#scripts.info(section),
          keep: async (namespace, mode, max) => {
            const [kept] = this.#kept(namespace);
            return (await this.#scripts.run(scripts.keep.name, [kept!, `${kept!}:seen`], [mode, max, quietMs])) as number;
          },
          namespaces: () => recovery.journal.namespaces(),
          notify: (notice) => this.#notify(notice),
          quietMs,
          recentMs: 3 * heartbeatMs,
        });
      }
    }
  }

  /** Calls `listener` with what the store notices (evictions): every throttle on it emits them as `storeWarning`. */
  watch(listener: (notice: StoreNotice) => void): () => void {
    this.#watchers.add(listener);
    return () => this.#watchers.delete(listener);
  }

  /** Tells the watchers, unless the store closed or its client ended (its owner's doing: calls say so). */
  #notify(notice: StoreNotice): void {
    if (this.#closed || this.#scripts.ended) return;
    for (const listener of this.#watchers) listener(notice);
  }

  /** A call may count in several keys at once (`ReserveRequest.also`): on a Cluster, keys of one slot. */
  readonly multiKey = true;
  /** Vendor pauses reach `knownPause` as announcements on the store's subscriber (lib/stores/redis-pauses.ts). */
  readonly pausesHeardOverNetwork = true;

  /** One Redis: one clock (`TIME`). On a Cluster each master has its own. */
  get singleClock(): boolean {
    return !this.#cluster;
  }

  /**
   * The client has ended (`quit()`, `disconnect()`, or its `retryStrategy` gave up): every call
   * fails at once with `StoreUnavailableError`, whatever `onStoreError` says, until the client
   * connects again.
   */
  get ended(): boolean {
    return this.#scripts.ended;
  }

  /** The client this store runs on (ioredis or node-redis). */
  get client(): RedisClientLike {
    return this.#scripts.client;
  }

  /** Times this store found that Redis had lost its data and put back its journal. */
  get recoveries(): number {
    return this.#recovery?.recoveries ?? 0;
  }

  /**
   * Keys whose log this store found without its own calls (evicted, lost with a Cluster shard, or
   * rolled back by a failover) and put them back into, one by one.
   */
  get keysRestored(): number {
    return this.#recovery?.keysRestored ?? 0;
  }

  reserve(request: ReserveRequest): Promise<ReserveResult> {
    // Redis evicts under an allkeys-* policy: no key can be trusted, this one's included.
    const evicting = this.#evictions?.failure;
    if (evicting) return Promise.reject(evicting);
    const first = this.#seq + 1;
    this.#seq += request.cost;
    const { namespace, key, cost, maxHoldMs, retainMs, rules, maxDelayMs } = request;
    const also = request.also ?? NONE;
    if (also.length > 0 && this.#cluster && this.hashTag === 'key') {
      return Promise.reject(
        new ThrottleConfigError("Expected the keys of a call of several keys to share a Redis Cluster slot: give the store { hashTag: 'name' }"),
      );
    }
    const stay = request.stay === true;
    // Answered straight from the batch's reply (no async layer between the two).
    return new Promise<ReserveResult>((resolve, reject) =>
      this.#push({
        type: 'decide',
        namespace,
        key,
        cost,
        maxHoldMs,
        retainMs,
        rules,
        maxDelayMs,
        first,
        also,
        stay,
        resolve: (decision) => {
          try {
            resolve(this.#decided(request, first, decision));
          } catch (error) {
            reject(error);
          }
        },
        reject,
        tries: 0,
      }),
    );
  }

  /** A decision's answer, journaled (its slots booked) and the key's liveness and waiting kept up. */
  #decided(request: ReserveRequest, first: number, decision: Decision): ReserveResult {
    const { namespace, key, cost, maxHoldMs, retainMs } = request;
    const also = request.also ?? NONE;
    const { status, waitMs, startAt, ruleIndex, now, retryMs } = decision;
    let members: readonly string[] = NONE;
    if (status === CODES.status.booked) {
      members = cost === 1 ? [this.#member(first)] : Array.from({ length: cost }, (_, i) => this.#member(first + i));
      this.#recovery?.journal.book(namespace, key, first, cost, startAt + maxHoldMs, retainMs);
      for (const part of also) this.#recovery?.journal.book(namespace, part.key, first, cost, startAt + maxHoldMs, part.retainMs);
      this.#startHeartbeat();
      if (waitMs > 0) {
        this.#stamps?.holds(namespace, startAt, maxHoldMs);
        this.#pauses.holds(namespace, waitMs);
      }
    } else if (status === CODES.status.deferred) {
      this.#stamps?.holds(namespace, now + retryMs, maxHoldMs);
    }
    // Waiting behind slots booked ahead: those of a dead process are given back (lib/stores/redis-liveness.ts).
    const waitsFor = status === CODES.status.deferred ? retryMs : status === CODES.status.booked && waitMs > STALE_MS ? waitMs : 0;
    if (waitsFor > 0) for (const part of [request, ...also]) this.#reaper.waits(namespace, part.key, waitsFor);
    return { status: STATUSES[status]!, waitMs, retryMs, startAt, now, ruleIndex, members };
  }

  /**
   * Completions alone wait up to `coalesceMs` (none by default) for company: those of the next ms,
   * and any decision asked meanwhile (which sends at once), go in the same batch.
   */
  settle(namespace: string, key: string, settle: readonly Settlement[], coalesceMs = 0): Promise<void> {
    let pairs: number[];
    try {
      // Members of another store (or none) are in no log of this one: nothing to change. One
      // settlement (the usual) makes an array of two (an empty one that grows reserves room for 17).
      if (settle.length === 1) {
        const { member, releaseAt } = settle[0]!;
        pairs = member.endsWith(this.#tag) ? [Number.parseInt(member, 10), releaseAt === null ? -1 : Math.ceil(releaseAt)] : NONE_PAIRS;
      } else {
        pairs = [];
        for (const { member, releaseAt } of settle) {
          if (member.endsWith(this.#tag)) pairs.push(Number.parseInt(member, 10), releaseAt === null ? -1 : Math.ceil(releaseAt));
        }
      }
      if (pairs.length === 0) return SETTLED;
      this.#recovery?.journal.settle(namespace, key, pairs);
    } catch (error) {
      return Promise.reject(error as Error);
    }
    return new Promise<void>((resolve, reject) => this.#push({ type: 'complete', namespace, key, pairs, resolve, reject, tries: 0 }, coalesceMs));
  }

  /** While the client cannot connect (its latest attempt failed: refused, a TLS failure), resolves once it does. */
  reconnected(): Promise<void> | undefined {
    return this.#scripts.reconnected();
  }

  listen(namespace: string, listener: (key: string) => void): Promise<() => void> {
    return this.#wakes.listen(`${this.#channel(namespace)}${this.#tag}`, listener);
  }

  async leave(namespace: string, key: string): Promise<void> {
    await new Promise<void>((resolve, reject) => this.#push({ type: 'leave', namespace, key, resolve, reject, tries: 0 }));
  }

  async inspect(namespace: string, key: string, rules: readonly Rule[], maxHoldMs?: number): Promise<InspectResult> {
    await this.#recovery?.recovered(namespace);
    const { log, meta } = this.#names(namespace, key);
    const args = ruleArgs(rules);
    if (maxHoldMs !== undefined) args.push(maxHoldMs);
    const reply = (await this.#scripts.run(scripts.inspect.name, [log, meta], args)) as number[];
    const bookedAhead = reply[3]!;
    return {
      now: reply[0]!,
      nextFreeInMs: reply[1]!,
      pausedForMs: reply[2]!,
      bookedAhead,
      stored: reply[4] === 1,
      rules: rules.map(({ limit, windowMs }, r) => ({ limit, windowMs, used: reply[5 + 2 * r]!, resetInMs: reply[6 + 2 * r]! })),
    };
  }

  async reset(namespace: string, key: string, retainMs: number, maxHoldMs: number): Promise<void> {
    await this.#recovery?.recovered(namespace);
    const { log, meta } = this.#names(namespace, key);
    await this.#scripts.run(scripts.reset.name, [log, meta, ...this.#kept(namespace)], [retainMs, this.#channel(namespace), maxHoldMs]);
  }

  async pause(namespace: string, key: string, ms: number, maxHoldMs = 0): Promise<number> {
    await this.#recovery?.recovered(namespace);
    const { log, meta } = this.#names(namespace, key);
    const args = [Math.ceil(ms), maxHoldMs, this.#pauseChannel(namespace)];
    const end = (await this.#scripts.run(scripts.pause.name, [meta, log, ...this.#kept(namespace)], args)) as number;
    this.#pauses.heard(namespace, key, end);
    return end;
  }

  /**
   * The latest end of the key's vendor pauses set since `since` (a booking's ask), from their
   * announcements (lib/stores/redis-pauses.ts), while this process hears every one; else undefined.
   */
  knownPause(namespace: string, key: string, since: number): number | undefined {
    return this.#pauses.known(namespace, key, since);
  }

  async lineUp(namespace: string, key: string, fromMs: number, cost: number, paces: readonly Pace[], behind = false): Promise<number> {
    await this.#recovery?.recovered(namespace);
    const { meta } = this.#names(namespace, key);
    const args = [Math.ceil(fromMs), cost, behind ? 1 : 0, ...paces.flatMap((pace) => [pace.limit, Math.ceil(pace.windowMs)])];
    return (await this.#scripts.run(scripts.line.name, [meta, ...this.#kept(namespace)], args)) as number;
  }

  /** Read in the next batch, with the decisions and completions of the moment. */
  async pausedUntil(namespace: string, key: string): Promise<number> {
    return new Promise<number>((resolve, reject) => this.#push({ type: 'paused', namespace, key, resolve, reject, tries: 0 }));
  }

  async restore(namespace: string, key: string, slots: readonly RestoredSlot[], retainMs: number): Promise<void> {
    if (slots.length === 0) return;
    // Not before every live process has put back its journal: the calls it restores would be
    // counted against a log that is not whole yet (harmless), and journaled under a stale epoch.
    await this.#recovery?.untilReady(namespace);
    const args: Array<string | number> = [retainMs, 1, 0, 0];
    const restored: Array<{ number: number; releaseInMs: number }> = [];
    for (const { releaseInMs, cost } of slots) {
      for (let i = 0; i < cost; i++) {
        const number = ++this.#seq;
        args.push(this.#member(number), Math.ceil(releaseInMs));
        restored.push({ number, releaseInMs: Math.ceil(releaseInMs) });
      }
    }
    args[3] = restored.length;
    // Journaled like the store's own decisions, and before they are sent: a loss at any moment after
    // this finds them in the journal and puts them back (restores only add, and twice is once).
    if (this.#recovery) {
      const now = this.#recovery.storeNow();
      this.#recovery.journal.restored(
        namespace,
        key,
        restored.map(({ number, releaseInMs }) => ({ number, score: now + releaseInMs })),
        retainMs,
      );
      this.#startHeartbeat();
    }
    const { log, meta } = this.#names(namespace, key);
    await this.#scripts.run(scripts.restore.name, [log, meta, ...this.#kept(namespace)], args);
  }

  /**
   * This process's own calls on the key that may still count, from the recovery journal, as
   * `restore()` takes them. Empty with `recovery: false`.
   */
  recentCalls(namespace: string, key: string): RestoredSlot[] {
    if (this.#recovery === undefined) return [];
    const now = this.#recovery.storeNow();
    return this.#recovery.journal.keyEntries(namespace, key, now).map(({ score }) => ({ releaseInMs: Math.ceil(score - now), cost: 1 }));
  }

  /**
   * Whether this process may start its slots `members` booked to start at `startAt` (store clock):
   * false when another process may have given them back, taking this one for dead (its liveness
   * stamps stopped: a stalled event loop or link). The caller then books again.
   */
  mayStart(namespace: string, members: readonly string[], startAt: number): boolean {
    if (this.#stamps === undefined) return true;
    const tag = this.#tag;
    // One member (the usual) makes an array of one (an empty one that grows reserves room for 17).
    const numbers: number[] = members.length === 1 && members[0]!.endsWith(tag) ? [Number.parseInt(members[0]!, 10)] : [];
    if (members.length > 1) for (const member of members) if (member.endsWith(tag)) numbers.push(Number.parseInt(member, 10));
    return this.#stamps.mayStart(namespace, numbers, startAt);
  }

  /** Stops the epoch heartbeat, the liveness stamps (removing them) and the store's subscriber. The client belongs to the caller and stays open. */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#heartbeat);
    this.#heartbeat = undefined;
    this.#reaper.close();
    await this.#stamps?.close();
    this.#pauses.close();
    this.#wakes.close();
    this.#scripts.close();
  }

  /**
   * Claims the client's connection on a young Redis (lua/epoch.lua 'claim'). A claim that fails
   * only leaves the connection unclaimed: a process starting there waits its grace, as after a
   * loss. Said (`claimFailed`), once per connection: each is claimed once.
   */
  #claim(): void {
    if (this.#closed) return;
    this.#recovery?.claim().catch((error: unknown) => this.#notify(claimFailed(error)));
  }

  #names(namespace: string, key: string): KeyNames {
    return keyNames(this.prefix, namespace, key, this.hashTag);
  }

  /** What surrounds an encoded key in the namespace's Redis keys, per namespace. */
  #nameParts(namespace: string): KeyNameParts {
    let parts = this.#parts.get(namespace);
    if (parts === undefined) this.#parts.set(namespace, (parts = keyNameParts(this.prefix, namespace, this.hashTag)));
    return parts;
  }

  /**
   * The namespace's index of kept keys and its mark, as the last keys of a script
   * (lua/includes/log.lua, "Key lifetimes" and `VT_MARK`); none on a Cluster, where a script
   * reaches one slot.
   */
  #kept(namespace: string): string[] {
    return this.#cluster ? [] : [`${this.prefix}:${namespace}:kept`, `${this.prefix}:${namespace}:mark`];
  }

  /** The namespace's liveness stamps (lua/alive.lua). */
  #aliveKey(namespace: string): string {
    return `${this.prefix}:${namespace}:alive`;
  }

  #member(number: number): string {
    return `${number}${this.#tag}`;
  }

  /** The namespace's channel of vendor pauses (lua/pause.lua). */
  #pauseChannel(namespace: string): string {
    return `${this.prefix}:${namespace}:paused`;
  }

  /** The namespace's channel prefix, as the batch script takes it. */
  #channel(namespace: string): string {
    return `${this.prefix}:${namespace}:free`;
  }

  /**
   * Queues an operation for the next batch, which answers it. Everything this process asks within
   * one turn of the event loop goes to Redis together, at the next `setImmediate`: operations on
   * different keys of one namespace share one `EVALSHA` (on a Cluster, one per key). Completions
   * alone may wait `delayMs` for company (see `settle`).
   */
  #push(op: Op, delayMs = 0): void {
    this.#queue.push(op);
    if (this.#flushScheduled === 'now') return;
    const alone = op.type === 'complete' && delayMs > 0;
    const at = performance.now() + delayMs;
    if (alone && at >= this.#flushAt) return;
    if (this.#flushScheduled !== 'none') clearTimeout(this.#flushScheduled);
    if (alone) {
      this.#flushScheduled = setTimeout(() => this.#flush(), delayMs);
      this.#flushAt = at;
    } else {
      this.#flushScheduled = 'now';
      this.#flushAt = Infinity;
      setImmediate(() => this.#flush());
    }
  }

  #flush(): void {
    this.#flushScheduled = 'none';
    this.#flushAt = Infinity;
    const ops = this.#queue;
    this.#queue = [];
    // Per namespace (per key on a Cluster), the operations of each key, in the order asked.
    const batches = new Map<string, Map<string, Op[]>>();
    for (const op of ops) {
      // On a Cluster a call of several keys goes alone: its keys share a slot, which others need not.
      const id = !this.#cluster
        ? op.namespace
        : op.type === 'decide' && op.also.length > 0
          ? `${op.namespace}\n${op.key}\n${op.first}`
          : `${op.namespace}\n${op.key}`;
      let byKey = batches.get(id);
      if (!byKey) batches.set(id, (byKey = new Map()));
      const same = byKey.get(op.key);
      if (same) same.push(op);
      else byKey.set(op.key, [op]);
    }
    // At most MAX_BATCH operations a script, but a key's operations never split over two: the calls
    // of one line are decided in one step, in order.
    for (const byKey of batches.values()) {
      let batch: Op[][] = [];
      let size = 0;
      for (const keyOps of byKey.values()) {
        if (size > 0 && size + keyOps.length > MAX_BATCH) {
          void this.#send(batch);
          batch = [];
          size = 0;
        }
        batch.push(keyOps);
        size += keyOps.length;
      }
      if (size > 0) void this.#send(batch);
    }
  }

  /**
   * Sends one batch (`groups`: the operations of each of its keys, see `encodeBatch`); a store that
   * lost its data is recovered first and the batch sent again.
   */
  async #send(groups: Op[][]): Promise<void> {
    const namespace = groups[0]![0]!.namespace;
    const recovery = this.#recovery;
    // Pauses read alone (a call booked ahead came due with nothing else to send): an HGET each costs
    // Redis a fraction of a script's run. Not behind a recovery of the namespace, unlike a batch: a
    // put-back restores calls, never a pause (one lost with the data stays lost), so the read gives
    // the same answer before and after it, and the call's slot, journaled, is put back either way.
    if (groups.every((ops) => ops.every((op) => op.type === 'paused'))) {
      for (const ops of groups) {
        for (const op of ops) {
          if (op.type !== 'paused') continue;
          this.#scripts.hget(this.#names(namespace, op.key).meta, 'pause').then((end) => op.resolve(Number(end ?? 0)), op.reject);
        }
      }
      return;
    }
    try {
      let epoch = '';
      let soft = '0';
      if (recovery) {
        // Nothing of a namespace goes out while this process puts back its calls there.
        await recovery.recovered(namespace);
        // Completions alone need no epoch check: on a store that lost its data they change
        // nothing (ZADD XX), and the next decision finds the loss.
        if (groups.some((ops) => ops.some((op) => op.type === 'decide'))) epoch = await recovery.epochOf(namespace);
        else if (groups.some((ops) => ops.some((op) => op.type === 'check'))) {
          // The heartbeat's checks, under the epoch this process knows: a key then need not compare
          // the Redis that took its bookings (meta `r`, INFO); a changed one does not stop them.
          const known = recovery.epochOf(namespace);
          if (typeof known === 'string') [epoch, soft] = [known, '1'];
        }
      }
      const generation = recovery?.generation ?? 0;
      // A liveness stamp or a read of the stamps, when due, rides the batch (a standalone Redis: on
      // a Cluster the stamps live in another slot). Taken just before the batch goes: stamps are
      // sent in the order they are written.
      const ride = this.#cluster ? undefined : rideOf(this.#stamps, this.#reaper, namespace);
      const { users, fields, deliver, booked } = encodeBatch(groups, recovery?.checks(namespace), ride);
      // A Cluster script cannot reach the epoch key (another slot): the heartbeat checks it there.
      const checked = this.#cluster ? '' : epoch;
      const extra = this.#kept(namespace);
      if (checked !== '') extra.unshift(recovery!.epochKey(namespace));
      const args: Array<string | number | Buffer> = [
        checked,
        this.#tag,
        this.#channel(namespace),
        recovery?.graceMs ?? 0,
        fields,
        this.#cluster ? '0' : '1',
        soft,
      ];
      if (ride) {
        extra.push(this.#aliveKey(namespace));
        args.push(...ride.args);
      }
      const keys = batchKeys(this.#nameParts(namespace), users, extra);
      // A batch that answers after commandTimeoutMs: its callers got StoreUnavailableError, and the
      // slots it booked for them are given back.
      const late = (reply: unknown): void => this.#giveBack(booked(reply));
      // The operations as one string of fields (lua/batch.lua's FIELDS): far cheaper to send than one argument each.
      const sentAt = performance.now();
      const reply = await this.#scripts.run(scripts.batch.name, keys, args, late);
      // NOW_MS: the store's reading (0 where the batch read no clock).
      if (Array.isArray(reply) && typeof reply[1] === 'number' && reply[1] > 0) this.#clock.sample(sentAt, performance.now(), reply[1]);
      if (Array.isArray(reply) && reply[0] === CODES.batch.epochChanged && recovery) {
        // Sent before a recovery of this process finished, or the epoch's grace was only extended
        // (same id): sent again, not counted as a loss.
        const lost = generation === recovery.generation && (await recovery.recover(namespace));
        if (!lost) return await this.#send(groups);
        const ops = groups.flat();
        const retry = ops.filter((op) => op.tries++ < MAX_RECOVERIES);
        for (const op of ops) {
          if (!retry.includes(op)) op.reject(new StoreUnavailableError('Redis lost its data again while this process was putting its calls back'));
        }
        if (retry.length > 0) await this.#send(groupByKey(retry));
        return;
      }
      const { again, lost, held, stampAt, stamps } = deliver(reply);
      // The epoch this process knows was in place when the batch ran (a batch of checks alone goes
      // on past a changed one, and says so): the heartbeat need not read it this beat.
      if (checked !== '' && (reply as unknown[])[0] === CODES.batch.done) recovery?.epochChecked(namespace, checked, sentAt);
      if (ride?.ticket) this.#stamps?.answered(ride.ticket, stampAt);
      if (stamps) this.#reaper.read(namespace, stamps);
      if (!recovery) return;
      if (lost.length > 0 || held.length > 0) {
        for (const key of [...lost, ...held]) recovery.journal.forgetLives(namespace, key);
        // Evicted, most likely: the watch finds out at once, and keeps the keys put back now.
        if (lost.length > 0) await this.#evictions?.check();
        await recovery.restoreKeys(namespace, lost, held);
        // Its waiting list may be gone with the key: this process's calls waiting there ask again
        // (deferred while the key is held) instead of waiting for a wake that may never come.
        for (const key of lost) this.#wakes.wake(`${this.#channel(namespace)}${this.#tag}`, encodeKey(key));
      }
      if (again.length === 0) return;
      // Decisions on keys that failed a check: asked again, now that this process's calls are back
      // (the key is held, so they are deferred until every process has put back its own).
      const retry = again.filter((op) => op.tries++ < MAX_RECOVERIES);
      for (const op of again) {
        if (!retry.includes(op)) op.reject(new StoreUnavailableError('Redis kept losing the data of a key while this process was putting its calls back'));
      }
      if (retry.length > 0) await this.#send(groupByKey(retry));
    } catch (error) {
      const failure = outOfMemory(error) ?? error;
      for (const ops of groups) for (const op of ops) op.reject(failure);
    }
  }

  /**
   * The namespace's throttle closes: each key this process booked slots on lately lives no longer
   * than its slots count (bookings made it live to their bounds; completions came since). Without
   * `recovery` (no journal of the keys) they live to their bounds.
   */
  async tidy(namespace: string): Promise<void> {
    const recovery = this.#recovery;
    if (recovery === undefined) return;
    const keys = recovery.journal.entriesOf(namespace, recovery.storeNow());
    // The logs' lives are shortened: what this process believed of them no longer holds.
    recovery.journal.forgetLives(namespace);
    await Promise.all(
      keys.map(
        ({ key, retainMs }) => new Promise<void>((resolve, reject) => this.#push({ type: 'tidy', namespace, key, retainMs, resolve, reject, tries: 0 })),
      ),
    );
  }

  /** Removes the slots of decisions whose callers were told the store failed (their answer came too late). */
  #giveBack(ops: readonly DecideOp[]): void {
    for (const op of ops) {
      const settle = Array.from({ length: op.cost }, (_, i) => ({ member: this.#member(op.first + i), releaseAt: null }));
      // Best effort: a slot not given back counts to its bound (maxHoldMs), as the call's store failure said.
      for (const key of [op.key, ...op.also.map((part) => part.key)]) this.settle(op.namespace, key, settle).catch(() => undefined);
    }
  }

  /**
   * While the recovery journal holds calls: every `heartbeatMs`, checks (in the next batch) the
   * keys of each namespace that no decision checked within a beat, and the namespace's epoch.
   */
  #startHeartbeat(): void {
    const recovery = this.#recovery;
    if (recovery === undefined || this.#heartbeat !== undefined || this.#closed) return;
    this.#heartbeat = setTimeout(() => {
      this.#heartbeat = undefined;
      void this.#beat(recovery).finally(() => {
        if (recovery.journal.prune(recovery.storeNow()) > 0 || this.#evictions?.active) this.#startHeartbeat();
      });
    }, recovery.heartbeatMs);
    this.#heartbeat.unref();
  }

  /**
   * One beat. A beat that fails (Redis unreachable, a command refused) says so once
   * (`heartbeatFailed`), until a beat succeeds; the next beat, or the next decision, tries again.
   */
  async #beat(recovery: Recovery): Promise<void> {
    const startedAt = performance.now();
    await this.#evictions?.check();
    let failure: unknown;
    for (const namespace of recovery.journal.namespaces()) {
      try {
        const keys = recovery.unchecked(namespace);
        // One promise for the beat's checks (a key whose check fails fails the beat, as the first).
        if (keys.length > 0) {
          await new Promise<void>((resolve, reject) => {
            let left = keys.length;
            const checked = (): void => {
              if (--left === 0) resolve();
            };
            for (const key of keys) this.#push({ type: 'check', namespace, key, resolve: checked, reject, tries: 0 });
          });
        }
        await recovery.checkEpoch(namespace, startedAt);
      } catch (error) {
        failure ??= error;
      }
    }
    if (failure === undefined) {
      this.#beatFailing = false;
      return;
    }
    if (this.#beatFailing) return;
    this.#beatFailing = true;
    const why = failure instanceof Error ? failure.message : String(failure);
    this.#notify({
      kind: 'heartbeatFailed',
      error: failure,
      message: `The recovery heartbeat cannot check Redis for lost data (${why}): until a beat succeeds (one every heartbeatMs), a loss on keys no decision asks about goes unnoticed, and the calls booked there are not put back. Said once until then`,
    });
  }
}

const NONE: readonly never[] = [];
const SETTLED: Promise<void> = Promise.resolve();
const NONE_PAIRS: number[] = [];

function claimFailed(error: unknown): StoreNotice {
  const why = error instanceof Error ? error.message : String(error);
  return {
    kind: 'claimFailed',
    error,
    message: `The store cannot claim its new connection on a young Redis (${why}): a process that starts on a namespace there waits graceMs before deciding, as after a loss of data. Check the Redis user may run the throttle's scripts on its keys`,
  };
}

/**
 * Redis refusing a write at `maxmemory` (`OOM command not allowed …`: every write once full under
 * `noeviction`, and under other policies when evicting cannot free enough), as the store failure it is.
 */
function outOfMemory(error: unknown): StoreUnavailableError | undefined {
  if (!(error instanceof Error) || !error.message.startsWith('OOM')) return undefined;
  return new StoreUnavailableError(
    `Redis is out of memory: it refused the throttle's write at maxmemory (${error.message}). Fix: give Redis more memory (maxmemory) or free some; under maxmemory-policy noeviction it refuses every write until then`,
    error,
  );
}

/** A decided call's status, by its code. */
const STATUSES: Record<number, ReserveResult['status']> = {
  [CODES.status.booked]: 'booked',
  [CODES.status.deferred]: 'deferred',
  [CODES.status.refused]: 'refused',
};
