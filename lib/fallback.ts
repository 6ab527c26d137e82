import { StoreUnavailableError } from './errors.js';
import { Journal } from './journal.js';
import type { Rule } from './rules.js';
import type { InspectResult, ReserveRequest, ReserveResult, RestoredSlot, Settlement, Store } from './store.js';
import { MemoryStore } from './stores/memory-store.js';

/** After a store failure, how long calls go straight to the local fallback; also how often its slots are put back. */
export const STORE_RETRY_MS = 1_000;

/** Members of the slots booked here: never those of another store (a RedisStore's are `<n>.<tag>`, a MemoryStore's `<n>`). */
const MEMBER_PREFIX = 'local:';

/**
 * `onStoreError: 'local'` (docs/operations.md): a store of its own, beside the throttle's, that
 * decides in this process with `share` of each limit while the shared store fails, and puts those
 * calls into the shared store once it answers again, before that store decides anything new for
 * this process. A slot booked here is settled here too (its members say so): the throttle treats it
 * as any other store's.
 */
export class LocalFallback implements Store {
  readonly #namespace: string;
  readonly #store: Store;
  readonly #share: number;
  readonly #local = new MemoryStore({ now: localClock });
  /** `performance.now()` before which calls skip the failing store and decide locally. */
  #downUntil = 0;
  /**
   * The slots decided here (numbered as the local store numbers them), each with its bound until its
   * completion comes, on the local clock: put into the store once it answers, and forgotten once they
   * count nowhere.
   */
  readonly #journal = new Journal((number) => `${MEMBER_PREFIX}${number}`);
  /** Keys that took this process's recent calls in the current outage (see `decide`). */
  readonly #seeded = new Set<string>();
  #putBack: Promise<void> | undefined;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;
  readonly #lost: (error: unknown) => void;

  /** `lost`: told when the last put-back, at close, fails (those calls never count in the store). */
  constructor(namespace: string, store: Store, share: number, lost: (error: unknown) => void = () => undefined) {
    this.#namespace = namespace;
    this.#store = store;
    this.#share = share;
    this.#lost = lost;
  }

  /** The store failed just now, or did lately: decide locally. */
  get active(): boolean {
    return performance.now() < this.#downUntil;
  }

  /** Slots decided locally are waiting to be put into the store. */
  get owing(): boolean {
    return this.#journal.size > 0;
  }

  /** The store answered again. */
  recovered(): void {
    this.#downUntil = 0;
    this.#seeded.clear();
  }

  /** The store failed: the next {@link STORE_RETRY_MS} decide locally. */
  failed(): void {
    // A new outage: each key counts again what this process made through the store since the last.
    if (!this.active) this.#seeded.clear();
    this.#downUntil = performance.now() + STORE_RETRY_MS;
  }

  /** One clock: this process's. */
  readonly singleClock = true;
  readonly multiKey = true;

  /** Decides in this process with the share of each limit (of each key, for a call of several). */
  async reserve(request: ReserveRequest): Promise<ReserveResult> {
    const parts = [request, ...(request.also ?? [])].map(({ key, rules, retainMs }) => ({
      key,
      retainMs,
      rules: rules.map(({ limit, windowMs }) => ({ limit: Math.max(1, Math.floor(limit * this.#share)), windowMs })),
    }));
    const smallest = Math.min(...parts.flatMap((part) => part.rules.map((rule) => rule.limit)));
    if (request.cost > smallest) {
      throw new StoreUnavailableError(`The store is down, and cost ${request.cost} is above this process's share of the limit (${smallest})`);
    }
    const local = this.#local;
    for (const { key, retainMs } of parts) {
      if (this.#store.recentCalls === undefined || this.#seeded.has(key)) continue;
      // Taking the key over in this outage: this process's calls made through the store before it
      // failed count too. Calls an earlier outage decided here are among them (put back into the
      // store, journaled) and may count twice: more held back, never less.
      this.#seeded.add(key);
      const recent = this.#store.recentCalls(this.#namespace, key);
      if (recent.length > 0) await local.restore(this.#namespace, key, recent, retainMs);
    }
    const [first, ...also] = parts as [(typeof parts)[number], ...typeof parts];
    const result = await local.reserve({ ...request, rules: first.rules, also });
    if (result.status !== 'booked') return result;
    // The local store numbers a call's slots one after the other.
    const number = Number(result.members[0]);
    for (const { key, retainMs } of parts) this.#journal.book(request.namespace, key, number, request.cost, result.startAt + request.maxHoldMs, retainMs);
    this.#schedule();
    return { ...result, members: result.members.map((member) => `${MEMBER_PREFIX}${member}`) };
  }

  /**
   * Completions and releases of slots booked here: written in the local log (the next local
   * decisions see them), and kept for the put-back (a completed call counts until its completion;
   * one that never started, not at all).
   */
  async settle(namespace: string, key: string, settle: readonly Settlement[]): Promise<void> {
    const local: Settlement[] = [];
    const pairs: number[] = [];
    for (const { member, releaseAt } of settle) {
      if (!member.startsWith(MEMBER_PREFIX)) continue;
      const own = member.slice(MEMBER_PREFIX.length);
      local.push({ member: own, releaseAt });
      pairs.push(Number(own), releaseAt === null ? -1 : releaseAt);
    }
    this.#journal.settle(namespace, key, pairs);
    await this.#local.settle(namespace, key, local);
  }

  /** Usage as this process's share of the limits counts it here. */
  inspect(namespace: string, key: string, rules: readonly Rule[], maxHoldMs?: number): Promise<InspectResult> {
    return this.#local.inspect(namespace, key, rules, maxHoldMs);
  }

  pause(namespace: string, key: string, ms: number, maxHoldMs?: number): Promise<number> {
    return this.#local.pause(namespace, key, ms, maxHoldMs);
  }

  pausedUntil(namespace: string, key: string): number {
    return this.#local.pausedUntil(namespace, key);
  }

  restore(namespace: string, key: string, slots: readonly RestoredSlot[], retainMs: number): Promise<void> {
    return this.#local.restore(namespace, key, slots, retainMs);
  }

  /**
   * Puts the slots decided locally into the store: one that completed counts until its completion;
   * one without a completion until its bound. A slot decided while a put-back runs stays for the
   * next one; a failure leaves the rest for the next try.
   */
  putBack(): Promise<void> {
    this.#putBack ??= (async () => {
      const now = localClock();
      for (const { key, retainMs, entries } of this.#journal.entriesOf(this.#namespace, now)) {
        if (entries.length > 0) {
          const restored = entries.map(({ score }) => ({ releaseInMs: Math.ceil(score - now), cost: 1 }));
          await this.#store.restore(this.#namespace, key, restored, retainMs);
        }
        this.#journal.remove(this.#namespace, key, new Set(entries.map(({ number }) => number)));
      }
    })().finally(() => {
      this.#putBack = undefined;
    });
    return this.#putBack;
  }

  /** One last try to put the local slots into the store; no timer is left. */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    // No later try: the slots left count only locally, which closes now. Said, not thrown: close() goes on.
    if (this.owing) await this.putBack().catch(this.#lost);
    await this.#local.close();
  }

  /** While slots decided locally wait to be put into the store, tries every {@link STORE_RETRY_MS}. */
  #schedule(): void {
    if (this.#timer !== undefined || this.#closed) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      // Slots that no longer count anywhere go, so that a long outage does not grow memory.
      if (this.#journal.prune(localClock()) === 0) return;
      this.putBack().then(
        () => this.recovered(),
        () => this.#schedule(),
      );
    }, STORE_RETRY_MS);
    this.#timer.unref();
  }
}

/** The local fallback's clock: monotonic, in ms. */
export function localClock(): number {
  return performance.timeOrigin + performance.now();
}
