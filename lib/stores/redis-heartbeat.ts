import type { StoreNotice } from '../store.js';
import type { EvictionWatch } from './redis-evictions.js';
import type { Recovery } from './redis-recovery.js';

/*
 * When the recovery's checks run while no decision makes them (lib/stores/redis-recovery.ts): a
 * beat every `heartbeatMs` while the journal holds calls, at its timer or riding a batch going out.
 */

/**
 * A beat rides a batch of the store going out once this share of a beat has passed since its timer
 * was set (at start, or after the previous beat): it takes the place of a timer that would fire
 * soon. Not much earlier: each beat looks through the journal's keys for those no decision checked.
 */
const BEAT_RIDE_AFTER = 0.8;

/** What the heartbeat drives: the checks of keys it sends in the store's batches, and the eviction watch. */
export interface HeartbeatDeps {
  readonly recovery: Recovery;
  /** Checks the namespace's `keys` against the journal in the next batch (lua/includes/check.lua). */
  check(namespace: string, keys: readonly string[]): Promise<void>;
  readonly evictions: EvictionWatch | undefined;
  /** The store's batches carry beats (`ride`) and their readings of evictions (`takeReading`): a standalone Redis. */
  readonly rides: boolean;
  notify(notice: StoreNotice): void;
}

/**
 * The recovery heartbeat: while the journal holds calls, every `heartbeatMs`, checks (in the next
 * batch) the keys of each namespace that no decision checked within a beat, and the namespace's
 * epoch; and watches Redis's evictions (`INFO stats`, read by the batch of its checks). A beat
 * rides a batch going out when one is due (`ride`), else goes at its timer. A beat that fails
 * (Redis unreachable, a command refused) says so once (`heartbeatFailed`), until a beat succeeds;
 * the next beat, or the next decision, tries again.
 */
export class Heartbeat {
  readonly #deps: HeartbeatDeps;
  /** The next beat, while the journal holds calls: set and not fired yet (a ride may take its place). */
  #timer: NodeJS.Timeout | undefined;
  /** `performance.now()` when `#timer` was set. */
  #armedAt = 0;
  /** The reading of evictions the latest beat asked a batch for, until one takes it (`takeReading`). */
  #reading: ((evictedKeys: number | undefined) => void) | undefined;
  #closed = false;
  /** A beat failed and none has succeeded since: said once an episode. */
  #failing = false;

  constructor(deps: HeartbeatDeps) {
    this.#deps = deps;
  }

  /** Beats from a beat from now on, while the journal holds calls (or evictions are under way). */
  start(): void {
    if (this.#timer !== undefined || this.#closed) return;
    this.#armedAt = performance.now();
    this.#timer = setTimeout(() => this.#beat(false), this.#deps.recovery.heartbeatMs);
    this.#timer.unref();
  }

  /**
   * A batch of the store is about to go: a beat due soon (its timer set at least BEAT_RIDE_AFTER of
   * a beat ago) begins now instead. Its checks join the operations queued (the caller takes them
   * after this), and its reading of evictions is there for the batch to take.
   */
  ride(): void {
    if (!this.#deps.rides || this.#timer === undefined || this.#closed) return;
    if (performance.now() - this.#armedAt < BEAT_RIDE_AFTER * this.#deps.recovery.heartbeatMs) return;
    clearTimeout(this.#timer);
    this.#beat(true);
  }

  /**
   * The reading of evictions the beat under way asked for, taken by one batch (lua/batch.lua's
   * EVICTED): it hands over `evicted_keys` (-1: INFO denied to the script), or undefined when it
   * failed. Undefined when no reading is asked for.
   */
  takeReading(): ((evictedKeys: number | undefined) => void) | undefined {
    const reading = this.#reading;
    this.#reading = undefined;
    return reading;
  }

  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.takeReading()?.(undefined);
  }

  /** One beat, then the next one a beat after it ends (while the journal holds calls, or evictions go on). */
  #beat(riding: boolean): void {
    const { recovery, evictions } = this.#deps;
    this.#timer = undefined;
    void this.#checks(riding).finally(() => {
      if (recovery.journal.prune(recovery.storeNow()) > 0 || evictions?.active) this.start();
    });
  }

  async #checks(riding: boolean): Promise<void> {
    const { recovery, evictions, check, notify } = this.#deps;
    const startedAt = performance.now();
    // Queued at once, before any await: a beat that rides a batch has its checks in it.
    const checks = new Map<string, Promise<void>>();
    for (const namespace of recovery.journal.namespaces()) {
      const keys = recovery.unchecked(namespace, BEAT_RIDE_AFTER * recovery.heartbeatMs);
      if (keys.length > 0) checks.set(namespace, check(namespace, keys));
    }
    // Nothing due and no batch to ride: one key is checked all the same, so that the reading of
    // evictions, the epoch and a liveness stamp or read that is due go in one batch, not one each.
    if (checks.size === 0 && !riding && evictions && this.#deps.rides) {
      for (const namespace of recovery.journal.namespaces()) {
        const key = recovery.journal.anyKey(namespace);
        if (key === undefined) continue;
        checks.set(namespace, check(namespace, [key]));
        break;
      }
    }
    // Evictions are read by the next batch (the checks', or the one this beat rides), else on their own.
    let reading: Promise<number | undefined> | undefined;
    if (evictions && this.#deps.rides && (checks.size > 0 || riding)) {
      this.takeReading()?.(undefined);
      reading = new Promise((resolve) => (this.#reading = resolve));
    }
    let failure: unknown;
    const failed = new Set<string>();
    await Promise.all(
      [...checks].map(([namespace, checked]) =>
        checked.catch((error: unknown) => {
          failure ??= error;
          failed.add(namespace);
        }),
      ),
    );
    await evictions?.check(await reading);
    for (const namespace of recovery.journal.namespaces()) {
      // Where its checks failed, so would a read of the epoch, most likely: the next beat tries both.
      if (failed.has(namespace)) continue;
      try {
        await recovery.checkEpoch(namespace, startedAt);
      } catch (error) {
        failure ??= error;
      }
    }
    if (failure === undefined) {
      this.#failing = false;
      return;
    }
    if (this.#failing || this.#closed) return;
    this.#failing = true;
    const why = failure instanceof Error ? failure.message : String(failure);
    notify({
      kind: 'heartbeatFailed',
      error: failure,
      message: `The recovery heartbeat cannot check Redis for lost data (${why}): until a beat succeeds (one every heartbeatMs), a loss on keys no decision asks about goes unnoticed, and the calls booked there are not put back. Said once until then`,
    });
  }
}
