import { StoreUnavailableError } from '../errors.js';
import { encodeKey, type RedisNames } from '../keys.js';
import type { StoreClock } from '../time.js';
import { batchKeys, encodeBatch, groupByKey, type DecideOp, type Op } from './redis-batch.js';
import type { ClientDriver } from './redis-client.js';
import type { EvictionWatch } from './redis-evictions.js';
import { rideOf, type Reaper, type Ride, type Stamps } from './redis-liveness.js';
import type { Heartbeat } from './redis-heartbeat.js';
import { MAX_RECOVERIES, type Recovery } from './redis-recovery.js';
import { CODES, scripts } from './redis-scripts.js';
import type { Wakes } from './redis-wakes.js';

/*
 * When and how the batches of lib/stores/redis-batch.ts go to Redis: the operations of one turn of
 * the event loop gathered, sent as one EVALSHA per namespace (per key on a Cluster), and a loss the
 * reply reveals recovered before the batch is sent again.
 */

/** Operations per `EVALSHA` at most (more go in the next one, sent at once, pipelined by the client), but for the operations of one key. */
const MAX_BATCH = 256;

/** What a batch queue sends through, and what it keeps up with each answer. */
export interface BatchQueueDeps {
  readonly driver: ClientDriver;
  readonly names: RedisNames;
  readonly cluster: boolean;
  /** Puts back this process's calls after a loss (none with `recovery: false`). */
  readonly recovery: Recovery | undefined;
  /** Its beats ride the batches when due (`Heartbeat.ride`). */
  readonly heartbeat: Heartbeat | undefined;
  /** This process's liveness stamps, and the reader of others' (a stamp or a read rides a batch when due). */
  readonly stamps: Stamps | undefined;
  readonly reaper: Reaper;
  /** Redis evicting: a key found lost is most likely evicted, and the watch finds out at once. */
  readonly evictions: EvictionWatch | undefined;
  /** Wakes this process's calls waiting on a key whose waiting list may be gone with its data. */
  readonly wakes: Wakes;
  /** Sampled from each batch's reply (NOW_MS). */
  readonly clock: StoreClock;
}

/**
 * The operations this process has for Redis, sent in batches. Everything it asks within one turn of
 * the event loop goes to Redis together, at the next `setImmediate`: operations on different keys
 * of one namespace share one `EVALSHA` of lua/batch.lua (on a Cluster, one per key). Completions
 * alone may wait for company (`push`'s `delayMs`). A namespace that lost its data is recovered
 * before its batch goes, and the batch sent again.
 */
export class BatchQueue {
  readonly #deps: BatchQueueDeps;
  #queue: Op[] = [];
  /** The next batch: none, at the next `setImmediate`, or at a timer (completions alone). */
  #flushScheduled: 'none' | 'now' | NodeJS.Timeout = 'none';
  /** `performance.now()` when the timer of `#flushScheduled` fires. */
  #flushAt = Infinity;

  constructor(deps: BatchQueueDeps) {
    this.#deps = deps;
  }

  /** Queues an operation for the next batch, which answers it; a completion alone waits up to `delayMs` for company. */
  push(op: Op, delayMs = 0): void {
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
    // A beat that is due rides this flush: its checks join the operations (queued without
    // scheduling another flush), and its reading of evictions goes with the first batch. Not a
    // flush of pause reads alone, which go as an HGET each (`#send`).
    this.#flushScheduled = 'now';
    if (this.#queue.some((op) => op.type !== 'paused')) this.#deps.heartbeat?.ride();
    this.#flushScheduled = 'none';
    this.#flushAt = Infinity;
    let reading = this.#deps.heartbeat?.takeReading();
    const ops = this.#queue;
    this.#queue = [];
    const { cluster } = this.#deps;
    // Per namespace (per key on a Cluster), the operations of each key, in the order asked.
    const batches = new Map<string, Map<string, Op[]>>();
    for (const op of ops) {
      // On a Cluster a call of several keys goes alone: its keys share a slot, which others need not.
      const id = !cluster
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
          void this.#send(batch, reading);
          reading = undefined;
          batch = [];
          size = 0;
        }
        batch.push(keyOps);
        size += keyOps.length;
      }
      if (size > 0) void this.#send(batch, reading);
      reading = undefined;
    }
    reading?.(undefined);
  }

  /**
   * Sends one batch (`groups`: the operations of each of its keys, see `encodeBatch`); with
   * `reading`, the batch reads Redis's evictions for the heartbeat and hands it the count (undefined
   * when it did not).
   */
  async #send(groups: Op[][], reading?: (evictedKeys: number | undefined) => void): Promise<void> {
    const { driver, names, cluster, recovery, stamps, reaper, evictions, wakes, clock } = this.#deps;
    const namespace = groups[0]![0]!.namespace;
    // Pauses read alone (a call booked ahead came due with nothing else to send): an HGET each costs
    // Redis a fraction of a script's run. Not behind a recovery of the namespace, unlike a batch: a
    // put-back restores calls, never a pause (one lost with the data stays lost), so the read gives
    // the same answer before and after it, and the call's slot, journaled, is put back either way.
    if (groups.every((ops) => ops.every((op) => op.type === 'paused'))) {
      reading?.(undefined);
      for (const ops of groups) {
        for (const op of ops) {
          if (op.type !== 'paused') continue;
          driver.hget(names.of(namespace, op.key).meta, 'pause').then((end) => op.resolve(Number(end ?? 0)), op.reject);
        }
      }
      return;
    }
    // A batch that may book carries a stamp covering its slots (`Stamps.ride`).
    const books = groups.some((ops) => ops.some((op) => op.type === 'decide'));
    let ride: Ride | undefined;
    try {
      let epoch = '';
      let soft = '0';
      if (recovery) {
        // Nothing of a namespace goes out while this process puts back its calls there.
        await recovery.recovered(namespace);
        // Completions alone need no epoch check: on a store that lost its data they change
        // nothing (ZADD XX), and the next decision finds the loss.
        if (books) epoch = await recovery.epochOf(namespace);
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
      ride = cluster ? undefined : rideOf(stamps, reaper, namespace, books);
      const evicted = reading !== undefined && !cluster;
      const { users, fields, deliver, booked } = encodeBatch(groups, recovery?.checks(namespace), ride, evicted);
      // A Cluster script cannot reach the epoch key (another slot): the heartbeat checks it there.
      const checked = cluster ? '' : epoch;
      const extra = names.kept(namespace);
      if (checked !== '') extra.unshift(recovery!.epochKey(namespace));
      const args: Array<string | number | Buffer> = [
        checked,
        names.tag,
        names.channel(namespace),
        recovery?.graceMs ?? 0,
        fields,
        cluster ? '0' : '1',
        soft,
        evicted ? '1' : '0',
      ];
      if (ride) {
        extra.push(names.alive(namespace));
        args.push(...ride.args);
      }
      const keys = batchKeys(names.parts(namespace), users, extra);
      // A batch that answers after commandTimeoutMs: its callers got StoreUnavailableError, and the
      // slots it booked for them are given back.
      const late = (reply: unknown): void => this.#giveBack(booked(reply));
      const sentAt = performance.now();
      const reply = await driver.run(scripts.batch.name, keys, args, late);
      // NOW_MS: the store's reading (0 where the batch read no clock).
      if (Array.isArray(reply) && typeof reply[1] === 'number' && reply[1] > 0) clock.sample(sentAt, performance.now(), reply[1]);
      if (Array.isArray(reply) && reply[0] === CODES.batch.epochChanged && recovery) {
        reading?.(undefined);
        reading = undefined;
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
      const { again, lost, held, evictedKeys, stampAt, stamps: read, epochInPlace } = deliver(reply);
      reading?.(evictedKeys);
      reading = undefined;
      // The epoch this process knows was in place when the batch ran (a batch of checks alone goes
      // on past a changed one, and says so): the heartbeat need not read it this beat.
      if (checked !== '' && epochInPlace) recovery?.epochChecked(namespace, checked, sentAt);
      if (ride?.ticket) stamps?.answered(ride.ticket, stampAt);
      if (read) reaper.read(namespace, read);
      if (!recovery) return;
      // The heartbeat's checks found the epoch changed, or written by another Redis (a failover
      // that kept its value, which a read of the value alone cannot tell): the namespace is put
      // back as after any loss, whether or not a process decides there. Not a loss after all (its
      // grace only extended by a process putting back its calls): the keys the checks found lost
      // or held are put back one by one, as below.
      if (soft === '1' && !epochInPlace && (await recovery.recover(namespace))) {
        for (const key of lost) wakes.wake(names.wakes(namespace), encodeKey(key));
        return;
      }
      if (lost.length > 0 || held.length > 0) {
        for (const key of [...lost, ...held]) recovery.journal.forgetLives(namespace, key);
        // Evicted, most likely: the watch finds out at once, and keeps the keys put back now.
        if (lost.length > 0) await evictions?.check();
        await recovery.restoreKeys(namespace, lost, held);
        // Its waiting list may be gone with the key: this process's calls waiting there ask again
        // (deferred while the key is held) instead of waiting for a wake that may never come.
        for (const key of lost) wakes.wake(names.wakes(namespace), encodeKey(key));
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
      reading?.(undefined);
      if (ride?.ticket) stamps?.answered(ride.ticket, undefined, error);
      const failure = outOfMemory(error) ?? error;
      for (const ops of groups) for (const op of ops) op.reject(failure);
    }
  }

  /**
   * Removes the slots of decisions whose callers were told the store failed (their answer came too
   * late), as completions that never started. Best effort: a slot not given back counts to its bound
   * (maxHoldMs), as the call's store failure said.
   */
  #giveBack(ops: readonly DecideOp[]): void {
    const journal = this.#deps.recovery?.journal;
    for (const op of ops) {
      const pairs: number[] = [];
      for (let i = 0; i < op.cost; i++) pairs.push(op.first + i, -1);
      for (const key of [op.key, ...op.also.map((part) => part.key)]) {
        journal?.settle(op.namespace, key, pairs);
        this.push({ type: 'complete', namespace: op.namespace, key, pairs, resolve: ignore, reject: ignore, tries: 0 });
      }
    }
  }
}

function ignore(): void {}

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
