import type { Settlement } from './store.js';

/** Keys with buffered settlements at most; the longest held key is dropped past it. */
export const MAX_KEYS = 10_000;
/** Settlements buffered per key at most; the oldest are dropped past it. */
export const MAX_PER_KEY = 256;

interface Entry {
  settle: Settlement[];
  retainMs: number;
}

/**
 * Completion times that free capacity early, held until the next decision for their key carries
 * them to the store at no extra round trip. Bounded: dropping one only leaves a slot counted until
 * its booked hold, which is safe, just a little less full.
 */
export class SettlementBuffer {
  readonly #entries = new Map<string, Entry>();
  #cursor: Iterator<string> = this.#entries.keys();

  get size(): number {
    return this.#entries.size;
  }

  add(key: string, settle: readonly Settlement[], retainMs: number): void {
    if (settle.length === 0) return;
    const entry = this.#entries.get(key);
    if (entry) {
      entry.settle.push(...settle);
      if (entry.settle.length > MAX_PER_KEY) entry.settle.splice(0, entry.settle.length - MAX_PER_KEY);
      entry.retainMs = Math.max(entry.retainMs, retainMs);
      return;
    }
    if (this.#entries.size >= MAX_KEYS) this.#evictOne();
    this.#entries.set(key, { settle: settle.slice(-MAX_PER_KEY), retainMs });
  }

  /**
   * Drops one entry, walking the map with an iterator kept across calls: restarting from the front
   * each time would step over every entry deleted since the map was last compacted.
   */
  #evictOne(): void {
    let next = this.#cursor.next();
    if (next.done) {
      this.#cursor = this.#entries.keys();
      next = this.#cursor.next();
    }
    if (!next.done) this.#entries.delete(next.value);
  }

  /** Removes and returns the key's buffered settlements (an empty list when none). */
  take(key: string): Settlement[] {
    const entry = this.#entries.get(key);
    if (!entry) return [];
    this.#entries.delete(key);
    return entry.settle;
  }

  clear(): void {
    this.#entries.clear();
    this.#cursor = this.#entries.keys();
  }
}
