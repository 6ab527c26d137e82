import { StoreUnavailableError } from '../errors.js';
import type { StoreNotice } from '../store.js';

/** Keys given back their times to live by one run of lua/keep.lua ('off'). */
const KEEP_OFF_CHUNK = 1_000;

/** What the watch needs of the store. */
export interface EvictionWatchDeps {
  /** `INFO <section>`, with the store's timeout. */
  info(section: 'stats' | 'memory'): Promise<string>;
  /**
   * Runs lua/keep.lua on a namespace: 'on' keeps it and notes evictions seen now; 'off' resolves to
   * the keys still kept, or -1 when any process saw evictions within `quietMs`.
   */
  keep(namespace: string, mode: 'on' | 'off', max: number): Promise<number>;
  /** The namespaces this process holds calls in. */
  namespaces(): readonly string[];
  notify(notice: StoreNotice): void;
  /** Evictions are over once none came for this long. */
  readonly quietMs: number;
  /** A reading this much after the previous one (the heartbeat stopped meanwhile) cannot date a rise. */
  readonly recentMs: number;
}

/** An eviction episode as this process sees it. */
interface Episode {
  policy: string;
  failure: StoreUnavailableError | undefined;
  /** `evicted_keys` when it started, and its rise since the reading before. */
  readonly count: number;
  readonly delta: number;
}

/**
 * Watches a standalone Redis evict keys under `maxmemory` (`INFO stats` `evicted_keys`, read each
 * recovery heartbeat, and at once when a key is found lost), says so while it happens and when it
 * stops, and acts by the policy (`INFO memory` `maxmemory_policy`):
 * - `volatile-*` (or unknown): the namespaces are kept (lua/keep.lua): their keys carry no time to
 *   live, so the policy cannot pick them, until no process has seen an eviction for `quietMs`;
 * - `allkeys-*`: any key may go, the throttle's included: decisions fail with
 *   `StoreUnavailableError` (the throttle's `onStoreError` applies) until the evictions stop.
 */
export class EvictionWatch {
  readonly #deps: EvictionWatchDeps;
  #lastCount: number | undefined;
  #firstReadAt: number | undefined;
  #lastReadAt = 0;
  #lastRiseAt = 0;
  #evicting: Episode | undefined;
  /** Namespaces this process kept in this episode: given back their times to live when it ends. */
  readonly #kept = new Set<string>();
  /**
   * Namespaces this process has made sure are not kept without evictions: one left kept by a process
   * that stopped mid-episode goes back to times to live once this one has seen none for `quietMs`.
   */
  readonly #released = new Set<string>();
  #deniedSaid = false;
  /** A check failed and none has succeeded since: said once an episode. */
  #failing = false;
  #checking: Promise<void> | undefined;

  constructor(deps: EvictionWatchDeps) {
    this.#deps = deps;
  }

  /** Redis evicts (or did within `quietMs`): the heartbeat keeps running to see the end. */
  get active(): boolean {
    return this.#evicting !== undefined;
  }

  /**
   * While Redis evicts under an `allkeys-*` policy: the error a decision fails with. A field, not a
   * getter: every decision reads it.
   */
  failure: StoreUnavailableError | undefined;

  /**
   * Reads `evicted_keys` (or takes `evictedKeys`, read by a batch the heartbeat's reading rode) and
   * acts on what changed; one check at a time. Never rejects: a check that fails (Redis unreachable,
   * a script refused) says so (`evictionCheckFailed`) once, until a check succeeds, and the next
   * check tries again.
   */
  check(evictedKeys?: number): Promise<void> {
    this.#checking ??= this.#check(evictedKeys)
      .then(
        () => void (this.#failing = false),
        (error: unknown) => this.#failed(error),
      )
      .finally(() => (this.#checking = undefined));
    return this.#checking;
  }

  async #check(evictedKeys: number | undefined): Promise<void> {
    let count: number;
    try {
      // -1: INFO denied to the batch's script; read on its own, it says why.
      count = evictedKeys !== undefined && evictedKeys >= 0 ? evictedKeys : Number(/evicted_keys:(\d+)/.exec(await this.#deps.info('stats'))?.[1] ?? NaN);
    } catch (error) {
      // Denied to this user (an ACL, a renamed command): said once, and not a failure of the check.
      if (!/NOPERM|no permissions|unknown command/i.test(error instanceof Error ? error.message : String(error))) throw error;
      this.#denied(error);
      return;
    }
    if (!Number.isFinite(count)) return;
    const now = Date.now();
    // A rise since a reading long ago (the heartbeat stopped while idle) may be old: a new baseline.
    // So is a count that went down (CONFIG RESETSTAT, a restart).
    const recent = this.#lastCount !== undefined && now - this.#lastReadAt <= this.#deps.recentMs;
    const delta = this.#lastCount === undefined ? 0 : count - this.#lastCount;
    const rose = recent && delta > 0;
    this.#lastCount = count;
    this.#lastReadAt = now;
    this.#firstReadAt ??= now;
    if (rose) {
      this.#lastRiseAt = now;
      if (this.#evicting === undefined) await this.#start(count, delta);
    }
    if (this.#evicting === undefined) {
      if (now - Math.max(this.#firstReadAt, this.#lastRiseAt) >= this.#deps.quietMs) await this.#releaseLeftovers();
      return;
    }
    if (!rose && now - this.#lastRiseAt >= this.#deps.quietMs) {
      await this.#stop(count);
      return;
    }
    if (this.#evicting.policy === 'unknown') {
      await this.#readPolicy(this.#evicting);
      this.failure = this.#evicting.failure;
    }
    // Every check while Redis evicts: the namespaces it holds calls in now, and a note that
    // evictions go on (no process gives the keys their times to live back meanwhile).
    if (this.#evicting.failure === undefined && rose) await this.#keepAll();
  }

  async #start(count: number, delta: number): Promise<void> {
    const evicting: Episode = { policy: 'unknown', failure: undefined, count, delta };
    await this.#readPolicy(evicting);
    this.#evicting = evicting;
    this.failure = evicting.failure;
    const doing =
      evicting.failure !== undefined
        ? 'decisions fail with StoreUnavailableError (onStoreError applies) until the evictions stop'
        : "the throttle's keys are kept without a time to live, so that the policy cannot pick them, until the evictions stop";
    this.#deps.notify({ kind: 'evicting', policy: evicting.policy, evictedKeys: count, message: `${what(evicting)}: ${doing}. ${FIX}` });
  }

  /** The policy (`INFO memory`), and under `allkeys-*` the error decisions fail with; 'unknown' where denied. */
  async #readPolicy(evicting: Episode): Promise<void> {
    try {
      evicting.policy = /maxmemory_policy:(\S+)/.exec(await this.#deps.info('memory'))?.[1] ?? 'unknown';
    } catch {
      // Denied, or no answer: acted on as a volatile-* policy (keeping keys is harmless under any
      // other), and read again at the next check. Not silent: the `evicting` notice names the
      // policy 'unknown'.
    }
    if (evicting.policy.startsWith('allkeys-')) {
      evicting.failure ??= new StoreUnavailableError(
        `${what(evicting)}: any key may go, the throttle's included, so no decision is trusted until the evictions stop. ${FIX}`,
      );
    }
  }

  async #stop(count: number): Promise<void> {
    const { policy } = this.#evicting!;
    for (const namespace of [...this.#kept]) {
      await this.#keepOff(namespace);
      this.#kept.delete(namespace);
    }
    this.#evicting = undefined;
    this.failure = undefined;
    // Kept by another process that may have stopped meanwhile: released too, quietMs from now.
    this.#released.clear();
    const quietS = Math.round(this.#deps.quietMs / 1_000);
    this.#deps.notify({
      kind: 'evictionsStopped',
      policy,
      evictedKeys: count,
      message: `Redis has evicted no key for ${quietS} s (maxmemory-policy ${policy}; evicted_keys ${count}): the throttle's keys carry times to live again, and decisions are trusted`,
    });
  }

  async #releaseLeftovers(): Promise<void> {
    for (const namespace of this.#deps.namespaces()) {
      if (this.#released.has(namespace)) continue;
      await this.#keepOff(namespace);
      this.#released.add(namespace);
    }
  }

  /**
   * Gives the namespace's kept keys their times to live back; several rounds, as keys decided on
   * meanwhile are kept again. Nothing when another process saw evictions lately: it does so later.
   */
  async #keepOff(namespace: string): Promise<void> {
    for (let round = 0; round < 100; round++) {
      if ((await this.#deps.keep(namespace, 'off', KEEP_OFF_CHUNK)) <= 0) return;
    }
  }

  async #keepAll(): Promise<void> {
    for (const namespace of this.#deps.namespaces()) {
      await this.#deps.keep(namespace, 'on', 0);
      this.#kept.add(namespace);
    }
  }

  #failed(error: unknown): void {
    if (this.#failing) return;
    this.#failing = true;
    const why = error instanceof Error ? error.message : String(error);
    this.#deps.notify({
      kind: 'evictionCheckFailed',
      error,
      message: `Cannot check Redis's evictions (${why}): until a check succeeds (tried again each recovery heartbeat), evictions are found only when a key is found lost, and keys are not kept out of the policy's reach. Said once until then`,
    });
  }

  #denied(error: unknown): void {
    if (this.#deniedSaid) return;
    this.#deniedSaid = true;
    const why = error instanceof Error ? error.message : String(error);
    this.#deps.notify({
      kind: 'cannotWatch',
      message: `Cannot read INFO stats (${why}): evictions are found only when a key is found lost (it is then held and put back), and without INFO the scripts cannot tell which Redis wrote a liveness stamp, so a Redis rolled back to an older snapshot may have a live process's slots booked ahead given back while it starts them (docs/operations.md); allow INFO to this user to have evictions reported and acted on, and stamps told apart`,
    });
  }
}

const FIX = 'Fix: give Redis more memory (maxmemory), or set maxmemory-policy noeviction, or give the throttle a Redis of its own.';

function what({ policy, count, delta }: Episode): string {
  return `Redis is evicting keys under maxmemory (maxmemory-policy ${policy}; evicted_keys ${count}, ${delta} since the last check)`;
}
