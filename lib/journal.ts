import { CODES } from './stores/redis-scripts.js';

/*
 * The journal (docs/design.md §9): what this process booked in a shared store and still counts
 * there, slot by slot, until each falls out of every window. The store writes it with each booking
 * and completion; recovery puts it back into a store that lost its data, the heartbeat and each
 * decision check a key against its newest slot (the witness), the local fallback counts it
 * (`recentCalls`), and a closing throttle shortens the keys' lives to it (`tidy`).
 */

/**
 * This process's newest slot on a key, and until when the key must hold it (store clock, ms): a
 * decision checks it before it relies on the key (lua/includes/check.lua).
 */
export interface Witness {
  readonly number: number;
  /** Its score as this process wrote it (a fold may have moved it into buckets once past it). */
  readonly score: number;
  /** Until then the slot counts: no trim removes it before. */
  readonly keyUntil: number;
}

/**
 * This process's newest slot on a key, and until when the key must hold it (store clock, ms): a
 * decision checks it before it relies on the key (lua/includes/check.lua), with the life this process
 * believes the key's log has.
 */
export interface KeyWitness extends Witness {
  /** The life this process last gave the log (store clock ms), 0 when unknown: valid while the witness is there. */
  readonly deadline: number;
}

/** A witness's times are this much earlier than the slot's own (rounding of the scores written). */
const WITNESS_MARGIN_MS = 5;

/** One of this process's slots, as the store should hold it. */
export interface JournalEntry {
  readonly number: number;
  readonly member: string;
  /** Store clock, ms: the slot's release, its completion once known, else its bound (start + maxHoldMs). */
  readonly score: number;
}

interface KeyJournal {
  retainMs: number;
  /** `Date.now()` of the key's last check (a decision's or the heartbeat's). */
  checkedAt: number;
  /** `Date.now()` when this process last put back its calls on the key (a check failed). */
  restoredAt: number;
  /** Calls without a completion yet: slot number → bound. Few: the calls in flight or booked ahead. */
  readonly pending: Pending;
  /** The highest number in `pending` (numbers only grow), or -1 when it must be found again. */
  newest: number;
  /** The highest number among completed calls, and its completion. */
  newestDone: number;
  newestDoneScore: number;
  /**
   * The life this process last gave the key's log (store clock ms), and the number of the booking
   * that did: the log lives at least that long while a witness of that number or later is there
   * (lua/includes/decide.lua, vt_key_close).
   */
  deadline: number;
  deadlineNumber: number;
  /**
   * Completed calls, in the order their completions came: slot numbers and completion times as
   * two packed arrays of numbers (16 bytes a call, where a Map entry costs about 100), since a key
   * of a long window keeps many. Entries before `head` were pruned.
   */
  members: number[];
  scores: number[];
  head: number;
  /**
   * The pointer keys this process's claims set on the key (lua/claim.lua: a reservation's mark, and
   * where each reserved slot went), with their member and until when they live (store clock ms):
   * put back with the calls, so that a token claimed before a loss is not claimed again after it.
   */
  claims?: Array<{ readonly pointer: string; readonly member: string; readonly until: number }>;
}

/**
 * What this process booked in a shared store and still counts there: for each key, its slots until
 * they fall out of every window. Kept so that a store that lost its data can be given back this
 * process's share of it (`RedisStore` recovery). Memory follows the calls still inside their
 * windows; `prune` drops the rest. Slots are numbered by the store; `member(n)` names them.
 */
export class Journal {
  readonly #namespaces = new Map<string, Map<string, KeyJournal>>();
  readonly #member: (number: number) => string;
  /**
   * Slots numbered from here are a reservation's that this process started at once as its own call
   * (`ReserveRequest.own`): put back like any, but never a key's witness, which is the slot booked
   * last, told by its number (the store numbers its reservations in a range of their own).
   */
  readonly #witnessBelow: number;
  #size = 0;

  constructor(member: (number: number) => string, witnessBelow = Infinity) {
    this.#member = member;
    this.#witnessBelow = witnessBelow;
  }

  /** Slots held, until `prune` drops those that no longer count. */
  get size(): number {
    return this.#size;
  }

  /** Slots booked: numbers `first` .. `first + count - 1`, each with its bound. */
  book(namespace: string, key: string, first: number, count: number, bound: number, retainMs: number): void {
    // What the booking's script did to the log's life, or less (lua/includes/decide.lua, vt_key_close).
    const journal = this.#open(namespace, key, retainMs);
    for (let number = first; number < first + count; number++) {
      if (journal.pending.set(number, bound)) this.#size += 1;
    }
    if (first >= this.#witnessBelow) return;
    if (journal.newest >= 0) journal.newest = Math.max(journal.newest, first + count - 1);
    const need = bound + retainMs;
    if (need > journal.deadline) {
      journal.deadline = need + expirySlack(retainMs);
      journal.deadlineNumber = first;
    }
  }

  /** A claim's pointer keys on the key, `[pointer, member]`, each living until `until` (store clock ms); the key's slots are booked separately. */
  claimed(namespace: string, key: string, pointers: ReadonlyArray<readonly [string, string]>, until: number, retainMs: number): void {
    const journal = this.#open(namespace, key, retainMs);
    journal.claims ??= [];
    for (const [pointer, member] of pointers) journal.claims.push({ pointer, member, until });
  }

  /** The key's data was lost, or this process put back its calls there: what it believed of the log's life no longer holds. */
  #forget(journal: KeyJournal): void {
    journal.deadline = 0;
  }

  /**
   * Calls put into the store for this process (`restore`: calls decided locally while it was down),
   * so that they are put back too if the store later loses its data.
   */
  restored(namespace: string, key: string, entries: ReadonlyArray<{ number: number; score: number }>, retainMs: number): void {
    if (entries.length === 0) return;
    const journal = this.#open(namespace, key, retainMs);
    for (const { number, score } of entries) this.#complete(journal, number, score);
  }

  /** Completions and releases, as sent to the store: NUMBER, RELEASE_AT pairs (RELEASE_AT -1: given back, never started). */
  settle(namespace: string, key: string, pairs: readonly number[]): void {
    const journal = this.#namespaces.get(namespace)?.get(key);
    if (!journal) return;
    for (let i = 0; i < pairs.length; i += 2) {
      const number = pairs[i]!;
      const bound = journal.pending.take(number);
      // Only a call without a completion is settled; a completion sent again is already here.
      if (bound === undefined) continue;
      this.#size -= 1;
      const releaseAt = pairs[i + 1]!;
      if (releaseAt >= 0) this.#complete(journal, number, Math.min(bound, releaseAt));
    }
  }

  #complete(journal: KeyJournal, number: number, score: number): void {
    if (number > journal.newestDone && number < this.#witnessBelow) {
      journal.newestDone = number;
      journal.newestDoneScore = score;
    }
    journal.members.push(number);
    journal.scores.push(score);
    this.#size += 1;
  }

  #open(namespace: string, key: string, retainMs: number): KeyJournal {
    let keys = this.#namespaces.get(namespace);
    if (!keys) this.#namespaces.set(namespace, (keys = new Map()));
    let journal = keys.get(key);
    if (!journal) {
      journal = {
        retainMs,
        checkedAt: 0,
        restoredAt: 0,
        pending: new Pending(),
        newest: -1,
        newestDone: -1,
        newestDoneScore: 0,
        deadline: 0,
        deadlineNumber: 0,
        members: [],
        scores: [],
        head: 0,
      };
      keys.set(key, journal);
    }
    journal.retainMs = Math.max(journal.retainMs, retainMs);
    return journal;
  }

  /** The key's slots that still count at `storeNow` (as `prune` would keep them). */
  keyEntries(namespace: string, key: string, storeNow: number): JournalEntry[] {
    const journal = this.#namespaces.get(namespace)?.get(key);
    return journal ? this.#entriesOf(journal, storeNow) : [];
  }

  /**
   * The newest of this process's slots on the key (the one booked last, whether its call completed
   * or not) that still counts at `storeNow`, or undefined when none does: a key this process holds
   * nothing on needs no check. Its `deadline` is what this process believes of the log's life, 0
   * when the belief does not rest on this witness. Marks the key checked at `checkedAt`. With
   * `into`, the witness is written there (valid until the next call that writes it).
   */
  witness(namespace: string, key: string, storeNow: number, checkedAt = Date.now(), into?: Mutable<KeyWitness>): KeyWitness | undefined {
    const journal = this.#namespaces.get(namespace)?.get(key);
    if (!journal) return undefined;
    journal.checkedAt = checkedAt;
    const { retainMs, pending } = journal;
    let number = -1;
    let score = 0;
    if (pending.size > 0) {
      if (!pending.has(journal.newest)) journal.newest = pending.max(this.#witnessBelow);
      if (journal.newest >= 0) {
        number = journal.newest;
        score = pending.get(number)!;
      }
    }
    if (journal.newestDone > number && journal.newestDoneScore + retainMs - WITNESS_MARGIN_MS > storeNow) {
      number = journal.newestDone;
      score = journal.newestDoneScore;
    }
    if (number < 0 || score + retainMs - WITNESS_MARGIN_MS <= storeNow) return undefined;
    const deadline = number >= journal.deadlineNumber ? journal.deadline : 0;
    const keyUntil = score + retainMs - WITNESS_MARGIN_MS;
    if (into === undefined) return { number, score, keyUntil, deadline };
    into.number = number;
    into.score = score;
    into.keyUntil = keyUntil;
    into.deadline = deadline;
    return into;
  }

  /**
   * Whether this process should put back its calls on the key now (a check failed): not when it
   * did within `withinMs` (checks failing while the key is held find the same loss).
   */
  restoreDue(namespace: string, key: string, withinMs: number, now = Date.now()): boolean {
    const journal = this.#namespaces.get(namespace)?.get(key);
    return journal !== undefined && now - journal.restoredAt >= withinMs;
  }

  /** This process put back its calls on the key at `now`. */
  restoredNow(namespace: string, key: string, now = Date.now()): void {
    const journal = this.#namespaces.get(namespace)?.get(key);
    if (!journal) return;
    journal.restoredAt = now;
    this.#forget(journal);
  }

  /**
   * The namespace's logs (or the key's) lost their data, or had their lives shortened: what this
   * process believed of those lives no longer holds.
   */
  forgetLives(namespace: string, key?: string): void {
    const keys = this.#namespaces.get(namespace);
    if (key !== undefined) {
      const journal = keys?.get(key);
      if (journal) this.#forget(journal);
      return;
    }
    for (const journal of keys?.values() ?? []) this.#forget(journal);
  }

  /** The namespace's keys not checked since `before` (`Date.now()` ms). */
  unchecked(namespace: string, before: number): string[] {
    const out: string[] = [];
    // forEach: an iterator of entries makes an array per key (every key, every heartbeat).
    this.#namespaces.get(namespace)?.forEach((journal, key) => {
      if (journal.checkedAt < before) out.push(key);
    });
    return out;
  }

  namespaces(): string[] {
    return [...this.#namespaces.keys()];
  }

  /** One key of the namespace, if it has any. */
  anyKey(namespace: string): string | undefined {
    for (const key of this.#namespaces.get(namespace)?.keys() ?? []) return key;
    return undefined;
  }

  /**
   * The namespace's keys (or those of `only`) with the slots that still count at `storeNow`, and the
   * pointer keys of its claims still alive: `[pointer, member, ms left]`.
   */
  entriesOf(
    namespace: string,
    storeNow: number,
    only?: readonly string[],
  ): Array<{ key: string; retainMs: number; entries: JournalEntry[]; pointers: Array<[string, string, number]> }> {
    this.prune(storeNow);
    const out = [];
    const keys = this.#namespaces.get(namespace);
    for (const key of only ?? keys?.keys() ?? []) {
      const journal = keys?.get(key);
      if (!journal) continue;
      const pointers = (journal.claims ?? []).map(({ pointer, member, until }): [string, string, number] => [pointer, member, Math.ceil(until - storeNow)]);
      out.push({ key, retainMs: journal.retainMs, entries: this.#entriesOf(journal, storeNow), pointers });
    }
    return out;
  }

  /** A key's slots that still count at `storeNow`: its calls without a completion, then its completed ones. */
  #entriesOf(journal: KeyJournal, storeNow: number): JournalEntry[] {
    const { retainMs, pending, members, scores } = journal;
    const entries: JournalEntry[] = [];
    pending.forEach((number, score) => {
      if (score + retainMs > storeNow) entries.push({ number, member: this.#member(number), score });
    });
    for (let i = journal.head; i < scores.length; i++) {
      if (scores[i]! + retainMs > storeNow) entries.push({ number: members[i]!, member: this.#member(members[i]!), score: scores[i]! });
    }
    return entries;
  }

  /** Takes the key's slots `numbers` out (another store holds them from now on: the local fallback's put-back). */
  remove(namespace: string, key: string, numbers: ReadonlySet<number>): void {
    const keys = this.#namespaces.get(namespace);
    const journal = keys?.get(key);
    if (journal === undefined) return;
    for (const number of numbers) if (journal.pending.take(number) !== undefined) this.#size -= 1;
    const { members, scores, head } = journal;
    let kept = head;
    for (let i = head; i < scores.length; i++) {
      if (numbers.has(members[i]!)) {
        this.#size -= 1;
        continue;
      }
      members[kept] = members[i]!;
      scores[kept] = scores[i]!;
      kept += 1;
    }
    members.length = scores.length = kept;
    if (journal.pending.size === 0 && kept === head && journal.claims === undefined) keys!.delete(key);
    if (keys!.size === 0) this.#namespaces.delete(namespace);
  }

  /**
   * Drops slots that no longer count anywhere (as the store's own expiry would), and claims' pointer
   * keys past their life; returns what is left of both (the heartbeat beats while anything is).
   */
  prune(storeNow: number): number {
    let claims = 0;
    // forEach: an iterator of entries makes an array per key (every key, every heartbeat).
    this.#namespaces.forEach((keys, namespace) => {
      keys.forEach((journal, key) => {
        const { retainMs, pending, scores } = journal;
        this.#size -= pending.dropExpired(storeNow, retainMs);
        // Completions come roughly in time order: drop from the front while they no longer count.
        // One that came out of order waits behind the one before it (by at most the spread of
        // response times): kept a little longer, never dropped early.
        while (journal.head < scores.length && scores[journal.head]! + retainMs <= storeNow) {
          journal.head += 1;
          this.#size -= 1;
        }
        if (journal.head > 32 && journal.head * 2 > scores.length) {
          journal.members = journal.members.slice(journal.head);
          journal.scores = scores.slice(journal.head);
          journal.head = 0;
        }
        if (journal.claims !== undefined) {
          journal.claims = journal.claims.filter(({ until }) => until > storeNow);
          if (journal.claims.length === 0) journal.claims = undefined;
          else claims += journal.claims.length;
        }
        if (pending.size === 0 && journal.head === journal.scores.length && journal.claims === undefined) keys.delete(key);
      });
      if (keys.size === 0) this.#namespaces.delete(namespace);
    });
    return this.#size + claims;
  }
}

/**
 * A key's calls without a completion: slot number → bound, in booking order, as two arrays whose
 * room is reused (a Map whose entries come and go allocates a new table each time it fills or
 * empties: once a call). Slots of one key are numbered in the order they are booked, and complete
 * roughly in that order: a new number is appended, a completion is found from the oldest.
 */
class Pending {
  #numbers: number[] = [];
  #bounds: number[] = [];
  /** Live entries are in [#head, #end), numbers -1 there are gone. */
  #head = 0;
  #end = 0;
  /** No number above this is here. */
  #top = -1;
  size = 0;

  #indexOf(number: number): number {
    if (number > this.#top || number < 0) return -1;
    for (let i = this.#head; i < this.#end; i++) if (this.#numbers[i] === number) return i;
    return -1;
  }

  has(number: number): boolean {
    return this.#indexOf(number) >= 0;
  }

  /** Sets the number's bound; true when it was not here. */
  set(number: number, bound: number): boolean {
    const at = this.#indexOf(number);
    if (at >= 0) {
      this.#bounds[at] = bound;
      return false;
    }
    this.#compact();
    const end = this.#end++;
    if (end < this.#numbers.length) {
      this.#numbers[end] = number;
      this.#bounds[end] = bound;
    } else {
      this.#numbers.push(number);
      this.#bounds.push(bound);
    }
    this.#top = Math.max(this.#top, number);
    this.size += 1;
    return true;
  }

  get(number: number): number | undefined {
    const at = this.#indexOf(number);
    return at < 0 ? undefined : this.#bounds[at];
  }

  /** Removes the number; its bound, or undefined when it was not here. */
  take(number: number): number | undefined {
    const at = this.#indexOf(number);
    if (at < 0) return undefined;
    const bound = this.#bounds[at]!;
    this.#remove(at);
    return bound;
  }

  /** The highest number here below `below` (-1 when none). */
  max(below: number): number {
    let max = -1;
    for (let i = this.#head; i < this.#end; i++) if (this.#numbers[i]! < below) max = Math.max(max, this.#numbers[i]!);
    return max;
  }

  forEach(visit: (number: number, bound: number) => void): void {
    for (let i = this.#head; i < this.#end; i++) if (this.#numbers[i]! >= 0) visit(this.#numbers[i]!, this.#bounds[i]!);
  }

  /** Removes the numbers that no longer count at `storeNow` (bound + `retainMs` past); returns how many. */
  dropExpired(storeNow: number, retainMs: number): number {
    let dropped = 0;
    for (let i = this.#head; i < this.#end; i++) {
      if (this.#numbers[i]! >= 0 && this.#bounds[i]! + retainMs <= storeNow) {
        this.#remove(i);
        dropped += 1;
      }
    }
    return dropped;
  }

  #remove(at: number): void {
    this.#numbers[at] = -1;
    this.size -= 1;
    if (this.size === 0) {
      this.#head = this.#end = 0;
      this.#top = -1;
      return;
    }
    while (this.#numbers[this.#head] === -1) this.#head += 1;
    while (this.#numbers[this.#end - 1] === -1) this.#end -= 1;
  }

  /** Moves the live entries to the front once the gone ones before them outnumber them. */
  #compact(): void {
    const head = this.#head;
    if (head < 32 || head * 2 < this.#end) return;
    for (let i = head; i < this.#end; i++) {
      this.#numbers[i - head] = this.#numbers[i]!;
      this.#bounds[i - head] = this.#bounds[i]!;
    }
    this.#end -= head;
    this.#head = 0;
  }
}

/** The checks of a batch's keys (lua/includes/check.lua): each key's witness, valid until the next call. */
export interface Checks {
  witness(key: string): KeyWitness | undefined;
}

/** A witness written in place (`Journal.witness`'s `into`). */
export type Mutable<T> = { -readonly [K in keyof T]: T[K] };

/** A witness to write in place. */
export function blankWitness(): Mutable<KeyWitness> {
  return { number: 0, score: 0, keyUntil: 0, deadline: 0 };
}

/** The slack a log's life gets beyond its latest booking's need, as lua/includes/decide.lua gives it. */
function expirySlack(retainMs: number): number {
  return Math.min(Math.max(retainMs, CODES.expiry.slackMinMs), CODES.expiry.slackMaxMs);
}
