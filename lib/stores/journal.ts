import type { Settlement } from '../store.js';

/** One of this process's slots, as the store should hold it. */
export interface JournalEntry {
  readonly member: string;
  /** Store clock, ms: the completion once settled, else the estimate (start + hold). */
  readonly score: number;
  readonly settled: boolean;
}

interface KeyJournal {
  retainMs: number;
  maxHoldMs: number;
  readonly entries: Map<string, { score: number; settled: boolean }>;
}

/**
 * What this process booked in a shared store and still counts there: for each key, its slots until
 * they fall out of every window. Kept so that a store that lost its data can be given back this
 * process's share of it (`RedisStore` recovery). Memory follows the calls still inside their
 * windows; `prune` drops the rest.
 */
export class Journal {
  /** Store clock minus `Date.now()`, from the latest decision (for pruning between decisions). */
  clockOffsetMs = 0;
  readonly #namespaces = new Map<string, Map<string, KeyJournal>>();
  #size = 0;

  book(namespace: string, key: string, members: readonly string[], score: number, retainMs: number, maxHoldMs: number, storeNow: number): void {
    this.clockOffsetMs = storeNow - Date.now();
    const journal = this.#open(namespace, key, retainMs, maxHoldMs);
    for (const member of members) {
      if (!journal.entries.has(member)) this.#size += 1;
      journal.entries.set(member, { score, settled: false });
    }
  }

  /**
   * Completed calls the store numbered for this process (`restore`: calls decided locally while it
   * was down), so that they are put back too if the store later loses its data.
   */
  restored(namespace: string, key: string, entries: ReadonlyArray<{ member: string; score: number }>, retainMs: number, maxHoldMs: number): void {
    if (entries.length === 0) return;
    const journal = this.#open(namespace, key, retainMs, maxHoldMs);
    for (const { member, score } of entries) {
      if (!journal.entries.has(member)) this.#size += 1;
      journal.entries.set(member, { score, settled: true });
    }
  }

  /** Completions and releases, as sent to the store. */
  settle(namespace: string, key: string, settle: readonly Settlement[]): void {
    if (settle.length === 0) return;
    const entries = this.#namespaces.get(namespace)?.get(key)?.entries;
    if (!entries) return;
    for (const { member, releaseAt } of settle) {
      const entry = entries.get(member);
      if (!entry) continue;
      if (releaseAt === null) {
        entries.delete(member);
        this.#size -= 1;
      } else {
        entry.score = releaseAt;
        entry.settled = true;
      }
    }
  }

  #open(namespace: string, key: string, retainMs: number, maxHoldMs: number): KeyJournal {
    let keys = this.#namespaces.get(namespace);
    if (!keys) this.#namespaces.set(namespace, (keys = new Map()));
    let journal = keys.get(key);
    if (!journal) keys.set(key, (journal = { retainMs, maxHoldMs, entries: new Map() }));
    journal.retainMs = Math.max(journal.retainMs, retainMs);
    journal.maxHoldMs = Math.max(journal.maxHoldMs, maxHoldMs);
    return journal;
  }

  /** The key's slots that still count at `storeNow` (as `prune` would keep them). */
  keyEntries(namespace: string, key: string, storeNow: number): { maxHoldMs: number; entries: JournalEntry[] } {
    const journal = this.#namespaces.get(namespace)?.get(key);
    if (!journal) return { maxHoldMs: 0, entries: [] };
    const entries: JournalEntry[] = [];
    for (const [member, { score, settled }] of journal.entries) {
      if (score + journal.retainMs + (settled ? 0 : journal.maxHoldMs) > storeNow) entries.push({ member, score, settled });
    }
    return { maxHoldMs: journal.maxHoldMs, entries };
  }

  namespaces(): string[] {
    return [...this.#namespaces.keys()];
  }

  /** The namespace's keys with the slots that still count at `storeNow`. */
  entriesOf(namespace: string, storeNow: number): Array<{ key: string; retainMs: number; maxHoldMs: number; entries: JournalEntry[] }> {
    this.prune(storeNow);
    const out = [];
    for (const [key, { retainMs, maxHoldMs, entries }] of this.#namespaces.get(namespace) ?? []) {
      out.push({ key, retainMs, maxHoldMs, entries: [...entries].map(([member, { score, settled }]) => ({ member, score, settled })) });
    }
    return out;
  }

  /** Drops slots that no longer count anywhere (as the store's own expiry would); returns the slots left. */
  prune(storeNow: number): number {
    for (const [namespace, keys] of this.#namespaces) {
      for (const [key, { retainMs, maxHoldMs, entries }] of keys) {
        for (const [member, { score, settled }] of entries) {
          if (score + retainMs + (settled ? 0 : maxHoldMs) <= storeNow) {
            entries.delete(member);
            this.#size -= 1;
          }
        }
        if (entries.size === 0) keys.delete(key);
      }
      if (keys.size === 0) this.#namespaces.delete(namespace);
    }
    return this.#size;
  }
}
