import { randomBytes } from 'node:crypto';
import { StoreUnavailableError, ThrottleConfigError } from '../errors.js';
import { RedisNames, type HashTag } from '../keys.js';
import type { Rule } from '../rules.js';
import { depsOf, depsSuffix } from '../slot-plan.js';
import { StoreClock } from '../time.js';
import { sourceLetter, type LearnEntry } from '../learning.js';
import type {
  ClaimRequest,
  ClaimResult,
  InspectResult,
  LearnResult,
  ReserveRequest,
  ReserveResult,
  RestoredSlot,
  Settlement,
  Store,
  StoreNotice,
} from '../store.js';
import { checkDepParts, pointerLife } from '../store.js';
import { ruleArgs, type Decision } from './redis-batch.js';
import { BatchQueue } from './redis-batch-queue.js';
import { EvictionWatch } from './redis-evictions.js';
import { Journal } from '../journal.js';
import { Reaper, STALE_MS, Stamps } from './redis-liveness.js';
import { Heartbeat } from './redis-heartbeat.js';
import { MAX_RECOVERIES, Recovery } from './redis-recovery.js';
import { redisStoreSettings, type RedisClientLike, type RedisStoreOptions } from './redis-options.js';
import { ClientDriver, clientKind } from './redis-client.js';
import { CODES, replies, scripts } from './redis-scripts.js';
import { PauseFeeds } from './redis-pauses.js';
import { Wakes } from './redis-wakes.js';

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
  /** The one module that speaks to the user's client. */
  readonly #driver: ClientDriver;
  readonly #names: RedisNames;
  /** Decisions, completions and checks, sent in batches of lua/batch.lua. */
  readonly #batches: BatchQueue;
  readonly #recovery: Recovery | undefined;
  readonly #heartbeat: Heartbeat | undefined;
  readonly #cluster: boolean;
  /** Completions wake waiting processes (pub/sub); not over HTTP (`@upstash/redis`). */
  readonly announces: boolean;
  #seq = 0;
  /** The reservations' members numbered so far (from CODES.claim.reserved). */
  #reservedSeq = 0;
  #closed = false;
  readonly #wakes: Wakes;
  /** Redis's evictions, watched by the heartbeat (a standalone Redis, with recovery). */
  readonly #evictions: EvictionWatch | undefined;
  readonly #watchers = new Set<(notice: StoreNotice) => void>();
  /** This process's liveness stamps while it holds slots booked ahead (with recovery; none without). */
  readonly #stamps: Stamps | undefined;
  /** Gives back the slots dead processes booked ahead on keys where this process waits. */
  readonly #reaper: Reaper;
  /** The vendor pauses announced in the namespaces where this process holds slots booked ahead. */
  readonly #pauses: PauseFeeds;

  constructor(client: RedisClientLike, options: RedisStoreOptions = {}) {
    const kind = clientKind(client);
    if (kind === undefined) {
      throw new ThrottleConfigError(
        'Expected an ioredis Redis or Cluster client, a node-redis client (createClient() or createCluster()), or an @upstash/redis Redis',
        'client',
      );
    }
    const { prefix, hashTag, timeoutMs, recovery } = redisStoreSettings(options, kind === 'upstash');
    this.announces = kind !== 'upstash';
    this.prefix = prefix;
    this.hashTag = hashTag;
    // The subscriber follows the client: it closes when the client ends, and opens again when it is back.
    // A connection (again): claimed on a young Redis while this process holds no calls (lua/epoch.lua).
    const ready = (): void => {
      this.#wakes.ready();
      this.#claim();
    };
    const driver = (this.#driver = new ClientDriver(client, timeoutMs, { ended: () => this.#wakes.ended(), ready }));
    const cluster = (this.#cluster = driver.cluster);
    const names = (this.#names = new RedisNames(prefix, hashTag, `.${randomBytes(6).toString('base64url')}`, cluster));
    const notify = (notice: StoreNotice): void => this.#notify(notice);
    const run = driver.run.bind(driver);
    const wakes = (this.#wakes = new Wakes(driver, notify));
    this.#pauses = new PauseFeeds({
      channel: (namespace) => names.pauses(namespace),
      listen: (channel, listener) => wakes.listen(channel, listener),
      liveSince: (channel) => wakes.liveSince(channel),
    });
    const reaper = (this.#reaper = new Reaper({
      tag: names.tag,
      cluster,
      aliveKey: (namespace) => names.alive(namespace),
      names: (namespace, key) => names.of(namespace, key),
      channel: (namespace) => names.channel(namespace),
      run,
      freed: (namespace, key) => wakes.wake(names.wakes(namespace), key),
      notify,
      ownReads: kind !== 'upstash',
    }));
    // Where Redis's clock stands against this process's, from the batches' round trips (the journal prunes by it).
    const clock = new StoreClock();
    if (recovery !== false) {
      const { heartbeatMs, graceMs } = recovery;
      const journaled = (this.#recovery = new Recovery({
        prefix,
        journal: new Journal((number) => names.member(number), CODES.claim.reserved),
        heartbeatMs,
        graceMs,
        get: (key) => driver.get(key),
        run,
        names: (namespace, key) => names.of(namespace, key),
        kept: (namespace) => names.kept(namespace),
        cluster,
        client,
        // Before a batch was answered: this host's clock (the store's, for all this process knows).
        storeNow: () => (clock.sampled ? clock.earliestStoreTime(performance.now()) : Date.now()),
      }));
      this.#stamps = new Stamps({
        tag: names.tag,
        seq: () => this.#seq,
        storeNow: () => journaled.storeNow(),
        aliveKey: (namespace) => names.alive(namespace),
        run,
        rides: (namespace) => reaper.rides(namespace),
        read: (namespace, stamps) => reaper.read(namespace, stamps),
        notify,
      });
      if (driver.status === 'ready') this.#claim();
      if (!cluster) {
        // Evictions are over once none came for this long: long enough not to flip a namespace in
        // and out of being kept within one episode.
        const quietMs = Math.max(20 * heartbeatMs, graceMs);
        this.#evictions = new EvictionWatch({
          info: (section) => driver.info(section),
          keep: async (namespace, mode, max) => {
            const [kept] = names.kept(namespace);
            return replies.keep(await run(scripts.keep.name, [kept!, `${kept!}:seen`], [mode, max, quietMs]));
          },
          namespaces: () => journaled.journal.namespaces(),
          notify,
          quietMs,
          recentMs: 3 * heartbeatMs,
        });
      }
      this.#heartbeat = new Heartbeat({
        recovery: journaled,
        // One promise for the beat's checks of a namespace (a key whose check fails fails the beat, as the first).
        check: (namespace, keys) =>
          new Promise<void>((resolve, reject) => {
            let left = keys.length;
            const checked = (): void => {
              if (--left === 0) resolve();
            };
            for (const key of keys) this.#batches.push({ type: 'check', namespace, key, resolve: checked, reject, tries: 0 });
          }),
        evictions: this.#evictions,
        rides: !cluster,
        notify,
      });
    }
    this.#batches = new BatchQueue({
      driver,
      names,
      cluster,
      recovery: this.#recovery,
      heartbeat: this.#heartbeat,
      stamps: this.#stamps,
      reaper,
      evictions: this.#evictions,
      wakes,
      clock,
    });
  }

  /** Calls `listener` with what the store notices (evictions): every throttle on it emits them as `storeWarning`. */
  watch(listener: (notice: StoreNotice) => void): () => void {
    this.#watchers.add(listener);
    return () => this.#watchers.delete(listener);
  }

  /** Tells the watchers, unless the store closed or its client ended (its owner's doing: calls say so). */
  #notify(notice: StoreNotice): void {
    if (this.#closed || this.#driver.ended) return;
    for (const listener of this.#watchers) listener(notice);
  }

  /** A call may count in several keys at once (`ReserveRequest.also`): on a Cluster, keys of one slot. */
  readonly multiKey = true;

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
    return this.#driver.ended;
  }

  /** The client this store runs on (ioredis or node-redis). */
  get client(): RedisClientLike {
    return this.#driver.client;
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
    // A reservation's members are numbered apart, above any stamp's: no reaper takes them for a dead process's.
    let first: number;
    if (request.reserved === true) {
      first = CODES.claim.reserved + this.#reservedSeq + 1;
      this.#reservedSeq += request.cost;
    } else {
      first = this.#seq + 1;
      this.#seq += request.cost;
    }
    const { namespace, key, cost, maxHoldMs, retainMs, rules, maxDelayMs } = request;
    const also = request.also ?? NONE;
    if (also.length > 0 && this.#cluster && this.hashTag === 'key') {
      return Promise.reject(
        new ThrottleConfigError("Expected the keys of a call of several keys to share a Redis Cluster slot: give the store { hashTag: 'name' }", 'key'),
      );
    }
    const stay = request.stay === true;
    // Answered straight from the batch's reply (no async layer between the two).
    return new Promise<ReserveResult>((resolve, reject) =>
      this.#batches.push({
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
        graceMs: request.reserved === true ? (request.graceMs ?? 0) : -1,
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
    const names = this.#names;
    let members: readonly string[] = NONE;
    if (status === CODES.status.booked) {
      members = cost === 1 ? [names.member(first)] : Array.from({ length: cost }, (_, i) => names.member(first + i));
      // A reservation is this process's to neither journal, stamp nor start: its claim may come from
      // any process, and finds it gone if the store lost it (the call then books again). Its
      // members' names end with the hash of its dependencies. One for this process's own call that
      // starts now on no dependency is started with no claim: journaled as any call.
      const deps = request.reserved === true ? depsOf(decision.deps) : NONE;
      if (request.reserved === true && !(request.own === true && waitMs === 0 && deps.length === 0)) {
        const suffix = depsSuffix(deps, [key, ...also.map((part) => part.key)]);
        if (suffix !== '') members = members.map((member) => member + suffix);
        return { status: STATUSES[status]!, waitMs, retryMs, startAt, now, ruleIndex, members, deps };
      }
      this.#recovery?.journal.book(namespace, key, first, cost, startAt + maxHoldMs, retainMs);
      for (const part of also) this.#recovery?.journal.book(namespace, part.key, first, cost, startAt + maxHoldMs, part.retainMs);
      this.#heartbeat?.start();
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
      const names = this.#names;
      if (settle.length === 1) {
        const { member, releaseAt } = settle[0]!;
        const number = names.numberOf(member);
        pairs = number === undefined ? NONE_PAIRS : [number, releaseAt === null ? -1 : Math.ceil(releaseAt)];
      } else {
        pairs = [];
        for (const { member, releaseAt } of settle) {
          const number = names.numberOf(member);
          if (number !== undefined) pairs.push(number, releaseAt === null ? -1 : Math.ceil(releaseAt));
        }
      }
      if (pairs.length === 0) return SETTLED;
      this.#recovery?.journal.settle(namespace, key, pairs);
    } catch (error) {
      return Promise.reject(error as Error);
    }
    return new Promise<void>((resolve, reject) => this.#batches.push({ type: 'complete', namespace, key, pairs, resolve, reject, tries: 0 }, coalesceMs));
  }

  /** While the client cannot connect (its latest attempt failed: refused, a TLS failure), resolves once it does. */
  reconnected(): Promise<void> | undefined {
    return this.#driver.reconnected();
  }

  listen(namespace: string, listener: (key: string) => void): Promise<() => void> {
    return this.#wakes.listen(this.#names.wakes(namespace), listener);
  }

  async leave(namespace: string, key: string): Promise<void> {
    await new Promise<void>((resolve, reject) => this.#batches.push({ type: 'leave', namespace, key, resolve, reject, tries: 0 }));
  }

  async inspect(namespace: string, key: string, rules: readonly Rule[], maxHoldMs?: number): Promise<InspectResult> {
    await this.#recovery?.recovered(namespace);
    const { log, meta } = this.#names.of(namespace, key);
    const args = ruleArgs(rules);
    if (maxHoldMs !== undefined) args.push(maxHoldMs);
    const reply = replies.inspect(await this.#driver.run(scripts.inspect.name, [log, meta], args), rules.length);
    const windows = [
      ...rules.map((rule) => rule.windowMs),
      ...reply.learned.filter((entry) => !rules.some((rule) => rule.windowMs === entry.windowMs)).map((entry) => entry.windowMs),
    ];
    return { ...reply, rules: reply.rules.map((usage, r) => ({ ...usage, windowMs: windows[r]! })) };
  }

  async learn(namespace: string, key: string, entries: readonly LearnEntry[], maxHoldMs: number): Promise<LearnResult> {
    await this.#recovery?.recovered(namespace);
    const names = this.#names;
    const { log, meta } = names.of(namespace, key);
    const args = [
      maxHoldMs,
      names.pauses(namespace),
      entries.length,
      ...entries.flatMap((entry) => [
        entry.limit,
        entry.windowMs,
        Math.ceil(entry.lapseMs),
        sourceLetter(entry.source, entry.aboveRules),
        (entry.mode ?? 'set')[0]!,
        entry.mode === 'down' ? (entry.floor ?? 1) : entry.mode === 'hold' ? (entry.remaining ?? 0) : (entry.configured ?? 0),
      ]),
    ];
    const result = replies.learn(await this.#driver.run(scripts.learn.name, [meta, log, ...names.kept(namespace)], args));
    if (result.pausedUntil > 0) this.#pauses.heard(namespace, key, result.pausedUntil);
    return result;
  }

  async reset(namespace: string, key: string, retainMs: number, maxHoldMs: number): Promise<void> {
    await this.#recovery?.recovered(namespace);
    const names = this.#names;
    const { log, meta } = names.of(namespace, key);
    await this.#driver.run(scripts.reset.name, [log, meta, ...names.kept(namespace)], [retainMs, names.channel(namespace), maxHoldMs]);
  }

  async pause(namespace: string, key: string, ms: number, maxHoldMs = 0): Promise<number> {
    await this.#recovery?.recovered(namespace);
    const names = this.#names;
    const { log, meta } = names.of(namespace, key);
    const args = [Math.ceil(ms), maxHoldMs, names.pauses(namespace)];
    const end = replies.pause(await this.#driver.run(scripts.pause.name, [meta, log, ...names.kept(namespace)], args));
    this.#pauses.heard(namespace, key, end);
    return end;
  }

  async claim(request: ClaimRequest): Promise<ClaimResult> {
    const { namespace, bound, startAt, graceMs, maxHoldMs, deps } = request;
    const parts = [request, ...(request.also ?? NONE)];
    if (parts.length > 1 && this.#cluster && this.hashTag === 'key') {
      throw new ThrottleConfigError("Expected the keys of a call of several keys to share a Redis Cluster slot: give the store { hashTag: 'name' }", 'key');
    }
    checkDepParts(deps, parts.length);
    const recovery = this.#recovery;
    const names = this.#names;
    const keyNames = parts.map((part) => names.of(namespace, part.key));
    // Ascending: the first names the reservation's mark, so a token with its members in another order is the same reservation.
    const members = [...request.members].sort();
    const pointers = [
      ...keyNames.flatMap(({ meta }) => members.map((member) => `${meta}:claimed:${member}`)),
      ...deps.map(([member, , part = 0]) => `${keyNames[part]!.meta}:claimed:${member}`),
    ];
    const give = request.giveBack === true ? 1 : 0;
    const retains = parts.map((part) => Math.ceil(part.retainMs));
    const depArgs = deps.flatMap(([member, windowMs, part = 0]) => [member, windowMs, part]);
    for (let losses = 0; ;) {
      await recovery?.recovered(namespace);
      // As a batch that books: under the epoch this process knows (a Cluster script cannot reach its key).
      const epoch = recovery === undefined || this.#cluster ? '' : await recovery.epochOf(namespace);
      const generation = recovery?.generation ?? 0;
      const first = this.#seq + 1;
      this.#seq += members.length;
      const started = members.map((_, i) => names.member(first + i));
      const args = [
        ...[bound, startAt, graceMs, maxHoldMs, parts.length, members.length, deps.length, give, epoch, recovery?.graceMs ?? 0],
        ...[...retains, ...members, ...started, ...depArgs],
      ];
      const keys = [...keyNames.flatMap(({ log, meta }) => [log, meta]), ...pointers];
      if (epoch !== '') keys.push(recovery!.epochKey(namespace));
      const { status, now, waitMs } = replies.claim(await this.#driver.run(scripts.claim.name, keys, args));
      if (status === 'epochChanged') {
        // Sent before a recovery of this process finished: claimed again, not counted as a loss.
        const lost = generation === recovery!.generation && (await recovery!.recover(namespace));
        if (lost && ++losses >= MAX_RECOVERIES) throw new StoreUnavailableError('Redis lost its data again while this process was putting its calls back');
        continue;
      }
      if (status !== 'started') return { status, now, waitMs, members: NONE };
      if (recovery !== undefined) {
        for (const [k, part] of parts.entries()) {
          recovery.journal.book(namespace, part.key, first, members.length, now + maxHoldMs, part.retainMs);
          // The pointer keys the claim set on this key (`pointers`, per key in the members' order).
          const set = started.map((member, i): [string, string] => [pointers[k * members.length + i]!, member]);
          recovery.journal.claimed(namespace, part.key, set, now + pointerLife(bound, maxHoldMs, now, part.retainMs), part.retainMs);
        }
      }
      this.#heartbeat?.start();
      return { status, now, waitMs, members: started };
    }
  }

  /**
   * The latest end of the key's vendor pauses set since `since` (a booking's ask), from their
   * announcements (lib/stores/redis-pauses.ts), while this process hears every one; else read in
   * the next batch, with the decisions and completions of the moment. A pause announced before now
   * may wait unread in the socket while the timer that brought the slot due runs first: the event
   * loop turns once (its poll phase runs before `setImmediate`'s) before what was heard is trusted,
   * so that an announcement is heard as surely as a read now would find the pause.
   */
  async pausedUntil(namespace: string, key: string, since = -Infinity): Promise<number> {
    await new Promise<void>((resolve) => setImmediate(resolve));
    const known = this.#pauses.known(namespace, key, since);
    if (known !== undefined) return known;
    return new Promise<number>((resolve, reject) => this.#batches.push({ type: 'paused', namespace, key, resolve, reject, tries: 0 }));
  }

  async restore(namespace: string, key: string, slots: readonly RestoredSlot[], retainMs: number): Promise<void> {
    if (slots.length === 0) return;
    // Not before every live process has put back its journal: the calls it restores would be
    // counted against a log that is not whole yet (harmless), and journaled under a stale epoch.
    await this.#recovery?.untilReady(namespace);
    const names = this.#names;
    const args: Array<string | number> = [retainMs, 1, 0, 0];
    const restored: Array<{ number: number; releaseInMs: number }> = [];
    for (const { releaseInMs, cost } of slots) {
      for (let i = 0; i < cost; i++) {
        const number = ++this.#seq;
        args.push(names.member(number), Math.ceil(releaseInMs));
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
      this.#heartbeat?.start();
    }
    const { log, meta } = names.of(namespace, key);
    await this.#driver.run(scripts.restore.name, [log, meta, ...names.kept(namespace)], args);
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
    const names = this.#names;
    // One member (the usual) makes an array of one (an empty one that grows reserves room for 17).
    const only = members.length === 1 ? names.numberOf(members[0]!) : undefined;
    const numbers: number[] = only === undefined ? [] : [only];
    if (members.length > 1) {
      for (const member of members) {
        const number = names.numberOf(member);
        if (number !== undefined) numbers.push(number);
      }
    }
    return this.#stamps.mayStart(namespace, numbers, startAt);
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
        ({ key, retainMs }) =>
          new Promise<void>((resolve, reject) => this.#batches.push({ type: 'tidy', namespace, key, retainMs, resolve, reject, tries: 0 })),
      ),
    );
  }

  /** Stops the epoch heartbeat, the liveness stamps (removing them) and the store's subscriber. The client belongs to the caller and stays open. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#heartbeat?.close();
    this.#reaper.close();
    await this.#stamps?.close();
    this.#pauses.close();
    this.#wakes.close();
    this.#driver.close();
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

/** A decided call's status, by its code. */
const STATUSES: Record<number, ReserveResult['status']> = {
  [CODES.status.booked]: 'booked',
  [CODES.status.deferred]: 'deferred',
  [CODES.status.refused]: 'refused',
};
