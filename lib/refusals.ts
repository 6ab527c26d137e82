import { RateLimitedError } from './errors.js';
import type { Rule } from './rules.js';

/** Keys remembered at most; past it the oldest are forgotten. */
const MAX_KEYS = 10_000;

/**
 * Keys the store refused lately: no slot for a call of `cost` or more before `until`
 * (`performance.now()`). A call that cannot wait that long is refused here without a round trip
 * (a saturated key in `throw` mode costs Redis nothing); a completion or release this process
 * writes for the key forgets it, since room may have freed.
 */
export class Refusals {
  /** Per line (an encoded key, or the keys of a call of several joined by spaces). */
  readonly #keys = new Map<string, { readonly until: number; readonly cost: number; readonly reason: Rule | 'paused' | 'booked'; readonly key: string }>();
  /** Lines of several keys remembered, at most (forgetting a key then looks through them). */
  #several = 0;

  /** Throws `RateLimitedError` when a call of `cost` on the line cannot start within `withinMs`. */
  check(encoded: string, cost: number, withinMs: number): void {
    const known = this.#keys.get(encoded);
    if (!known) return;
    const leftMs = Math.ceil(known.until - performance.now());
    if (leftMs <= 0) this.#keys.delete(encoded);
    else if (cost >= known.cost && leftMs > withinMs) throw new RateLimitedError(known.key, known.reason, leftMs);
  }

  /** `key`: the user key the refusal names (the one whose rule binds). */
  remember(encoded: string, cost: number, until: number, reason: Rule | 'paused' | 'booked', key: string): void {
    const known = this.#keys.get(encoded);
    if (known && known.cost <= cost && known.until >= until) return;
    this.#keys.delete(encoded);
    if (this.#keys.size >= MAX_KEYS) this.#keys.delete(this.#keys.keys().next().value!);
    this.#keys.set(encoded, { until, cost, reason, key });
    if (encoded.includes(' ')) this.#several++;
  }

  /** A completion or release on the (encoded) key: its refusals, and those of calls of several keys that hold it, go. */
  forget(encoded: string): void {
    this.#keys.delete(encoded);
    if (this.#several === 0) return;
    for (const line of this.#keys.keys()) {
      if (line.includes(' ') && line.split(' ').includes(encoded)) this.#keys.delete(line);
    }
    this.#several = 0;
    for (const line of this.#keys.keys()) if (line.includes(' ')) this.#several++;
  }
}
