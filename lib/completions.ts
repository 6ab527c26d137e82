import type { Rule } from './rules.js';
import type { Settlement, Store } from './store.js';

/**
 * How long a completion or release may wait to be written with others: a tenth of the shortest
 * window, at most 20 ms. The room it frees comes a whole window after the response, so the
 * decisions it wakes still come in time; a busy key then needs about one command per call.
 */
export function coalesceMs(rules: readonly Rule[]): number {
  let shortest = Infinity;
  for (const rule of rules) shortest = Math.min(shortest, rule.windowMs);
  return Math.min(20, shortest / 10);
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
  /** Writes under way, and who waits for them to end (close). */
  #writing = 0;
  #written: Array<() => void> = [];
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
    this.#writing += 1;
    store.settle(this.#namespace, key, settle, coalesceMs).then(
      () => {
        this.#ended();
        this.#onWritten(key);
      },
      (error: unknown) => {
        this.#ended();
        this.#onFailure(error);
        if (store === this.#store && !this.#closed) this.#keep(key, settle, performance.now() + keepMs);
      },
    );
  }

  #ended(): void {
    this.#writing -= 1;
    if (this.#writing === 0) for (const resolve of this.#written.splice(0)) resolve();
  }

  /** Waits for the writes under way, then tries the unsent ones once more; no timer is left. */
  async close(): Promise<void> {
    while (this.#writing > 0) await new Promise<void>((resolve) => this.#written.push(resolve));
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
