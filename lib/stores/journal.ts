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
  /** Calls without a completion yet: slot number → estimate. Few: the calls in flight or booked ahead. */
  readonly pending: Map<string, number>;
  /**
   * Completed calls, in the order their completions came: slot numbers and completion times as
   * two packed arrays of numbers (16 bytes a call, where a Map entry costs about 100), since a key
   * of a long window keeps many. Entries before `head` were pruned.
   */
  members: number[];
  scores: number[];
  head: number;
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
      if (!journal.pending.has(member)) this.#size += 1;
      journal.pending.set(member, score);
    }
  }

  /**
   * Completed calls the store numbered for this process (`restore`: calls decided locally while it
   * was down), so that they are put back too if the store later loses its data.
   */
  restored(namespace: string, key: string, entries: ReadonlyArray<{ member: string; score: number }>, retainMs: number, maxHoldMs: number): void {
    if (entries.length === 0) return;
    const journal = this.#open(namespace, key, retainMs, maxHoldMs);
    for (const { member, score } of entries) this.#complete(journal, member, score);
  }

  /** Completions and releases, as sent to the store. */
  settle(namespace: string, key: string, settle: readonly Settlement[]): void {
    if (settle.length === 0) return;
    const journal = this.#namespaces.get(namespace)?.get(key);
    if (!journal) return;
    for (const { member, releaseAt } of settle) {
      // Only a call without a completion is settled; a completion sent again is already here.
      if (!journal.pending.delete(member)) continue;
      this.#size -= 1;
      if (releaseAt !== null) this.#complete(journal, member, releaseAt);
    }
  }

  #complete(journal: KeyJournal, member: string, score: number): void {
    journal.members.push(Number(member));
    journal.scores.push(score);
    this.#size += 1;
  }

  #open(namespace: string, key: string, retainMs: number, maxHoldMs: number): KeyJournal {
    let keys = this.#namespaces.get(namespace);
    if (!keys) this.#namespaces.set(namespace, (keys = new Map()));
    let journal = keys.get(key);
    if (!journal) keys.set(key, (journal = { retainMs, maxHoldMs, pending: new Map(), members: [], scores: [], head: 0 }));
    journal.retainMs = Math.max(journal.retainMs, retainMs);
    journal.maxHoldMs = Math.max(journal.maxHoldMs, maxHoldMs);
    return journal;
  }

  /** The key's slots that still count at `storeNow` (as `prune` would keep them). */
  keyEntries(namespace: string, key: string, storeNow: number): { maxHoldMs: number; entries: JournalEntry[] } {
    const journal = this.#namespaces.get(namespace)?.get(key);
    if (!journal) return { maxHoldMs: 0, entries: [] };
    return { maxHoldMs: journal.maxHoldMs, entries: entriesOf(journal, storeNow) };
  }

  namespaces(): string[] {
    return [...this.#namespaces.keys()];
  }

  /** The namespace's keys with the slots that still count at `storeNow`. */
  entriesOf(namespace: string, storeNow: number): Array<{ key: string; retainMs: number; maxHoldMs: number; entries: JournalEntry[] }> {
    this.prune(storeNow);
    const out = [];
    for (const [key, journal] of this.#namespaces.get(namespace) ?? []) {
      out.push({ key, retainMs: journal.retainMs, maxHoldMs: journal.maxHoldMs, entries: entriesOf(journal, storeNow) });
    }
    return out;
  }

  /** Drops slots that no longer count anywhere (as the store's own expiry would); returns the slots left. */
  prune(storeNow: number): number {
    for (const [namespace, keys] of this.#namespaces) {
      for (const [key, journal] of keys) {
        const { retainMs, maxHoldMs, pending, scores } = journal;
        for (const [member, score] of pending) {
          if (score + retainMs + maxHoldMs <= storeNow) {
            pending.delete(member);
            this.#size -= 1;
          }
        }
        // Completions come roughly in time order: drop from the front while they no longer count.
        // One that came out of order waits behind the one before it (by at most the spread of
        // response times): kept a little longer, never dropped early.
        while (journal.head < scores.length && scores[journal.head]! + retainMs <= storeNow) {
          journal.head += 1;
          this.#size -= 1;
        }
        if (journal.head > 1_024 && journal.head * 2 > scores.length) {
          journal.members = journal.members.slice(journal.head);
          journal.scores = scores.slice(journal.head);
          journal.head = 0;
        }
        if (pending.size === 0 && journal.head === journal.scores.length) keys.delete(key);
      }
      if (keys.size === 0) this.#namespaces.delete(namespace);
    }
    return this.#size;
  }
}

/** A key's slots that still count at `storeNow`: its calls without a completion, then its completed ones. */
function entriesOf(journal: KeyJournal, storeNow: number): JournalEntry[] {
  const { retainMs, maxHoldMs, pending, members, scores } = journal;
  const entries: JournalEntry[] = [];
  for (const [member, score] of pending) {
    if (score + retainMs + maxHoldMs > storeNow) entries.push({ member, score, settled: false });
  }
  for (let i = journal.head; i < scores.length; i++) {
    if (scores[i]! + retainMs > storeNow) entries.push({ member: String(members[i]), score: scores[i]!, settled: true });
  }
  return entries;
}
