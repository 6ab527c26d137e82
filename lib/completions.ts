import type { Rule } from './rules.js';
import type { Settlement, Store } from './store.js';

/**
 * How long a completion or release may wait to be written with others: a tenth of the shortest
 * window, at most 20 ms. The room it frees comes a whole window after the response, so the
 * decisions it wakes still come in time; a busy key then needs about one command per call.
 */
export function coalesceMs(rules: readonly Rule[]): number {
  return Math.min(20, Math.min(...rules.map((rule) => rule.windowMs)) / 10);
}

/** Keys whose unsent completions are kept at most; past it the oldest are forgotten. */
const MAX_KEYS = 10_000;

/** How often completions the store failed to take are sent again. */
export const RESEND_MS = 1_000;

/**
 * Writes completions and releases (docs/design.md, "Completions"). A completion lowers its slot's
 * release to the response time, so the room it frees is used at once; one the store failed to
 * take is sent again every {@link RESEND_MS} until taken or no longer counting (until then the slot
 * counts to its bound: safe, only less full).
 */
export class Completions {
  readonly #namespace: string;
  readonly #store: Store;
  readonly #onWritten: (key: string) => void;
  readonly #onFailure: (error: unknown) => void;
  readonly #background = new Set<Promise<void>>();
  readonly #unsent = new Map<string, { readonly store: Store; readonly until: number; readonly settle: Settlement[] }>();
  #timer: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(namespace: string, store: Store, onWritten: (key: string) => void, onFailure: (error: unknown) => void) {
    this.#namespace = namespace;
    this.#store = store;
    this.#onWritten = onWritten;
    this.#onFailure = onFailure;
  }

  /**
   * Writes in the background; `keepMs`: how long the write matters (the slot's window and bound);
   * `coalesceMs`: how long the store may hold it back to batch it with others.
   */
  write(store: Store, key: string, settle: readonly Settlement[], keepMs: number, coalesceMs: number): void {
    const done = store
      .settle(this.#namespace, key, settle, coalesceMs)
      .then(
        () => this.#onWritten(key),
        (error: unknown) => {
          this.#onFailure(error);
          if (store === this.#store && !this.#closed) this.#keep(key, settle, performance.now() + keepMs);
        },
      )
      .finally(() => this.#background.delete(done));
    this.#background.add(done);
  }

  /** Waits for the writes under way, then tries the unsent ones once more; no timer is left. */
  async close(): Promise<void> {
    while (this.#background.size > 0) await Promise.allSettled([...this.#background]);
    this.#closed = true;
    clearTimeout(this.#timer);
    await this.#resend();
    clearTimeout(this.#timer);
  }

  #keep(key: string, settle: readonly Settlement[], until: number): void {
    let entry = this.#unsent.get(key);
    if (!entry) {
      if (this.#unsent.size >= MAX_KEYS) this.#unsent.delete(this.#unsent.keys().next().value!);
      this.#unsent.set(key, (entry = { store: this.#store, until, settle: [] }));
    }
    entry.settle.push(...settle);
    if (this.#timer === undefined && !this.#closed) {
      this.#timer = setTimeout(() => {
        this.#timer = undefined;
        void this.#resend();
      }, RESEND_MS);
      this.#timer.unref();
    }
  }

  async #resend(): Promise<void> {
    const entries = [...this.#unsent];
    this.#unsent.clear();
    await Promise.all(
      entries.map(async ([key, { until, settle }]) => {
        if (performance.now() > until) return;
        try {
          await this.#store.settle(this.#namespace, key, settle);
          this.#onWritten(key);
        } catch {
          if (!this.#closed) this.#keep(key, settle, until);
        }
      }),
    );
  }
}
